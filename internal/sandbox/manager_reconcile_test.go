package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// Start settles every record a previous daemon left with what the host
// has: it adopts what still runs and answers, marks the rest error (or,
// mid-suspend or resume, suspended or running again) and frees it, and
// removes what no record owns.
func TestStartReconciles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{node: "a"})
	seed := func(id string, state api.SandboxState, live bool) *store.Sandbox {
		return e.seed(&store.Sandbox{ID: id, State: state}, live)
	}
	alive := seed("sbx_alive", api.StateRunning, true)
	gone := seed("sbx_gone", api.StateRunning, false)
	// A record whose processes died: its runtime record names a PID the
	// runtime no longer has.
	if _, err := e.st.Update(e.ctx, gone.ID, func(s *store.Sandbox) error {
		s.Runtime = runtime.MarshalInfo(&runtime.Info{Dir: "/nowhere", PID: 4242})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mute := seed("sbx_mute", api.StateRunning, true)
	e.rt.killAgent(mute.ID)
	creating := seed("sbx_creating", api.StateCreating, false)
	errored := seed("sbx_errored", api.StateError, true)
	suspLive := seed("sbx_susp_live", api.StateSuspending, true)
	suspImaged := seed("sbx_susp_imaged", api.StateSuspending, false)
	newImage := e.seedSuspendImage(suspImaged.ID)
	suspBare := seed("sbx_susp_bare", api.StateSuspending, false)
	resuming := e.seed(&store.Sandbox{ID: "sbx_resuming", State: api.StateResuming, SuspendImage: e.seedSuspendImage("sbx_resuming")}, true)
	suspended := seed("sbx_suspended", api.StateSuspended, false)
	lostBack := seed("sbx_lost_back", api.StateLost, true)
	lostGone := seed("sbx_lost_gone", api.StateLost, false)
	done := seed("sbx_done", api.StateTerminated, false)
	other := e.seed(&store.Sandbox{ID: "sbx_other", State: api.StateRunning, Node: "b"}, false)
	e.rt.set(func(r *fakeRuntime) {
		r.dirs[done.ID] = true      // a terminated sandbox's leftovers
		r.dirs["sbx_orphan"] = true // a directory no record owns
		r.dirs[suspended.ID] = true
	})
	// Snapshot files whose record was never written.
	p, err := e.snaps.Begin("snap_unrecorded")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.Dir(), fsArchive), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Commit(); err != nil {
		t.Fatal(err)
	}

	e.start()

	want := map[string]struct {
		state  api.SandboxState
		reason string
	}{
		alive.ID:      {api.StateRunning, ""},
		gone.ID:       {api.StateError, "sandbox processes were lost while the daemon was down"},
		mute.ID:       {api.StateError, "sandbox agent stopped answering while the daemon was down"},
		creating.ID:   {api.StateError, "daemon stopped while the sandbox was creating"},
		errored.ID:    {api.StateError, ""},
		suspLive.ID:   {api.StateRunning, "daemon restarted during a suspend; still running"},
		suspImaged.ID: {api.StateSuspended, "daemon restarted during a suspend"},
		suspBare.ID:   {api.StateError, "daemon stopped during a suspend, before its image was saved"},
		resuming.ID:   {api.StateSuspended, "daemon restarted during a resume"},
		suspended.ID:  {api.StateSuspended, ""},
		lostBack.ID:   {api.StateRunning, "its node answers again and its processes survived"},
		lostGone.ID:   {api.StateLost, ""},
		done.ID:       {api.StateTerminated, ""},
		other.ID:      {api.StateRunning, ""},
	}
	for id, w := range want {
		sb := e.row(id)
		if sb.State != w.state || !strings.HasPrefix(sb.StateReason, w.reason) {
			t.Errorf("%s: %s (%s); want %s (%s…)", id, sb.State, sb.StateReason, w.state, w.reason)
		}
	}
	// What runs is what the Manager tracks, and answers.
	for _, id := range []string{alive.ID, suspLive.ID, lostBack.ID} {
		if !e.rt.alive(id) || e.m.findLive(id) == nil {
			t.Errorf("%s: alive %v, tracked %v", id, e.rt.alive(id), e.m.findLive(id) != nil)
		}
		if _, err := e.exec(id); err != nil {
			t.Errorf("exec in %s: %v", id, err)
		}
	}
	if n := e.m.LiveCount(); n != 3 {
		t.Errorf("%d live; want 3", n)
	}
	// Everything else of this node's is freed; another node's is not touched.
	for _, id := range []string{mute.ID, errored.ID, suspBare.ID, resuming.ID, suspended.ID, lostGone.ID, done.ID, "sbx_orphan"} {
		if e.rt.alive(id) || e.rt.destroyCount(id) == 0 {
			t.Errorf("%s: alive %v after %d destroys", id, e.rt.alive(id), e.rt.destroyCount(id))
		}
	}
	if n := e.rt.destroyCount(other.ID); n != 0 {
		t.Errorf("another node's sandbox destroyed %d times", n)
	}
	if e.row(suspImaged.ID).SuspendImage != newImage {
		t.Errorf("mid-suspend sandbox with a saved image: image %q, want %q", e.row(suspImaged.ID).SuspendImage, newImage)
	}
	if rec, files := e.snapshotExists("snap_unrecorded"); rec || files {
		t.Errorf("unrecorded snapshot files kept")
	}
	// A resumed sandbox of those reconciled suspended comes back.
	if _, err := e.m.Resume(e.ctx, resuming.ID); err != nil {
		t.Errorf("resume after reconcile: %v", err)
	}
}

// Start brings back the pools: their records, and as ready sandboxes those
// still running; the rest is refilled.
func TestStartLoadsPools(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	if err := e.st.CreatePool(e.ctx, &store.Pool{Tenant: tenant.Default, Name: "p", Image: "python", Size: 2, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{PoolLabel: "p", PoolReadyLabel: "true"}
	ready := e.seed(&store.Sandbox{ID: "sbx_ready", State: api.StateRunning, Spec: store.Spec{MemoryMB: 1024, CPUs: 1, TimeoutSecs: 1, Labels: labels}}, true)
	gone := e.seed(&store.Sandbox{ID: "sbx_ready_gone", State: api.StateRunning, Spec: store.Spec{MemoryMB: 1024, CPUs: 1, Labels: labels}}, false)
	e.start()
	e.eventually("the pool refilled", func() bool { return e.poolReady("p") == 2 })
	if n := e.rt.createCount(); n != 1 {
		t.Fatalf("%d creates; want 1 (one ready sandbox survived)", n)
	}
	if e.row(gone.ID).State != api.StateError {
		t.Fatalf("a ready sandbox that died: %s", e.row(gone.ID).State)
	}
	// Ready sandboxes are not idle-reaped, whatever their timeout.
	e.clock.advance(time.Hour)
	sb := e.create(&api.CreateSandboxRequest{Pool: "p", Name: "claimed"})
	if sb.ID != ready.ID {
		t.Fatalf("handed out %s; want the oldest ready sandbox %s", sb.ID, ready.ID)
	}
}
