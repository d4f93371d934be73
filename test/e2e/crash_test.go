package e2e

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
)

// TestCrashDuringSuspendAndResume kills the daemon (SIGKILL, from inside, at
// named points) in the middle of a suspend and of a resume. After a restart
// the sandbox is running or suspended with its state, it works, and deleting
// it leaves nothing behind.
func TestCrashDuringSuspendAndResume(t *testing.T) {
	needRoot(t)
	d, err := startDaemon(filepath.Join(t.TempDir(), "crashy"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })
	restartWith := func(fault string) {
		t.Helper()
		if fault == "" {
			d.env = nil
		} else {
			d.env = []string{"FORKBOX_FAULT=" + fault}
		}
		d.stop()
		if err := d.start(); err != nil {
			t.Fatal(err)
		}
	}
	recovered := func(t *testing.T, name, want string) {
		t.Helper()
		sb, err := d.c.GetSandbox(ctxT(t), name)
		if err != nil || (sb.State != api.StateRunning && sb.State != api.StateSuspended) {
			t.Fatalf("after the crash: %+v %v", sb, err)
		}
		t.Logf("after the crash the sandbox is %s (%s)", sb.State, sb.StateReason)
		// It answers with its state (resuming if it was suspended).
		if got := mainResult(t, runCode(t, d, name, py("v"))); got != want {
			t.Fatalf("variable after recovery: %s, want %s", got, want)
		}
		if res, err := d.c.Exec(ctxT(t), name, api.ExecRequest{Cmd: "cat", Args: []string{"/workspace/f.txt"}}); err != nil || res.Stdout != "file\n" {
			t.Fatalf("file after recovery: %+v %v", res, err)
		}
	}
	for _, point := range []string{"suspend:recorded", "suspend:imaged", "suspend:freed"} {
		t.Run(point, func(t *testing.T) {
			name := "crash-" + strings.ReplaceAll(point, ":", "-")
			sb, err := d.c.CreateSandbox(ctxT(t), api.CreateSandboxRequest{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			noError(t, runCode(t, d, name, py("v = 'kept'")))
			d.c.Exec(ctxT(t), name, api.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo file > /workspace/f.txt"}})
			restartWith(point)
			if status := tryPost(d, "/v1/sandboxes/"+name+"/suspend"); status == 200 {
				t.Fatalf("suspend succeeded although the daemon was to die at %s", point)
			}
			<-d.exited
			restartWith("")
			recovered(t, name, "'kept'")
			if _, err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
				t.Fatal(err)
			}
			assertNoLeaks(t, d, sb.ID)
		})
	}
	for _, point := range []string{"resume:recorded", "resume:restored"} {
		t.Run(point, func(t *testing.T) {
			name := "crash-" + strings.ReplaceAll(point, ":", "-")
			sb, err := d.c.CreateSandbox(ctxT(t), api.CreateSandboxRequest{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			noError(t, runCode(t, d, name, py("v = 'kept'")))
			d.c.Exec(ctxT(t), name, api.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo file > /workspace/f.txt"}})
			if status, raw := postJSON(t, d, "/v1/sandboxes/"+name+"/suspend", nil); status != 200 {
				t.Fatalf("suspend: %d %s", status, raw)
			}
			restartWith(point)
			if status := tryPost(d, "/v1/sandboxes/"+name+"/resume"); status == 200 {
				t.Fatalf("resume succeeded although the daemon was to die at %s", point)
			}
			<-d.exited
			restartWith("")
			recovered(t, name, "'kept'")
			if _, err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
				t.Fatal(err)
			}
			assertNoLeaks(t, d, sb.ID)
		})
	}
}

// tryPost posts an empty body and returns the status, or 0 when the daemon
// died before answering.
func tryPost(d *daemon, path string) int {
	resp, err := http.Post("http://"+d.addr+path, "application/json", nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
