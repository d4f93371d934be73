package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/sandbox/sandboxtest"
	"github.com/forkbox/forkbox/internal/store"
)

// The HTTP server's edges (edges.go), attacked through a real listener and
// the daemon's own http.Server (NewHTTPServer), with raw connections where
// a client library would hide what the server does (bodies_test.go and
// portpaths_test.go use them too). Before: idle keep-alive connections
// stayed open for good, and nothing bounded how many a client held.

const edgeKey = "edge-test-key"

type edgeEnv struct {
	s    *Server
	addr string
	lim  *connLimit // nil without a cap
}

// newEdgeServer serves the API (over a Manager whose runtime runs nothing)
// on a loopback listener with cfg's edges; register adds routes of the
// test's own before it serves.
func newEdgeServer(t *testing.T, cfg Config, register func(s *Server)) *edgeEnv {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "forkbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	images := &fakeImages{imgs: map[string]*image.Image{}}
	mgr := sandbox.New(st, sandboxtest.NoRuntime{}, images, nil, sandbox.DefaultDefaults, nil)
	cfg.APIKey = edgeKey
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg, mgr)
	if err != nil {
		t.Fatal(err)
	}
	if register != nil {
		register(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, l := s.NewHTTPServer(ln)
	var serverLog lockedBuffer
	srv.ErrorLog = log.New(&serverLog, "", 0)
	go srv.Serve(l)
	t.Cleanup(func() {
		srv.Close()
		s.Close()
		if strings.Contains(serverLog.String(), "panic") {
			t.Errorf("the HTTP server panicked:\n%s", serverLog.String())
		}
	})
	env := &edgeEnv{s: s, addr: ln.Addr().String()}
	env.lim, _ = l.(*connLimit)
	return env
}

// rawConn is a client connection that writes requests by hand.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (e *edgeEnv) dial(t *testing.T) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (c *rawConn) write(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// response reads one answer, waiting at most d.
func (c *rawConn) response(d time.Duration) (*http.Response, []byte, error) {
	c.c.SetReadDeadline(time.Now().Add(d))
	defer c.c.SetReadDeadline(time.Time{})
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body, err
}

func (c *rawConn) mustResponse() (*http.Response, []byte) {
	c.t.Helper()
	resp, body, err := c.response(15 * time.Second)
	if err != nil {
		c.t.Fatalf("reading the answer: %v", err)
	}
	return resp, body
}

// closedWithin reports whether the server closed the connection within d
// (what arrives before the end is dropped).
func (c *rawConn) closedWithin(d time.Duration) bool {
	c.c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c.br)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func errorOf(t *testing.T, body []byte) api.ErrorBody {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not an API error: %v: %q", err, body)
	}
	return e.Error
}

// healthy checks the server still answers, on a new connection.
func (e *edgeEnv) healthy(t *testing.T) {
	t.Helper()
	c := e.dial(t)
	c.write("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := c.mustResponse(); resp.StatusCode != 200 {
		t.Fatalf("healthz after the attack: %d %s", resp.StatusCode, body)
	}
}

func TestEdgeIdleKeepAliveConnectionsAreClosed(t *testing.T) {
	e := newEdgeServer(t, Config{IdleTimeout: 500 * time.Millisecond}, nil)
	const n = 50
	conns := make([]*rawConn, n)
	for i := range conns {
		conns[i] = e.dial(t)
		conns[i].write("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, _ := conns[i].mustResponse(); resp.StatusCode != 200 || resp.Close {
			t.Fatalf("healthz: %d, close %v: want a kept-alive 200", resp.StatusCode, resp.Close)
		}
	}
	// A connection in use within the idle timeout stays.
	conns[0].write("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, _ := conns[0].mustResponse(); resp.StatusCode != 200 {
		t.Fatalf("second request on a kept-alive connection: %d", resp.StatusCode)
	}
	var wg sync.WaitGroup
	open := make(chan int, n)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !c.closedWithin(15 * time.Second) {
				open <- i
			}
		}()
	}
	wg.Wait()
	close(open)
	for i := range open {
		t.Errorf("idle connection %d still open 15 s after an idle timeout of 0.5 s", i)
	}
	e.healthy(t)
}

func TestEdgeSlowHeaderIsCut(t *testing.T) {
	e := newEdgeServer(t, Config{HeaderTimeout: 300 * time.Millisecond}, nil)
	c := e.dial(t)
	c.write("GET /healthz HTTP/1.1\r\nHost: x\r\n")
	if !c.closedWithin(15 * time.Second) {
		t.Fatal("a header that never ends holds its connection")
	}
	e.healthy(t)
}

func TestEdgeConnectionCap(t *testing.T) {
	e := newEdgeServer(t, Config{MaxConns: 3}, nil)
	healthz := "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"

	// At the cap, the connection idle the longest makes room.
	idle := make([]*rawConn, 3)
	for i := range idle {
		idle[i] = e.dial(t)
		idle[i].write(healthz)
		idle[i].mustResponse()
	}
	c := e.dial(t)
	c.write(healthz)
	if resp, _ := c.mustResponse(); resp.StatusCode != 200 {
		t.Fatalf("a new connection at the cap: %d", resp.StatusCode)
	}
	if !idle[0].closedWithin(15 * time.Second) {
		t.Error("the longest idle connection was not closed to make room")
	}
	c.c.Close()
	for _, c := range idle {
		c.c.Close()
	}

	// When every connection is busy, a new one waits for one to end.
	busy := make([]*rawConn, 3)
	for i := range busy {
		busy[i] = e.dial(t)
		busy[i].write(fmt.Sprintf("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", edgeKey))
	}
	waiting := e.dial(t)
	waiting.write(healthz)
	if _, _, err := waiting.response(500 * time.Millisecond); err == nil {
		t.Fatal("a connection over the cap was served while every other was busy")
	}
	busy[0].c.Close()
	if resp, _ := waiting.mustResponse(); resp.StatusCode != 200 {
		t.Fatalf("the waiting connection, once one ended: %d", resp.StatusCode)
	}
	for _, b := range busy[1:] {
		b.c.Close()
	}
	waiting.c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && e.lim.Open() > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if n := e.lim.Open(); n != 0 {
		t.Errorf("%d connections counted open after all closed", n)
	}
}
