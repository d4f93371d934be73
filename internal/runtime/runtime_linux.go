package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/internal/agent"
	"github.com/forkbox/forkbox/internal/durable"
	"github.com/forkbox/forkbox/internal/netsetup"
	"golang.org/x/sys/unix"
)

// Config configures the runtime.
type Config struct {
	// Dir holds one directory per sandbox (<data>/sandboxes).
	Dir string
	// CacheDir holds formatted disk templates (<data>/cache).
	CacheDir string
	// CgroupParent is the cgroup under which sandboxes are created.
	CgroupParent string
	// Binary is the forkbox executable bind-mounted into sandboxes as the
	// agent. Defaults to the running executable.
	Binary string
	// Net attaches internet access; required only for sandboxes that ask.
	Net *netsetup.Manager
	// OnExit is called (once, from its own goroutine) when a sandbox's init
	// exits without Destroy having been called.
	OnExit func(id string, reason string)
	Logger *slog.Logger
}

// Runtime creates and destroys sandboxes. Safe for concurrent use.
type Runtime struct {
	cfg   Config
	disks *diskCache
	log   *slog.Logger

	mu        sync.Mutex
	destroyed map[string]bool // ids whose exit is expected
	inits     chan *initProc  // pre-started init processes
	refilling bool
	closed    bool
}

// New checks the host and returns a Runtime.
func New(cfg Config) (*Runtime, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the forkbox runtime needs root (namespaces, cgroups, mounts)")
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
		cfg.Binary = exe
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "forkbox"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, d := range []string{cfg.Dir, cfg.CacheDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, err
		}
	}
	// Init processes are started ahead of need, in a copy of the host's mount
	// table; the mounts a create makes later under the sandboxes dir reach
	// them because that dir is a shared mount (propagation), until each init
	// makes its tree private.
	if err := ensureSharedMount(cfg.Dir); err != nil {
		return nil, fmt.Errorf("sandboxes dir %s: %w", cfg.Dir, err)
	}
	r := &Runtime{cfg: cfg, disks: &diskCache{dir: cfg.CacheDir}, log: cfg.Logger, destroyed: map[string]bool{},
		inits: make(chan *initProc, initPoolSize)}
	r.refillInits()
	return r, nil
}

// Dir returns the host directory of sandbox id.
func (r *Runtime) Dir(id string) string { return filepath.Join(r.cfg.Dir, id) }

// SocketPath returns the host path of the agent socket of a sandbox.
func SocketPath(info *Info) string { return filepath.Join(info.Dir, "run", agent.SocketName) }

// cleanup is a LIFO stack of undo steps for a multi-step setup.
type cleanup []func() error

func (c *cleanup) add(f func() error) { *c = append(*c, f) }

func (c cleanup) run() error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		if err := c[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Create starts a sandbox and returns once its agent is ready. On failure
// everything done so far is undone.
func (r *Runtime) Create(ctx context.Context, spec Spec) (info *Info, err error) {
	dir := r.Dir(spec.ID)
	info = &Info{Dir: dir, CgroupDir: r.cfg.CgroupParent}
	t0 := time.Now()
	var (
		stepMu sync.Mutex
		steps  []any
	)
	addStep := func(name string, us int64) { stepMu.Lock(); steps = append(steps, name, us); stepMu.Unlock() }
	step := func(name string) { addStep(name, time.Since(t0).Microseconds()) }
	defer func() {
		stepMu.Lock()
		defer stepMu.Unlock()
		r.log.Debug("sandbox create steps (µs since start)", append([]any{"sandbox", spec.ID}, steps...)...)
	}()
	var undo cleanup
	ok := false // set just before the one successful return
	defer func() {
		// On every other way out, a panic included, undo what was done.
		if !ok {
			if cerr := undo.run(); cerr != nil {
				r.log.Error("unwinding failed sandbox create", "sandbox", spec.ID, "err", cerr)
			}
		}
	}()

	rootfs, runDir, err := r.prepareRoot(ctx, spec, &undo)
	if err != nil {
		return nil, err
	}
	step("overlay")
	cg := newCgroups(r.cfg.CgroupParent, spec.ID)
	undo.add(cg.remove)
	undo.add(func() error { return cg.kill(5 * time.Second) })
	if err := cg.create(spec.Limits); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}

	step("cgroup")
	// The first process: new namespaces, waiting for its config on fd 3.
	z, err := r.takeInit()
	if err != nil {
		return nil, err
	}
	cmd, cfgW, statR := z.cmd, z.cfgW, z.statR
	defer cfgW.Close()
	defer statR.Close()
	step("start")
	pid := cmd.Process.Pid
	undo.add(func() error { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait(); return nil })
	info.PID = pid
	if info.PIDStart, err = pidStartTime(pid); err != nil {
		return nil, err
	}
	if err := cg.join(pid); err != nil {
		return nil, err
	}
	if r.cfg.Net == nil {
		return nil, errors.New("runtime has no network manager")
	}
	if err := r.cfg.Net.LoopbackUp(pid); err != nil {
		return nil, fmt.Errorf("loopback: %w", err)
	}
	if spec.AllowInternet {
		undo.add(func() error { return r.cfg.Net.Detach(spec.ID) })
		link, err := r.cfg.Net.Attach(ctx, spec.ID, pid)
		if err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
		info.Link = link
	}
	step("network")
	binds := []initBind{}
	for _, b := range spec.Image.Binds {
		binds = append(binds, initBind{Source: b.Source, Target: b.Target, ReadOnly: b.ReadOnly})
	}
	icfg := initConfig{RootFS: rootfs, Hostname: spec.Hostname, Binary: r.cfg.Binary, RunDir: runDir, Binds: binds}
	if err := json.NewEncoder(cfgW).Encode(icfg); err != nil {
		return nil, fmt.Errorf("send init config: %w", err)
	}
	cfgW.Close()

	if err := waitReady(ctx, statR, func(step string, at int64) {
		addStep(step, at-t0.UnixMicro())
	}); err != nil {
		return nil, err
	}
	step("ready")
	go r.reap(spec.ID, func() string {
		err := cmd.Wait()
		return exitReason(err)
	})
	ok = true
	return info, nil
}

// initProc is a sandbox's first process, started ahead of need: it sits in
// fresh namespaces, blocked reading its config, having paid the Go runtime's
// start (~20 ms for this binary) already.
type initProc struct {
	cmd   *exec.Cmd
	cfgW  *os.File // its fd 3
	statR *os.File // its fd 4
}

// initPoolSize is how many started init processes the runtime keeps ready.
const initPoolSize = 2

func (r *Runtime) startInit() (*initProc, error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		return nil, err
	}
	cmd := exec.Command(r.cfg.Binary, "__sandbox-init")
	cmd.ExtraFiles = []*os.File{cfgR, statW}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		Setsid: true,
	}
	err = cmd.Start()
	cfgR.Close()
	statW.Close()
	if err != nil {
		cfgW.Close()
		statR.Close()
		return nil, fmt.Errorf("start sandbox init: %w", err)
	}
	return &initProc{cmd: cmd, cfgW: cfgW, statR: statR}, nil
}

// takeInit hands out a ready init process, or starts one if none is ready,
// and refills the pool in the background.
func (r *Runtime) takeInit() (*initProc, error) {
	defer r.refillInits()
	select {
	case z := <-r.inits:
		// One that died meanwhile (killed from outside) is replaced.
		if z.cmd.ProcessState == nil && unix.Kill(z.cmd.Process.Pid, 0) == nil {
			return z, nil
		}
		z.discard()
	default:
	}
	return r.startInit()
}

func (r *Runtime) refillInits() {
	r.mu.Lock()
	if r.refilling || r.closed {
		r.mu.Unlock()
		return
	}
	r.refilling = true
	r.mu.Unlock()
	go func() {
		defer func() { r.mu.Lock(); r.refilling = false; r.mu.Unlock() }()
		for len(r.inits) < cap(r.inits) {
			z, err := r.startInit()
			if err != nil {
				r.log.Warn("pre-start sandbox init", "err", err)
				return
			}
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if closed {
				z.discard()
				return
			}
			select {
			case r.inits <- z:
			default:
				z.discard()
				return
			}
		}
	}()
}

func (z *initProc) discard() {
	z.cfgW.Close()
	z.statR.Close()
	_ = z.cmd.Process.Kill()
	_ = z.cmd.Wait()
}

// ensureSharedMount makes dir a mount point of its own with shared
// propagation. It is idempotent: a dir that is already a mount point (after a
// daemon restart, with sandboxes mounted below it) is only marked shared.
func ensureSharedMount(dir string) error {
	mounted, err := isMountPoint(dir)
	if err != nil {
		return err
	}
	if !mounted {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind: %w", err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make shared: %w", err)
	}
	return nil
}

// isMountPoint reports whether path is the mount point of a mount in this
// mount namespace.
func isMountPoint(path string) (bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMountPath(f[4]) == abs {
			return true, nil
		}
	}
	return false, nil
}

// unescapeMountPath undoes the octal escapes of /proc/self/mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ReleaseMounts unmounts the sandboxes dir's own mount. Call it only when no
// sandbox is left (a daemon that stops with sandboxes running keeps it so the
// next start adopts them).
func (r *Runtime) ReleaseMounts() error {
	return unmount(r.cfg.Dir)
}

// Close stops the pre-started init processes. Sandboxes keep running.
func (r *Runtime) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	for {
		select {
		case z := <-r.inits:
			z.discard()
		default:
			return
		}
	}
}

// prepareRoot makes the sandbox's directory, writable layer (filled from
// spec.FromFS when set), overlay root and agent config, registering the undo
// of each step.
func (r *Runtime) prepareRoot(ctx context.Context, spec Spec, undo *cleanup) (rootfs, runDir string, err error) {
	dir := r.Dir(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("sandbox dir: %w", err)
	}
	undo.add(func() error { return os.RemoveAll(dir) })
	runDir = filepath.Join(dir, "run")
	if err := os.Mkdir(runDir, 0o700); err != nil {
		return "", "", err
	}

	// Writable layer: ext4 of disk_mb, then the overlay root.
	undo.add(func() error { return unmount(filepath.Join(dir, "disk")) })
	if err := mountDisk(r.disks, dir, spec.DiskMB); err != nil {
		return "", "", fmt.Errorf("writable layer: %w", err)
	}
	if spec.FromFS != "" {
		if err := importFS(ctx, spec.FromFS, filepath.Join(dir, "disk", "upper")); err != nil {
			return "", "", err
		}
	}
	rootfs = filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return "", "", err
	}
	undo.add(func() error { return unmount(rootfs) })
	opts, err := overlayOptions(spec.Image.LowerDirs, filepath.Join(dir, "disk"))
	if err != nil {
		return "", "", err
	}
	if err := unix.Mount("overlay", rootfs, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", "", fmt.Errorf("mount overlay root: %w", err)
	}

	// The agent's config, read by the agent at start.
	acfg := agent.Config{
		SandboxID: spec.ID,
		UID:       spec.Image.UID,
		GID:       spec.Image.GID,
		WorkDir:   spec.Image.WorkDir,
		Env:       agent.MergeEnv(spec.Image.Env, spec.Env),
		Build:     spec.Build,
	}
	if err := writeJSON(filepath.Join(runDir, agent.ConfigName), acfg); err != nil {
		return "", "", err
	}
	if spec.AllowInternet {
		// Name resolution for sandboxes that may reach the network.
		if err := os.WriteFile(filepath.Join(rootfs, "etc", "resolv.conf"), netsetup.ResolvConf(), 0o644); err != nil {
			return "", "", fmt.Errorf("write resolv.conf: %w", err)
		}
	}

	return rootfs, runDir, nil
}

// overlayOptions returns the mount options of a sandbox's root: the image's
// lower dirs (top first) under the writable layer mounted at disk. They must
// fit in one page, the kernel's limit for mount data.
func overlayOptions(lowers []string, disk string) (string, error) {
	if len(lowers) == 0 {
		return "", errors.New("image has no lower dirs")
	}
	for _, l := range lowers {
		if strings.ContainsAny(l, ":,\\") {
			return "", fmt.Errorf("image lower dir %q holds a character overlayfs options cannot take (':', ',' or '\\')", l)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(lowers, ":"),
		filepath.Join(disk, "upper"), filepath.Join(disk, "work"))
	if len(opts) >= os.Getpagesize() {
		return "", fmt.Errorf("image has too many layers (%d) for one overlay mount from this data dir (%d bytes of options, at most %d)",
			len(lowers), len(opts), os.Getpagesize()-1)
	}
	return opts, nil
}

// waitReady reads the status pipe: the agent writes "ok" once it serves, and
// init writes "error: …" if building the root failed.
func waitReady(ctx context.Context, statR *os.File, trace func(string, int64)) error {
	type res struct {
		line string
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		br := bufio.NewReader(statR)
		for {
			line, err := br.ReadString('\n')
			line = strings.TrimSpace(line)
			if t, ok := strings.CutPrefix(line, "trace: "); ok && err == nil {
				name, at, _ := strings.Cut(t, " ")
				v, _ := strconv.ParseInt(at, 10, 64)
				trace(name, v)
				continue
			}
			ch <- res{line, err}
			return
		}
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		switch {
		case r.line == "ok":
			return nil
		case strings.HasPrefix(r.line, "error: "):
			return fmt.Errorf("sandbox init: %s", strings.TrimPrefix(r.line, "error: "))
		case errors.Is(r.err, io.EOF):
			return errors.New("sandbox init exited before its agent was ready")
		default:
			return fmt.Errorf("sandbox init: unexpected status %q: %v", r.line, r.err)
		}
	case <-timer.C:
		return fmt.Errorf("sandbox agent not ready after %s", startTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func exitReason(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "sandbox init was killed (" + unix.SignalName(ws.Signal()) + ")"
		}
		return fmt.Sprintf("sandbox init exited with status %d", ee.ExitCode())
	}
	if err != nil {
		return "sandbox init: " + err.Error()
	}
	return "sandbox init exited"
}

// reap waits for a sandbox's init to exit and reports an unexpected exit.
func (r *Runtime) reap(id string, wait func() string) {
	reason := wait()
	r.mu.Lock()
	expected := r.destroyed[id]
	delete(r.destroyed, id)
	r.mu.Unlock()
	if !expected && r.cfg.OnExit != nil {
		r.cfg.OnExit(id, reason)
	}
}

// Adopt re-attaches to a sandbox created by an earlier daemon process. It
// fails if the sandbox's init is gone (or its PID now belongs to another
// process) or its agent does not answer.
func (r *Runtime) Adopt(ctx context.Context, id string, info *Info) error {
	if info.PID <= 0 {
		return errors.New("no init pid recorded")
	}
	start, err := pidStartTime(info.PID)
	if err != nil || start != info.PIDStart {
		return fmt.Errorf("init process %d is gone", info.PID)
	}
	if state, _ := pidState(info.PID); state == "Z" || state == "X" {
		return fmt.Errorf("init process %d has exited", info.PID)
	}
	pidfd, err := unix.PidfdOpen(info.PID, 0)
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", info.PID, err)
	}
	go r.reap(id, func() string {
		defer unix.Close(pidfd)
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			if err == nil || !errors.Is(err, unix.EINTR) {
				return "sandbox init exited"
			}
		}
	})
	return nil
}

// Destroy stops a sandbox and frees everything it held. It is idempotent and
// works from Info alone, so it also cleans up after a crash.
func (r *Runtime) Destroy(ctx context.Context, id string, info *Info) error {
	var errs []error
	if info.PID > 0 {
		if start, err := pidStartTime(info.PID); err == nil && start == info.PIDStart {
			// This exit is expected: its watcher must not report it.
			r.mu.Lock()
			r.destroyed[id] = true
			r.mu.Unlock()
			// Killing a PID namespace's init kills every process in it.
			_ = unix.Kill(info.PID, unix.SIGKILL)
		}
	}
	cg := newCgroups(r.cfg.CgroupParent, id)
	if err := cg.kill(10 * time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := cg.remove(); err != nil {
		errs = append(errs, err)
	}
	if r.cfg.Net != nil {
		if err := r.cfg.Net.Detach(id); err != nil {
			errs = append(errs, err)
		}
	}
	dir := r.Dir(id)
	if err := unmount(filepath.Join(dir, "rootfs")); err != nil {
		errs = append(errs, err)
	}
	if err := unmount(filepath.Join(dir, "disk")); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Usage reads a sandbox's resource use.
func (r *Runtime) Usage(id string) Usage {
	u := newCgroups(r.cfg.CgroupParent, id).stats()
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(r.Dir(id), "disk"), &st); err == nil && st.Type == unix.EXT4_SUPER_MAGIC {
		u.DiskUsedBytes = int64(st.Blocks-st.Bfree) * st.Bsize
	}
	return u
}

// SandboxDirs lists the sandbox directories on disk (for startup cleanup of
// sandboxes the metadata store does not know).
func (r *Runtime) SandboxDirs() ([]string, error) {
	ents, err := os.ReadDir(r.cfg.Dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// pidState reads the state letter (field 3 of /proc/PID/stat): R, S, Z, …
func pidState(pid int) (string, error) {
	f, err := statFields(pid)
	if err != nil {
		return "", err
	}
	return f[0], nil
}

// pidStartTime reads the start time (field 22 of /proc/PID/stat) of pid.
func pidStartTime(pid int) (uint64, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// statFields returns the fields of /proc/PID/stat after the command name
// (field 3 onwards).
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return nil, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return f, nil
}

// writeJSON writes v durably: temp file, fsync, rename.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(path, b, 0o600)
}
