package e2e

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestExecPython(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	if sb.State != api.StateRunning || sb.Image != "python" {
		t.Fatalf("new sandbox: state %q image %q, want running python", sb.State, sb.Image)
	}
	res := run(t, shared, sb.ID, "python3", "-c", "print(6*7)")
	if res.Stdout != "42\n" || res.ExitCode != 0 {
		t.Fatalf("python3 -c 'print(6*7)': %+v", res)
	}
	// The image promises the data-science stack.
	res = run(t, shared, sb.ID, "python3", "-c", "import ipykernel, pandas, numpy, matplotlib, scipy, seaborn, sklearn; print('ok')")
	if strings.TrimSpace(res.Stdout) != "ok" {
		t.Fatalf("import the data-science stack: %+v", res)
	}
	// The working directory is /workspace and it is the user's.
	res = sh(t, shared, sb.ID, "pwd; touch mine && stat -c %u mine")
	if res.Stdout != "/workspace\n1000\n" {
		t.Fatalf("cwd and ownership: %q", res.Stdout)
	}
}

func TestExecExitCodesAndStderr(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	res := sh(t, shared, sb.ID, "echo out; echo oops >&2; exit 3")
	if res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "oops\n" {
		t.Fatalf("exit 3: %+v", res)
	}
	res = run(t, shared, sb.ID, "no-such-command")
	if res.ExitCode != 127 || !strings.Contains(res.Stderr, "not found") {
		t.Fatalf("missing command: %+v", res)
	}
	// stdin, env and cwd reach the command.
	res, err := shared.c.Exec(ctxT(t), sb.ID, api.ExecRequest{
		Cmd: "sh", Args: []string{"-c", "cat; echo $GREETING; pwd"}, Stdin: "from stdin\n",
		Env: map[string]string{"GREETING": "hello"}, Cwd: "/tmp",
	})
	if err != nil || res.Stdout != "from stdin\nhello\n/tmp\n" {
		t.Fatalf("stdin/env/cwd: %+v %v", res, err)
	}
}

func TestExecTimeoutKills(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	res, err := shared.c.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: "sleep", Args: []string{"30"}, TimeoutSecs: f64(0.5)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode != -1 || res.Signal != "SIGKILL" || !strings.Contains(res.Error, "timed out") {
		t.Fatalf("timeout result: %+v", res)
	}
	// The process is gone and the sandbox still works.
	res = sh(t, shared, sb.ID, "ps -e -o comm= | grep -c '^sleep$' || true")
	if strings.TrimSpace(res.Stdout) != "0" {
		t.Fatalf("sleep still running after timeout: %q", res.Stdout)
	}
}

// TestExecStreamsBeforeEnd proves that output arrives while the command runs:
// the command waits for a file that the test writes only after it has
// received the first line through the stream. Without streaming it would
// never end (and the call would time out).
func TestExecStreamsBeforeEnd(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	var (
		mu     sync.Mutex
		out    strings.Builder
		errOut strings.Builder
		once   sync.Once
		wrote  = make(chan error, 1)
	)
	script := `echo first; echo to-stderr >&2; while [ ! -f /workspace/go-on ]; do sleep 0.05; done; echo second`
	res, err := shared.c.ExecStream(ctxT(t), sb.ID, api.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, TimeoutSecs: f64(60)},
		func(b []byte) {
			mu.Lock()
			out.Write(b)
			seen := strings.Contains(out.String(), "first")
			mu.Unlock()
			if seen {
				once.Do(func() {
					go func() {
						_, err := shared.c.WriteFile(context.Background(), sb.ID, "/workspace/go-on", strings.NewReader("1"), 0o644)
						wrote <- err
					}()
				})
			}
		},
		func(b []byte) { mu.Lock(); errOut.Write(b); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("write go-on: %v", err)
	}
	if res.TimedOut || res.ExitCode != 0 {
		t.Fatalf("stream result: %+v (stdout %q)", res, out.String())
	}
	if out.String() != "first\nsecond\n" || errOut.String() != "to-stderr\n" {
		t.Fatalf("streamed stdout %q stderr %q", out.String(), errOut.String())
	}
}

func TestExecOnUnknownAndTerminated(t *testing.T) {
	needRoot(t)
	_, err := shared.c.Exec(ctxT(t), "sbx_doesnotexist", api.ExecRequest{Cmd: "true"})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("exec on unknown sandbox: %v, want not found", err)
	}
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	if _, err := shared.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = shared.c.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: "true"})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("exec on terminated sandbox: %v, want 409 saying terminated", err)
	}
	got, err := shared.c.GetSandbox(ctxT(t), sb.ID)
	if err != nil || got.State != api.StateTerminated || got.TerminatedAt == nil {
		t.Fatalf("terminated sandbox: %+v %v", got, err)
	}
	assertNoLeaks(t, shared, sb.ID)
}

func TestCreateGetListDelete(t *testing.T) {
	needRoot(t)
	ctx := ctxT(t)
	name := "e2e-crud-" + time.Now().Format("150405")
	sb := newSandbox(t, shared, api.CreateSandboxRequest{Name: name, CPUs: f64(0.5), MemoryMB: i64(256), DiskMB: i64(128),
		Labels: map[string]string{"team": "e2e"}, Env: map[string]string{"FOO": "bar"}})
	if sb.CPUs != 0.5 || sb.MemoryMB != 256 || sb.DiskMB != 128 || sb.Labels["team"] != "e2e" {
		t.Fatalf("created: %+v", sb)
	}
	byName, err := shared.c.GetSandbox(ctx, name)
	if err != nil || byName.ID != sb.ID {
		t.Fatalf("get by name: %+v %v", byName, err)
	}
	if byName.Usage == nil || byName.Usage.MemoryBytes <= 0 {
		t.Fatalf("running sandbox has no usage: %+v", byName.Usage)
	}
	if res := run(t, shared, name, "sh", "-c", "echo $FOO; hostname"); res.Stdout != "bar\n"+name+"\n" {
		t.Fatalf("env and hostname: %q", res.Stdout)
	}
	// The cgroup limits are the ones asked for.
	if res := sh(t, shared, name, "cat /proc/self/cgroup | head -3; nproc"); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	list, err := shared.c.ListSandboxes(ctx, clientListLabel("team", "e2e"))
	if err != nil || len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Fatalf("list by label: %+v %v", list, err)
	}
	// A second live sandbox with the same name is a conflict.
	_, err = shared.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: name})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate name: %v, want conflict", err)
	}
	del, err := shared.c.DeleteSandbox(ctx, name)
	if err != nil || del.State != api.StateTerminated {
		t.Fatalf("delete: %+v %v", del, err)
	}
	assertNoLeaks(t, shared, sb.ID)
	// The name is free again.
	again := newSandbox(t, shared, api.CreateSandboxRequest{Name: name})
	if again.ID == sb.ID {
		t.Fatal("reused id")
	}
}

// TestAgentReapsOrphans: processes whose parent died are re-parented to the
// agent (PID 1), which must reap them so no zombie piles up.
func TestAgentReapsOrphans(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	for i := 0; i < 3; i++ {
		sh(t, shared, sb.ID, "(sleep 0.2 &) ; (sleep 0.1 & sleep 0.1 &) ; true")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := run(t, shared, sb.ID, "ps", "-e", "-o", "stat=,ppid=,comm=")
		if !strings.Contains(res.Stdout, "Z") && !strings.Contains(res.Stdout, "sleep") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphans not reaped:\n%s", res.Stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
