package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	fbdaemon "github.com/forkbox/forkbox/internal/daemon"
	"golang.org/x/sys/unix"
)

// TestMain removes the binary built for the benchmarks (if any) at the end.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// keepTemp says whether to keep data dirs and daemon logs for inspection.
var keepTemp = os.Getenv("FORKBOX_BENCH_KEEP") == "1"

// skip skips b, saying why on stdout too: without -v, go test shows no
// skip messages of benchmarks.
func skip(b *testing.B, why string) {
	b.Helper()
	fmt.Printf("SKIP %s: %s\n", b.Name(), why)
	b.Skip(why)
}

// requireRoot skips b unless the process runs as root.
func requireRoot(b *testing.B) {
	b.Helper()
	if os.Geteuid() != 0 {
		skip(b, "forkbox benchmarks need root (namespaces, cgroups, mounts); run them as root, e.g. `sudo make bench`")
	}
}

var (
	binOnce  sync.Once
	binPath  string
	binSkip  string // non-empty: skip with this message
	binErr   error
	builtDir string // temp dir of a binary built here, removed by TestMain
)

// forkboxBinary returns the forkbox binary to benchmark: $FORKBOX_BIN, else
// one built from this checkout (CGO_ENABLED=0: it is bind-mounted into
// sandboxes). It skips b when there is no binary and none can be built.
func forkboxBinary(b *testing.B) string {
	b.Helper()
	binOnce.Do(func() {
		binPath, binSkip, binErr = locateBinary()
		if binErr == nil && binSkip == "" && os.Geteuid() == 0 {
			binErr = prepareImages(binPath)
		}
	})
	if binSkip != "" {
		skip(b, binSkip)
	}
	if binErr != nil {
		b.Fatal(binErr)
	}
	return binPath
}

// prepareImages points the benchmarks' daemons at one images directory (the
// default one, unless FORKBOX_IMAGES_DIR names another) holding the default
// image, building it if needed (make bench runs forkbox prepare first).
func prepareImages(bin string) error {
	if os.Getenv("FORKBOX_IMAGES_DIR") == "" {
		os.Setenv("FORKBOX_IMAGES_DIR", filepath.Join(fbdaemon.DefaultDataDir(), "images"))
	}
	if out, err := exec.Command(bin, "prepare").CombinedOutput(); err != nil {
		return fmt.Errorf("forkbox prepare: %v\n%s", err, out)
	}
	return nil
}

func locateBinary() (path, skip string, err error) {
	if p := os.Getenv("FORKBOX_BIN"); p != "" {
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			return "", fmt.Sprintf("forkbox binary missing: FORKBOX_BIN=%s does not exist (run `make build`, or unset FORKBOX_BIN to build one)", p), nil
		}
		return p, "", nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = "/usr/local/go/bin/go"
		if _, err := os.Stat(goTool); err != nil {
			return "", "forkbox binary missing: FORKBOX_BIN is unset and no go tool was found to build one", nil
		}
	}
	root, err := filepath.Abs("..") // go test runs in the package dir, bench/
	if err != nil {
		return "", "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Sprintf("forkbox binary missing: FORKBOX_BIN is unset and %s is not the module root", root), nil
	}
	builtDir, err = os.MkdirTemp("", "forkbox-bench-bin-")
	if err != nil {
		return "", "", err
	}
	out := filepath.Join(builtDir, "forkbox")
	cmd := exec.Command(goTool, "build", "-trimpath", "-o", out, "./cmd/forkbox")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("building forkbox (CGO_ENABLED=0 go build ./cmd/forkbox): %v\n%s", err, msg)
	}
	return out, "", nil
}

// servesFlag reports whether bin's serve command has flag, so benchmarks run
// against a baseline binary that predates it (FORKBOX_BIN=<older build>).
func servesFlag(b *testing.B, bin, flag string) bool {
	b.Helper()
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		b.Fatalf("%s serve --help: %v\n%s", bin, err, out)
	}
	return strings.Contains(string(out), flag+"=") || strings.Contains(string(out), flag+" ")
}

// daemon is a forkbox daemon started for one benchmark.
type daemon struct {
	url     string
	pid     int
	client  *client.Client
	dir     string // temp root: data/ and daemon.log
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	// ownsDir: dir is this daemon's to remove (not a restart's).
	ownsDir bool
	stopped bool
}

// startDaemon starts `forkbox serve` on a free loopback port with a fresh
// data dir and waits for /healthz. At the end of b it deletes every sandbox
// through the API, then stops the daemon and removes its data dir. debug
// turns on the daemon's --debug logging (per-request lines and per-step
// create timings, which the create benchmark parses).
func startDaemon(b *testing.B, debug bool) *daemon {
	b.Helper()
	return startDaemonWith(b, daemonOpts{debug: debug})
}

// daemonOpts vary a benchmark's daemon.
type daemonOpts struct {
	debug bool
	// addr is where it listens (default: a free loopback port).
	addr string
	// args are more flags of serve; env more environment (an
	// FORKBOX_API_KEY=… in it is also the client's key).
	args, env []string
	// netns runs it in that network namespace (only: see testnet.Command).
	netns string
	// dir reuses a temp root of an earlier daemon (a restart); its data
	// dir is kept, and removed by the first daemon's cleanup.
	dir string
}

func startDaemonWith(b *testing.B, o daemonOpts) *daemon {
	b.Helper()
	requireRoot(b)
	bin := forkboxBinary(b)

	dir, owned := o.dir, o.dir == ""
	if owned {
		var err error
		if dir, err = os.MkdirTemp("", "forkbox-bench-"); err != nil {
			b.Fatal(err)
		}
	}
	d := &daemon{dir: dir, logPath: filepath.Join(dir, "daemon.log"), exited: make(chan struct{}), ownsDir: owned}
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()

	addr := o.addr
	if addr == "" {
		if addr, err = freeLoopbackAddr(); err != nil {
			b.Fatal(err)
		}
	}
	args := []string{"serve", "--listen", addr, "--data-dir", filepath.Join(dir, "data")}
	// The default pool is off unless a benchmark turns it on: its ready
	// sandboxes would serve the creates other benchmarks time as cold
	// ones, and their kernels starting in the background are load.
	// A baseline binary from before the default pool has no such flag
	// (and no pool to turn off).
	if !slices.ContainsFunc(o.args, func(a string) bool { return strings.HasPrefix(a, "--default-pool") }) && servesFlag(b, bin, "--default-pool") {
		args = append(args, "--default-pool=0")
	}
	args = append(args, o.args...)
	if o.debug {
		args = append(args, "--debug")
	}
	d.cmd = exec.Command(bin, args...)
	if o.netns != "" {
		d.cmd = exec.Command("nsenter", append([]string{"--net=/run/netns/" + o.netns, "--", bin}, args...)...)
	}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "FORKBOX_API_KEY=") }), o.env...)
	// Should this test binary die without cleaning up, take the daemon along.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		b.Fatalf("start daemon: %v", err)
	}
	d.pid = d.cmd.Process.Pid
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	d.url = "http://" + addr
	opts := []client.Option{client.WithHTTPClient(&http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute},
	})}
	for _, kv := range o.env {
		if k, ok := strings.CutPrefix(kv, "FORKBOX_API_KEY="); ok {
			opts = append(opts, client.WithAPIKey(k))
		}
	}
	d.client = client.New(d.url, opts...)
	b.Cleanup(func() { d.stop(b) })

	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := d.client.Health(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-d.exited:
			b.Fatalf("daemon exited before it was healthy; log:\n%s", d.logTail(40))
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("daemon not healthy after 90s: %v; log:\n%s", err, d.logTail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Logf("daemon pid %d at %s (binary %s, log %s)", d.pid, d.url, bin, d.logPath)
	return d
}

// stop deletes every sandbox that is not terminated (through the API, so the
// daemon frees mounts, cgroups and loop devices), stops the daemon, and
// removes the temp dir.
func (d *daemon) stop(b *testing.B) {
	if !d.stopped {
		d.stopped = true
		d.shutdown(b)
	}
	if !d.ownsDir {
		return
	}
	if n := detachMountsUnder(d.dir); n > 0 {
		b.Errorf("cleanup: %d mounts were left under %s after deleting every sandbox (detached them)", n, d.dir)
	}
	if keepTemp {
		b.Logf("kept %s (FORKBOX_BENCH_KEEP=1)", d.dir)
		return
	}
	if err := os.RemoveAll(d.dir); err != nil {
		b.Logf("cleanup: remove %s: %v", d.dir, err)
	}
}

// halt stops the daemon with SIGTERM and leaves its sandboxes and data dir
// (to restart it, or to let a cluster find it down).
func (d *daemon) halt(b *testing.B) {
	d.stopped = true
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		b.Logf("daemon did not stop on SIGTERM within 15s; killing it")
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// shutdown deletes every sandbox and stops the daemon.
func (d *daemon) shutdown(b *testing.B) {
	select {
	case <-d.exited:
		b.Errorf("daemon exited during the benchmark; log:\n%s", d.logTail(40))
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		list, err := d.client.ListSandboxes(ctx, client.ListOptions{})
		if err != nil {
			b.Errorf("cleanup: list sandboxes: %v", err)
		} else {
			n := 0
			for _, sb := range list.Sandboxes {
				if sb.State == api.StateTerminated {
					continue
				}
				n++
				if _, err := d.client.DeleteSandbox(ctx, sb.ID); err != nil {
					b.Errorf("cleanup: delete %s: %v", sb.ID, err)
				}
			}
			if n > 0 {
				b.Logf("cleanup: deleted %d sandboxes left by the benchmark", n)
			}
		}
		cancel()
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(15 * time.Second):
			b.Logf("daemon did not stop on SIGTERM within 15s; killing it")
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
	}
}

// detachMountsUnder lazily unmounts anything mounted under dir, deepest
// first, and returns how many there were.
func detachMountsUnder(dir string) int {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0
	}
	var mps []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mps = append(mps, mp)
		}
	}
	slices.SortFunc(mps, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range mps {
		_ = unix.Unmount(mp, unix.MNT_DETACH)
	}
	return len(mps)
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				sb.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

// logTail returns the last n lines of the daemon's log.
func (d *daemon) logTail(n int) string {
	data, _ := os.ReadFile(d.logPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// rssBytes returns the daemon's resident set size (VmRSS).
func (d *daemon) rssBytes() (int64, error) { return procStatusBytes(d.pid, "VmRSS") }

// procStatusBytes reads a "Key:   123 kB" field of /proc/<pid>/status.
func procStatusBytes(pid int, key string) (int64, error) {
	return kbField(fmt.Sprintf("/proc/%d/status", pid), key)
}

// memAvailableBytes returns the host's MemAvailable.
func memAvailableBytes() (int64, error) { return kbField("/proc/meminfo", "MemAvailable") }

func kbField(path, key string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			break
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, err
		}
		return n << 10, nil
	}
	return 0, fmt.Errorf("%s: no %s field", path, key)
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port that was free a
// moment ago.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// createSandbox creates a sandbox with the default image.
func (d *daemon) createSandbox(b *testing.B) *api.Sandbox {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := d.client.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		b.Fatalf("create sandbox: %v\ndaemon log:\n%s", err, d.logTail(20))
	}
	return sb
}

// deleteSandbox deletes a sandbox, failing b on error.
func (d *daemon) deleteSandbox(b *testing.B, id string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := d.client.DeleteSandbox(ctx, id); err != nil {
		b.Fatalf("delete sandbox %s: %v", id, err)
	}
}

// execTrue runs `true` in a sandbox and checks it exited 0.
func (d *daemon) execTrue(ctx context.Context, id string) (*api.ExecResult, error) {
	res, err := d.client.Exec(ctx, id, api.ExecRequest{Cmd: "true"})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return res, fmt.Errorf("`true` exited %d: %s %s", res.ExitCode, res.Error, res.Stderr)
	}
	return res, nil
}

// daemonLog holds what the create benchmark reads from the daemon's log:
// per-sandbox "sandbox created ... ms=" values and --debug step timings.
type daemonLog struct {
	createdMS map[string]float64      // sandbox id -> ms
	steps     map[string][]stepTiming // sandbox id -> cumulative steps
	httpMS    map[string][]float64    // "METHOD /v1/sandboxes/{id}/..." -> handler ms, in log order
}

type stepTiming struct {
	name string
	us   float64 // µs since the start of runtime create
}

var (
	logMsgRE  = regexp.MustCompile(`msg=("(?:[^"\\]|\\.)*"|\S+)`)
	logKVRE   = regexp.MustCompile(`([\w.\-]+)=("(?:[^"\\]|\\.)*"|\S*)`)
	sbxPathRE = regexp.MustCompile(`/v1/sandboxes/[^/ ]+`)
)

// parseDaemonLog reads the daemon's slog text log. It is tolerant: lines it
// does not understand are skipped, so a changed log format only loses the
// breakdown, never the benchmark.
func parseDaemonLog(path string) (*daemonLog, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dl := &daemonLog{createdMS: map[string]float64{}, steps: map[string][]stepTiming{}, httpMS: map[string][]float64{}}
	for _, line := range strings.Split(string(data), "\n") {
		m := logMsgRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		msg := strings.Trim(m[1], `"`)
		rest := line[strings.Index(line, m[0])+len(m[0]):]
		kvs := logKVRE.FindAllStringSubmatch(rest, -1)
		get := func(k string) string {
			for _, kv := range kvs {
				if kv[1] == k {
					return strings.Trim(kv[2], `"`)
				}
			}
			return ""
		}
		switch {
		case msg == "sandbox created":
			if v, err := strconv.ParseFloat(get("ms"), 64); err == nil {
				dl.createdMS[get("sandbox")] = v
			}
		case strings.HasPrefix(msg, "sandbox create steps"):
			var st []stepTiming
			for _, kv := range kvs {
				if kv[1] == "sandbox" {
					continue
				}
				if v, err := strconv.ParseFloat(kv[2], 64); err == nil {
					st = append(st, stepTiming{kv[1], v})
				}
			}
			dl.steps[get("sandbox")] = st
		case msg == "http":
			path := sbxPathRE.ReplaceAllString(get("path"), "/v1/sandboxes/{id}")
			if v, err := strconv.ParseFloat(get("ms"), 64); err == nil {
				key := get("method") + " " + path
				dl.httpMS[key] = append(dl.httpMS[key], v)
			}
		}
	}
	return dl, nil
}

func TestParseDaemonLog(t *testing.T) {
	log := `forkbox daemon listening on http://127.0.0.1:1 (no API key: loopback only), data in /x
time=2026-01-01T00:00:00.000Z level=DEBUG msg="sandbox create steps (µs since start)" sandbox=sbx_a disk=5614 overlay=7326 agent-start=3000 ready=154451
time=2026-01-01T00:00:00.000Z level=INFO msg="sandbox created" sandbox=sbx_a name="" ms=179
time=2026-01-01T00:00:00.000Z level=DEBUG msg=http method=POST path=/v1/sandboxes code=201 ms=181 err=<nil>
time=2026-01-01T00:00:00.000Z level=DEBUG msg=http method=POST path=/v1/sandboxes/sbx_a/exec code=200 ms=12 err=<nil>
not a log line
`
	path := filepath.Join(t.TempDir(), "daemon.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	dl, err := parseDaemonLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := dl.createdMS["sbx_a"]; got != 179 {
		t.Errorf("created ms = %v, want 179", got)
	}
	if got := dl.httpMS["POST /v1/sandboxes"]; len(got) != 1 || got[0] != 181 {
		t.Errorf("create handler ms = %v, want [181]", got)
	}
	if got := dl.httpMS["POST /v1/sandboxes/{id}/exec"]; len(got) != 1 || got[0] != 12 {
		t.Errorf("exec handler ms = %v, want [12]", got)
	}
	steps := stepDeltas(dl, map[string]bool{"sbx_a": true})
	var names []string
	for _, s := range steps {
		names = append(names, s.name)
	}
	if strings.Join(names, ",") != "agent-start,disk,overlay,ready" {
		t.Fatalf("steps = %v, want agent-start,disk,overlay,ready", names)
	}
	if got := steps[2].delta[0]; got != (7326-5614)*time.Microsecond {
		t.Errorf("overlay step = %v, want %v", got, (7326-5614)*time.Microsecond)
	}
}
