package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// sizedRuntime is the fake runtime with a snapshot estimate, counting
// freezes: a snapshot refused up front must not pause the sandbox.
type sizedRuntime struct {
	*fakeRuntime
	need    atomic.Int64
	freezes atomic.Int64
}

func (r *sizedRuntime) SnapshotNeed(string, bool) int64 { return r.need.Load() }

func (r *sizedRuntime) Freeze(ctx context.Context, id string) error {
	r.freezes.Add(1)
	return r.fakeRuntime.Freeze(ctx, id)
}

func sizedEnv(t *testing.T) (*testEnv, *sizedRuntime) {
	e := startedEnv(t)
	sr := &sizedRuntime{fakeRuntime: e.rt}
	e.m.snapper = sr
	return e, sr
}

// wantFull fails unless err is a 507 naming the snapshot store's
// filesystem and what.
func (e *testEnv) wantFull(op string, err error, midway bool, what string) {
	e.t.Helper()
	var d *diskspace.Error
	if !errors.As(err, &d) || !errors.Is(err, errdefs.ErrInsufficientStorage) {
		e.t.Fatalf("%s: %v; want insufficient storage", op, err)
	}
	if d.Midway != midway || d.Room.Path != e.snapDir || d.Room.Mount == "" || !strings.Contains(err.Error(), what) {
		e.t.Fatalf("%s: %v (%+v); want it to name %s and %q", op, err, d.Room, e.snapDir, what)
	}
}

// TestSnapshotRoomUpFront: checkpoints (both types), a suspend and a fork
// whose estimate is more than the disk has are refused before the sandbox
// is paused; nothing is written, the sandbox keeps running.
func TestSnapshotRoomUpFront(t *testing.T) {
	t.Parallel()
	e, sr := sizedEnv(t)
	id := e.create(&api.CreateSandboxRequest{Name: "big"}).ID
	sr.need.Store(1 << 60)

	_, err := e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{Type: api.SnapshotMemory})
	e.wantFull("memory checkpoint", err, false, "not enough disk space for a memory snapshot of sandbox "+id+": it needs about 1.0 EiB")
	_, err = e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{Type: api.SnapshotFilesystem})
	e.wantFull("filesystem checkpoint", err, false, "a filesystem snapshot of sandbox "+id)
	_, err = e.m.Suspend(e.ctx, id, "test")
	e.wantFull("suspend", err, false, "the suspend image (a memory snapshot) of sandbox "+id)
	_, err = e.m.Fork(e.ctx, id, &api.ForkRequest{Count: 1})
	e.wantFull("fork", err, false, "a memory snapshot of sandbox "+id)

	if n := sr.freezes.Load(); n != 0 {
		t.Fatalf("the sandbox was paused %d times for snapshots refused up front", n)
	}
	e.wantNoSnapshots()
	if sb := e.row(id); sb.State != api.StateRunning || sb.SuspendImage != "" {
		t.Fatalf("after the refusals: %s, image %q", sb.State, sb.SuspendImage)
	}
	if _, err := e.exec(id); err != nil {
		t.Fatalf("exec: %v", err)
	}
	// With room, the same calls work.
	sr.need.Store(4096)
	if _, err := e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{Type: api.SnapshotMemory}); err != nil {
		t.Fatalf("checkpoint with room: %v", err)
	}
	if _, err := e.m.Suspend(e.ctx, id, "test"); err != nil {
		t.Fatalf("suspend with room: %v", err)
	}
}

// TestSnapshotRoomMidway: a dump that meets ENOSPC (not mapped by the
// runtime) is the same 507, as of then; the sandbox is thawed, running, and
// no snapshot stays.
func TestSnapshotRoomMidway(t *testing.T) {
	t.Parallel()
	e, sr := sizedEnv(t)
	id := e.create(&api.CreateSandboxRequest{Name: "mid"}).ID
	sr.need.Store(123 << 20)
	e.rt.set(func(r *fakeRuntime) {
		r.checkpointErr = &fs.PathError{Op: "write", Path: "pages-1.img", Err: syscall.ENOSPC}
	})
	_, err := e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{Type: api.SnapshotMemory})
	e.wantFull("memory checkpoint", err, true, "the disk filled up while writing a memory snapshot of sandbox "+id+": it needs about 123.0 MiB")
	_, err = e.m.Suspend(e.ctx, id, "test")
	e.wantFull("suspend", err, true, "the suspend image (a memory snapshot) of sandbox "+id)
	e.wantNoSnapshots()
	if sb := e.row(id); sb.State != api.StateRunning || e.rt.isFrozen(id) {
		t.Fatalf("after the failures: %s, frozen %v", sb.State, e.rt.isFrozen(id))
	}
	if _, err := e.exec(id); err != nil {
		t.Fatalf("exec: %v", err)
	}
}
