package criu

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

// A dump that ran out of disk space on this VM, as CRIU logged it: its
// first error is one CRIU goes on after.
const fullDiskLog = `Warn  (criu/kerndat.c:1799): CRIU was built without libnftables support
Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted
Error (criu/page-xfer.c:263): page-xfer: Unable to spice data: No space left on device
Error (criu/bfd.c:131): bfd: Error flushing image: No space left on device
Error (criu/mem.c:718): Can't dump page with parasite
Error (criu/cr-dump.c:2008): Dumping FAILED.
`

func TestFailureReason(t *testing.T) {
	for _, tc := range []struct{ log, want string }{
		{fullDiskLog, "page-xfer: Unable to spice data: No space left on device"},
		{"Error (criu/sk-unix.c:418): Unix socket 1234 without peer 5678\nError (criu/cr-dump.c:2008): Dumping FAILED.\n",
			"Unix socket 1234 without peer 5678"},
		// Nothing telling: the first error, benign or not.
		{"Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\nError (criu/cr-dump.c:2008): Dumping FAILED.\n",
			"rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted"},
		{"Warn  (criu/kerndat.c:1799): only a warning\n", ""},
		{"", ""},
	} {
		if got := FailureReason([]byte(tc.log)); got != tc.want {
			t.Errorf("FailureReason(%q) = %q, want %q", tc.log, got, tc.want)
		}
	}
}

// TestFailureMessage: a client reads what failed and why in one line; the
// log is the daemon's.
func TestFailureMessage(t *testing.T) {
	f := &Failure{What: "CRIU could not dump the processes of sandbox sbx_1", Reason: FailureReason([]byte(fullDiskLog)),
		Log: fullDiskLog, Err: errors.New("criu DUMP: rlimit (errno 0)")}
	want := "CRIU could not dump the processes of sandbox sbx_1: page-xfer: Unable to spice data: No space left on device (CRIU's log is in the daemon's log)"
	if f.Error() != want {
		t.Fatalf("message:\n%s\nwant:\n%s", f.Error(), want)
	}
	if strings.Contains(f.Error(), "criu/") || !f.NoSpace() {
		t.Fatalf("%q: no space %v", f.Error(), f.NoSpace())
	}
	long := &Failure{What: "CRIU could not restore", Reason: strings.Repeat("x", 1000)}
	if n := len(long.Error()); n > len("CRIU could not restore: ")+maxReason+10 {
		t.Fatalf("a long reason is not cut: %d bytes", n)
	}
	for _, f := range []*Failure{
		{What: "x", Errno: int(syscall.ENOSPC)},
		{What: "x", Log: "Error (criu/bfd.c:131): bfd: Error flushing image: Disk quota exceeded"},
	} {
		if !f.NoSpace() {
			t.Errorf("%+v: not a full disk", f)
		}
	}
	if (&Failure{What: "x", Reason: "Unix socket 1 without peer 2", Log: "Error (x): nothing of space"}).NoSpace() {
		t.Error("a failure without ENOSPC is a full disk")
	}
}
