//go:build !forkbox_agent

package harden

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
	dockerseccomp "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// refusedBeyondDocker are calls that Docker's default profile lets a
// container without capabilities make and that forkbox refuses anyway. The
// package documentation gives the reasons.
var refusedBeyondDocker = []string{
	// Other processes' memory.
	"ptrace", "process_vm_readv", "process_vm_writev",
	// Rarely needed, and trouble for the kernel or for memory snapshots.
	"modify_ldt", "memfd_secret",
	// File handles: only useful with open_by_handle_at.
	"name_to_handle_at",
	// The clock: reading NTP state is all they can do without CAP_SYS_TIME.
	"adjtimex", "clock_adjtime",
}

// nsFlags are the clone flags that create a namespace; clone with any of
// them is refused. CLONE_NEWTIME is not among them: in clone's flags its bit
// is part of the exit signal, and it can only be asked for with clone3 or
// unshare, which are both refused.
const nsFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
	unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP

// allowedPersonalities are the personality(2) arguments the filter lets
// through, the values Docker's default profile allows.
var allowedPersonalities = []uint32{
	0x0,        // PER_LINUX
	0x0008,     // PER_LINUX32
	0x20000,    // UNAME26
	0x20008,    // UNAME26 | PER_LINUX32
	0xffffffff, // query the current personality
}

// devBit is the bit of a mode's file type (S_IFMT) that every character
// (S_IFCHR 0020000) and block (S_IFBLK 0060000) device has and that none of
// the types mknod may create without a capability has: regular files (0 or
// S_IFREG 0100000), FIFOs (S_IFIFO 0010000) and sockets (S_IFSOCK 0140000).
// The other types with the bit (S_IFLNK 0120000 and undefined ones) make
// mknod fail with EINVAL anyway, so refusing them changes only the errno.
const devBit = unix.S_IFCHR

// A profile is Docker's default seccomp profile evaluated for one
// architecture and capability set, sorted by what the filter does with
// each name.
type profile struct {
	allow map[string]bool                 // allowed whatever the arguments
	args  map[string][]specs.LinuxSyscall // allowed when one of these rules' conditions hold
	errno map[string]syscall.Errno        // refused with this errno
	other []string                        // calls of other ABIs, skipped
}

// dockerProfile evaluates Docker's default profile the way Docker does for
// a container whose bounding set holds caps (names such as "CAP_CHOWN"):
// github.com/moby/profiles/seccomp keeps the rules whose includes and
// excludes match runtime.GOARCH, the running kernel's version and caps.
// Names are checked against this architecture's table; rules the filter
// cannot express are errors rather than dropped.
func dockerProfile(caps []string) (*profile, error) {
	spec := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: caps}}}
	sc, err := dockerseccomp.GetDefaultProfile(spec)
	if err != nil {
		return nil, fmt.Errorf("evaluate Docker's default seccomp profile: %w", err)
	}
	if sc.DefaultAction != specs.ActErrno || sc.DefaultErrnoRet != nil && *sc.DefaultErrnoRet != uint(unix.EPERM) {
		return nil, fmt.Errorf("the Docker default seccomp profile refuses with %s (errno %v); harden only implements EPERM", sc.DefaultAction, sc.DefaultErrnoRet)
	}
	p := &profile{allow: map[string]bool{}, args: map[string][]specs.LinuxSyscall{}, errno: map[string]syscall.Errno{}}
	for _, rule := range sc.Syscalls {
		for _, name := range rule.Names {
			if _, ok := nativeCalls.SyscallNames[name]; !ok {
				if !otherABICall(name) {
					return nil, fmt.Errorf("the Docker default seccomp profile names %q, which is no %s system call go-seccomp-bpf knows: update its tables, or list the name in otherArchCalls if it belongs to another architecture", name, nativeCalls.Name)
				}
				p.other = append(p.other, name)
				continue
			}
			switch {
			case rule.Action == specs.ActAllow && len(rule.Args) == 0:
				p.allow[name] = true
			case rule.Action == specs.ActAllow:
				p.args[name] = append(p.args[name], rule)
			case rule.Action == specs.ActErrno && len(rule.Args) == 0:
				e := unix.EPERM
				if rule.ErrnoRet != nil {
					e = syscall.Errno(*rule.ErrnoRet)
				}
				if e == 0 || e > 4095 {
					return nil, fmt.Errorf("the Docker default seccomp profile refuses %s with errno %d, which seccomp cannot return", name, e)
				}
				p.errno[name] = e
			default:
				return nil, fmt.Errorf("the Docker default seccomp profile has a %s rule for %s with %d argument conditions; harden implements only allow rules and unconditional errno rules", rule.Action, name, len(rule.Args))
			}
		}
	}
	// An unconditional allow makes argument rules for the same call moot,
	// as in libseccomp; a call both allowed and refused is ambiguous.
	for name := range p.allow {
		delete(p.args, name)
	}
	for name := range p.errno {
		if p.allow[name] || p.args[name] != nil {
			return nil, fmt.Errorf("the Docker default seccomp profile both allows and refuses %s", name)
		}
	}
	slices.Sort(p.other)
	p.other = slices.Compact(p.other)
	return p, nil
}

func otherABICall(name string) bool {
	if slices.Contains(otherArchCalls, name) {
		return true
	}
	for _, a := range otherABIs {
		if _, ok := a.SyscallNames[name]; ok {
			return true
		}
	}
	return false
}

// A target is where an argument check jumps to.
type target uint8

const (
	next    target = iota // the following step
	toAllow               // the rule's SECCOMP_RET_ALLOW
	toDeny                // the rule's errno
)

// A step of an argument rule: either a load of the low 32 bits of an
// argument into the accumulator, or a conditional jump on it.
type step struct {
	load   bool
	arg    int
	op     uint16 // unix.BPF_JEQ or unix.BPF_JSET
	k      uint32
	jt, jf target
}

func loadArg(i int) step { return step{load: true, arg: i} }

func jeq(k uint32, jt, jf target) step { return step{op: unix.BPF_JEQ, k: k, jt: jt, jf: jf} }

func jset(k uint32, jt, jf target) step { return step{op: unix.BPF_JSET, k: k, jt: jt, jf: jf} }

// An argRule allows a call for some arguments and refuses it with deny for
// the others. Only the low 32 bits of an argument are compared: every
// checked argument is an int, unsigned int or umode_t to the kernel, or
// (clone's flags) an unsigned long whose high half the kernel ignores, so
// the high half cannot change what the kernel does.
type argRule struct {
	name  string
	nr    uint32
	deny  syscall.Errno
	steps []step
}

// argRules are the hand-written argument checks. The package documentation
// explains each, and why go-seccomp-bpf does not assemble them.
func argRules() []argRule {
	personality := []step{loadArg(0)}
	for i, v := range allowedPersonalities {
		jf := next
		if i == len(allowedPersonalities)-1 {
			jf = toDeny
		}
		personality = append(personality, jeq(v, toAllow, jf))
	}
	return []argRule{
		// First: clone starts every thread and process, the most frequent
		// of these calls.
		{"clone", unix.SYS_CLONE, unix.EPERM, []step{
			loadArg(cloneFlagsArg),
			jset(nsFlags, toDeny, toAllow),
		}},
		{"socket", unix.SYS_SOCKET, unix.EAFNOSUPPORT, []step{
			loadArg(0),
			jeq(unix.AF_UNIX, toAllow, next),
			jeq(unix.AF_INET, toAllow, next),
			jeq(unix.AF_INET6, toAllow, next),
			jeq(unix.AF_NETLINK, next, toDeny),
			loadArg(2),
			jeq(unix.NETLINK_ROUTE, toAllow, toDeny),
		}},
		{"socketpair", unix.SYS_SOCKETPAIR, unix.EAFNOSUPPORT, []step{
			loadArg(0),
			jeq(unix.AF_UNIX, toAllow, toDeny),
		}},
		{"personality", unix.SYS_PERSONALITY, unix.EPERM, personality},
		{"mknod", unix.SYS_MKNOD, unix.EPERM, []step{
			loadArg(1),
			jset(devBit, toDeny, toAllow),
		}},
		{"mknodat", unix.SYS_MKNODAT, unix.EPERM, []step{
			loadArg(2),
			jset(devBit, toDeny, toAllow),
		}},
	}
}

// assemble returns the rule as a block that starts by comparing the call
// number in the accumulator with the rule's and skips the rest when it
// differs. Every path through the rest returns, so the accumulator still
// holds the call number for whatever follows the block.
func (r argRule) assemble() []unix.SockFilter {
	n := len(r.steps)
	// The body is the steps, then "ret deny" at n and "ret allow" at n+1.
	skip := func(i int, t target) uint8 {
		switch t {
		case toDeny:
			return uint8(n - i - 1)
		case toAllow:
			return uint8(n - i)
		}
		return 0
	}
	body := make([]unix.SockFilter, 0, n+2)
	for i, s := range r.steps {
		if s.load {
			body = append(body, load(argLow(s.arg)))
			continue
		}
		body = append(body, jump(s.op, s.k, skip(i, s.jt), skip(i, s.jf)))
	}
	body = append(body, ret(errno(r.deny)), ret(unix.SECCOMP_RET_ALLOW))
	return append([]unix.SockFilter{jump(unix.BPF_JEQ, r.nr, 0, uint8(len(body)))}, body...)
}

// A policy is what the filter decides, ready to be assembled.
type policy struct {
	allow []string                   // allowed whatever the arguments, sorted
	rules []argRule                  // argument checks
	errno map[syscall.Errno][]string // refused with an errno other than the default EPERM
}

// forkboxPolicy is Docker's default profile for a container without
// capabilities, minus refusedBeyondDocker, with the argument rules of
// argRules instead of the profile's own. An argument rule applies only to a
// call the profile allows in some form; a call the profile allows only for
// some arguments and that has no rule in argRules is an error.
func forkboxPolicy() (*policy, error) {
	p, err := dockerProfile(nil)
	if err != nil {
		return nil, err
	}
	allow := maps.Clone(p.allow)
	for _, name := range refusedBeyondDocker {
		delete(allow, name)
	}
	pol := &policy{errno: map[syscall.Errno][]string{}}
	for _, r := range argRules() {
		if nr, ok := nativeCalls.SyscallNames[r.name]; !ok || uint32(nr) != r.nr {
			return nil, fmt.Errorf("the argument rule for %s has call number %d, go-seccomp-bpf's table %d", r.name, r.nr, nr)
		}
		if !allow[r.name] && p.args[r.name] == nil {
			continue // Docker refuses it outright; so does the default.
		}
		delete(allow, r.name)
		pol.rules = append(pol.rules, r)
	}
	for name := range p.args {
		if !slices.ContainsFunc(pol.rules, func(r argRule) bool { return r.name == name }) {
			return nil, fmt.Errorf("the Docker default seccomp profile allows %s for some arguments only, and harden has no argument rule for it", name)
		}
	}
	pol.allow = slices.Sorted(maps.Keys(allow))
	for name, e := range p.errno {
		pol.errno[e] = append(pol.errno[e], name)
	}
	for _, names := range pol.errno {
		slices.Sort(names)
	}
	return pol, nil
}

// names returns, sorted, every call the policy allows for some arguments.
func (p *policy) names() []string {
	names := slices.Clone(p.allow)
	for _, r := range p.rules {
		names = append(names, r.name)
	}
	slices.Sort(names)
	return names
}

// program assembles the filter:
//
//  1. The architecture check: a call of any other architecture than the
//     native one (i386 from int 0x80 or a 32-bit program) kills the process.
//     go-seccomp-bpf's own check sends such calls to the default action, which
//     is EPERM here and would let a 32-bit program run on, refused.
//  2. The hand-written argument rules, each a block that returns.
//  3. go-seccomp-bpf's program for the calls decided by number alone: x32
//     calls get ENOSYS, the allowed calls are allowed, the calls with an
//     errno of the profile's (clone3) get it, and everything else EPERM.
//     Its architecture check repeats ours and always passes.
//
// Nothing in 1 or 3 reads an argument, so the kernel (since 5.11) caches
// "allow" for every call allowed whatever its arguments and runs the
// program only for the argument-checked and the refused calls.
func (p *policy) program() ([]unix.SockFilter, error) {
	prog := []unix.SockFilter{
		load(offArch),
		jump(unix.BPF_JEQ, auditArch, 1, 0),
		ret(unix.SECCOMP_RET_KILL_PROCESS),
		load(offNR),
	}
	for _, r := range p.rules {
		prog = append(prog, r.assemble()...)
	}

	groups := []seccomp.SyscallGroup{{Names: p.allow, Action: seccomp.ActionAllow}}
	for _, e := range slices.Sorted(maps.Keys(p.errno)) {
		// go-seccomp-bpf returns a group's action as it is, except the
		// bare ActionErrno, which it turns into EPERM; ActionErrno|e is
		// never bare because e is not 0.
		groups = append(groups, seccomp.SyscallGroup{Names: p.errno[e], Action: seccomp.ActionErrno | seccomp.Action(e)})
	}
	byNumber := seccomp.Policy{DefaultAction: seccomp.ActionErrno, Syscalls: groups}
	insns, err := byNumber.Assemble()
	if err != nil {
		return nil, fmt.Errorf("harden: assemble the seccomp filter: %w", err)
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, fmt.Errorf("harden: assemble the seccomp filter: %w", err)
	}
	for _, in := range raw {
		prog = append(prog, unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K})
	}
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("harden: the seccomp filter has %d instructions, the kernel takes at most %d", len(prog), unix.BPF_MAXINSNS)
	}
	return prog, nil
}

// liveFilter builds the policy and its program from Docker's profile (see
// compiledFilter for when a binary uses it).
var liveFilter = sync.OnceValues(func() (*filterProgram, error) {
	pol, err := forkboxPolicy()
	if err != nil {
		return nil, fmt.Errorf("harden: %w", err)
	}
	prog, err := pol.program()
	if err != nil {
		return nil, err
	}
	return &filterProgram{prog: prog, names: pol.names()}, nil
})

// Offsets into struct seccomp_data.
const (
	offNR   = 0  // int nr
	offArch = 4  // __u32 arch
	offArgs = 16 // __u64 args[6], after __u64 instruction_pointer
)

// argLow is the offset of the low 32 bits of argument i (little-endian).
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
