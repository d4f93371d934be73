package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
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

// restartBound is how soon a restarted daemon must answer /healthz,
// whatever it finds (FORKBOX_E2E_RESTART_BOUND to widen it on a slow
// host). A start that waits for a sandbox never answers at all: the bound
// tells a hang from a slow start, it measures no speed.
func restartBound(t *testing.T) time.Duration {
	if v := os.Getenv("FORKBOX_E2E_RESTART_BOUND"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FORKBOX_E2E_RESTART_BOUND: %v", err)
		}
		return d
	}
	return 5 * time.Second
}

// checkRestart fails the test unless d's last start answered /healthz
// within restartBound.
func checkRestart(t *testing.T, d *daemon) {
	t.Helper()
	if bound := restartBound(t); d.upAfter > bound {
		t.Errorf("the restarted daemon answered /healthz after %s; want within %s", d.upAfter.Round(time.Millisecond), bound)
	}
}

// frozenCgroups lists the cgroups of d's sandboxes (those with a directory
// in its data dir) that are frozen.
func frozenCgroups(d *daemon) []string {
	var out []string
	dirs, _ := filepath.Glob(filepath.Join(d.dataDir, "sandboxes", "sbx_*"))
	for _, dir := range dirs {
		id := filepath.Base(dir)
		if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/freezer/forkbox", id, "freezer.state")); err == nil && strings.TrimSpace(string(b)) != "THAWED" {
			out = append(out, id+": freezer "+strings.TrimSpace(string(b)))
		}
		for _, f := range []string{"/sys/fs/cgroup/forkbox", "/sys/fs/cgroup/unified/forkbox"} {
			if b, err := os.ReadFile(filepath.Join(f, id, "cgroup.freeze")); err == nil && strings.TrimSpace(string(b)) == "1" {
				out = append(out, id+": cgroup.freeze 1 in "+f)
			}
		}
	}
	return out
}

// checkSnapshotFiles fails the test unless every snapshot d's API lists
// has its files, and the snapshot store holds no unfinished snapshot and no
// fork mark.
func checkSnapshotFiles(t *testing.T, d *daemon) {
	t.Helper()
	list, err := d.c.ListSnapshots(ctxT(t), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range list.Snapshots {
		if _, err := os.Stat(filepath.Join(d.dataDir, "snapshots", sn.ID, "manifest.json")); err != nil {
			t.Errorf("snapshot %s is listed but its files are not whole: %v", sn.ID, err)
		}
	}
	tmp, _ := filepath.Glob(filepath.Join(d.dataDir, "snapshots", ".tmp*"))
	marks, _ := filepath.Glob(filepath.Join(d.dataDir, "snapshots", ".intents", "*", "*"))
	if len(tmp)+len(marks) > 0 {
		t.Errorf("left in the snapshot store: unfinished %v, fork marks %v", tmp, marks)
	}
}

// TestCrashMatrix kills the daemon (SIGKILL from inside, at the
// FORKBOX_FAULT points) at every step of a checkpoint of either type, a
// fork, a restore and the frozen moment of a suspend, restarts it with the
// same flags, and requires: /healthz answers within restartBound; the
// source sandbox is running with its variables (thawed when the crash
// froze it); a sandbox the cut operation was making is an error with a
// reason, or ended; a fork cut short leaves no branch running and no
// snapshot behind (its caller never learnt its id); no cgroup frozen, no
// unfinished snapshot, every listed snapshot whole; and nothing of an
// ended sandbox left on the host.
func TestCrashMatrix(t *testing.T) {
	needRoot(t)
	d, restartWith := crashyDaemon(t)
	src, err := d.c.CreateSandbox(ctxT(t), api.CreateSandboxRequest{Name: "crash-src"})
	if err != nil {
		t.Fatal(err)
	}
	noError(t, runCode(t, d, src.Name, py("v = 'kept'")))
	base, err := d.c.Checkpoint(ctxT(t), src.Name, api.CheckpointRequest{Type: api.SnapshotMemory, Name: "base"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		op, point string
		// branches: the sandboxes the cut operation made must be ended
		// (a fork's) or error (a restore's); the operation's new snapshot
		// must not be there either way.
		wantNew api.SandboxState
	}{
		{"checkpoint-filesystem", "checkpoint:locked", ""},
		{"checkpoint-filesystem", "checkpoint:frozen", ""},
		{"checkpoint-filesystem", "checkpoint:captured", ""},
		{"checkpoint-memory", "checkpoint:locked", ""},
		{"checkpoint-memory", "checkpoint:frozen", ""},
		{"checkpoint-memory", "checkpoint:captured", ""},
		{"suspend", "checkpoint:frozen", ""},
		{"fork", "checkpoint:frozen", ""},
		{"fork", "fork:snapshotted", ""},
		{"fork", "create:recorded", api.StateTerminated},
		{"fork", "create:started", api.StateTerminated},
		{"fork", "fork:branched", api.StateTerminated},
		{"restore", "create:recorded", api.StateError},
		{"restore", "create:started", api.StateError},
	} {
		t.Run(tc.op+"@"+tc.point, func(t *testing.T) {
			before := snapshotDirs(t, d)
			known := sandboxIDs(t, d)
			path, body := "/v1/sandboxes/"+src.Name+"/", ""
			switch tc.op {
			case "checkpoint-filesystem", "checkpoint-memory":
				path, body = path+"checkpoint", `{"type":"`+strings.TrimPrefix(tc.op, "checkpoint-")+`"}`
			case "suspend":
				path += "suspend"
			case "fork":
				path, body = path+"fork", `{"count":2}`
			case "restore":
				path, body = "/v1/sandboxes", `{"snapshot_id":"`+base.ID+`"}`
			}
			restartWith(tc.point)
			dieAt(t, d, tc.point, path, body)
			restartWith("")
			checkRestart(t, d)

			got, err := d.c.GetSandbox(ctxT(t), src.Name)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != api.StateRunning {
				t.Fatalf("after the crash the source is %s (%s); want running", got.State, got.StateReason)
			}
			if tc.point == "checkpoint:frozen" && !strings.Contains(got.StateReason, "thawed") {
				t.Errorf("source after a crash while frozen: reason %q; want it to say it was thawed", got.StateReason)
			}
			if res := mainResult(t, runCode(t, d, src.Name, py("v"))); res != "'kept'" {
				t.Fatalf("variable after the crash: %s, want 'kept'", res)
			}
			if f := frozenCgroups(d); len(f) > 0 {
				t.Errorf("frozen after the restart: %v", f)
			}
			if added := without(snapshotDirs(t, d), before); len(added) != 0 {
				t.Errorf("snapshots left by the cut %s: %v", tc.op, added)
			}
			checkSnapshotFiles(t, d)
			// What the cut operation made: only the branches and
			// restores it started, each ended or failed, freed.
			list, err := d.c.ListSandboxes(ctxT(t), client.ListOptions{IncludeTerminated: true})
			if err != nil {
				t.Fatal(err)
			}
			made := 0
			for _, sb := range list.Sandboxes {
				if known[sb.ID] {
					continue
				}
				made++
				if tc.wantNew == "" || sb.State != tc.wantNew || sb.StateReason == "" {
					t.Errorf("sandbox %s made by the cut %s: %s (%s); want %q with a reason", sb.ID, tc.op, sb.State, sb.StateReason, tc.wantNew)
				}
				assertNoLeaks(t, d, sb.ID)
				if sb.State == api.StateError {
					if _, err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
						t.Errorf("delete %s: %v", sb.ID, err)
					}
				}
			}
			if tc.wantNew != "" && made == 0 {
				t.Errorf("the cut %s left no trace of the sandbox it was making", tc.op)
			}
		})
	}
}

// sandboxIDs is the set of d's sandboxes, terminated ones included.
func sandboxIDs(t *testing.T, d *daemon) map[string]bool {
	t.Helper()
	list, err := d.c.ListSandboxes(ctxT(t), client.ListOptions{IncludeTerminated: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, sb := range list.Sandboxes {
		out[sb.ID] = true
	}
	return out
}

// criuChildren lists the `criu swrk` processes whose parent is pid.
func criuChildren(pid int) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.Contains(s[:i], "(criu") {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			n, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
			out = append(out, n)
		}
	}
	return out
}

// TestCrashMidDump is the reproduction of a daemon that never came back:
// kill -9 while CRIU dumps a sandbox that holds a 2 GiB array, during a
// memory checkpoint and during a suspend. The sandbox is frozen and CRIU
// goes on as an orphan, and puts the freezer back to frozen when it ends.
// The restarted daemon must answer /healthz within restartBound, wait for
// the orphan, thaw the sandbox and adopt it: it answers a cell with its
// variables, no cgroup stays frozen, no CRIU of its data dir runs on, and
// the cut operation left no snapshot behind.
func TestCrashMidDump(t *testing.T) {
	needRoot(t)
	d, _ := crashyDaemon(t)
	sb, err := d.c.CreateSandbox(ctxT(t), api.CreateSandboxRequest{Name: "crash-big", MemoryMB: i64(3584)})
	if err != nil {
		t.Fatal(err)
	}
	noError(t, runCode(t, d, sb.Name, py("a = b'\\x01' * (2 << 30); v = 42")))
	for _, op := range []struct{ name, path, body string }{
		{"checkpoint", "/v1/sandboxes/" + sb.Name + "/checkpoint", `{"type":"memory"}`},
		{"suspend", "/v1/sandboxes/" + sb.Name + "/suspend", ""},
	} {
		t.Run(op.name, func(t *testing.T) {
			before := snapshotDirs(t, d)
			go func() {
				c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
				if resp, err := c.Post("http://"+d.addr+op.path, "application/json", strings.NewReader(op.body)); err == nil {
					resp.Body.Close()
				}
			}()
			// Until CRIU dumps it: the daemon's CRIU worker runs (it has
			// seized the frozen sandbox's processes; the freezer may read
			// thawed meanwhile, and frozen again when CRIU ends).
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
				if len(criuChildren(d.cmd.Process.Pid)) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no CRIU dump of the sandbox began; log:\n%s", d.logTail())
				}
			}
			time.Sleep(50 * time.Millisecond)
			d.kill9()
			d.log.Close()
			if err := d.start(); err != nil {
				t.Fatal(err)
			}
			checkRestart(t, d)
			got, err := d.c.GetSandbox(ctxT(t), sb.Name)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != api.StateRunning || !strings.Contains(got.StateReason, "thawed") {
				t.Fatalf("after the kill mid-%s: %s (%s); want running, thawed", op.name, got.State, got.StateReason)
			}
			if res := mainResult(t, runCode(t, d, sb.Name, py("v, len(a)"))); res != "(42, 2147483648)" {
				t.Fatalf("variables after the kill mid-%s: %s", op.name, res)
			}
			if f := frozenCgroups(d); len(f) > 0 {
				t.Errorf("frozen after the restart: %v", f)
			}
			if added := without(snapshotDirs(t, d), before); len(added) != 0 {
				t.Errorf("snapshots left by the cut %s: %v", op.name, added)
			}
			checkSnapshotFiles(t, d)
		})
	}
	if _, err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	assertNoLeaks(t, d, sb.ID)
}
