package client

import (
	"context"
	"net"
	"sync"
	"time"
)

// A memory checkpoint must find no connection between the daemon and the
// agent: CRIU refuses to dump the agent's end of a Unix socket whose peer
// (the daemon's end) is not part of the dump, and the agent's end lives on
// until the agent, scheduled within the sandbox's CPU limit, gets round to
// closing it — under load, or with the sandbox's CPUs busy, that takes
// long after the daemon closed its own. So the client closes a connection
// gracefully: it shuts down its writing half, which tells the agent's
// server to close its end, and keeps the descriptor until it reads the
// agent's EOF (or closeWait passes); Quiesce waits for that.

// closeWait bounds how long a closed connection waits for the agent's end
// to close.
const closeWait = 10 * time.Second

// conns are a client's open connections to its agent.
type conns struct {
	mu      sync.Mutex
	open    map[*agentConn]struct{}
	changed chan struct{} // closed and replaced when a connection ends
}

func (cs *conns) add(c net.Conn) net.Conn {
	ac := &agentConn{Conn: c, set: cs}
	cs.mu.Lock()
	if cs.open == nil {
		cs.open = map[*agentConn]struct{}{}
		cs.changed = make(chan struct{})
	}
	cs.open[ac] = struct{}{}
	cs.mu.Unlock()
	return ac
}

func (cs *conns) remove(ac *agentConn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if _, ok := cs.open[ac]; !ok {
		return
	}
	delete(cs.open, ac)
	close(cs.changed)
	cs.changed = make(chan struct{})
}

// count returns how many connections are open and a channel closed at the
// next change.
func (cs *conns) count() (int, <-chan struct{}) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.changed == nil {
		cs.changed = make(chan struct{})
	}
	return len(cs.open), cs.changed
}

// agentConn is a connection whose Close waits for the agent's end.
type agentConn struct {
	net.Conn
	set  *conns
	once sync.Once
}

// Close shuts down the writing half and returns; the descriptor is closed
// once the agent has closed its end.
func (ac *agentConn) Close() error {
	ac.once.Do(func() {
		uc, ok := ac.Conn.(*net.UnixConn)
		if !ok || uc.CloseWrite() != nil {
			ac.Conn.Close()
			ac.set.remove(ac)
			return
		}
		go ac.drain()
	})
	return nil
}

// drain reads (and drops) what the agent still sends until its EOF, then
// closes the descriptor. The transport may be reading too; whichever read
// sees the end, both return.
func (ac *agentConn) drain() {
	defer func() {
		ac.Conn.Close()
		ac.set.remove(ac)
	}()
	ac.Conn.SetReadDeadline(time.Now().Add(closeWait))
	buf := make([]byte, 4096)
	for {
		if _, err := ac.Conn.Read(buf); err != nil {
			return
		}
	}
}

// Quiesce closes the client's idle connections and waits, up to wait, until
// the agent has closed its end of every connection the client had (the
// caller has made sure no call is in flight). It reports whether none is
// left.
func (c *Client) Quiesce(ctx context.Context, wait time.Duration) bool {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		// A call that just ended may hand its connection back to the idle
		// pool after the previous look: close again at every change.
		c.hc.CloseIdleConnections()
		n, changed := c.conns.count()
		if n == 0 {
			return true
		}
		select {
		case <-changed:
		case <-time.After(20 * time.Millisecond):
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
