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
// those). Everything else Apply does is the same, the seccomp filter
// included: see "Builds" in the package documentation for why builds need
// no wider one.
func ApplyKeeping(keep []uintptr) error {
	// Build the filter first, so that a failure leaves the process as it
	// was.
	f, err := compiledFilter()
	if err != nil {
		return err
	}
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
	return loadFilter(f.prog)
}

// Allowed lists, sorted, the system calls the filter lets through: those
// it allows whatever their arguments and those it allows for some (clone,
// socket, socketpair, personality, mknod and mknodat; see the package
// documentation). Every other call fails with EPERM, except clone3, which
// fails with ENOSYS.
func Allowed() ([]string, error) {
	f, err := compiledFilter()
	if err != nil {
		return nil, err
	}
	return slices.Clone(f.names), nil
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
