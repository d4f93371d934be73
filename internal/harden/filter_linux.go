package harden

import "golang.org/x/sys/unix"

// filterProgram is the assembled seccomp filter and the calls it allows.
type filterProgram struct {
	prog  []unix.SockFilter
	names []string // allowed for some arguments at least, sorted
}

//go:generate go run ./gen -o zfilter_linux_amd64.go
