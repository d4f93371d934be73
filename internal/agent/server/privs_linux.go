package server

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/harden"
	"golang.org/x/sys/unix"
)

// The agent is root of its sandbox, and sandbox code runs as another user in
// the same namespaces: whatever the agent can do, a mistake in the agent lets
// that code do. So once set up it keeps only what serving needs, in its
// effective and permitted sets:
//
//   - CAP_SETUID and CAP_SETGID: every command and kernel starts as the
//     sandbox user (setgroups, setgid and setuid in the child before exec),
//     and file work runs on a thread whose fsuid and fsgid are the user's
//     (setfsuid to another id needs CAP_SETUID, setfsgid CAP_SETGID).
//   - CAP_KILL: the agent signals processes of another uid: it kills the
//     process group of a command that timed out or whose client went away,
//     interrupts kernels with SIGINT and stops them with SIGKILL.
//
// Nothing else is needed once the socket listens: chown, mknod, reading or
// writing files as root regardless of their modes, ptrace, mounts, modules,
// network administration and the rest are gone. The one chown a sandbox
// needs (its workdir and the kernels' runtime directory, created for the
// user) happens during setup, on descriptors, before the drop. Files that
// user code can touch are then handled with the user's own credentials; a
// started process's /proc/<pid>/oom_score_adj too (it belongs to that
// process's user, and raising the score from the agent's -1000 to 0 needs
// no CAP_SYS_RESOURCE; the agent's own -1000 is set during setup).
//
// Build sandboxes (image builds, whose run steps run as root) keep
// harden.BuildCaps in the permitted set as well: with no_new_privs a program
// that root execs gets at most its parent's permitted set, so the build's
// commands get BuildCaps only if the agent still holds them. The effective
// set is the same small one as everywhere else; the agent itself never uses
// the build capabilities.
var agentCaps = []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_KILL}

// capSets are the agent's effective and permitted capability sets as the
// two 32-bit words capget and capset use.
type capSets struct {
	eff, prm [2]uint32
}

// capMask turns a list of capability numbers into capset's two words.
func capMask(caps []uintptr) [2]uint32 {
	var m [2]uint32
	for _, c := range caps {
		if c < 64 {
			m[c/32] |= 1 << (c % 32)
		}
	}
	return m
}

// wantedCaps returns the sets the agent keeps once it serves.
func wantedCaps(build bool) capSets {
	s := capSets{eff: capMask(agentCaps), prm: capMask(agentCaps)}
	if build {
		b := capMask(harden.BuildCaps)
		s.prm[0] |= b[0]
		s.prm[1] |= b[1]
	}
	return s
}

// capHex renders a capability set as /proc/<pid>/status does.
func capHex(m [2]uint32) string { return fmt.Sprintf("%016x", uint64(m[1])<<32|uint64(m[0])) }

// threadCaps reads the calling thread's capability sets.
func threadCaps() (capSets, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return capSets{}, err
	}
	return capSets{
		eff: [2]uint32{data[0].Effective, data[1].Effective},
		prm: [2]uint32{data[0].Permitted, data[1].Permitted},
	}, nil
}

// capData is capset's argument for s, with an empty inheritable set (the
// agent passes nothing on through exec; harden cleared it already).
func (s capSets) capData() (unix.CapUserHeader, [2]unix.CapUserData) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	return hdr, [2]unix.CapUserData{
		{Effective: s.eff[0], Permitted: s.prm[0]},
		{Effective: s.eff[1], Permitted: s.prm[1]},
	}
}

// dropCapabilities shrinks every thread's capabilities to want. Threads the
// runtime starts later are cloned from these and inherit the same sets.
func dropCapabilities(want capSets) error {
	hdr, data := want.capData()
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET,
		uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if errno != 0 {
		return fmt.Errorf("drop capabilities: %w", errno)
	}
	got, err := threadCaps()
	if err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	if got != want {
		return fmt.Errorf("drop capabilities: still effective %s permitted %s, want %s and %s",
			capHex(got.eff), capHex(got.prm), capHex(want.eff), capHex(want.prm))
	}
	return nil
}

// restoreThreadCaps puts the calling thread's sets back to want. A thread
// whose fsuid went from the user's back to 0 gets the filesystem
// capabilities of its permitted set back in its effective set; in a build
// sandbox that permitted set holds BuildCaps, which the agent itself must
// not use. The caller has locked its goroutine to the thread.
func restoreThreadCaps(want capSets) bool {
	got, err := threadCaps()
	if err == nil && got == want {
		return true
	}
	hdr, data := want.capData()
	if unix.Capset(&hdr, &data[0]) != nil {
		return false
	}
	got, err = threadCaps()
	return err == nil && got == want
}

// dropGroups empties the supplementary groups of every thread. File work
// runs with the user's fsuid and fsgid but keeps the thread's supplementary
// groups: root's groups there would let the user's requests read files
// meant for those groups.
func dropGroups() error {
	err := syscall.Setgroups([]int{})
	if err == nil {
		return nil
	}
	// A user namespace may forbid setgroups; empty groups are all we want.
	if gs, gerr := syscall.Getgroups(); gerr == nil && len(gs) == 0 {
		return nil
	}
	return fmt.Errorf("drop supplementary groups: %w", err)
}

// setNotDumpable makes the agent's memory, environment, descriptors and
// root unreachable through /proc and ptrace for every process without
// CAP_SYS_PTRACE, whatever its uid: /proc/1/* then belongs to root and
// ptrace_may_access refuses. Each fsuid switch of a file thread sets the
// flag again, to the host's fs.suid_dumpable (0, or 2 where core dumps of
// set-id programs are kept for root): never back to 1, the only value that
// lets others in. A CRIU restore puts the flag back as it was dumped (the
// e2e attack tests check it after a restore).
func setNotDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// selfReport is what GET /self answers.
func (s *server) selfReport() (*wire.SelfReport, error) {
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return nil, err
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return nil, err
	}
	// This goroutine is not locked to a thread, so it runs on none of the
	// threads that do file work as the user: its sets are the agent's.
	c, err := threadCaps()
	if err != nil {
		return nil, err
	}
	gs, err := syscall.Getgroups()
	if err != nil {
		return nil, err
	}
	if gs == nil {
		gs = []int{}
	}
	rep := &wire.SelfReport{Dumpable: d, CapEff: capHex(c.eff), CapPrm: capHex(c.prm),
		Groups: gs, NoNewPrivs: nnp}
	if s.caps != nil {
		rep.WantEff, rep.WantPrm = capHex(s.caps.eff), capHex(s.caps.prm)
	}
	return rep, nil
}
