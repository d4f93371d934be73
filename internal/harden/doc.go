// Package harden locks down the forkbox agent, and so everything it starts,
// before the agent serves a sandbox's requests.
//
// The agent runs as PID 1 and root of the sandbox (no user namespace), in its
// own mount, PID, network, IPC, UTS and cgroup namespaces after pivot_root. It
// calls [Apply] once, on itself, before it accepts any request. Apply is
// irreversible and covers every thread of the process; the agent keeps the
// capabilities it already has (it still starts children as uid 1000, kills
// them, chowns their files), while every process it starts afterwards
// inherits:
//
//   - no_new_privs, so no setuid/setgid binary or file capability can raise
//     privileges again;
//   - an empty capability bounding set and empty inheritable and ambient
//     sets, so an exec'd program gets no capabilities even when it runs as
//     uid 0 (children started as uid 1000 lose the rest on setuid anyway);
//   - a seccomp filter, a deny-list whose refused calls return EPERM and
//     that allows everything else (see [Denied]).
//
// # The seccomp filter
//
// The filter is about 130 classic-BPF instructions written with
// golang.org/x/sys/unix rather than built with a seccomp library:
// go-seccomp-bpf sends calls of a foreign architecture to the default action,
// which for a deny-list is "allow", so an i386 `int 0x80` would skip every
// rule; the hand-written program is short enough to read in one go and the
// binary stays pure Go (CGO_ENABLED=0, no libseccomp).
//
// Beyond the unconditional list that [Denied] returns it decides:
//
//   - i386 calls (`int 0x80` from a 64-bit process, or a 32-bit program):
//     the process is killed (SIGSYS). Nothing in a sandbox needs them and a
//     32-bit program cannot work without system calls anyway.
//   - x32 calls (bit 0x40000000 in the number): ENOSYS, which is what
//     kernels without CONFIG_X86_X32_ABI answer anyway.
//   - clone: EPERM when its flags (argument 0 on x86_64) contain any of
//     CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC,
//     CLONE_NEWUTS or CLONE_NEWCGROUP; any other clone is allowed, in
//     particular Go's CLONE_VFORK|CLONE_VM|CLONE_PIDFD.
//   - clone3: ENOSYS. Its flags live in memory that seccomp cannot read, so
//     it is refused as "not implemented": glibc (pthread_create, posix_spawn)
//     and Go then fall back to clone, whose flags the filter checks. Go only
//     uses clone3 for SysProcAttr.UseCgroupFD and CLONE_NEWTIME, which fail
//     after Apply; the agent must not use them. unshare (also refused)
//     covers CLONE_NEWTIME the other way.
//   - personality: allowed only for the values Docker's default profile
//     allows: 0 (PER_LINUX), 0x8 (PER_LINUX32), 0x20000 (UNAME26), 0x20008
//     and 0xffffffff (query). Other flags (ADDR_NO_RANDOMIZE,
//     READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, ...) weaken memory protections and
//     have been the way into several kernel bugs.
//
// Judgement calls in the deny-list:
//
//   - chroot is refused although it needs CAP_SYS_CHROOT: user code has no
//     capabilities anyway, no program in a sandbox needs it, and it closes
//     the path for the agent should it ever be tricked into calling it.
//   - userfaultfd is refused: it exists mainly to stretch kernel race
//     windows in exploits, nothing in a sandbox needs it, and CRIU's lazy
//     restore does not run under this filter (CRIU works from the host and
//     reinstalls a restored task's seccomp filter only at the end of the
//     restore). The runtime must not expose /dev/userfaultfd either.
//   - pidfd_getfd joins ptrace and process_vm_readv/writev: all three reach
//     into another process's memory or files.
//   - io_uring_setup, io_uring_enter and io_uring_register are refused: a
//     large and bug-rich kernel surface that Docker's default profile also
//     refuses; libuv, liburing users and the like fall back to threads.
//   - quotactl_fd and open_tree_attr join quotactl and the rest of the new
//     mount API.
//   - lookup_dcookie, nfsservctl and uselib no longer exist in current
//     kernels (or need config options); they stay on the list for kernels
//     where they do.
//
// Apply uses syscall.AllThreadsSyscall for the per-thread capability and
// no_new_privs state and SECCOMP_FILTER_FLAG_TSYNC for the filter, so it
// needs a binary built without cgo (as forkbox is); in a cgo binary it
// returns an error before changing anything.
package harden
