// Package e2e tests forkbox end to end: the real binary runs as a daemon (as
// root, with real namespaces, cgroups, mounts and networking) and the tests
// talk to it through the Go SDK, raw HTTP and the CLI. Run as root; as any
// other user every test skips with the reason.
package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	fbdaemon "github.com/forkbox/forkbox/internal/daemon"
)

var (
	binary  string // the forkbox binary under test
	shared  *daemon
	skipWhy string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Geteuid() != 0 {
		skipWhy = "end-to-end tests need root (namespaces, cgroups, mounts); CI runs them as root"
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "forkbox-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	binary = os.Getenv("FORKBOX_BIN")
	if binary == "" {
		binary = filepath.Join(tmp, "forkbox")
		cmd := exec.Command("go", "build", "-o", binary, "../../cmd/forkbox")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build forkbox: %v\n%s", err, out)
			return 1
		}
	}
	if err := prepareImages(binary); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d, err := startDaemon(filepath.Join(tmp, "shared"), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start daemon:", err)
		return 1
	}
	shared = d
	code := m.Run()
	d.deleteAll()
	d.stop()
	return code
}

// prepareImages points every test daemon at one images directory (the
// default one of `forkbox prepare`, unless FORKBOX_IMAGES_DIR names another)
// and builds the default image there: minutes once on a new machine (make
// test runs prepare first), under a second when cached.
func prepareImages(binary string) error {
	if os.Getenv("FORKBOX_IMAGES_DIR") == "" {
		os.Setenv("FORKBOX_IMAGES_DIR", filepath.Join(fbdaemon.DefaultDataDir(), "images"))
	}
	out, err := exec.Command(binary, "prepare").CombinedOutput()
	if err != nil {
		return fmt.Errorf("forkbox prepare: %v\n%s", err, out)
	}
	return nil
}

// daemon is a forkbox daemon process run by a test.
type daemon struct {
	dataDir string
	addr    string
	env     []string
	args    []string // more flags of serve
	// defaultOnExit: no --on-exit flag (the daemon's default policy);
	// otherwise --on-exit=keep unless args has one.
	defaultOnExit bool
	// netns, when set, runs the daemon in that network namespace (a name
	// under /run/netns), as if on a host of its own.
	netns  string
	cmd    *exec.Cmd
	log    *os.File
	c      *client.Client
	exited chan struct{}
	// upAfter is how long its last start took to answer /healthz.
	upAfter time.Duration
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startDaemon starts `forkbox serve` on a free port with dataDir.
func startDaemon(dataDir string, env []string) (*daemon, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &daemon{dataDir: dataDir, addr: addr, env: env}
	return d, d.start()
}

func (d *daemon) start() error {
	if err := os.MkdirAll(d.dataDir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(d.dataDir, "..", filepath.Base(d.dataDir)+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	d.log = logf
	// Test daemons leave their sandboxes running when stopped, so that a
	// restart adopts them (the tests of restarts rely on it); TestOnExit
	// tests the other policies, the default included.
	args := []string{"serve", "--listen", d.addr, "--data-dir", d.dataDir}
	if !d.defaultOnExit && !slices.ContainsFunc(d.args, func(a string) bool { return strings.HasPrefix(a, "--on-exit") }) {
		args = append(args, "--on-exit=keep")
	}
	// The default pool is off unless a test turns it on: its ready
	// sandboxes would count as another test's leaks, and their kernels
	// starting would load the machine for every test daemon.
	if !slices.ContainsFunc(d.args, func(a string) bool { return strings.HasPrefix(a, "--default-pool") }) &&
		!slices.ContainsFunc(d.env, func(kv string) bool { return strings.HasPrefix(kv, "FORKBOX_DEFAULT_POOL=") }) {
		args = append(args, "--default-pool=0")
	}
	// FORKBOX_E2E_DEBUG=1 makes every test daemon log every request.
	if os.Getenv("FORKBOX_E2E_DEBUG") == "1" {
		args = append(args, "--debug")
	}
	d.cmd = exec.Command(binary, append(args, d.args...)...)
	if d.netns != "" {
		// nsenter enters the network namespace only (ip netns exec would
		// also give the daemon a mount namespace of its own, which a
		// restarted daemon could not see its sandboxes' mounts in).
		d.cmd = exec.Command("nsenter", append([]string{"--net=/run/netns/" + d.netns, "--", binary}, append(args, d.args...)...)...)
	}
	d.cmd.Env = append(os.Environ(), d.env...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return err
	}
	d.exited = make(chan struct{})
	go func() { d.cmd.Wait(); close(d.exited) }()
	opts := []client.Option{}
	for _, kv := range d.env {
		if k, ok := strings.CutPrefix(kv, "FORKBOX_API_KEY="); ok {
			opts = append(opts, client.WithAPIKey(k))
		}
	}
	d.c = client.New("http://"+d.addr, opts...)
	started := time.Now()
	deadline := started.Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			return fmt.Errorf("daemon exited at start; log:\n%s", d.logTail())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := d.c.Health(ctx)
		cancel()
		if err == nil {
			d.upAfter = time.Since(started)
			return d.waitSettled()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("daemon not healthy after 60s; log:\n%s", d.logTail())
}

// waitSettled waits until the daemon has settled every sandbox its start
// found (until then calls about them answer 503 with Retry-After), so that
// tests that restart a daemon see each sandbox in its settled state.
func (d *daemon) waitSettled() error {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		h, err := d.health()
		if err == nil && h.Recovering == 0 {
			return nil
		}
	}
	return fmt.Errorf("the daemon still settled sandboxes after 2 minutes; log:\n%s", d.logTail())
}

// health reads the daemon's /healthz.
func (d *daemon) health() (*api.Health, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+d.addr+"/healthz", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var h api.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return nil, err
	}
	return &h, nil
}

func (d *daemon) logTail() string {
	b, _ := os.ReadFile(d.log.Name())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// kill9 kills the daemon with SIGKILL, as a crash would.
func (d *daemon) kill9() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		d.kill9()
	}
	d.log.Close()
}

func (d *daemon) deleteAll() {
	ctx := context.Background()
	// Pools first: a pool refills when one of its ready sandboxes goes.
	if pools, err := d.c.ListPools(ctx); err == nil {
		for _, p := range pools.Pools {
			d.c.DeletePool(ctx, p.Name)
		}
	}
	list, err := d.c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		return
	}
	for _, sb := range list.Sandboxes {
		if sb.State != api.StateTerminated {
			d.c.DeleteSandbox(ctx, sb.ID)
		}
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newSandbox creates a sandbox on d and deletes it when the test ends.
func newSandbox(t *testing.T, d *daemon, req api.CreateSandboxRequest) *api.Sandbox {
	t.Helper()
	sb, err := d.c.CreateSandbox(ctxT(t), req)
	if err != nil {
		t.Fatalf("create sandbox: %v\ndaemon log:\n%s", err, d.logTail())
	}
	t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), sb.ID) })
	return sb
}

// run runs a command in a sandbox and fails the test if the call fails.
func run(t *testing.T, d *daemon, sb string, cmd string, args ...string) *api.ExecResult {
	t.Helper()
	res, err := d.c.Exec(ctxT(t), sb, api.ExecRequest{Cmd: cmd, Args: args})
	if err != nil {
		t.Fatalf("exec %s %v: %v", cmd, args, err)
	}
	return res
}

// sh runs a shell snippet in a sandbox.
func sh(t *testing.T, d *daemon, sb, script string) *api.ExecResult {
	t.Helper()
	return run(t, d, sb, "sh", "-c", script)
}

func i64(v int64) *int64     { return &v }
func f64(v float64) *float64 { return &v }

// assertNoLeaks checks that nothing of sandbox id is left on the host: no
// mount under the data dir, no cgroup, no veth, no process.
func assertNoLeaks(t *testing.T, d *daemon, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var problems []string
	for {
		problems = leaks(d, id)
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range problems {
		t.Errorf("leak of %s: %s", id, p)
	}
}

func leaks(d *daemon, id string) []string {
	var out []string
	f, err := os.Open("/proc/self/mountinfo")
	if err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.Contains(sc.Text(), id) {
				out = append(out, "mount: "+sc.Text())
			}
		}
		f.Close()
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/forkbox/" + id)
	cg2, _ := filepath.Glob("/sys/fs/cgroup/forkbox/" + id)
	for _, c := range append(cgs, cg2...) {
		out = append(out, "cgroup: "+c)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "/"+id) {
			out = append(out, "process: "+p)
		}
	}
	if b, err := exec.Command("ip", "-d", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, id) {
				out = append(out, "link: "+line)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(d.dataDir, "sandboxes", id)); err == nil {
		out = append(out, "directory: "+filepath.Join(d.dataDir, "sandboxes", id))
	}
	// Its egress policy chain and resolved-names set (named after the host
	// side of its veth, as internal/netsetup names it).
	sum := sha256.Sum256([]byte(id))
	hostIf := "fbx" + hex.EncodeToString(sum[:6])
	if b, err := exec.Command("nft", "list", "table", "inet", "forkbox").Output(); err != nil {
		out = append(out, fmt.Sprintf("nftables: cannot list table inet forkbox (nft from scripts/setup.sh): %v", err))
	} else {
		for _, name := range []string{"chain e_" + hostIf, "set n_" + hostIf, `"` + hostIf + `"`} {
			if strings.Contains(string(b), name+" ") {
				out = append(out, "nftables: "+name)
			}
		}
	}
	return out
}

func clientListLabel(k, v string) client.ListOptions {
	return client.ListOptions{Labels: map[string]string{k: v}}
}
