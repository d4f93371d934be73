// Package fault is the crash-test hook shared by the daemon's layers: named
// points in lifecycle operations that do nothing unless the process's
// environment turns them on, which only tests do.
//
// FORKBOX_FAULT=<point> makes the process die at that point, as kill -9
// would (crash recovery tests); FORKBOX_FAULT=<point>=panic panics there
// instead. Several points may be given, separated by commas.
package fault

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Point applies FORKBOX_FAULT at name.
func Point(name string) {
	v := os.Getenv("FORKBOX_FAULT")
	if v == "" {
		return
	}
	for _, f := range strings.Split(v, ",") {
		point, mode, _ := strings.Cut(f, "=")
		if point != name {
			continue
		}
		if mode == "panic" {
			panic(fmt.Sprintf("fault point %s (FORKBOX_FAULT)", name))
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
