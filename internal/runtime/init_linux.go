package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"

	"github.com/forkbox/forkbox/internal/agent"

	"golang.org/x/sys/unix"
)

// initConfig is what the daemon sends to the sandbox's first process over fd 3.
type initConfig struct {
	RootFS   string     `json:"rootfs"`
	Hostname string     `json:"hostname"`
	Binary   string     `json:"binary"`  // host path of the forkbox binary
	RunDir   string     `json:"run_dir"` // host path bound at AgentRunDir
	Binds    []initBind `json:"binds"`
}

type initBind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
}

// InitMain is the first process of a sandbox (`forkbox __sandbox-init`). It
// starts in the sandbox's new namespaces but still sees the host's mounts. It
// waits for the daemon to place it in its cgroup and set up its network (the
// config arriving on fd 3 is the signal), builds the sandbox's root, pivots
// into it, enters a fresh cgroup namespace and execs the agent from inside
// the sandbox, which then runs as PID 1. Errors go to fd 4, which the agent
// later uses to say it is ready.
func InitMain() {
	status := os.NewFile(4, "status")
	fail := func(err error) {
		fmt.Fprintf(status, "error: %v\n", err)
		os.Exit(1)
	}
	trace := func(step string) { fmt.Fprintf(status, "trace: %s %d\n", step, time.Now().UnixMicro()) }
	trace("init-start")
	cfgFile := os.NewFile(3, "config")
	var cfg initConfig
	if err := json.NewDecoder(cfgFile).Decode(&cfg); err != nil {
		fail(fmt.Errorf("read init config: %w", err))
	}
	cfgFile.Close()
	trace("init-config")
	// Namespace changes below are per thread until exec: keep this goroutine
	// on this thread for good.
	goruntime.LockOSThread()
	if err := setupRoot(&cfg); err != nil {
		fail(err)
	}
	trace("init-root")
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		fail(fmt.Errorf("unshare cgroup namespace: %w", err))
	}
	// Only stdio and the status pipe go on to the agent: a descriptor the
	// daemon leaked would point outside the sandbox (and CRIU refuses to
	// dump what it cannot find inside). Marked close-on-exec rather than
	// closed, as the Go runtime still uses its own until the exec.
	if err := unix.CloseRange(5, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		fail(fmt.Errorf("close inherited descriptors: %w", err))
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := unix.Exec(agent.Binary, []string{"forkbox", "agent"}, env); err != nil {
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

func setupRoot(cfg *initConfig) error {
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
	for _, d := range []string{"proc", "sys", "dev", "tmp", agent.Dir[1:]} {
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
	for _, masked := range []string{"proc/kcore", "proc/keys", "proc/timer_list", "proc/sched_debug"} {
		if _, err := os.Stat(p(masked)); err == nil {
			if err := mountf(p("dev/null"), p(masked), "", unix.MS_BIND, ""); err != nil {
				return err
			}
		}
	}
	// forkbox's own directory: a root-only tmpfs holding the agent binary
	// (read-only bind) and the run dir shared with the daemon.
	if err := mountf("tmpfs", p(agent.Dir), "tmpfs", nsd|unix.MS_NOEXEC, "mode=0700,size=64k"); err != nil {
		return err
	}
	bin := p(agent.Binary)
	if err := ensureTarget(cfg.Binary, bin); err != nil {
		return err
	}
	if err := mountf(cfg.Binary, bin, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if err := mountf("", bin, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return err
	}
	if err := os.MkdirAll(p(agent.RunDir), 0o700); err != nil {
		return err
	}
	if err := bindMount(cfg.RunDir, p(agent.RunDir), false); err != nil {
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

// setupDev builds a minimal /dev: a tmpfs with the usual character devices,
// a private devpts, /dev/shm and /dev/mqueue.
func setupDev(dev string) error {
	const nsd = unix.MS_NOSUID
	if err := mountf("tmpfs", dev, "tmpfs", nsd|unix.MS_STRICTATIME, "mode=755,size=65536k"); err != nil {
		return err
	}
	old := unix.Umask(0)
	defer unix.Umask(old)
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}} {
		if err := unix.Mknod(filepath.Join(dev, d.name), unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", d.name, err)
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
