package e2e

import (
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
)

// crashyDaemon starts a daemon of the test's own, for crash tests: each
// restart may set the FORKBOX_FAULT point it is to die at.
func crashyDaemon(t *testing.T) (*daemon, func(fault string)) {
	t.Helper()
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
	return d, restartWith
}

// dieAt makes the call the daemon is to die in, at its fault point: the
// daemon must die without answering it, and the test waits until it has.
func dieAt(t *testing.T, d *daemon, point, path string, body string) {
	t.Helper()
	// A connection of its own: a pooled one to the daemon before the
	// restart could fail the call without the daemon ever seeing it.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post("http://"+d.addr+path, "application/json", strings.NewReader(body))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("POST %s answered %d although the daemon was to die at %s; log:\n%s", path, resp.StatusCode, point, d.logTail())
	}
	select {
	case <-d.exited:
	case <-ctxT(t).Done():
		t.Fatalf("POST %s failed (%v) but the daemon did not die at %s; log:\n%s", path, err, point, d.logTail())
	}
}

// snapshotDirs lists the committed snapshots in d's snapshot store (the
// crash tests make none but suspend images).
func snapshotDirs(t *testing.T, d *daemon) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(d.dataDir, "snapshots", "snap_*"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range dirs {
		dirs[i] = filepath.Base(dirs[i])
	}
	slices.Sort(dirs)
	return dirs
}

// without returns the names of after that are not in before.
func without(after, before []string) []string {
	var out []string
	for _, s := range after {
		if !slices.Contains(before, s) {
			out = append(out, s)
		}
	}
	return out
}

// TestCrashDuringSuspendAndResume kills the daemon (SIGKILL, from inside, at
// the FORKBOX_FAULT points) in the middle of a suspend and of a resume,
// restarts it, and holds each point to the outcome docs/ARCHITECTURE.md
// gives it ("A crash at any point"): the state the restart settles the
// sandbox in, its processes kept (running) or freed (suspended), and the
// suspend image it keeps. Then the sandbox works with its state, and
// deleting it leaves nothing behind, its images included.
func TestCrashDuringSuspendAndResume(t *testing.T) {
	needRoot(t)
	d, restartWith := crashyDaemon(t)
	for _, tc := range []struct {
		point string
		op    string           // suspend or resume; a resume is of a suspended sandbox
		want  api.SandboxState // the state after the restart
		// newImages is how many suspend images the sandbox has after the
		// restart that it did not have before the crashed call.
		newImages int
	}{
		// Found suspending, its processes alive and no image taken:
		// running, as it was.
		{"suspend:recorded", "suspend", api.StateRunning, 0},
		// Found suspending, its processes alive, a new image committed:
		// running, and the new image dropped.
		{"suspend:imaged", "suspend", api.StateRunning, 0},
		// Found suspending, its processes freed: suspended, with the
		// newest intact image, the one the suspend committed.
		{"suspend:freed", "suspend", api.StateSuspended, 1},
		// Found resuming, nothing restored yet: suspended, its image intact.
		{"resume:recorded", "resume", api.StateSuspended, 0},
		// Found resuming, restored but never recorded running: the
		// restored processes freed, suspended, its image intact.
		{"resume:restored", "resume", api.StateSuspended, 0},
	} {
		t.Run(tc.point, func(t *testing.T) {
			name := "crash-" + strings.ReplaceAll(tc.point, ":", "-")
			sb, err := d.c.CreateSandbox(ctxT(t), api.CreateSandboxRequest{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			noError(t, runCode(t, d, name, py("v = 'kept'")))
			if res, err := d.c.Exec(ctxT(t), name, api.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo file > /workspace/f.txt"}}); err != nil || res.ExitCode != 0 {
				t.Fatalf("write a file: %+v %v", res, err)
			}
			initial := snapshotDirs(t, d)
			if tc.op == "resume" {
				if status, raw := postJSON(t, d, "/v1/sandboxes/"+name+"/suspend", nil); status != 200 {
					t.Fatalf("suspend: %d %s", status, raw)
				}
			}
			before := snapshotDirs(t, d)
			if tc.op == "resume" && len(without(before, initial)) != 1 {
				t.Fatalf("snapshots after a suspend: %v, before it %v: want one suspend image more", before, initial)
			}

			restartWith(tc.point)
			dieAt(t, d, tc.point, "/v1/sandboxes/"+name+"/"+tc.op, "")
			restartWith("")

			got, err := d.c.GetSandbox(ctxT(t), name)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("after the crash at %s the sandbox is %s (%s)", tc.point, got.State, got.StateReason)
			if got.State != tc.want {
				t.Fatalf("after the crash at %s the sandbox is %s (%s), want %s", tc.point, got.State, got.StateReason, tc.want)
			}
			after := snapshotDirs(t, d)
			if added, dropped := without(after, before), without(before, after); len(added) != tc.newImages || len(dropped) != 0 {
				t.Errorf("suspend images after the restart: %v, before the crashed %s %v: want %d new, none dropped", after, tc.op, before, tc.newImages)
			}
			if tc.want == api.StateSuspended {
				// Freed: no process, mount, cgroup, link or directory left.
				assertNoLeaks(t, d, sb.ID)
			}

			// It answers with its state (resumed first when suspended).
			if res := mainResult(t, runCode(t, d, name, py("v"))); res != "'kept'" {
				t.Fatalf("variable after recovery: %s, want 'kept'", res)
			}
			if res, err := d.c.Exec(ctxT(t), name, api.ExecRequest{Cmd: "cat", Args: []string{"/workspace/f.txt"}}); err != nil || res.Stdout != "file\n" {
				t.Fatalf("file after recovery: %+v %v", res, err)
			}
			if _, err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
				t.Fatal(err)
			}
			assertNoLeaks(t, d, sb.ID)
			if left := without(snapshotDirs(t, d), initial); len(left) != 0 {
				t.Errorf("suspend images left after the delete: %v", left)
			}
		})
	}
}

// TestCrashDuringCreate kills the daemon in the middle of a create, before
// and after the sandbox's processes started: the restart finds it creating
// and settles it as error with its leftovers removed (docs/ARCHITECTURE.md,
// "A crash at any point"); it deletes, and its name is free again.
func TestCrashDuringCreate(t *testing.T) {
	needRoot(t)
	d, restartWith := crashyDaemon(t)
	for _, point := range []string{"create:recorded", "create:started"} {
		t.Run(point, func(t *testing.T) {
			name := "crash-" + strings.ReplaceAll(point, ":", "-")
			restartWith(point)
			dieAt(t, d, point, "/v1/sandboxes", `{"name":"`+name+`"}`)
			restartWith("")

			sb, err := d.c.GetSandbox(ctxT(t), name)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("after the crash at %s the sandbox is %s (%s)", point, sb.State, sb.StateReason)
			if sb.State != api.StateError {
				t.Fatalf("after the crash at %s the sandbox is %s (%s), want error", point, sb.State, sb.StateReason)
			}
			// Its leftovers removed: no process, mount, cgroup, link or
			// directory.
			assertNoLeaks(t, d, sb.ID)
			if _, err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
				t.Fatal(err)
			}
			again, err := d.c.CreateSandbox(ctxT(t), api.CreateSandboxRequest{Name: name})
			if err != nil {
				t.Fatalf("create %s again after deleting the failed one: %v", name, err)
			}
			noError(t, runCode(t, d, name, py("1 + 1")))
			if _, err := d.c.DeleteSandbox(ctxT(t), again.ID); err != nil {
				t.Fatal(err)
			}
			assertNoLeaks(t, d, again.ID)
		})
	}
}
