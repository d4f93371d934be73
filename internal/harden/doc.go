// Package harden locks down the forkbox agent, and so everything it starts,
// before the agent serves a sandbox's requests.
//
// The agent runs as PID 1 and root of the sandbox's user namespace (an
// unprivileged host id), in its own mount, PID, network, IPC, UTS and cgroup
// namespaces after pivot_root. It calls [Apply] (or [ApplyKeeping] for a
// build) once, on itself, before it accepts any request. Apply is
// irreversible and covers every thread of the process; the agent then drops
// its own capabilities to what starting and signalling user processes needs
// (internal/agent/server), while every process it starts afterwards inherits:
//
//   - no_new_privs, so no setuid/setgid binary or file capability can raise
//     privileges again;
//   - an empty capability bounding set and empty inheritable and ambient
//     sets, so an exec'd program gets no capabilities even when it runs as
//     uid 0 (children started as uid 1000 lose the rest on setuid anyway);
//   - a seccomp filter that allows a fixed list of system calls (see
//     [Allowed]) and refuses every other with EPERM, including calls that
//     future kernels add.
//
// # What the filter allows
//
// The allowed set is what Docker's default seccomp profile allows a
// container without capabilities on amd64, taken from
// github.com/moby/profiles/seccomp (at run time by the full forkbox binary;
// assembled ahead, by `go generate`, into zfilter_linux_amd64.go for the
// agent binary, built with the forkbox_agent tag, which then links neither
// library nor pays their initialisation at every sandbox start;
// TestGeneratedFilterIsCurrent keeps the two the same), whose GetDefaultProfile evaluates the
// profile's includes and excludes exactly as Docker does, here for
// runtime.GOARCH (amd64), the running kernel's version and an empty
// capability set. Of the result harden takes the unconditional allow rules,
// the errno rules (clone3 gets ENOSYS, as the profile says) and the names of
// the calls the profile allows for some arguments, whose conditions harden
// replaces with its own (below; the tests check that none of them lets
// through anything the profile's conditions refuse). Names that exist only
// in other ABIs (chown32, socketcall, the *_time64 calls, riscv_hwprobe, …)
// are skipped; a name nobody knows, an action other than allow or errno, or
// argument conditions on a call harden has no rule for are errors, so a new
// profile cannot silently lose or widen rules.
//
// Where the filter differs from Docker's:
//
//   - i386 calls (`int 0x80` from a 64-bit process, or a 32-bit program)
//     kill the process (SIGSYS) instead of being filtered by a second,
//     32-bit profile: nothing in a sandbox needs them, and a 32-bit program
//     cannot work without system calls anyway. This also closes the
//     socketcall path around the socket rules that Docker's profile notes
//     for 32-bit x86.
//   - x32 calls (bit 0x40000000 in the number) get ENOSYS, which is what
//     kernels without CONFIG_X86_X32_ABI answer anyway.
//   - ptrace, process_vm_readv and process_vm_writev are refused (Docker
//     allows them on kernels since 4.8): they reach into another process's
//     memory, and ptrace has a long record of kernel bugs. Debuggers and
//     strace do not work in a sandbox. pidfd_getfd, kcmp and
//     process_madvise, which Docker allows only with CAP_SYS_PTRACE, stay
//     refused with them.
//   - modify_ldt is refused (Docker allows it on x86): it serves 16-bit code
//     and Wine, has been the way into several kernel bugs, and kernels can
//     be built without it, so programs must cope with its failure anyway.
//   - memfd_secret is refused (Docker allows it): its pages leave the
//     kernel's direct map, so no one, CRIU included, can read them, and a
//     memory snapshot of a sandbox using it would fail.
//   - name_to_handle_at is refused (Docker allows it): a file handle is only
//     good for open_by_handle_at, which needs CAP_DAC_READ_SEARCH and was
//     the way out of early Docker containers; programs that use it to spot
//     mount points fall back to other means.
//   - adjtimex and clock_adjtime are refused (Docker allows them): without
//     CAP_SYS_TIME they can only read NTP state, which nothing in a sandbox
//     needs; the deny-list before this filter refused them too.
//   - socket is allowed only for AF_UNIX, AF_INET, AF_INET6, and AF_NETLINK
//     with protocol NETLINK_ROUTE (Docker allows every family the kernel
//     has but AF_ALG and AF_VSOCK). Route netlink is what getaddrinfo
//     (AI_ADDRCONFIG), getifaddrs, if_nameindex and Go's net.Interfaces
//     read; it is read-only in effect, because changing a link, address or
//     route needs CAP_NET_ADMIN, which user code never has. Every other
//     family (AF_VSOCK, which is not network-namespaced and reaches the
//     host; AF_PACKET; AF_ALG; rarely used protocols whose modules a socket
//     call would load) and every other netlink protocol (audit, uevents,
//     sock_diag, generic, …) fails with EAFNOSUPPORT, the kernel's answer
//     for a family it was built without. Programs probe families and take that answer as "not
//     here": libaudit, and so useradd, groupadd and passwd, carry on
//     without auditing on EAFNOSUPPORT but abort on EPERM, which would break
//     image builds. socketpair is allowed only for AF_UNIX (the only family
//     the kernel supports it for), other families get EAFNOSUPPORT too.
//     io_uring, which could create sockets without the socket call, is
//     refused.
//   - mknod and mknodat are refused with EPERM when the mode's file type is
//     a character or block device (Docker allows both calls and leaves
//     devices to CAP_MKNOD). The agent is root with every capability,
//     CAP_MKNOD included, so without this rule an agent tricked into it
//     could make a node for a host disk and read it. The rule
//     tests one bit of the type, 0020000, which both device types have and
//     regular files, FIFOs and sockets do not, so mkfifo works; the other
//     types with that bit (S_IFLNK and undefined ones) fail with EINVAL
//     without the filter. Overlay whiteouts (a character device 0:0, which
//     kernels since 5.8 let anyone make) are refused too; nothing in a
//     sandbox can mount an overlay.
//
// And as in Docker's profile for a container without capabilities:
//
//   - clone: EPERM when its flags (argument 0 on x86_64) contain any of
//     CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC,
//     CLONE_NEWUTS or CLONE_NEWCGROUP; any other clone is allowed, in
//     particular Go's CLONE_VFORK|CLONE_VM|CLONE_PIDFD.
//   - clone3: ENOSYS. Its flags live in memory that seccomp cannot read, so
//     it is refused as "not implemented": glibc (pthread_create, posix_spawn)
//     and Go then fall back to clone, whose flags the filter checks. Go only
//     uses clone3 for SysProcAttr.UseCgroupFD and CLONE_NEWTIME, which fail
//     after Apply; the agent must not use them. unshare and setns are
//     refused (Docker allows them only with CAP_SYS_ADMIN).
//   - personality: allowed only for 0 (PER_LINUX), 0x8 (PER_LINUX32),
//     0x20000 (UNAME26), 0x20008 and 0xffffffff (query). Other flags
//     (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, ...) weaken
//     memory protections and have been the way into several kernel bugs.
//   - refused because Docker allows them only with a capability that no
//     process in a sandbox has or may use: mount and the new mount API
//     (fsopen, fsconfig, fsmount, fspick, move_mount, open_tree,
//     mount_setattr), umount2, chroot, quotactl, quotactl_fd,
//     open_by_handle_at, bpf, perf_event_open, fanotify_init, syslog,
//     lookup_dcookie, the module calls, reboot, acct, iopl, ioperm,
//     settimeofday, clock_settime, vhangup, mbind, set_mempolicy,
//     get_mempolicy and set_mempolicy_home_node (libnuma takes the failure
//     for "no NUMA"), sethostname, setdomainname and the lsm_* calls.
//   - refused because Docker does not allow them at all: keyctl, add_key
//     and request_key (the keyrings are not namespaced), userfaultfd (it
//     exists mainly to stretch kernel race windows in exploits; CRIU's
//     lazy restore does not run under this filter), io_uring_setup,
//     io_uring_enter and io_uring_register (a large, bug-rich surface;
//     libuv and others fall back to threads), pivot_root, kexec_load,
//     kexec_file_load, migrate_pages, move_pages, swapon, swapoff, uselib,
//     nfsservctl, open_tree_attr and every call newer than the profile.
//
// Everything the deny-list this filter replaced refused stays refused.
//
// # Builds
//
// [ApplyKeeping] with [BuildCaps] installs the same filter. Docker's profile
// evaluated for those capabilities allows exactly one call more, chroot
// (with CAP_SYS_CHROOT): chown, fchown, setuid, setgid, setgroups, capset
// and the rest that apt, dpkg, useradd and chown need are allowed to
// everyone, and the capabilities, not the filter, decide whether they
// succeed. chroot stays refused: no build step forkbox runs needs it, and
// the build agent itself holds CAP_SYS_CHROOT. A test checks that the
// difference stays chroot alone, so a profile that ever gates something
// builds need behind one of BuildCaps shows up there. With audit netlink
// refused, CAP_AUDIT_WRITE in BuildCaps has nothing left to do.
//
// # How the program is built
//
// The binary stays pure Go (CGO_ENABLED=0, no libseccomp).
// github.com/elastic/go-seccomp-bpf turns names into x86_64 numbers and
// assembles the calls decided by number alone (its x32 check, the allowed
// list, clone3's ENOSYS, the EPERM default). It does not assemble the rest,
// for two reasons:
//
//   - its architecture check sends a call of a foreign architecture to the
//     default action, which is EPERM here: an i386 program would run on,
//     refused. The filter therefore starts with its own check, which kills
//     the process.
//   - its argument conditions load the argument into the accumulator, and
//     when a call's conditions do not hold it goes on comparing that
//     argument, not the call number, with the numbers of the calls that
//     follow: with socket allowed for AF_INET and pread64 (number 17)
//     allowed after it, socket(AF_PACKET = 17, …) would be allowed. The six
//     argument rules are therefore hand-written classic BPF, each a block
//     that returns on every path, placed between the architecture check and
//     go-seccomp-bpf's program.
//
// Only the low 32 bits of a checked argument are compared: each is an int,
// unsigned int or umode_t to the kernel, or, for clone's flags, an unsigned
// long whose high half the kernel ignores.
//
// Nothing outside the argument rules reads an argument, so the kernel
// (since 5.11) caches "allow" for every call allowed whatever its
// arguments, and runs the program only for clone, socket, socketpair,
// personality, mknod, mknodat and refused calls.
//
// Apply uses syscall.AllThreadsSyscall for the per-thread capability and
// no_new_privs state and SECCOMP_FILTER_FLAG_TSYNC for the filter, so it
// needs a binary built without cgo (as forkbox is); in a cgo binary it
// returns an error before changing anything.
package harden
