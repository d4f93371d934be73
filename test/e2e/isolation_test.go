package e2e

import (
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

func TestIsolationUser(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	if res := run(t, shared, sb.ID, "id", "-u"); res.Stdout != "1000\n" {
		t.Fatalf("id -u = %q, want 1000", res.Stdout)
	}
	// No capabilities, no_new_privs and a seccomp filter on user code.
	res := sh(t, shared, sb.ID, "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status")
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, res.Stdout)
		}
	}
}

func TestIsolationHostFilesInvisible(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "host-secret.txt")
	if err := os.WriteFile(secret, []byte("top secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	res := run(t, shared, sb.ID, "cat", secret)
	if res.ExitCode == 0 || strings.Contains(res.Stdout, "top secret") {
		t.Fatalf("sandbox read the host file %s: %+v", secret, res)
	}
	// Nor is the daemon's data dir, or the host's /root, anywhere in the tree.
	res = sh(t, shared, sb.ID, fmt.Sprintf("ls -d %s %s /root/.bashrc 2>&1; find / -xdev -name host-secret.txt 2>/dev/null | head -1", shared.dataDir, dir))
	if strings.Contains(res.Stdout, "host-secret.txt") || !strings.Contains(res.Stdout, "No such file") {
		t.Fatalf("host paths visible: %q", res.Stdout)
	}
}

func TestIsolationProcesses(t *testing.T) {
	needRoot(t)
	marker := exec.Command("sleep", "4242")
	if err := marker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { marker.Process.Kill(); marker.Wait() })
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	res := run(t, shared, sb.ID, "ps", "-e", "-o", "pid=,comm=")
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "1 forkbox") || !strings.HasSuffix(lines[1], "ps") {
		t.Fatalf("ps in a fresh sandbox shows more than its agent and ps:\n%s", res.Stdout)
	}
	if strings.Contains(res.Stdout, "sleep") {
		t.Fatalf("host process visible:\n%s", res.Stdout)
	}
}

func TestIsolationPrivilegedOperationsRefused(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	cases := map[string]string{
		"mount": `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
print(r, os.strerror(ctypes.get_errno()))`,
		"ptrace pid 1": `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(16, 1, None, None)  # PTRACE_ATTACH
print(r, os.strerror(ctypes.get_errno()))`,
		"raw socket": `import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    print(0, "created")
except OSError as e:
    print(-1, e.strerror)`,
		"new user namespace": `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.unshare(0x10000000)  # CLONE_NEWUSER
print(r, os.strerror(ctypes.get_errno()))`,
	}
	for name, code := range cases {
		t.Run(name, func(t *testing.T) {
			res := run(t, shared, sb.ID, "python3", "-c", code)
			if !strings.HasPrefix(res.Stdout, "-1 Operation not permitted") {
				t.Fatalf("%s was not refused: %+v", name, res)
			}
		})
	}
	// The mount command fails too, and nothing was mounted.
	res := run(t, shared, sb.ID, "mount", "-t", "tmpfs", "none", "/tmp")
	if res.ExitCode == 0 {
		t.Fatalf("mount succeeded: %+v", res)
	}
}

func TestIsolationMemoryLimit(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{MemoryMB: i64(128)})
	res := run(t, shared, sb.ID, "python3", "-c", "x = bytearray(400 * 1024 * 1024); x[::4096] = b'x' * len(x[::4096]); print('survived')")
	if !res.OOMKilled || res.ExitCode != -1 || res.Signal != "SIGKILL" || !strings.Contains(res.Error, "out of memory") {
		t.Fatalf("allocating 400 MB in a 128 MB sandbox: %+v", res)
	}
	if strings.Contains(res.Stdout, "survived") {
		t.Fatal("allocation survived")
	}
	// The sandbox keeps working.
	if res := run(t, shared, sb.ID, "python3", "-c", "print('still here')"); res.Stdout != "still here\n" {
		t.Fatalf("after OOM: %+v", res)
	}
}

func TestIsolationForkBomb(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{PIDsLimit: i64(64)})
	res, err := shared.c.Exec(ctxT(t), sb.ID, api.ExecRequest{
		Cmd:         "sh",
		Args:        []string{"-c", `bomb() { bomb | bomb & }; bomb; sleep 3`},
		TimeoutSecs: f64(6),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stderr, "fork") && !strings.Contains(res.Stderr, "Resource temporarily unavailable") {
		t.Fatalf("fork bomb did not hit the PID limit: %+v", res)
	}
	// The limit held: the sandbox still answers and its PIDs stay under it.
	got, err := shared.c.GetSandbox(ctxT(t), sb.ID)
	if err != nil || got.Usage == nil || got.Usage.PIDs > 64 {
		t.Fatalf("usage after bomb: %+v %v", got, err)
	}
	// Bomb processes that escaped the process group may linger until the
	// sandbox goes; the sandbox still runs commands once they are reaped.
	sh(t, shared, sb.ID, "pkill -KILL sh; true")
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := shared.c.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: "echo", Args: []string{"alive"}})
		if err == nil && res.Stdout == "alive\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox unusable after fork bomb: %+v %v", res, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestIsolationDiskLimit(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{DiskMB: i64(64)})
	res := run(t, shared, sb.ID, "dd", "if=/dev/zero", "of=/workspace/big", "bs=1M", "count=200")
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "No space left on device") {
		t.Fatalf("writing 200 MB on a 64 MB disk: %+v", res)
	}
	// Freeing the space makes the disk usable again.
	if res := sh(t, shared, sb.ID, "rm /workspace/big && echo fine > /workspace/small && cat /workspace/small"); res.Stdout != "fine\n" {
		t.Fatalf("after ENOSPC: %+v", res)
	}
}

func TestIsolationBetweenSandboxes(t *testing.T) {
	needRoot(t)
	a := newSandbox(t, shared, api.CreateSandboxRequest{})
	b := newSandbox(t, shared, api.CreateSandboxRequest{})
	sh(t, shared, a.ID, "echo a-only > /workspace/a-secret.txt; echo tmp > /tmp/a-tmp; nohup sleep 4343 >/dev/null 2>&1 &")
	res := sh(t, shared, b.ID, "ls /workspace /tmp; ps -e -o comm=,args=")
	if strings.Contains(res.Stdout, "a-secret") || strings.Contains(res.Stdout, "a-tmp") || strings.Contains(res.Stdout, "4343") {
		t.Fatalf("sandbox b sees a's files or processes:\n%s", res.Stdout)
	}
	if res := sh(t, shared, a.ID, "ps -e -o args= | grep -c '^sleep 4343'"); strings.TrimSpace(res.Stdout) != "1" {
		t.Fatalf("a's background process is not running: %+v", res)
	}
}

// outside is a network namespace the test makes to stand for "the internet":
// a veth to the host with a benchmark-range address and an HTTP server.
type outside struct {
	ns   string
	ip   string
	addr string // ip:port of the server
}

// usedOutsides are the n of live outsides (one test may make several).
var (
	outsidesMu   sync.Mutex
	usedOutsides = map[int]bool{}
)

func newOutside(t *testing.T) *outside {
	t.Helper()
	return newOutsideAt(t, func(n int) (string, string) { return fmt.Sprintf("198.18.%d.1", n), fmt.Sprintf("198.18.%d.2", n) })
}

// newOutsideAt is newOutside on the /30 of the host and namespace addresses
// that addrs gives for a random n in [20, 60).
func newOutsideAt(t *testing.T, addrs func(n int) (host, ns string)) *outside {
	t.Helper()
	outsidesMu.Lock()
	n := rand.Intn(40) + 20
	for usedOutsides[n] {
		n = rand.Intn(40) + 20
	}
	usedOutsides[n] = true
	outsidesMu.Unlock()
	t.Cleanup(func() { outsidesMu.Lock(); delete(usedOutsides, n); outsidesMu.Unlock() })
	ns := fmt.Sprintf("fbxe2e-out-%d", n)
	hostIf, nsIf := fmt.Sprintf("e2eouth%d", n), fmt.Sprintf("e2eoutn%d", n)
	hostIP, nsIP := addrs(n)
	cmds := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", hostIf, "type", "veth", "peer", "name", nsIf},
		{"ip", "link", "set", nsIf, "netns", ns},
		{"ip", "addr", "add", hostIP + "/30", "dev", hostIf},
		{"ip", "link", "set", hostIf, "up"},
		{"ip", "netns", "exec", ns, "ip", "addr", "add", nsIP + "/30", "dev", nsIf},
		{"ip", "netns", "exec", ns, "ip", "link", "set", nsIf, "up"},
		{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
	}
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", hostIf).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	for _, c := range cmds {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
	srv := exec.Command("ip", "netns", "exec", ns, "/usr/bin/python3", "-m", "http.server", "--bind", nsIP, "8099")
	srv.Dir = t.TempDir()
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	os.WriteFile(filepath.Join(srv.Dir, "hello.txt"), []byte("hello from outside"), 0o644)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	o := &outside{ns: ns, ip: nsIP, addr: nsIP + ":8099"}
	// Wait until the server answers from the host.
	for i := 0; ; i++ {
		resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + o.addr + "/hello.txt")
		if err == nil {
			resp.Body.Close()
			break
		}
		if i > 100 {
			ss, _ := exec.Command("ip", "netns", "exec", ns, "ss", "-ltnp").CombinedOutput()
			t.Fatalf("outside server not up: %v; server said: %s; sockets: %s", err, srvOut.String(), ss)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return o
}

const fetchPy = `import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode())
except Exception as e:
    print("FAILED", e)`

func TestNetworkOnlyLoopbackByDefault(t *testing.T) {
	needRoot(t)
	o := newOutside(t)
	// A server on the host's loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "host loopback") }))
	t.Cleanup(func() { ln.Close() })

	closed := newSandbox(t, shared, api.CreateSandboxRequest{})
	res := run(t, shared, closed.ID, "python3", "-c", fetchPy, "http://"+o.addr+"/hello.txt")
	if !strings.HasPrefix(res.Stdout, "FAILED") {
		t.Fatalf("sandbox without internet reached the outside: %q", res.Stdout)
	}
	res = run(t, shared, closed.ID, "python3", "-c", fetchPy, "http://"+ln.Addr().String()+"/")
	if !strings.HasPrefix(res.Stdout, "FAILED") {
		t.Fatalf("sandbox reached the host's loopback: %q", res.Stdout)
	}
	// Its own loopback works.
	res = sh(t, shared, closed.ID, `python3 -m http.server --bind 127.0.0.1 8111 >/dev/null 2>&1 & sleep 1; echo inside > /workspace/x.txt; `+
		`python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8111/x.txt').read().decode().strip())"; kill %1`)
	if !strings.Contains(res.Stdout, "inside") {
		t.Fatalf("own loopback: %+v", res)
	}

	open := newSandbox(t, shared, api.CreateSandboxRequest{AllowInternetAccess: true})
	res = run(t, shared, open.ID, "python3", "-c", fetchPy, "http://"+o.addr+"/hello.txt")
	if strings.TrimSpace(res.Stdout) != "hello from outside" {
		t.Fatalf("sandbox with internet access could not reach the outside: %+v", res)
	}
	// Even with internet access the host's own loopback stays out of reach.
	res = run(t, shared, open.ID, "python3", "-c", fetchPy, "http://"+ln.Addr().String()+"/")
	if !strings.HasPrefix(res.Stdout, "FAILED") {
		t.Fatalf("sandbox with internet reached the host's loopback: %q", res.Stdout)
	}
	if _, err := shared.c.DeleteSandbox(ctxT(t), open.ID); err != nil {
		t.Fatal(err)
	}
	assertNoLeaks(t, shared, open.ID)
}
