package runtime

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// fakeCRIUEnv makes the test binary a stand-in for a CRIU worker: it runs
// as `criu swrk 3` (argv as CRIU's) for the given duration ("forever":
// until killed).
const fakeCRIUEnv = "FORKBOX_TEST_FAKE_CRIU"

func TestMain(m *testing.M) {
	if v := os.Getenv(fakeCRIUEnv); v != "" {
		if v == "forever" {
			select {}
		}
		d, _ := time.ParseDuration(v)
		time.Sleep(d)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeCRIU is a stand-in CRIU worker; exited is closed once it has
// exited and been reaped (err is its Wait's).
type fakeCRIU struct {
	pid    int
	exited chan struct{}
	err    error
}

// startFakeCRIU starts a process whose argv is CRIU's worker's, with
// hold open (a file under a data dir, as a dump's images dir is), living
// for life. Its parent is the test, no forkbox process: to a daemon it is
// an orphan.
func startFakeCRIU(t *testing.T, hold *os.File, life string) *fakeCRIU {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: self, Args: []string{"/opt/forkbox/criu/sbin/criu", "swrk", "3"}, Env: append(os.Environ(), fakeCRIUEnv+"="+life)}
	if hold != nil {
		cmd.ExtraFiles = []*os.File{hold}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &fakeCRIU{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() { f.err = cmd.Wait(); close(f.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-f.exited })
	return f
}

// LeftoverCRIU waits for the CRIU workers a dead daemon left on its data
// dir, kills those that outlive the wait, and leaves alone workers of other
// data dirs and, when the daemon stops meanwhile, everything.
func TestLeftoverCRIU(t *testing.T) {
	data := t.TempDir()
	other := t.TempDir()
	hold := func(dir string) *os.File {
		f, err := os.Create(filepath.Join(dir, "images.img"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	r := &Runtime{cfg: Config{Dir: filepath.Join(data, "sandboxes")}, log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()

	// One that ends within the wait is waited for, not killed.
	short := startFakeCRIU(t, hold(data), "300ms")
	foreign := startFakeCRIU(t, hold(other), "forever")
	found, killed := r.LeftoverCRIU(ctx, 30*time.Second)
	if !slices.Equal(found, []int{short.pid}) || len(killed) != 0 {
		t.Fatalf("found %v, killed %v; want %d found and waited for", found, killed, short.pid)
	}

	// One that outlives the wait is killed; another data dir's is not.
	stuck := startFakeCRIU(t, hold(data), "forever")
	found, killed = r.LeftoverCRIU(ctx, 200*time.Millisecond)
	if !slices.Equal(found, []int{stuck.pid}) || !slices.Equal(killed, found) {
		t.Fatalf("found %v, killed %v; want %d found and killed", found, killed, stuck.pid)
	}
	if <-stuck.exited; stuck.err == nil {
		t.Fatal("the stuck worker exited on its own")
	}
	if !isAlive(foreign.pid) {
		t.Fatal("another data dir's worker was killed")
	}

	// A daemon stopping while it waits kills nothing.
	again := startFakeCRIU(t, hold(data), "forever")
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, killed := r.LeftoverCRIU(cctx, 30*time.Second); len(killed) != 0 || !isAlive(again.pid) {
		t.Fatalf("killed %v while stopping", killed)
	}
	if !isAlive(foreign.pid) {
		t.Fatal("another data dir's worker was killed")
	}
}

func isAlive(pid int) bool {
	state, err := pidState(pid)
	return err == nil && state != "Z" && state != "X"
}

// Recover thaws a sandbox's frozen cgroup (and says so), and Destroy ends
// the processes of one left frozen: a v1-frozen task ignores SIGKILL until
// thawed.
func TestRecoverThawsAFrozenSandbox(t *testing.T) {
	needRoot(t)
	id := "sbx_recovertest" + strconv.Itoa(os.Getpid())
	r := &Runtime{cfg: Config{CgroupParent: "forkbox-test", Dir: filepath.Join(t.TempDir(), "sandboxes")}, log: slog.New(slog.DiscardHandler),
		destroyed: map[string]bool{}}
	cg := newCgroups("forkbox-test", id)
	if err := cg.create(Limits{CPUs: 1, MemoryMB: 64, PIDs: 16}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.thaw(context.Background()); cg.kill(5 * time.Second); cg.remove() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		if err := cg.join(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	start()
	if err := cg.setFrozen(ctx, true); err != nil {
		t.Fatal(err)
	}
	rec, err := r.Recover(ctx, id)
	if err != nil || !rec.Frozen || len(rec.Tracers) != 0 {
		t.Fatalf("recover: %+v %v; want frozen, no tracers", rec, err)
	}
	if frozen, err := cg.frozen(); err != nil || frozen {
		t.Fatalf("after recover: frozen %v %v", frozen, err)
	}
	if rec, err := r.Recover(ctx, id); err != nil || rec.Frozen {
		t.Fatalf("recover of a thawed sandbox: %+v %v", rec, err)
	}
	// Frozen again: Destroy still ends it, within its bound.
	if err := cg.setFrozen(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := r.Destroy(ctx, id, &Info{}); err != nil {
		t.Fatalf("destroy a frozen sandbox: %v", err)
	}
	if pids, err := cg.pids(); err == nil && len(pids) > 0 {
		t.Fatalf("processes left after destroy: %v", pids)
	}
	// A sandbox with no cgroup left: nothing to do, no error.
	if rec, err := r.Recover(ctx, "sbx_nosuchsandbox"); err != nil || rec.Frozen {
		t.Fatalf("recover of nothing: %+v %v", rec, err)
	}
}
