package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forkbox/forkbox/internal/agent"
	"github.com/forkbox/forkbox/internal/criu"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/sandboxinit"
	"golang.org/x/sys/unix"
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
// ~100 ms replaying its configuration with the ip tools); an action script
// brings its loopback up before the sockets come back, and the daemon
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
		sandboxinit.Bind{Source: r.agentBin, Target: agent.Binary, ReadOnly: true},
		sandboxinit.Bind{Source: runDir, Target: agent.RunDir})
	return out
}

// writeCRIUAction writes the action script restores run (see above) into
// dir and returns its path.
func writeCRIUAction(dir string) (string, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return "", fmt.Errorf("nsenter (util-linux) is needed to restore memory snapshots: %w", err)
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
			if _, serr := os.Stat(p); serr == nil {
				ip, err = p, nil
				break
			}
		}
		if err != nil {
			return "", fmt.Errorf("ip (iproute2) is needed to restore memory snapshots: %w", err)
		}
	}
	// The user namespace CRIU made has the kernel's default limits: set
	// the sandbox's (userLimits) as the init of a new sandbox does.
	var limits []string
	for _, k := range slices.Sorted(maps.Keys(sandboxinit.UserLimits)) {
		limits = append(limits, fmt.Sprintf("if [ -e /proc/sys/user/%[1]s ]; then echo %[2]s > /proc/sys/user/%[1]s || exit 1; fi", k, sandboxinit.UserLimits[k]))
	}
	script := "#!/bin/sh\n" +
		"# Run by CRIU at each stage of a forkbox restore. The restored network\n" +
		"# namespace is empty: bring its loopback up before the sockets return.\n" +
		"# Once every process is back, and before any runs, give the restored\n" +
		"# user namespace the sandbox's limits (CRIU still makes namespaces\n" +
		"# until then).\n" +
		"case \"$CRTOOLS_SCRIPT_ACTION\" in\n" +
		"setup-namespaces) exec " + nsenter + " --target \"$CRTOOLS_INIT_PID\" --net " + ip + " link set lo up ;;\n" +
		"post-restore) exec " + nsenter + " --target \"$CRTOOLS_INIT_PID\" --user /bin/sh -c '" +
		strings.Join(limits, "; ") + "' ;;\n" +
		"esac\n"
	path := filepath.Join(dir, "criu-action.sh")
	if b, err := os.ReadFile(path); err == nil && string(b) == script {
		return path, nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(script), 0o700); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
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
	args := []string{"dump", "-t", strconv.Itoa(info.PID), "-D", dir, "-o", "dump.log", "-v2",
		"--leave-running", "--tcp-established", "--skip-in-flight", "--file-locks", "--ghost-limit", "64M",
		"--network-lock", "nftables", "--empty-ns", "net",
		"--manage-cgroups=ignore"}
	for i, m := range ext {
		args = append(args, "--external", fmt.Sprintf("mnt[%s]:%s", m.Target, mountKey(i)))
	}
	if fz := r.FreezerDir(id); fz != "" {
		args = append(args, "--freeze-cgroup", fz)
	}
	return runCRIU(ctx, h, dir, "dump.log", args, nil)
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

	pidFile := filepath.Join(dir, "restore.pid")
	logDir := dir
	args := []string{"restore", "-D", criuDir, "-W", logDir, "-o", "restore.log", "-v2", "-d",
		"--root", rootfs, "--pidfile", pidFile,
		"--tcp-established", "--file-locks", "--manage-cgroups=ignore", "--network-lock", "nftables",
		"--empty-ns", "net", "--action-script", r.criuAction}
	for i, m := range meta.Binds {
		src := m.Source
		switch {
		case m.Target == agent.Binary:
			// The version the processes were dumped with (a rebuilt
			// forkbox keeps it; see agents_linux.go).
			if src, err = r.agents.forLive(m.Source); err != nil {
				return nil, err
			}
		case m.Target == agent.RunDir:
			src = runDir
		default:
			for _, b := range binds {
				if b.Target == m.Target {
					src = b.Source
				}
			}
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
	if err := runCRIU(ctx, h, logDir, "restore.log", args, &criuJoin{cg: cg}); err != nil {
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
	if spec.AllowInternet {
		undo.add(func() error { return r.cfg.Net.Detach(spec.ID) })
		link, err := r.cfg.Net.Attach(ctx, spec.ID, info.PID)
		if err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
		info.Link = link
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
	protectAgent(info.PID, r.log)
	if err := r.adopt(spec.ID, info, false); err != nil {
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
	cg *cgroups
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
