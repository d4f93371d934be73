package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

// agentPID finds the host PID of a sandbox's init from its cgroup.
func agentPID(t *testing.T, id string) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "/"+id+"\n") {
			continue
		}
		pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
		comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if strings.HasPrefix(string(comm), "forkbox\x00agent") {
			return pid
		}
	}
	t.Fatalf("no agent process for %s", id)
	return 0
}

// TestDaemonKill9Restart: after kill -9 of the daemon and a restart, every
// sandbox is listed with a true state: running ones are adopted with their
// processes, ones whose processes died meanwhile are marked error; deleting
// any of them leaves nothing behind.
func TestDaemonKill9Restart(t *testing.T) {
	needRoot(t)
	d, err := startDaemon(filepath.Join(t.TempDir(), "crash"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })
	ctx := ctxT(t)
	survivor, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "survivor", AllowInternetAccess: true})
	if err != nil {
		t.Fatal(err)
	}
	victim, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.DeleteSandbox(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, "survivor", api.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo state > /workspace/f; nohup sleep 3600 >/dev/null 2>&1 & echo $!"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	bgPID := strings.TrimSpace(res.Stdout)

	d.kill9()
	// While the daemon is down, the victim's processes die.
	victimPID := agentPID(t, victim.ID)
	syscall.Kill(victimPID, syscall.SIGKILL)
	if err := d.start(); err != nil {
		t.Fatal(err)
	}

	got, err := d.c.GetSandbox(ctx, "survivor")
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("survivor after restart: %+v %v", got, err)
	}
	res, err = d.c.Exec(ctx, "survivor", api.ExecRequest{Cmd: "sh", Args: []string{"-c", "cat /workspace/f; ps -o pid= -p " + bgPID}})
	if err != nil || !strings.HasPrefix(res.Stdout, "state\n") || !strings.Contains(res.Stdout, bgPID) {
		t.Fatalf("survivor lost its files or processes: %+v %v", res, err)
	}
	v, err := d.c.GetSandbox(ctx, victim.ID)
	if err != nil || v.State != api.StateError || !strings.Contains(v.StateReason, "daemon was down") {
		t.Fatalf("victim after restart: %+v %v", v, err)
	}
	assertNoLeaks(t, d, victim.ID)
	g, err := d.c.GetSandbox(ctx, gone.ID)
	if err != nil || g.State != api.StateTerminated {
		t.Fatalf("terminated sandbox after restart: %+v %v", g, err)
	}
	for _, id := range []string{survivor.ID, victim.ID} {
		if _, err := d.c.DeleteSandbox(ctx, id); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
		assertNoLeaks(t, d, id)
	}
}

func TestIdleTimeout(t *testing.T) {
	needRoot(t)
	ctx := ctxT(t)
	idle := newSandbox(t, shared, api.CreateSandboxRequest{TimeoutSecs: i64(2)})
	busy := newSandbox(t, shared, api.CreateSandboxRequest{TimeoutSecs: i64(2)})
	longCall := newSandbox(t, shared, api.CreateSandboxRequest{TimeoutSecs: i64(2)})

	// One call that lasts longer than the idle timeout keeps its sandbox.
	done := make(chan error, 1)
	go func() {
		_, err := shared.c.Exec(ctx, longCall.ID, api.ExecRequest{Cmd: "sleep", Args: []string{"5"}})
		done <- err
	}()
	// Calls every second keep the other one alive for 6 s.
	for i := 0; i < 6; i++ {
		if _, err := shared.c.Exec(ctx, busy.ID, api.ExecRequest{Cmd: "true"}); err != nil {
			t.Fatalf("busy sandbox call %d: %v", i, err)
		}
		time.Sleep(time.Second)
	}
	if err := <-done; err != nil {
		t.Fatalf("long call: %v", err)
	}
	for _, id := range []string{busy.ID, longCall.ID} {
		if sb, err := shared.c.GetSandbox(ctx, id); err != nil || sb.State != api.StateRunning {
			t.Fatalf("sandbox in use was reaped: %+v %v", sb, err)
		}
	}
	sb, err := shared.c.GetSandbox(ctx, idle.ID)
	if err != nil || sb.State != api.StateTerminated || sb.StateReason != "idle timeout" {
		t.Fatalf("idle sandbox after 6 s with a 2 s timeout: %+v %v", sb, err)
	}
	assertNoLeaks(t, shared, idle.ID)
}
