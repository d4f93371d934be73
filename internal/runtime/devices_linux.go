package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	// Named so, because this package has a type called cgroups.
	runccgroups "github.com/opencontainers/cgroups"
	// Imported for its side effect: it fills in runccgroups.DevicesSetV2 with
	// runc's device-filter generator and loader.
	_ "github.com/opencontainers/cgroups/devices"
	devconfig "github.com/opencontainers/cgroups/devices/config"
	"golang.org/x/sys/unix"
)

// A sandbox may open only the devices below, and only to read and write:
// what a shell, Python and a terminal need. Everything else (block devices,
// /dev/mem, /dev/kmsg, loop devices, /dev/net/tun, fuse, …) fails with EPERM
// at open, whatever node a process reaches it through. Creating device
// nodes (the cgroup's "m" access) is never granted, not even for these, so a
// sandbox cannot make a node for a device it was not given; the sandbox's
// /dev therefore has to be populated with bind mounts of the host's nodes
// (which a user namespace requires anyway), not with mknod.
//
// The list is enforced by the v1 devices controller where that hierarchy
// exists, and by a BPF_CGROUP_DEVICE program on the sandbox's cgroup2
// directory (pure v2 hosts, and the unified tree of hybrid hosts, where a
// cgroup2 directory enforces BPF programs whatever controllers it has).
// Either one alone enforces the whole list; with both, a device must pass
// both.
var sandboxDevices = []sandboxDevice{
	{"null", 1, 3},
	{"zero", 1, 5},
	{"full", 1, 7},
	{"random", 1, 8},
	{"urandom", 1, 9},
	{"tty", 5, 0},
	{"ptmx", 5, 2},
	// Unix98 pty slaves (/dev/pts/N). Their major is 136 ("pts" in
	// /proc/devices); the minor is the pty's number, which the kernel
	// numbers past 255 within the same major, so any minor is allowed.
	{"pts/*", 136, anyMinor},
}

// sandboxDevice is one character device a sandbox may read and write.
type sandboxDevice struct {
	name         string // under /dev, for readers
	major, minor int64
}

// anyMinor in a sandboxDevice allows every minor of its major.
const anyMinor = -1

// sandboxDeviceAccess is what a sandbox may do with a listed device: read
// and write, never mknod.
const sandboxDeviceAccess = "rw"

// v1Rule is the device's line in the v1 controller's syntax, as written to
// devices.allow and as devices.list shows it ("c 1:3 rw", "c 136:* rw").
func (d sandboxDevice) v1Rule() string {
	minor := "*"
	if d.minor != anyMinor {
		minor = strconv.FormatInt(d.minor, 10)
	}
	return fmt.Sprintf("c %d:%s %s", d.major, minor, sandboxDeviceAccess)
}

// deviceRules is the list in runc's form, for its BPF program generator.
func deviceRules() []*devconfig.Rule {
	rules := make([]*devconfig.Rule, 0, len(sandboxDevices))
	for _, d := range sandboxDevices {
		minor := d.minor
		if minor == anyMinor {
			minor = devconfig.Wildcard
		}
		rules = append(rules, &devconfig.Rule{
			Type:        devconfig.CharDevice,
			Major:       d.major,
			Minor:       minor,
			Permissions: sandboxDeviceAccess,
			Allow:       true,
		})
	}
	return rules
}

// applyDeviceRules restricts a sandbox's devices: with the v1 devices
// controller where the host has it (paths["devices"]), else with a BPF
// program on the cgroup2 directory (paths["unified"]), with the map the
// cgroups type keeps. Call it
// after the directories exist and before the sandbox's first process joins
// them. It is idempotent: calling it again on a sandbox that already has the
// rules (a daemon adopting it after a restart) changes nothing and stacks
// nothing. It fails closed: if neither hierarchy is there, the sandbox would
// have every device, so it returns an error.
func applyDeviceRules(paths map[string]string) error {
	v1, hasV1 := paths["devices"]
	v2, hasV2 := paths["unified"]
	if !hasV1 && !hasV2 {
		return errors.New("no devices cgroup and no cgroup2 directory: cannot restrict the sandbox's devices")
	}
	// The v1 controller alone enforces the list where it exists (a hybrid
	// host): the BPF program, whose load costs milliseconds per create, is
	// for hosts without it (pure cgroup v2).
	if hasV1 {
		return setupDevicesV1(v1)
	}
	if hasV2 {
		return attachDeviceFilter(v2)
	}
	return nil
}

// setupDevicesV1 turns a sandbox's v1 devices cgroup (dir, already created)
// into an allow-list of sandboxDevices: "a" to devices.deny empties it and
// switches it to deny-by-default, then each device goes to devices.allow.
//
// v1 lets a cgroup allow only what its parent allows; forkbox's parent
// cgroup (<devices>/forkbox) is left as created, inheriting the root's
// "a *:* rwm", so every allow below is within it. Writing "a" to devices.deny
// is refused (EINVAL) while the cgroup has child cgroups; a sandbox's cgroup
// has none. If the cgroup already holds exactly this list (an adopted
// sandbox), nothing is written, so live processes see no change.
func setupDevicesV1(dir string) error {
	want := make([]string, 0, len(sandboxDevices))
	for _, d := range sandboxDevices {
		want = append(want, d.v1Rule())
	}
	if sameDeviceList(dir, want) {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "devices.deny"), []byte("a"), 0o644); err != nil {
		return fmt.Errorf("devices cgroup: deny all: %w", err)
	}
	// One rule per write(2), which is what the file takes, on one open file.
	f, err := os.OpenFile(filepath.Join(dir, "devices.allow"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("devices cgroup: %w", err)
	}
	for _, r := range want {
		if _, err := f.Write([]byte(r)); err != nil {
			f.Close()
			return fmt.Errorf("devices cgroup: allow %q: %w", r, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("devices cgroup: %w", err)
	}
	// The kernel normalises and merges rules; check that what it now holds is
	// the list, so that a rule it dropped or widened cannot pass unnoticed.
	if !sameDeviceList(dir, want) {
		got, _ := os.ReadFile(filepath.Join(dir, "devices.list"))
		return fmt.Errorf("devices cgroup %s holds %q after setup, want %q", dir, strings.TrimSpace(string(got)), want)
	}
	return nil
}

// sameDeviceList reports whether dir's devices.list is exactly want, in any
// order.
func sameDeviceList(dir string, want []string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "devices.list"))
	if err != nil {
		return false
	}
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	w := slices.Clone(want)
	slices.Sort(got)
	slices.Sort(w)
	return slices.Equal(got, w)
}

// deviceFilterMu serialises attaches, so that the RLIMIT_MEMLOCK each one
// saves is the daemon's own and not the raised one of another in flight.
var deviceFilterMu sync.Mutex

// attachDeviceFilter loads a BPF_CGROUP_DEVICE program implementing
// sandboxDevices and attaches it to cgroup2Dir, using runc's generator and
// loader (github.com/opencontainers/cgroups/devices) so that the program is
// the one runc and its users run in production.
//
// How it attaches, as runc does: with BPF_F_ALLOW_MULTI. A cgroup has one
// attach mode per program type, and systemd, which may put device programs
// of its own on the cgroups it manages, uses this one, so another mode would
// be refused there (EPERM). In this mode the cgroup's programs and those of
// its ancestors attached the same way all run, and an access is allowed only
// if every one allows it: a program attached below the sandbox's cgroup
// could narrow the list, never widen it. MULTI would stack one more program
// per call, so the loader first lists the cgroup's device programs: with
// exactly one, it swaps it for the new one atomically (BPF_F_REPLACE); with
// none, it just attaches; with several, it attaches the new one and then
// detaches the others. Calling this again on an adopted sandbox therefore
// leaves one program, never two, and at no moment none.
//
// Lifetime: a program attached with BPF_PROG_ATTACH (not a bpf_link) holds
// its own reference from the cgroup. The loader closes its fd on return; the
// program stays attached after the daemon exits and is freed when the
// cgroup is removed. Nothing is pinned in bpffs, so nothing leaks.
//
// The loader raises the process's RLIMIT_MEMLOCK to unlimited (needed for
// BPF maps and programs before kernel 5.11, which charged them to memlock).
// Processes forked from the daemon inherit its limits, sandbox inits
// included, so the daemon's limit is put back afterwards.
func attachDeviceFilter(cgroup2Dir string) error {
	if runccgroups.DevicesSetV2 == nil {
		return errors.New("device filter: runc's devices package is not linked in")
	}
	deviceFilterMu.Lock()
	defer deviceFilterMu.Unlock()
	var memlock unix.Rlimit
	memlockErr := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &memlock)
	err := runccgroups.DevicesSetV2(cgroup2Dir, &runccgroups.Resources{Devices: deviceRules()})
	if memlockErr == nil {
		_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &memlock)
	}
	if err != nil {
		return fmt.Errorf("device filter on %s: %w", cgroup2Dir, err)
	}
	// The loader returns nil without attaching anything when the daemon runs
	// inside a user namespace (it expects bpf(2) to be refused there); a
	// sandbox must not start with every device silently allowed.
	ids, err := attachedDeviceFilters(cgroup2Dir)
	if err != nil {
		return fmt.Errorf("device filter on %s: %w", cgroup2Dir, err)
	}
	if len(ids) == 0 {
		return fmt.Errorf("device filter on %s: no program attached after loading it", cgroup2Dir)
	}
	return nil
}

// attachedDeviceFilters returns the ids of the BPF_CGROUP_DEVICE programs
// attached directly to cgroup2Dir (not its ancestors').
func attachedDeviceFilters(cgroup2Dir string) ([]uint32, error) {
	fd, err := unix.Open(cgroup2Dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	// The whole bpf_attr layout for BPF_PROG_QUERY, up to the revision field
	// the kernel fills in: runc's loader passes it all because some 6.17+
	// kernels were reported to write that field whatever size is passed
	// (6.18 here does not), and it costs nothing.
	type progQueryAttr struct {
		targetFd        uint32
		attachType      uint32
		queryFlags      uint32
		attachFlags     uint32
		progIDs         uint64
		progCnt         uint32
		_               uint32
		progAttachFlags uint64
		linkIDs         uint64
		linkAttachFlags uint64
		revision        uint64
	}
	// A cgroup holds at most 64 programs of one attach type.
	ids := make([]uint32, 64)
	// The kernel gets the buffer's address as an integer: pin it so it
	// stays where it is and alive until the call returns.
	var pin goruntime.Pinner
	pin.Pin(&ids[0])
	defer pin.Unpin()
	attr := progQueryAttr{
		targetFd:   uint32(fd),
		attachType: uint32(unix.BPF_CGROUP_DEVICE),
		progIDs:    uint64(uintptr(unsafe.Pointer(&ids[0]))),
		progCnt:    uint32(len(ids)),
	}
	if _, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_QUERY, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr)); errno != 0 {
		return nil, fmt.Errorf("query device programs: %w", errno)
	}
	return ids[:attr.progCnt], nil
}
