// Package criu finds the CRIU binary that forkbox drives for memory
// snapshots (checkpoint/restore of a sandbox's processes) and checks what it
// can do on this host.
//
// The daemon calls [Check] once at start: it locates CRIU with [Find]
// ($FORKBOX_CRIU, else /opt/forkbox/criu/sbin/criu as scripts/build-criu.sh
// installs it, else criu on PATH; version 4.2 or newer, since older CRIU
// fails on kernels >= 6.13), runs `criu check` and a few `criu check
// --feature` probes, and returns a [Host]. When the Host is not Usable,
// memory snapshots are unavailable and Problem says why in words; filesystem
// snapshots do not need CRIU. Every later dump or restore is one RPC
// conversation with `criu swrk` ([Host.StartSwrk], [Swrk.Do]), started
// through [Host.Command], which adds the environment the host needs.
//
// One such need: in some VMs (Firecracker among them) x86 hardware
// breakpoints never fire, and CRIU that relies on them hangs during dump or
// restore. `criu check` then warns "Hardware breakpoints don't seem to work",
// and Check puts CRIU_FAULT=130 in Host.Env, which makes CRIU skip
// breakpoints entirely. (CRIU 4.2.1's own probe finds this too and falls back
// without the variable; setting it whenever the warning shows costs nothing
// and does not depend on that probe.) Hosts whose breakpoints work get no
// variable.
//
// Lazy restores (lazy_linux.go): where Host.LazyPages is set, a restore
// runs `criu lazy-pages` (StartLazyPages) next to `criu restore
// --lazy-pages`, and StartSwrk hands CRIU the /dev/userfaultfd descriptor
// that forkbox's CRIU patch gives the tasks it restores into a user
// namespace.
//
// DedupPages (pages.go) rewrites a finished dump's page images so that
// pages equal to a base dump's are read from it, which CRIU's restore
// supports natively.
//
// Check caches nothing on disk itself. CRIU keeps its kernel-feature cache
// (criu.kdat) in KdatDir, as scripts/build-criu.sh builds it, and only on a
// tmpfs: Check makes KdatDir one (kdat_linux.go), so that no CRIU run after
// the first probes the kernel again.
package criu
