package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	binenc "encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// TestSecurity is the security suite: hostile code (and a hostile API
// client) tries every way out of its sandbox that we know of, in eight
// groups: the host's filesystem, processes, privileges, devices, the
// network, other sandboxes, the API and the host's resources. Each attempt
// is a subtest TestSecurity/<group>/<attack> that runs the attack the way
// such code would (a shell, Python with ctypes for raw system calls, or raw
// HTTP), checks that it fails the expected way (an errno, an exit status, an
// HTTP status), and checks that the sandbox still answers an exec and a code
// cell. Each group ends by checking that the daemon is healthy and that a
// fresh sandbox runs `echo ok`.
//
// Each attack logs what the same attack achieved on the old main: the tree
// before sandboxes had user namespaces, before the seccomp allow-list, the
// device allow-list, the host-detail masks and the agent's file and
// capability changes. Those notes come from running this suite against a
// build of that tree on the same host (a 2-CPU Firecracker VM, Debian 12,
// kernel 6.18, whose host account cloudsdk has uid 1000).
//
// A subtest that fails is a hole: the daemon is not to be fixed from here.
func TestSecurity(t *testing.T) {
	needRoot(t)
	start := time.Now()
	secTmp = t.TempDir()
	groups := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"hostfs", secHostFS},
		{"processes", secProcesses},
		{"privileges", secPrivileges},
		{"devices", secDevices},
		{"network", secNetwork},
		{"cross-sandbox", secCrossSandbox},
		{"api", secAPI},
		{"resources", secResources},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			// Registered first, so it runs last: after the group's own
			// sandboxes are gone.
			t.Cleanup(func() { groupStillWorks(t) })
			g.fn(t)
		})
	}
	n := secAttacks.Load()
	t.Logf("%d attacks ran in %s", n, time.Since(start).Round(time.Second))
	// The suite must not shrink silently: the whole of it makes at least
	// 60 attacks. A narrowed -run or -skip runs fewer on purpose.
	if narrowed() {
		t.Logf("a -run or -skip pattern narrowed the suite; not counting")
		return
	}
	if n < 60 {
		t.Errorf("only %d attacks ran; the security suite makes at least 60", n)
	}
}

// secAttacks counts the attacks that ran (passed or failed; skipped ones do
// not count).
var secAttacks atomic.Int64

// secTmp is a host directory for the suite's own files (compiled probes).
var secTmp string

// narrowed reports whether -test.run names subtests or -test.skip is set.
func narrowed() bool {
	if f := flag.Lookup("test.run"); f != nil && strings.Contains(f.Value.String(), "/") {
		return true
	}
	f := flag.Lookup("test.skip")
	return f != nil && f.Value.String() != ""
}

// attack runs one attack as a subtest. old is what the same attack achieved
// on the old main; it is logged with the result.
func attack(t *testing.T, name, old string, fn func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		defer func() {
			if !t.Skipped() {
				secAttacks.Add(1)
			}
		}()
		t.Logf("old main: %s", old)
		fn(t)
	})
}

// groupStillWorks ends every group: the daemon is healthy and a fresh
// sandbox runs `echo ok`.
func groupStillWorks(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := shared.c.Health(ctx); err != nil {
		t.Fatalf("daemon after the group: %v\nlog:\n%s", err, shared.logTail())
	}
	sb, err := shared.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("a fresh sandbox after the group: %v\nlog:\n%s", err, shared.logTail())
	}
	defer shared.c.DeleteSandbox(context.Background(), sb.ID)
	res, err := shared.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: "echo", Args: []string{"ok"}})
	if err != nil || res.ExitCode != 0 || res.Stdout != "ok\n" {
		t.Fatalf("echo ok in a fresh sandbox after the group: %+v %v", res, err)
	}
}

// secPrelude starts every Python attack: sc makes a raw x86_64 system call
// and answers "ok" or the errno's name; tr runs a function and answers "ok"
// or the name of the errno of the OSError it raised.
const secPrelude = `import ctypes, errno, json, os, socket, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def ename(e):
    return errno.errorcode.get(e, str(e))
def sc(nr, *args):
    a = [ctypes.c_long(x) if isinstance(x, int) else x for x in args]
    r = libc.syscall(ctypes.c_long(nr), *a)
    return 'ok' if r >= 0 else ename(ctypes.get_errno())
def tr(fn):
    try:
        fn()
        return 'ok'
    except OSError as e:
        return ename(e.errno)
def rd(p):
    with open(p, 'rb') as f:
        return f.read()
`

// pyAttack runs secPrelude+body as the sandbox user (args are sys.argv[1:])
// and returns its output without the trailing newline.
func pyAttack(t *testing.T, sb, body string, args ...string) string {
	t.Helper()
	res := run(t, shared, sb, "python3", append([]string{"-c", secPrelude + body}, args...)...)
	if res.ExitCode != 0 {
		t.Fatalf("attack script: exit %d %s\nstdout: %s\nstderr: %s", res.ExitCode, res.Error, res.Stdout, res.Stderr)
	}
	return strings.TrimSpace(res.Stdout)
}

// wantOut fails unless got is want.
func wantOut(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

// ---------------------------------------------------------------------------
// The host's filesystem

func secHostFS(t *testing.T) {
	a := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, a.ID, py("1")))
	// A host file every route below tries to reach.
	marker := fmt.Sprintf("forkbox-host-secret-%d", time.Now().UnixNano())
	secretDir := filepath.Join(secTmp, "hostfs")
	if err := os.MkdirAll(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(secretDir, "host-secret")
	if err := os.WriteFile(secret, []byte(marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)

	attack(t, "proc1-root", "refused the same way (the agent was root, the user uid 1000), but there was no user namespace between them", func(t *testing.T) {
		got := pyAttack(t, a.ID, `print(tr(lambda: os.listdir('/proc/1/root')), tr(lambda: rd('/proc/1/root/etc/shadow')), tr(lambda: rd('/proc/1/root' + sys.argv[1])))`, secret)
		wantOut(t, "list /proc/1/root, read its /etc/shadow and the host's secret through it", got, "EACCES EACCES EACCES")
		stillServes(t, a.ID)
	})

	attack(t, "proc-self-root-dotdot", "the same: .. of the sandbox's root is that root", func(t *testing.T) {
		got := pyAttack(t, a.ID, `s = sys.argv[1]
paths = ['/proc/self/root/../../etc/shadow', '/proc/self/root/../../..' + s, '/../../..' + s, '/proc/self/cwd/../../../../..' + s, '/proc/thread-self/root/..' + s]
print(' '.join(tr(lambda: rd(p)) for p in paths))`, secret)
		// The first is the sandbox's own shadow (root's, mode 0640); the
		// host's secret is nowhere.
		wantOut(t, "climb out of the root through /proc/self/root, /proc/self/cwd and plain ..", got, "EACCES ENOENT ENOENT ENOENT ENOENT")
		stillServes(t, a.ID)
	})

	attack(t, "agent-cwd-and-exe", "refused the same way", func(t *testing.T) {
		got := pyAttack(t, a.ID, `print(tr(lambda: os.readlink('/proc/1/cwd')), tr(lambda: os.listdir('/proc/1/cwd')), tr(lambda: rd('/proc/1/cwd/etc/shadow')), tr(lambda: os.readlink('/proc/1/exe')), tr(lambda: rd('/proc/1/exe')))`)
		wantOut(t, "the agent's cwd and executable", got, "EACCES EACCES EACCES EACCES EACCES")
		stillServes(t, a.ID)
	})

	attack(t, "mountinfo-host-paths", "mountinfo named the daemon's data dir (upperdir=<data>/sandboxes/<id>/disk/upper), the sandbox's id, every image layer under <images>/.layers and the agent binary's host path: a map of the host for the next attack", func(t *testing.T) {
		mi := mustSh(t, a.ID, "cat /proc/self/mountinfo")
		hostPaths := []string{shared.dataDir, os.Getenv("FORKBOX_IMAGES_DIR"), filepath.Dir(binary), "/sandboxes/", "/.layers/", a.ID}
		for _, p := range hostPaths {
			if p != "" && strings.Contains(mi, p) {
				t.Errorf("the sandbox's mountinfo names the host path %q:\n%s", p, mi)
			}
		}
		// Overlay layers are named relative to a directory the sandbox
		// cannot see.
		for _, line := range strings.Split(mi, "\n") {
			for _, opt := range strings.Split(line, ",") {
				k, v, ok := strings.Cut(opt, "=")
				if !ok || (k != "lowerdir" && k != "upperdir" && k != "workdir") {
					continue
				}
				for _, dir := range strings.Split(v, ":") {
					if strings.HasPrefix(dir, "/") {
						t.Errorf("overlay option %s names an absolute host path: %s", k, line)
					}
				}
			}
		}
		// And the host paths the test knows are not in the sandbox: a
		// path under /root stops at the sandbox's own root-only /root.
		runDir := filepath.Join(shared.dataDir, "sandboxes", a.ID, "run")
		got := pyAttack(t, a.ID, `print(' '.join(tr(lambda: os.stat(p)) for p in sys.argv[1:]))`, shared.dataDir, runDir, binary, secret)
		for i, r := range strings.Fields(got) {
			if r != "ENOENT" && r != "EACCES" {
				t.Errorf("host path %d (%s) in the sandbox: %s", i, []string{shared.dataDir, runDir, binary, secret}[i], r)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "files-api-symlinks-out", "the files API followed ../dev and ../.forkbox: listing /workspace/d listed the sandbox's /dev, /workspace/d/zero was opened (refused only as not a regular file), /workspace/f/run/agent.json was refused by its mode only (403)", func(t *testing.T) {
		mustSh(t, a.ID, "cd /workspace && ln -s ../proc/1/root/etc p1 && ln -s ../dev d && ln -s ../.forkbox f && ln -s /proc/1/root abs && ln -s ../../../../../.."+secretDir+" up")
		for _, p := range []string{"/workspace/p1/shadow", "/workspace/d/zero", "/workspace/f/run/agent.json", "/workspace/f/forkbox", "/workspace/abs/etc/shadow", "/workspace/up/host-secret", "up/host-secret"} {
			b, err := shared.c.ReadFile(ctx, a.ID, p)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "leaves the sandbox's filesystem") {
				t.Errorf("read %s: %d bytes, %v; want 400 saying it leaves the sandbox's filesystem", p, len(b), err)
			}
			if bytes.Contains(b, []byte(marker)) {
				t.Errorf("read %s: the host's secret", p)
			}
		}
		for _, p := range []string{"/workspace/p1", "/workspace/d", "/workspace/f", "/workspace/up"} {
			if l, err := shared.c.ListFiles(ctx, a.ID, p); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("list %s: %+v %v; want 400", p, l, err)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "files-api-fifo-and-device", "reading the FIFO hung until the client gave up (3 minutes here), and every files call on that sandbox after it hung too", func(t *testing.T) {
		mustSh(t, a.ID, "mkfifo /workspace/fifo")
		node := filepath.Join(rootfs(t, a.ID), "workspace", "cdev")
		if err := syscall.Mknod(node, syscall.S_IFCHR|0o666, 1<<8|5); err != nil { // /dev/zero's numbers
			t.Fatal(err)
		}
		asSandboxRoot(t, a.ID, node)
		for _, p := range []string{"/workspace/fifo", "/workspace/cdev"} {
			start := time.Now()
			_, err := shared.c.ReadFile(ctx, a.ID, p)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("read %s: %v; want 400 saying it is not a regular file", p, err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("read %s took %s", p, d)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "write-agent-binary", "refused the same way (/.forkbox was root's 0700, the binary a read-only bind), but the binary was the host's own file, named in mountinfo", func(t *testing.T) {
		bin := fmt.Sprintf("/proc/%d/root/.forkbox/forkbox", agentHostPID(t, a.ID))
		before := fingerprint(t, bin)
		res := sh(t, shared, a.ID, "echo pwned > /.forkbox/forkbox; cp /bin/true /.forkbox/forkbox; ls /.forkbox")
		if res.ExitCode == 0 || strings.Count(res.Stderr, "Permission denied") != 3 {
			t.Errorf("shell writes to the agent binary: %+v; want three Permission denied", res)
		}
		got := pyAttack(t, a.ID, `print(tr(lambda: open('/.forkbox/forkbox', 'r+b')), tr(lambda: open('/proc/1/exe', 'r+b')), tr(lambda: os.truncate('/.forkbox/forkbox', 0)))`)
		wantOut(t, "open the agent binary for writing, through its path and /proc/1/exe, and truncate it", got, "EACCES EACCES EACCES")
		if _, err := shared.c.WriteFile(ctx, a.ID, "/.forkbox/forkbox", strings.NewReader("pwned"), 0o755); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("files API write of /.forkbox/forkbox: %v; want 400", err)
		}
		if after := fingerprint(t, bin); after != before {
			t.Fatalf("the agent binary changed: %s, was %s", after, before)
		}
		stillServes(t, a.ID)
	})

	attack(t, "write-run-dir", "refused the same way, but the run dir was a bind of the host's <data>/sandboxes/<id>/run, named in mountinfo", func(t *testing.T) {
		run := fmt.Sprintf("/proc/%d/root/.forkbox/run", agentHostPID(t, a.ID))
		before := dirNames(t, run)
		got := pyAttack(t, a.ID, `def conn():
    s = socket.socket(socket.AF_UNIX)
    s.connect('/.forkbox/run/agent.sock')
print(tr(lambda: open('/.forkbox/run/agent.json', 'w')), tr(conn), tr(lambda: os.listdir('/.forkbox/run')), tr(lambda: os.symlink('/etc', '/.forkbox/run/x')))`)
		wantOut(t, "write the agent's config, connect to its socket, list and plant in the run dir", got, "EACCES EACCES EACCES EACCES")
		if _, err := shared.c.WriteFile(ctx, a.ID, "/.forkbox/run/agent.json", strings.NewReader("{}"), 0o644); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("files API write into the run dir: %v; want 400", err)
		}
		if err := shared.c.RemoveFile(ctx, a.ID, "/.forkbox/run/agent.sock", false); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("files API remove of the agent's socket: %v; want 400", err)
		}
		if after := dirNames(t, run); after != before {
			t.Fatalf("the run dir changed: %q, was %q", after, before)
		}
		stillServes(t, a.ID)
	})

	attack(t, "proc-host-details", "/proc/cmdline gave the host's boot line (574 bytes here: the VM's control agent, its ports and options), /proc/kallsyms 5.4 MB of kernel symbols, /proc/iomem and /proc/ioports the machine's memory and I/O maps", func(t *testing.T) {
		host, err := os.ReadFile("/proc/cmdline")
		if err != nil || len(host) == 0 {
			t.Fatalf("the host's /proc/cmdline: %v", err)
		}
		got := pyAttack(t, a.ID, `out = []
for n in ['cmdline', 'kallsyms', 'keys', 'timer_list', 'kcore', 'kmsg', 'vmallocinfo', 'iomem', 'ioports', 'sched_debug', 'latency_stats']:
    p = '/proc/' + n
    if not os.path.exists(p):
        continue
    try:
        out.append('%s=%d' % (n, len(rd(p))))
    except OSError as e:
        out.append('%s=%s' % (n, ename(e.errno)))
print(' '.join(out))`)
		if !strings.HasPrefix(got, "cmdline=0 ") {
			t.Errorf("/proc/cmdline is not empty: %s", got)
		}
		for _, f := range strings.Fields(got) {
			if !strings.HasSuffix(f, "=0") {
				t.Errorf("masked host file not empty: %s", f)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "sys-firmware-and-dmi", "/sys/firmware listed the host's acpi and memmap tables", func(t *testing.T) {
		if ents, _ := os.ReadDir("/sys/firmware"); len(ents) == 0 {
			t.Fatalf("the host's /sys/firmware is empty already: nothing to mask")
		}
		got := pyAttack(t, a.ID, `out = []
for p in ['/sys/firmware', '/sys/devices/virtual/dmi', '/sys/class/dmi', '/proc/acpi']:
    try:
        out.append('%s=%d' % (p, len(os.listdir(p))))
    except OSError as e:
        out.append('%s=%s' % (p, ename(e.errno)))
print(' '.join(out))`)
		for _, f := range strings.Fields(got) {
			if !strings.HasSuffix(f, "=0") && !strings.HasSuffix(f, "=ENOENT") {
				t.Errorf("host firmware details visible: %s", f)
			}
		}
		if !strings.Contains(got, "/sys/firmware=0") {
			t.Errorf("/sys/firmware: %s", got)
		}
		stillServes(t, a.ID)
	})

	attack(t, "host-secret-everywhere", "not found either (nothing of the host was mounted), but /proc/1/root was the only route checked", func(t *testing.T) {
		res := sh(t, shared, a.ID, "find / -xdev -name host-secret 2>/dev/null; cat "+secret+" 2>&1")
		if strings.Contains(res.Stdout, marker) || strings.Contains(res.Stdout, "/host-secret\n") || !strings.Contains(res.Stdout, "No such file") {
			t.Errorf("the host's secret: %q", res.Stdout)
		}
		got := pyAttack(t, a.ID, `found = []
for pid in os.listdir('/proc'):
    if pid.isdigit():
        for p in ['/proc/%s/root' % pid, '/proc/%s/cwd' % pid]:
            try:
                found.append(rd(p + sys.argv[1]).decode())
            except OSError:
                pass
print(len(found))`, secret)
		wantOut(t, "the host's secret through every /proc/<pid>/root and cwd", got, "0")
		stillServes(t, a.ID)
	})

	attack(t, "checkpoint-with-hostile-files", "archived and restored the same way (symlinks kept as links, FIFOs as FIFOs)", func(t *testing.T) {
		// The daemon archives the writable layer and unpacks it into a new
		// sandbox as root on the host: what the user planted there must
		// come back as it was, pointing nowhere on the host.
		root := rootfs(t, a.ID)
		shadow := fingerprint(t, "/etc/shadow")
		inShadow := fingerprint(t, filepath.Join(root, "etc", "shadow"))
		mustSh(t, a.ID, `mkdir -p /workspace/ck && cd /workspace/ck && mkfifo fifo && ln -s /etc/shadow abs && ln -s ../../../../../../../etc/shadow rel &&
ln -s `+secret+` host && echo secret > noperm && chmod 000 noperm && mkdir closed && chmod 000 closed &&
python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('/workspace/ck/sock')"`)
		status, sn, raw := checkpoint(t, shared, a.ID, api.CheckpointRequest{Type: "filesystem"})
		if status != 201 {
			t.Fatalf("filesystem checkpoint: %d %s", status, raw)
		}
		t.Cleanup(func() { shared.c.DeleteSnapshot(context.Background(), sn.ID) })
		rs := newSandbox(t, shared, api.CreateSandboxRequest{SnapshotID: sn.ID})
		got := mustSh(t, rs.ID, `cd /workspace/ck && stat -c '%n %F %a %U' fifo abs rel host noperm closed && readlink abs rel host; cat abs rel host 2>&1; ls sock 2>&1 | grep -c 'No such'`)
		// The links still point where they did, which in the new sandbox
		// is its own root; the socket is not carried over.
		want := "fifo fifo 644 user\nabs symbolic link 777 user\nrel symbolic link 777 user\nhost symbolic link 777 user\nnoperm regular file 0 user\nclosed directory 0 user\n" +
			"/etc/shadow\n../../../../../../../etc/shadow\n" + secret + "\n" +
			"cat: abs: Permission denied\ncat: rel: Permission denied\ncat: host: No such file or directory\n1\n"
		wantOut(t, "the planted files in the restored sandbox", got, want)
		if fingerprint(t, "/etc/shadow") != shadow || fingerprint(t, filepath.Join(root, "etc", "shadow")) != inShadow {
			t.Fatalf("a shadow file changed")
		}
		stillServes(t, rs.ID)
		stillServes(t, a.ID)
	})

	attack(t, "proc-sys-writes", "refused the same way (uid 1000, /proc/sys read-only)", func(t *testing.T) {
		got := pyAttack(t, a.ID, `paths = ['/proc/sys/kernel/hostname', '/proc/sysrq-trigger', '/proc/sys/vm/drop_caches', '/proc/sys/kernel/core_pattern', '/proc/sys/kernel/modprobe', '/sys/kernel/uevent_helper', '/sys/power/state']
print(' '.join(tr(lambda: open(p, 'w').write('1')) for p in paths if os.path.exists(p)))`)
		for i, r := range strings.Fields(got) {
			if r != "EACCES" && r != "EROFS" {
				t.Errorf("write %d: %s; want EACCES or EROFS (all: %s)", i, r, got)
			}
		}
		stillServes(t, a.ID)
	})
}

// ---------------------------------------------------------------------------
// Processes

// sandboxHostProcs lists the host pids of the processes in sandbox id's
// cgroup.
func sandboxHostProcs(t *testing.T, id string) []int {
	t.Helper()
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "/"+id+"\n") {
			continue
		}
		pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
		pids = append(pids, pid)
	}
	return pids
}

// hostIDs reads a process's real, effective, saved and filesystem uids and
// gids and its command name from the host's /proc.
func hostIDs(pid int) (uids, gids []int, comm string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, nil, "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "Uid", "Gid":
			var ids []int
			for _, f := range strings.Fields(v) {
				n, _ := strconv.Atoi(f)
				ids = append(ids, n)
			}
			if k == "Uid" {
				uids = ids
			} else {
				gids = ids
			}
		case "Name":
			comm = strings.TrimSpace(v)
		}
	}
	return uids, gids, comm, nil
}

// accountIDs reads the ids of /etc/passwd or /etc/group.
func accountIDs(t *testing.T, path string) map[int]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) > 2 {
			if n, err := strconv.Atoi(f[2]); err == nil {
				ids[n] = f[0]
			}
		}
	}
	return ids
}

// agentBase is the first host uid of a sandbox's range: its root's, which
// is its agent's.
func agentBase(t *testing.T, id string) int {
	t.Helper()
	uids, _, _, err := hostIDs(agentHostPID(t, id))
	if err != nil || len(uids) == 0 {
		t.Fatalf("the agent's ids on the host: %v", err)
	}
	return uids[0]
}

// pidAlive reports whether host pid runs a command line containing want.
func pidAlive(pid int, want string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), want)
}

func secProcesses(t *testing.T) {
	a := newSandbox(t, shared, api.CreateSandboxRequest{})
	b := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, a.ID, py("1"))) // a kernel among a's processes
	mustSh(t, a.ID, "nohup sleep 3600 >/dev/null 2>&1 &")
	mustSh(t, b.ID, "nohup sleep 4646 >/dev/null 2>&1 &")

	attack(t, "host-ps-uids", "the agent ran as host uid 0 and every user process as host uid 1000, which is the host account cloudsdk here: that account could signal, trace and read the sandbox's processes", func(t *testing.T) {
		passwd, groups := accountIDs(t, "/etc/passwd"), accountIDs(t, "/etc/group")
		base := agentBase(t, a.ID)
		if base < 1<<30 || (base-(1<<30))%65536 != 0 {
			t.Errorf("the agent's host uid %d is not the start of a range at 2^30 + k*65536", base)
		}
		pids := sandboxHostProcs(t, a.ID)
		kinds := map[string]bool{}
		for _, pid := range pids {
			uids, gids, comm, err := hostIDs(pid)
			if err != nil {
				continue // gone meanwhile
			}
			for _, id := range uids {
				if id < base || id >= base+65536 || id == 0 {
					t.Errorf("process %d (%s) has host uid %d, outside the sandbox's range [%d, %d)", pid, comm, id, base, base+65536)
				}
				if name, ok := passwd[id]; ok {
					t.Errorf("process %d (%s) runs as the host account %s (uid %d)", pid, comm, name, id)
				}
			}
			for _, id := range gids {
				if id < base || id >= base+65536 {
					t.Errorf("process %d (%s) has host gid %d, outside the sandbox's range", pid, comm, id)
				}
				if name, ok := groups[id]; ok {
					t.Errorf("process %d (%s) runs with the host group %s (gid %d)", pid, comm, name, id)
				}
			}
			kinds[fmt.Sprintf("%s:%d", comm, uids[0]-base)] = true
		}
		t.Logf("host view of the sandbox's processes (command:uid in the sandbox): %v", kinds)
		if !kinds[fmt.Sprintf("forkbox:%d", 0)] || !kinds["sleep:1000"] || len(pids) < 3 {
			t.Errorf("the host does not see the agent as the range's root and the user's sleep as its uid 1000: %v", kinds)
		}
		stillServes(t, a.ID)
	})

	attack(t, "proc1-mem", "refused the same way (another uid)", func(t *testing.T) {
		got := pyAttack(t, a.ID, `print(tr(lambda: rd('/proc/1/mem')), tr(lambda: open('/proc/1/mem', 'r+b')))`)
		wantOut(t, "open the agent's memory for reading and writing", got, "EACCES EACCES")
		stillServes(t, a.ID)
	})

	attack(t, "proc1-environ-fds-maps", "refused the same way (another uid)", func(t *testing.T) {
		got := pyAttack(t, a.ID, `print(tr(lambda: rd('/proc/1/environ')), tr(lambda: os.listdir('/proc/1/fd')), tr(lambda: os.readlink('/proc/1/fd/0')), tr(lambda: rd('/proc/1/maps')))`)
		wantOut(t, "the agent's environment, descriptors and maps", got, "EACCES EACCES EACCES EACCES")
		stillServes(t, a.ID)
	})

	attack(t, "ptrace-attach-pid1", "EPERM from the old deny-list too", func(t *testing.T) {
		wantOut(t, "PTRACE_ATTACH to PID 1, PTRACE_TRACEME", pyAttack(t, a.ID, `print(sc(101, 16, 1, 0, 0), sc(101, 0, 0, 0, 0))`), "EPERM EPERM")
		stillServes(t, a.ID)
	})

	attack(t, "ptrace-seize-pid1", "EPERM from the old deny-list too", func(t *testing.T) {
		wantOut(t, "PTRACE_SEIZE of PID 1", pyAttack(t, a.ID, `print(sc(101, 0x4206, 1, 0, 0))`), "EPERM")
		stillServes(t, a.ID)
	})

	attack(t, "process-vm-readv-pid1", "EPERM from the old deny-list too", func(t *testing.T) {
		got := pyAttack(t, a.ID, `buf = ctypes.create_string_buffer(8)
local = struct.pack('=QQ', ctypes.addressof(buf), 8)
remote = struct.pack('=QQ', 0x400000, 8)
print(sc(310, 1, local, 1, remote, 1, 0), sc(311, 1, local, 1, remote, 1, 0))`)
		wantOut(t, "process_vm_readv and process_vm_writev on PID 1", got, "EPERM EPERM")
		stillServes(t, a.ID)
	})

	attack(t, "kill-pid1", "EPERM the same way (the agent was root); kill -1 killed the user's own processes only", func(t *testing.T) {
		pid := agentHostPID(t, a.ID)
		got := pyAttack(t, a.ID, `import signal
print(' '.join(tr(lambda: os.kill(1, s)) for s in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM, signal.SIGSEGV)))`)
		wantOut(t, "SIGKILL, SIGSTOP, SIGTERM and SIGSEGV to PID 1", got, "EPERM EPERM EPERM EPERM")
		// kill(-1, SIGKILL) reaches every process the user may signal but
		// the caller: the kernel and the sleep, not the agent.
		res := sh(t, shared, a.ID, "kill -9 -1; echo survived")
		if res.Stdout != "survived\n" {
			t.Errorf("kill -9 -1: %+v", res)
		}
		time.Sleep(500 * time.Millisecond)
		for _, p := range sandboxHostProcs(t, a.ID) {
			if pidAlive(p, "sleep 3600") || pidAlive(p, "ipykernel") {
				t.Errorf("kill -9 -1 left the user's process %d running", p)
			}
		}
		if got := agentHostPID(t, a.ID); got != pid {
			t.Fatalf("the agent changed from host pid %d to %d", pid, got)
		}
		stillServes(t, a.ID)
	})

	attack(t, "signal-other-sandbox-by-host-pid", "ESRCH the same way (PID namespaces), but a's and b's processes had the same host uid", func(t *testing.T) {
		bAgent := agentHostPID(t, b.ID)
		var bSleep int
		for _, pid := range sandboxHostProcs(t, b.ID) {
			if pidAlive(pid, "sleep 4646") {
				bSleep = pid
			}
		}
		if bSleep == 0 {
			t.Fatal("b's sleep is not running")
		}
		got := pyAttack(t, a.ID, `import signal
out = []
for p in map(int, sys.argv[1:]):
    out += [tr(lambda: os.kill(p, 0)), tr(lambda: os.kill(p, signal.SIGKILL)), sc(434, p, 0)]
print(' '.join(out))`, strconv.Itoa(bAgent), strconv.Itoa(bSleep))
		wantOut(t, "signal 0, SIGKILL and pidfd_open of b's agent and sleep by host pid", got, "ESRCH ESRCH ESRCH ESRCH ESRCH ESRCH")
		time.Sleep(200 * time.Millisecond)
		if !pidAlive(bSleep, "sleep 4646") {
			t.Fatalf("b's sleep (host pid %d) is gone", bSleep)
		}
		stillServes(t, a.ID)
		stillServes(t, b.ID)
	})

	attack(t, "ps-sees-own-processes-only", "the same (PID namespace)", func(t *testing.T) {
		marker := exec.Command("sleep", "4242")
		if err := marker.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { marker.Process.Kill(); marker.Wait() }()
		out := mustSh(t, a.ID, "ps -eo pid=,user=,args=")
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); f[1] == "root" && (f[0] != "1" || f[2] != "forkbox") {
				t.Errorf("a root process in a besides its agent: %s", line)
			}
		}
		for _, bad := range []string{"4646", "4242", "forkbox serve", "sshd", "systemd"} {
			if strings.Contains(out, bad) {
				t.Errorf("ps in a shows %q:\n%s", bad, out)
			}
		}
		stillServes(t, a.ID)
	})
}

// ---------------------------------------------------------------------------
// Privileges

// probeC is the suite's static probe: it reports its ids, tries setuid(0),
// shows its capability and no_new_privs state, and opens each argument.
const probeC = `#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static const char *en(int e) {
	static char buf[16];
	switch (e) {
	case EPERM: return "EPERM";
	case ENOENT: return "ENOENT";
	case EACCES: return "EACCES";
	case ENXIO: return "ENXIO";
	case ENODEV: return "ENODEV";
	case EROFS: return "EROFS";
	}
	snprintf(buf, sizeof buf, "errno%d", e);
	return buf;
}
int main(int argc, char **argv) {
	char line[256], capeff[64] = "?", nnp[16] = "?";
	FILE *f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof line, f)) {
		sscanf(line, "CapEff: %63s", capeff);
		sscanf(line, "NoNewPrivs: %15s", nnp);
	}
	int r = setuid(0);
	printf("uid=%d euid=%d setuid0=%s capeff=%s nnp=%s\n", getuid(), geteuid(), r ? en(errno) : "ok", capeff, nnp);
	for (int i = 1; i < argc; i++) {
		int fd = open(argv[i], O_RDONLY);
		printf("%s=%s\n", argv[i], fd < 0 ? en(errno) : "opened");
	}
	return 0;
}
`

var (
	probeMu   sync.Mutex
	probePath string
)

// staticProbe compiles probeC on the host (static, so it runs in any
// image) once per run of the suite, or skips the attack where the host
// cannot.
func staticProbe(t *testing.T) string {
	t.Helper()
	probeMu.Lock()
	defer probeMu.Unlock()
	out := filepath.Join(secTmp, "probe")
	if probePath == out {
		return out
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc on the host to build the static probe: %v", err)
	}
	src := filepath.Join(secTmp, "probe.c")
	if err := os.WriteFile(src, []byte(probeC), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(cc, "-static", "-O1", "-o", out, src).CombinedOutput(); err != nil {
		t.Skipf("gcc -static cannot build the probe here: %v: %s", err, b)
	}
	probePath = out
	return out
}

// plantFile copies host file src into a sandbox at rel (under its root, seen
// from the host) with the given host owner and mode.
func plantFile(t *testing.T, id, src, rel string, uid, gid int, mode os.FileMode) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(rootfs(t, id), rel)
	if err := os.WriteFile(dst, b, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(dst, uid, gid); err != nil {
		t.Fatal(err)
	}
	// chown clears the set-id bits: the mode comes after it.
	if err := os.Chmod(dst, mode); err != nil {
		t.Fatal(err)
	}
	return dst
}

// vfsCapV3 is a security.capability value (revision 3, effective) granting
// caps as permitted to the user namespace whose root is host uid rootid.
func vfsCapV3(caps uint64, rootid uint32) []byte {
	b := make([]byte, 24)
	binenc.LittleEndian.PutUint32(b[0:], 0x03000000|0x1) // VFS_CAP_REVISION_3 | VFS_CAP_FLAGS_EFFECTIVE
	binenc.LittleEndian.PutUint32(b[4:], uint32(caps))   // permitted, low
	binenc.LittleEndian.PutUint32(b[12:], uint32(caps>>32))
	binenc.LittleEndian.PutUint32(b[20:], rootid)
	return b
}

// x86_64 system calls refused by the seccomp filter that a table of
// attacks tries one by one: name, the call (Python), the answer and what
// the old main answered.
var refusedCalls = []struct{ name, call, want, old string }{
	{"keyrings", "sc(250, 0, 0, 0, 0, 0), sc(248, b'user', b'fbx', b'secret', 6, ctypes.c_long(-2)), sc(249, b'user', b'fbx', 0, 0)", "EPERM EPERM EPERM",
		"EPERM from the old deny-list too (keyctl, add_key, request_key)"},
	{"bpf", "sc(321, 0, 0, 0), sc(321, 5, 0, 0)", "EPERM EPERM", "EPERM from the old deny-list too"},
	{"perf-event-open", "sc(298, 0, 0, -1, -1, 0)", "EPERM", "EPERM from the old deny-list too"},
	{"io-uring-setup", "sc(425, 1, 0), sc(426, 0, 0, 0, 0, 0, 0), sc(427, 0, 0, 0, 0)", "EPERM EPERM EPERM", "EPERM from the old deny-list too"},
	{"userfaultfd", "sc(323, 0), sc(323, 1)", "EPERM EPERM", "EPERM from the old deny-list too"},
	{"kcmp", "sc(312, 1, 1, 0, 0, 0)", "EPERM", "EPERM from the old deny-list too"},
	{"modify-ldt", "sc(154, 0, 0, 0), sc(154, 1, 0, 0)", "EPERM EPERM", "allowed: modify_ldt(0) read the LDT (returned 0)"},
	{"memfd-secret", "sc(447, 0)", "EPERM", "allowed: memfd_secret gave a descriptor (3) on memory no one, CRIU included, can read"},
	{"process-madvise", "sc(440, 0, 0, 0, 0, 0)", "EPERM", "reached the kernel (EBADF for the bad pidfd)"},
	{"numa-calls", "sc(237, 0, 0, 0, 0, 0, 0), sc(238, 0, 0, 0), sc(239, 0, 0, 0, 0, 0), sc(279, 0, 0, 0, 0, 0, 0), sc(256, 0, 0, 0, 0)", "EPERM EPERM EPERM EPERM EPERM",
		"mbind, set_mempolicy, get_mempolicy and move_pages were allowed (returned 0); migrate_pages reached the kernel (EINVAL)"},
	{"kernel-admin-calls", "sc(175, 0, 0, 0), sc(313, -1, 0, 0), sc(246, 0, 0, 0, 0), sc(169, 0, 0, 0, 0), sc(170, b'x', 1), sc(155, b'/', b'/'), sc(167, b'/tmp/x', 0), sc(163, 0), sc(172, 3), sc(164, 0, 0), sc(103, 3, 0, 0), sc(300, 0, 0)",
		"EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM",
		"EPERM from the old deny-list too (init_module, finit_module, kexec_load, reboot, sethostname, pivot_root, swapon, acct, iopl, settimeofday, syslog, fanotify_init)"},
	{"file-handles", "sc(303, -100, b'/etc/passwd', 0, 0, 0), sc(304, -100, 0, 0)", "EPERM EPERM", "EPERM from the old deny-list too (name_to_handle_at, open_by_handle_at)"},
}

func secPrivileges(t *testing.T) {
	a := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, a.ID, py("1")))

	attack(t, "setuid-root", "EPERM the same way (uid 1000 without capabilities)", func(t *testing.T) {
		got := pyAttack(t, a.ID, `g = (ctypes.c_uint * 1)(0)
print(sc(105, 0), sc(117, 0, 0, 0), sc(106, 0), sc(119, 0, 0, 0), sc(116, 1, g), sc(113, 0, 0))`)
		wantOut(t, "setuid, setresuid, setgid, setresgid, setgroups, setreuid to root", got, "EPERM EPERM EPERM EPERM EPERM EPERM")
		if id := mustSh(t, a.ID, "id -u; id -G"); id != "1000\n1000\n" {
			t.Errorf("id after the attempts: %q", id)
		}
		stillServes(t, a.ID)
	})

	attack(t, "su-sudo-setuid-binaries", "the same: no_new_privs made su, mount, newgrp run as uid 1000", func(t *testing.T) {
		res := sh(t, shared, a.ID, "command -v sudo; su -c id root </dev/null; echo su=$?; mkdir -p /tmp/m; mount -t tmpfs none /tmp/m; echo mount=$?; newgrp root </dev/null; echo newgrp=$?; passwd -d root; echo passwd=$?")
		out := res.Stdout + res.Stderr
		for _, want := range []string{"su=1", "Authentication failure", "mount=32", "must be superuser", "newgrp=1", "passwd=1"} {
			if !strings.Contains(out, want) {
				t.Errorf("setuid programs: no %q in\n%s", want, out)
			}
		}
		if strings.Contains(out, "uid=0") || strings.Contains(res.Stdout, "/sudo") {
			t.Errorf("root or sudo reached:\n%s", out)
		}
		stillServes(t, a.ID)
	})

	attack(t, "crafted-setuid-binary", "no_new_privs kept euid 1000 too, but the file owned by host root showed as root (0:0) inside: the sandbox's ids were the host's", func(t *testing.T) {
		probe := staticProbe(t)
		base := agentBase(t, a.ID)
		plantFile(t, a.ID, probe, "workspace/suid-root", base, base, os.ModeSetuid|os.ModeSetgid|0o755)
		plantFile(t, a.ID, probe, "workspace/suid-hostroot", 0, 0, os.ModeSetuid|os.ModeSetgid|0o755)
		// The sandbox's root owns the first; host root is no one the
		// sandbox knows: the overflow id 65534.
		wantOut(t, "owners and modes inside", mustSh(t, a.ID, "stat -c '%u:%g %a' /workspace/suid-root /workspace/suid-hostroot"), "0:0 6755\n65534:65534 6755\n")
		for _, p := range []string{"/workspace/suid-root", "/workspace/suid-hostroot"} {
			res := run(t, shared, a.ID, p, "/etc/shadow")
			wantOut(t, p, res.Stdout, "uid=1000 euid=1000 setuid0=EPERM capeff=0000000000000000 nnp=1\n/etc/shadow=EACCES\n")
		}
		stillServes(t, a.ID)
	})

	attack(t, "file-capabilities", "the same (no_new_privs), with the capability's root being host root", func(t *testing.T) {
		probe := staticProbe(t)
		base := agentBase(t, a.ID)
		p := plantFile(t, a.ID, probe, "workspace/capbin", base, base, 0o755)
		caps := uint64(1<<unix.CAP_SETUID | 1<<unix.CAP_SETGID | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_SYS_ADMIN)
		if err := unix.Setxattr(p, "security.capability", vfsCapV3(caps, uint32(base)), 0); err != nil {
			t.Fatalf("set the file capability: %v", err)
		}
		res := run(t, shared, a.ID, "/workspace/capbin", "/etc/shadow")
		wantOut(t, "a binary with cap_setuid,cap_setgid,cap_dac_override,cap_sys_admin+ep for the sandbox's root", res.Stdout,
			"uid=1000 euid=1000 setuid0=EPERM capeff=0000000000000000 nnp=1\n/etc/shadow=EACCES\n")
		stillServes(t, a.ID)
	})

	attack(t, "unshare-command", "EPERM the same way", func(t *testing.T) {
		res := sh(t, shared, a.ID, "for f in -U -m -r -n -p -i; do unshare $f true; echo rc=$?; done")
		wantOut(t, "unshare -U -m -r -n -p -i", res.Stdout, strings.Repeat("rc=1\n", 6))
		if strings.Count(res.Stderr, "unshare failed: Operation not permitted") != 6 {
			t.Errorf("unshare errors:\n%s", res.Stderr)
		}
		stillServes(t, a.ID)
	})

	attack(t, "clone-namespaces", "EPERM the same way; clone3 ENOSYS", func(t *testing.T) {
		got := pyAttack(t, a.ID, `SIGCHLD = 17
fd = os.open('/proc/self/ns/user', os.O_RDONLY)
print(sc(56, 0x10000000 | SIGCHLD, 0, 0, 0, 0), sc(56, 0x00020000 | 0x20000000 | SIGCHLD, 0, 0, 0, 0), sc(56, 0x40000000 | SIGCHLD, 0, 0, 0, 0),
      sc(272, 0x10000000), sc(435, 0, 0), sc(308, fd, 0))`)
		wantOut(t, "clone(NEWUSER), clone(NEWNS|NEWPID), clone(NEWNET), unshare(NEWUSER), clone3, setns", got, "EPERM EPERM EPERM EPERM ENOSYS EPERM")
		stillServes(t, a.ID)
	})

	attack(t, "mount", "EPERM the same way", func(t *testing.T) {
		before := mustSh(t, a.ID, "cat /proc/self/mountinfo")
		got := pyAttack(t, a.ID, `os.makedirs('/tmp/mnt', exist_ok=True)
def m(src, dst, fs, flags):
    return 'ok' if libc.mount(src, dst, fs, ctypes.c_ulong(flags), None) == 0 else ename(ctypes.get_errno())
print(m(b'none', b'/tmp/mnt', b'tmpfs', 0), m(b'/etc', b'/tmp/mnt', None, 4096), m(b'proc', b'/tmp/mnt', b'proc', 0), m(None, b'/', None, 32 | 1),
      sc(430, b'tmpfs', 0), sc(428, -100, b'/etc', 1), sc(166, b'/proc', 2))`)
		wantOut(t, "mount tmpfs, bind, proc, remount / read-only, fsopen, open_tree, umount2", got, "EPERM EPERM EPERM EPERM EPERM EPERM EPERM")
		if after := mustSh(t, a.ID, "cat /proc/self/mountinfo"); after != before {
			t.Errorf("the mount table changed:\n%s", after)
		}
		stillServes(t, a.ID)
	})

	attack(t, "chroot", "EPERM the same way", func(t *testing.T) {
		wantOut(t, "chroot(2)", pyAttack(t, a.ID, `print(sc(161, b'/tmp'))`), "EPERM")
		res := sh(t, shared, a.ID, "chroot / true")
		if res.ExitCode != 125 || !strings.Contains(res.Stderr, "Operation not permitted") {
			t.Errorf("chroot / true: %+v", res)
		}
		stillServes(t, a.ID)
	})

	for _, c := range refusedCalls {
		attack(t, c.name, c.old, func(t *testing.T) {
			wantOut(t, c.name, pyAttack(t, a.ID, "print("+c.call+")"), c.want)
			stillServes(t, a.ID)
		})
	}

	attack(t, "personality", "EPERM the same way", func(t *testing.T) {
		wantOut(t, "personality(ADDR_NO_RANDOMIZE), personality(READ_IMPLIES_EXEC)", pyAttack(t, a.ID, `print(sc(135, 0x0040000), sc(135, 0x0400000))`), "EPERM EPERM")
		if res := sh(t, shared, a.ID, "setarch -R true"); res.ExitCode == 0 || !strings.Contains(res.Stderr, "Operation not permitted") {
			t.Errorf("setarch -R: %+v", res)
		}
		stillServes(t, a.ID)
	})

	attack(t, "i386-int80", "unknown: int 0x80 faults on this kernel whatever the filter", func(t *testing.T) {
		// A 64-bit process makes i386 getpid through int 0x80; the filter
		// kills it with SIGSYS.
		const int80 = `import ctypes, mmap, os, signal
pid = os.fork()
if pid == 0:
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))  # mov eax, 20; int 0x80; ret
    r = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))()
    print('returned', r, flush=True)
    os._exit(0)
_, st = os.waitpid(pid, 0)
print(signal.Signals(os.WTERMSIG(st)).name if os.WIFSIGNALED(st) else 'exit %d' % os.WEXITSTATUS(st))`
		got := userPy(t, a.ID, int80)
		if strings.Contains(got, "returned") {
			t.Fatalf("an i386 system call ran: %s", got)
		}
		if strings.TrimSpace(got) != "SIGSYS" {
			host, _ := exec.Command("/usr/bin/python3", "-c", int80).CombinedOutput()
			if strings.TrimSpace(got) == "SIGSEGV" && strings.TrimSpace(string(host)) == "SIGSEGV" {
				stillServes(t, a.ID)
				t.Skipf("int 0x80 faults on this kernel (IA32 emulation off): a host process dies with SIGSEGV too, so the filter's SIGSYS cannot be seen")
			}
			t.Fatalf("int 0x80 in the sandbox: %s (on the host: %s); want SIGSYS", got, host)
		}
		stillServes(t, a.ID)
	})

	attack(t, "agent-capabilities", "CapEff and CapPrm of the agent were 000001fffeffffff (every capability but CAP_SYS_RESOURCE) for its whole life, as real root", func(t *testing.T) {
		checkAgentLockedDown(t, a.ID)
		self := procStatus(mustSh(t, a.ID, "cat /proc/self/status"))
		for k, want := range map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapInh": "0000000000000000",
			"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1"} {
			if self[k] != want {
				t.Errorf("user process %s: %q, want %q", k, self[k], want)
			}
		}
		stillServes(t, a.ID)
	})
}

// ---------------------------------------------------------------------------
// Devices

// devTar is a layer of device nodes (owned by the user, mode 0666) and the
// probe.
func devTar(t *testing.T, probe []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(1700000000, 0)
	add := func(h *tar.Header, body []byte) {
		h.ModTime = mt
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if body != nil {
			tw.Write(body)
		}
	}
	add(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}, nil)
	add(&tar.Header{Name: "workspace/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 1000, Gid: 1000}, nil)
	add(&tar.Header{Name: "probe", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(probe))}, probe)
	for _, n := range []struct {
		name         string
		typ          byte
		major, minor int64
	}{{"fbx-sec-mem", tar.TypeChar, 1, 1}, {"fbx-sec-zero", tar.TypeChar, 1, 5}, {"fbx-sec-kmsg", tar.TypeChar, 1, 11}, {"fbx-sec-loop0", tar.TypeBlock, 7, 0}, {"fbx-sec-vda", tar.TypeBlock, 254, 0}} {
		add(&tar.Header{Name: n.name, Typeflag: n.typ, Mode: 0o666, Uid: 1000, Gid: 1000, Devmajor: n.major, Devminor: n.minor}, nil)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func secDevices(t *testing.T) {
	a := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, a.ID, py("1")))
	ctx := ctxT(t)

	attack(t, "dev-listing", "the same names, but made with mknod by a root agent that kept CAP_MKNOD, on a /dev tmpfs without nodev, and no devices cgroup", func(t *testing.T) {
		got := mustSh(t, a.ID, "ls -A /dev | tr '\\n' ' '; echo; stat -c '%n %F %t:%T' /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty /dev/pts/ptmx; ls -A /dev/pts | tr '\\n' ' '")
		want := "fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero \n" +
			"/dev/null character special file 1:3\n/dev/zero character special file 1:5\n/dev/full character special file 1:7\n" +
			"/dev/random character special file 1:8\n/dev/urandom character special file 1:9\n/dev/tty character special file 5:0\n" +
			"/dev/pts/ptmx character special file 5:2\nptmx "
		wantOut(t, "/dev", got, want)
		stillServes(t, a.ID)
	})

	attack(t, "devices-cgroup-allow-list", "the sandbox had no devices cgroup at all: every device was allowed, and nodev mounts alone kept nodes shut", func(t *testing.T) {
		// Read from the host: the sandbox's own device rules, which hold
		// even where a node is on a mount without nodev (the host's
		// nodes bound into /dev are).
		if _, err := os.Stat("/sys/fs/cgroup/devices"); err != nil {
			t.Skip("no v1 devices hierarchy on this host (on cgroup2 the rules are a BPF program, which the cgroup's files do not show)")
		}
		list := cgroupFile(t, a.ID, "devices", "devices.list")
		if list == "" {
			t.Fatalf("the sandbox has no devices cgroup: every device is allowed")
		}
		wantOut(t, "devices.list", list, "c 1:3 rw\nc 1:5 rw\nc 1:7 rw\nc 1:8 rw\nc 1:9 rw\nc 5:0 rw\nc 5:2 rw\nc 136:* rw")
		stillServes(t, a.ID)
	})

	attack(t, "mknod-mem", "EPERM the same way (uid 1000 has no CAP_MKNOD)", func(t *testing.T) {
		wantOut(t, "mknod /tmp/mem c 1 1, mknodat", pyAttack(t, a.ID, `print(tr(lambda: os.mknod('/tmp/mem', 0o20666, os.makedev(1, 1))), sc(259, -100, b'/workspace/mem', 0o20666, os.makedev(1, 1)))`), "EPERM EPERM")
		if res := sh(t, shared, a.ID, "mknod /workspace/mem c 1 1"); res.ExitCode == 0 || !strings.Contains(res.Stderr, "Operation not permitted") {
			t.Errorf("mknod(1): %+v", res)
		}
		stillServes(t, a.ID)
	})

	attack(t, "mknod-loop-block", "EPERM the same way", func(t *testing.T) {
		wantOut(t, "mknod b 7:0", pyAttack(t, a.ID, `print(tr(lambda: os.mknod('/tmp/loop0', 0o60666, os.makedev(7, 0))))`), "EPERM")
		stillServes(t, a.ID)
	})

	attack(t, "mknod-host-disk", "EPERM the same way", func(t *testing.T) {
		var st unix.Stat_t
		if err := unix.Stat(shared.dataDir, &st); err != nil {
			t.Fatal(err)
		}
		major, minor := unix.Major(st.Dev), unix.Minor(st.Dev)
		got := pyAttack(t, a.ID, `M, m = int(sys.argv[1]), int(sys.argv[2])
print(tr(lambda: os.mknod('/tmp/disk', 0o60666, os.makedev(M, m))), tr(lambda: os.mknod('/tmp/vda', 0o60666, os.makedev(254, 0))), tr(lambda: os.mknod('/dev/shm/disk', 0o60666, os.makedev(M, m))))`,
			strconv.Itoa(int(major)), strconv.Itoa(int(minor)))
		wantOut(t, fmt.Sprintf("mknod of the data dir's disk (b %d:%d) and b 254:0, in /tmp and /dev/shm", major, minor), got, "EPERM EPERM EPERM")
		stillServes(t, a.ID)
	})

	attack(t, "mknod-whiteout-and-fifo", "the same: a 0:0 character device (an overlay whiteout) was refused by the old filter, FIFOs allowed", func(t *testing.T) {
		got := pyAttack(t, a.ID, `print(tr(lambda: os.mknod('/tmp/wh', 0o20666, 0)), tr(lambda: os.mkfifo('/tmp/fifo-ok')), tr(lambda: os.mknod('/tmp/reg-ok', 0o100644)))`)
		wantOut(t, "mknod c 0:0, mkfifo, mknod of a regular file", got, "EPERM ok ok")
		stillServes(t, a.ID)
	})

	attack(t, "planted-device-node", "EACCES the same way (the root overlay was nodev already), but the files API opened the nodes instead of refusing them by type (403 permission denied)", func(t *testing.T) {
		root := rootfs(t, a.ID)
		base := agentBase(t, a.ID)
		for _, n := range []struct {
			name        string
			mode        uint32
			major, minr int
		}{{"mem", syscall.S_IFCHR, 1, 1}, {"zero", syscall.S_IFCHR, 1, 5}, {"loop0", syscall.S_IFBLK, 7, 0}} {
			p := filepath.Join(root, "workspace", "planted-"+n.name)
			if err := syscall.Mknod(p, n.mode|0o666, n.major<<8|n.minr); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(p, base+1000, base+1000); err != nil {
				t.Fatal(err)
			}
		}
		got := pyAttack(t, a.ID, `print(' '.join(tr(lambda: rd('/workspace/planted-' + n)) for n in ['mem', 'zero', 'loop0']), tr(lambda: os.mknod('/workspace/mine', 0o20666, os.makedev(1, 1))))`)
		wantOut(t, "open the planted mem, zero and loop0 nodes; make one", got, "EACCES EACCES EACCES EPERM")
		for _, n := range []string{"mem", "zero", "loop0"} {
			if _, err := shared.c.ReadFile(ctx, a.ID, "/workspace/planted-"+n); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("files API read of a planted %s node: %v; want 400", n, err)
			}
		}
		// The files API makes regular files only.
		if _, err := shared.c.WriteFile(ctx, a.ID, "/workspace/api-made", strings.NewReader("x"), 0o666); err != nil {
			t.Fatal(err)
		}
		wantOut(t, "what the files API wrote", mustSh(t, a.ID, "stat -c %F /workspace/api-made"), "regular file\n")
		stillServes(t, a.ID)
	})

	attack(t, "image-with-device-nodes", "the same: image layers kept device nodes, and the nodev root refused them", func(t *testing.T) {
		probe, err := os.ReadFile(staticProbe(t))
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("sec-devnodes-%d", time.Now().UnixNano())
		archive := dockerSaveOf(t, ociImage(t, devTar(t, probe)))
		if _, err := shared.c.ImportImage(ctx, name, bytes.NewReader(archive), nil); err != nil {
			t.Fatalf("import an image with device nodes: %v", err)
		}
		t.Cleanup(func() { shared.c.DeleteImage(context.Background(), name) })
		sb := newSandbox(t, shared, api.CreateSandboxRequest{Image: name})
		res := run(t, shared, sb.ID, "/probe", "/fbx-sec-mem", "/fbx-sec-zero", "/fbx-sec-kmsg", "/fbx-sec-loop0", "/fbx-sec-vda")
		wantOut(t, "the image's nodes opened in a sandbox", res.Stdout, "uid=1000 euid=1000 setuid0=EPERM capeff=0000000000000000 nnp=1\n"+
			"/fbx-sec-mem=EACCES\n/fbx-sec-zero=EACCES\n/fbx-sec-kmsg=EACCES\n/fbx-sec-loop0=EACCES\n/fbx-sec-vda=EACCES\n")
		// On the host the nodes are real: no unprivileged account may reach
		// them.
		nodes, _ := filepath.Glob(filepath.Join(os.Getenv("FORKBOX_IMAGES_DIR"), ".layers", "*", "fs", "fbx-sec-vda"))
		if len(nodes) == 0 {
			t.Fatalf("the image's layer is not under %s/.layers", os.Getenv("FORKBOX_IMAGES_DIR"))
		}
		for _, n := range nodes {
			out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
				"import sys\ntry:\n    open(sys.argv[1], 'rb')\n    print('opened')\nexcept OSError as e:\n    print(e.strerror)", n).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "Permission denied" {
				t.Errorf("host user nobody opening %s: %s %v", n, out, err)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "build-step-mknod", "EPERM the same way (build steps had no CAP_MKNOD)", func(t *testing.T) {
		name := fmt.Sprintf("sec-build-mknod-%d", time.Now().UnixNano())
		_, err := shared.c.BuildImage(ctx, api.Recipe{Name: name, Base: "python", Steps: []api.RecipeStep{
			{Run: "echo " + recipeNonce + " && mknod /tmp/vda b 254 0"},
		}}, "", nil)
		if err == nil {
			shared.c.DeleteImage(context.Background(), name)
			t.Fatalf("a build step made a block device")
		}
		if !strings.Contains(err.Error(), "Operation not permitted") {
			t.Errorf("build with mknod: %v; want Operation not permitted", err)
		}
		if _, err := shared.c.GetImage(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("the failed build registered an image: %v", err)
		}
		stillServes(t, a.ID)
	})

	attack(t, "dangerous-nodes-absent", "absent the same way", func(t *testing.T) {
		got := pyAttack(t, a.ID, `names = ['kmsg', 'mem', 'kmem', 'port', 'vda', 'sda', 'loop0', 'loop-control', 'fuse', 'kvm', 'vsock', 'vhost-vsock', 'vhost-net', 'btrfs-control', 'mapper/control', 'console', 'tty0', 'ttyS0', 'nvram', 'cpu/0/msr', 'dri/card0', 'uinput']
print(sorted(set(tr(lambda: rd('/dev/' + n)) for n in names)))`)
		wantOut(t, "opening kmsg, mem, disks, loop, fuse, kvm, vsock, consoles, msr…", got, "['ENOENT']")
		stillServes(t, a.ID)
	})

	attack(t, "dev-net-tun-absent", "absent the same way", func(t *testing.T) {
		wantOut(t, "/dev/net/tun", pyAttack(t, a.ID, `print(tr(lambda: os.open('/dev/net/tun', os.O_RDWR)), tr(lambda: os.listdir('/dev/net')))`), "ENOENT ENOENT")
		stillServes(t, a.ID)
	})

	attack(t, "allowed-nodes-work", "the same", func(t *testing.T) {
		got := pyAttack(t, a.ID, `def full():
    with open('/dev/full', 'wb', buffering=0) as f:
        f.write(b'x')
z = open('/dev/zero', 'rb').read(16)
u = open('/dev/urandom', 'rb').read(16)
with open('/dev/null', 'wb') as f:
    f.write(b'x' * 4096)
m, s = os.openpty()
print(tr(full), z == bytes(16), len(u), os.ttyname(s).startswith('/dev/pts/'))`)
		wantOut(t, "write /dev/full, read /dev/zero and /dev/urandom, write /dev/null, open a pty", got, "ENOSPC True 16 True")
		stillServes(t, a.ID)
	})
}

// ---------------------------------------------------------------------------
// The network

// connectPy connects to every host:port of its JSON argument at once and
// prints a JSON object of the outcomes: connected, timeout or the errno.
const connectPy = `import errno, json, socket, sys, threading
targets, timeout = json.loads(sys.argv[1]), float(sys.argv[2])
out = {}
def one(h, p):
    fam = socket.AF_INET6 if ':' in h else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        addr = socket.getaddrinfo(h, p, fam, socket.SOCK_STREAM)[0][4]
        s.connect(addr)
        r = 'connected'
    except socket.timeout:
        r = 'timeout'
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
    out['%s:%d' % (h, p)] = r
ts = [threading.Thread(target=one, args=tuple(t)) for t in targets]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps(out, sort_keys=True))`

type target struct {
	host string
	port int
}

// connectAll tries every target from the sandbox and returns the outcome of
// each.
func connectAll(t *testing.T, sb string, targets []target, timeout time.Duration) map[string]string {
	t.Helper()
	var list [][]any
	for _, x := range targets {
		list = append(list, []any{x.host, x.port})
	}
	arg, _ := json.Marshal(list)
	res := run(t, shared, sb, "python3", "-c", connectPy, string(arg), fmt.Sprint(timeout.Seconds()))
	out := map[string]string{}
	if res.ExitCode != 0 || json.Unmarshal([]byte(res.Stdout), &out) != nil {
		t.Fatalf("connect script: %+v", res)
	}
	return out
}

// hostListener is a TCP listener on every host address that counts the
// connections it accepts.
type hostListener struct {
	port     int
	accepted atomic.Int64
}

func newHostListener(t *testing.T) *hostListener {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	h := &hostListener{port: ln.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			c.Close()
		}
	}()
	return h
}

// hostAddrs lists the host's addresses other than loopback and link-local
// ones (the fbx* links of running sandboxes included).
func hostAddrs(t *testing.T) []string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		ip, _, err := net.ParseCIDR(a.String())
		if err != nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, ip.String())
	}
	if len(out) == 0 {
		t.Fatal("the host has no address but loopback")
	}
	return out
}

// sandboxLink is the host side of a sandbox's veth: its name (as
// internal/netsetup names it), IPv4 and IPv6 link-local addresses, and the
// sandbox's own IPv4 (the host's + 1 in their /30).
type sandboxLink struct {
	name, hostIP, hostLL, sandboxIP string
}

func linkOf(t *testing.T, id string) sandboxLink {
	t.Helper()
	sum := sha256.Sum256([]byte(id))
	l := sandboxLink{name: "fbx" + hex.EncodeToString(sum[:6])}
	ifc, err := net.InterfaceByName(l.name)
	if err != nil {
		t.Fatalf("the host side of %s's veth (%s): %v", id, l.name, err)
	}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		ip, _, _ := net.ParseCIDR(a.String())
		switch {
		case ip.To4() != nil:
			l.hostIP = ip.String()
			v4 := ip.To4()
			l.sandboxIP = net.IPv4(v4[0], v4[1], v4[2], v4[3]+1).String()
		case ip.IsLinkLocalUnicast():
			l.hostLL = ip.String()
		}
	}
	if l.hostIP == "" {
		t.Fatalf("%s has no IPv4 address", l.name)
	}
	return l
}

// netlinkPy asks route netlink to take lo down, add an address and add a
// route, and prints the kernel's answer to each.
const netlinkPy = `def nl(msg_type, flags, payload):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    s.bind((0, 0))
    s.send(struct.pack('=LHHLL', 16 + len(payload), msg_type, flags, 1, 0) + payload)
    d = s.recv(65536)
    s.close()
    if struct.unpack('=LHHLL', d[:16])[1] != 2:
        return 'no ack'
    err = struct.unpack('=i', d[16:20])[0]
    return 'ok' if err == 0 else ename(-err)
def rta(kind, data):
    return struct.pack('=HH', 4 + len(data), kind) + data
REQ, ACK, CREATE, EXCL = 1, 4, 0x400, 0x200
lo_down = nl(16, REQ | ACK, struct.pack('=BBHiII', 0, 0, 0, 1, 0, 1))
addr = nl(20, REQ | ACK | CREATE | EXCL, struct.pack('=BBBBI', 2, 32, 0, 0, 1) + rta(2, socket.inet_aton('10.99.99.99')) + rta(1, socket.inet_aton('10.99.99.99')))
route = nl(24, REQ | ACK | CREATE | EXCL, struct.pack('=BBBBBBBBI', 2, 24, 0, 0, 254, 4, 253, 1, 0) + rta(1, socket.inet_aton('10.99.98.0')) + rta(4, struct.pack('=i', 1)))
print(lo_down, addr, route, open('/sys/class/net/lo/operstate').read().strip() != 'down')`

func secNetwork(t *testing.T) {
	a := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, a.ID, py("1")))
	ln := newHostListener(t)
	_, daemonPortS, _ := net.SplitHostPort(shared.addr)
	daemonPort, _ := strconv.Atoi(daemonPortS)
	t.Cleanup(func() {
		if n := ln.accepted.Load(); n != 0 {
			t.Errorf("the host's listener accepted %d connections from sandboxes", n)
		}
	})

	attack(t, "metadata-service", "unreachable the same way (loopback only): ENETUNREACH", func(t *testing.T) {
		got := connectAll(t, a.ID, []target{{"169.254.169.254", 80}, {"169.254.170.2", 80}, {"fd00:ec2::254", 80}}, 3*time.Second)
		for k, v := range got {
			if v != "ENETUNREACH" {
				t.Errorf("%s: %s; want ENETUNREACH", k, v)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "public-internet", "unreachable the same way: ENETUNREACH", func(t *testing.T) {
		got := connectAll(t, a.ID, []target{{"8.8.8.8", 53}, {"1.1.1.1", 443}, {"2001:4860:4860::8888", 53}}, 3*time.Second)
		for k, v := range got {
			if v != "ENETUNREACH" {
				t.Errorf("%s: %s; want ENETUNREACH", k, v)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "host-addresses", "unreachable the same way: ENETUNREACH", func(t *testing.T) {
		var targets []target
		for _, ip := range hostAddrs(t) {
			targets = append(targets, target{ip, ln.port}, target{ip, daemonPort})
		}
		got := connectAll(t, a.ID, targets, 3*time.Second)
		for k, v := range got {
			if v != "ENETUNREACH" {
				t.Errorf("%s: %s; want ENETUNREACH", k, v)
			}
		}
		// Its own loopback has the ports free: nothing there is the host's.
		got = connectAll(t, a.ID, []target{{"127.0.0.1", ln.port}, {"127.0.0.1", daemonPort}, {"::1", ln.port}}, 3*time.Second)
		for k, v := range got {
			if v != "ECONNREFUSED" && !(strings.HasPrefix(k, "::1") && v == "EADDRNOTAVAIL") {
				t.Errorf("%s on the sandbox's own loopback: %s; want ECONNREFUSED", k, v)
			}
		}
		if n := ln.accepted.Load(); n != 0 {
			t.Fatalf("the host's listener accepted %d connections", n)
		}
		stillServes(t, a.ID)
	})

	attack(t, "raw-and-packet-sockets", "raw, AF_PACKET and AF_XDP sockets were EPERM (no CAP_NET_RAW), but only once the kernel's code for each family had been reached", func(t *testing.T) {
		got := pyAttack(t, a.ID, `print(tr(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)), tr(lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, 58)),
      tr(lambda: socket.socket(17, socket.SOCK_RAW, 0)), tr(lambda: socket.socket(17, socket.SOCK_DGRAM, 0)), tr(lambda: socket.socket(44, socket.SOCK_RAW, 0)))`)
		wantOut(t, "raw IPv4 and IPv6, AF_PACKET raw and dgram, AF_XDP", got, "EPERM EPERM EAFNOSUPPORT EAFNOSUPPORT EAFNOSUPPORT")
		stillServes(t, a.ID)
	})

	attack(t, "vsock", "an AF_VSOCK stream socket was created (dgram: ENODEV): vsock is not network-namespaced and reaches the hypervisor's services (this VM's control agent listens on vsock)", func(t *testing.T) {
		wantOut(t, "AF_VSOCK stream and dgram", pyAttack(t, a.ID, `print(tr(lambda: socket.socket(40, socket.SOCK_STREAM, 0)), tr(lambda: socket.socket(40, socket.SOCK_DGRAM, 0)))`), "EAFNOSUPPORT EAFNOSUPPORT")
		stillServes(t, a.ID)
	})

	attack(t, "netlink-families", "netlink audit, uevent, sock_diag, generic, xfrm and netfilter sockets were all created (AF_ALG was refused)", func(t *testing.T) {
		got := pyAttack(t, a.ID, `print(' '.join(tr(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, p)) for p in (9, 15, 4, 16, 6, 12)), tr(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)), tr(lambda: socket.socket(38, 5, 0)))`)
		wantOut(t, "netlink audit, uevent, sock_diag, generic, xfrm, netfilter; route; AF_ALG", got, "EAFNOSUPPORT EAFNOSUPPORT EAFNOSUPPORT EAFNOSUPPORT EAFNOSUPPORT EAFNOSUPPORT ok EAFNOSUPPORT")
		stillServes(t, a.ID)
	})

	attack(t, "netlink-link-addr-route", "EPERM the same way (no CAP_NET_ADMIN)", func(t *testing.T) {
		wantOut(t, "lo down, an address, a route", pyAttack(t, a.ID, netlinkPy), "EPERM EPERM EPERM True")
		stillServes(t, a.ID)
	})

	// With internet access: i and j each have a veth; the host and each
	// other must stay out of reach, only forwarding to the "outside" works.
	o := newOutside(t)
	i := newSandbox(t, shared, api.CreateSandboxRequest{AllowInternetAccess: true})
	j := newSandbox(t, shared, api.CreateSandboxRequest{AllowInternetAccess: true})
	li, lj := linkOf(t, i.ID), linkOf(t, j.ID)
	mustSh(t, j.ID, "nohup python3 -m http.server --bind 0.0.0.0 8123 >/dev/null 2>&1 &")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if got := connectAll(t, j.ID, []target{{"127.0.0.1", 8123}}, time.Second); got["127.0.0.1:8123"] == "connected" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("j's server does not answer on its own loopback")
		}
		time.Sleep(200 * time.Millisecond)
	}

	attack(t, "internet-to-host-veth", "dropped the same way (the same nftables rules)", func(t *testing.T) {
		// The outside works, so a drop below is the firewall's.
		if res := run(t, shared, i.ID, "python3", "-c", fetchPy, "http://"+o.addr+"/hello.txt"); strings.TrimSpace(res.Stdout) != "hello from outside" {
			t.Fatalf("i cannot reach the outside: %+v", res)
		}
		targets := []target{{li.hostIP, ln.port}, {li.hostIP, daemonPort}, {li.hostIP, 22}}
		if li.hostLL != "" {
			targets = append(targets, target{li.hostLL + "%eth0", ln.port})
		}
		for k, v := range connectAll(t, i.ID, targets, 3*time.Second) {
			if v != "timeout" {
				t.Errorf("%s: %s; want a timeout (dropped)", k, v)
			}
		}
		stillServes(t, i.ID)
	})

	attack(t, "internet-to-host-addresses", "dropped the same way", func(t *testing.T) {
		var targets []target
		for _, ip := range hostAddrs(t) {
			if ip == li.hostIP {
				continue
			}
			targets = append(targets, target{ip, ln.port}, target{ip, daemonPort})
		}
		for k, v := range connectAll(t, i.ID, targets, 3*time.Second) {
			want := "timeout"
			if strings.Contains(k, ":") && strings.Count(k, ":") > 1 && v == "ENETUNREACH" {
				want = v // no IPv6 route out of the sandbox: fine too
			}
			if v != want {
				t.Errorf("%s: %s; want a timeout (dropped)", k, v)
			}
		}
		stillServes(t, i.ID)
	})

	attack(t, "internet-to-daemon-api", "dropped the same way; the API listened on loopback only", func(t *testing.T) {
		got := connectAll(t, i.ID, []target{{li.hostIP, daemonPort}, {"127.0.0.1", daemonPort}}, 3*time.Second)
		if got[fmt.Sprintf("%s:%d", li.hostIP, daemonPort)] != "timeout" || got[fmt.Sprintf("127.0.0.1:%d", daemonPort)] != "ECONNREFUSED" {
			t.Errorf("the daemon's port through the gateway and on the sandbox's loopback: %v", got)
		}
		res := run(t, shared, i.ID, "python3", "-c", fetchPy, fmt.Sprintf("http://%s:%d/v1/sandboxes", li.hostIP, daemonPort))
		if !strings.HasPrefix(res.Stdout, "FAILED") {
			t.Errorf("i listed sandboxes through its gateway: %q", res.Stdout)
		}
		stillServes(t, i.ID)
	})

	attack(t, "internet-to-other-sandbox", "dropped the same way", func(t *testing.T) {
		got := connectAll(t, i.ID, []target{{lj.sandboxIP, 8123}, {lj.hostIP, ln.port}}, 3*time.Second)
		for k, v := range got {
			if v != "timeout" {
				t.Errorf("%s: %s; want a timeout (dropped)", k, v)
			}
		}
		// And a sandbox without internet access cannot route there at all.
		for k, v := range connectAll(t, a.ID, []target{{lj.sandboxIP, 8123}}, 3*time.Second) {
			if v != "ENETUNREACH" {
				t.Errorf("from a: %s: %s; want ENETUNREACH", k, v)
			}
		}
		stillServes(t, i.ID)
		stillServes(t, j.ID)
	})

	attack(t, "internet-to-link-local-and-lan", "forwarded: a review got the cloud metadata service's answer at 169.254.169.254, and every RFC 1918 host of the operator's LAN was reachable", func(t *testing.T) {
		// Listeners of the test's own, in namespaces it makes: a link-local
		// one (never the platform's metadata address) and a LAN one.
		ll := newOutsideAt(t, func(n int) (string, string) { return fmt.Sprintf("169.254.%d.1", n), fmt.Sprintf("169.254.%d.2", n) })
		lan := newOutsideAt(t, func(n int) (string, string) { return fmt.Sprintf("10.250.%d.1", n), fmt.Sprintf("10.250.%d.2", n) })
		for _, o := range []*outside{ll, lan} {
			if res := run(t, shared, i.ID, "python3", "-c", strings.Replace(fetchPy, "timeout=3", "timeout=1.5", 1), "http://"+o.addr+"/hello.txt"); !strings.HasPrefix(res.Stdout, "FAILED") {
				t.Errorf("i reached %s: %q", o.addr, res.Stdout)
			}
		}
		// Port 53 of the host is open to sandboxes only for each one's own
		// resolver: i asking j's gets nothing.
		res := run(t, shared, i.ID, "python3", "-c", `import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1.5)
q = bytes.fromhex('abcd01000001000000000000') + b'\x07example\x03com\x00' + bytes.fromhex('00010001')
s.sendto(q, (sys.argv[1], 53))
try:
    s.recv(512)
    print('answered')
except socket.timeout:
    print('timeout')`, lj.hostIP)
		if strings.TrimSpace(res.Stdout) != "timeout" {
			t.Errorf("i asking j's resolver: %+v", res)
		}
		stillServes(t, i.ID)
	})
}

// ---------------------------------------------------------------------------
// Other sandboxes

// victimPy holds, in the victim sandbox, an abstract unix socket, SysV
// shared memory and a message queue, a POSIX message queue and a file in
// /dev/shm, and says so.
const victimPy = `import ctypes, os, socket, time
s = socket.socket(socket.AF_UNIX)
s.bind('\0fbx-sec-victim')
s.listen(5)
libc = ctypes.CDLL(None, use_errno=True)
shm = libc.shmget(0x5ec0b0b, 4096, 0o1666)
msq = libc.msgget(0x5ec0b0b, 0o1666)
mq = libc.mq_open(b'/fbx-sec-victim', os.O_CREAT | os.O_RDWR, 0o666, None)
with open('/dev/shm/fbx-sec-victim', 'w') as f:
    f.write('victim')
with open('/tmp/victim.ready', 'w') as f:
    f.write('%d %d %d\n' % (shm, msq, mq))
time.sleep(3600)
`

// ipcProbe looks for the victim's IPC objects.
const ipcProbe = `def conn():
    s = socket.socket(socket.AF_UNIX)
    s.connect('\0fbx-sec-victim')
def ok(r):
    return 'ok' if r >= 0 else ename(ctypes.get_errno())
print(tr(conn), ok(libc.shmget(0x5ec0b0b, 0, 0)), ok(libc.msgget(0x5ec0b0b, 0)), ok(libc.mq_open(b'/fbx-sec-victim', os.O_RDONLY)), tr(lambda: rd('/dev/shm/fbx-sec-victim')))`

func secCrossSandbox(t *testing.T) {
	a := newSandbox(t, shared, api.CreateSandboxRequest{})
	b := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, a.ID, py("1")))
	noError(t, runCode(t, shared, b.ID, py("1")))
	mustSh(t, b.ID, "echo b-only > /workspace/b-secret; nohup sleep 4747 >/dev/null 2>&1 &")

	attack(t, "fork-shares-lineage-range", "every sandbox had host uids 0 and 1000, forks included", func(t *testing.T) {
		// A fork is the same lineage: its processes and files carry the
		// source's host ids (the rule of internal/userns). A change here
		// must be deliberate.
		fr, err := shared.c.Fork(ctxT(t), b.ID, api.ForkRequest{Count: 1})
		if err != nil {
			t.Fatalf("fork b: %v", err)
		}
		t.Cleanup(func() {
			for _, s := range fr.Sandboxes {
				shared.c.DeleteSandbox(context.Background(), s.ID)
			}
			shared.c.DeleteSnapshot(context.Background(), fr.Snapshot.ID)
		})
		f := fr.Sandboxes[0].ID
		if got, want := agentBase(t, f), agentBase(t, b.ID); got != want {
			t.Errorf("the fork's range starts at %d, its source's at %d", got, want)
		}
		if agentBase(t, f) == agentBase(t, a.ID) {
			t.Errorf("the fork shares a's range")
		}
		wantOut(t, "the source's file in the fork", mustSh(t, f, "stat -c %U /workspace/b-secret; cat /workspace/b-secret"), "user\nb-only\n")
		// Same ids, separate files: the fork's writes stay its own.
		mustSh(t, f, "echo fork-was-here > /workspace/b-secret; touch /workspace/from-fork")
		wantOut(t, "the source after the fork wrote", mustSh(t, b.ID, "cat /workspace/b-secret; ls /workspace/from-fork 2>&1 | grep -c 'No such'"), "b-only\n1\n")
		stillServes(t, f)
	})

	// b's IPC objects come after the fork: CRIU cannot dump a sandbox that
	// holds a POSIX message queue (see unsuspendable-idle-sandbox).
	if _, err := shared.c.WriteFile(ctxT(t), b.ID, "/tmp/victim.py", strings.NewReader(victimPy), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSh(t, b.ID, "nohup python3 /tmp/victim.py >/tmp/victim.log 2>&1 & for i in $(seq 100); do [ -s /tmp/victim.ready ] && break; sleep 0.1; done; cat /tmp/victim.ready")
	bAgent := agentHostPID(t, b.ID)

	attack(t, "processes-invisible", "invisible the same way (PID namespaces)", func(t *testing.T) {
		out := mustSh(t, a.ID, "ps -eo args=")
		for _, bad := range []string{"4747", "victim.py"} {
			if strings.Contains(out, bad) {
				t.Errorf("a's ps shows b's %q:\n%s", bad, out)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "proc-root-by-host-pid", "ENOENT the same way, but a and b ran as the same host uids (0 and 1000): anything of b that a reached was a's", func(t *testing.T) {
		var bSleep int
		for _, pid := range sandboxHostProcs(t, b.ID) {
			if pidAlive(pid, "sleep 4747") {
				bSleep = pid
			}
		}
		got := pyAttack(t, a.ID, `out = []
for p in sys.argv[1:]:
    out += [tr(lambda: os.stat('/proc/%s' % p)), tr(lambda: rd('/proc/%s/root/workspace/b-secret' % p)), tr(lambda: rd('/proc/%s/cwd/b-secret' % p))]
print(' '.join(out))`, strconv.Itoa(bAgent), strconv.Itoa(bSleep))
		wantOut(t, "b's agent and sleep by host pid through /proc", got, "ENOENT ENOENT ENOENT ENOENT ENOENT ENOENT")
		stillServes(t, a.ID)
	})

	attack(t, "host-paths-of-b", "ENOENT the same way, but a's own mountinfo spelt out the pattern <data>/sandboxes/<id>/… of b's paths", func(t *testing.T) {
		got := pyAttack(t, a.ID, `print(' '.join(tr(lambda: rd(p)) for p in sys.argv[1:]))`,
			filepath.Join(shared.dataDir, "sandboxes", b.ID, "disk", "upper", "workspace", "b-secret"),
			filepath.Join(shared.dataDir, "sandboxes", b.ID, "rootfs", "workspace", "b-secret"),
			fmt.Sprintf("/proc/%d/root/workspace/b-secret", bAgent), "/sandboxes/"+b.ID+"/rootfs/workspace/b-secret")
		wantOut(t, "b's files by their host paths", got, "ENOENT ENOENT ENOENT ENOENT")
		if strings.Contains(mustSh(t, a.ID, "cat /proc/self/mountinfo"), b.ID) {
			t.Errorf("a's mountinfo names b")
		}
		stillServes(t, a.ID)
	})

	attack(t, "abstract-socket-and-ipc", "refused the same way (network and IPC namespaces)", func(t *testing.T) {
		wantOut(t, "b itself", pyAttack(t, b.ID, ipcProbe), "ok ok ok ok ok")
		wantOut(t, "b's abstract socket, SysV shm and queue, POSIX queue, /dev/shm file from a", pyAttack(t, a.ID, ipcProbe), "ECONNREFUSED ENOENT ENOENT ENOENT ENOENT")
		if out := mustSh(t, a.ID, "ipcs; ls -A /dev/mqueue /dev/shm"); strings.Contains(out, "5ec0b0b") || strings.Contains(out, "fbx-sec") {
			t.Errorf("a's ipcs and queues show b's:\n%s", out)
		}
		stillServes(t, a.ID)
	})

	attack(t, "kernel-ports-on-loopback", "refused the same way (network namespaces)", func(t *testing.T) {
		listening := func(sb string) []int {
			out := pyAttack(t, sb, `ports = set()
for f in ('/proc/net/tcp', '/proc/net/tcp6'):
    for line in open(f).read().splitlines()[1:]:
        x = line.split()
        if x[3] == '0A':
            ports.add(int(x[1].split(':')[-1], 16))
print(' '.join(map(str, sorted(ports))))`)
			var ports []int
			for _, f := range strings.Fields(out) {
				n, _ := strconv.Atoi(f)
				ports = append(ports, n)
			}
			return ports
		}
		bPorts, aPorts := listening(b.ID), listening(a.ID)
		if len(bPorts) < 5 {
			t.Fatalf("b's kernel listens on %v: fewer than its five ZeroMQ ports", bPorts)
		}
		var targets []target
		for _, p := range bPorts {
			if !slices.Contains(aPorts, p) {
				targets = append(targets, target{"127.0.0.1", p})
			}
		}
		for k, v := range connectAll(t, a.ID, targets, 3*time.Second) {
			if v != "ECONNREFUSED" {
				t.Errorf("b's kernel port %s from a: %s; want ECONNREFUSED", k, v)
			}
		}
		stillServes(t, a.ID)
		stillServes(t, b.ID)
	})

	attack(t, "agent-socket-of-b", "ENOENT the same way; a's own socket was root's 0600", func(t *testing.T) {
		got := pyAttack(t, a.ID, `def conn(p):
    s = socket.socket(socket.AF_UNIX)
    s.connect(p)
print(' '.join(tr(lambda: conn(p)) for p in sys.argv[1:]))`,
			filepath.Join(shared.dataDir, "sandboxes", b.ID, "run", "agent.sock"), fmt.Sprintf("/proc/%d/root/.forkbox/run/agent.sock", bAgent), "/.forkbox/run/agent.sock")
		wantOut(t, "b's agent socket by its host path and through /proc, and a's own", got, "ENOENT ENOENT EACCES")
		stillServes(t, a.ID)
	})

	attack(t, "uid-ranges-differ", "both sandboxes ran as host uids 0 (agent) and 1000 (user): the same host identity for every sandbox", func(t *testing.T) {
		ba, bb := agentBase(t, a.ID), agentBase(t, b.ID)
		if ba == bb || ba < 1<<30 || bb < 1<<30 || (ba-bb)%65536 != 0 {
			t.Fatalf("a's range starts at %d, b's at %d: want two distinct 65536-id ranges from 2^30", ba, bb)
		}
		for _, c := range []struct {
			id   string
			base int
		}{{a.ID, ba}, {b.ID, bb}} {
			for _, pid := range sandboxHostProcs(t, c.id) {
				uids, _, comm, err := hostIDs(pid)
				if err == nil && (uids[0] < c.base || uids[0] >= c.base+65536) {
					t.Errorf("%s's process %d (%s) has host uid %d outside its range at %d", c.id, pid, comm, uids[0], c.base)
				}
			}
		}
		stillServes(t, a.ID)
	})
}

// ---------------------------------------------------------------------------
// The API

// rawRequest sends one request on its own connection and returns the
// status, the X-Request-Id answered and the body.
func rawRequest(t *testing.T, d *daemon, method, path string, body []byte, hdr map[string]string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.addr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Request-Id"), b.String()
}

func secAPI(t *testing.T) {
	a := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, a.ID, py("1")))
	ctx := ctxT(t)
	files := "/v1/sandboxes/" + a.ID + "/files"

	attack(t, "files-symlink-to-proc1", "with p -> ../proc/1, /workspace/p/environ was refused by its mode only (403), and /workspace/p and /workspace/p/fd were listed (200): /proc/1 and the agent's descriptors", func(t *testing.T) {
		mustSh(t, a.ID, "ln -s ../proc/1 /workspace/p")
		for _, c := range []struct{ method, path string }{
			{"GET", files + "?path=/workspace/p/environ"}, {"GET", files + "?path=/workspace/p/root/etc/shadow"},
			{"PUT", files + "?path=/workspace/p/root/tmp/x"}, {"DELETE", files + "?path=/workspace/p/root/etc/passwd"},
			{"GET", files + "/list?path=/workspace/p/fd"}, {"GET", files + "/list?path=/workspace/p"},
		} {
			status, _, body := rawRequest(t, shared, c.method, c.path, []byte("x"), nil)
			if status != 400 || !strings.Contains(body, "invalid_argument") {
				t.Errorf("%s %s: %d %s; want 400", c.method, c.path, status, body)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "files-dotdot", "400 the same way", func(t *testing.T) {
		for _, p := range []string{"/workspace/../etc/passwd", "../etc/passwd", "/workspace/%2e%2e/etc/passwd", "/workspace/..", "/.."} {
			status, _, body := rawRequest(t, shared, "GET", files+"?path="+p, nil, nil)
			if status != 400 || !strings.Contains(body, "'..' is not allowed") {
				t.Errorf("GET %s: %d %s; want 400 refusing '..'", p, status, body)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "files-nul", "400 the same way", func(t *testing.T) {
		for _, m := range []string{"GET", "PUT", "DELETE"} {
			status, _, body := rawRequest(t, shared, m, files+"?path=/workspace/x%00/../../etc/shadow", []byte("x"), nil)
			if status != 400 || !strings.Contains(body, "NUL") {
				t.Errorf("%s with a NUL in the path: %d %s; want 400", m, status, body)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "files-forkbox-dir", "400 the same way: the old prefix check refused these absolute paths (symlinks to them were its gap)", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{
			{"GET", files + "?path=/.forkbox/run/agent.json"}, {"PUT", files + "?path=/.forkbox/forkbox"},
			{"DELETE", files + "?path=/.forkbox/run/agent.sock"}, {"GET", files + "/list?path=/.forkbox"},
			{"GET", files + "?path=/proc/1/environ"}, {"GET", files + "?path=/dev/zero"}, {"GET", files + "?path=/sys/kernel/notes"},
		} {
			status, _, body := rawRequest(t, shared, c.method, c.path, []byte("x"), nil)
			if status != 400 || !strings.Contains(body, "outside the sandbox's filesystem") {
				t.Errorf("%s %s: %d %s; want 400 outside the sandbox's filesystem", c.method, c.path, status, body)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "exec-cwd-oracle", "exec answered 127 (no such file) for a missing dir and 126 (permission denied) behind /proc/1/root and /root: an oracle of what the user cannot see", func(t *testing.T) {
		answer := func(cwd string) string {
			res, err := shared.c.Exec(ctx, a.ID, api.ExecRequest{Cmd: "pwd", Cwd: cwd})
			if err != nil {
				t.Fatalf("exec in %s: %v", cwd, err)
			}
			return fmt.Sprintf("%d %s", res.ExitCode, strings.ReplaceAll(res.Stderr, cwd, "<cwd>"))
		}
		want := answer("/nonexistent/dir")
		if !strings.HasPrefix(want, "126 ") {
			t.Fatalf("exec in a missing dir: %s", want)
		}
		for _, cwd := range []string{"/proc/1/root", "/proc/1/root/etc", "/proc/1/cwd", "/.forkbox", "/.forkbox/run", "/root"} {
			if got := answer(cwd); got != want {
				t.Errorf("exec in %s: %q; a missing dir gives %q", cwd, got, want)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "huge-headers", "431 the same way (Go's default 1 MiB header limit)", func(t *testing.T) {
		status, _, _ := rawRequest(t, shared, "GET", "/v1/sandboxes", nil, map[string]string{"X-Big": strings.Repeat("a", 2<<20)})
		if status != 431 {
			t.Errorf("a 2 MiB header: %d; want 431", status)
		}
		many := map[string]string{}
		for i := 0; i < 1100; i++ {
			many[fmt.Sprintf("X-Many-%d", i)] = strings.Repeat("b", 1000)
		}
		if status, _, _ := rawRequest(t, shared, "GET", "/v1/sandboxes", nil, many); status != 431 {
			t.Errorf("1100 headers of 1 KB: %d; want 431", status)
		}
		stillServes(t, a.ID)
	})

	attack(t, "huge-bodies", "413 the same way", func(t *testing.T) {
		big, _ := json.Marshal(api.ExecRequest{Cmd: "echo", Args: []string{strings.Repeat("a", 2<<20)}})
		for _, p := range []string{"/v1/sandboxes/" + a.ID + "/exec", "/v1/sandboxes/" + a.ID + "/code", "/v1/sandboxes"} {
			status, _, body := rawRequest(t, shared, "POST", p, big, map[string]string{"Content-Type": "application/json"})
			if status != 413 || !strings.Contains(body, "too_large") {
				t.Errorf("POST %s with 2 MiB: %d %s; want 413 too_large", p, status, body)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "sandbox-id-traversal", "404 the same way", func(t *testing.T) {
		for _, p := range []string{"/v1/sandboxes/..%2F..%2Fetc%2Fpasswd", "/v1/sandboxes/..%2F..%2F/files?path=/etc/passwd", "/v1/sandboxes/%2e%2e/exec", "/v1/sandboxes/" + a.ID + "%2F..%2F..%2Fx/files?path=/etc/passwd"} {
			status, _, body := rawRequest(t, shared, "GET", p, nil, nil)
			if status >= 500 || status == 200 || strings.Contains(body, "root:") {
				t.Errorf("GET %s: %d %s", p, status, body)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "request-id-reflection", "the same: only short plain tokens were taken", func(t *testing.T) {
		if _, rid, _ := rawRequest(t, shared, "GET", "/healthz", nil, map[string]string{"X-Request-Id": "sec-test_1.2"}); rid != "sec-test_1.2" {
			t.Errorf("a plain id: answered %q", rid)
		}
		for _, bad := range []string{"<script>alert(1)</script>", "a b", strings.Repeat("x", 65), "id\";drop", "ünïcode", "../../etc"} {
			status, rid, body := rawRequest(t, shared, "GET", "/v1/nope", nil, map[string]string{"X-Request-Id": bad})
			if rid == bad || !strings.HasPrefix(rid, "req_") || strings.Contains(body, bad) || !strings.Contains(body, rid) || status != 404 {
				t.Errorf("X-Request-Id %q: answered %q, %d %s", bad, rid, status, body)
			}
		}
		stillServes(t, a.ID)
	})

	attack(t, "names-with-traversal", "refused the same way (names are checked against a pattern)", func(t *testing.T) {
		victim := filepath.Join(secTmp, "api-victim")
		if err := os.MkdirAll(victim, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(victim, "keep"), []byte("keep"), 0o644)
		esc := url.PathEscape("../../../../../../../.." + victim)
		for _, c := range []struct{ method, path, body string }{
			{"DELETE", "/v1/images/" + esc, ""}, {"GET", "/v1/images/" + esc, ""}, {"DELETE", "/v1/snapshots/" + esc, ""},
			{"DELETE", "/v1/files/" + esc, ""}, {"GET", "/v1/files/" + esc, ""}, {"DELETE", "/v1/conversations/" + esc, ""},
			{"POST", "/v1/images?name=" + url.QueryEscape("../../pwn"), ""},
			{"POST", "/v1/sandboxes", `{"name":"../../x"}`}, {"POST", "/v1/sandboxes", `{"image":"../../../../../../..` + victim + `"}`},
			{"POST", "/v1/sandboxes", `{"snapshot_id":"../../../../../../..` + victim + `"}`},
			{"POST", "/v1/pools", `{"name":"../../x","image":"python","size":1}`},
		} {
			status, _, body := rawRequest(t, shared, c.method, c.path, []byte(c.body), map[string]string{"Content-Type": "application/json"})
			if status != 400 && status != 404 {
				t.Errorf("%s %s %s: %d %s; want 400 or 404", c.method, c.path, c.body, status, body)
			}
		}
		if b, err := os.ReadFile(filepath.Join(victim, "keep")); err != nil || string(b) != "keep" {
			t.Fatalf("the host directory named by the requests changed: %q %v", b, err)
		}
		stillServes(t, a.ID)
	})

	attack(t, "image-import-escapes", "refused the same way (entries resolved beneath the layer's root)", func(t *testing.T) {
		marker := fmt.Sprintf("fbx-sec-import-%d", time.Now().UnixNano())
		shadowLinks := func() uint64 {
			var st unix.Stat_t
			unix.Stat("/etc/shadow", &st)
			return st.Nlink
		}
		links := shadowLinks()
		for _, v := range []struct {
			name    string
			entries []*tar.Header
		}{
			{"dotdot file", []*tar.Header{{Name: "../../../../../../tmp/" + marker, Typeflag: tar.TypeReg}}},
			{"absolute file", []*tar.Header{{Name: "/tmp/" + marker, Typeflag: tar.TypeReg}}},
			{"through an absolute symlink", []*tar.Header{{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "esc/" + marker, Typeflag: tar.TypeReg}}},
			{"through a climbing symlink", []*tar.Header{{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../tmp"}, {Name: "esc/" + marker, Typeflag: tar.TypeReg}}},
			{"hardlink to an absolute path", []*tar.Header{{Name: "hl", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}}},
			{"hardlink that climbs", []*tar.Header{{Name: "hl", Typeflag: tar.TypeLink, Linkname: "../../../../../../etc/shadow"}}},
			{"hardlink through a symlink", []*tar.Header{{Name: "d", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, {Name: "hl", Typeflag: tar.TypeLink, Linkname: "d/shadow"}}},
		} {
			name := fmt.Sprintf("sec-escape-%d", time.Now().UnixNano())
			_, err := shared.c.ImportImage(ctx, name, bytes.NewReader(dockerSaveOf(t, ociImage(t, headersTar(t, v.entries)))), nil)
			if err == nil {
				shared.c.DeleteImage(context.Background(), name)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("import %s: %v; want 400", v.name, err)
			}
			t.Logf("import %s: %v", v.name, err)
		}
		if _, err := os.Stat("/tmp/" + marker); err == nil {
			os.Remove("/tmp/" + marker)
			t.Errorf("an import wrote /tmp/%s on the host", marker)
		}
		if got := shadowLinks(); got != links {
			t.Errorf("the host's /etc/shadow has %d links, had %d", got, links)
		}
		stillServes(t, a.ID)
	})

	attack(t, "build-context-escapes", "refused the same way (the context was extracted beneath a temp dir)", func(t *testing.T) {
		marker := fmt.Sprintf("fbx-sec-build-%d", time.Now().UnixNano())
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		recipe := func(name, src string) string {
			return fmt.Sprintf(`{"name":%q,"base":"python","steps":[{"copy":{"src":%q,"dest":"/srv/%s"}}]}`, name, src, marker)
		}
		for _, v := range []struct {
			name, src string
			entries   []*tar.Header
		}{
			{"dotdot entry", "data", []*tar.Header{{Name: "../../../../../../tmp/" + marker, Typeflag: tar.TypeReg}}},
			{"absolute entry", "data", []*tar.Header{{Name: "/tmp/" + marker, Typeflag: tar.TypeReg}}},
			{"copy through an absolute symlink", "data/shadow", []*tar.Header{{Name: "data", Typeflag: tar.TypeSymlink, Linkname: "/etc"}}},
			{"copy through a climbing symlink", "data/shadow", []*tar.Header{{Name: "data", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../etc"}}},
			{"hardlink to the host's shadow", "data", []*tar.Header{{Name: "data", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}}},
			{"copy source that climbs", "../../../../../../etc/shadow", []*tar.Header{{Name: "data", Typeflag: tar.TypeReg}}},
		} {
			name := fmt.Sprintf("sec-build-%d", time.Now().UnixNano())
			status, e := postBuild(t, shared, hc, recipe(name, v.src), headersTar(t, v.entries))
			if status != 400 {
				t.Errorf("build with %s: %d %+v; want 400", v.name, status, e)
				shared.c.DeleteImage(context.Background(), name)
			}
			t.Logf("build with %s: %d %s", v.name, status, e.Message)
		}
		if _, err := os.Stat("/tmp/" + marker); err == nil {
			os.Remove("/tmp/" + marker)
			t.Errorf("a build wrote /tmp/%s on the host", marker)
		}
		stillServes(t, a.ID)
	})

	attack(t, "agent-socket-from-host-account", "unreachable the same way (the data dir was root's 0700)", func(t *testing.T) {
		sock := fmt.Sprintf("/proc/%d/root/.forkbox/run/agent.sock", agentHostPID(t, a.ID))
		socks, _ := filepath.Glob(filepath.Join(shared.dataDir, "sandboxes", a.ID, "*", "agent.sock"))
		socks2, _ := filepath.Glob(filepath.Join(shared.dataDir, "sandboxes", a.ID, "*", "*", "agent.sock"))
		paths := append(append([]string{sock}, socks...), socks2...)
		t.Logf("the agent's socket on the host: %v", paths)
		for _, p := range paths {
			out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
				"import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\n    print('connected')\nexcept OSError as e:\n    print(e.strerror)", p).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "Permission denied" {
				t.Errorf("host user nobody connecting to %s: %s %v", p, out, err)
			}
		}
		stillServes(t, a.ID)
	})

	// A daemon with an API key.
	key := fmt.Sprintf("sec-key-%x", sha256.Sum256([]byte(fmt.Sprint(time.Now().UnixNano()))))
	kd, err := startDaemon(filepath.Join(secTmp, "keyed"), []string{"FORKBOX_API_KEY=" + key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kd.stop)
	unauthorized := func(t *testing.T, what, method, path string, hdr map[string]string) {
		t.Helper()
		status, _, body := rawRequest(t, kd, method, path, []byte("{}"), hdr)
		if status != 401 || !strings.Contains(body, "unauthenticated") {
			t.Errorf("%s: %d %s; want 401", what, status, body)
		}
	}

	attack(t, "api-key-missing", "401 the same way", func(t *testing.T) {
		for _, p := range []string{"/v1/sandboxes", "/v1/images", "/v1/snapshots", "/metrics", "/mcp"} {
			unauthorized(t, "GET "+p+" without a key", "GET", p, nil)
		}
		unauthorized(t, "POST /v1/sandboxes without a key", "POST", "/v1/sandboxes", nil)
		if status, _, body := rawRequest(t, kd, "GET", "/", nil, nil); status != 200 || strings.Contains(body, key) {
			t.Errorf("the public UI: %d, holds the key: %v", status, strings.Contains(body, key))
		}
		if status, _, _ := rawRequest(t, kd, "GET", "/v1/sandboxes", nil, map[string]string{"Authorization": "Bearer " + key}); status != 200 {
			t.Errorf("with the key: %d", status)
		}
	})

	attack(t, "api-key-wrong", "401 the same way", func(t *testing.T) {
		for _, h := range []string{"Bearer wrong", "Bearer " + key + "x", "Bearer " + key[:len(key)-1], "bearer " + key, "Bearer  " + key, key,
			"Basic " + base64.StdEncoding.EncodeToString([]byte(key+":")), "Basic " + base64.StdEncoding.EncodeToString([]byte(":"+key))} {
			unauthorized(t, "Authorization: "+h, "GET", "/v1/sandboxes", map[string]string{"Authorization": h})
		}
		unauthorized(t, "the key as X-API-Key", "GET", "/v1/sandboxes", map[string]string{"X-API-Key": key})
	})

	attack(t, "api-key-in-query", "401 the same way", func(t *testing.T) {
		for _, q := range []string{"api_key", "key", "token", "access_token", "apikey"} {
			unauthorized(t, "?"+q+"=<key>", "GET", "/v1/sandboxes?"+q+"="+key, nil)
		}
	})
}

// headersTar makes a tar of the given headers (regular files empty).
func headersTar(t *testing.T, hdrs []*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		h.ModTime = time.Unix(1700000000, 0)
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ---------------------------------------------------------------------------
// The host's resources

// holding runs script as the user in sb, waits for a stdout line starting
// with marker, calls fn with it while the script still holds what it took,
// then ends the script.
func holding(t *testing.T, sb, script, marker string, fn func(line string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lines := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf bytes.Buffer
		shared.c.ExecStream(ctx, sb, api.ExecRequest{Cmd: "python3", Args: []string{"-c", script}, TimeoutSecs: f64(300)},
			func(b []byte) {
				buf.Write(b)
				for {
					line, err := buf.ReadString('\n')
					if err != nil {
						buf.WriteString(line)
						return
					}
					select {
					case lines <- strings.TrimSpace(line):
					default:
					}
				}
			}, func(b []byte) {
				select {
				case lines <- "STDERR " + strings.TrimSpace(string(b)):
				default:
				}
			})
	}()
	defer func() {
		cancel()
		<-done
		waitPIDsBelow(t, sb, 40)
	}()
	timeout := time.After(3 * time.Minute)
	for {
		select {
		case line := <-lines:
			t.Logf("script: %s", line)
			if strings.HasPrefix(line, marker) {
				fn(line)
				return
			}
		case <-done:
			t.Fatalf("the script ended before %s", marker)
		case <-timeout:
			t.Fatalf("no %s line from the script", marker)
		}
	}
}

// cgroupFile reads a file of sandbox id's cgroup (v1 controller dir or v2).
func cgroupFile(t *testing.T, id, controller, name string) string {
	t.Helper()
	for _, p := range []string{filepath.Join("/sys/fs/cgroup", controller, "forkbox", id, name), filepath.Join("/sys/fs/cgroup", "forkbox", id, name)} {
		if b, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// hostInotifyWorks makes an inotify instance as root (the owner of every
// sandbox's user namespace) and as the host account nobody.
func hostInotifyWorks(t *testing.T) error {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("root: inotify_init1: %w", err)
	}
	unix.Close(fd)
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
		"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nfd = libc.inotify_init1(0)\nprint('ok' if fd >= 0 else ctypes.get_errno())").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		return fmt.Errorf("nobody: inotify_init1: %s %v", out, err)
	}
	return nil
}

const forkBombPy = `import errno, os, time
kids, err = [], None
while True:
    try:
        pid = os.fork()
    except OSError as e:
        err = errno.errorcode[e.errno]
        break
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    kids.append(pid)
print('FORKED %d %s' % (len(kids), err), flush=True)
time.sleep(120)
`

const fileBombPy = `import errno, os, resource, signal, time
r, w = os.pipe()
kids = []
for i in range(int(PROCS)):
    try:
        pid = os.fork()
    except OSError:
        for k in kids:
            os.kill(k, signal.SIGKILL)
        raise
    if pid == 0:
        os.close(r)
        n, err = 0, 0
        try:
            while True:
                os.open('/dev/null', os.O_RDONLY)
                n += 1
        except OSError as e:
            err = e.errno
        os.write(w, ('%d %s\n' % (n, errno.errorcode[err])).encode())
        time.sleep(120)
        os._exit(0)
    kids.append(pid)
os.close(w)
data = b''
while data.count(b'\n') < int(PROCS):
    c = os.read(r, 65536)
    if not c:
        break
    data += c
lines = data.decode().split()
print('HELD nofile=%d files=%d errnos=%s' % (resource.getrlimit(resource.RLIMIT_NOFILE)[1], sum(map(int, lines[0::2])), ','.join(sorted(set(lines[1::2])))), flush=True)
time.sleep(120)
`

const inotifyBombPy = `import ctypes, errno, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
r, w = os.pipe()
kids = []
for i in range(PROCS):
    try:
        pid = os.fork()
    except OSError:
        for k in kids:
            os.kill(k, signal.SIGKILL)
        raise
    if pid == 0:
        os.close(r)
        n = 0
        while libc.inotify_init1(0) >= 0:
            n += 1
        os.write(w, ('%d %s\n' % (n, errno.errorcode[ctypes.get_errno()])).encode())
        time.sleep(120)
        os._exit(0)
    kids.append(pid)
os.close(w)
data = b''
while data.count(b'\n') < PROCS:
    c = os.read(r, 65536)
    if not c:
        break
    data += c
lines = data.decode().split()
print('HELD bound=%s instances=%d errnos=%s' % (open('/proc/sys/user/max_inotify_instances').read().strip(), sum(map(int, lines[0::2])), ','.join(sorted(set(lines[1::2])))), flush=True)
time.sleep(120)
`

// mqBombPy creates POSIX message queues (10 messages of 8 KiB each) until
// the sandbox's RLIMIT_MSGQUEUE, and holds them.
const mqBombPy = secPrelude + `class attr(ctypes.Structure):
    _fields_ = [('flags', ctypes.c_long), ('maxmsg', ctypes.c_long), ('msgsize', ctypes.c_long), ('curmsgs', ctypes.c_long), ('pad', ctypes.c_long * 4)]
n = 0
while n < 10000:
    if libc.mq_open(('/fbx-sec-q%d' % n).encode(), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr(0, 10, 8192, 0))) < 0:
        break
    n += 1
print('HELD queues=%d errno=%s' % (n, ename(ctypes.get_errno())), flush=True)
time.sleep(120)
`

// mqCleanPy removes mqBombPy's queues (they outlive their process).
const mqCleanPy = `for n in range(10000):
    libc.mq_unlink(('/fbx-sec-q%d' % n).encode())
`

// mqOnePy creates and removes one message queue of 10 messages of 8 KiB.
const mqOnePy = `class attr(ctypes.Structure):
    _fields_ = [('flags', ctypes.c_long), ('maxmsg', ctypes.c_long), ('msgsize', ctypes.c_long), ('curmsgs', ctypes.c_long), ('pad', ctypes.c_long * 4)]
name = ('/fbx-sec-one-%d' % os.getpid()).encode()
fd = libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr(0, 10, 8192, 0)))
print('ok' if fd >= 0 else ename(ctypes.get_errno()))
libc.mq_unlink(name)
`

// sigBombPy queues realtime signals to itself (blocked) until the
// sandbox's RLIMIT_SIGPENDING, and holds them.
const sigBombPy = secPrelude + `import signal
class sigval(ctypes.Union):
    _fields_ = [('i', ctypes.c_int), ('p', ctypes.c_void_p)]
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
n = 0
while n < 1000000 and libc.sigqueue(os.getpid(), signal.SIGRTMIN, sigval(0)) == 0:
    n += 1
print('HELD signals=%d errno=%s' % (n, ename(ctypes.get_errno())), flush=True)
time.sleep(120)
`

// sigOnePy queues one realtime signal to itself.
const sigOnePy = `import signal
class sigval(ctypes.Union):
    _fields_ = [('i', ctypes.c_int), ('p', ctypes.c_void_p)]
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN + 1])
print('ok' if libc.sigqueue(os.getpid(), signal.SIGRTMIN + 1, sigval(0)) == 0 else ename(ctypes.get_errno()))
`

func secResources(t *testing.T) {
	a := newSandbox(t, shared, api.CreateSandboxRequest{})
	r := newSandbox(t, shared, api.CreateSandboxRequest{PIDsLimit: i64(64), MemoryMB: i64(256), DiskMB: i64(128)})
	noError(t, runCode(t, shared, a.ID, py("1")))
	noError(t, runCode(t, shared, r.ID, py("1")))
	ctx := ctxT(t)

	attack(t, "fork-bomb", "bounded the same way by the pids cgroup (TestIsolationForkBomb)", func(t *testing.T) {
		holding(t, r.ID, forkBombPy, "FORKED", func(line string) {
			f := strings.Fields(line)
			n, _ := strconv.Atoi(f[1])
			if f[2] != "EAGAIN" || n > 64 || n < 1 {
				t.Errorf("fork bomb in a 64-pid sandbox: %s; want EAGAIN after at most 64", line)
			}
			if cur := cgroupFile(t, r.ID, "pids", "pids.current"); cur != "64" {
				t.Errorf("pids.current while the bomb holds: %q", cur)
			}
			if err := sandboxWorks(t, shared, a.ID); err != nil {
				t.Errorf("another sandbox during the bomb: %v", err)
			}
			if err := shared.c.Health(ctx); err != nil {
				t.Errorf("the daemon during the bomb: %v", err)
			}
		})
		waitUsable(t, r.ID)
		stillServes(t, r.ID)
	})

	attack(t, "thread-bomb", "bounded the same way", func(t *testing.T) {
		got := pyAttack(t, r.ID, `import threading
ev, n, err = threading.Event(), 0, ''
while True:
    try:
        threading.Thread(target=ev.wait, daemon=True).start()
        n += 1
    except RuntimeError as e:
        err = str(e)
        break
print(n <= 64, 'new thread' in err)
ev.set()`)
		wantOut(t, "threads until the pid limit", got, "True True")
		stillServes(t, r.ID)
	})

	attack(t, "file-open-loop", "every process had the daemon's RLIMIT_NOFILE (20000 here): 16 processes held 319936 files, and a sandbox of 32768 processes could fill the host's file table (ENFILE for host accounts)", func(t *testing.T) {
		holding(t, r.ID, strings.ReplaceAll(fileBombPy, "PROCS", "16"), "HELD", func(line string) {
			kv := kvs(line)
			nofile, files := atoi(t, kv["nofile"]), atoi(t, kv["files"])
			if kv["errnos"] != "EMFILE" {
				t.Errorf("opens failed with %s; want EMFILE only (never ENFILE, the host's table)", kv["errnos"])
			}
			if files < 16*(nofile-16) {
				t.Errorf("16 processes held %d files with a limit of %d each", files, nofile)
			}
			// One sandbox holds at most a quarter of the host's table: its
			// pids_limit × RLIMIT_NOFILE.
			if fileMax := procInt(t, "/proc/sys/fs/file-max"); 64*nofile > fileMax/4 {
				t.Errorf("RLIMIT_NOFILE %d lets a 64-process sandbox hold more than a quarter of file-max %d", nofile, fileMax)
			}
			if err := hostAccountWorks(t); err != nil {
				t.Errorf("a host account while the sandbox holds its files: %v", err)
			}
		})
		stillServes(t, r.ID)
	})

	attack(t, "memory-hog-exec", "OOM-killed the same way (the memory cgroup); the agent survived", func(t *testing.T) {
		res, err := shared.c.Exec(ctx, r.ID, api.ExecRequest{Cmd: "python3", Args: []string{"-c", "x = bytearray(600 << 20); x[::4096] = b'x' * len(x[::4096]); print('survived')"}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.OOMKilled || res.Signal != "SIGKILL" || !strings.Contains(res.Error, "out of memory") || strings.Contains(res.Stdout, "survived") {
			t.Errorf("600 MB in a 256 MB sandbox: %+v; want OOM-killed", res)
		}
		stillServes(t, r.ID)
	})

	attack(t, "memory-hog-code-cell", "KernelDied the same way", func(t *testing.T) {
		ex := runCode(t, shared, r.ID, py("x = bytearray(600 << 20); x[::4096] = b'x' * len(x[::4096])"))
		if ex.Error == nil || ex.Error.Name != "KernelDied" || !strings.Contains(ex.Error.Value, "out of memory") {
			t.Errorf("600 MB in a cell of a 256 MB sandbox: %+v; want KernelDied naming out of memory", ex.Error)
		}
		stillServes(t, r.ID)
	})

	attack(t, "disk-fill", "ENOSPC the same way (its own ext4 of disk_mb)", func(t *testing.T) {
		res := sh(t, shared, r.ID, "dd if=/dev/zero of=/workspace/fill bs=1M count=400")
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "No space left on device") {
			t.Errorf("400 MB on a 128 MB disk: %+v", res)
		}
		var st unix.Stat_t
		img := filepath.Join(shared.dataDir, "sandboxes", r.ID, "disk.img")
		if err := unix.Stat(img, &st); err != nil {
			t.Fatalf("the sandbox's disk image: %v", err)
		}
		if used := st.Blocks * 512; used > 129<<20 {
			t.Errorf("the disk image holds %d bytes of the host's disk; its disk_mb is 128", used)
		}
		mustSh(t, r.ID, "rm -f /workspace/fill")
		stillServes(t, r.ID)
	})

	attack(t, "upload-bigger-than-disk", "unknown: the upload was written as root into the same disk", func(t *testing.T) {
		_, err := shared.c.WriteFile(ctx, r.ID, "/workspace/upload", io.LimitReader(zeros{}, 300<<20), 0o644)
		if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "no space left") {
			t.Errorf("a 300 MB upload onto a 128 MB disk: %v; want resource_exhausted naming the full disk", err)
		}
		// Nothing of it stays: no file, no temp file, the space is back.
		wantOut(t, "/workspace after the refused upload", mustSh(t, r.ID, "ls -A /workspace | grep -c upload; df -k --output=used / | tail -1 | awk '{print ($1 < 20000)}'"), "0\n1\n")
		stillServes(t, r.ID)
	})

	attack(t, "dev-shm-fill", "ENOSPC at 64 MiB the same way", func(t *testing.T) {
		res := sh(t, shared, r.ID, "head -c 200M /dev/zero > /dev/shm/fill; echo rc=$?; stat -c %s /dev/shm/fill; rm -f /dev/shm/fill")
		if !strings.Contains(res.Stderr, "No space left on device") || !strings.Contains(res.Stdout, "rc=1\n67108864\n") {
			t.Errorf("200 MB into /dev/shm: %+v", res)
		}
		stillServes(t, r.ID)
	})

	attack(t, "inotify-instances", "instances counted against the host's uid 1000 (cloudsdk here): the sandbox took all of that account's (8192 here, 128 by default) and every other sandbox's", func(t *testing.T) {
		holding(t, r.ID, strings.ReplaceAll(inotifyBombPy, "PROCS", "12"), "HELD", func(line string) {
			kv := kvs(line)
			bound, n := atoi(t, kv["bound"]), atoi(t, kv["instances"])
			if kv["errnos"] != "EMFILE" || n > bound || bound > 1024 {
				t.Errorf("12 processes making inotify instances: %s; want EMFILE after at most the sandbox's bound", line)
			}
			if err := hostInotifyWorks(t); err != nil {
				t.Errorf("while the sandbox holds its instances, the host cannot make one: %v", err)
			}
		})
		stillServes(t, r.ID)
	})

	attack(t, "posix-mqueue-budget", "queues were counted against the host's uid 1000 (cloudsdk here), which every sandbox shared: another sandbox got EMFILE, host root did not", func(t *testing.T) {
		// POSIX message queues are charged to the queue's user and, up
		// the user namespaces, to the namespace's owner (root) within the
		// RLIMIT_MSGQUEUE the namespace was made with. A sandbox at its
		// own limit must leave queues for the others and for the host.
		defer run(t, shared, r.ID, "python3", "-c", secPrelude+mqCleanPy)
		holding(t, r.ID, mqBombPy, "HELD", func(line string) {
			if !strings.Contains(line, "EMFILE") {
				t.Errorf("queues until the sandbox's limit: %s; want EMFILE", line)
			}
			if got := pyAttack(t, a.ID, mqOnePy); got != "ok" {
				t.Errorf("another sandbox creating one message queue while r holds its own: %s", got)
			}
			if out, err := exec.Command("/usr/bin/python3", "-c", secPrelude+mqOnePy).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ok" {
				t.Errorf("host root creating one message queue while r holds its own: %s %v", out, err)
			}
		})
		stillServes(t, r.ID)
	})

	attack(t, "rt-signal-budget", "queued signals were counted against the host's uid 1000 (cloudsdk here), which every sandbox shared: another sandbox got EAGAIN, host root did not", func(t *testing.T) {
		// Queued (realtime) signals are charged the same way, within
		// RLIMIT_SIGPENDING.
		holding(t, r.ID, sigBombPy, "HELD", func(line string) {
			if !strings.Contains(line, "EAGAIN") {
				t.Errorf("signals queued until the sandbox's limit: %s; want EAGAIN", line)
			}
			if got := pyAttack(t, a.ID, sigOnePy); got != "ok" {
				t.Errorf("another sandbox queueing one signal while r holds its own: %s", got)
			}
			if out, err := exec.Command("/usr/bin/python3", "-c", secPrelude+sigOnePy).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ok" {
				t.Errorf("host root queueing one signal while r holds its own: %s %v", out, err)
			}
		})
		stillServes(t, r.ID)
	})

	attack(t, "unsuspendable-idle-sandbox", "the same: 20 failed idle suspends (a CRIU dump each) in 10 seconds", func(t *testing.T) {
		// CRIU cannot dump a sandbox whose POSIX message queue filesystem
		// holds a queue, so a named sandbox that made one cannot be
		// suspended when idle. Every attempt freezes it and runs a CRIU
		// dump in the daemon's cgroup, outside the sandbox's CPU limit;
		// the reaper must not retry without pause.
		name := fmt.Sprintf("sec-unsuspendable-%d", time.Now().UnixNano()%1000000)
		sb := newSandbox(t, shared, api.CreateSandboxRequest{Name: name, TimeoutSecs: i64(2)})
		wantOut(t, "make a message queue", pyAttack(t, sb.ID, mqOnePy+"libc.mq_open(b'/fbx-sec-keep', os.O_CREAT | os.O_RDWR, 0o600, None)\n"), "ok")
		count := func() int {
			b, _ := os.ReadFile(shared.log.Name())
			return strings.Count(string(b), "msg=\"suspend idle sandbox\" sandbox="+sb.ID)
		}
		time.Sleep(3 * time.Second) // idle from now on
		before, start := count(), time.Now()
		time.Sleep(10 * time.Second)
		attempts := count() - before
		t.Logf("failed idle suspends in %s: %d", time.Since(start).Round(time.Second), attempts)
		got, err := shared.c.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if attempts == 0 && got.State != api.StateSuspended {
			t.Fatalf("no failed idle suspend in the daemon's log, and the sandbox is %s: this test cannot see the reaper any more", got.State)
		}
		if attempts > 4 {
			t.Errorf("the idle reaper tried to suspend the sandbox %d times in 10s: a CRIU dump each time, on the host's CPU", attempts)
		}
		res, err := shared.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: "echo", Args: []string{"alive"}})
		if err != nil || res.Stdout != "alive\n" {
			t.Errorf("the sandbox after the failed suspends: %+v %v", res, err)
		}
	})

	// Output floods: what a sandbox prints is bounded by nothing but the
	// call's timeout, and the daemon (outside every sandbox's memory
	// limit) must not hold all of it. Each runs on a daemon of its own.
	const floodBytes = 64 << 20

	attack(t, "exec-output-flood", "the same: the daemon collected a non-streaming exec's whole output in memory (64 MiB of output: its peak memory grew by 393 MiB)", func(t *testing.T) {
		grew := floodDaemon(t, "exec-flood", func(d *daemon, sb string) {
			res := run(t, d, sb, "sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", floodBytes))
			t.Logf("the answer holds %d MiB", len(res.Stdout)>>20)
		})
		t.Logf("%d MiB of exec output: the daemon's peak memory grew by %d MiB", floodBytes>>20, grew>>20)
		if grew > floodBytes/2 {
			t.Errorf("the daemon grew by %d MiB holding %d MiB that a sandbox printed: output is not bounded outside the sandbox's memory", grew>>20, floodBytes>>20)
		}
	})

	attack(t, "code-output-flood", "the same: the agent (inside the sandbox's memory) and then the daemon held the cell's whole output (64 MiB: the daemon's peak grew by 507 MiB)", func(t *testing.T) {
		grew := floodDaemon(t, "code-flood", func(d *daemon, sb string) {
			ex := runCode(t, d, sb, py(fmt.Sprintf("import sys\nfor i in range(%d):\n    sys.stdout.write('a' * (1 << 20))\n", floodBytes>>20)))
			t.Logf("the answer holds %d chunks", len(ex.Logs.Stdout))
		})
		t.Logf("%d MiB of cell output: the daemon's peak memory grew by %d MiB", floodBytes>>20, grew>>20)
		if grew > floodBytes/2 {
			t.Errorf("the daemon grew by %d MiB holding %d MiB that a cell printed: output is not bounded outside the sandbox's memory", grew>>20, floodBytes>>20)
		}
	})

	attack(t, "limits-beyond-the-host", "pids_limit 32768, 8 CPUs on 2 and a disk of 4 times the free space were accepted (201); memory beyond the host's was refused already (TestLimitsBeyondTheHost)", func(t *testing.T) {
		for _, c := range []struct {
			field string
			req   api.CreateSandboxRequest
		}{
			{"pids_limit", api.CreateSandboxRequest{PIDsLimit: i64(32768)}},
			{"memory_mb", api.CreateSandboxRequest{MemoryMB: i64(memTotalMiB(t) * 4)}},
			{"cpus", api.CreateSandboxRequest{CPUs: f64(float64(goruntime.NumCPU() * 4))}},
			{"disk_mb", api.CreateSandboxRequest{DiskMB: i64(freeMiB(t, shared.dataDir) * 4)}},
		} {
			status, e, _ := createRaw(t, shared, c.req)
			if status != 400 || e.Code != "invalid_argument" || !strings.HasPrefix(e.Message, c.field+": ") {
				t.Errorf("%s beyond the host: %d %+v; want 400 naming %s", c.field, status, e, c.field)
			}
		}
	})
}

// floodDaemon starts a daemon of its own with one sandbox, runs fn on them
// and returns how much the daemon's peak resident memory (VmHWM) grew over
// what it was before fn: a fresh daemon, so nothing earlier tests left in
// its heap hides what fn costs it.
func floodDaemon(t *testing.T, name string, fn func(d *daemon, sb string)) int64 {
	t.Helper()
	d, err := startDaemon(filepath.Join(secTmp, name), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.deleteAll(); d.stop() }()
	sb := newSandbox(t, d, api.CreateSandboxRequest{})
	noError(t, runCode(t, d, sb.ID, py("1")))
	mem := func(key string) int64 {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, key+":"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				return kb << 10
			}
		}
		t.Fatalf("no %s for the daemon", key)
		return 0
	}
	before := mem("VmHWM")
	fn(d, sb.ID)
	grew := mem("VmHWM") - before
	if res := run(t, d, sb.ID, "echo", "alive"); res.Stdout != "alive\n" {
		t.Fatalf("exec after the flood: %+v", res)
	}
	noError(t, runCode(t, d, sb.ID, py("6 * 7")))
	return grew
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// waitPIDsBelow waits until sandbox id's cgroup holds fewer than n tasks:
// the processes of a cancelled exec are killed as it ends, not before.
func waitPIDsBelow(t *testing.T, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cur, err := strconv.Atoi(cgroupFile(t, id, "pids", "pids.current"))
		if err != nil || cur < n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still holds %d tasks", id, cur)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitUsable waits until a sandbox whose processes were just killed runs a
// command again.
func waitUsable(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := shared.c.Exec(ctx, id, api.ExecRequest{Cmd: "echo", Args: []string{"alive"}})
		cancel()
		if err == nil && res.Stdout == "alive\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox unusable: %+v %v", res, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
