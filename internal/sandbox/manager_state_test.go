package sandbox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/criu"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
)

// transitionCase drives one sandbox, through the Manager's public methods,
// across one state change of the transitions table.
type transitionCase struct {
	opts  envOpts
	drive func(t *testing.T, e *testEnv) (id string)
}

// onlySandbox is the id of the one sandbox in e's store.
func (e *testEnv) onlySandbox() string {
	e.t.Helper()
	list, err := e.st.List(e.ctx, store.ListFilter{})
	if err != nil || len(list) != 1 {
		e.t.Fatalf("want one sandbox in the store: %d, %v", len(list), err)
	}
	return list[0].ID
}

// suspendedSandbox creates a named sandbox in a started env and suspends it.
func suspendedSandbox(t *testing.T, e *testEnv) string {
	t.Helper()
	sb := e.create(&api.CreateSandboxRequest{Name: "sess"})
	if _, err := e.m.Suspend(e.ctx, sb.ID, "test"); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	return sb.ID
}

// nodeLost seeds a row of node b in state, and reports node b lost to the
// Manager of node a.
func nodeLost(state api.SandboxState) transitionCase {
	return transitionCase{opts: envOpts{node: "a"}, drive: func(t *testing.T, e *testEnv) string {
		sb := e.seed(&store.Sandbox{ID: "sbx_of_b", State: state, Node: "b"}, false)
		if lost, _, err := e.m.NodeLost(e.ctx, "b", time.Now(), false); err != nil || lost != 1 {
			t.Fatalf("node lost: %d lost, %v", lost, err)
		}
		// The reason says what the sandbox was doing when its node went.
		if want := "while the sandbox was " + string(state) + ";"; !strings.Contains(e.row(sb.ID).StateReason, want) {
			t.Fatalf("reason %q does not say %q", e.row(sb.ID).StateReason, want)
		}
		return sb.ID
	}}
}

// leftBehind seeds a record a crashed daemon left in state (no processes,
// no create or suspend under way) and deletes it before Start reconciles
// it: the delete ends it from that state directly.
func leftBehind(state api.SandboxState) transitionCase {
	return transitionCase{drive: func(t *testing.T, e *testEnv) string {
		sb := e.seed(&store.Sandbox{ID: "sbx_left_" + string(state), State: state}, false)
		v, err := e.m.Delete(e.ctx, sb.ID)
		if err != nil || v.State != api.StateTerminated {
			t.Fatalf("delete: %+v, %v", v, err)
		}
		return sb.ID
	}}
}

func transitionCases() map[string]transitionCase {
	started := func(f func(t *testing.T, e *testEnv) string) transitionCase {
		return transitionCase{drive: func(t *testing.T, e *testEnv) string {
			e.start()
			return f(t, e)
		}}
	}
	created := func(t *testing.T, e *testEnv) string { return e.create(&api.CreateSandboxRequest{}).ID }
	createFails := func(t *testing.T, e *testEnv) string {
		e.rt.set(func(r *fakeRuntime) {
			r.createHook = func(context.Context, runtime.Spec) error { return errors.New("no cgroup for you") }
		})
		if _, err := e.m.Create(e.ctx, &api.CreateSandboxRequest{}); err == nil {
			t.Fatal("create succeeded")
		}
		return e.onlySandbox()
	}
	suspendedThen := func(f func(t *testing.T, e *testEnv, id string)) transitionCase {
		return started(func(t *testing.T, e *testEnv) string {
			id := suspendedSandbox(t, e)
			f(t, e, id)
			return id
		})
	}
	return map[string]transitionCase{
		"creating>running":    started(created),
		"creating>error":      started(createFails),
		"creating>terminated": leftBehind(api.StateCreating),
		"creating>lost":       nodeLost(api.StateCreating),

		"running>suspending": started(func(t *testing.T, e *testEnv) string { return suspendedSandbox(t, e) }),
		"running>terminated": started(func(t *testing.T, e *testEnv) string {
			id := created(t, e)
			if _, err := e.m.Delete(e.ctx, id); err != nil {
				t.Fatal(err)
			}
			return id
		}),
		"running>error": started(func(t *testing.T, e *testEnv) string {
			id := created(t, e)
			e.m.OnExit(id, "init exited with status 137")
			return id
		}),
		"running>lost": nodeLost(api.StateRunning),

		"suspending>suspended": started(func(t *testing.T, e *testEnv) string { return suspendedSandbox(t, e) }),
		"suspending>running": started(func(t *testing.T, e *testEnv) string {
			id := created(t, e)
			e.rt.set(func(r *fakeRuntime) { r.checkpointErr = errors.New("criu dump: boom") })
			if _, err := e.m.Suspend(e.ctx, id, "test"); err == nil {
				t.Fatal("suspend succeeded")
			}
			return id
		}),
		"suspending>error": {drive: func(t *testing.T, e *testEnv) string {
			// The daemon died mid-suspend, before any image was saved, and
			// the processes are gone.
			sb := e.seed(&store.Sandbox{ID: "sbx_mid_suspend", State: api.StateSuspending}, false)
			e.start()
			return sb.ID
		}},
		"suspending>terminated": leftBehind(api.StateSuspending),
		"suspending>lost":       nodeLost(api.StateSuspending),

		"suspended>resuming":   suspendedThen(resumeOK),
		"suspended>terminated": suspendedThen(deleteOK),
		"suspended>error": suspendedThen(func(t *testing.T, e *testEnv, id string) {
			e.m.OnExit(id, "the runtime reports its init gone")
		}),

		"resuming>running": suspendedThen(resumeOK),
		"resuming>suspended": suspendedThen(func(t *testing.T, e *testEnv, id string) {
			e.rt.set(func(r *fakeRuntime) {
				r.restoreHook = func(runtime.Spec) error { return errors.New("criu restore: boom") }
			})
			if _, err := e.m.Resume(e.ctx, id); err == nil {
				t.Fatal("resume succeeded")
			}
		}),
		"resuming>error": suspendedThen(func(t *testing.T, e *testEnv, id string) {
			// The restored init dies before the resume records it running:
			// error is final but for terminated, so the resume cannot
			// record it running (or suspended) over it.
			e.rt.set(func(r *fakeRuntime) { r.afterRestore = func(id string) { e.m.OnExit(id, "restored init died") } })
			_, err := e.m.Resume(e.ctx, id)
			wantKind(t, "resume over an error", err, errdefs.ErrFailedPrecondition)
			if sb := e.row(id); sb.State != api.StateError || sb.StateReason != "restored init died" {
				t.Fatalf("after the resume: %s (%s)", sb.State, sb.StateReason)
			}
		}),
		"resuming>terminated": leftBehind(api.StateResuming),
		"resuming>lost":       nodeLost(api.StateResuming),

		"error>terminated": started(func(t *testing.T, e *testEnv) string {
			id := createFails(t, e)
			deleteOK(t, e, id)
			return id
		}),

		"lost>terminated": {opts: envOpts{node: "a"}, drive: func(t *testing.T, e *testEnv) string {
			id := nodeLost(api.StateRunning).drive(t, e)
			// Another node's lost sandbox holds nothing here: ended
			// without a Destroy.
			deleteOK(t, e, id)
			if n := e.rt.destroyCount(id); n != 0 {
				t.Fatalf("%d destroys of another node's sandbox", n)
			}
			return id
		}},
		"lost>running": {opts: envOpts{node: "a"}, drive: func(t *testing.T, e *testEnv) string {
			// This node came back and finds its processes alive.
			sb := e.seed(&store.Sandbox{ID: "sbx_back", State: api.StateLost, Node: "a"}, true)
			e.start()
			if _, err := e.exec(sb.ID); err != nil {
				t.Fatalf("exec in the sandbox running again: %v", err)
			}
			return sb.ID
		}},
	}
}

func resumeOK(t *testing.T, e *testEnv, id string) {
	t.Helper()
	if _, err := e.m.Resume(e.ctx, id); err != nil {
		t.Fatalf("resume: %v", err)
	}
}

func deleteOK(t *testing.T, e *testEnv, id string) {
	t.Helper()
	if v, err := e.m.Delete(e.ctx, id); err != nil || v.State != api.StateTerminated {
		t.Fatalf("delete: %+v, %v", v, err)
	}
}

// Every change the transitions table allows is one the Manager makes, from
// a public method, and records as an event; every case here is in the
// table.
func TestEveryLegalTransition(t *testing.T) {
	t.Parallel()
	cases := transitionCases()
	for from, tos := range transitions {
		for _, to := range tos {
			if _, ok := cases[string(from+">"+to)]; !ok {
				t.Errorf("no test drives %s -> %s", from, to)
			}
		}
	}
	for key, c := range cases {
		from, to, _ := strings.Cut(key, ">")
		if err := checkTransition("x", api.SandboxState(from), api.SandboxState(to)); err != nil {
			t.Errorf("case %s is not in the transitions table: %v", key, err)
			continue
		}
		t.Run(from+"_to_"+to, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, c.opts)
			id := c.drive(t, e)
			if got := e.transitionsOf(id); !slices.Contains(got, key) {
				t.Fatalf("events of %s: %v; want %s among them", id, got, key)
			}
		})
	}
}

// Every change the table does not list is refused, as failed_precondition.
func TestIllegalTransitionsRefused(t *testing.T) {
	t.Parallel()
	states := []api.SandboxState{api.StateCreating, api.StateRunning, api.StateSuspending, api.StateSuspended, api.StateResuming,
		api.StateError, api.StateLost, api.StateTerminated}
	for _, from := range states {
		for _, to := range states {
			err := checkTransition("sbx_x", from, to)
			if slices.Contains(transitions[from], to) {
				if err != nil {
					t.Errorf("%s -> %s: %v", from, to, err)
				}
				continue
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), string(from)) {
				t.Errorf("%s -> %s: %v; want failed_precondition naming the state", from, to, err)
			}
		}
	}
}

// The Manager's operations refuse a sandbox in a state they cannot act on,
// with the errdefs kind the API maps to a status, and change nothing.
func TestOperationsRefuseWrongStates(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	running := e.create(&api.CreateSandboxRequest{Name: "run"}).ID
	suspended := suspendedSandbox(t, e)
	ended := e.create(&api.CreateSandboxRequest{}).ID
	deleteOK(t, e, ended)
	broken := e.create(&api.CreateSandboxRequest{}).ID
	e.m.OnExit(broken, "init exited")

	_, err := e.m.Resume(e.ctx, running)
	wantKind(t, "resume of a running sandbox", err, errdefs.ErrFailedPrecondition)
	_, err = e.m.Suspend(e.ctx, suspended, "test")
	wantKind(t, "suspend of a suspended sandbox", err, errdefs.ErrFailedPrecondition)
	for _, id := range []string{ended, broken} {
		_, err = e.m.Suspend(e.ctx, id, "test")
		wantKind(t, "suspend of "+id, err, errdefs.ErrFailedPrecondition)
		_, err = e.m.Resume(e.ctx, id)
		wantKind(t, "resume of "+id, err, errdefs.ErrFailedPrecondition)
		_, err = e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{})
		wantKind(t, "checkpoint of "+id, err, errdefs.ErrFailedPrecondition)
		_, err = e.exec(id)
		wantKind(t, "exec in "+id, err, errdefs.ErrFailedPrecondition)
	}
	// The refusal says why the sandbox is not running.
	if _, err := e.exec(broken); err == nil || !strings.Contains(err.Error(), "init exited") {
		t.Fatalf("exec in a failed sandbox: %v; want its reason", err)
	}
	_, err = e.m.Update(e.ctx, broken, &api.UpdateSandboxRequest{Network: &api.NetworkPolicy{}})
	wantKind(t, "network policy of a failed sandbox", err, errdefs.ErrFailedPrecondition)
	// terminated is final: a delete again is a no-op, a late exit report
	// changes nothing.
	destroys := e.rt.destroyCount(ended)
	if v, err := e.m.Delete(e.ctx, ended); err != nil || v.State != api.StateTerminated || e.rt.destroyCount(ended) != destroys {
		t.Fatalf("second delete: %+v, %v, %d destroys", v, err, e.rt.destroyCount(ended))
	}
	e.m.OnExit(ended, "late exit report")
	if sb := e.row(ended); sb.State != api.StateTerminated || sb.StateReason != "deleted" {
		t.Fatalf("terminated sandbox changed: %s (%s)", sb.State, sb.StateReason)
	}
	// Unknown sandboxes, and a name in use.
	_, err = e.m.Suspend(e.ctx, "nobody", "test")
	wantKind(t, "suspend of an unknown sandbox", err, errdefs.ErrNotFound)
	_, err = e.m.Delete(e.ctx, "nobody")
	wantKind(t, "delete of an unknown sandbox", err, errdefs.ErrNotFound)
	_, err = e.m.Create(e.ctx, &api.CreateSandboxRequest{Name: "run"})
	wantKind(t, "create with a name in use", err, errdefs.ErrConflict)
	_, err = e.m.Create(e.ctx, &api.CreateSandboxRequest{Image: "nonesuch"})
	wantKind(t, "create of an unknown image", err, errdefs.ErrNotFound)
	// None of this moved the sandboxes that were fine.
	if s1, s2 := e.row(running).State, e.row(suspended).State; s1 != api.StateRunning || s2 != api.StateSuspended {
		t.Fatalf("states after the refusals: %s, %s", s1, s2)
	}
}

// Without CRIU, what needs memory images is unavailable, and says why.
func TestNoCRIUIsUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{noCRIU: true})
	e.start()
	id := e.create(&api.CreateSandboxRequest{Name: "n"}).ID
	_, err := e.m.Suspend(e.ctx, id, "test")
	wantKind(t, "suspend", err, errdefs.ErrUnavailable)
	if !strings.Contains(err.Error(), "no CRIU in unit tests") {
		t.Fatalf("suspend: %v; want the reason", err)
	}
	_, err = e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{Type: api.SnapshotMemory})
	wantKind(t, "memory checkpoint", err, errdefs.ErrUnavailable)
	_, err = e.m.Fork(e.ctx, id, &api.ForkRequest{Count: 1})
	wantKind(t, "fork", err, errdefs.ErrUnavailable)
	// A filesystem snapshot needs no CRIU.
	if _, err := e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{}); err != nil {
		t.Fatalf("filesystem checkpoint: %v", err)
	}
	// CRIU checked again (it may have been missing for a passing reason).
	e.m.SetCRIUCheck(func() (*criu.Host, error) { return &criu.Host{Usable: true}, nil })
	if _, err := e.m.Suspend(e.ctx, id, "test"); err != nil {
		t.Fatalf("suspend once CRIU is back: %v", err)
	}
}
