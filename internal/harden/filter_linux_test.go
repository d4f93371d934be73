//go:build !forkbox_agent

package harden

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// oldDenyList is what the hand-written deny-list that the allow-list
// replaced refused. All of it stays refused.
var oldDenyList = []string{
	"mount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount",
	"open_tree", "open_tree_attr", "fsopen", "fsconfig", "fsmount", "fspick",
	"open_by_handle_at", "name_to_handle_at", "quotactl", "quotactl_fd",
	"swapon", "swapoff", "acct", "nfsservctl", "uselib", "unshare", "setns",
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
	"kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "bpf", "perf_event_open", "keyctl", "add_key",
	"request_key", "lookup_dcookie", "userfaultfd", "io_uring_setup",
	"io_uring_enter", "io_uring_register", "syslog", "reboot", "vhangup",
	"iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
}

// newlyRefused are calls the deny-list allowed that the allow-list refuses.
var newlyRefused = []string{
	"modify_ldt", "memfd_secret", "kcmp", "mbind", "set_mempolicy",
	"get_mempolicy", "migrate_pages", "move_pages", "process_madvise",
	"set_mempolicy_home_node", "fanotify_init", "sethostname", "setdomainname",
}

// mustWork are calls ordinary programs, Go, glibc, apt, dpkg and useradd
// need; the filter must let them through.
var mustWork = []string{
	"read", "write", "openat", "openat2", "close", "mmap", "mprotect", "brk",
	"execve", "execveat", "fork", "vfork", "clone", "wait4", "waitid", "exit_group",
	"futex", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack",
	"arch_prctl", "set_tid_address", "set_robust_list", "rseq", "prlimit64",
	"getrandom", "pidfd_open", "pidfd_send_signal", "seccomp", "prctl",
	"socket", "socketpair", "connect", "bind", "listen", "accept4", "sendmsg",
	"recvmsg", "mknodat", "mknod", "personality", "statx", "newfstatat",
	"faccessat2", "fchmodat2", "close_range", "copy_file_range", "memfd_create",
	"chown", "fchown", "fchownat", "lchown", "setuid", "setgid", "setgroups",
	"setresuid", "setresgid", "setfsuid", "setfsgid", "capget", "capset",
	"setxattr", "fsetxattr", "renameat2", "linkat", "symlinkat", "unlinkat",
	"sched_getaffinity", "sched_setaffinity", "epoll_create1", "epoll_pwait",
	"epoll_pwait2", "eventfd2", "timerfd_create", "inotify_init1", "io_setup",
	"landlock_create_ruleset", "mseal", "map_shadow_stack", "futex_waitv",
}

func TestAllowed(t *testing.T) {
	allowed, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(allowed) {
		t.Errorf("Allowed() is not sorted: %v", allowed)
	}
	if c := slices.Compact(slices.Clone(allowed)); len(c) != len(allowed) {
		t.Errorf("Allowed() has duplicates: %v", allowed)
	}
	for _, name := range mustWork {
		if !slices.Contains(allowed, name) {
			t.Errorf("Allowed() lacks %s", name)
		}
	}
	for _, name := range slices.Concat(oldDenyList, newlyRefused, []string{"clone3"}) {
		if slices.Contains(allowed, name) {
			t.Errorf("Allowed() contains %s", name)
		}
	}
	for _, name := range allowed {
		if _, ok := nativeCalls.SyscallNames[name]; !ok {
			t.Errorf("Allowed() contains %s, which is no %s call", name, nativeCalls.Name)
		}
	}
	t.Logf("%d calls allowed", len(allowed))
}

// TestProfile checks how Docker's profile is read: every name resolves on
// this architecture or belongs to another ABI, for every capability set,
// and the rules harden replaces or departs from are the ones it expects.
func TestProfile(t *testing.T) {
	for what, caps := range map[string][]string{
		"no capabilities":   nil,
		"BuildCaps":         buildCapNames(t),
		"every capability":  slices.Collect(maps.Values(capNames)),
		"CAP_SYS_ADMIN etc": {"CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_SYS_NICE"},
	} {
		p, err := dockerProfile(caps)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(p.allow) < 250 {
			t.Errorf("%s: only %d calls allowed unconditionally", what, len(p.allow))
		}
		for _, name := range p.other {
			if _, ok := nativeCalls.SyscallNames[name]; ok {
				t.Errorf("%s: %s skipped as another ABI's call but exists on %s", what, name, nativeCalls.Name)
			}
			if !otherABICall(name) {
				t.Errorf("%s: %s skipped without being another ABI's call", what, name)
			}
		}
		for _, want := range []string{"chown32", "socketcall", "_llseek", "clock_gettime64", "riscv_hwprobe"} {
			if !slices.Contains(p.other, want) {
				t.Errorf("%s: %s is not among the skipped calls of other ABIs %v", what, want, p.other)
			}
		}
	}

	p, err := dockerProfile(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(p.args)); !slices.Equal(got, []string{"clone", "personality", "socket"}) {
		t.Errorf("calls with argument rules in the profile: %v, want clone, personality, socket", got)
	}
	if len(p.errno) != 1 || p.errno["clone3"] != unix.ENOSYS {
		t.Errorf("errno rules in the profile: %v, want clone3 ENOSYS", p.errno)
	}
	// The profile's clone rule is the one harden implements.
	if r := p.args["clone"]; len(r) != 1 || len(r[0].Args) != 1 ||
		r[0].Args[0] != (specs.LinuxSeccompArg{Index: cloneFlagsArg, Value: nsFlags, ValueTwo: 0, Op: specs.OpMaskedEqual}) {
		t.Errorf("the profile's clone rule is %+v, want arg %d & %#x == 0", r, cloneFlagsArg, nsFlags)
	}
	var personalities []uint32
	for _, r := range p.args["personality"] {
		if len(r.Args) != 1 || r.Args[0].Index != 0 || r.Args[0].Op != specs.OpEqualTo {
			t.Errorf("unexpected personality rule %+v", r)
			continue
		}
		personalities = append(personalities, uint32(r.Args[0].Value))
	}
	if !slices.Equal(personalities, allowedPersonalities) {
		t.Errorf("the profile allows personalities %#x, harden %#x", personalities, allowedPersonalities)
	}
	// Every departure names a call Docker allows, and the profile knows the
	// calls with hand-written argument rules.
	for _, name := range refusedBeyondDocker {
		if !p.allow[name] {
			t.Errorf("refusedBeyondDocker lists %s, which Docker's profile does not allow anyway", name)
		}
	}
	for _, r := range argRules() {
		if !p.allow[r.name] && p.args[r.name] == nil {
			t.Errorf("argument rule for %s, which Docker's profile refuses", r.name)
		}
	}
}

// TestBuildCapsProfile checks that builds need no wider filter: Docker's
// profile for BuildCaps allows only chroot beyond what it allows without
// capabilities, and harden refuses chroot on purpose.
func TestBuildCapsProfile(t *testing.T) {
	none, err := dockerProfile(nil)
	if err != nil {
		t.Fatal(err)
	}
	build, err := dockerProfile(buildCapNames(t))
	if err != nil {
		t.Fatal(err)
	}
	names := func(p *profile) []string {
		return slices.Sorted(maps.Keys(maps.Collect(func(yield func(string, bool) bool) {
			for n := range p.allow {
				yield(n, true)
			}
			for n := range p.args {
				yield(n, true)
			}
		})))
	}
	noneNames, buildNames := names(none), names(build)
	var more, less []string
	for _, n := range buildNames {
		if !slices.Contains(noneNames, n) {
			more = append(more, n)
		}
	}
	for _, n := range noneNames {
		if !slices.Contains(buildNames, n) {
			less = append(less, n)
		}
	}
	if !slices.Equal(more, []string{"chroot"}) || len(less) > 0 {
		t.Errorf("Docker's profile for BuildCaps allows %v more and %v less than without capabilities, want chroot and nothing: decide whether builds need a wider filter", more, less)
	}
	for _, name := range []string{"chown", "fchown", "fchownat", "lchown", "setuid", "setgid", "setgroups", "setresuid", "setresgid", "capset", "setxattr", "kill"} {
		if !none.allow[name] {
			t.Errorf("Docker's profile without capabilities does not allow %s, which builds need", name)
		}
	}
	if allowed, _ := Allowed(); slices.Contains(allowed, "chroot") {
		t.Error("chroot is allowed")
	}
}

// TestProgram runs the filter through a small classic-BPF interpreter: every
// call number of the native, i386 and x32 ABIs, and the argument rules, so
// the decisions that no test machine may be able to reach (i386 calls where
// 32-bit emulation is off, x32) are checked everywhere, root or not.
func TestProgram(t *testing.T) {
	f, err := testFilter()
	if err != nil {
		t.Fatal(err)
	}
	prog := f.prog
	if len(prog) >= unix.BPF_MAXINSNS {
		t.Fatalf("program has %d instructions, the kernel takes fewer than %d", len(prog), unix.BPF_MAXINSNS)
	}
	hand := 4 // the architecture check and the load of the call number
	for _, r := range f.policy.rules {
		hand += len(r.assemble())
	}
	t.Logf("%d instructions, %d of them hand-written (architecture check, argument rules)", len(prog), hand)

	rules := map[string]bool{}
	for _, r := range f.policy.rules {
		rules[r.name] = true
	}
	if got := slices.Sorted(maps.Keys(rules)); !slices.Equal(got, []string{"clone", "mknod", "mknodat", "personality", "socket", "socketpair"}) {
		t.Errorf("argument rules for %v", got)
	}
	// Every number decided by number alone.
	for nr := range uint32(1024) {
		name := nativeCalls.SyscallNumbers[int(nr)]
		if rules[name] {
			continue
		}
		want := eperm
		switch {
		case slices.Contains(f.policy.allow, name):
			want = allow
		case name == "clone3":
			want = enosys
		}
		if got := runBPF(t, prog, auditArch, nr, [6]uint64{}); got != want {
			t.Errorf("%d (%s): filter returns %#x, want %#x", nr, name, got, want)
		}
		if got := runBPF(t, prog, unix.AUDIT_ARCH_I386, nr, [6]uint64{}); got != kill {
			t.Errorf("i386 call %d: filter returns %#x, want kill", nr, got)
		}
		if got := runBPF(t, prog, auditArch, x32Bit|nr, [6]uint64{}); got != enosys {
			t.Errorf("x32 call %d: filter returns %#x, want ENOSYS", nr, got)
		}
	}
	for _, name := range slices.Concat(oldDenyList, newlyRefused) {
		if got := runBPF(t, prog, auditArch, uint32(nativeCalls.SyscallNames[name]), [6]uint64{}); got != eperm {
			t.Errorf("%s: filter returns %#x, want EPERM", name, got)
		}
	}

	goVfork := uint64(unix.CLONE_VFORK | unix.CLONE_VM | unix.CLONE_PIDFD | uint64(unix.SIGCHLD))
	glibcThread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	type call struct {
		name string
		arch uint32
		nr   uint32
		args [6]uint64
		want uint32
	}
	a0 := func(v uint64) [6]uint64 { return [6]uint64{v} }
	sock := func(family, proto uint64) [6]uint64 { return [6]uint64{family, unix.SOCK_STREAM, proto} }
	tests := []call{
		{"arm64 call", unix.AUDIT_ARCH_AARCH64, unix.SYS_GETPID, a0(0), kill},
		{"unknown architecture", 0, unix.SYS_GETPID, a0(0), kill},
		{"nr -1", auditArch, 0xffffffff, a0(0), enosys},
		{"nr past the last call", auditArch, 0x3fffffff, a0(0), eperm},

		{"clone fork", auditArch, unix.SYS_CLONE, a0(uint64(unix.SIGCHLD)), allow},
		{"clone Go vfork", auditArch, unix.SYS_CLONE, a0(goVfork), allow},
		{"clone glibc thread", auditArch, unix.SYS_CLONE, a0(glibcThread), allow},
		{"clone NEWUSER", auditArch, unix.SYS_CLONE, a0(unix.CLONE_NEWUSER), eperm},
		{"clone NEWNS", auditArch, unix.SYS_CLONE, a0(unix.CLONE_NEWNS | goVfork), eperm},
		{"clone NEWPID", auditArch, unix.SYS_CLONE, a0(unix.CLONE_NEWPID), eperm},
		{"clone NEWNET", auditArch, unix.SYS_CLONE, a0(unix.CLONE_NEWNET), eperm},
		{"clone NEWIPC", auditArch, unix.SYS_CLONE, a0(unix.CLONE_NEWIPC), eperm},
		{"clone NEWUTS", auditArch, unix.SYS_CLONE, a0(unix.CLONE_NEWUTS), eperm},
		{"clone NEWCGROUP", auditArch, unix.SYS_CLONE, a0(unix.CLONE_NEWCGROUP), eperm},
		{"clone NEWUSER with high bits", auditArch, unix.SYS_CLONE, a0(1<<40 | unix.CLONE_NEWUSER), eperm},

		{"personality query", auditArch, unix.SYS_PERSONALITY, a0(0xffffffff), allow},
		{"personality PER_LINUX", auditArch, unix.SYS_PERSONALITY, a0(0), allow},
		{"personality PER_LINUX32", auditArch, unix.SYS_PERSONALITY, a0(8), allow},
		{"personality UNAME26", auditArch, unix.SYS_PERSONALITY, a0(0x20000), allow},
		{"personality UNAME26|PER_LINUX32", auditArch, unix.SYS_PERSONALITY, a0(0x20008), allow},
		// The kernel takes an unsigned int: the high half does not matter.
		{"personality PER_LINUX with high bits", auditArch, unix.SYS_PERSONALITY, a0(1 << 32), allow},
		{"personality ADDR_NO_RANDOMIZE", auditArch, unix.SYS_PERSONALITY, a0(0x0040000), eperm},
		{"personality READ_IMPLIES_EXEC", auditArch, unix.SYS_PERSONALITY, a0(0x0400000), eperm},
		{"personality MMAP_PAGE_ZERO", auditArch, unix.SYS_PERSONALITY, a0(0x0100000), eperm},

		{"socket AF_UNIX", auditArch, unix.SYS_SOCKET, sock(unix.AF_UNIX, 0), allow},
		{"socket AF_INET", auditArch, unix.SYS_SOCKET, sock(unix.AF_INET, 0), allow},
		{"socket AF_INET raw ICMP", auditArch, unix.SYS_SOCKET, [6]uint64{unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP}, allow},
		{"socket AF_INET6", auditArch, unix.SYS_SOCKET, sock(unix.AF_INET6, 0), allow},
		{"socket AF_INET with high bits", auditArch, unix.SYS_SOCKET, sock(1<<32|unix.AF_INET, 0), allow},
		{"socket NETLINK_ROUTE", auditArch, unix.SYS_SOCKET, sock(unix.AF_NETLINK, unix.NETLINK_ROUTE), allow},
		{"socket NETLINK_AUDIT", auditArch, unix.SYS_SOCKET, sock(unix.AF_NETLINK, unix.NETLINK_AUDIT), eafnosupport},
		{"socket NETLINK_KOBJECT_UEVENT", auditArch, unix.SYS_SOCKET, sock(unix.AF_NETLINK, unix.NETLINK_KOBJECT_UEVENT), eafnosupport},
		{"socket NETLINK_SOCK_DIAG", auditArch, unix.SYS_SOCKET, sock(unix.AF_NETLINK, unix.NETLINK_SOCK_DIAG), eafnosupport},
		{"socket NETLINK_GENERIC", auditArch, unix.SYS_SOCKET, sock(unix.AF_NETLINK, unix.NETLINK_GENERIC), eafnosupport},
		{"socket NETLINK_NETFILTER", auditArch, unix.SYS_SOCKET, sock(unix.AF_NETLINK, unix.NETLINK_NETFILTER), eafnosupport},
		{"socket NETLINK_ROUTE with protocol high bits", auditArch, unix.SYS_SOCKET, sock(unix.AF_NETLINK, 1<<32|unix.NETLINK_ROUTE), allow},
		{"socket AF_UNSPEC", auditArch, unix.SYS_SOCKET, sock(unix.AF_UNSPEC, 0), eafnosupport},
		// 17 is also pread64's number: the family must not be taken for a call.
		{"socket AF_PACKET", auditArch, unix.SYS_SOCKET, sock(unix.AF_PACKET, 0), eafnosupport},
		{"socket AF_VSOCK", auditArch, unix.SYS_SOCKET, sock(unix.AF_VSOCK, 0), eafnosupport},
		{"socket AF_ALG", auditArch, unix.SYS_SOCKET, sock(unix.AF_ALG, 0), eafnosupport},
		{"socket AF_KEY", auditArch, unix.SYS_SOCKET, sock(unix.AF_KEY, 0), eafnosupport},
		{"socket AF_BLUETOOTH", auditArch, unix.SYS_SOCKET, sock(unix.AF_BLUETOOTH, 0), eafnosupport},
		{"socket AF_TIPC", auditArch, unix.SYS_SOCKET, sock(unix.AF_TIPC, 0), eafnosupport},
		{"socket AF_RDS", auditArch, unix.SYS_SOCKET, sock(unix.AF_RDS, 0), eafnosupport},
		{"socket AF_XDP", auditArch, unix.SYS_SOCKET, sock(unix.AF_XDP, 0), eafnosupport},
		{"socket AF_UNIX in the high half only", auditArch, unix.SYS_SOCKET, sock(unix.AF_UNIX<<32, 0), eafnosupport},
		{"socketpair AF_UNIX", auditArch, unix.SYS_SOCKETPAIR, sock(unix.AF_UNIX, 0), allow},
		{"socketpair AF_INET", auditArch, unix.SYS_SOCKETPAIR, sock(unix.AF_INET, 0), eafnosupport},
		{"socketpair AF_NETLINK", auditArch, unix.SYS_SOCKETPAIR, sock(unix.AF_NETLINK, 0), eafnosupport},
		{"socketpair AF_TIPC", auditArch, unix.SYS_SOCKETPAIR, sock(unix.AF_TIPC, 0), eafnosupport},
	}
	// mknod and mknodat with every file type, with and without high bits
	// (the kernel reads the mode as 16 bits).
	fdcwd := atFDCWD
	for typ := range uint64(16) {
		mode := typ<<12 | 0o644
		want := allow
		if mode&devBit != 0 {
			want = eperm
		}
		for _, high := range []uint64{0, 1 << 32, 0xffff0000} {
			m := mode | high
			name := fmt.Sprintf("type %#o mode %#x", typ<<12, m)
			tests = append(tests,
				call{"mknod " + name, auditArch, unix.SYS_MKNOD, [6]uint64{0, m, 0}, want},
				call{"mknodat " + name, auditArch, unix.SYS_MKNODAT, [6]uint64{fdcwd, 0, m, 0}, want})
		}
	}
	for _, tt := range tests {
		if got := runBPF(t, prog, tt.arch, tt.nr, tt.args); got != tt.want {
			t.Errorf("%s: filter returns %#x, want %#x", tt.name, got, tt.want)
		}
	}
	// The types named in mknod(2).
	for _, tt := range []struct {
		mode uint64
		want uint32
	}{{unix.S_IFCHR, eperm}, {unix.S_IFBLK, eperm}, {unix.S_IFIFO, allow}, {unix.S_IFREG, allow}, {unix.S_IFSOCK, allow}, {0, allow}} {
		if got := runBPF(t, prog, auditArch, unix.SYS_MKNODAT, [6]uint64{fdcwd, 0, tt.mode | 0o600, 0}); got != tt.want {
			t.Errorf("mknodat mode %#o: filter returns %#x, want %#x", tt.mode, got, tt.want)
		}
	}
}

// TestArgRulesWithinProfile checks that the hand-written argument rules
// allow nothing that the profile refuses: for many argument values (low
// halves only, which is all the kernel reads of these arguments), whenever
// the filter allows a call, Docker's profile allows it too.
func TestArgRulesWithinProfile(t *testing.T) {
	f, err := testFilter()
	if err != nil {
		t.Fatal(err)
	}
	p, err := dockerProfile(nil)
	if err != nil {
		t.Fatal(err)
	}
	values := []uint64{0xffffffff, 0xffff, atFDCWD}
	for v := range uint64(70) {
		values = append(values, v)
	}
	for i := range 32 {
		values = append(values, 1<<i)
	}
	for typ := range uint64(16) {
		values = append(values, typ<<12|0o600)
	}
	for _, v := range allowedPersonalities {
		values = append(values, uint64(v))
	}
	checked, allowed := 0, 0
	for _, r := range f.policy.rules {
		for _, a := range values {
			for _, b := range values {
				for _, args := range [][6]uint64{{a, 0, b}, {a, b, 0}, {0, a, b}} {
					checked++
					if runBPF(t, f.prog, auditArch, r.nr, args) != allow {
						continue
					}
					allowed++
					if !profileAllows(p, r.name, args) {
						t.Fatalf("%s%v: allowed by the filter, refused by Docker's profile", r.name, args)
					}
				}
			}
		}
	}
	t.Logf("%d argument vectors, %d allowed", checked, allowed)
}

// profileAllows evaluates the profile's rules for a call with libseccomp's
// 64-bit comparisons.
func profileAllows(p *profile, name string, args [6]uint64) bool {
	if p.allow[name] {
		return true
	}
	for _, rule := range p.args[name] {
		ok := true
		for _, a := range rule.Args {
			v := args[a.Index]
			switch a.Op {
			case specs.OpEqualTo:
				ok = ok && v == a.Value
			case specs.OpNotEqual:
				ok = ok && v != a.Value
			case specs.OpLessThan:
				ok = ok && v < a.Value
			case specs.OpLessEqual:
				ok = ok && v <= a.Value
			case specs.OpGreaterThan:
				ok = ok && v > a.Value
			case specs.OpGreaterEqual:
				ok = ok && v >= a.Value
			case specs.OpMaskedEqual:
				ok = ok && v&a.Value == a.ValueTwo
			default:
				panic("unknown operator " + string(a.Op))
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// atFDCWD is AT_FDCWD as the filter sees it, an int in the low half.
const atFDCWD = uint64(uint32(1<<32 + unix.AT_FDCWD))

const (
	allow        = uint32(unix.SECCOMP_RET_ALLOW)
	kill         = uint32(unix.SECCOMP_RET_KILL_PROCESS)
	eperm        = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	enosys       = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	eafnosupport = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
)

// runBPF interprets the instructions the filter uses on a struct
// seccomp_data.
func runBPF(t *testing.T, prog []unix.SockFilter, arch, nr uint32, args [6]uint64) uint32 {
	t.Helper()
	var data [64]byte
	le := binary.LittleEndian
	le.PutUint32(data[offNR:], nr)
	le.PutUint32(data[offArch:], arch)
	for i, a := range args {
		le.PutUint64(data[offArgs+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		var cond bool
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if in.K%4 != 0 || in.K+4 > uint32(len(data)) {
				t.Fatalf("instruction %d loads from offset %d", pc, in.K)
			}
			acc = le.Uint32(data[in.K:])
			continue
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(in.K)
			continue
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			cond = acc == in.K
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			cond = acc >= in.K
		case unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K:
			cond = acc > in.K
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			cond = acc&in.K != 0
		default:
			t.Fatalf("instruction %d: unexpected code %#x", pc, in.Code)
		}
		if cond {
			pc += int(in.Jt)
		} else {
			pc += int(in.Jf)
		}
	}
	t.Fatal("the program ran off its end")
	return 0
}

// capNames are the capabilities by the names Docker's profile uses.
var capNames = map[uintptr]string{
	unix.CAP_CHOWN: "CAP_CHOWN", unix.CAP_DAC_OVERRIDE: "CAP_DAC_OVERRIDE",
	unix.CAP_DAC_READ_SEARCH: "CAP_DAC_READ_SEARCH", unix.CAP_FOWNER: "CAP_FOWNER",
	unix.CAP_FSETID: "CAP_FSETID", unix.CAP_KILL: "CAP_KILL", unix.CAP_SETGID: "CAP_SETGID",
	unix.CAP_SETUID: "CAP_SETUID", unix.CAP_SETPCAP: "CAP_SETPCAP",
	unix.CAP_LINUX_IMMUTABLE: "CAP_LINUX_IMMUTABLE", unix.CAP_NET_BIND_SERVICE: "CAP_NET_BIND_SERVICE",
	unix.CAP_NET_BROADCAST: "CAP_NET_BROADCAST", unix.CAP_NET_ADMIN: "CAP_NET_ADMIN",
	unix.CAP_NET_RAW: "CAP_NET_RAW", unix.CAP_IPC_LOCK: "CAP_IPC_LOCK", unix.CAP_IPC_OWNER: "CAP_IPC_OWNER",
	unix.CAP_SYS_MODULE: "CAP_SYS_MODULE", unix.CAP_SYS_RAWIO: "CAP_SYS_RAWIO",
	unix.CAP_SYS_CHROOT: "CAP_SYS_CHROOT", unix.CAP_SYS_PTRACE: "CAP_SYS_PTRACE",
	unix.CAP_SYS_PACCT: "CAP_SYS_PACCT", unix.CAP_SYS_ADMIN: "CAP_SYS_ADMIN",
	unix.CAP_SYS_BOOT: "CAP_SYS_BOOT", unix.CAP_SYS_NICE: "CAP_SYS_NICE",
	unix.CAP_SYS_RESOURCE: "CAP_SYS_RESOURCE", unix.CAP_SYS_TIME: "CAP_SYS_TIME",
	unix.CAP_SYS_TTY_CONFIG: "CAP_SYS_TTY_CONFIG", unix.CAP_MKNOD: "CAP_MKNOD",
	unix.CAP_LEASE: "CAP_LEASE", unix.CAP_AUDIT_WRITE: "CAP_AUDIT_WRITE",
	unix.CAP_AUDIT_CONTROL: "CAP_AUDIT_CONTROL", unix.CAP_SETFCAP: "CAP_SETFCAP",
	unix.CAP_MAC_OVERRIDE: "CAP_MAC_OVERRIDE", unix.CAP_MAC_ADMIN: "CAP_MAC_ADMIN",
	unix.CAP_SYSLOG: "CAP_SYSLOG", unix.CAP_WAKE_ALARM: "CAP_WAKE_ALARM",
	unix.CAP_BLOCK_SUSPEND: "CAP_BLOCK_SUSPEND", unix.CAP_AUDIT_READ: "CAP_AUDIT_READ",
	unix.CAP_PERFMON: "CAP_PERFMON", unix.CAP_BPF: "CAP_BPF",
	unix.CAP_CHECKPOINT_RESTORE: "CAP_CHECKPOINT_RESTORE",
}

func buildCapNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, c := range BuildCaps {
		name, ok := capNames[c]
		if !ok {
			t.Fatalf("no name for capability %d", c)
		}
		names = append(names, name)
	}
	return names
}

// --- cases run in a child process (see TestApply) ---

// caseRefusedCalls calls every native call the filter does not allow, with
// all-ones arguments (invalid for all of them, so one that slipped through
// would fail harmlessly, but not with EPERM).
func caseRefusedCalls() error {
	const bad = ^uintptr(0)
	call := func(nr int) string {
		_, _, errno := unix.Syscall6(uintptr(nr), bad, bad, bad, bad, bad, bad)
		if errno == 0 {
			return "ok"
		}
		return result(errno)
	}
	// Control: the kernel itself does not answer EPERM to the calls that
	// are refused now and were not before, or that Docker allows, so the
	// EPERM after Apply is the filter's.
	for _, name := range slices.Concat(newlyRefused, refusedBeyondDocker) {
		if got := call(nativeCalls.SyscallNames[name]); got == "EPERM" {
			return fmt.Errorf("control before Apply: %s gives %s", name, got)
		}
	}
	if err := apply(); err != nil {
		return err
	}
	allowed, err := Allowed()
	if err != nil {
		return err
	}
	got, want := map[string]string{}, map[string]string{}
	for nr, name := range nativeCalls.SyscallNumbers {
		if slices.Contains(allowed, name) {
			continue
		}
		got[name], want[name] = call(nr), "EPERM"
		if name == "clone3" {
			want[name] = "ENOSYS"
		}
	}
	var errs []error
	for _, name := range slices.Concat(oldDenyList, newlyRefused) {
		if _, ok := want[name]; !ok {
			errs = append(errs, fmt.Errorf("%s is allowed", name))
		}
	}
	if len(want) < 80 {
		errs = append(errs, fmt.Errorf("only %d calls refused: %v", len(want), slices.Sorted(maps.Keys(want))))
	}
	return errors.Join(append(errs, expect("refused calls after Apply", got, want))...)
}

// socketResults creates sockets of the families and netlink protocols the
// filter decides on and reports what each gave.
func socketResults() map[string]string {
	try := func(domain, typ, proto int) string {
		fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
		if err == nil {
			unix.Close(fd)
		}
		return result(err)
	}
	pair := func(domain int) string {
		fds, err := unix.Socketpair(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
		return result(err)
	}
	// net.Interfaces reads the links over route netlink, as glibc's
	// getifaddrs and getaddrinfo(AI_ADDRCONFIG) do.
	interfaces := func() string {
		ifs, err := net.Interfaces()
		if err != nil {
			return result(err)
		}
		for _, i := range ifs {
			if i.Flags&net.FlagLoopback != 0 {
				return "ok"
			}
		}
		return "no_loopback"
	}
	return map[string]string{
		"unix-stream":      try(unix.AF_UNIX, unix.SOCK_STREAM, 0),
		"unix-dgram":       try(unix.AF_UNIX, unix.SOCK_DGRAM, 0),
		"inet-stream":      try(unix.AF_INET, unix.SOCK_STREAM, 0),
		"inet-dgram":       try(unix.AF_INET, unix.SOCK_DGRAM, 0),
		"inet6-stream":     try(unix.AF_INET6, unix.SOCK_STREAM, 0),
		"netlink-route":    try(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE),
		"netlink-audit":    try(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT),
		"netlink-uevent":   try(unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT),
		"netlink-sockdiag": try(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG),
		"netlink-generic":  try(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_GENERIC),
		"vsock":            try(unix.AF_VSOCK, unix.SOCK_STREAM, 0),
		"packet":           try(unix.AF_PACKET, unix.SOCK_RAW, 0),
		"alg":              try(unix.AF_ALG, unix.SOCK_SEQPACKET, 0),
		"socketpair-unix":  pair(unix.AF_UNIX),
		"socketpair-inet":  pair(unix.AF_INET),
		"interfaces":       interfaces(),
	}
}

// Socket families and netlink protocols the filter allows, and refuses.
var (
	allowedSockets = []string{"unix-stream", "unix-dgram", "inet-stream", "inet-dgram", "inet6-stream", "netlink-route", "socketpair-unix", "interfaces"}
	refusedSockets = []string{"netlink-audit", "netlink-uevent", "netlink-sockdiag", "netlink-generic", "vsock", "packet", "alg", "socketpair-inet"}
)

func caseSockets() error {
	// Control, as root with every capability: the kernel has these
	// families. Those it lacks would give EAFNOSUPPORT without the filter;
	// they are left out, TestProgram covers them.
	before := socketResults()
	for _, name := range []string{"unix-stream", "inet-stream", "netlink-route", "netlink-audit", "netlink-uevent", "packet", "interfaces"} {
		if before[name] != "ok" {
			return fmt.Errorf("control before Apply: %s gave %s", name, before[name])
		}
	}
	want := map[string]string{}
	for _, name := range allowedSockets {
		if before[name] == "ok" {
			want[name] = "ok"
		}
	}
	for _, name := range refusedSockets {
		if before[name] != "EAFNOSUPPORT" {
			want[name] = "EAFNOSUPPORT"
		}
	}
	if err := apply(); err != nil {
		return err
	}
	return errors.Join(
		// The hardened root process keeps CAP_NET_RAW and CAP_NET_ADMIN:
		// only the filter refuses it.
		expect("hardened root process", socketResults(), want),
		// uid 1000 would get EPERM from the kernel for AF_PACKET.
		probeExpect(userID, "probe-sockets", want))
}

// mknodResults makes nodes of several types in dir with mknod and mknodat
// and reports what each gave.
func mknodResults(dir string) map[string]string {
	n := 0
	try := func(nr uintptr, mode uint64, dev uint64) string {
		n++
		path := filepath.Join(dir, fmt.Sprintf("node-%d-%d", os.Getpid(), n))
		p, err := unix.BytePtrFromString(path)
		if err != nil {
			return result(err)
		}
		var errno syscall.Errno
		if nr == unix.SYS_MKNOD {
			_, _, errno = unix.Syscall(nr, uintptr(unsafe.Pointer(p)), uintptr(mode), uintptr(dev))
		} else {
			fdcwd := unix.AT_FDCWD
			_, _, errno = unix.Syscall6(nr, uintptr(fdcwd), uintptr(unsafe.Pointer(p)), uintptr(mode), uintptr(dev), 0, 0)
		}
		runtime.KeepAlive(p)
		os.Remove(path)
		if errno != 0 {
			return result(errno)
		}
		return "ok"
	}
	chr, blk := unix.Mkdev(1, 3), unix.Mkdev(7, 0) // /dev/null, /dev/loop0
	fifo := filepath.Join(dir, fmt.Sprintf("fifo-%d", os.Getpid()))
	mkfifo := result(unix.Mkfifo(fifo, 0o600))
	os.Remove(fifo)
	return map[string]string{
		"mknod-chr":    try(unix.SYS_MKNOD, unix.S_IFCHR|0o600, chr),
		"mknod-blk":    try(unix.SYS_MKNOD, unix.S_IFBLK|0o600, blk),
		"mknod-fifo":   try(unix.SYS_MKNOD, unix.S_IFIFO|0o600, 0),
		"mknodat-chr":  try(unix.SYS_MKNODAT, unix.S_IFCHR|0o600, chr),
		"mknodat-blk":  try(unix.SYS_MKNODAT, unix.S_IFBLK|0o600, blk),
		"mknodat-fifo": try(unix.SYS_MKNODAT, unix.S_IFIFO|0o600, 0),
		"mknodat-reg":  try(unix.SYS_MKNODAT, unix.S_IFREG|0o600, 0),
		"mknodat-sock": try(unix.SYS_MKNODAT, unix.S_IFSOCK|0o600, 0),
		"mknodat-zero": try(unix.SYS_MKNODAT, 0o600, 0), // type 0 is a regular file
		"mknodat-lnk":  try(unix.SYS_MKNODAT, unix.S_IFLNK|0o600, 0),
		// The kernel reads the mode as 16 bits: this is a character device.
		"mknodat-chr-high-bits": try(unix.SYS_MKNODAT, 1<<32|unix.S_IFCHR|0o600, chr),
		// An overlay whiteout, which the kernel lets anyone make.
		"mknodat-whiteout": try(unix.SYS_MKNODAT, unix.S_IFCHR|0o600, 0),
		"mkfifo":           mkfifo,
	}
}

func caseMknod() error {
	dir, err := probeDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Control, as root with CAP_MKNOD: every type can be made, S_IFLNK is
	// invalid.
	got := mknodResults(dir)
	want := map[string]string{}
	for k := range got {
		want[k] = "ok"
	}
	want["mknodat-lnk"] = "EINVAL"
	if err := expect("control before Apply", got, want); err != nil {
		return err
	}
	if err := apply(); err != nil {
		return err
	}
	if ok, err := hasCap(unix.CAP_MKNOD); err != nil || !ok {
		return fmt.Errorf("CAP_MKNOD not kept after Apply (%v)", err)
	}
	for _, k := range []string{"mknod-chr", "mknod-blk", "mknodat-chr", "mknodat-blk", "mknodat-lnk", "mknodat-chr-high-bits", "mknodat-whiteout"} {
		want[k] = "EPERM"
	}
	return errors.Join(
		expect("hardened root process", mknodResults(dir), want),
		probeExpect(userID, "probe-mknod", want))
}

// probeDir makes a directory that a uid 1000 probe may write to and names it
// in envProbeDir for the probes.
func probeDir() (string, error) {
	dir, err := os.MkdirTemp("", "forkbox-harden-probe-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return "", err
	}
	return dir, os.Setenv(envProbeDir, dir)
}

// goProgram does what an ordinary Go program does: threads, TCP, UDP and
// Unix sockets, the interface list, files, exec.
func goProgram() error {
	dir := os.Getenv(envProbeDir)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			runtime.LockOSThread() // a new thread for each
			time.Sleep(time.Millisecond)
		})
	}
	wg.Wait()

	echo := func(network, addr string) error {
		ln, err := net.Listen(network, addr)
		if err != nil {
			return err
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				io.Copy(c, c)
				c.Close()
			}
		}()
		c, err := net.Dial(network, ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
			return fmt.Errorf("%s echo: %q, %v", network, b, err)
		}
		return nil
	}
	if err := echo("tcp", "127.0.0.1:0"); err != nil {
		return err
	}
	if err := echo("unix", filepath.Join(dir, fmt.Sprintf("sock-%d", os.Getpid()))); err != nil {
		return err
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer pc.Close()
	if _, err := pc.WriteTo([]byte("x"), pc.LocalAddr()); err != nil {
		return err
	}
	if _, _, err := pc.ReadFrom(make([]byte, 1)); err != nil {
		return err
	}
	if _, err := net.Interfaces(); err != nil {
		return fmt.Errorf("net.Interfaces: %w", err)
	}

	f, err := os.CreateTemp(dir, "file-")
	if err != nil {
		return err
	}
	if _, err := f.WriteString("data"); err != nil {
		return err
	}
	if err := errors.Join(f.Sync(), f.Close(), os.Chmod(f.Name(), 0o600)); err != nil {
		return err
	}
	moved := f.Name() + ".moved"
	if err := os.Rename(f.Name(), moved); err != nil {
		return err
	}
	if b, err := os.ReadFile(moved); err != nil || string(b) != "data" {
		return fmt.Errorf("read back %q: %v", b, err)
	}
	if err := os.Remove(moved); err != nil {
		return err
	}

	out, err := exec.Command("/bin/echo", "hi").Output()
	if err != nil || string(out) != "hi\n" {
		return fmt.Errorf("exec /bin/echo: %q, %v", out, err)
	}
	return nil
}

// casePrograms runs ordinary programs as uid 1000 under the filter.
func casePrograms() error {
	dir, err := probeDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := apply(); err != nil {
		return err
	}
	run := func(argv ...string) error {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = credential(userID)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%q as uid %d: %v\n%s", argv, userID, err, out)
		}
		return nil
	}
	errs := []error{
		run("/bin/sh", "-c", `set -e
echo hello > f; grep -q hello f
mkdir d; mv f d/g; test -f d/g; rm -r d
mkfifo p; test -p p; rm p
test -n "$(ls /)"
(sleep 0 &) ; wait`),
		run("/bin/ls", "-la", "/", "/proc/self/"),
		run("/bin/cat", "/etc/os-release", "/proc/self/status"),
		probeExpect(userID, "probe-program", kv("program", "ok")),
	}
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err == nil {
		errs = append(errs, run(python, "-c", `
import multiprocessing, os, socket, sqlite3, ssl, subprocess, threading, hashlib
t = threading.Thread(target=lambda: None); t.start(); t.join()
subprocess.run(["/bin/true"], check=True)
with multiprocessing.Pool(2) as p: assert p.map(abs, [-1, -2]) == [1, 2]
a, b = socket.socketpair(); a.sendall(b"x"); assert b.recv(1) == b"x"
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); s.close()
socket.getaddrinfo("localhost", 80, flags=socket.AI_ADDRCONFIG)
assert socket.if_nameindex()
os.mkfifo("fifo"); os.remove("fifo")
sqlite3.connect(":memory:").execute("select 1")
hashlib.sha256(b"x").hexdigest(); ssl.create_default_context()
`))
	}
	return errors.Join(errs...)
}

// casePandas imports pandas and numpy and computes something under the
// filter, as the sandbox's Python kernels do.
func casePandas() error {
	const python = "/usr/bin/python3"
	check := exec.Command(python, "-c", "import pandas")
	check.SysProcAttr = credential(userID)
	if out, err := check.CombinedOutput(); err != nil {
		return skipf("pandas cannot be imported by %s on this host (install python3-pandas): %v %s", python, err, bytes.TrimSpace(out))
	}
	if err := apply(); err != nil {
		return err
	}
	cmd := exec.Command(python, "-c", `
import numpy as np, pandas as pd
df = pd.DataFrame(np.arange(4000.0).reshape(1000, 4), columns=list("abcd"))
print(df.describe().shape, int(df.groupby(df.a % 3).b.sum().sum()))`)
	cmd.SysProcAttr = credential(userID)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "(8, 4) 1999000" {
		return fmt.Errorf("pandas as uid %d: %v\n%s", userID, err, out)
	}
	return nil
}

// caseBuild hardens as a build agent does and runs what build steps run as
// root: useradd (which aborts when the audit socket fails with EPERM rather
// than EAFNOSUPPORT) and chown; chroot stays refused.
func caseBuild() error {
	useradd, err := exec.LookPath("/usr/sbin/useradd")
	if err != nil {
		return skipf("useradd is not installed: %v", err)
	}
	// useradd resets the new uid's lastlog and faillog entries: keep the
	// host's out of reach (the child has a mount namespace of its own).
	if err := unix.Mount("tmpfs", "/var/log", "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("tmpfs over /var/log: %w", err)
	}
	prefix, err := os.MkdirTemp("", "forkbox-harden-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(prefix)
	if err := os.Mkdir(filepath.Join(prefix, "etc"), 0o755); err != nil {
		return err
	}
	for _, name := range []string{"passwd", "group", "shadow", "gshadow"} {
		if err := copyFile(filepath.Join("/etc", name), filepath.Join(prefix, "etc", name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	owned := filepath.Join(prefix, "owned")
	if err := os.WriteFile(owned, nil, 0o644); err != nil {
		return err
	}

	if err := ApplyKeeping(BuildCaps); err != nil {
		return fmt.Errorf("ApplyKeeping(BuildCaps): %w", err)
	}
	var errs []error
	// A build step: root, with the bounding set's capabilities.
	out, err := exec.Command(useradd, "--prefix", prefix, "--uid", "4242", "fbxbuild").CombinedOutput()
	if err != nil {
		errs = append(errs, fmt.Errorf("useradd as root under the build filter: %v\n%s", err, out))
	} else if b, err := os.ReadFile(filepath.Join(prefix, "etc", "passwd")); err != nil || !strings.Contains(string(b), "\nfbxbuild:x:4242:") {
		errs = append(errs, fmt.Errorf("useradd succeeded but the user is not in the copied passwd (%v)", err))
	}
	if out, err := exec.Command("/bin/chown", "1000:1000", owned).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("chown as root under the build filter: %v\n%s", err, out))
	} else if fi, err := os.Stat(owned); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		errs = append(errs, fmt.Errorf("chown did not change the owner (%v)", err))
	}
	errs = append(errs, probeExpect(0, "probe-build", kv("chroot", "EPERM", "cap_chown", "true", "cap_sys_chroot", "true", "cap_sys_admin", "false")))
	return errors.Join(errs...)
}

// buildProbe reports what a build step sees: chroot's result and some of
// its capabilities.
func buildProbe() string {
	has := func(c int) string {
		ok, err := hasCap(c)
		if err != nil {
			return result(err)
		}
		return strconv.FormatBool(ok)
	}
	return "chroot=" + result(unix.Chroot("/")) +
		" cap_chown=" + has(unix.CAP_CHOWN) + " cap_sys_chroot=" + has(unix.CAP_SYS_CHROOT) +
		" cap_sys_admin=" + has(unix.CAP_SYS_ADMIN)
}

// words renders results as the key=value words probes print.
func words(m map[string]string) string {
	var w []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		w = append(w, k+"="+m[k])
	}
	return strings.Join(w, " ")
}

// --- the filter's cost ---

const benchPrefix = "bench:"

// benchCalls are the calls BenchmarkFilter times: one the kernel's cache
// allows without running the filter, one whose arguments the filter checks,
// one it refuses.
var benchCalls = map[string][4]uintptr{
	"getpid":      {unix.SYS_GETPID},
	"personality": {unix.SYS_PERSONALITY, 0xffffffff},
	"keyctl":      {unix.SYS_KEYCTL, ^uintptr(0)},
}

// BenchmarkFilter times calls in a child, with and without the filter, in
// the thread's CPU time (the machine may be busy).
func BenchmarkFilter(b *testing.B) {
	requireRoot(b)
	bin := filepath.Join(helperDir(b), helper)
	for _, name := range slices.Sorted(maps.Keys(benchCalls)) {
		for _, filtered := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/filter=%t", name, filtered), func(b *testing.B) {
				cmd := exec.Command(bin, "-test.run=^TestHelperProcess$", "-test.count=1")
				cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s%s:%d:%t", envCase, benchPrefix, name, b.N, filtered))
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("%v\n%s", err, out)
				}
				for line := range strings.Lines(string(out)) {
					if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ns="); ok {
						ns, err := strconv.ParseFloat(v, 64)
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(ns/float64(b.N), "ns/op")
						return
					}
				}
				b.Fatalf("no result in %s", out)
			})
		}
	}
}

// benchChild runs a benchmark in the child: bench:<call>:<n>:<filtered>.
func benchChild(spec string) {
	parts := strings.Split(strings.TrimPrefix(spec, benchPrefix), ":")
	n, err := strconv.Atoi(parts[1])
	c, ok := benchCalls[parts[0]]
	if err != nil || !ok || len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "bad benchmark %q\n", spec)
		os.Exit(2)
	}
	runtime.LockOSThread()
	if parts[2] == "true" {
		if err := Apply(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	var t0, t1 unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t0)
	for range n {
		unix.RawSyscall(c[0], c[1], c[2], c[3])
	}
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t1)
	fmt.Printf("ns=%d\n", t1.Nano()-t0.Nano())
	os.Exit(0)
}

// testFilter is the filter built live from Docker's profile, with its
// policy, for the tests that look inside it.
type testFilterProgram struct {
	policy *policy
	prog   []unix.SockFilter
}

func testFilter() (*testFilterProgram, error) {
	pol, err := forkboxPolicy()
	if err != nil {
		return nil, err
	}
	prog, err := pol.program()
	if err != nil {
		return nil, err
	}
	return &testFilterProgram{policy: pol, prog: prog}, nil
}
