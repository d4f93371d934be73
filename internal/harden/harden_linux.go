package harden

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// nsFlags are the clone flags that create a namespace; clone with any of
// them is refused. CLONE_NEWTIME is not among them: in clone's flags its bit
// is part of the exit signal, and it can only be asked for with clone3 or
// unshare, which are both refused.
const nsFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
	unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP

// allowedPersonalities are the personality(2) arguments the filter lets
// through, as in Docker's default profile.
var allowedPersonalities = []uint32{
	0x0,        // PER_LINUX
	0x0008,     // PER_LINUX32
	0x20000,    // UNAME26
	0x20008,    // UNAME26 | PER_LINUX32
	0xffffffff, // query the current personality
}

// Apply hardens the calling process and everything it starts afterwards:
// no_new_privs, an empty capability bounding set, no ambient or inheritable
// capabilities, and the seccomp filter described in the package
// documentation. It keeps the caller's effective and permitted capabilities.
//
// Apply affects every thread of the process and cannot be undone. If it
// fails the process may be partly hardened and must not go on to run user
// code. In a binary built with cgo it fails before changing anything.
func Apply() error { return ApplyKeeping(nil) }

// BuildCaps are the capabilities an image build's run steps keep (Docker's
// default set without CAP_MKNOD and CAP_NET_RAW): enough for apt, dpkg,
// useradd and chown, nothing that reaches past the sandbox's namespaces.
var BuildCaps = []uintptr{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_FSETID,
	unix.CAP_KILL, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_SETPCAP,
	unix.CAP_NET_BIND_SERVICE, unix.CAP_SYS_CHROOT, unix.CAP_AUDIT_WRITE, unix.CAP_SETFCAP,
}

// ApplyKeeping is Apply that leaves keep in the bounding set, so that a
// process started as root afterwards gets those capabilities (and only
// those). Everything else Apply does is the same.
func ApplyKeeping(keep []uintptr) error {
	if err := dropBoundingSet(keep); err != nil {
		return err
	}
	// Clearing the inheritable set below would drop ambient capabilities
	// too (they must be inheritable); say it outright.
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL); err != nil {
		return fmt.Errorf("harden: clear ambient capabilities: %w", err)
	}
	if err := clearInheritable(); err != nil {
		return err
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return fmt.Errorf("harden: set no_new_privs: %w", err)
	}
	return loadFilter(program())
}

// Denied lists, sorted, the system calls the filter refuses with EPERM
// whatever their arguments. clone with namespace flags and personality with
// other than the usual values are refused too, and clone3 fails with ENOSYS;
// see the package documentation.
func Denied() []string {
	names := make([]string, 0, len(denyList))
	for _, s := range denyList {
		names = append(names, s.name)
	}
	slices.Sort(names)
	return names
}

// allThreads runs a system call with up to three integer arguments on every
// thread of the process.
func allThreads(trap uintptr, args ...uintptr) error {
	var a [3]uintptr
	copy(a[:], args)
	_, _, errno := syscall.AllThreadsSyscall(trap, a[0], a[1], a[2])
	return threadsErr(errno)
}

func threadsErr(errno syscall.Errno) error {
	switch errno {
	case 0:
		return nil
	case syscall.ENOTSUP:
		// AllThreadsSyscall cannot reach threads that C code started.
		return fmt.Errorf("the binary must be built with CGO_ENABLED=0: %w", errno)
	default:
		return errno
	}
}

// dropBoundingSet removes every capability still in the bounding set from
// all threads. Capabilities already gone are skipped, so a second Apply
// needs no CAP_SETPCAP.
func dropBoundingSet(keep []uintptr) error {
	for c := uintptr(0); ; c++ {
		if slices.Contains(keep, c) {
			continue
		}
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c, 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			return nil // past the last capability this kernel knows
		}
		if err != nil {
			return fmt.Errorf("harden: read bounding set: %w", err)
		}
		if in == 0 {
			continue
		}
		if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c); err != nil {
			return fmt.Errorf("harden: drop capability %d from the bounding set: %w", c, err)
		}
	}
}

// clearInheritable empties the inheritable set of all threads and keeps
// their effective and permitted sets, which Go keeps equal across threads.
func clearInheritable() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("harden: capget: %w", err)
	}
	if data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		return nil
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET,
		uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	if err := threadsErr(errno); err != nil {
		return fmt.Errorf("harden: clear inheritable capabilities: %w", err)
	}
	return nil
}

// loadFilter installs prog on every thread (SECCOMP_FILTER_FLAG_TSYNC).
func loadFilter(prog []unix.SockFilter) error {
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("harden: load seccomp filter: %w", errno)
	}
	if r != 0 {
		// With TSYNC a positive result names a thread that could not
		// take the filter, and then no thread has it.
		return fmt.Errorf("harden: load seccomp filter: thread %d cannot be synchronised", r)
	}
	return nil
}

// Offsets into struct seccomp_data.
const (
	offNR   = 0  // int nr
	offArch = 4  // __u32 arch
	offArgs = 16 // __u64 args[6], after __u64 instruction_pointer
)

// argLow is the offset of the low 32 bits of argument i (little-endian).
// Both checked arguments are 32-bit to the kernel: personality takes an
// unsigned int and clone uses only the low half of its flags.
func argLow(i int) uint32 { return uint32(offArgs + 8*i) }

func load(off uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
}

func jump(op uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, Jt: jt, Jf: jf, K: k}
}

func ret(action uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: action}
}

func errno(e syscall.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }

// program assembles the filter. Every block returns, so no jump crosses more
// than a few instructions and the kernel can cache "allow" for every call
// number whose verdict does not depend on arguments.
func program() []unix.SockFilter {
	p := []unix.SockFilter{
		load(offArch),
		jump(unix.BPF_JEQ, auditArch, 1, 0),
		ret(unix.SECCOMP_RET_KILL_PROCESS),
		load(offNR),
		jump(unix.BPF_JGE, x32Bit, 0, 1),
		ret(errno(unix.ENOSYS)),
	}
	for _, s := range denyList {
		p = append(p, jump(unix.BPF_JEQ, s.nr, 0, 1), ret(errno(unix.EPERM)))
	}
	p = append(p, jump(unix.BPF_JEQ, unix.SYS_CLONE3, 0, 1), ret(errno(unix.ENOSYS)))

	p = append(p,
		jump(unix.BPF_JEQ, unix.SYS_CLONE, 0, 4),
		load(argLow(cloneFlagsArg)),
		jump(unix.BPF_JSET, nsFlags, 0, 1),
		ret(errno(unix.EPERM)),
		ret(unix.SECCOMP_RET_ALLOW),
	)

	// personality: one JEQ per allowed value, each jumping to the final
	// allow; falling through all of them reaches the EPERM.
	n := len(allowedPersonalities)
	block := []unix.SockFilter{load(argLow(0))}
	for i, v := range allowedPersonalities {
		block = append(block, jump(unix.BPF_JEQ, v, uint8(n-i), 0))
	}
	block = append(block, ret(errno(unix.EPERM)), ret(unix.SECCOMP_RET_ALLOW))
	p = append(p, jump(unix.BPF_JEQ, unix.SYS_PERSONALITY, 0, uint8(len(block))))
	p = append(p, block...)

	return append(p, ret(unix.SECCOMP_RET_ALLOW))
}
