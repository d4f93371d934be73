package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/store"
)

// waitLog waits for the daemon's log to contain want.
func waitLog(t *testing.T, d *daemon, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if b, _ := os.ReadFile(d.log.Name()); strings.Contains(string(b), want) {
			return
		}
	}
	b, _ := os.ReadFile(d.log.Name())
	t.Fatalf("the daemon's log never said %q:\n%s", want, b[max(0, len(b)-3000):])
}

// TestOnExit: stopping the daemon (SIGTERM) with the default policy
// suspends named sessions (they resume after the next start with their
// variables and files) and terminates ephemeral ones, leaving no sandbox
// process; keep leaves them running for the next start to adopt;
// terminate ends them all. The daemon says what it did.
func TestOnExit(t *testing.T) {
	needRoot(t)
	d := &daemon{dataDir: filepath.Join(t.TempDir(), "exit"), defaultOnExit: true}
	var err error
	if d.addr, err = freePort(); err != nil {
		t.Fatal(err)
	}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			d.deleteAll()
			d.stop()
		}
	})
	ctx := ctxT(t)
	named := newSandbox(t, d, api.CreateSandboxRequest{Name: "exit-named"})
	eph := newSandbox(t, d, api.CreateSandboxRequest{})
	noError(t, runCode(t, d, named.ID, py("x = 42")))
	if r := sh(t, d, named.ID, "echo kept > /workspace/f"); r.ExitCode != 0 {
		t.Fatalf("write: %+v", r)
	}
	waitLog(t, d, "on exit (Ctrl-C, SIGTERM): named sessions are suspended")

	d.stop()
	waitLog(t, d, "forkbox daemon stopped (--on-exit=suspend): 1 suspended, 1 terminated, 0 left running")
	for _, id := range []string{named.ID, eph.ID} {
		if p := processesOf(id); p > 0 {
			t.Errorf("sandbox %s has processes after the daemon stopped: %v", id, p)
		}
	}
	assertNoLeaks(t, d, eph.ID)

	d.defaultOnExit, d.args = false, []string{"--on-exit=keep"}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	if sb, err := d.c.GetSandbox(ctx, named.ID); err != nil || sb.State != api.StateSuspended {
		t.Fatalf("named session after the restart: %+v %v, want suspended", sb, err)
	}
	if sb, err := d.c.GetSandbox(ctx, eph.ID); err != nil || sb.State != api.StateTerminated {
		t.Fatalf("ephemeral sandbox after the restart: %+v %v, want terminated", sb, err)
	}
	if ex := runCode(t, d, named.ID, py("x")); len(ex.Results) != 1 || ex.Results[0]["text"] != "42" {
		t.Fatalf("x after suspend at exit and resume: %+v", ex)
	}
	if r := sh(t, d, named.ID, "cat /workspace/f"); r.Stdout != "kept\n" {
		t.Fatalf("file after suspend at exit and resume: %+v", r)
	}

	// keep: all left running and adopted.
	d.stop()
	waitLog(t, d, "forkbox daemon stopped (--on-exit=keep): 0 suspended, 0 terminated, 1 left running")
	if processesOf(named.ID) == 0 {
		t.Fatal("with --on-exit=keep the sandbox's processes are gone")
	}
	d.args = []string{"--on-exit=terminate"}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	if ex := runCode(t, d, named.ID, py("x + 1")); len(ex.Results) != 1 || ex.Results[0]["text"] != "43" {
		t.Fatalf("x after keep and adoption: %+v", ex)
	}

	// terminate: all ended.
	d.stop()
	stopped = true
	waitLog(t, d, "forkbox daemon stopped (--on-exit=terminate): 0 suspended, 1 terminated, 0 left running")
	assertNoLeaks(t, d, named.ID)

	// A bad policy is refused at start.
	out, err := exec.Command(binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", d.dataDir, "--on-exit=pause").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `on-exit: "pause" is not suspend, keep or terminate`) {
		t.Fatalf("--on-exit=pause: %v\n%s", err, out)
	}
}

// TestImageReadiness: a daemon whose images dir lacks the default image
// builds it in the background; meanwhile a create from it answers 503 with
// the build's progress and a Retry-After (never 404), and /healthz and the
// image list say it is building. prepare takes serve's flags, so that
// `make run ARGS=…` builds images where that daemon looks.
func TestImageReadiness(t *testing.T) {
	needRoot(t)
	d := &daemon{dataDir: filepath.Join(t.TempDir(), "fresh"), env: []string{"FORKBOX_IMAGES_DIR=" + filepath.Join(t.TempDir(), "images")}}
	var err error
	if d.addr, err = freePort(); err != nil {
		t.Fatal(err)
	}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })

	var h api.Health
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, _, raw := call(t, d, "GET", "/healthz", "", nil)
		if st != 200 || json.Unmarshal(raw, &h) != nil || h.Status != "ok" {
			t.Fatalf("healthz: %d %s", st, raw)
		}
		if len(h.Images) == 1 && h.Images[0].Name == "python" && h.Images[0].State == api.ImageBuilding {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz never said python is building: %s", raw)
		}
	}
	if h.Chat == nil || h.Chat.Ready || !strings.Contains(h.Chat.Why, "FORKBOX_MODEL") {
		t.Errorf("healthz chat without a model: %+v", h.Chat)
	}
	resp, err := http.Post("http://"+d.addr+"/v1/sandboxes", "application/json", strings.NewReader(`{"image":"python"}`))
	if err != nil {
		t.Fatal(err)
	}
	var e api.Error
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 503 || e.Error.Code != "unavailable" || !strings.Contains(e.Error.Message, `image "python" is being built`) ||
		resp.Header.Get("Retry-After") == "" {
		t.Fatalf("create while the image builds: %d %+v (Retry-After %q); want 503 naming the build, with Retry-After",
			resp.StatusCode, e.Error, resp.Header.Get("Retry-After"))
	}
	st, _, raw := call(t, d, "GET", "/v1/images", "", nil)
	var list api.ImageList
	if st != 200 || json.Unmarshal(raw, &list) != nil || len(list.Building) != 1 || list.Building[0].Name != "python" {
		t.Fatalf("image list while building: %d %s", st, raw)
	}
	ls := exec.Command(binary, "image", "ls")
	ls.Env = append(os.Environ(), "FORKBOX_URL=http://"+d.addr)
	if out, err := ls.CombinedOutput(); err != nil || !strings.Contains(string(out), "image python: being built by the daemon") {
		t.Errorf("forkbox image ls while python builds: %v\n%s", err, out)
	}
	// An image that is not being built is still a plain 404.
	if st, e, _ := call(t, d, "POST", "/v1/sandboxes", `{"image":"nosuchimage"}`, nil); st != 404 {
		t.Errorf("create from an unknown image: %d %+v, want 404", st, e)
	}

	// prepare takes serve's flags and uses those that say where images go.
	out, err := exec.Command(binary, "prepare", "--listen", "127.0.0.1:9", "--data-dir", filepath.Join(t.TempDir(), "p"), "--debug").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "image python ready") {
		t.Fatalf("prepare with serve's flags: %v\n%s", err, out)
	}
}

// TestStopDuringCreateBurst stops the daemon (SIGTERM, --on-exit=terminate)
// while the default pool refills after a burst of creates took its
// members: the refills are recorded but held before their sandboxes start
// (FORKBOX_HOLD_DIR at create:recorded), and go on once the stop has
// begun. The daemon must stop every starter and wait for those
// under way before it applies its policy, so that it exits leaving no
// sandbox process, its exit line counting every sandbox it ended, and no
// live row in its store.
func TestStopDuringCreateBurst(t *testing.T) {
	needRoot(t)
	hold := t.TempDir()
	d := &daemon{dataDir: filepath.Join(t.TempDir(), "burst"), args: []string{"--on-exit=terminate", "--default-pool=2"},
		env: []string{"FORKBOX_HOLD_DIR=" + hold}}
	var err error
	if d.addr, err = freePort(); err != nil {
		t.Fatal(err)
	}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(filepath.Join(hold, "create:recorded"))
		select {
		case <-d.exited:
		default:
			d.deleteAll()
			d.stop()
		}
	})
	waitMetric(t, d, "forkbox_default_pool_ready 2")
	// From now on every create waits at create:recorded.
	if err := os.WriteFile(filepath.Join(hold, "create:recorded"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var created []string
	for i := range 2 {
		sb, err := d.c.CreateSandbox(ctxT(t), api.CreateSandboxRequest{Name: fmt.Sprintf("burst-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, sb.ID)
	}
	// The two refills are recorded and wait, their sandboxes not started yet.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		reached, _ := filepath.Glob(filepath.Join(hold, "create:recorded@*.reached"))
		if len(reached) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool's refills never reached create:recorded (%d did); log:\n%s", len(reached), d.logTail())
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	// Let the stop begin with the refills held, then let them go on.
	select {
	case <-d.exited:
	case <-time.After(2 * time.Second):
	}
	if err := os.Remove(filepath.Join(hold, "create:recorded")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the daemon did not exit; log:\n%s", d.logTail())
	}
	d.log.Close()
	b, _ := os.ReadFile(d.log.Name())
	m := regexp.MustCompile(`forkbox daemon stopped \(--on-exit=terminate\): (\d+) suspended, (\d+) terminated, (\d+) left running`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no exit line in the daemon's log:\n%s", b[max(0, len(b)-3000):])
	}
	if string(m[1]) != "0" || string(m[3]) != "0" {
		t.Errorf("exit line %q: want nothing suspended or left running", m[0])
	}
	// What the store says the daemon ended at its stop is what it counted,
	// and nothing of any sandbox is left on the host.
	st, err := store.Open(context.Background(), "", d.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.List(context.Background(), store.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	stoppedByExit := 0
	for _, sb := range rows {
		if !sb.State.Ended() {
			t.Errorf("sandbox %s is %s after the daemon stopped with --on-exit=terminate", sb.ID, sb.State)
		}
		if sb.StateReason == "daemon stopping" {
			stoppedByExit++
		}
		if n := processesOf(sb.ID); n > 0 {
			t.Errorf("sandbox %s has %d processes after the daemon exited", sb.ID, n)
		}
		assertNoLeaks(t, d, sb.ID)
	}
	if got := fmt.Sprint(stoppedByExit); got != string(m[2]) || stoppedByExit != 4 {
		t.Errorf("exit line %q; the store has %d sandboxes terminated by the stop; want 4 (2 handed out, 2 refills)", m[0], stoppedByExit)
	}
	for _, id := range created {
		if !slices.ContainsFunc(rows, func(sb *store.Sandbox) bool { return sb.ID == id && sb.State == api.StateTerminated }) {
			t.Errorf("created sandbox %s is not terminated", id)
		}
	}
}

// waitMetric waits until d's /metrics has a line want.
func waitMetric(t *testing.T, d *daemon, want string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + d.addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if slices.Contains(strings.Split(string(b), "\n"), want) {
			return
		}
	}
	t.Fatalf("/metrics never said %q; log:\n%s", want, d.logTail())
}
