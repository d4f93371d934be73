package harden

import "golang.org/x/sys/unix"

// Facts of the x86_64 ABI that the filter depends on. Porting harden to
// another architecture means writing this file for it.
const (
	// auditArch is the seccomp_data.arch value of native calls.
	auditArch = unix.AUDIT_ARCH_X86_64
	// x32Bit marks x32 ABI calls, which share auditArch with native ones.
	// go-seccomp-bpf's program answers them ENOSYS.
	x32Bit = 0x40000000
	// cloneFlagsArg is the clone(2) argument that holds its flags.
	cloneFlagsArg = 0
)
