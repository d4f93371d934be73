package sandbox

import (
	"fmt"
	"log/slog"
	"runtime/debug"
)

// recoverTo turns a panic of the calling goroutine into an error in *errp
// and logs it with its stack: for goroutines that the Manager starts on a
// request's behalf (fork branches) or in the background (pool refills, idle
// suspends), where a panic would otherwise end the whole daemon. Use as
// `defer recoverTo(log, &err, "what")`.
func recoverTo(log *slog.Logger, errp *error, what string) {
	r := recover()
	if r == nil {
		return
	}
	log.Error("panic recovered", "in", what, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	if errp != nil {
		*errp = fmt.Errorf("internal error in %s: %v", what, r)
	}
}
