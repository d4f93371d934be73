//go:build !forkbox_agent

package harden

import "github.com/elastic/go-seccomp-bpf/arch"

// nativeCalls is go-seccomp-bpf's table of this architecture's system
// calls: it turns the profile's names into numbers. Docker's profile is
// evaluated for the same architecture, because github.com/moby/profiles
// picks its architecture rules by runtime.GOARCH.
var nativeCalls = arch.X86_64

// otherABIs are the system call tables of the ABIs the filter does not
// serve (i386 calls kill the process, x32 calls get ENOSYS). A name of
// Docker's profile that this architecture lacks is skipped only when one of
// these tables has it (chown32, socketcall, _llseek, the *_time64 calls, …);
// any other unknown name is an error, so a call the tables do not know yet
// cannot silently drop out of the filter.
var otherABIs = []*arch.Info{arch.I386, arch.X32, arch.ARM, arch.AARCH64}

// otherArchCalls are names of Docker's profile that belong to architectures
// go-seccomp-bpf has no tables for, and that the profile lists for every
// architecture.
var otherArchCalls = []string{"riscv_hwprobe"}
