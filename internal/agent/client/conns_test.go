package client

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestQuiesceWaitsForTheAgentsEnd: Quiesce returns only once the agent has
// closed its end of every connection the client had, however late the
// agent gets round to it (a memory checkpoint fails on a connection the
// agent still holds), and the client works again afterwards.
func TestQuiesceWaitsForTheAgentsEnd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var closedLate atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"ok":true}`)) })}
	// An agent slow to close: every connection's end lingers a while after
	// the client's EOF.
	go srv.Serve(&slowCloseListener{Listener: ln, delay: 300 * time.Millisecond, closed: &closedLate})
	t.Cleanup(func() { srv.Close() })
	c := New(sock)
	t.Cleanup(c.Close)

	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := c.Health(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := c.conns.count(); n == 0 {
		t.Fatal("no connection kept alive after the calls")
	}
	if !c.Quiesce(ctx, 10*time.Second) {
		t.Fatal("Quiesce gave up")
	}
	if closedLate.Load() == 0 {
		t.Fatal("Quiesce returned before the agent closed its end")
	}
	if n, _ := c.conns.count(); n != 0 {
		t.Fatalf("%d connections left", n)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatalf("a call after Quiesce: %v", err)
	}

	// An agent that never closes: Quiesce gives up after its wait.
	hold := make(chan struct{})
	defer close(hold)
	ln2, err := net.Listen("unix", filepath.Join(t.TempDir(), "stuck.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	go func() {
		for {
			conn, err := ln2.Accept()
			if err != nil {
				return
			}
			go func() {
				// Answer one request, then hold the connection.
				buf := make([]byte, 4096)
				conn.Read(buf)
				conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
				<-hold
				conn.Close()
			}()
		}
	}()
	stuck := New(ln2.Addr().String())
	defer stuck.Close()
	if err := stuck.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if stuck.Quiesce(ctx, 200*time.Millisecond) {
		t.Fatal("Quiesce reported no connection while the agent holds one")
	}
}

// slowCloseListener's connections close their end late.
type slowCloseListener struct {
	net.Listener
	delay  time.Duration
	closed *atomic.Int64
}

func (l *slowCloseListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &slowCloseConn{Conn: c, l: l}, nil
}

type slowCloseConn struct {
	net.Conn
	l *slowCloseListener
}

func (c *slowCloseConn) Close() error {
	time.Sleep(c.l.delay)
	c.l.closed.Add(1)
	return c.Conn.Close()
}
