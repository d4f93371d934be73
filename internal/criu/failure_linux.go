package criu

import (
	"slices"
	"strings"
	"syscall"

	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/textcut"
)

// Failure is a CRIU run that failed, told two ways: its Error is one short
// line a client may read (what failed and CRIU's first error message); Log
// is what CRIU's log said (its error lines), which belongs in the daemon's
// log only: the caller logs it, with the sandbox's id, and never puts it in
// an answer.
type Failure struct {
	// What failed: "CRIU could not dump the processes of sandbox sbx_…".
	What string
	// Reason is CRIU's first error message (without its source location),
	// or, when CRIU gave none, how the conversation with it failed.
	Reason string
	// Log holds the error lines of CRIU's log ("" when it wrote none).
	Log string
	// Errno is the errno CRIU reported (0: none).
	Errno int
	// Err is the underlying error (an exit status, a context's end).
	Err error
}

// maxReason bounds the part of CRIU's message a client sees.
const maxReason = 300

func (f *Failure) Error() string {
	s := f.What
	if f.Reason != "" {
		s += ": " + textcut.Prefix(f.Reason, maxReason)
	}
	if f.Log != "" {
		s += " (CRIU's log is in the daemon's log)"
	}
	return s
}

func (f *Failure) Unwrap() error { return f.Err }

// NoSpace says whether CRIU failed for want of disk space: its errno or a
// message of its log says so.
func (f *Failure) NoSpace() bool {
	return f.Errno == int(syscall.ENOSPC) || f.Errno == int(syscall.EDQUOT) ||
		diskspace.InOutput(f.Reason) || diskspace.InOutput(f.Log)
}

// Reason returns a message of CRIU's log ("Error (criu/cr-dump.c:2093):
// Dumping FAILED.") without its level and source location, on one line.
func Reason(msg string) string {
	msg = strings.TrimSpace(logPrefix.ReplaceAllString(strings.TrimSpace(msg), ""))
	return strings.Join(strings.Fields(msg), " ")
}

// benign are messages CRIU logs as errors and then goes on (this VM
// refuses CRIU's raising of its own open-file limit, say): never the
// reason a run failed.
var benign = []string{"Can't setup RLIMIT_NOFILE"}

// generic are the last words of a failed run, which say nothing of why.
var generic = []string{"Dumping FAILED.", "Restoring FAILED.", "Lazy pages FAILED."}

// FailureReason returns the error message of CRIU's output or log that says
// best why the run failed: the first one that is neither benign nor
// generic, else the first, without its level and source location; "" when
// there is none.
func FailureReason(out []byte) string {
	first := ""
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "Error") {
			continue
		}
		msg := Reason(line)
		if first == "" {
			first = msg
		}
		if !slices.ContainsFunc(benign, func(b string) bool { return strings.Contains(msg, b) }) && !slices.Contains(generic, msg) {
			return msg
		}
	}
	return first
}
