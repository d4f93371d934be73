package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/internal/agent"
	"github.com/forkbox/forkbox/internal/criu"
	"github.com/forkbox/forkbox/internal/image"
	"golang.org/x/sys/unix"
)

// Memory snapshots: CRIU dumps a sandbox's whole process tree (the agent as
// PID 1, its kernels and every background process) with its mount, PID, IPC,
// UTS and cgroup namespaces, and restores it into a new sandbox: a new
// writable layer (from the snapshot's fs.tar) under a new overlay root, new
// cgroups, and a network namespace prepared before the restore. What lies
// outside a sandbox is declared external and mapped to the new sandbox's
// host paths at restore: the image's read-only binds, the agent binary, the
// run dir and the network namespace.

// criuMeta is stored next to the CRIU images: what the restore must map.
type criuMeta struct {
	Binds []initBind `json:"binds"`
}

// mountKey names an external mount in CRIU's images.
func mountKey(i int) string { return "fbxmnt" + strconv.Itoa(i) }

const netKey = "fbxnet"

// externalMounts lists the sandbox's mounts whose source is on the host.
func (r *Runtime) externalMounts(img []initBind, runDir string) []initBind {
	out := append([]initBind(nil), img...)
	out = append(out,
		initBind{Source: r.cfg.Binary, Target: agent.Binary, ReadOnly: true},
		initBind{Source: runDir, Target: agent.RunDir})
	return out
}

// CheckpointMemory dumps the processes of a running sandbox into dir (which
// must exist) and leaves them running. The caller has frozen the sandbox and
// taken its filesystem, and has closed every connection to its agent.
func (r *Runtime) CheckpointMemory(ctx context.Context, h *criu.Host, id string, info *Info, img *image.Image, dir string) error {
	var binds []initBind
	for _, b := range img.Binds {
		binds = append(binds, initBind{Source: b.Source, Target: b.Target, ReadOnly: b.ReadOnly})
	}
	nsIno, err := nsInode(info.PID, "net")
	if err != nil {
		return err
	}
	ext := r.externalMounts(binds, filepath.Join(info.Dir, "run"))
	meta, _ := json.Marshal(criuMeta{Binds: ext})
	if err := os.WriteFile(filepath.Join(dir, "forkbox.json"), meta, 0o600); err != nil {
		return err
	}
	args := []string{"dump", "-t", strconv.Itoa(info.PID), "-D", dir, "-o", "dump.log", "-v2",
		"--leave-running", "--tcp-established", "--skip-in-flight", "--file-locks", "--ghost-limit", "64M",
		"--network-lock", "nftables",
		"--manage-cgroups=ignore",
		"--external", fmt.Sprintf("net[%d]:%s", nsIno, netKey)}
	for i, m := range ext {
		args = append(args, "--external", fmt.Sprintf("mnt[%s]:%s", m.Target, mountKey(i)))
	}
	if fz := r.FreezerDir(id); fz != "" {
		args = append(args, "--freeze-cgroup", fz)
	}
	return runCRIU(ctx, h, dir, "dump.log", args, nil)
}

// RestoreMemory creates a new sandbox from a memory snapshot: the files of
// fsTar and the processes in criuDir. It returns when the restored agent
// answers.
func (r *Runtime) RestoreMemory(ctx context.Context, h *criu.Host, spec Spec, criuDir string) (info *Info, err error) {
	dir := r.Dir(spec.ID)
	info = &Info{Dir: dir, CgroupDir: r.cfg.CgroupParent}
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
	rootfs, runDir, err := r.prepareRoot(ctx, spec, &undo)
	if err != nil {
		return nil, err
	}
	cg := newCgroups(r.cfg.CgroupParent, spec.ID)
	undo.add(cg.remove)
	undo.add(func() error { return cg.kill(5 * time.Second) })
	if err := cg.create(spec.Limits); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}

	// The network namespace, made before the restore (CRIU would take
	// ~100 ms to make one): held by a sleeping process while it is set up.
	holder := exec.Command("/bin/sleep", "3600")
	holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Setsid: true}
	if err := holder.Start(); err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	if err := r.cfg.Net.LoopbackUp(holder.Process.Pid); err != nil {
		return nil, fmt.Errorf("loopback: %w", err)
	}
	if spec.AllowInternet {
		undo.add(func() error { return r.cfg.Net.Detach(spec.ID) })
		link, err := r.cfg.Net.Attach(ctx, spec.ID, holder.Process.Pid)
		if err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
		info.Link = link
	}
	netns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid))
	if err != nil {
		return nil, err
	}
	defer netns.Close()

	pidFile := filepath.Join(dir, "restore.pid")
	logDir := dir
	args := []string{"restore", "-D", criuDir, "-W", logDir, "-o", "restore.log", "-v2", "-d",
		"--root", rootfs, "--pidfile", pidFile,
		"--tcp-established", "--file-locks", "--manage-cgroups=ignore", "--network-lock", "nftables",
		"--inherit-fd", fmt.Sprintf("fd[3]:%s", netKey)}
	for i, m := range meta.Binds {
		src := m.Source
		switch m.Target {
		case agent.Binary:
			src = r.cfg.Binary
		case agent.RunDir:
			src = runDir
		}
		args = append(args, "--external", fmt.Sprintf("mnt[%s]:%s", mountKey(i), src))
	}
	undo.add(func() error {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
		return nil
	})
	if err := runCRIU(ctx, h, logDir, "restore.log", args, &criuJoin{cg: cg, extra: []*os.File{netns}}); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil, fmt.Errorf("restored init pid: %w", err)
	}
	if info.PID, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return nil, fmt.Errorf("restored init pid: %w", err)
	}
	if info.PIDStart, err = pidStartTime(info.PID); err != nil {
		return nil, err
	}
	c := agent.NewClient(SocketPath(info))
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
	if err := setHostname(info.PID, spec.Hostname); err != nil {
		return nil, err
	}
	if err := r.Adopt(ctx, spec.ID, info); err != nil {
		return nil, err
	}
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

// criuJoin puts the CRIU process into the sandbox's cgroups before it runs
// (a shell writes its own pid, then execs criu), so the restored tree lands
// there, and passes extra files from fd 3 on.
type criuJoin struct {
	cg    *cgroups
	extra []*os.File
}

func runCRIU(ctx context.Context, h *criu.Host, logDir, logName string, args []string, join *criuJoin) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if join != nil {
		script := `for f in $FBX_CGROUP_PROCS; do echo $$ > "$f" || exit 125; done; exec "$@"`
		var procs []string
		for _, d := range join.cg.paths {
			procs = append(procs, filepath.Join(d, "cgroup.procs"))
		}
		cmd = exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", script, "sh", h.Path}, args...)...)
		cmd.Env = append(append(os.Environ(), h.Env...), "FBX_CGROUP_PROCS="+strings.Join(procs, " "))
		cmd.ExtraFiles = join.extra
	} else {
		cmd = h.Command(ctx, args...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		logTail := tail(filepath.Join(logDir, logName), 12)
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("criu %s: %v: %s%s", args[0], err, strings.TrimSpace(out.String()), logTail)
	}
	return nil
}

// tail returns the last n error-ish lines of a CRIU log.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var keep []string
	for _, l := range lines {
		if strings.Contains(l, "Error") || strings.Contains(l, "err") || strings.Contains(l, "fail") {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		keep = lines
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return "\n" + strings.Join(keep, "\n")
}

// nsInode returns the inode of a process's namespace of kind.
func nsInode(pid int, kind string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/%s", pid, kind), &st); err != nil {
		return 0, fmt.Errorf("%s namespace of %d: %w", kind, pid, err)
	}
	return st.Ino, nil
}
