package runtime

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/durable"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/netsetup"
	"github.com/forkbox/forkbox/internal/sandboxinit"
	"github.com/forkbox/forkbox/internal/userns"
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
	// IDs hands out the host id ranges of sandboxes' user namespaces.
	IDs *userns.Allocator
	// OnExit is called (once, from its own goroutine) when a sandbox's init
	// exits without Destroy having been called.
	OnExit func(id string, reason string)
	Logger *slog.Logger
}

// Runtime creates and destroys sandboxes. Safe for concurrent use.
type Runtime struct {
	cfg Config
	// dir is the sandboxes dir as the runtime uses it: a bind of cfg.Dir
	// under execRoot (see ensureExecRoot).
	dir      string
	execRoot string
	disks    *diskCache
	log      *slog.Logger

	mu        sync.Mutex
	destroyed map[string]bool // ids whose exit is expected
	inits     chan *initProc  // pre-started init processes
	refilling bool
	closed    bool
	// restoreHooks answers CRIU's notifications during restores.
	restoreHooks *restoreHooks
	// agents keeps the agent binary's versions; agentBin is the live copy
	// of this daemon's, which new sandboxes run (see agents_linux.go).
	agents   *agentStore
	agentBin string
	// spawner starts inits in new user namespaces (spawn_linux.go).
	spawner *spawner
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
	if cfg.IDs == nil {
		return nil, errors.New("the runtime needs a user namespace id allocator")
	}
	for _, d := range []string{cfg.Dir, cfg.CacheDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, err
		}
	}
	// Sandboxes' inits run as unprivileged host ids and bind their root,
	// run dir and agent binary by path before they pivot, so those paths
	// must be searchable by any id. The data dir may sit where they are not
	// (under /root, or a 0700 temp dir): the runtime works through a bind of
	// the sandboxes dir at an exec root under /run instead.
	execRoot, err := ensureExecRoot(cfg.Dir)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(execRoot, "sandboxes")
	raiseHostLimits(cfg.Logger)
	hooks, err := newRestoreHooks(cfg.Net)
	if err != nil {
		return nil, err
	}
	agents, agentBin, err := setupAgents(filepath.Dir(cfg.Dir), filepath.Join(execRoot, "agent"), cfg.Binary)
	if err != nil {
		return nil, err
	}
	r := &Runtime{cfg: cfg, dir: dir, execRoot: execRoot, disks: &diskCache{dir: cfg.CacheDir}, log: cfg.Logger,
		destroyed: map[string]bool{}, inits: make(chan *initProc, initPoolSize), restoreHooks: hooks,
		agents: agents, agentBin: agentBin, spawner: &spawner{bin: agentBin}}
	r.refillInits()
	return r, nil
}

// Dir returns the host directory of sandbox id.
func (r *Runtime) Dir(id string) string { return filepath.Join(r.dir, id) }

// SocketPath returns the host path of the agent socket of a sandbox.
func SocketPath(info *Info) string { return filepath.Join(runDirOf(info), wire.SocketName) }

// runDirOf is the host path of a sandbox's run dir.
func runDirOf(info *Info) string {
	if info.RunDir != "" {
		return info.RunDir
	}
	return filepath.Join(info.Dir, "run")
}

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
	var initProcess *os.Process
	ok := false // set just before the one successful return
	defer r.refillInits()
	defer func() {
		// On every other way out, a panic included, undo what was done:
		// the init first, whose copies of the sandbox's mounts would keep
		// their directories busy.
		if !ok {
			if initProcess != nil {
				_ = initProcess.Kill()
				_, _ = initProcess.Wait()
			}
			if cerr := undo.run(); cerr != nil {
				r.log.Error("unwinding failed sandbox create", "sandbox", spec.ID, "err", cerr)
			}
		}
	}()

	// The first process: new namespaces (its user namespace mapped to an id
	// range), waiting for its config on fd 3. It comes first because the
	// root's idmapped layers need its user namespace.
	z, err := r.takeInit(spec.UIDBase)
	if err != nil {
		return nil, err
	}
	cfgW, statR := z.cfgW, z.statR
	defer cfgW.Close()
	defer statR.Close()
	initProcess = z.proc
	undo.add(func() error { r.cfg.IDs.Unpin(z.base); return nil })
	info.UIDBase = z.base
	step("start")
	pid := z.proc.Pid
	info.PID = pid
	if info.PIDStart, err = pidStartTime(pid); err != nil {
		return nil, err
	}
	nsFile, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		return nil, fmt.Errorf("user namespace of the sandbox init: %w", err)
	}
	rootfs, runDir, binds, err := r.prepareRoot(ctx, spec, info, int(nsFile.Fd()), &undo)
	nsFile.Close()
	if err != nil {
		return nil, err
	}
	// The init was started ahead of need, in a copy of the host's mount
	// table made before this sandbox's mounts existed: clones of them are
	// attached in its mount namespace, at the same paths (the run dir, a
	// subdirectory of the disk mount, at <dir>/run-mnt).
	runMnt := filepath.Join(r.Dir(spec.ID), "run-mnt")
	if err := os.Mkdir(runMnt, 0o711); err != nil {
		return nil, err
	}
	attach := []mountAttach{{rootfs, rootfs}, {runDir, runMnt}}
	for _, b := range binds {
		attach = append(attach, mountAttach{b.Source, b.Source})
	}
	if err := attachMounts(pid, attach); err != nil {
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
		link, err := r.cfg.Net.Attach(ctx, spec.ID, pid, spec.Egress)
		if err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
		info.Link = link
	}
	step("network")
	icfg := sandboxinit.Config{RootFS: rootfs, Hostname: spec.Hostname, Binary: r.agentBin, RunDir: runMnt, Binds: binds,
		NoFile: spec.Limits.NoFile}
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
	protectAgent(info.PID, r.log)
	go r.reap(spec.ID, func() string {
		return exitReason(z.proc.Wait())
	})
	ok = true
	return info, nil
}

// initProc is a sandbox's first process, started ahead of need: it sits in
// fresh namespaces, blocked reading its config, having paid the Go runtime's
// start (~20 ms for this binary) already.
type initProc struct {
	proc  *os.Process // the daemon's child
	cfgW  *os.File    // its fd 3
	statR *os.File    // its fd 4
	base  uint32      // its user namespace's id range (pinned while it lives)
}

// initPoolSize is how many started init processes the runtime keeps ready.
const initPoolSize = 2

// startInit starts an init in new namespaces whose user namespace maps the
// id range at base (a new range when base is 0).
func (r *Runtime) startInit(base uint32) (z *initProc, err error) {
	if base == 0 {
		if base, err = r.cfg.IDs.Alloc(); err != nil {
			return nil, err
		}
	} else if err := r.cfg.IDs.Pin(base); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.cfg.IDs.Unpin(base)
		}
	}()
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
	proc, err := r.spawner.spawnInit(base, cfgR, statW)
	cfgR.Close()
	statW.Close()
	if err != nil {
		cfgW.Close()
		statR.Close()
		return nil, err
	}
	return &initProc{proc: proc, cfgW: cfgW, statR: statR, base: base}, nil
}

// takeInit hands out a ready init process, or starts one if none is ready,
// and refills the pool in the background. A sandbox that must have a given
// id range (base != 0: a cold boot from a filesystem snapshot of a lineage)
// gets an init started for it.
func (r *Runtime) takeInit(base uint32) (*initProc, error) {
	if base != 0 {
		return r.startInit(base)
	}
	// The pool refills once the create is done (Create calls refillInits
	// on its way out): starting an init costs a process start's CPU, which
	// would otherwise compete with this create's own steps.
	select {
	case z := <-r.inits:
		// One that died meanwhile (killed from outside) is replaced.
		if z.proc.Signal(syscall.Signal(0)) == nil {
			return z, nil
		}
		z.discard(r.cfg.IDs)
	default:
	}
	return r.startInit(0)
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
			z, err := r.startInit(0)
			if err != nil {
				r.log.Warn("pre-start sandbox init", "err", err)
				return
			}
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if closed {
				z.discard(r.cfg.IDs)
				return
			}
			select {
			case r.inits <- z:
			default:
				z.discard(r.cfg.IDs)
				return
			}
		}
	}()
}

func (z *initProc) discard(ids *userns.Allocator) {
	z.cfgW.Close()
	z.statR.Close()
	_ = z.proc.Kill()
	_, _ = z.proc.Wait()
	ids.Unpin(z.base)
}

// execRootBase holds the exec roots of runtimes (one per sandboxes dir).
const execRootBase = "/run/forkbox"

// ensureExecRoot makes /run/forkbox/rt-<hash of dir>/sandboxes a bind of
// dir (idempotent: a restarted daemon finds it in place) and returns the exec
// root. Every directory on the way is searchable by others (0711), nothing
// in it readable; /run is a tmpfs, so a reboot, which ends every sandbox,
// empties it.
func ensureExecRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	root := filepath.Join(execRootBase, "rt-"+hex.EncodeToString(sum[:8]))
	bind := filepath.Join(root, "sandboxes")
	for _, d := range []string{execRootBase, root, bind} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return "", err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return "", err
		}
	}
	mounted, err := isMountPoint(bind)
	if err != nil {
		return "", err
	}
	if !mounted {
		if err := unix.Mount(abs, bind, "", unix.MS_BIND, ""); err != nil {
			return "", fmt.Errorf("bind %s at %s: %w", abs, bind, err)
		}
	}
	// Private: /run is usually a shared mount, and sandboxes' mounts made
	// under it would otherwise propagate into every mount namespace copied
	// from the host's (pre-started inits), which would keep them busy.
	if err := unix.Mount("", bind, "", unix.MS_PRIVATE, ""); err != nil {
		return "", fmt.Errorf("make %s private: %w", bind, err)
	}
	return root, nil
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
	err := errors.Join(unmount(r.dir), unmount(r.agents.live))
	if err == nil {
		os.Remove(filepath.Join(r.execRoot, "sandboxes"))
		os.Remove(filepath.Join(r.execRoot, "agent"))
		os.Remove(r.execRoot)
	}
	return errors.Join(err, unmount(r.cfg.Dir)) // a shared self-bind of older versions
}

// Close stops the pre-started init processes. Sandboxes keep running.
func (r *Runtime) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	defer r.spawner.close()
	for {
		select {
		case z := <-r.inits:
			z.discard(r.cfg.IDs)
		default:
			return
		}
	}
}

// prepareRoot makes the sandbox's directory, writable layer (filled from
// spec.FromFS when set), its layers idmapped with the sandbox's id range
// (usernsFd: a user namespace with that mapping), the overlay root, the
// idmapped clones of the image's host binds and the agent's run dir and
// config, registering the undo of each step. It sets info.RunDir.
func (r *Runtime) prepareRoot(ctx context.Context, spec Spec, info *Info, usernsFd int, undo *cleanup) (rootfs, runDir string, binds []sandboxinit.Bind, err error) {
	dir := r.Dir(spec.ID)
	base := info.UIDBase
	root := int(base) // the sandbox's root, as a host id
	// Searchable (not readable) by others: the sandbox's init, the
	// sandbox's root in its user namespace, binds its root and run dir from
	// here before it pivots; nothing in it is readable by other ids.
	if err := os.Mkdir(dir, 0o711); err != nil {
		return "", "", nil, fmt.Errorf("sandbox dir: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil { // past the umask
		return "", "", nil, err
	}
	undo.add(func() error { return os.RemoveAll(dir) })

	// Writable layer: ext4 of disk_mb, then the overlay root. Its upper
	// dir is the root directory of the sandbox: owned by the sandbox's root.
	undo.add(func() error { return unmount(filepath.Join(dir, "disk")) })
	if err := mountDisk(r.disks, dir, spec.DiskMB); err != nil {
		return "", "", nil, fmt.Errorf("writable layer: %w", err)
	}
	upper := filepath.Join(dir, "disk", "upper")
	if spec.FromFS != "" {
		if err := importFS(ctx, spec.FromFS, upper); err != nil {
			return "", "", nil, err
		}
		// An archive of another range (or of canonical ids, from before
		// user namespaces: FromFSBase 0) moves into this one.
		if err := shiftOwners(upper, spec.FromFSBase, base); err != nil {
			return "", "", nil, err
		}
	}
	if err := os.Chown(upper, root, root); err != nil {
		return "", "", nil, err
	}

	// The agent's run dir lives on the sandbox's own disk, so what the
	// sandbox sees of its mount names no host path; the agent (the
	// sandbox's root) creates its socket there.
	runDir = filepath.Join(dir, "disk", "run")
	if err := os.Mkdir(runDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", "", nil, err
	}
	if err := os.Chown(runDir, root, root); err != nil {
		return "", "", nil, err
	}
	info.RunDir = runDir

	// The image's layers, each an idmapped clone at lower/<i>: canonical
	// ids on disk, the sandbox's range inside.
	var lowers []string
	for i, l := range spec.Image.LowerDirs {
		p := filepath.Join(dir, "lower", strconv.Itoa(i))
		if err := os.MkdirAll(p, 0o700); err != nil {
			return "", "", nil, err
		}
		undo.add(func() error { return unmount(p) })
		if err := idmapClone(l, p, usernsFd, false); err != nil {
			return "", "", nil, fmt.Errorf("image layer: %w", err)
		}
		lowers = append(lowers, filepath.Join("lower", strconv.Itoa(i)))
	}
	rootfs = filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return "", "", nil, err
	}
	rootDir := rootfs // not the named result, which a failed return empties
	undo.add(func() error { return unmount(rootDir) })
	opts, err := overlayOptions(lowers, "disk")
	if err != nil {
		return "", "", nil, err
	}
	if err := inDir(dir, func() error {
		return unix.Mount("overlay", "rootfs", "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
	}); err != nil {
		return "", "", nil, fmt.Errorf("mount overlay root: %w", err)
	}
	// The layer clones stay attached until Destroy: the overlay holds
	// private clones of its own, but unmounting them here would put an RCU
	// grace period per layer on the create path.

	// The image's read-only host binds (the host image's /usr), idmapped
	// too so that their files show their real owners inside.
	for i, b := range spec.Image.Binds {
		p := filepath.Join(dir, "binds", strconv.Itoa(i))
		st, err := os.Stat(b.Source)
		if err != nil {
			return "", "", nil, fmt.Errorf("image bind %s: %w", b.Source, err)
		}
		// Searchable by the sandbox's init, which binds it from here.
		if err := os.MkdirAll(filepath.Dir(p), 0o711); err != nil {
			return "", "", nil, err
		}
		if err := os.Chmod(filepath.Dir(p), 0o711); err != nil {
			return "", "", nil, err
		}
		if st.IsDir() {
			err = os.Mkdir(p, 0o755)
		} else {
			err = os.WriteFile(p, nil, 0o444)
		}
		if err != nil {
			return "", "", nil, err
		}
		undo.add(func() error { return unmount(p) })
		if err := idmapClone(b.Source, p, usernsFd, !b.ReadOnly); err != nil {
			return "", "", nil, fmt.Errorf("image bind: %w", err)
		}
		binds = append(binds, sandboxinit.Bind{Source: p, Target: b.Target, ReadOnly: b.ReadOnly})
	}

	// The agent's config, read by the agent at start.
	acfg := wire.Config{
		SandboxID: spec.ID,
		UID:       spec.Image.UID,
		GID:       spec.Image.GID,
		WorkDir:   spec.Image.WorkDir,
		Env:       wire.MergeEnv(spec.Image.Env, spec.Env),
		Build:     spec.Build,
	}
	cfgPath := filepath.Join(runDir, wire.ConfigName)
	if err := writeJSON(cfgPath, acfg); err != nil {
		return "", "", nil, err
	}
	if err := os.Chown(cfgPath, root, root); err != nil {
		return "", "", nil, err
	}
	if spec.AllowInternet {
		// Name resolution for sandboxes that may reach the network,
		// written without following what the image has at that name.
		if r.cfg.Net == nil {
			return "", "", nil, errors.New("runtime has no network manager")
		}
		if err := writeInRoot(rootfs, "etc/resolv.conf", netsetup.SandboxResolvConf(r.cfg.Net.ResolverAddr()), 0o644, root, root); err != nil {
			return "", "", nil, fmt.Errorf("write resolv.conf: %w", err)
		}
	}
	return rootfs, runDir, binds, nil
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

func exitReason(ps *os.ProcessState, err error) string {
	if ps != nil && !ps.Success() {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "sandbox init was killed (" + unix.SignalName(ws.Signal()) + ")"
		}
		return fmt.Sprintf("sandbox init exited with status %d", ps.ExitCode())
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
	if err := r.adopt(id, info, true); err != nil {
		return err
	}
	// Its policy chain is rewritten and its resolver started again (the
	// last daemon's went with it).
	if info.Link != nil && r.cfg.Net != nil {
		if err := r.cfg.Net.Adopt(id, info.Link); err != nil {
			r.log.Warn("network of an adopted sandbox", "sandbox", id, "err", err)
		}
	}
	// A sandbox from before the device allow-list gets it now; one that has
	// it is left as is.
	if err := applyDeviceRules(newCgroups(r.cfg.CgroupParent, id).paths); err != nil {
		r.log.Warn("device allow-list of an adopted sandbox", "sandbox", id, "err", err)
	}
	return nil
}

// adopt watches a sandbox's init; pin holds its id range (a restore holds it
// already).
func (r *Runtime) adopt(id string, info *Info, pin bool) error {
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
	if pin && info.UIDBase != 0 {
		// Held for as long as it runs, as Create and restores do.
		if err := r.cfg.IDs.Pin(info.UIDBase); err != nil {
			unix.Close(pidfd)
			return err
		}
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
	// A frozen cgroup's processes do not die (v1's freezer holds even
	// SIGKILL) until thawed: one a crashed daemon left frozen mid-dump,
	// say.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	if err := cg.thaw(tctx); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("thaw a sandbox before destroying it", "sandbox", id, "err", err)
	}
	cancel()
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
	for _, sub := range []string{"binds", "lower"} {
		ents, _ := os.ReadDir(filepath.Join(dir, sub))
		for _, e := range ents {
			if err := unmount(filepath.Join(dir, sub, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := unmount(filepath.Join(dir, "disk")); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && info.UIDBase != 0 {
		r.cfg.IDs.Unpin(info.UIDBase)
	}
	return errors.Join(errs...)
}

// Usage reads a sandbox's resource use.
func (r *Runtime) Usage(id string) Usage {
	u := newCgroups(r.cfg.CgroupParent, id).stats()
	u.DiskUsedBytes = r.diskUsed(id)
	return u
}

// SetHostname renames a running sandbox (its UTS namespace): a warm pool's
// sandbox takes the name it is handed out under.
func (r *Runtime) SetHostname(id string, info *Info, name string) error {
	if info == nil || info.PID <= 0 {
		return fmt.Errorf("sandbox %s: no init process to rename", id)
	}
	return setHostname(info.PID, name)
}

// OOMKills is how many of a sandbox's processes the kernel has killed for
// memory: Usage's OOMKills alone, for a caller that checks it around each
// exec.
func (r *Runtime) OOMKills(id string) int64 {
	return newCgroups(r.cfg.CgroupParent, id).oomKills()
}

// SetEgress applies egress policy p to running sandbox id (info as Create
// returned it; its Link records the policy, for the caller to persist).
func (r *Runtime) SetEgress(id string, info *Info, p netsetup.Policy) error {
	if r.cfg.Net == nil || info.Link == nil {
		return errdefs.FailedPrecondition("sandbox %s has no internet access to apply a network policy to", id)
	}
	return r.cfg.Net.SetPolicy(id, info.Link, p)
}

// SandboxDirs lists the sandbox directories on disk (for startup cleanup of
// sandboxes the metadata store does not know).
func (r *Runtime) SandboxDirs() ([]string, error) {
	ents, err := os.ReadDir(r.dir)
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

// protectAgent keeps the OOM killer off a sandbox's agent (PID 1 of the
// sandbox, which cannot do it itself from inside its user namespace). Some
// hosts deny it even to root (no CAP_SYS_RESOURCE); then the agent's user
// processes still go first (the agent starts them at +500).
func protectAgent(pid int, log *slog.Logger) {
	if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("-1000"), 0); err != nil {
		log.Debug("protect the sandbox agent from the OOM killer", "pid", pid, "err", err)
	}
}

// hostInotify are the least per-user inotify limits of the host's root that
// forkbox needs: each sandbox's inotify instances and watches also count
// against root's (the owner of sandboxes' user namespaces), so the host's
// defaults (128 instances here) would let one sandbox at its share
// (userLimits) take them all. Raised, never lowered, at start.
var hostInotify = map[string]int{
	"/proc/sys/fs/inotify/max_user_instances": 64 * sandboxinit.InotifyInstances,
	"/proc/sys/fs/inotify/max_user_watches":   64 * sandboxinit.InotifyWatches,
}

func raiseHostLimits(log *slog.Logger) {
	for p, want := range hostInotify {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		have, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || have >= want {
			continue
		}
		if err := os.WriteFile(p, []byte(strconv.Itoa(want)), 0); err != nil {
			log.Warn("raise a host limit that sandboxes share", "sysctl", p, "have", have, "want", want, "err", err)
			continue
		}
		log.Info("raised a host limit that sandboxes share", "sysctl", p, "from", have, "to", want)
	}
}
