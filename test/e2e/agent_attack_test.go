package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	agentclient "github.com/forkbox/forkbox/internal/agent/client"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// Attacks of sandbox code (uid 1000) on the agent, PID 1 and root of its
// sandbox. Each plants what user code can plant where the agent works, makes
// the agent work there through the API, and checks that the attack gained
// nothing and that the sandbox and the daemon still serve: a code cell and
// an exec answer. Each says what it did to the agent before the agent did
// file work as the user and dropped its capabilities.

// agentCapsHex is what the agent keeps: CAP_KILL, CAP_SETGID, CAP_SETUID.
const agentCapsHex = "00000000000000e0"

// kernelsDir is the kernels' runtime directory inside a sandbox.
const kernelsDir = "/run/forkbox-kernels"

// stillServes checks that a sandbox answers a code cell and an exec, and
// that the daemon is healthy.
func stillServes(t *testing.T, sb string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := shared.c.Health(ctx); err != nil {
		t.Fatalf("daemon after the attack: %v", err)
	}
	ex, err := shared.c.RunCode(ctx, sb, api.RunCodeRequest{Code: "6 * 7"})
	if err != nil {
		t.Fatalf("code cell after the attack: %v", err)
	}
	if got := mainResult(t, ex); got != "42" {
		t.Fatalf("code cell after the attack: %s", got)
	}
	res, err := shared.c.Exec(ctx, sb, api.ExecRequest{Cmd: "echo", Args: []string{"alive"}})
	if err != nil || res.ExitCode != 0 || res.Stdout != "alive\n" {
		t.Fatalf("exec after the attack: %+v %v", res, err)
	}
}

// rootfs is a host path of a running sandbox's root filesystem: its
// agent's root, seen through /proc.
func rootfs(t *testing.T, id string) string {
	t.Helper()
	p := fmt.Sprintf("/proc/%d/root", agentHostPID(t, id))
	if _, err := os.Stat(filepath.Join(p, "etc")); err != nil {
		t.Fatalf("sandbox root on the host: %v", err)
	}
	return p
}

// asSandboxRoot gives a file the host made in a sandbox the owner the
// sandbox's root has on the host (the agent's uid and gid there), so that
// inside it belongs to root.
func asSandboxRoot(t *testing.T, id string, paths ...string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", agentHostPID(t, id)))
	if err != nil {
		t.Fatal(err)
	}
	var uid, gid int
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			fmt.Sscan(v, &uid)
		}
		if v, ok := strings.CutPrefix(line, "Gid:"); ok {
			fmt.Sscan(v, &gid)
		}
	}
	for _, p := range paths {
		if err := os.Lchown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
}

// fingerprint is a file's content hash, owner and mode, read on the host.
func fingerprint(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x uid=%d gid=%d mode=%o", sha256.Sum256(b), st.Uid, st.Gid, st.Mode)
}

// userPy runs a Python script as the sandbox user and returns its stdout.
func userPy(t *testing.T, sb, script string) string {
	t.Helper()
	res := run(t, shared, sb, "python3", "-c", script)
	if res.ExitCode != 0 {
		t.Fatalf("python as the user: exit %d\n%s\n%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// mustSh runs a shell snippet as the user and fails on a non-zero exit.
func mustSh(t *testing.T, sb, script string) string {
	t.Helper()
	res := sh(t, shared, sb, script)
	if res.ExitCode != 0 {
		t.Fatalf("%s: exit %d\n%s%s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// kernelFDs lists, from inside a context's kernel, where each of its
// descriptors leads and what kind of file that is.
const kernelFDs = `import os, stat
for n in sorted(os.listdir('/proc/self/fd'), key=int):
    try:
        m = os.stat('/proc/self/fd/' + n).st_mode
        kind = 'reg' if stat.S_ISREG(m) else 'fifo' if stat.S_ISFIFO(m) else 'other'
        print(n, kind, os.readlink('/proc/self/fd/' + n))
    except OSError as e:
        print(n, 'error', e.errno)`

// checkKernelFDs starts a new context (a new kernel process, which opens the
// kernels' log) and checks that the kernel holds nothing the user planted.
func checkKernelFDs(t *testing.T, sb string, forbidden ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := shared.c.CreateContext(ctx, sb, api.CreateContextRequest{Language: "python"})
	if err != nil {
		t.Fatalf("new context after the plant (%s): %v", time.Since(start), err)
	}
	defer shared.c.DeleteContext(context.Background(), sb, c.ID)
	ex, err := shared.c.RunCode(ctx, sb, api.RunCodeRequest{Code: kernelFDs, Context: c.ID})
	if err != nil || ex.Error != nil {
		t.Fatalf("kernel descriptors: %+v %v", ex, err)
	}
	fds := strings.Join(ex.Logs.Stdout, "")
	for _, f := range forbidden {
		if strings.Contains(fds, " "+f+"\n") {
			t.Fatalf("the kernel holds a descriptor on %s:\n%s", f, fds)
		}
	}
	// Its output goes to the log, a regular file.
	if !strings.Contains(fds, " reg "+kernelsDir+"/kernels.log\n") || strings.Contains(fds, " fifo "+kernelsDir+"/kernels.log\n") {
		t.Fatalf("the kernel's output does not go to a regular log:\n%s", fds)
	}
}

// TestAgentAttackKernelRunDir plants symlinks and FIFOs where the agent
// puts the kernels' log, connection files and config.
func TestAgentAttackKernelRunDir(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, sb.ID, py("1")))
	shadow := filepath.Join(rootfs(t, sb.ID), "etc", "shadow")
	before := fingerprint(t, shadow)

	// Before: the agent opened kernels.log as root without O_NOFOLLOW and
	// handed the descriptor to the kernel: uid 1000 got a write descriptor
	// on the agent's memory.
	t.Run("kernels.log symlink to /proc/1/mem", func(t *testing.T) {
		mustSh(t, sb.ID, "ln -sfn /proc/1/mem "+kernelsDir+"/kernels.log")
		checkKernelFDs(t, sb.ID, "/proc/1/mem")
		if got := mustSh(t, sb.ID, "stat -c '%F %U %h' "+kernelsDir+"/kernels.log"); !strings.HasPrefix(got, "regular") || !strings.Contains(got, " user 1") {
			t.Fatalf("kernels.log is now: %s", got)
		}
		stillServes(t, sb.ID)
	})
	// Before: the same, with a write descriptor on a root-only file.
	t.Run("kernels.log symlink to /etc/shadow", func(t *testing.T) {
		mustSh(t, sb.ID, "ln -sfn /etc/shadow "+kernelsDir+"/kernels.log")
		checkKernelFDs(t, sb.ID, "/etc/shadow")
		if got := fingerprint(t, shadow); got != before {
			t.Fatalf("/etc/shadow changed: %s, was %s", got, before)
		}
		stillServes(t, sb.ID)
	})
	// Before: the agent's open() of the log blocked until a writer... or a
	// reader came, and the kernel's output went into the user's pipe.
	t.Run("kernels.log FIFO", func(t *testing.T) {
		mustSh(t, sb.ID, "rm -f "+kernelsDir+"/kernels.log && mkfifo "+kernelsDir+"/kernels.log")
		checkKernelFDs(t, sb.ID)
		if got := mustSh(t, sb.ID, "stat -c %F "+kernelsDir+"/kernels.log"); !strings.HasPrefix(got, "regular") {
			t.Fatalf("kernels.log is now: %s", got)
		}
		stillServes(t, sb.ID)
	})
	// The directory itself: its parent is root's, so the user can neither
	// replace it nor plant one ahead of the agent; emptying it does not
	// stop kernels from starting.
	t.Run("kernels dir replaced", func(t *testing.T) {
		res := sh(t, shared, sb.ID, "mv "+kernelsDir+" /run/elsewhere || ln -sfn /etc /run/forkbox-kernels.new")
		if res.ExitCode == 0 {
			t.Fatalf("the user could rename or plant in /run: %+v", res)
		}
		mustSh(t, sb.ID, "rm -rf "+kernelsDir+"/* "+kernelsDir+"/.[!.]* 2>/dev/null; true")
		checkKernelFDs(t, sb.ID)
		stillServes(t, sb.ID)
	})
	// Before: connection and config files were created as root, then
	// chowned by path: replacing one with a symlink in between gave uid
	// 1000 the symlink's target (os.Chown follows symlinks).
	t.Run("connection file symlink race", func(t *testing.T) {
		race := `import os, sys, time
d = sys.argv[1]
end = time.time() + float(sys.argv[2])
while time.time() < end:
    try:
        names = os.listdir(d)
    except OSError:
        continue
    for n in names:
        p = os.path.join(d, n)
        if (n.startswith('kernel-') or n.startswith('ipykernel-')) and not os.path.islink(p):
            tmp = os.path.join(d, '.swap-' + n)
            try:
                os.symlink('/etc/shadow', tmp)
                os.replace(tmp, p)
            except OSError:
                pass
`
		if _, err := shared.c.WriteFile(ctxT(t), sb.ID, "/tmp/race.py", strings.NewReader(race), 0o644); err != nil {
			t.Fatal(err)
		}
		mustSh(t, sb.ID, "nohup python3 /tmp/race.py "+kernelsDir+" 25 >/dev/null 2>&1 & echo $! > /tmp/race.pid")
		ctx := ctxT(t)
		// Kernels start (and often fail to: their connection file is
		// swapped for a symlink they cannot read) while the race runs.
		var started, failed int
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			c, err := shared.c.CreateContext(cctx, sb.ID, api.CreateContextRequest{Language: "python"})
			cancel()
			if err != nil {
				failed++
				continue
			}
			started++
			shared.c.DeleteContext(ctx, sb.ID, c.ID)
		}
		sh(t, shared, sb.ID, "kill $(cat /tmp/race.pid) 2>/dev/null; true")
		t.Logf("kernel starts during the race: %d started, %d failed", started, failed)
		if got := fingerprint(t, shadow); got != before {
			t.Fatalf("/etc/shadow changed: %s, was %s", got, before)
		}
		if got := mustSh(t, sb.ID, "cat /etc/shadow >/dev/null 2>&1 && echo readable || echo denied"); got != "denied\n" {
			t.Fatalf("uid 1000 can read /etc/shadow: %s", got)
		}
		stillServes(t, sb.ID)
	})
}

// TestAgentAttackKernelspecs plants kernelspecs under the user's home,
// which the agent reads on every code call.
func TestAgentAttackKernelspecs(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	const kdir = "/home/user/.local/share/jupyter/kernels"
	plants := []struct{ name, script, before string }{
		{"kernel.json symlink to /dev/zero", "mkdir -p $K/zero && ln -s /dev/zero $K/zero/kernel.json",
			"the agent read /dev/zero as root until the OOM killer took it, and the sandbox with it"},
		{"kernel.json symlink to /proc/1/mem", "mkdir -p $K/mem && ln -s /proc/1/mem $K/mem/kernel.json",
			"the agent opened its own memory as root (only the read at offset 0 failing kept it out)"},
		{"kernel.json symlink to /etc/shadow", "mkdir -p $K/shadow && ln -s /etc/shadow $K/shadow/kernel.json",
			"the agent read a root-only file with root's authority"},
		{"kernel.json FIFO", "mkdir -p $K/fifo && mkfifo $K/fifo/kernel.json",
			"every code call blocked in open() until a writer came"},
		{"kernel.json of 8 MB", "mkdir -p $K/big && head -c 8000000 /dev/zero | tr '\\0' ' ' > $K/big/kernel.json",
			"read whole into the agent's memory on every code call"},
		{"spec dir through /proc/1/root", "ln -s /proc/1/root/usr/share/jupyter/kernels/python3 $K/agentroot",
			"the agent followed the magic link into its own root and offered the spec found there"},
	}
	for _, p := range plants {
		t.Run(p.name, func(t *testing.T) {
			t.Logf("before: %s", p.before)
			mustSh(t, sb.ID, "K="+kdir+"; mkdir -p $K && "+p.script)
			start := time.Now()
			stillServes(t, sb.ID)
			if d := time.Since(start); d > 90*time.Second {
				t.Fatalf("serving took %s with the plant", d)
			}
			// Unknown languages list the installed kernels: the planted ones
			// are not among them, nor any of their content.
			_, err := shared.c.RunCode(ctxT(t), sb.ID, api.RunCodeRequest{Code: "1", Language: "cobol"})
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "python3 (python)") {
				t.Fatalf("unknown language: %v", err)
			}
			for _, leak := range []string{"root:", "zero (", "mem (", "shadow (", "fifo (", "big ("} {
				if strings.Contains(err.Error(), leak) {
					t.Fatalf("the answer shows %q: %v", leak, err)
				}
			}
		})
	}
	// The agent's memory stayed small while it met all of them.
	status := mustSh(t, sb.ID, "grep VmRSS /proc/1/status")
	var kb int
	fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(status, "VmRSS:")), "%d", &kb)
	if kb == 0 || kb > 200<<10 {
		t.Fatalf("agent RSS: %s", status)
	}
	// Before: a FIFO in place of the kernels directory blocked the agent in
	// open() on every code call.
	t.Run("kernels dir FIFO", func(t *testing.T) {
		mustSh(t, sb.ID, "rm -rf "+kdir+" && mkfifo "+kdir)
		stillServes(t, sb.ID)
	})
}

// TestAgentAttackFilesAPI reaches for /proc, /dev, /sys and /.forkbox
// through relative and absolute symlinks, and for FIFOs and devices,
// through every files API call.
func TestAgentAttackFilesAPI(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	root := rootfs(t, sb.ID)
	mustSh(t, sb.ID, `cd /workspace && ln -s ../proc/1 p && ln -s ../dev d && ln -s ../.forkbox f && ln -s ../sys s && ln -s /proc/1 a && mkfifo fifo && mkdir dir && echo data > dir/file`)
	// The root filesystem is mounted nodev, so a device node on it cannot
	// be opened; the files API must still refuse it by type, at once.
	if err := syscall.Mknod(filepath.Join(root, "workspace", "chardev"), syscall.S_IFCHR|0o666, 1<<8|5); err != nil {
		t.Fatal(err)
	}
	asSandboxRoot(t, sb.ID, filepath.Join(root, "workspace", "chardev"))
	ctx := ctxT(t)
	leaves := "leaves the sandbox's filesystem"

	// Before: the prefix check saw /workspace/..., and a relative symlink
	// crossed into /proc, /sys, /dev and /.forkbox: /sys/kernel/notes was
	// read, /proc/1, /proc/1/fd, /dev and /sys were listed and /dev/shm
	// written; /proc/1/environ and /.forkbox were kept out only by their
	// modes (403, not 400). The absolute symlink was refused already.
	for _, p := range []string{"/workspace/p/environ", "/workspace/p/mem", "/workspace/p/root/etc/hostname", "/workspace/d/zero", "/workspace/d/shm/x",
		"/workspace/f/run/agent.json", "/workspace/s/kernel/notes", "/workspace/a/environ", "p/environ"} {
		t.Run("read "+p, func(t *testing.T) {
			b, err := shared.c.ReadFile(ctx, sb.ID, p)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), leaves) {
				t.Fatalf("read %s: %d bytes, %v; want 400 saying it %s", p, len(b), err, leaves)
			}
		})
		t.Run("write "+p, func(t *testing.T) {
			_, err := shared.c.WriteFile(ctx, sb.ID, p, strings.NewReader("pwned"), 0o644)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), leaves) {
				t.Fatalf("write %s: %v; want 400 saying it %s", p, err, leaves)
			}
		})
		t.Run("remove "+p, func(t *testing.T) {
			err := shared.c.RemoveFile(ctx, sb.ID, p, true)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), leaves) {
				t.Fatalf("remove %s: %v; want 400 saying it %s", p, err, leaves)
			}
		})
	}
	for _, p := range []string{"/workspace/p", "/workspace/p/fd", "/workspace/d", "/workspace/f", "/workspace/f/run", "/workspace/s", "/workspace/a"} {
		t.Run("list "+p, func(t *testing.T) {
			l, err := shared.c.ListFiles(ctx, sb.ID, p)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), leaves) {
				t.Fatalf("list %s: %+v, %v; want 400 saying it %s", p, l, err, leaves)
			}
		})
	}
	// Before: reading a FIFO blocked an agent thread in open() for as long
	// as no writer came (the request never answered); a device node was
	// opened before it was refused.
	for _, p := range []string{"/workspace/fifo", "/workspace/chardev"} {
		t.Run("special file "+p, func(t *testing.T) {
			start := time.Now()
			if _, err := shared.c.ReadFile(ctx, sb.ID, p); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("read %s: %v", p, err)
			}
			if _, err := shared.c.WriteFile(ctx, sb.ID, p, strings.NewReader("x"), 0o644); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("write %s: %v", p, err)
			}
			if _, err := shared.c.ListFiles(ctx, sb.ID, p); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a directory") {
				t.Fatalf("list %s: %v", p, err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("refusing %s took %s", p, d)
			}
		})
	}
	// Removing a FIFO unlinks it (it is never opened), as rm does.
	if err := shared.c.RemoveFile(ctx, sb.ID, "/workspace/fifo", false); err != nil {
		t.Fatalf("remove the FIFO: %v", err)
	}
	// In-root symlinks keep working, relative ones through directories too.
	mustSh(t, sb.ID, "cd /workspace && ln -s dir/file file-link && ln -s ../workspace/dir dir-link")
	for _, p := range []string{"/workspace/file-link", "/workspace/dir-link/file"} {
		if b, err := shared.c.ReadFile(ctx, sb.ID, p); err != nil || string(b) != "data\n" {
			t.Fatalf("read %s: %q %v", p, b, err)
		}
	}
	if l, err := shared.c.ListFiles(ctx, sb.ID, "/workspace/dir-link"); err != nil || len(l.Entries) != 1 {
		t.Fatalf("list through an in-root symlink: %+v %v", l, err)
	}

	// Before: the upload was renamed into place as root, which may replace
	// any file in a sticky directory such as /tmp: here root's own.
	t.Run("upload over root's file in /tmp", func(t *testing.T) {
		victim := filepath.Join(root, "tmp", "roots-file")
		if err := os.WriteFile(victim, []byte("root's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		asSandboxRoot(t, sb.ID, victim)
		before := fingerprint(t, victim)
		_, err := shared.c.WriteFile(ctx, sb.ID, "/tmp/roots-file", strings.NewReader("pwned"), 0o644)
		if !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Fatalf("upload over root's file in /tmp: %v; want 403", err)
		}
		if got := fingerprint(t, victim); got != before {
			t.Fatalf("root's file changed: %s", got)
		}
		stillServes(t, sb.ID)
	})

	// Before: the target was checked, then renamed over as root; a swap to
	// a symlink in between was harmless only by luck of rename's
	// semantics, and the temp name (a timestamp) could be guessed.
	t.Run("symlink swap race on upload", func(t *testing.T) {
		shadow := filepath.Join(root, "etc", "shadow")
		before := fingerprint(t, shadow)
		etcBefore := dirNames(t, filepath.Join(root, "etc"))
		race := `import os, sys, time
d = '/workspace/race'
os.makedirs(d, exist_ok=True)
end = time.time() + float(sys.argv[1])
i = 0
while time.time() < end:
    i += 1
    target = os.path.join(d, 'target')
    tmp = os.path.join(d, '.swap')
    try:
        os.symlink(['/etc/shadow', '/etc', '/proc/1/mem'][i % 3], tmp)
        os.replace(tmp, target)
    except OSError:
        pass
    try:
        for n in os.listdir(d):
            if n.startswith('.target.forkbox-'):
                p = os.path.join(d, n)
                os.unlink(p)
                os.symlink('/etc/shadow', p)
    except OSError:
        pass
`
		if _, err := shared.c.WriteFile(ctx, sb.ID, "/tmp/swap.py", strings.NewReader(race), 0o644); err != nil {
			t.Fatal(err)
		}
		mustSh(t, sb.ID, "nohup python3 /tmp/swap.py 20 >/dev/null 2>&1 & echo $! > /tmp/swap.pid")
		var ok, refused int
		deadline := time.Now().Add(15 * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			_, err := shared.c.WriteFile(ctx, sb.ID, "/workspace/race/target", strings.NewReader(fmt.Sprintf("upload %d\n", i)), 0o644)
			switch {
			case err == nil:
				ok++
			case errors.Is(err, errdefs.ErrInvalidArgument), errors.Is(err, errdefs.ErrPermissionDenied),
				errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrFailedPrecondition):
				refused++
			default:
				t.Fatalf("upload during the race: %v", err)
			}
		}
		sh(t, shared, sb.ID, "kill $(cat /tmp/swap.pid) 2>/dev/null; true")
		t.Logf("uploads during the race: %d written, %d refused", ok, refused)
		if got := fingerprint(t, shadow); got != before {
			t.Fatalf("/etc/shadow changed: %s, was %s", got, before)
		}
		if got := dirNames(t, filepath.Join(root, "etc")); got != etcBefore {
			t.Fatalf("/etc changed during the race")
		}
		time.Sleep(500 * time.Millisecond) // the swapper's last loop
		mustSh(t, sb.ID, "rm -rf /workspace/race")
		if _, err := shared.c.WriteFile(ctx, sb.ID, "/workspace/race/target", strings.NewReader("final\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := mustSh(t, sb.ID, "stat -c '%F %U %a' /workspace/race/target; cat /workspace/race/target; ls -A /workspace/race"); got != "regular file user 600\nfinal\ntarget\n" {
			t.Fatalf("after the race: %q", got)
		}
		stillServes(t, sb.ID)
	})
}

// dirNames lists a host directory's names, for before/after comparisons.
func dirNames(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, "\n")
}

// TestAgentAttackExecOracle asks the agent to look for a working directory
// and a command where uid 1000 cannot see.
func TestAgentAttackExecOracle(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	root := rootfs(t, sb.ID)
	// Root-only places: /root is 0700.
	if err := os.MkdirAll(filepath.Join(root, "root", "secret-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "root", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "root", "bin", "secretcmd"), []byte("#!/bin/sh\necho secret\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	asSandboxRoot(t, sb.ID, filepath.Join(root, "root", "secret-dir"), filepath.Join(root, "root", "bin"), filepath.Join(root, "root", "bin", "secretcmd"))
	mustSh(t, sb.ID, "cd /workspace && ln -s /proc/1/root agentroot && ln -s /proc/1/cwd agentcwd && ln -s /root/secret-dir secretlink && ln -s /root/missing-dir missinglink")
	ctx := ctxT(t)

	// Every cwd the user cannot enter gets the answer of a missing one.
	// Before: exec answered 126 "permission denied" behind /root and 127 "no
	// such file" for a missing dir; the agent itself followed no link, but
	// the answers differed by what the user could not see.
	answer := func(cwd string) string {
		res, err := shared.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: "pwd", Cwd: cwd})
		if err != nil {
			t.Fatalf("exec in %s: %v", cwd, err)
		}
		return fmt.Sprintf("%d %s", res.ExitCode, strings.ReplaceAll(res.Stderr, cwd, "<cwd>"))
	}
	want := answer("/nonexistent/dir")
	if !strings.HasPrefix(want, "126 ") {
		t.Fatalf("exec in a missing dir: %s", want)
	}
	for _, cwd := range []string{"/root/secret-dir", "/root/missing-dir", "/root", "/workspace/secretlink", "/workspace/missinglink",
		"/workspace/agentroot", "/workspace/agentroot/etc", "/workspace/agentcwd", "/proc/1/root", "/proc/1/cwd/etc"} {
		if got := answer(cwd); got != want {
			t.Errorf("exec in %s: %q; a missing dir gives %q", cwd, got, want)
		}
	}
	// The same for a code context's cwd. Before: root's os.Stat let
	// /root/secret-dir through (and the kernel then failed to start),
	// while a missing dir was a 400.
	ctxAnswer := func(cwd string) string {
		c, err := shared.c.CreateContext(ctx, sb.ID, api.CreateContextRequest{Language: "python", Cwd: cwd})
		if err == nil {
			shared.c.DeleteContext(ctx, sb.ID, c.ID)
			return "created"
		}
		status, _ := errdefs.HTTPStatus(err)
		return fmt.Sprintf("%d %s", status, strings.ReplaceAll(err.Error(), cwd, "<cwd>"))
	}
	// A missing cwd is made as the user (mkdir -p) where the user may make
	// it; where it may not, the answer is the 400 of every cwd it cannot
	// enter, whatever is or is not behind it.
	if got := ctxAnswer("/workspace/missing-dir"); got != "created" {
		t.Fatalf("context in a missing dir the user may make: %s", got)
	}
	wantCtx := ctxAnswer("/nonexistent/dir")
	if !strings.HasPrefix(wantCtx, "400 ") {
		t.Fatalf("context in a missing dir the user may not make: %s", wantCtx)
	}
	for _, cwd := range []string{"/root/secret-dir", "/root/missing-dir", "/workspace/secretlink", "/workspace/agentroot/etc", "/workspace/agentcwd"} {
		if got := ctxAnswer(cwd); got != wantCtx {
			t.Errorf("context in %s: %q; a missing dir gives %q", cwd, got, wantCtx)
		}
	}

	// A command in a directory the user cannot search is not found, as for
	// the user's own shell. Before: root's stat found it; the exec then
	// failed with 126 "permission denied" instead of 127.
	look := func(cmd string) string {
		res, err := shared.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: cmd, Env: map[string]string{"PATH": "/root/bin:/usr/bin:/bin"}})
		if err != nil {
			t.Fatalf("exec %s: %v", cmd, err)
		}
		return fmt.Sprintf("%d %s", res.ExitCode, strings.ReplaceAll(res.Stderr, cmd, "<cmd>"))
	}
	if got, missing := look("secretcmd"), look("nosuchcmd"); got != missing || !strings.HasPrefix(got, "127 ") {
		t.Errorf("command in a root-only dir: %q; a missing one: %q", got, missing)
	}
	stillServes(t, sb.ID)
}

// procStatus reads the Cap*, NoNewPrivs and Groups lines of a status file.
func procStatus(text string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && (strings.HasPrefix(k, "Cap") || k == "NoNewPrivs" || k == "Groups") {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// checkAgentLockedDown checks, from the user's side and from the host, that
// a sandbox's agent holds only its three capabilities, is not dumpable and
// has no supplementary groups.
func checkAgentLockedDown(t *testing.T, sb string) {
	t.Helper()
	want := map[string]string{"CapEff": agentCapsHex, "CapPrm": agentCapsHex, "CapInh": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Groups": ""}
	inside := procStatus(mustSh(t, sb, "cat /proc/1/status"))
	pid := agentHostPID(t, sb)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	host := procStatus(string(b))
	for k, v := range want {
		if inside[k] != v {
			t.Errorf("agent %s seen by the user: %q, want %q", k, inside[k], v)
		}
		if host[k] != v {
			t.Errorf("agent %s seen from the host: %q, want %q", k, host[k], v)
		}
	}
	rep, err := agentSelf(t, sb)
	if err != nil {
		t.Fatalf("agent self report: %v", err)
	}
	// Dumpable 1 is the value that lets others in; 2 is what a host with
	// fs.suid_dumpable=2 gives after a file thread switched its fsuid.
	if rep.Dumpable == 1 || rep.CapEff != agentCapsHex || rep.CapPrm != agentCapsHex || len(rep.Groups) != 0 || rep.NoNewPrivs != 1 {
		t.Errorf("agent reports %+v", rep)
	}
}

// agentHostPID finds the host pid of a sandbox's PID 1: the process in the
// sandbox's cgroup whose pid is 1 in its own namespace.
func agentHostPID(t *testing.T, id string) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/status")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var nspid []string
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				nspid = strings.Fields(v)
			}
		}
		if len(nspid) < 2 || nspid[len(nspid)-1] != "1" {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup"))
		if err != nil || !strings.Contains(string(cg), id) {
			continue
		}
		pid, _ := strconv.Atoi(nspid[0])
		return pid
	}
	t.Fatalf("no agent process for %s", id)
	return 0
}

// agentSelf asks a sandbox's agent, over its socket, how it stands. The
// socket is reached through the agent's own root, wherever the runtime keeps
// its run dir on the host.
func agentSelf(t *testing.T, id string) (*wire.SelfReport, error) {
	t.Helper()
	sock := fmt.Sprintf("/proc/%d/root%s/%s", agentHostPID(t, id), wire.RunDir, wire.SocketName)
	c := agentclient.New(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Self(ctx)
}

// pid1Probe tries, as uid 1000, every way into PID 1 and prints what
// happened to each.
const pid1Probe = `import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = 'allowed'
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
def rd(p, mode='rb'):
    with open(p, mode) as f:
        f.read(1)
attempt('open /proc/1/mem for reading', lambda: rd('/proc/1/mem'))
attempt('open /proc/1/mem for writing', lambda: open('/proc/1/mem', 'r+b').close())
attempt('read /proc/1/environ', lambda: rd('/proc/1/environ'))
attempt('list /proc/1/root', lambda: os.listdir('/proc/1/root'))
attempt('readlink /proc/1/root', lambda: os.readlink('/proc/1/root'))
attempt('list /proc/1/fd', lambda: os.listdir('/proc/1/fd'))
attempt('readlink /proc/1/exe', lambda: os.readlink('/proc/1/exe'))
attempt('read /proc/1/maps', lambda: rd('/proc/1/maps'))
def ptrace(req):
    libc.ptrace.restype = ctypes.c_long
    if libc.ptrace(ctypes.c_long(req), ctypes.c_long(1), None, None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
attempt('ptrace attach', lambda: ptrace(16))
attempt('ptrace seize', lambda: ptrace(0x4206))
def vm_read():
    buf = ctypes.create_string_buffer(8)
    class iovec(ctypes.Structure):
        _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
    local = iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
    remote = iovec(0x400000, 8)
    if libc.process_vm_readv(1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
attempt('process_vm_readv', vm_read)
print(json.dumps(out))`

// TestAgentAttackPID1: uid 1000 reaches for the agent's memory, environment,
// root and descriptors, and reads its capability sets.
func TestAgentAttackPID1(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, sb.ID, py("1")))
	// Before: uid 1000 was refused these already (its uid differs from the
	// agent's), but the agent was dumpable until its first file call and
	// any thread of it with uid 1000's fsuid kept CAP_SYS_PTRACE.
	probe := func(t *testing.T, sb string) {
		var got map[string]string
		if err := json.Unmarshal([]byte(userPy(t, sb, pid1Probe)), &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 11 {
			t.Fatalf("probe: %v", got)
		}
		for what, res := range got {
			if res == "allowed" {
				t.Errorf("uid 1000 could %s", what)
			}
		}
	}
	probe(t, sb.ID)
	// Before: CapEff and CapPrm were 000001fffeffffff, every capability
	// but CAP_SYS_RESOURCE, for the agent's whole life.
	checkAgentLockedDown(t, sb.ID)
	// What the user's processes hold: nothing.
	self := procStatus(mustSh(t, sb.ID, "cat /proc/self/status"))
	if self["CapEff"] != "0000000000000000" || self["CapPrm"] != "0000000000000000" {
		t.Errorf("user process caps: %v", self)
	}
	stillServes(t, sb.ID)

	// A memory snapshot restores the agent with its flags and sets (CRIU
	// dumps the dumpable flag and each thread's credentials and puts them
	// back), and so does a suspend and resume.
	t.Run("restored from a memory snapshot", func(t *testing.T) {
		status, sn, raw := checkpoint(t, shared, sb.ID, api.CheckpointRequest{Type: "memory"})
		if status != 201 {
			t.Fatalf("memory checkpoint: %d %s", status, raw)
		}
		restored := newSandbox(t, shared, api.CreateSandboxRequest{SnapshotID: sn.ID})
		checkAgentLockedDown(t, restored.ID)
		probe(t, restored.ID)
		stillServes(t, restored.ID)
	})
	t.Run("suspended and resumed", func(t *testing.T) {
		if _, err := shared.c.Suspend(ctxT(t), sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := shared.c.Resume(ctxT(t), sb.ID); err != nil {
			t.Fatal(err)
		}
		checkAgentLockedDown(t, sb.ID)
		probe(t, sb.ID)
		stillServes(t, sb.ID)
	})
}
