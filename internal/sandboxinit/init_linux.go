// Package sandboxinit is a sandbox's first process (`__sandbox-init`): it
// starts in the sandbox's new namespaces (user namespace included, mapped to
// the sandbox's id range), builds the sandbox's root from what the daemon
// prepared, pivots into it and execs the agent. It is sandbox-side code: the
// agent binary links it, and it imports nothing of the daemon (the daemon's
// runtime imports it for the types of the config it sends).
package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/internal/agent/wire"
)

// UserLimits are the sandbox's user namespace limits (/proc/sys/user/*).
// Inotify instances and watches made in a sandbox also count against the
// host's per-user limits of root (the user namespace's owner), so each
// sandbox gets a bounded share and the daemon raises the host's limits
// (raiseHostLimits) so that one sandbox at its ceiling leaves the rest for
// the host and the others. Sandbox code may create no namespaces (seccomp
// refuses it too); the init itself makes one cgroup namespace after this.
var UserLimits = map[string]string{
	"max_inotify_instances": strconv.Itoa(InotifyInstances),
	"max_inotify_watches":   strconv.Itoa(InotifyWatches),
	"max_fanotify_groups":   "0",
	"max_fanotify_marks":    "0",
	"max_user_namespaces":   "0",
	"max_mnt_namespaces":    "0",
	"max_pid_namespaces":    "0",
	"max_net_namespaces":    "0",
	"max_ipc_namespaces":    "0",
	"max_uts_namespaces":    "0",
	"max_time_namespaces":   "0",
}

// Each sandbox's share of inotify.
const (
	InotifyInstances = 128
	InotifyWatches   = 65536
)

// setUserLimits writes UserLimits for the caller's user namespace (user
// sysctls are per user namespace: /proc/sys/user shows the reader's).
func setUserLimits() error {
	for name, v := range UserLimits {
		p := "/proc/sys/user/" + name
		if _, err := os.Stat(p); err != nil {
			continue // a kernel without this one
		}
		if err := os.WriteFile(p, []byte(v), 0); err != nil {
			return fmt.Errorf("user namespace limit %s: %w", name, err)
		}
	}
	return nil
}

// budgetShare divides the per-user budgets that the kernel also charges to
// the owner of the sandbox's user namespace (host root, who creates every
// sandbox's): POSIX message queue bytes and queued signals. A sandbox gets
// this fraction of the budget the daemon has, so one sandbox at its limit
// leaves root and the other sandboxes theirs (an eighth of the host's
// default 800 KiB of queues still holds one default-sized queue, 80 KiB);
// the limits are lowered (which
// needs no privilege) and nothing in the sandbox can raise them again.
const budgetShare = 8

// shareUserBudgets lowers RLIMIT_MSGQUEUE and RLIMIT_SIGPENDING to a
// budgetShare-th of what the init inherited.
func shareUserBudgets() error {
	for _, res := range []int{unix.RLIMIT_MSGQUEUE, unix.RLIMIT_SIGPENDING} {
		var lim unix.Rlimit
		if err := unix.Getrlimit(res, &lim); err != nil {
			return err
		}
		n := min(lim.Cur, lim.Max)
		if n == unix.RLIM_INFINITY {
			continue // a host without the budget: nothing to share
		}
		n /= budgetShare
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			return fmt.Errorf("limit %d: %w", res, err)
		}
	}
	return nil
}

// Config is what the daemon sends to the sandbox's first process over fd 3.
type Config struct {
	RootFS   string `json:"rootfs"`
	Hostname string `json:"hostname"`
	Binary   string `json:"binary"`  // host path of the forkbox binary
	RunDir   string `json:"run_dir"` // host path bound at AgentRunDir
	Binds    []Bind `json:"binds"`
	// NoFile is the sandbox's RLIMIT_NOFILE (soft and hard), which every
	// process of the sandbox inherits; 0 keeps the daemon's.
	NoFile int64 `json:"nofile,omitempty"`
}

type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
}

// Main is the first process of a sandbox (`forkbox __sandbox-init`). It
// starts in the sandbox's new namespaces but still sees the host's mounts. It
// waits for the daemon to place it in its cgroup and set up its network (the
// config arriving on fd 3 is the signal), builds the sandbox's root, pivots
// into it, enters a fresh cgroup namespace and execs the agent from inside
// the sandbox, which then runs as PID 1. Errors go to fd 4, which the agent
// later uses to say it is ready.
func Main() {
	status := os.NewFile(4, "status")
	fail := func(err error) {
		fmt.Fprintf(status, "error: %v\n", err)
		os.Exit(1)
	}
	trace := func(step string) { fmt.Fprintf(status, "trace: %s %d\n", step, time.Now().UnixMicro()) }
	trace("init-start")
	cfgFile := os.NewFile(3, "config")
	var cfg Config
	if err := json.NewDecoder(cfgFile).Decode(&cfg); err != nil {
		fail(fmt.Errorf("read init config: %w", err))
	}
	cfgFile.Close()
	trace("init-config")
	// Namespace changes below are per thread until exec: keep this goroutine
	// on this thread for good.
	goruntime.LockOSThread()
	// The sandbox's own user namespace limits (inotify, new namespaces),
	// written while the init still has its capabilities there and sees a
	// writable /proc/sys: the agent drops CAP_SYS_RESOURCE, so nothing in
	// the sandbox can raise them again.
	if err := setUserLimits(); err != nil {
		fail(err)
	}
	if err := setupRoot(&cfg); err != nil {
		fail(err)
	}
	trace("init-root")
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		fail(fmt.Errorf("unshare cgroup namespace: %w", err))
	}
	// The open-file limit that keeps the sandbox within its share of the
	// host's file table: lowering needs no privilege, and nothing in the
	// sandbox can raise it again.
	if cfg.NoFile > 0 {
		lim := &unix.Rlimit{Cur: uint64(cfg.NoFile), Max: uint64(cfg.NoFile)}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, lim); err != nil {
			fail(fmt.Errorf("open-file limit: %w", err))
		}
	}
	if err := shareUserBudgets(); err != nil {
		fail(err)
	}
	// Only stdio and the status pipe go on to the agent: a descriptor the
	// daemon leaked would point outside the sandbox (and CRIU refuses to
	// dump what it cannot find inside). Marked close-on-exec rather than
	// closed, as the Go runtime still uses its own until the exec.
	if err := unix.CloseRange(5, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		fail(fmt.Errorf("close inherited descriptors: %w", err))
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := unix.Exec(wire.Binary, []string{"forkbox", "agent"}, env); err != nil {
		fail(fmt.Errorf("exec agent: %w", err))
	}
}

func mountf(source, target, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %w", source, target, fstype, err)
	}
	return nil
}

// bindMount binds src onto dst, read-only if asked (a bind takes the RDONLY
// flag only on a remount).
func bindMount(src, dst string, ro bool) error {
	if err := mountf(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	if ro {
		return mountf("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_REC, "")
	}
	return nil
}

// ensureTarget makes the mount point dst exist with the kind of src.
func ensureTarget(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return os.MkdirAll(dst, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func setupRoot(cfg *Config) error {
	if err := mountf("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	root := cfg.RootFS
	// pivot_root needs the new root to be a mount point of its own.
	if err := mountf(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	for _, b := range cfg.Binds {
		dst := filepath.Join(root, b.Target)
		if err := ensureTarget(b.Source, dst); err != nil {
			return fmt.Errorf("bind target %s: %w", b.Target, err)
		}
		if err := bindMount(b.Source, dst, b.ReadOnly); err != nil {
			return err
		}
	}
	const nsd = unix.MS_NOSUID | unix.MS_NODEV
	p := func(s string) string { return filepath.Join(root, s) }
	for _, d := range []string{"proc", "sys", "dev", "tmp", wire.Dir[1:]} {
		if err := os.MkdirAll(p(d), 0o755); err != nil {
			return err
		}
	}
	if err := mountf("proc", p("proc"), "proc", nsd|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	// Parts of /proc that reach the host kernel are read-only or hidden.
	for _, ro := range []string{"proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus"} {
		if _, err := os.Stat(p(ro)); err == nil {
			if err := bindMount(p(ro), p(ro), true); err != nil {
				return err
			}
		}
	}
	if err := mountf("sysfs", p("sys"), "sysfs", nsd|unix.MS_NOEXEC|unix.MS_RDONLY, ""); err != nil {
		return err
	}
	if err := setupDev(p("dev")); err != nil {
		return err
	}
	// forkbox's own directory: a root-only tmpfs holding the agent binary
	// (read-only bind), the run dir shared with the daemon and the empty
	// directory that masks host directories.
	if err := mountf("tmpfs", p(wire.Dir), "tmpfs", nsd|unix.MS_NOEXEC, "mode=0700,size=64k"); err != nil {
		return err
	}
	if err := maskHostDetails(p); err != nil {
		return err
	}
	bin := p(wire.Binary)
	if err := ensureTarget(cfg.Binary, bin); err != nil {
		return err
	}
	if err := mountf(cfg.Binary, bin, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if err := mountf("", bin, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return err
	}
	if err := os.MkdirAll(p(wire.RunDir), 0o700); err != nil {
		return err
	}
	if err := bindMount(cfg.RunDir, p(wire.RunDir), false); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	// pivot_root(".", ".") stacks the old root on top of the new one; a lazy
	// unmount of "." then drops it (runc does the same) without a put_old dir.
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("drop old root: %w", err)
	}
	return unix.Chdir("/")
}

// maskedFiles are host files that the sandbox reads as empty: the kernel's
// memory and keys, its timers and scheduler internals, and what identifies
// the host (its boot command line).
var maskedFiles = []string{"proc/kcore", "proc/keys", "proc/timer_list", "proc/sched_debug", "proc/latency_stats",
	"proc/cmdline", "proc/kallsyms", "proc/kmsg", "proc/vmallocinfo", "proc/iomem", "proc/ioports"}

// maskedDirs are host directories the sandbox sees empty: firmware tables
// and the machine's DMI identity (serial numbers, uuid), ACPI and SCSI
// details.
var maskedDirs = []string{"proc/acpi", "proc/scsi", "sys/firmware", "sys/devices/virtual/dmi", "sys/class/dmi"}

// maskDir is the empty directory bound over maskedDirs, on forkbox's tmpfs.
var maskDir = filepath.Join(wire.Dir, "empty")[1:]

// maskHostDetails hides maskedFiles behind /dev/null and maskedDirs behind
// read-only binds of one empty directory on forkbox's own tmpfs (mounted
// first); p makes a path under the new root. Binds rather than a tmpfs each:
// CRIU saves and restores every tmpfs's content with tar, ~20 ms apiece, and
// binds of one tmpfs cost nothing more.
func maskHostDetails(p func(string) string) error {
	for _, masked := range maskedFiles {
		if _, err := os.Stat(p(masked)); err == nil {
			if err := mountf(p("dev/null"), p(masked), "", unix.MS_BIND, ""); err != nil {
				return err
			}
		}
	}
	empty := p(maskDir)
	if err := os.Mkdir(empty, 0o555); err != nil {
		return fmt.Errorf("mask dir: %w", err)
	}
	for _, masked := range maskedDirs {
		st, err := os.Lstat(p(masked))
		if err != nil || !st.IsDir() {
			continue
		}
		if err := bindMount(empty, p(masked), true); err != nil {
			return err
		}
	}
	return nil
}

// HostDevices are the device nodes a sandbox gets, bound from the host's
// /dev: a user namespace may not make device nodes, and binding the host's
// keeps them the real ones. The devices cgroup allows exactly these (plus
// the sandbox's own ptys).
var HostDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// setupDev builds a minimal /dev: a tmpfs (nodev: no node on it works) with
// the host's device nodes of HostDevices bound onto files, a private devpts
// for ptys, /dev/shm and /dev/mqueue.
func setupDev(dev string) error {
	if err := mountf("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_STRICTATIME, "mode=755,size=65536k"); err != nil {
		return err
	}
	old := unix.Umask(0)
	defer unix.Umask(old)
	for _, d := range HostDevices {
		dst := filepath.Join(dev, d)
		if err := os.WriteFile(dst, nil, 0o666); err != nil {
			return err
		}
		if err := mountf("/dev/"+d, dst, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for _, d := range []string{"pts", "shm", "mqueue"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	if err := mountf("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	if err := mountf("shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=65536k"); err != nil {
		return err
	}
	if err := mountf("mqueue", filepath.Join(dev, "mqueue"), "mqueue", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	links := map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}
