package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A daemon killed in the middle of a checkpoint, fork or suspend leaves
// what it was doing half done on the host: the sandbox's cgroup frozen (the
// daemon freezes it before CRIU dumps it, and thaws it after), and the CRIU
// process it had started still running, an orphan, with the sandbox's
// processes seized. Nothing inside a frozen sandbox answers, so the next
// daemon must undo both before it asks the sandbox's agent anything.
//
// Order matters: CRIU puts the freezer back in the state it found when it
// ends (frozen, since the daemon froze the sandbox first), so a thaw before
// an orphaned CRIU has ended would be undone. LeftoverCRIU comes first, then
// Recover per sandbox.

// leftoverCRIUKillWait is how long LeftoverCRIU waits for the orphans it
// killed to be gone.
const leftoverCRIUKillWait = 5 * time.Second

// LeftoverCRIU waits, up to wait, for the CRIU workers (`criu swrk`) that a
// daemon process which is gone left running on this data dir (they hold a
// file under it open: the images they dump or restore) to end, and kills
// those still running then. Workers of a live forkbox process (another
// daemon on this host, or this one) and of other data dirs are left alone,
// and so are `criu lazy-pages` processes, which serve the memory of
// running sandboxes. A ctx that ends (the daemon stopping) stops the wait
// and kills nothing. It returns the pids found and, of them, those it
// killed.
func (r *Runtime) LeftoverCRIU(ctx context.Context, wait time.Duration) (found, killed []int) {
	// The user namespace holders of restores cut short (idmapping a
	// restore's layers) serve nothing any more: they go at once.
	for _, h := range r.orphanedHolders() {
		if h.kill() {
			r.log.Info("killed the user namespace holder of a restore the previous daemon did not finish", "pid", h.pid)
		}
	}
	procs := orphanedCRIU(filepath.Dir(filepath.Clean(r.cfg.Dir)))
	for _, p := range procs {
		found = append(found, p.pid)
	}
	if len(found) == 0 {
		return nil, nil
	}
	r.log.Warn("CRIU workers of a daemon that is gone are still running; waiting for them to end before any sandbox is thawed",
		"pids", found, "wait", wait)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	left := waitGone(wctx, found)
	if ctx.Err() != nil {
		return found, nil
	}
	for _, p := range procs {
		if slices.Contains(left, p.pid) && p.kill() {
			killed = append(killed, p.pid)
		}
	}
	if len(killed) > 0 {
		r.log.Warn("killed CRIU workers that outlived the wait", "pids", killed)
		kctx, kcancel := context.WithTimeout(ctx, leftoverCRIUKillWait)
		defer kcancel()
		waitGone(kctx, killed)
	}
	return found, killed
}

// Recover readies sandbox id, which a previous daemon process left, for
// this one: a process still tracing the sandbox's processes (a CRIU dump
// cut short) is waited for until ctx ends and then killed, and a frozen
// cgroup is thawed. Call LeftoverCRIU first. It reports what it found; a
// sandbox with no cgroup left is not an error (the caller finds its
// processes gone).
func (r *Runtime) Recover(ctx context.Context, id string) (Recovered, error) {
	var rec Recovered
	cg := newCgroups(r.cfg.CgroupParent, id)
	pids, err := cg.pids()
	if errors.Is(err, os.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, err
	}
	seen := map[int]bool{}
	var tracers []proc
	for _, pid := range pids {
		if t := tracerOf(pid); t > 0 && t != os.Getpid() && !seen[t] {
			seen[t] = true
			if start, err := pidStartTime(t); err == nil {
				rec.Tracers = append(rec.Tracers, t)
				tracers = append(tracers, proc{pid: t, start: start})
			}
		}
	}
	if len(rec.Tracers) > 0 {
		r.log.Warn("a sandbox's processes are still traced by a process of a daemon that is gone; waiting for it",
			"sandbox", id, "tracers", rec.Tracers)
		left := waitGone(ctx, rec.Tracers)
		for _, t := range tracers {
			if slices.Contains(left, t.pid) {
				t.kill()
			}
		}
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leftoverCRIUKillWait)
		waitGone(kctx, rec.Tracers)
		cancel()
	}
	frozen, err := cg.frozen()
	if err != nil {
		return rec, err
	}
	if frozen {
		rec.Frozen = true
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := cg.thaw(tctx); err != nil {
			return rec, fmt.Errorf("thaw sandbox %s: %w", id, err)
		}
	}
	return rec, nil
}

// frozen reports whether the sandbox's cgroup is frozen or freezing: by
// the v1 freezer, or by cgroup2's cgroup.freeze.
func (cg *cgroups) frozen() (bool, error) {
	if d, ok := cg.paths["freezer"]; ok && !cg.v2 {
		b, err := os.ReadFile(filepath.Join(d, "freezer.state"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
		if s := strings.TrimSpace(string(b)); s == "FROZEN" || s == "FREEZING" {
			return true, nil
		}
	}
	if d, ok := cg.paths["unified"]; ok {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.freeze"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
		if strings.TrimSpace(string(b)) == "1" {
			return true, nil
		}
	}
	return false, nil
}

// thaw undoes every freeze of the sandbox's cgroup: the v1 freezer's and
// cgroup2's (a hybrid host has both; setFrozen uses the first).
func (cg *cgroups) thaw(ctx context.Context) error {
	var errs []error
	if d, ok := cg.paths["freezer"]; ok && !cg.v2 {
		if _, err := os.Stat(d); err == nil {
			errs = append(errs, (&cgroups{paths: map[string]string{"freezer": d}}).setFrozen(ctx, false))
		}
	}
	if d, ok := cg.paths["unified"]; ok {
		if b, err := os.ReadFile(filepath.Join(d, "cgroup.freeze")); err == nil && strings.TrimSpace(string(b)) == "1" {
			errs = append(errs, (&cgroups{v2: true, paths: map[string]string{"unified": d}}).setFrozen(ctx, false))
		}
	}
	return errors.Join(errs...)
}

// tracerOf is the pid tracing pid (0: none, or pid is gone).
func tracerOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "TracerPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// proc is a process as found: its pid and start time, so that a kill
// never reaches another process that reused the pid.
type proc struct {
	pid   int
	start uint64
}

// kill sends SIGKILL to p if p is still the process found; it reports
// whether it did.
func (p proc) kill() bool {
	if start, err := pidStartTime(p.pid); err != nil || start != p.start {
		return false
	}
	return unix.Kill(p.pid, unix.SIGKILL) == nil
}

// orphanedHolders lists the user namespace holders (`/bin/sleep 3600` in a
// user namespace mapping one of this daemon's id ranges) whose parent is
// not a forkbox process: the daemon that was restoring with them is gone.
func (r *Runtime) orphanedHolders() []proc {
	if r.cfg.IDs == nil {
		return nil
	}
	return scanProcs(func(pid int, argv []string, ppid int) bool {
		if len(argv) != 2 || argv[0] != "/bin/sleep" || argv[1] != "3600" || isForkbox(ppid) {
			return false
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/uid_map")
		f := strings.Fields(string(b))
		if err != nil || len(f) != 3 || f[0] != "0" {
			return false
		}
		base, err := strconv.ParseUint(f[1], 10, 32)
		return err == nil && r.cfg.IDs.Owns(uint32(base))
	})
}

// orphanedCRIU lists the `criu swrk` processes whose parent is not a
// forkbox process (the daemon that started them is gone) and that hold a
// file under dataDir open.
func orphanedCRIU(dataDir string) []proc {
	return scanProcs(func(pid int, argv []string, ppid int) bool {
		return len(argv) >= 2 && filepath.Base(argv[0]) == "criu" && argv[1] == "swrk" &&
			!isForkbox(ppid) && holdsFileUnder(pid, dataDir)
	})
}

// scanProcs lists the processes for which match (given the pid, its
// argv and its parent's pid) holds.
func scanProcs(match func(pid int, argv []string, ppid int) bool) []proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		argv := cmdline(pid)
		if len(argv) == 0 {
			continue
		}
		f, err := statFields(pid)
		if err != nil {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		start, err := strconv.ParseUint(f[19], 10, 64)
		if err != nil || !match(pid, argv, ppid) {
			continue
		}
		out = append(out, proc{pid: pid, start: start})
	}
	return out
}

// holdsFileUnder reports whether pid has a file or directory under dir
// open.
func holdsFileUnder(pid int, dir string) bool {
	fds := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(fds)
	if err != nil {
		return false
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && strings.HasPrefix(target, prefix) {
			return true
		}
	}
	return false
}

// isForkbox reports whether pid runs a forkbox binary (forkbox, or a
// renamed copy such as the benchmarks' forkbox-base).
func isForkbox(pid int) bool {
	argv := cmdline(pid)
	return len(argv) > 0 && strings.HasPrefix(filepath.Base(argv[0]), "forkbox")
}

func cmdline(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
}

// waitGone waits until every pid has exited (or is a zombie) or ctx ends,
// and returns those still running.
func waitGone(ctx context.Context, pids []int) []int {
	for {
		var left []int
		for _, pid := range pids {
			if state, err := pidState(pid); err == nil && state != "Z" && state != "X" {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return left
		case <-time.After(20 * time.Millisecond):
		}
	}
}
