package harden

import "golang.org/x/sys/unix"

// Facts of the x86_64 ABI that the filter depends on. Porting harden to
// another architecture means writing this file for it.
const (
	// auditArch is the seccomp_data.arch value of native calls.
	auditArch = unix.AUDIT_ARCH_X86_64
	// x32Bit marks x32 ABI calls, which share auditArch with native ones.
	x32Bit = 0x40000000
	// cloneFlagsArg is the clone(2) argument that holds its flags.
	cloneFlagsArg = 0
)

// denyList holds the calls the filter refuses with EPERM whatever their
// arguments. The package documentation explains the judgement calls.
var denyList = []struct {
	name string
	nr   uint32
}{
	// Mounts and the filesystem view.
	{"mount", unix.SYS_MOUNT},
	{"umount2", unix.SYS_UMOUNT2},
	{"pivot_root", unix.SYS_PIVOT_ROOT},
	{"chroot", unix.SYS_CHROOT},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR},
	{"move_mount", unix.SYS_MOVE_MOUNT},
	{"open_tree", unix.SYS_OPEN_TREE},
	{"open_tree_attr", unix.SYS_OPEN_TREE_ATTR},
	{"fsopen", unix.SYS_FSOPEN},
	{"fsconfig", unix.SYS_FSCONFIG},
	{"fsmount", unix.SYS_FSMOUNT},
	{"fspick", unix.SYS_FSPICK},
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
	{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT},
	{"quotactl", unix.SYS_QUOTACTL},
	{"quotactl_fd", unix.SYS_QUOTACTL_FD},
	{"swapon", unix.SYS_SWAPON},
	{"swapoff", unix.SYS_SWAPOFF},
	{"acct", unix.SYS_ACCT},
	{"nfsservctl", unix.SYS_NFSSERVCTL},
	{"uselib", unix.SYS_USELIB},

	// Namespaces (clone's namespace flags are checked separately).
	{"unshare", unix.SYS_UNSHARE},
	{"setns", unix.SYS_SETNS},

	// Other processes' memory and files.
	{"ptrace", unix.SYS_PTRACE},
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV},
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
	{"pidfd_getfd", unix.SYS_PIDFD_GETFD},

	// The kernel itself: modules, kexec, BPF, perf, keyrings, logs.
	{"kexec_load", unix.SYS_KEXEC_LOAD},
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
	{"init_module", unix.SYS_INIT_MODULE},
	{"finit_module", unix.SYS_FINIT_MODULE},
	{"delete_module", unix.SYS_DELETE_MODULE},
	{"bpf", unix.SYS_BPF},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN},
	{"keyctl", unix.SYS_KEYCTL},
	{"add_key", unix.SYS_ADD_KEY},
	{"request_key", unix.SYS_REQUEST_KEY},
	{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE},
	{"userfaultfd", unix.SYS_USERFAULTFD},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER},
	{"syslog", unix.SYS_SYSLOG},
	{"reboot", unix.SYS_REBOOT},
	{"vhangup", unix.SYS_VHANGUP},
	{"iopl", unix.SYS_IOPL},
	{"ioperm", unix.SYS_IOPERM},

	// The clock.
	{"settimeofday", unix.SYS_SETTIMEOFDAY},
	{"clock_settime", unix.SYS_CLOCK_SETTIME},
	{"clock_adjtime", unix.SYS_CLOCK_ADJTIME},
	{"adjtimex", unix.SYS_ADJTIMEX},
}
