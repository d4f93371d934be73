package e2e

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

func waitState(t *testing.T, d *daemon, id string, want api.SandboxState, within time.Duration) *api.Sandbox {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		sb, err := d.c.GetSandbox(ctxT(t), id)
		if err == nil && sb.State == want {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s did not become %s within %s: %+v %v", id, want, within, sb, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func processesOf(id string) int {
	out, _ := exec.Command("sh", "-c", "grep -l '/"+id+"$' /proc/[0-9]*/cgroup 2>/dev/null | wc -l").Output()
	n := 0
	for _, c := range strings.TrimSpace(string(out)) {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestIdleSuspendAutoResume: a named sandbox that goes idle is suspended
// (its processes gone from the host) and resumes by itself on the next call
// with its variables, files and installed package.
func TestIdleSuspendAutoResume(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{Name: "idle-session", TimeoutSecs: i64(2)})
	noError(t, runCode(t, shared, sb.ID, py("revenue = {'north': 120, 'south': 95}")))
	sh(t, shared, sb.ID, "echo kept > /workspace/notes.txt")
	// A small package built here (there is no package index), installed into the user site.
	res := sh(t, shared, sb.ID, `set -e
mkdir -p /tmp/pkg/tinypkg && cd /tmp/pkg
printf 'def hello():\n    return "hello from tinypkg"\n' > tinypkg/__init__.py
printf 'from setuptools import setup\nsetup(name="tinypkg", version="1.0", packages=["tinypkg"])\n' > setup.py
python3 -m pip install --user --break-system-packages --no-index --no-build-isolation --no-deps . >/tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 1; }
python3 -c 'import tinypkg; print(tinypkg.hello())'`)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "hello from tinypkg") {
		t.Fatalf("install a package: %+v", res)
	}
	got := waitState(t, shared, sb.ID, api.StateSuspended, 30*time.Second)
	if got.StateReason != "idle timeout" {
		t.Fatalf("suspend reason %q", got.StateReason)
	}
	if n := processesOf(sb.ID); n != 0 {
		t.Fatalf("%d processes of a suspended sandbox remain on the host", n)
	}
	// Any call resumes it.
	ex := runCode(t, shared, "idle-session", py("import tinypkg\nprint(tinypkg.hello(), open('/workspace/notes.txt').read().strip())\nrevenue['north'] + revenue['south']"))
	if mainResult(t, ex) != "215" || strings.Join(ex.Logs.Stdout, "") != "hello from tinypkg kept\n" {
		t.Fatalf("after resume: %+v", ex)
	}
	if sb2, _ := shared.c.GetSandbox(ctxT(t), sb.ID); sb2.State != api.StateRunning || sb2.Name != "idle-session" {
		t.Fatalf("after resume: %+v", sb2)
	}
}

// TestSuspendResumeCycles: 20 explicit suspend/resume cycles keep state.
func TestSuspendResumeCycles(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{Name: "cycler", AutoResume: boolp(false)})
	noError(t, runCode(t, shared, sb.ID, py("n = 0")))
	for i := 1; i <= 20; i++ {
		if status, raw := postJSON(t, shared, "/v1/sandboxes/cycler/suspend", nil); status != 200 {
			t.Fatalf("cycle %d suspend: %d %s", i, status, raw)
		}
		// auto_resume: false → calls are refused while suspended.
		if status, raw := postJSON(t, shared, "/v1/sandboxes/cycler/code", py("n")); status != 409 || !strings.Contains(string(raw), "suspended") {
			t.Fatalf("cycle %d call while suspended: %d %s", i, status, raw)
		}
		if status, raw := postJSON(t, shared, "/v1/sandboxes/cycler/resume", nil); status != 200 {
			t.Fatalf("cycle %d resume: %d %s", i, status, raw)
		}
		ex := runCode(t, shared, "cycler", py("n += 1\nopen('/workspace/cycles.txt', 'a').write(f'{n}\\n')\nn"))
		if mainResult(t, ex) != itoa(i) {
			t.Fatalf("cycle %d: n = %s", i, mainResult(t, ex))
		}
	}
	res := sh(t, shared, "cycler", "wc -l < /workspace/cycles.txt")
	if strings.TrimSpace(res.Stdout) != "20" {
		t.Fatalf("file after 20 cycles: %q", res.Stdout)
	}
	// Resume of a running sandbox is a conflict.
	if status, raw := postJSON(t, shared, "/v1/sandboxes/cycler/resume", nil); status != 409 {
		t.Fatalf("resume of a running sandbox: %d %s", status, raw)
	}
	// Only the latest suspend image is kept; none is listed as a snapshot.
	for _, s := range listSnapshots(t, shared) {
		if s.SandboxID == sb.ID {
			t.Fatalf("suspend image listed as a snapshot: %+v", s)
		}
	}
}

// TestSuspendWithStarvedAgent: a sandbox whose CPUs its own code keeps busy
// (a tenth of a CPU, a dozen busy loops) starves its agent, which then
// closes the daemon's connections late; suspends right after a call still
// succeed every time, and the sandbox answers after each resume.
func TestSuspendWithStarvedAgent(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{CPUs: f64(0.1), AutoResume: boolp(false)})
	res := sh(t, shared, sb.ID, "for i in $(seq 12); do (while :; do :; done) & done; echo kept > /workspace/mark")
	if res.ExitCode != 0 {
		t.Fatalf("start the busy loops: %+v", res)
	}
	path := "/v1/sandboxes/" + sb.ID
	for i := 1; i <= 3; i++ {
		// A call just before the suspend leaves a connection for the
		// starved agent to close (an earlier daemon failed about one
		// suspend in three here: CRIU met the agent's end still open).
		if r := sh(t, shared, sb.ID, "cat /workspace/mark"); r.Stdout != "kept\n" {
			t.Fatalf("cycle %d: %+v", i, r)
		}
		if status, raw := postJSON(t, shared, path+"/suspend", nil); status != 200 {
			t.Fatalf("cycle %d suspend: %d %s", i, status, raw)
		}
		if status, raw := postJSON(t, shared, path+"/resume", nil); status != 200 {
			t.Fatalf("cycle %d resume: %d %s", i, status, raw)
		}
	}
}

func boolp(v bool) *bool { return &v }

func itoa(i int) string { return strconv.Itoa(i) }

// TestBusyNamedSandboxNotSuspended: calls every second for 10 s keep a named
// sandbox with a 2 s idle timeout running.
func TestBusyNamedSandboxNotSuspended(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{Name: "busy-session", TimeoutSecs: i64(2)})
	for i := 0; i < 10; i++ {
		if res := run(t, shared, sb.ID, "true"); res.ExitCode != 0 {
			t.Fatalf("call %d: %+v", i, res)
		}
		time.Sleep(time.Second)
		if got, err := shared.c.GetSandbox(ctxT(t), sb.ID); err != nil || got.State != api.StateRunning {
			t.Fatalf("busy sandbox after %d s: %+v %v", i+1, got, err)
		}
	}
}

// TestMaxLifetimeEndsSuspended: max_lifetime_secs terminates a sandbox even
// while it is suspended; usage reports the time in each state.
func TestMaxLifetimeEndsSuspended(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{Name: "short-lived", TimeoutSecs: i64(1), MaxLifetimeSecs: i64(8)})
	noError(t, runCode(t, shared, sb.ID, py("1")))
	got := waitState(t, shared, sb.ID, api.StateSuspended, 30*time.Second)
	if got.Usage == nil || got.Usage.RunningSeconds <= 0 {
		t.Fatalf("usage of a suspended sandbox: %+v", got.Usage)
	}
	_, _, raw := call(t, shared, "GET", "/metrics", "", nil)
	if !strings.Contains(string(raw), `forkbox_sandboxes{state="suspended"}`) ||
		!strings.Contains(string(raw), `forkbox_sandbox_state_seconds{name="short-lived",sandbox="`+sb.ID+`",state="suspended"}`) {
		t.Fatal("metrics lack the suspended count or the sandbox's time suspended")
	}
	got = waitState(t, shared, sb.ID, api.StateTerminated, 30*time.Second)
	if got.StateReason != "max lifetime reached" {
		t.Fatalf("reason %q", got.StateReason)
	}
	assertNoLeaks(t, shared, sb.ID)
}
