package httpapi

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/forkbox/forkbox/internal/e2b"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/mcpserver"
)

// Request bodies at the edge (edges.go has the connections).
//
//   - A body must arrive at BodyMinRate bytes per second on average, after a
//     grace of BodyTimeout (Apache's mod_reqtimeout, body=…,MinRate=…): the
//     daemon waits at most BodyTimeout + received/BodyMinRate, counted only
//     while a handler is waiting for the next bytes, so a handler that takes
//     its time between reads (an image import unpacking a layer, a build
//     reading its context at a copy step) does not use up the client's
//     allowance, and an upload that keeps coming at the rate is never cut.
//     Once the body has ended, nothing bounds the connection's reads any
//     more: event streams run as long as their calls do. A request without
//     a body (a WebSocket's) has nothing to pace; a sandbox port's bodies
//     (the app's) and E2B's data plane's (a command's input) are streams of
//     their own, left alone but for what their handler left unread.
//   - A body a handler did not read to its end (refused for its size or its
//     credentials, or answered before it was read) is read on and dropped
//     after the answer went out, under the same rate and up to maxDrain, so
//     that a client that sends its whole body before reading gets the answer
//     rather than a reset connection.

// Defaults of the bodies' pace (Config's zero values).
const (
	DefaultBodyTimeout = 30 * time.Second
	DefaultBodyMinRate = 8 << 10 // bytes per second
)

// maxDrain bounds how much of a body a handler left unread the server reads
// on and drops (the largest upload's default size).
const maxDrain = 1 << 30

// bodyGuard is a request body read under the edge's rate: each Read waits
// at most grace + received/rate minus what earlier reads waited, by a read
// deadline on the connection; the deadline is cleared at the body's end.
// It turns a deadline that passed into a client error that says why.
type bodyGuard struct {
	body  io.ReadCloser
	rc    *http.ResponseController
	grace time.Duration
	rate  int64

	mu      sync.Mutex
	n       int64         // bytes read
	waited  time.Duration // time spent in reads
	reads   bool          // a read has started
	done    bool          // the body ended (EOF or an error)
	nodl    bool          // the connection takes no deadlines (an in-process call)
	timeout bool          // a read ran out of time
}

func (s *Server) guardBody(w http.ResponseWriter, body io.ReadCloser) *bodyGuard {
	return &bodyGuard{body: body, rc: http.NewResponseController(w), grace: s.cfg.BodyTimeout, rate: s.cfg.BodyMinRate}
}

// allowance is how long the next read may wait.
func (g *bodyGuard) allowance() time.Duration {
	earned := time.Duration(float64(g.n) / float64(g.rate) * float64(time.Second))
	if earned < 0 || earned > 1000*time.Hour { // overflow, or as good as none
		earned = 1000 * time.Hour
	}
	return g.grace + earned - g.waited
}

// armLocked sets the deadline of the body's next read.
func (g *bodyGuard) armLocked() {
	if !g.done && !g.nodl {
		if err := g.rc.SetReadDeadline(time.Now().Add(max(g.allowance(), time.Millisecond))); err != nil {
			g.nodl = true
		}
	}
}

// arm sets the deadline of the body's next read, for reads that the
// server makes itself.
func (g *bodyGuard) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armLocked()
}

func (g *bodyGuard) Read(p []byte) (int, error) {
	g.mu.Lock()
	if g.timeout {
		g.mu.Unlock()
		return 0, g.timeoutErr()
	}
	g.reads = true
	g.armLocked()
	g.mu.Unlock()
	start := time.Now()
	n, err := g.body.Read(p)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n += int64(n)
	g.waited += time.Since(start)
	if err != nil && !g.done {
		g.done = true
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The deadline stays: what the server would read on after
			// the answer fails at once, and the connection closes.
			g.timeout = true
			return n, g.timeoutErr()
		}
		if errors.Is(err, io.EOF) && !g.nodl {
			// From here on the server's own read (which notices a client
			// that goes away) runs without a deadline.
			g.rc.SetReadDeadline(time.Time{})
		}
	}
	return n, err
}

func (g *bodyGuard) timeoutErr() error {
	return errdefs.InvalidArgument("the request body came too slowly: %d bytes in %s; a body must arrive at %d bytes/s after the first %s (--http-body-timeout, --http-body-min-rate)",
		g.n, g.waited.Round(time.Millisecond), g.rate, g.grace)
}

func (g *bodyGuard) Close() error { return g.body.Close() }

// unread reports whether the body has bytes its handler did not read: it
// neither ended nor ran out of time.
func (g *bodyGuard) unread() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.done
}

// started reports whether anything read the body yet.
func (g *bodyGuard) started() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reads
}

// drain reads the rest of the body (up to maxDrain) and drops it.
func (g *bodyGuard) drain() {
	io.CopyN(io.Discard, g, maxDrain)
}

// withBody returns a shallow copy of r reading body (the server's own
// request keeps its body, which its bookkeeping looks at).
func withBody(r *http.Request, body io.ReadCloser) *http.Request {
	r2 := new(http.Request)
	*r2 = *r
	r2.Body = body
	return r2
}

// lingerOnUnread reads on what a handler left of r's body, once the answer
// went out: a client that sends its whole body before it reads gets the
// answer (a 413 above all) instead of a reset connection. Not when the
// client waits for "100 Continue" before it sends the body and nothing
// asked for it: it sends none.
func lingerOnUnread(w http.ResponseWriter, r *http.Request, g *bodyGuard) {
	if g == nil || !g.unread() || r.Context().Err() != nil {
		return
	}
	if !g.started() && r.Header.Get("Expect") != "" {
		return
	}
	// Sending the answer makes the server read on up to 256 KiB of the
	// body itself first (or, beyond that, mark the connection to close
	// after the answer): under the deadline of the body's next read.
	g.arm()
	http.NewResponseController(w).Flush()
	g.drain()
}

// streamedBody reports whether r's body is a stream of its own that the
// edge leaves alone: a port's (the app's, to its pace) or E2B's data
// plane's (a command's input streams for as long as the command runs).
func (s *Server) streamedBody(r *http.Request) bool {
	if t, err := s.portHost(r); t != nil && err == nil {
		return true
	}
	return e2b.IsDataPlane(r) || portProxyRE.MatchString(r.URL.Path)
}

// boundLeftover bounds, once a streamed body's handler returned, how long
// the server reads on what it left of the body before the connection's
// next request: it reads up to 256 KiB on, and without a deadline would
// wait for a client that sends nothing as long as it stays.
func boundLeftover(w http.ResponseWriter, d time.Duration) {
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
}

// hasKind reports whether err is of an errdefs kind (not an internal
// error).
func hasKind(err error) bool {
	st, _ := errdefs.HTTPStatus(err)
	return st != http.StatusInternalServerError
}

// hasBody reports whether r comes with a body to read.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// serveMCP serves /mcp with h (the MCP SDK's streamable-HTTP handler): a
// body over MCP's bound is the API's 413 too_large, before any of it is
// read when its length is said, else in place of the SDK's plain-text 413.
func serveMCP(h http.Handler, w http.ResponseWriter, r *http.Request) error {
	const limit = mcpserver.MaxRequestBodyBytes
	if r.ContentLength > limit {
		return errdefs.TooLarge("an MCP message is at most %d MiB; this one is %d bytes", limit>>20, r.ContentLength)
	}
	tw := &refusalWriter{ResponseWriter: w, code: http.StatusRequestEntityTooLarge}
	h.ServeHTTP(tw, r)
	if tw.refused {
		return errdefs.TooLarge("an MCP message is at most %d MiB", limit>>20)
	}
	return nil
}

// refusalWriter keeps an answer of status code from going out (refused is
// then set) so that the caller answers in its place.
type refusalWriter struct {
	http.ResponseWriter
	code    int
	started bool
	refused bool
}

func (t *refusalWriter) WriteHeader(code int) {
	if !t.started && code == t.code {
		t.refused = true
	}
	t.started = true
	if !t.refused {
		t.ResponseWriter.WriteHeader(code)
	}
}

func (t *refusalWriter) Write(b []byte) (int, error) {
	if !t.started {
		t.WriteHeader(http.StatusOK)
	}
	if t.refused {
		return len(b), nil
	}
	return t.ResponseWriter.Write(b)
}

func (t *refusalWriter) Flush() {
	if t.refused {
		return
	}
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (t *refusalWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
