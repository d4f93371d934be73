//go:build !forkbox_agent

package harden

// compiledFilter is the filter Apply installs. The full forkbox binary
// builds it from Docker's profile at the first Apply (about a millisecond,
// plus the profile and syscall tables' package initialisation); the agent
// binary, built with the forkbox_agent tag, carries it assembled ahead
// (zfilter_linux_amd64.go, `go generate`) and links neither library, which
// keeps them off every sandbox's start. TestGeneratedFilterIsCurrent proves
// the two are the same program.
func compiledFilter() (*filterProgram, error) { return liveFilter() }
