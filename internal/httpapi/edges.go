package httpapi

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// The HTTP server's edges: how long a connection may wait for its next
// request and how many connections are served at once (bodies.go: how fast
// a request body must arrive, and what one the daemon does not want costs
// it).
//
//   - A keep-alive connection is closed after IdleTimeout without a request;
//     a request's header must arrive within HeaderTimeout.
//   - At most MaxConns connections are served at once: a new one over the
//     cap closes the connection that has waited longest (a second at least)
//     without a request, and when every connection is busy with a request,
//     new ones wait (in the kernel's accept queue) until one ends.
//   - There is no read or write timeout on whole requests: it would cut
//     event streams, WebSockets, uploads and downloads alike.

// Defaults of the edges (Config's zero values).
const (
	DefaultIdleTimeout   = 2 * time.Minute
	DefaultHeaderTimeout = 30 * time.Second
)

// NewHTTPServer returns the daemon's HTTP server for the API and the
// listener to serve it on: ln under the connection cap (Config.MaxConns).
func (s *Server) NewHTTPServer(ln net.Listener) (*http.Server, net.Listener) {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		// No ReadTimeout nor WriteTimeout: they would cut event streams,
		// WebSockets, uploads and downloads alike. Bodies are bounded per
		// request (bodyGuard), answers by their calls' own timeouts.
	}
	if s.cfg.MaxConns <= 0 {
		return srv, ln
	}
	l := newConnLimit(ln, s.cfg.MaxConns)
	srv.ConnState = l.track
	return srv, l
}

// connLimit is a listener that keeps at most max connections open. A new
// connection over the cap closes the one that has waited longest without a
// request (new, or idle between keep-alive requests; for at least
// minQuiet, so that one whose client is about to send is not taken), and
// when none has, waits until a connection closes; meanwhile further ones
// wait in the kernel's accept queue.
type connLimit struct {
	net.Listener
	max  int
	done chan struct{}
	once sync.Once

	mu    sync.Mutex
	open  int
	quiet map[*limitedConn]time.Time // connections without a request in progress, since when
	freed chan struct{}              // a connection closed (capacity 1)
}

// minQuiet is how long a connection must have been without a request
// before the cap closes it for a new one.
const minQuiet = time.Second

func newConnLimit(ln net.Listener, max int) *connLimit {
	return &connLimit{Listener: ln, max: max, done: make(chan struct{}),
		quiet: map[*limitedConn]time.Time{}, freed: make(chan struct{}, 1)}
}

func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &limitedConn{Conn: c, l: l}
	l.mu.Lock()
	l.open++
	for l.open > l.max {
		victim, wait := l.victimLocked(time.Now())
		l.mu.Unlock()
		if victim != nil {
			victim.Close()
			l.mu.Lock()
			continue
		}
		if err := l.await(wait); err != nil {
			lc.Close()
			return nil, err
		}
		l.mu.Lock()
	}
	l.quiet[lc] = time.Now()
	l.mu.Unlock()
	return lc, nil
}

// victimLocked is the connection that has waited longest without a
// request, when it has for minQuiet; else how long until it will have (0:
// there is none).
func (l *connLimit) victimLocked(now time.Time) (*limitedConn, time.Duration) {
	var oldest *limitedConn
	var at time.Time
	for c, since := range l.quiet {
		if oldest == nil || since.Before(at) {
			oldest, at = c, since
		}
	}
	if oldest == nil {
		return nil, 0
	}
	if wait := at.Add(minQuiet).Sub(now); wait > 0 {
		return nil, wait
	}
	return oldest, 0
}

// await waits until a connection closes, or wait passes (0: no bound).
func (l *connLimit) await(wait time.Duration) error {
	var tick <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-l.freed:
	case <-tick:
	case <-l.done:
		return net.ErrClosed
	}
	return nil
}

// track follows the server's connection states (http.Server.ConnState).
func (l *connLimit) track(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateNew, http.StateIdle:
		if !lc.closed {
			l.quiet[lc] = time.Now()
		}
	default: // a request in progress, hijacked (a WebSocket), closed
		delete(l.quiet, lc)
	}
}

func (l *connLimit) release() {
	l.mu.Lock()
	l.open--
	l.mu.Unlock()
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

func (l *connLimit) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Open is how many connections are open.
func (l *connLimit) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// limitedConn gives its place back when it closes. It passes the server's
// half-close (the FIN it sends before closing a connection whose request it
// refused) and sendfile through.
type limitedConn struct {
	net.Conn
	l      *connLimit
	once   sync.Once
	closed bool // under l.mu
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.closed = true
		delete(c.l.quiet, c)
		c.l.mu.Unlock()
		c.l.release()
	})
	return err
}

func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("%T cannot half-close", c.Conn)
}

func (c *limitedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}
