package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// A create records the sandbox, starts it with the request's settings and
// makes it reachable through its agent; a delete frees it and its name.
func TestCreateAndDelete(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	sb := e.create(&api.CreateSandboxRequest{Name: "alice", Env: map[string]string{"B": "2", "A": "1"}, Labels: map[string]string{"team": "x"}})
	if sb.State != api.StateRunning || sb.Name != "alice" || sb.Image != "python" || sb.Labels["team"] != "x" || !strings.HasPrefix(sb.ID, "sbx_") {
		t.Fatalf("created: %+v", sb)
	}
	spec := e.rt.spec(sb.ID)
	if spec.Hostname != "alice" || strings.Join(spec.Env, ",") != "A=1,B=2" || spec.Limits.MemoryMB != DefaultDefaults.MemoryMB || spec.DiskMB != DefaultDefaults.DiskMB {
		t.Fatalf("runtime spec: %+v", spec)
	}
	row := e.row("alice")
	if info, err := runtime.UnmarshalInfo(row.Runtime); err != nil || info.PID == 0 || row.Spec.UIDBase != info.UIDBase {
		t.Fatalf("runtime record %s (%v), uid base %d", row.Runtime, err, row.Spec.UIDBase)
	}
	res, err := e.exec("alice")
	if err != nil || res.Stdout != "echo hi\n" || res.ExitCode != 0 {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	if _, err := e.m.WriteFile(e.ctx, "alice", "/home/user/a.txt", 0o644, strings.NewReader("hello")); err != nil {
		t.Fatalf("write file: %v", err)
	}
	rc, _, err := e.m.ReadFile(e.ctx, "alice", "/home/user/a.txt")
	if err != nil {
		t.Fatalf("read file: %v", err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello" {
		t.Fatalf("read back %q", b)
	}
	if got, err := e.m.Get(e.ctx, sb.ID); err != nil || got.Name != "alice" || got.Usage == nil {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if list, err := e.m.List(e.ctx, store.ListFilter{}); err != nil || len(list) != 1 {
		t.Fatalf("list: %d, %v", len(list), err)
	}
	if n := e.m.LiveCount(); n != 1 {
		t.Fatalf("live count %d", n)
	}

	v, err := e.m.Delete(e.ctx, "alice")
	if err != nil || v.State != api.StateTerminated || v.StateReason != "deleted" || v.TerminatedAt == nil {
		t.Fatalf("delete: %+v, %v", v, err)
	}
	if e.rt.alive(sb.ID) || e.rt.destroyCount(sb.ID) != 1 || e.m.LiveCount() != 0 {
		t.Fatalf("after delete: alive %v, %d destroys, %d live", e.rt.alive(sb.ID), e.rt.destroyCount(sb.ID), e.m.LiveCount())
	}
	if got := e.transitionsOf(sb.ID); strings.Join(got, " ") != ">creating creating>running running>terminated" {
		t.Fatalf("events: %v", got)
	}
	// The name is free again.
	if again := e.create(&api.CreateSandboxRequest{Name: "alice"}); again.ID == sb.ID {
		t.Fatal("a new sandbox got the old id")
	}
}

// A runtime that fails to start the sandbox leaves it error with the
// failure as its reason, nothing running, and the admission released.
func TestCreateRuntimeFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{quotas: fixedQuotas{tenant.Default: {RunningSandboxes: i64p(1)}}})
	e.start()
	e.rt.set(func(r *fakeRuntime) {
		r.createHook = func(context.Context, runtime.Spec) error { return errors.New("mount overlay: no space left on device") }
	})
	_, err := e.m.Create(e.ctx, &api.CreateSandboxRequest{Name: "doomed"})
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("create: %v", err)
	}
	sb := e.row("doomed")
	if sb.State != api.StateError || !strings.HasPrefix(sb.StateReason, "create failed: create sandbox: mount overlay") {
		t.Fatalf("row: %s (%s)", sb.State, sb.StateReason)
	}
	if e.rt.destroyCount(sb.ID) != 1 || e.m.LiveCount() != 0 {
		t.Fatalf("%d destroys, %d live", e.rt.destroyCount(sb.ID), e.m.LiveCount())
	}
	// The failed start holds no quota: the one sandbox allowed starts.
	e.rt.set(func(r *fakeRuntime) { r.createHook = nil })
	e.create(&api.CreateSandboxRequest{Name: "fine"})
	// And the failed one can be deleted.
	deleteOK(t, e, sb.ID)
}

// A delete wins over a create under way: it cancels it, the create unwinds
// (error), and the delete ends the sandbox.
func TestDeleteCancelsACreate(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	inCreate := make(chan string, 1)
	e.rt.set(func(r *fakeRuntime) {
		r.createHook = func(ctx context.Context, spec runtime.Spec) error {
			inCreate <- spec.ID
			<-ctx.Done()
			return context.Cause(ctx)
		}
	})
	errc := make(chan error, 1)
	go func() {
		_, err := e.m.Create(e.ctx, &api.CreateSandboxRequest{})
		errc <- err
	}()
	id := <-inCreate
	if got := e.row(id).State; got != api.StateCreating {
		t.Fatalf("while the runtime starts it: %s", got)
	}
	deleteOK(t, e, id)
	err := <-errc
	wantKind(t, "the cancelled create", err, errdefs.ErrFailedPrecondition)
	if !strings.Contains(err.Error(), "deleted during the create") {
		t.Fatalf("create: %v", err)
	}
	if got := strings.Join(e.transitionsOf(id), " "); got != ">creating creating>error error>terminated" {
		t.Fatalf("events: %s", got)
	}
}

// A sandbox whose agent does not answer: its calls fail, saying so, and it
// is not marked anything (the runtime's exit report does that).
func TestUnreachableAgent(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	id := e.create(&api.CreateSandboxRequest{}).ID
	e.rt.killAgent(id)
	_, err := e.exec(id)
	if err == nil || !strings.Contains(err.Error(), "sandbox agent unreachable") {
		t.Fatalf("exec: %v", err)
	}
	if _, err := e.m.ListFiles(e.ctx, id, "/"); err == nil {
		t.Fatal("list files succeeded")
	}
	if sb := e.row(id); sb.State != api.StateRunning {
		t.Fatalf("state %s", sb.State)
	}
	e.m.OnExit(id, "init exited")
	_, err = e.exec(id)
	wantKind(t, "exec after the exit", err, errdefs.ErrFailedPrecondition)
}

// Suspend records the image and frees the sandbox; resume restores it from
// that image; the next suspend replaces the image and drops the old one; a
// delete drops the last.
func TestSuspendResumeBookkeeping(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	id := e.create(&api.CreateSandboxRequest{Name: "sess"}).ID
	first, _ := e.exec(id)

	v, err := e.m.Suspend(e.ctx, "sess", "user asked")
	if err != nil || v.State != api.StateSuspended || v.StateReason != "user asked" {
		t.Fatalf("suspend: %+v, %v", v, err)
	}
	sb := e.row(id)
	img1 := sb.SuspendImage
	if info, err := runtime.UnmarshalInfo(sb.Runtime); img1 == "" || err != nil || info.PID != 0 {
		t.Fatalf("suspended row: image %q, runtime %s", img1, sb.Runtime)
	}
	if sn, err := e.st.GetSnapshot(e.ctx, img1); err != nil || sn.Type != snapshotSuspend || sn.SandboxID != id || sn.SizeBytes == 0 {
		t.Fatalf("suspend image record: %+v, %v", sn, err)
	}
	if e.rt.alive(id) || e.m.LiveCount() != 0 || e.rt.isFrozen(id) {
		t.Fatal("a suspended sandbox still runs")
	}
	// Suspend images are the sandbox's own: not listed, not found.
	if list, err := e.m.ListSnapshots(e.ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("snapshots listed: %+v, %v", list, err)
	}
	_, err = e.m.GetSnapshot(e.ctx, img1)
	wantKind(t, "get of a suspend image", err, errdefs.ErrNotFound)

	v, err = e.m.Resume(e.ctx, "sess")
	if err != nil || v.State != api.StateRunning || v.StateReason != "" {
		t.Fatalf("resume: %+v, %v", v, err)
	}
	if got := e.rt.spec(id); got.Hostname != "sess" || got.FromFS != filepath.Join(e.snaps.Path(img1), fsArchive) {
		t.Fatalf("restore spec: %+v", got)
	}
	again, err := e.exec(id)
	if err != nil || again.Stderr == first.Stderr {
		t.Fatalf("exec after resume: %+v, %v (before: %q)", again, err, first.Stderr)
	}
	if rec, files := e.snapshotExists(img1); !rec || !files {
		t.Fatal("the image resumed from was dropped before the next suspend")
	}

	if _, err := e.m.Suspend(e.ctx, id, "again"); err != nil {
		t.Fatal(err)
	}
	img2 := e.row(id).SuspendImage
	if img2 == "" || img2 == img1 {
		t.Fatalf("second image %q (first %q)", img2, img1)
	}
	if rec, files := e.snapshotExists(img1); rec || files {
		t.Fatalf("old suspend image kept: record %v, files %v", rec, files)
	}

	// A call resumes a suspended sandbox by itself.
	if _, err := e.exec("sess"); err != nil {
		t.Fatalf("exec in a suspended sandbox: %v", err)
	}
	if sb := e.row(id); sb.State != api.StateRunning {
		t.Fatalf("after an auto-resume: %s", sb.State)
	}
	if _, err := e.m.Suspend(e.ctx, id, "last"); err != nil {
		t.Fatal(err)
	}
	img3 := e.row(id).SuspendImage
	deleteOK(t, e, id)
	if rec, files := e.snapshotExists(img3); rec || files || e.row(id).SuspendImage != "" {
		t.Fatalf("a deleted sandbox's suspend image kept: record %v, files %v", rec, files)
	}
}

// A sandbox created without auto-resume is not resumed by a call.
func TestNoAutoResume(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	no := false
	id := e.create(&api.CreateSandboxRequest{Name: "manual", AutoResume: &no}).ID
	if _, err := e.m.Suspend(e.ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	_, err := e.exec(id)
	wantKind(t, "exec", err, errdefs.ErrFailedPrecondition)
	if !strings.Contains(err.Error(), "auto_resume") || e.row(id).State != api.StateSuspended {
		t.Fatalf("exec: %v, state %s", err, e.row(id).State)
	}
}

// A suspend that fails leaves the sandbox running, thawed, with the failure
// in its reason and no image behind; it can be suspended later.
func TestFailedSuspendKeepsItRunning(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	id := e.create(&api.CreateSandboxRequest{Name: "stubborn"}).ID
	before, _ := e.exec(id)
	e.rt.set(func(r *fakeRuntime) { r.checkpointErr = errors.New("criu dump: task 7 has a timerfd") })
	_, err := e.m.Suspend(e.ctx, id, "test")
	if err == nil || !strings.Contains(err.Error(), "timerfd") {
		t.Fatalf("suspend: %v", err)
	}
	sb := e.row(id)
	if sb.State != api.StateRunning || !strings.HasPrefix(sb.StateReason, "suspend failed: ") || !strings.Contains(sb.StateReason, "timerfd") || sb.SuspendImage != "" {
		t.Fatalf("row: %s (%s) image %q", sb.State, sb.StateReason, sb.SuspendImage)
	}
	e.wantNoSnapshots()
	if e.rt.isFrozen(id) || e.rt.destroyCount(id) != 0 {
		t.Fatalf("frozen %v, %d destroys", e.rt.isFrozen(id), e.rt.destroyCount(id))
	}
	if after, err := e.exec(id); err != nil || after.Stderr != before.Stderr {
		t.Fatalf("exec after the failed suspend: %+v, %v", after, err)
	}
	e.rt.set(func(r *fakeRuntime) { r.checkpointErr = nil })
	if _, err := e.m.Suspend(e.ctx, id, "test"); err != nil {
		t.Fatalf("suspend once it can: %v", err)
	}
}

// wantNoSnapshots fails if any snapshot, finished or not, is on record or
// on disk.
func (e *testEnv) wantNoSnapshots() {
	e.t.Helper()
	if list, err := e.st.ListSnapshots(e.ctx, ""); err != nil || len(list) != 0 {
		e.t.Fatalf("snapshot records: %d, %v", len(list), err)
	}
	ents, err := os.ReadDir(e.snapDir)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ent := range ents {
		if ent.Name() == ".intents" { // the marks' dir; no mark may be left
			continue
		}
		e.t.Errorf("left in the snapshot store: %s", ent.Name())
	}
	if ids, err := e.snaps.Intents(forkIntent); err != nil || len(ids) != 0 {
		e.t.Errorf("fork marks left: %v %v", ids, err)
	}
}

// A checkpoint that fails leaves the sandbox running and thawed and no
// snapshot; one that meets an agent connection CRIU cannot dump is retried,
// then answered unavailable.
func TestFailedCheckpointKeepsItRunning(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	id := e.create(&api.CreateSandboxRequest{}).ID
	e.rt.set(func(r *fakeRuntime) { r.checkpointErr = errors.New("criu dump: no space") })
	if _, err := e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{Type: api.SnapshotMemory}); err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("checkpoint: %v", err)
	}
	e.wantNoSnapshots()
	if sb := e.row(id); sb.State != api.StateRunning || e.rt.isFrozen(id) {
		t.Fatalf("after the failed checkpoint: %s, frozen %v", sb.State, e.rt.isFrozen(id))
	}
	e.rt.set(func(r *fakeRuntime) {
		r.checkpointErr = errors.New("criu dump: Unix socket 0x1234 is connected to a peer outside the dump")
	})
	_, err := e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{Type: api.SnapshotMemory})
	wantKind(t, "checkpoint through a busy agent", err, errdefs.ErrUnavailable)
	if !strings.Contains(err.Error(), "through 4 attempts") {
		t.Fatalf("checkpoint: %v", err)
	}
	e.wantNoSnapshots()
	if _, err := e.exec(id); err != nil {
		t.Fatalf("exec after the failed checkpoints: %v", err)
	}
}

// Snapshots of a running and of a suspended sandbox, and sandboxes
// restored from them.
func TestCheckpointAndRestore(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	id := e.create(&api.CreateSandboxRequest{Name: "src"}).ID
	fs, err := e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{Name: "files"})
	if err != nil || fs.Type != api.SnapshotFilesystem || fs.SandboxID != id || fs.Name != "files" {
		t.Fatalf("filesystem checkpoint: %+v, %v", fs, err)
	}
	if b, err := os.ReadFile(filepath.Join(e.snaps.Path(fs.ID), fsArchive)); err != nil || string(b) != "writable layer of "+id {
		t.Fatalf("archive: %q, %v", b, err)
	}
	if e.rt.isFrozen(id) {
		t.Fatal("left frozen")
	}
	mem, err := e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{Type: api.SnapshotMemory})
	if err != nil || mem.Type != api.SnapshotMemory {
		t.Fatalf("memory checkpoint: %+v, %v", mem, err)
	}

	fromFS := e.create(&api.CreateSandboxRequest{SnapshotID: fs.ID})
	if fromFS.SnapshotID != fs.ID || e.rt.spec(fromFS.ID).FromFS != filepath.Join(e.snaps.Path(fs.ID), fsArchive) {
		t.Fatalf("restored from files: %+v, spec %+v", fromFS, e.rt.spec(fromFS.ID))
	}
	restores := e.rt.restoreCount()
	fromMem := e.create(&api.CreateSandboxRequest{SnapshotID: mem.ID, Name: "copy"})
	if fromMem.State != api.StateRunning || e.rt.restoreCount() != restores+1 {
		t.Fatalf("restored from memory: %+v, %d restores", fromMem, e.rt.restoreCount())
	}
	_, err = e.m.Create(e.ctx, &api.CreateSandboxRequest{SnapshotID: mem.ID, Image: "node"})
	wantKind(t, "restore onto another image", err, errdefs.ErrInvalidArgument)
	_, err = e.m.Create(e.ctx, &api.CreateSandboxRequest{SnapshotID: "snap_nonesuch"})
	wantKind(t, "restore of an unknown snapshot", err, errdefs.ErrNotFound)

	// A suspended sandbox's snapshot comes from its suspend image.
	if _, err := e.m.Suspend(e.ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	fromImage, err := e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{Type: api.SnapshotMemory})
	if err != nil || e.row(id).State != api.StateSuspended {
		t.Fatalf("checkpoint of a suspended sandbox: %+v, %v", fromImage, err)
	}
	if _, err := os.Stat(filepath.Join(e.snaps.Path(fromImage.ID), criuDirName, "inventory.img")); err != nil {
		t.Fatalf("memory images of the snapshot: %v", err)
	}
	list, err := e.m.ListSnapshots(e.ctx, "src")
	if err != nil || len(list) != 3 {
		t.Fatalf("src's snapshots: %d, %v", len(list), err)
	}
	if err := e.m.DeleteSnapshot(e.ctx, fs.ID); err != nil {
		t.Fatal(err)
	}
	if rec, files := e.snapshotExists(fs.ID); rec || files {
		t.Fatalf("deleted snapshot: record %v, files %v", rec, files)
	}
	// The sandbox restored from it keeps running.
	if _, err := e.exec(fromFS.ID); err != nil {
		t.Fatal(err)
	}
}

// A fork restores count branches of one memory snapshot; it is all or
// nothing.
func TestFork(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	id := e.create(&api.CreateSandboxRequest{Name: "root"}).ID
	res, err := e.m.Fork(e.ctx, id, &api.ForkRequest{Count: 2, Names: []string{"left", "right"}})
	if err != nil || len(res.Sandboxes) != 2 || res.Snapshot.Type != api.SnapshotMemory {
		t.Fatalf("fork: %+v, %v", res, err)
	}
	for _, b := range res.Sandboxes {
		if b.State != api.StateRunning || b.SnapshotID != res.Snapshot.ID {
			t.Fatalf("branch %+v", b)
		}
		if _, err := e.exec(b.Name); err != nil {
			t.Fatalf("exec in %s: %v", b.Name, err)
		}
	}

	_, err = e.m.Fork(e.ctx, id, &api.ForkRequest{Count: 2, Names: []string{"same", "same"}})
	wantKind(t, "fork with duplicate names", err, errdefs.ErrInvalidArgument)
	_, err = e.m.Fork(e.ctx, id, &api.ForkRequest{Count: 99})
	wantKind(t, "fork of 99", err, errdefs.ErrInvalidArgument)

	// One branch fails: the other is deleted and the snapshot dropped.
	e.rt.set(func(r *fakeRuntime) {
		r.restoreHook = func(spec runtime.Spec) error {
			if spec.Hostname == "bad" {
				return errors.New("criu restore: boom")
			}
			return nil
		}
	})
	snapsBefore, _ := e.st.ListSnapshots(e.ctx, id)
	if _, err := e.m.Fork(e.ctx, id, &api.ForkRequest{Count: 2, Names: []string{"good", "bad"}}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("failed fork: %v", err)
	}
	for _, name := range []string{"good", "bad"} {
		if sb := e.row(name); !sb.State.Ended() {
			t.Fatalf("branch %s of a failed fork: %s", name, sb.State)
		}
	}
	if e.rt.alive(e.row("good").ID) {
		t.Fatal("the good branch of a failed fork still runs")
	}
	if after, _ := e.st.ListSnapshots(e.ctx, id); len(after) != len(snapsBefore) {
		t.Fatalf("%d snapshots of the source after a failed fork; %d before", len(after), len(snapsBefore))
	}
	if sb := e.row(id); sb.State != api.StateRunning {
		t.Fatalf("source after a failed fork: %s", sb.State)
	}
}

// The reaper ends unnamed sandboxes at their idle timeout and max lifetime,
// and suspends named ones instead.
func TestIdleReaper(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	secs := int64(60)
	unnamed := e.create(&api.CreateSandboxRequest{TimeoutSecs: &secs}).ID
	named := e.create(&api.CreateSandboxRequest{Name: "kept", TimeoutSecs: &secs}).ID
	life := int64(3600)
	longIdle := int64(7 * 24 * 3600)
	bounded := e.create(&api.CreateSandboxRequest{TimeoutSecs: &longIdle, MaxLifetimeSecs: &life}).ID

	e.clock.advance(2 * time.Minute)
	e.eventually("the idle sandboxes reaped", func() bool {
		return e.row(unnamed).State == api.StateTerminated && e.row(named).State == api.StateSuspended
	})
	if r := e.row(unnamed).StateReason; r != "idle timeout" {
		t.Fatalf("unnamed: %s", r)
	}
	if r := e.row(named).StateReason; r != reasonIdle {
		t.Fatalf("named: %s", r)
	}
	if e.row(bounded).State != api.StateRunning {
		t.Fatal("a sandbox within its lifetime was reaped")
	}
	e.clock.advance(2 * time.Hour)
	e.eventually("the sandbox past its lifetime ended", func() bool { return e.row(bounded).State == api.StateTerminated })
	if r := e.row(bounded).StateReason; r != "max lifetime reached" {
		t.Fatalf("bounded: %s", r)
	}
}

// At the daemon's exit, named sessions are suspended and the rest
// terminated (policy suspend); keep leaves everything running.
func TestShutdown(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	named := e.create(&api.CreateSandboxRequest{Name: "session"}).ID
	unnamed := e.create(&api.CreateSandboxRequest{}).ID
	if rep := e.m.Shutdown(e.ctx, OnExitKeep); rep.Kept != 2 || e.m.LiveCount() != 2 {
		t.Fatalf("keep: %+v", rep)
	}
	rep := e.m.Shutdown(e.ctx, OnExitSuspend)
	if rep.Suspended != 1 || rep.Terminated != 1 || len(rep.Failed) != 0 {
		t.Fatalf("suspend policy: %s %v", rep, rep.Failed)
	}
	if a, b := e.row(named), e.row(unnamed); a.State != api.StateSuspended || a.StateReason != reasonShutdown || b.State != api.StateTerminated {
		t.Fatalf("after shutdown: %s (%s), %s", a.State, a.StateReason, b.State)
	}
	if err := ValidOnExit("explode"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("ValidOnExit: %v", err)
	}
}

// Without CRIU a named session cannot be suspended at exit: it is left
// running (and reported), not lost.
func TestShutdownWithoutCRIU(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{noCRIU: true})
	e.start()
	id := e.create(&api.CreateSandboxRequest{Name: "session"}).ID
	rep := e.m.Shutdown(e.ctx, OnExitSuspend)
	if len(rep.Failed) != 1 || rep.Failed[id] == "" || e.row(id).State != api.StateRunning {
		t.Fatalf("report %s %v, state %s", rep, rep.Failed, e.row(id).State)
	}
	if rep := e.m.Shutdown(e.ctx, OnExitTerminate); rep.Terminated != 1 || e.row(id).State != api.StateTerminated {
		t.Fatalf("terminate policy: %s", rep)
	}
}

// Update applies a running sandbox's egress policy through the runtime and
// records a suspended one's for its resume; a new idle timeout counts from
// now, and the reaper keeps to it.
func TestUpdate(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	id := e.create(&api.CreateSandboxRequest{Name: "net", AllowInternetAccess: true}).ID
	v, err := e.m.Update(e.ctx, id, &api.UpdateSandboxRequest{Network: &api.NetworkPolicy{DenyOut: []string{"10.0.0.0/8"}}})
	if err != nil || v.Network == nil || len(v.Network.DenyOut) != 1 {
		t.Fatalf("network update: %+v, %v", v, err)
	}
	secs := int64(5)
	if v, err := e.m.Update(e.ctx, id, &api.UpdateSandboxRequest{TimeoutSecs: &secs}); err != nil || v.TimeoutSecs != 5 {
		t.Fatalf("timeout update: %+v, %v", v, err)
	}
	e.clock.advance(10 * time.Second)
	e.eventually("suspended at its new idle timeout", func() bool { return e.row(id).State == api.StateSuspended })
	v, err = e.m.Update(e.ctx, id, &api.UpdateSandboxRequest{Network: &api.NetworkPolicy{}})
	if err != nil || v.Network != nil || v.State != api.StateSuspended {
		t.Fatalf("network update of a suspended sandbox: %+v, %v", v, err)
	}
	zero := int64(0)
	_, err = e.m.Update(e.ctx, id, &api.UpdateSandboxRequest{TimeoutSecs: &zero})
	wantKind(t, "timeout 0", err, errdefs.ErrInvalidArgument)
	offline := e.create(&api.CreateSandboxRequest{}).ID
	_, err = e.m.Update(e.ctx, offline, &api.UpdateSandboxRequest{Network: &api.NetworkPolicy{AllowOut: []string{"example.com"}}})
	wantKind(t, "a policy without internet access", err, errdefs.ErrInvalidArgument)
}

// A stopping daemon first stops whatever starts sandboxes (creates,
// resumes, pool refills) and waits for those under way, so that its on-exit
// policy sees every sandbox: none starts behind its back and runs on after
// the daemon exits, and the report's counts are true.
func TestShutdownWaitsForStartsAndStopsRefills(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	release := make(chan struct{})
	var entered atomic.Int32
	e.rt.set(func(r *fakeRuntime) {
		r.createHook = func(ctx context.Context, spec runtime.Spec) error {
			entered.Add(1)
			<-release
			return nil
		}
	})
	created := make(chan error, 1)
	go func() {
		_, err := e.m.Create(e.ctx, &api.CreateSandboxRequest{})
		created <- err
	}()
	if _, err := e.m.CreatePool(e.ctx, &api.CreatePoolRequest{Name: "p", Image: image.DefaultImage, Size: 2}); err != nil {
		t.Fatal(err)
	}
	e.eventually("a create and two refills under way", func() bool { return entered.Load() == 3 })
	stopped := make(chan ShutdownReport, 1)
	go func() { stopped <- e.m.Shutdown(e.ctx, OnExitTerminate) }()
	e.eventually("shutdown has begun", func() bool {
		e.m.mu.Lock()
		defer e.m.mu.Unlock()
		return e.m.closing
	})
	// Nothing new starts now.
	if _, err := e.m.Create(e.ctx, &api.CreateSandboxRequest{}); !errors.Is(err, errdefs.ErrUnavailable) || errdefs.RetryAfterOf(err) <= 0 {
		t.Fatalf("create during shutdown: %v; want unavailable with a Retry-After", err)
	}
	select {
	case rep := <-stopped:
		t.Fatalf("shutdown ended (%s) while three creates were under way", rep)
	default:
	}
	close(release)
	if err := <-created; err != nil {
		t.Fatalf("the create under way when shutdown began: %v", err)
	}
	rep := <-stopped
	if rep.Terminated != 3 || len(rep.Failed) != 0 || rep.Kept != 0 {
		t.Fatalf("report %s %v; want the create and both pool sandboxes terminated", rep, rep.Failed)
	}
	if n := e.m.LiveCount(); n != 0 {
		t.Fatalf("%d sandboxes left running", n)
	}
	if n := e.rt.createCount(); n != 3 {
		t.Fatalf("%d creates; want 3 (no refill after the shutdown)", n)
	}
}
