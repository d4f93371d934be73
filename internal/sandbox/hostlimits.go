package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// Host bounds: the largest limits one sandbox may have, derived in this one
// place from what the host has. A sandbox's cgroup bounds its own CPU,
// memory and processes, but some tables are the whole host's: the kernel's
// PIDs (and threads) and its open-file table. A sandbox that filled one
// would stop every other sandbox and every host account from starting a
// program or opening a file. So each is shared out here: one sandbox gets
// at most a quarter of a table. Whatever it does, three quarters stay for
// the host (the daemon, sshd, the operators' shells) and the other
// sandboxes: two more at their own ceiling still leave the host a quarter.
// (Sandboxes are not summed: many at their ceiling at once could still
// fill a table, as they could overcommit memory.) Memory, CPUs and disk are
// bounded by what the host has, minus a reserve for the host itself.

const (
	// tableShare: one sandbox may take at most 1/tableShare of a host-wide
	// table (PIDs, threads, open files).
	tableShare = 4
	// minNoFile is the smallest per-process open-file limit a sandbox gets:
	// macOS's default soft limit, under which everyday software (Python,
	// Jupyter kernels, pip, compilers) runs. It caps pids_limit: a sandbox
	// may have only as many processes as can each keep minNoFile files open
	// within its share of the file table.
	minNoFile = 256
	// diskImage is the sparse file that holds a running sandbox's writable
	// layer, in its runtime directory (runtime.Info.Dir; see the runtime's
	// package doc). Its allocated blocks are what the sandbox already took
	// of the filesystem.
	diskImage = "disk.img"
)

// HostInfo is what a host has: the numbers the bounds derive from. A zero
// field is unknown, and bounds nothing.
type HostInfo struct {
	FileMax    int64 // /proc/sys/fs/file-max: open files, host-wide
	NrOpen     int64 // /proc/sys/fs/nr_open: the largest RLIMIT_NOFILE the kernel takes
	NoFileHard int64 // the daemon's own hard RLIMIT_NOFILE, which sandboxes inherit and cannot exceed
	PIDMax     int64 // /proc/sys/kernel/pid_max: every thread takes a PID
	ThreadsMax int64 // /proc/sys/kernel/threads-max
	MemTotalMB int64 // MemTotal of /proc/meminfo, in MiB
	CPUs       int   // CPUs the daemon may run on (its affinity, which a cpuset narrows)
	// DiskTotalMB and DiskFreeMB describe the filesystem of the sandboxes'
	// disks: its size, and what is free for unprivileged use (f_bavail).
	DiskTotalMB int64
	DiskFreeMB  int64
}

// HostBounds are the largest limits one sandbox may have on a host (zero:
// unbounded, the host did not say).
type HostBounds struct {
	// PIDs bounds pids_limit: a quarter of the smaller of pid_max and
	// threads-max (the pids cgroup counts threads, and each takes a PID),
	// and no more than Files/minNoFile.
	PIDs int64
	// Files is one sandbox's share of the host's open-file table, a
	// quarter of file-max: its pids_limit × NoFile stays within it.
	Files int64
	// NoFileMax is the largest per-process open-file limit the runtime can
	// give (nr_open, and the daemon's own hard limit, which it can lower
	// but not raise).
	NoFileMax int64
	// MemoryMB bounds memory_mb: MemTotal minus MemReserveMB.
	MemoryMB     int64
	MemReserveMB int64
	// CPUs bounds cpus: a quota above the CPUs there are gives nothing.
	CPUs float64
	// DiskReserveMB of the sandboxes' filesystem is never promised to
	// sandboxes (see diskRoom).
	DiskReserveMB int64
}

// ComputeBounds derives the bounds from h.
func ComputeBounds(h HostInfo) HostBounds {
	var b HostBounds
	table := h.PIDMax
	if h.ThreadsMax > 0 && (table == 0 || h.ThreadsMax < table) {
		table = h.ThreadsMax
	}
	// A known table gives a bound of at least 1 (which refuses every
	// sandbox on an absurdly small host) rather than 0, which means none.
	if table > 0 {
		b.PIDs = max(table/tableShare, 1)
	}
	if h.FileMax > 0 {
		b.Files = max(h.FileMax/tableShare, 1)
		if byFiles := max(b.Files/minNoFile, 1); b.PIDs == 0 || byFiles < b.PIDs {
			b.PIDs = byFiles
		}
	}
	for _, v := range []int64{h.NrOpen, h.NoFileHard} {
		if v > 0 && (b.NoFileMax == 0 || v < b.NoFileMax) {
			b.NoFileMax = v
		}
	}
	if h.MemTotalMB > 0 {
		// The kernel's own memory (page tables, slab not charged to a
		// cgroup), the daemon and the host's services need some: a 16th
		// of memory, at least 1 GiB, but never more than a quarter of a
		// small host.
		b.MemReserveMB = min(max(1024, h.MemTotalMB/16), h.MemTotalMB/4)
		b.MemoryMB = h.MemTotalMB - b.MemReserveMB
	}
	b.CPUs = float64(h.CPUs)
	if h.DiskTotalMB > 0 {
		// Images, snapshots, suspend images, the metadata store and the
		// host's logs live on this filesystem too and must not meet a full
		// disk: a 20th of it, at least 1 GiB (a quarter of a small one).
		b.DiskReserveMB = min(max(1024, h.DiskTotalMB/20), h.DiskTotalMB/4)
	}
	return b
}

// NoFile is the per-process open-file limit of a sandbox of pids processes:
// its share of the file table spread over its processes, so that pids ×
// NoFile ≤ Files, but at least minNoFile (pids_limit is bounded so that
// this still holds) and at most NoFileMax. 0: the host did not say.
func (b HostBounds) NoFile(pids int64) int64 {
	n := b.NoFileMax
	if b.Files > 0 && pids > 0 {
		n = max(b.Files/pids, minNoFile)
		if b.NoFileMax > 0 {
			n = min(n, b.NoFileMax)
		}
	}
	return n
}

// ReadHostInfo reads this host's numbers; diskDir is a directory on the
// filesystem of the sandboxes' disks ("" for none). What cannot be read is
// left zero.
func ReadHostInfo(diskDir string) HostInfo {
	var h HostInfo
	h.FileMax = readProcInt("/proc/sys/fs/file-max")
	h.NrOpen = readProcInt("/proc/sys/fs/nr_open")
	h.PIDMax = readProcInt("/proc/sys/kernel/pid_max")
	h.ThreadsMax = readProcInt("/proc/sys/kernel/threads-max")
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Max != unix.RLIM_INFINITY && rl.Max < 1<<62 {
		h.NoFileHard = int64(rl.Max)
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		h.MemTotalMB = parseMemTotalMB(data)
	}
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		h.CPUs = set.Count()
	}
	if diskDir != "" {
		var st unix.Statfs_t
		if unix.Statfs(diskDir, &st) == nil {
			h.DiskTotalMB = int64(st.Blocks) * st.Bsize >> 20
			h.DiskFreeMB = int64(st.Bavail) * st.Bsize >> 20
		}
	}
	return h
}

// readProcInt reads a number from a one-number /proc file (0 if it cannot).
func readProcInt(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// parseMemTotalMB finds "MemTotal: N kB" in /proc/meminfo's text.
func parseMemTotalMB(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb >> 10
		}
	}
	return 0
}

// hostLimits is the Manager's view of its host: where the sandboxes'
// disks live, and the disks promised to creates under way.
type hostLimits struct {
	diskDir string                        // "" : disk_mb is bounded by nothing but its range
	read    func(diskDir string) HostInfo // ReadHostInfo; tests give fake hosts
	// heldMB returns the MiB a sandbox's disk image already takes of the
	// filesystem (0 when it has none); tests replace it.
	heldMB func(info *runtime.Info) int64
	// mu serializes disk admissions: the check and the promise are one
	// step, so two creates cannot both take the last free space.
	mu      sync.Mutex
	pending map[string]int64 // disk_mb of admitted creates, by sandbox id, until Create returns
}

// defaultHost serves Managers that were never told where their sandboxes'
// disks live (unit tests): the host's tables, memory and CPUs still bound.
var defaultHost = &hostLimits{read: ReadHostInfo, heldMB: diskImageMB}

// SetSandboxesDir tells the Manager the directory that holds its sandboxes'
// disks, whose filesystem's free space bounds disk_mb. Call before Start.
func (m *Manager) SetSandboxesDir(dir string) {
	m.host = &hostLimits{diskDir: dir, read: ReadHostInfo, heldMB: diskImageMB}
}

func (m *Manager) hostLimits() *hostLimits {
	if m.host != nil {
		return m.host
	}
	return defaultHost
}

// diskImageMB is the space a sandbox's disk image takes on the host now.
func diskImageMB(info *runtime.Info) int64 {
	if info == nil || info.Dir == "" {
		return 0
	}
	var st unix.Stat_t
	if unix.Stat(filepath.Join(info.Dir, diskImage), &st) != nil {
		return 0
	}
	return st.Blocks * 512 >> 20
}

// bounds reads the host now: file-max and friends can change at run time.
func (h *hostLimits) bounds() (HostInfo, HostBounds) {
	info := h.read(h.diskDir)
	return info, ComputeBounds(info)
}

// limits are the runtime limits of a sandbox of spec on this host, with
// the open-file limit that keeps it within its share of the file table. A
// pids_limit beyond the host's bound (a sandbox recorded by an older daemon,
// before bounds) is lowered to it, so no sandbox ever runs with more.
func (m *Manager) limits(spec store.Spec) runtime.Limits {
	_, b := m.hostLimits().bounds()
	pids := spec.PIDsLimit
	if b.PIDs > 0 && pids > b.PIDs {
		m.log.Warn("pids_limit beyond this host's bound; lowered", "pids_limit", pids, "bound", b.PIDs)
		pids = b.PIDs
	}
	return runtime.Limits{CPUs: spec.CPUs, MemoryMB: spec.MemoryMB, PIDs: pids, NoFile: b.NoFile(pids)}
}

// ClampToHost returns l (the limits of image builds' sandboxes, which the
// daemon itself starts) with its PIDs within this host's bound and the
// open-file limit that goes with them.
func ClampToHost(l runtime.Limits) runtime.Limits {
	b := ComputeBounds(ReadHostInfo(""))
	if b.PIDs > 0 && l.PIDs > b.PIDs {
		l.PIDs = b.PIDs
	}
	l.NoFile = b.NoFile(l.PIDs)
	return l
}

// checkHost refuses (invalid_argument, naming the field, the value and the
// host's bound) the limits of spec that this host could never give one
// sandbox, every such limit in one message ("memory_mb: …; cpus: …"), and
// lowers those that nobody asked for to the bound. from says where the
// values came from, for the message ("" for the request).
func checkHost(spec *store.Spec, info HostInfo, b HostBounds, asked func(field string) bool, from string) error {
	origin := ""
	if from != "" {
		origin = " (" + from + ")"
	}
	var refused []string
	if b.PIDs > 0 && spec.PIDsLimit > b.PIDs {
		if asked("pids_limit") {
			refused = append(refused, fmt.Sprintf("pids_limit: %d%s is more than this host can give one sandbox (pid_max %d, threads-max %d, file-max %d; at most %d for one sandbox)",
				spec.PIDsLimit, origin, info.PIDMax, info.ThreadsMax, info.FileMax, b.PIDs))
		} else {
			spec.PIDsLimit = b.PIDs
		}
	}
	if b.MemoryMB > 0 && spec.MemoryMB > b.MemoryMB {
		switch {
		case asked("memory_mb") && spec.MemoryMB > info.MemTotalMB:
			refused = append(refused, fmt.Sprintf("memory_mb: %d%s is more than this host has (%d MiB; at most %d for one sandbox)",
				spec.MemoryMB, origin, info.MemTotalMB, b.MemoryMB))
		case asked("memory_mb"):
			// Within MemTotal but into the host's reserve: "more than
			// this host has" would not be true.
			refused = append(refused, fmt.Sprintf("memory_mb: %d%s would leave too little of this host's %d MiB to the host itself (%d MiB stay for it; at most %d for one sandbox)",
				spec.MemoryMB, origin, info.MemTotalMB, b.MemReserveMB, b.MemoryMB))
		default:
			spec.MemoryMB = b.MemoryMB
		}
	}
	if b.CPUs > 0 && spec.CPUs > b.CPUs {
		if asked("cpus") {
			refused = append(refused, fmt.Sprintf("cpus: %v%s is more than this host has (%d CPUs; at most %d for one sandbox)",
				spec.CPUs, origin, info.CPUs, info.CPUs))
		} else {
			spec.CPUs = b.CPUs
		}
	}
	if len(refused) > 0 {
		return errdefs.InvalidArgument("%s", strings.Join(refused, "; "))
	}
	return nil
}

// diskRoom is the state of the sandboxes' filesystem for a new disk.
type diskRoom struct {
	freeMB    int64 // free now (f_bavail)
	reserveMB int64 // never promised (HostBounds.DiskReserveMB)
	// heldMB is what live sandboxes' disk images already take: it comes
	// back when they are deleted.
	heldMB int64
	// promisedMB is what live sandboxes (and creates under way) may still
	// take: their disk_mb less what their disk image already holds. Disk
	// images are sparse and grow as sandboxes write, so this space is free
	// now but spoken for.
	promisedMB int64
	sandboxes  int // live sandboxes with a promise
}

// maxMB is the largest disk one sandbox could have here: all of the free
// space but the reserve, if every other sandbox were deleted.
func (r diskRoom) maxMB() int64 { return r.freeMB + r.heldMB - r.reserveMB }

// nowMB is the largest disk a new sandbox can be promised now.
func (r diskRoom) nowMB() int64 { return r.freeMB - r.reserveMB - r.promisedMB }

// checkDisk refuses a disk that could never fit (invalid_argument) or does
// not fit now (insufficient_storage).
func (r diskRoom) check(diskMB int64, from string) error {
	origin := ""
	if from != "" {
		origin = " (" + from + ")"
	}
	if diskMB > r.maxMB() {
		held := ""
		if r.heldMB > 0 {
			held = fmt.Sprintf(", %d MiB more held by live sandboxes' disks", r.heldMB)
		}
		return errdefs.InvalidArgument("disk_mb: %d%s is more than this host has (%d MiB free on the data dir's filesystem%s, %d MiB of it kept for the host; at most %d for one sandbox)",
			diskMB, origin, r.freeMB, held, r.reserveMB, max(r.maxMB(), 0))
	}
	if diskMB > r.nowMB() {
		return errdefs.InsufficientStorage("disk_mb: %d%s does not fit on this host now: the data dir's filesystem has %d MiB free, %d MiB of it kept for the host and %d MiB promised to the disks of %d live sandboxes (which grow as they write), leaving %d MiB; delete sandboxes or ask for less",
			diskMB, origin, r.freeMB, r.reserveMB, r.promisedMB, r.sandboxes, max(r.nowMB(), 0))
	}
	return nil
}

// liveStates are the states whose sandboxes hold a disk or are about to
// (those whose HoldsProcesses is true), each listed by its own query of the
// store. A suspended sandbox holds none (its writable layer is in its
// suspend image, which the free space already counts): a resume asks for
// its disk again (admitResume), so that a host keeps many more suspended
// sessions than it could run at once.
var liveStates = []api.SandboxState{api.StateCreating, api.StateRunning, api.StateSuspending, api.StateResuming}

// room measures the sandboxes' filesystem, counting the promises of the
// live sandboxes in the store and of the creates under way. The caller
// holds h.mu.
func (m *Manager) room(ctx context.Context, h *hostLimits, info HostInfo, b HostBounds) (diskRoom, error) {
	r := diskRoom{freeMB: info.DiskFreeMB, reserveMB: b.DiskReserveMB}
	for _, mb := range h.pending {
		r.promisedMB += mb
		r.sandboxes++
	}
	for _, state := range liveStates {
		// The host's room is every tenant's.
		list, err := m.store.List(tenant.Unscoped(ctx), store.ListFilter{State: state, Node: m.node})
		if err != nil {
			return r, err
		}
		for _, sb := range list {
			if _, ok := h.pending[sb.ID]; ok {
				continue // counted whole above while its create runs
			}
			var held int64
			if ri, err := runtime.UnmarshalInfo(sb.Runtime); err == nil && (state == api.StateRunning || state == api.StateSuspending) {
				held = h.heldMB(ri)
			}
			r.heldMB += held
			if p := sb.Spec.DiskMB - held; p > 0 {
				r.promisedMB += p
				r.sandboxes++
			}
		}
	}
	return r, nil
}

// admit checks the limits of a sandbox about to be created as id against
// the host (the spec of a restore comes from the snapshot snapshotID, which
// may have been taken on a bigger host) and promises its disk until
// release, which the caller calls when the create has ended (by then the
// sandbox's record is live, and counts, or it failed).
func (m *Manager) admit(ctx context.Context, id string, spec store.Spec, snapshotID string) (release func(), err error) {
	from := ""
	if snapshotID != "" {
		from = "from snapshot " + snapshotID
	}
	return m.admitAs(ctx, id, spec, from)
}

// admitResume is admit for the resume of suspended sandbox id: its disk
// must fit now. A resume that does not fit is insufficient_storage whatever
// the reason (the sandbox cannot ask for less); it stays suspended.
func (m *Manager) admitResume(ctx context.Context, id string, spec store.Spec) (release func(), err error) {
	release, err = m.admitAs(ctx, id, spec, "to resume "+id)
	switch {
	case err == nil:
		return release, nil
	case errors.Is(err, errdefs.ErrInvalidArgument):
		// Beyond what the host has now (checkHost): it cannot ask for less.
		return nil, errdefs.InsufficientStorage("%s; the sandbox stays suspended", err.Error())
	case errors.Is(err, errdefs.ErrInsufficientStorage):
		return nil, fmt.Errorf("%w; the sandbox stays suspended: resume it again once there is room", err)
	}
	return nil, err // the store, a cancellation: not the host's room
}

func (m *Manager) admitAs(ctx context.Context, id string, spec store.Spec, from string) (release func(), err error) {
	h := m.hostLimits()
	info, b := h.bounds()
	all := func(string) bool { return true }
	if err := checkHost(&spec, info, b, all, from); err != nil {
		return nil, err
	}
	if h.diskDir == "" || info.DiskTotalMB == 0 {
		return func() {}, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	r, err := m.room(ctx, h, info, b)
	if err != nil {
		return nil, err
	}
	if err := r.check(spec.DiskMB, from); err != nil {
		return nil, err
	}
	if h.pending == nil {
		h.pending = map[string]int64{}
	}
	h.pending[id] = spec.DiskMB
	return func() {
		h.mu.Lock()
		delete(h.pending, id)
		h.mu.Unlock()
	}, nil
}

// poolSpec is the spec of pool rec's sandboxes: its snapshot's, or the
// defaults; from says which, for messages.
func (m *Manager) poolSpec(ctx context.Context, rec store.Pool) (spec store.Spec, from string, err error) {
	if rec.SnapshotID == "" {
		return m.defaultSpec(), "", nil
	}
	sn, err := m.store.GetSnapshot(ctx, rec.SnapshotID)
	if err != nil {
		return spec, "", err
	}
	return sn.Spec, "from snapshot " + sn.ID, nil
}

// checkPool checks, at a pool's creation, that its sandboxes fit this
// host: each one's limits (those of its snapshot, or the defaults) (400),
// and rec.Size disks in the free space now (507).
func (m *Manager) checkPool(ctx context.Context, rec store.Pool) error {
	spec, from, err := m.poolSpec(ctx, rec)
	if err != nil {
		return err
	}
	h := m.hostLimits()
	info, b := h.bounds()
	if err := checkHost(&spec, info, b, func(string) bool { return true }, from); err != nil {
		return err
	}
	if h.diskDir == "" || info.DiskTotalMB == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	r, err := m.room(ctx, h, info, b)
	if err != nil {
		return err
	}
	if err := r.check(spec.DiskMB, from); err != nil {
		return err
	}
	if need := spec.DiskMB * int64(rec.Size); need > r.nowMB() {
		return errdefs.InsufficientStorage("size: a pool of %d sandboxes of disk_mb %d (%d MiB) does not fit on this host now: %d MiB of the data dir's filesystem can still be promised; delete sandboxes or make the pool smaller",
			rec.Size, spec.DiskMB, need, max(r.nowMB(), 0))
	}
	return nil
}

// defaultSpec is the spec of a create that sets nothing: the defaults,
// lowered to this host's bounds.
func (m *Manager) defaultSpec() store.Spec {
	d := m.defaults
	spec := store.Spec{CPUs: d.CPUs, MemoryMB: d.MemoryMB, DiskMB: d.DiskMB, PIDsLimit: d.PIDsLimit}
	info, b := m.hostLimits().bounds()
	checkHost(&spec, info, b, func(string) bool { return false }, "") // lowers, never refuses
	return spec
}

// validateHost checks the limits a create request sets against this host
// (invalid_argument for one it could never give) and lowers the defaults
// of those it does not set to what the host has.
func (m *Manager) validateHost(req *api.CreateSandboxRequest, spec *store.Spec) error {
	info, b := m.hostLimits().bounds()
	return checkHost(spec, info, b, func(field string) bool {
		switch field {
		case "cpus":
			return req.CPUs != nil
		case "memory_mb":
			return req.MemoryMB != nil
		case "pids_limit":
			return req.PIDsLimit != nil
		}
		return false
	}, "")
}
