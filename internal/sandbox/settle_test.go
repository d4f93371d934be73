package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
)

// A restart that finds a sandbox frozen mid-checkpoint (the daemon was
// killed while CRIU dumped it) must not wait for it: Start returns at
// once, calls about that sandbox answer 503 with Retry-After until it is
// settled, everything else is served, and once the leftover work is done
// the sandbox is thawed, adopted and answers, its reason saying why it
// was thawed.
func TestStartDoesNotWaitForAFrozenSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	frozen := e.seed(&store.Sandbox{ID: "sbx_frozen", Name: "frozen", State: api.StateRunning}, true)
	other := e.seed(&store.Sandbox{ID: "sbx_other", State: api.StateRunning}, true)
	if err := e.rt.Freeze(e.ctx, frozen.ID); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	e.rt.set(func(r *fakeRuntime) {
		r.recoverHook = func(ctx context.Context, id string) {
			if id == frozen.ID {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
		}
	})
	if err := e.m.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.started = true
	// Other sandboxes settle; the frozen one is held in its recovery.
	e.eventually("the other sandbox is settled", func() bool { return e.m.settlingErr(other.ID) == nil })
	for what, call := range map[string]func() error{
		"get":        func() error { _, err := e.m.Get(e.ctx, frozen.Name); return err },
		"exec":       func() error { _, err := e.exec(frozen.ID); return err },
		"suspend":    func() error { _, err := e.m.Suspend(e.ctx, frozen.ID, ""); return err },
		"checkpoint": func() error { _, err := e.m.Checkpoint(e.ctx, frozen.ID, &api.CheckpointRequest{}); return err },
		"delete":     func() error { _, err := e.m.Delete(e.ctx, frozen.ID); return err },
	} {
		err := call()
		if !errors.Is(err, errdefs.ErrUnavailable) || errdefs.RetryAfterOf(err) <= 0 {
			t.Errorf("%s of a sandbox being settled: %v (retry after %s); want unavailable with a Retry-After", what, err, errdefs.RetryAfterOf(err))
		}
	}
	if _, err := e.exec(other.ID); err != nil {
		t.Errorf("exec in a settled sandbox while another settles: %v", err)
	}
	if _, err := e.m.Create(e.ctx, &api.CreateSandboxRequest{Name: "new"}); err != nil {
		t.Errorf("create while a sandbox settles: %v", err)
	}
	if list, err := e.m.List(e.ctx, store.ListFilter{}); err != nil || len(list) != 3 {
		t.Errorf("list while a sandbox settles: %d sandboxes, %v; want 3", len(list), err)
	}
	select {
	case <-e.m.Settled():
		t.Fatal("settled while a sandbox was still held")
	default:
	}
	close(release)
	e.waitSettled()
	sb := e.row(frozen.ID)
	if sb.State != api.StateRunning || !strings.Contains(sb.StateReason, "thawed") {
		t.Fatalf("after the restart: %s (%s); want running, thawed", sb.State, sb.StateReason)
	}
	if e.rt.isFrozen(frozen.ID) {
		t.Fatal("still frozen")
	}
	if _, err := e.exec(frozen.Name); err != nil {
		t.Fatalf("exec after the thaw: %v", err)
	}
}

// An adopted sandbox whose agent never answers (frozen by something that
// does not let go) becomes error within the agent wait, its processes
// freed; the start itself never waited for it.
func TestStartGivesUpOnASilentAgent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.m.agentWait = 300 * time.Millisecond
	stuck := e.seed(&store.Sandbox{ID: "sbx_stuck", State: api.StateRunning}, true)
	suspending := e.seed(&store.Sandbox{ID: "sbx_stuck_susp", State: api.StateSuspending}, true)
	img := e.seedSuspendImage(suspending.ID)
	if _, err := e.st.Update(e.ctx, suspending.ID, func(s *store.Sandbox) error { s.SuspendImage = img; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{stuck.ID, suspending.ID} {
		if err := e.rt.Freeze(e.ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	e.rt.set(func(r *fakeRuntime) { r.stuck = map[string]bool{stuck.ID: true, suspending.ID: true} })
	e.start()
	sb := e.row(stuck.ID)
	if sb.State != api.StateError || !strings.Contains(sb.StateReason, "stopped answering") {
		t.Fatalf("silent agent: %s (%s); want error", sb.State, sb.StateReason)
	}
	if e.rt.alive(stuck.ID) || e.rt.destroyCount(stuck.ID) == 0 {
		t.Fatal("the silent sandbox's processes were not freed")
	}
	// Mid-suspend with an image: freed, suspended on that image.
	if sb := e.row(suspending.ID); sb.State != api.StateSuspended || sb.SuspendImage != img {
		t.Fatalf("silent agent mid-suspend: %s image %q (%s); want suspended on %s", sb.State, sb.SuspendImage, sb.StateReason, img)
	}
	if n := e.rt.leftoverChecks; n != 1 {
		t.Fatalf("leftover CRIU checked %d times; want once, before any thaw", n)
	}
}

// A daemon stopping while it settles leaves what it had not settled as it
// was, for the next start: a sandbox is never marked error because its
// own daemon gave up waiting to stop.
func TestCloseWhileSettlingKeepsSandboxes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	sb := e.seed(&store.Sandbox{ID: "sbx_held", State: api.StateRunning}, true)
	reached := make(chan struct{})
	e.rt.set(func(r *fakeRuntime) {
		r.recoverHook = func(ctx context.Context, id string) {
			close(reached)
			<-ctx.Done()
		}
		r.stuck = map[string]bool{sb.ID: true}
		r.frozen[sb.ID] = true
	})
	if err := e.m.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	<-reached
	e.m.Close()
	if got := e.row(sb.ID); got.State != api.StateRunning {
		t.Fatalf("after a stop mid-settle: %s (%s); want running, for the next start", got.State, got.StateReason)
	}
	if !e.rt.alive(sb.ID) {
		t.Fatal("its processes were freed")
	}
}

// A fork cut short by a crash (its mark still there) is undone at the
// next start: its branches ended, its snapshot deleted, its mark cleared;
// a user's snapshot of the same sandbox is kept.
func TestStartCollectsForksCutShort(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	src := e.seed(&store.Sandbox{ID: "sbx_src", State: api.StateRunning}, true)
	forkSnap := e.seedSuspendImage(src.ID) // any committed snapshot will do
	kept := e.seedSuspendImage(src.ID)
	for _, id := range []string{forkSnap, kept} {
		if err := e.st.DeleteSnapshot(e.ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := e.st.CreateSnapshot(e.ctx, &store.Snapshot{ID: id, Type: api.SnapshotMemory, SandboxID: src.ID, Image: "python",
			Checksum: "x", CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.snaps.MarkIntent(forkIntent, forkSnap); err != nil {
		t.Fatal(err)
	}
	running := e.seed(&store.Sandbox{ID: "sbx_branch1", State: api.StateRunning, SnapshotID: forkSnap}, true)
	creating := e.seed(&store.Sandbox{ID: "sbx_branch2", State: api.StateCreating, SnapshotID: forkSnap}, false)
	restored := e.seed(&store.Sandbox{ID: "sbx_restored", State: api.StateRunning, SnapshotID: kept}, true)
	e.start()
	for _, id := range []string{running.ID, creating.ID} {
		if sb := e.row(id); sb.State != api.StateTerminated || !strings.Contains(sb.StateReason, "fork") {
			t.Errorf("branch %s of a fork cut short: %s (%s); want terminated", id, sb.State, sb.StateReason)
		}
	}
	if rec, files := e.snapshotExists(forkSnap); rec || files {
		t.Errorf("the fork's snapshot: record %v, files %v; want neither", rec, files)
	}
	if rec, files := e.snapshotExists(kept); !rec || !files {
		t.Errorf("another snapshot: record %v, files %v; want both", rec, files)
	}
	if sb := e.row(restored.ID); sb.State != api.StateRunning {
		t.Errorf("a sandbox restored from another snapshot: %s", sb.State)
	}
	if ids, _ := e.snaps.Intents(forkIntent); len(ids) != 0 {
		t.Errorf("marks left: %v", ids)
	}
}

// A fork that answers, successfully or not, leaves no mark behind.
func TestForkClearsItsMark(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	src := e.create(&api.CreateSandboxRequest{Name: "src"})
	if _, err := e.m.Fork(e.ctx, src.ID, &api.ForkRequest{Count: 2}); err != nil {
		t.Fatal(err)
	}
	e.rt.set(func(r *fakeRuntime) { r.restoreHook = func(runtime.Spec) error { return errors.New("boom") } })
	if _, err := e.m.Fork(e.ctx, src.ID, &api.ForkRequest{Count: 2}); err == nil {
		t.Fatal("a fork whose branches cannot start succeeded")
	}
	if ids, _ := e.snaps.Intents(forkIntent); len(ids) != 0 {
		t.Fatalf("marks left: %v", ids)
	}
}

// logRecorder keeps the records a Manager logs.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// find returns the level of the first record with message msg.
func (h *logRecorder) find(msg string) (slog.Level, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message == msg {
			return r.Level, true
		}
	}
	return 0, false
}

// An idle suspend that a client's delete cancels is an expected race: it
// is logged at info, not as an error, and not retried.
func TestIdleSuspendGivingWayToADeleteIsNoError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	logs := &logRecorder{}
	e.m.log = slog.New(logs)
	e.start()
	timeout := int64(1)
	sb := e.create(&api.CreateSandboxRequest{Name: "idle", TimeoutSecs: &timeout})
	started := make(chan struct{})
	var once sync.Once
	e.rt.set(func(r *fakeRuntime) {
		r.checkpointHook = func(ctx context.Context) error {
			once.Do(func() { close(started) })
			<-ctx.Done()
			return context.Cause(ctx)
		}
	})
	e.clock.advance(time.Minute)
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("no idle suspend began")
	}
	if _, err := e.m.Delete(e.ctx, sb.ID); err != nil {
		t.Fatalf("delete during an idle suspend: %v", err)
	}
	e.eventually("the idle suspend's end is logged", func() bool {
		_, ok := logs.find("idle suspend gave way to a delete")
		return ok
	})
	if lvl, _ := logs.find("idle suspend gave way to a delete"); lvl != slog.LevelInfo {
		t.Errorf("logged at %s; want info", lvl)
	}
	if lvl, ok := logs.find("suspend idle sandbox"); ok {
		t.Errorf("an idle suspend that gave way to a delete was also logged as a failure (%s)", lvl)
	}
	if got := e.row(sb.ID); got.State != api.StateTerminated {
		t.Errorf("after the delete: %s", got.State)
	}
}
