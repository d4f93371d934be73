package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"github.com/forkbox/forkbox/internal/agent/client"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/criu"
	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/netsetup"
	"github.com/forkbox/forkbox/internal/sandboxinit"
	"github.com/forkbox/forkbox/internal/textcut"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// Memory snapshots: CRIU dumps a sandbox's whole process tree (the agent as
// PID 1, its kernels and every background process) with its user, mount,
// PID, IPC, UTS, network and cgroup namespaces, and restores it into a new
// sandbox of the same lineage: a new writable layer (from the snapshot's
// fs.tar) under a new overlay root, new cgroups, and a user namespace with
// the lineage's id range (CRIU makes it from the mapping it saved). What
// lies outside a sandbox is declared external and mapped to the new
// sandbox's host paths at restore: the image's read-only binds, the device
// nodes bound from the host's /dev, the agent binary and the run dir. The
// network namespace is restored empty (--empty-ns net: CRIU would spend
// ~100 ms replaying its configuration with the ip tools); the daemon brings
// its loopback up when CRIU notifies it, before the sockets come back, and
// attaches the veth of a sandbox with internet access afterwards.

// criuMeta is stored next to the CRIU images: what the restore must map.
type criuMeta struct {
	Binds []sandboxinit.Bind `json:"binds"`
}

// mountKey names an external mount in CRIU's images.
func mountKey(i int) string { return "fbxmnt" + strconv.Itoa(i) }

// externalMounts lists the sandbox's mounts whose source is on the host.
func (r *Runtime) externalMounts(img []sandboxinit.Bind, runDir string) []sandboxinit.Bind {
	out := append([]sandboxinit.Bind(nil), img...)
	for _, d := range sandboxinit.HostDevices {
		out = append(out, sandboxinit.Bind{Source: "/dev/" + d, Target: "/dev/" + d})
	}
	out = append(out,
		sandboxinit.Bind{Source: r.agentBin, Target: wire.Binary, ReadOnly: true},
		sandboxinit.Bind{Source: runDir, Target: wire.RunDir})
	return out
}

// restoreHooks answers CRIU's notifications during a restore, in process
// (no script per stage): the restored network namespace is empty, so its
// loopback comes up before the sockets return; once every process is back,
// and before any runs, the user namespace CRIU made (with the kernel's
// default limits) gets the sandbox's (sandboxinit.UserLimits), as the init
// of a new sandbox sets them.
type restoreHooks struct {
	loopbackUp func(pid int) error
	nsenter    string // nsenter (util-linux): the limits are written from inside the user namespace
	limits     string // the shell commands that write them
}

func newRestoreHooks(net *netsetup.Manager) (*restoreHooks, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, fmt.Errorf("nsenter (util-linux) is needed to restore memory snapshots: %w", err)
	}
	var limits []string
	for _, k := range slices.Sorted(maps.Keys(sandboxinit.UserLimits)) {
		limits = append(limits, fmt.Sprintf("if [ -e /proc/sys/user/%[1]s ]; then echo %[2]s > /proc/sys/user/%[1]s || exit 1; fi", k, sandboxinit.UserLimits[k]))
	}
	hk := &restoreHooks{nsenter: nsenter, limits: strings.Join(limits, "; ")}
	hk.loopbackUp = func(int) error { return errors.New("runtime has no network manager") }
	if net != nil {
		hk.loopbackUp = net.LoopbackUp
	}
	return hk, nil
}

func (hk *restoreHooks) notify(ctx context.Context) criu.Notify {
	return func(script string, pid int32) error {
		switch script {
		case "setup-namespaces":
			return hk.loopbackUp(int(pid))
		case "post-restore":
			// Writing /proc/sys/user takes CAP_SYS_RESOURCE in the
			// namespace, from inside it; a multi-threaded daemon cannot
			// enter a user namespace, a child can.
			out, err := exec.CommandContext(ctx, hk.nsenter, "--target", strconv.Itoa(int(pid)), "--user",
				"/bin/sh", "-c", hk.limits).CombinedOutput()
			if err != nil {
				return fmt.Errorf("user namespace limits: %v: %s", err, bytes.TrimSpace(out))
			}
		}
		return nil
	}
}

// CheckpointMemory dumps the processes of a running sandbox into dir (which
// must exist) and leaves them running. The caller has frozen the sandbox and
// taken its filesystem, and has closed every connection to its agent.
func (r *Runtime) CheckpointMemory(ctx context.Context, h *criu.Host, id string, info *Info, img *image.Image, dir string) error {
	if info.UIDBase == 0 {
		return fmt.Errorf("sandbox %s predates user namespaces; its memory cannot be checkpointed (restart it)", id)
	}
	var binds []sandboxinit.Bind
	for _, b := range img.Binds {
		binds = append(binds, sandboxinit.Bind{Source: b.Source, Target: b.Target, ReadOnly: b.ReadOnly})
	}
	ext := r.externalMounts(binds, runDirOf(info))
	meta, _ := json.Marshal(criuMeta{Binds: ext})
	if err := os.WriteFile(filepath.Join(dir, "forkbox.json"), meta, 0o600); err != nil {
		return err
	}
	imgDir, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer imgDir.Close()
	opts := &rpc.CriuOpts{
		Pid:               proto.Int32(int32(info.PID)),
		ImagesDirFd:       proto.Int32(int32(imgDir.Fd())),
		LogFile:           proto.String("dump.log"),
		LogLevel:          proto.Int32(2),
		LeaveRunning:      proto.Bool(true),
		TcpEstablished:    proto.Bool(true),
		TcpSkipInFlight:   proto.Bool(true),
		FileLocks:         proto.Bool(true),
		GhostLimit:        proto.Uint32(64 << 20),
		NetworkLock:       rpc.CriuNetworkLockMethod_NFTABLES.Enum(),
		EmptyNs:           proto.Uint32(unix.CLONE_NEWNET),
		ManageCgroupsMode: rpc.CriuCgMode_IGNORE.Enum(),
	}
	for i, m := range ext {
		opts.External = append(opts.External, fmt.Sprintf("mnt[%s]:%s", m.Target, mountKey(i)))
	}
	if fz := r.FreezerDir(id); fz != "" {
		opts.FreezeCgroup = proto.String(fz)
	}
	_, err = r.runCRIU(ctx, h, id, "CRIU could not dump the processes of sandbox "+id, rpc.CriuReqType_DUMP, opts,
		filepath.Join(dir, "dump.log"), nil, nil, false)
	if f := (*criu.Failure)(nil); errors.As(err, &f) && f.NoSpace() {
		// Numbers as of now: the caller removes what CRIU wrote.
		return diskspace.Full(dir, "a memory snapshot of sandbox "+id, r.SnapshotNeed(id, true), false, err)
	}
	return err
}

// RestoreMemory creates a new sandbox from a memory snapshot: the files of
// fsTar and the processes in criuDir, in the lineage's id range
// (spec.UIDBase). It returns when the restored agent answers.
func (r *Runtime) RestoreMemory(ctx context.Context, h *criu.Host, spec Spec, criuDir string) (info *Info, err error) {
	if spec.UIDBase == 0 {
		return nil, fmt.Errorf("the snapshot predates user namespaces and cannot be restored by this version; restore a newer one")
	}
	dir := r.Dir(spec.ID)
	info = &Info{Dir: dir, CgroupDir: r.cfg.CgroupParent, UIDBase: spec.UIDBase}
	var undo cleanup
	ok := false // set just before the one successful return
	defer func() {
		// On every other way out, a panic included, undo what was done.
		if !ok {
			if cerr := undo.run(); cerr != nil {
				r.log.Error("unwinding failed restore", "sandbox", spec.ID, "err", cerr)
			}
		}
	}()
	var meta criuMeta
	if b, err := os.ReadFile(filepath.Join(criuDir, "forkbox.json")); err != nil {
		return nil, fmt.Errorf("snapshot metadata: %w", err)
	} else if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("snapshot metadata: %w", err)
	}
	if err := r.cfg.IDs.Pin(spec.UIDBase); err != nil {
		return nil, err
	}
	undo.add(func() error { r.cfg.IDs.Unpin(spec.UIDBase); return nil })
	// CRIU makes the user namespace itself; the layers are idmapped with
	// a user namespace of the same mapping, made for the purpose.
	holder, err := r.newUsernsHolder(spec.UIDBase)
	if err != nil {
		return nil, err
	}
	rootfs, runDir, binds, err := r.prepareRoot(ctx, spec, info, int(holder.ns.Fd()), &undo)
	holder.close()
	if err != nil {
		return nil, err
	}
	cg := newCgroups(r.cfg.CgroupParent, spec.ID)
	undo.add(cg.remove)
	undo.add(func() error { return cg.kill(5 * time.Second) })
	if err := cg.create(spec.Limits); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}

	external := make([]string, 0, len(meta.Binds))
	for i, m := range meta.Binds {
		src := m.Source
		switch {
		case m.Target == wire.Binary:
			// The version the processes were dumped with (a rebuilt
			// forkbox keeps it; see agents_linux.go).
			if src, err = r.agents.forLive(m.Source); err != nil {
				return nil, err
			}
		case m.Target == wire.RunDir:
			src = runDir
		default:
			for _, b := range binds {
				if b.Target == m.Target {
					src = b.Source
				}
			}
		}
		external = append(external, fmt.Sprintf("mnt[%s]:%s", mountKey(i), src))
	}
	imgDir, err := os.Open(criuDir)
	if err != nil {
		return nil, fmt.Errorf("snapshot images: %w", err)
	}
	defer imgDir.Close()
	workDir, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer workDir.Close()
	opts := &rpc.CriuOpts{
		ImagesDirFd:       proto.Int32(int32(imgDir.Fd())),
		WorkDirFd:         proto.Int32(int32(workDir.Fd())),
		LogFile:           proto.String("restore.log"),
		LogLevel:          proto.Int32(2),
		Root:              proto.String(rootfs),
		TcpEstablished:    proto.Bool(true),
		FileLocks:         proto.Bool(true),
		ManageCgroupsMode: rpc.CriuCgMode_IGNORE.Enum(),
		NetworkLock:       rpc.CriuNetworkLockMethod_NFTABLES.Enum(),
		EmptyNs:           proto.Uint32(unix.CLONE_NEWNET),
		External:          external,
	}
	// Memory comes back lazily where the host allows (see the criu
	// package's lazy_linux.go): a lazy-pages process, in the sandbox's
	// cgroups like CRIU itself, fills it while the tree starts.
	start := time.Now()
	var lazy *criu.LazyPages
	if h.LazyPages {
		lctx, cancel := context.WithTimeout(ctx, criuTimeout)
		defer cancel()
		if lazy, err = h.StartLazyPages(lctx, criuDir, dir); err != nil {
			return nil, r.criuLogged(spec.ID, err)
		}
		undo.add(lazy.Kill)
		if err := cg.join(lazy.Pid()); err != nil {
			return nil, fmt.Errorf("criu lazy-pages into the sandbox's cgroups: %w", err)
		}
		opts.LazyPages = proto.Bool(true)
	}
	resp, err := r.runCRIU(ctx, h, spec.ID, "CRIU could not restore the processes of sandbox "+spec.ID, rpc.CriuReqType_RESTORE, opts,
		filepath.Join(dir, "restore.log"), cg, r.restoreHooks.notify, lazy != nil)
	if pid := resp.GetRestore().GetPid(); pid > 0 {
		undo.add(func() error { unix.Kill(int(pid), unix.SIGKILL); return nil })
	}
	if err != nil {
		return nil, err
	}
	restored := time.Since(start)
	info.PID = int(resp.GetRestore().GetPid())
	if info.PIDStart, err = pidStartTime(info.PID); err != nil {
		return nil, err
	}
	if spec.AllowInternet {
		undo.add(func() error { return r.cfg.Net.Detach(spec.ID) })
		link, err := r.cfg.Net.Attach(ctx, spec.ID, info.PID, spec.Egress)
		if err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
		info.Link = link
	}
	c := client.New(SocketPath(info))
	defer c.Close()
	hctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		if err := c.Health(hctx); err == nil {
			break
		} else if hctx.Err() != nil {
			return nil, fmt.Errorf("restored agent does not answer: %w", err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	answered := time.Since(start)
	if lazy != nil {
		// Not before every page is in: a checkpoint would miss the
		// pages still out, and the images may go once this returns.
		if err := lazy.Wait(ctx); err != nil {
			return nil, fmt.Errorf("restore's memory: %w", r.criuLogged(spec.ID, err))
		}
	}
	r.log.Debug("memory restore (ms since CRIU started)", "sandbox", spec.ID, "lazy", lazy != nil,
		"criu_done", restored.Milliseconds(), "agent_answered", answered.Milliseconds(), "pages_in", time.Since(start).Milliseconds())
	if err := setHostname(info.PID, spec.Hostname); err != nil {
		return nil, err
	}
	protectAgent(info.PID, r.log)
	if err := r.adopt(spec.ID, info, false); err != nil {
		return nil, err
	}
	info.LazyRestore = lazy != nil
	ok = true
	return info, nil
}

// setHostname renames a restored sandbox (its UTS namespace came back with
// the source's name). It enters the namespace on a thread of its own that
// is thrown away afterwards.
func setHostname(pid int, name string) error {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/uts", pid))
	if err != nil {
		return err
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWUTS); err != nil {
			errc <- fmt.Errorf("enter uts namespace: %w", err)
			return
		}
		errc <- unix.Sethostname([]byte(name))
	}()
	return <-errc
}

// criuTimeout bounds one CRIU dump or restore: a CRIU that hangs then
// fails instead of hanging its caller.
const criuTimeout = 2 * time.Minute

// runCRIU has CRIU do one request over its RPC socket, first moving CRIU
// into join (when not nil) so that a restored tree lands in the sandbox's
// cgroups, and answering its notifications with notify. A failure is a
// *criu.Failure saying what failed and why (the telling error of CRIU's
// log, criu.FailureReason), and what CRIU's log (logPath) said goes to the
// daemon's log, under sandbox id, never into the error.
func (r *Runtime) runCRIU(ctx context.Context, h *criu.Host, id, what string, typ rpc.CriuReqType, opts *rpc.CriuOpts, logPath string, join *cgroups, notify func(context.Context) criu.Notify, lazy bool) (*rpc.CriuResp, error) {
	ctx, cancel := context.WithTimeout(ctx, criuTimeout)
	defer cancel()
	sw, err := h.StartSwrk(ctx, lazy)
	if err != nil {
		return nil, err
	}
	if join != nil {
		if err := join.join(sw.Pid()); err != nil {
			sw.Close()
			return nil, fmt.Errorf("criu into the sandbox's cgroups: %w", err)
		}
	}
	var nt criu.Notify
	if notify != nil {
		nt = notify(ctx)
	}
	resp, err := sw.Do(typ, opts, nt)
	if cerr := sw.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil {
		return resp, nil
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	full, _ := os.ReadFile(logPath)
	f := &criu.Failure{What: what, Reason: err.Error(), Log: logText(full), Errno: int(resp.GetCrErrno()), Err: err}
	if line := noSpaceLine(full); line != "" && !diskspace.InOutput(f.Log) {
		f.Log += "\n" + line
	}
	// Why, in one line: the log's telling error, else CRIU's first error
	// (kept in memory by CRIU: there even when the log could not be
	// written, on a full disk say).
	reason := criu.FailureReason(full)
	if m := resp.GetCrErrmsg(); reason == "" && m != "" && !resp.GetSuccess() {
		reason = criu.Reason(m)
	}
	if reason != "" {
		f.Reason = reason
		if ctx.Err() != nil {
			f.Reason += " (" + ctx.Err().Error() + ")"
		}
	}
	// The sandbox manager retries a dump that met one of the agent's
	// connections, which an error of CRIU's log names (its telling one
	// may not).
	if typ == rpc.CriuReqType_DUMP && errorLineWith(full, "Unix socket") && !strings.Contains(f.Reason, "Unix socket") {
		f.Reason = "a Unix socket in the sandbox is connected to a peer outside it (" + f.Reason + ")"
	}
	return resp, r.criuLogged(id, f)
}

// criuLogged logs what CRIU's log said about err, a *criu.Failure (other
// errors carry no log), under sandbox id, and returns err: the error a
// client sees is short, and the detail is in the daemon's log.
func (r *Runtime) criuLogged(id string, err error) error {
	var f *criu.Failure
	if !errors.As(err, &f) {
		return err
	}
	level := slog.LevelError
	if f.NoSpace() {
		level = slog.LevelWarn // the disk's state, not CRIU's failing: the caller answers 507
	}
	r.log.Log(context.Background(), level, "CRIU failed", "sandbox", id, "err", f.Error(), "errno", f.Errno, "criu_log", f.Log)
	return err
}

// maxLogText bounds the CRIU log a failure carries to the daemon's log (at
// level 2 CRIU writes its errors and warnings only: a few lines).
const maxLogText = 16 << 10

// logText is a CRIU log for the daemon's log: its end, when it is long.
func logText(log []byte) string {
	return textcut.Suffix(strings.TrimSpace(string(log)), maxLogText)
}

// errorLineWith says whether an error line of a CRIU log holds s.
func errorLineWith(log []byte, s string) bool {
	for _, l := range strings.Split(string(log), "\n") {
		if strings.HasPrefix(l, "Error") && strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// noSpaceLine returns the first line of a CRIU log that reports a full
// disk, "" when none does.
func noSpaceLine(log []byte) string {
	for _, l := range strings.Split(string(log), "\n") {
		if diskspace.InOutput(l) {
			return l
		}
	}
	return ""
}
