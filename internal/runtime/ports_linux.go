package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	goruntime "runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// DialPort connects to port on the loopback of running sandbox id (info as
// Create returned it): the socket is made inside the sandbox's network
// namespace, on a thread that enters it for the moment, so a server the
// sandbox's code started on 127.0.0.1 or 0.0.0.0 is reached whether the
// sandbox has internet access or not. The sandbox cannot reach back: the
// connection is the daemon's, and nothing else of the host is in that
// namespace.
func (r *Runtime) DialPort(ctx context.Context, id string, info *Info, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, errdefs.InvalidArgument("port: %d is out of range [1, 65535]", port)
	}
	if info == nil || info.PID <= 0 {
		return nil, errdefs.FailedPrecondition("sandbox %s is not running", id)
	}
	ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", info.PID), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("network namespace of sandbox %s: %w", id, err)
	}
	defer unix.Close(ns)
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			goruntime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			done <- result{err: fmt.Errorf("enter the network namespace of sandbox %s: %w", id, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		} // else the thread stays locked and exits with this goroutine
		done <- result{c, err}
	}()
	res := <-done
	if res.err != nil {
		if errors.Is(res.err, unix.ECONNREFUSED) {
			return nil, errdefs.Unavailable("nothing listens on port %d of sandbox %s (a server must listen on 127.0.0.1 or 0.0.0.0 inside it)", port, id)
		}
		return nil, fmt.Errorf("connect to port %d of sandbox %s: %w", port, id, res.err)
	}
	return res.c, nil
}
