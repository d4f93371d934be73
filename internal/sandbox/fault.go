package sandbox

import (
	"os"
	"syscall"
)

// faultPoint is where tests make the daemon die, as kill -9 would, to prove
// that every step of suspend and resume is recoverable. It does nothing
// unless FORKBOX_FAULT names the point (never set in production).
func faultPoint(name string) {
	if v := os.Getenv("FORKBOX_FAULT"); v != "" && v == name {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
