package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestExecPTY(t *testing.T) {
	c, _ := startAgent(t)
	ctx := context.Background()
	p := startBg(t, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c",
		"test -t 0 && test -t 1 && test -t 2 && stty size; read a; stty size; echo got:$a; exit 3"},
		Cwd: "/tmp", ID: "pty-1", PTY: &wire.PTYSize{Cols: 80, Rows: 24}})
	p.waitFor(t, "24 80")
	if err := c.ExecResize(ctx, "pty-1", wire.PTYSize{Cols: 100, Rows: 30}); err != nil {
		t.Fatal(err)
	}
	if err := c.ExecInput(ctx, "pty-1", []byte("hello\n"), false); err != nil {
		t.Fatal(err)
	}
	st := p.wait(t)
	out := p.output()
	// The terminal echoes the input and ends lines with CR LF.
	for _, want := range []string{"24 80\r\n", "hello\r\n", "30 100\r\n", "got:hello\r\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q: no %q", out, want)
		}
	}
	if st.Code != 3 {
		t.Errorf("exit %+v, want code 3", st)
	}
	p.mu.Lock()
	if _, ok := p.streams["pty"]; len(p.streams) != 1 || !ok {
		t.Errorf("streams %v, want pty only", p.streams)
	}
	p.mu.Unlock()
	// Gone once it ended.
	if err := c.ExecResize(ctx, "pty-1", wire.PTYSize{Cols: 100, Rows: 30}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("resize after the end: %v, want not found", err)
	}
}

// A signal reaches the terminal's session; a ^C typed reaches its
// foreground group as SIGINT.
func TestExecPTYInterrupt(t *testing.T) {
	c, _ := startAgent(t)
	ctx := context.Background()
	p := startBg(t, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "echo ready; exec sleep 100"},
		Cwd: "/tmp", ID: "pty-2", PTY: &wire.PTYSize{Cols: 80, Rows: 24}})
	p.waitFor(t, "ready")
	time.Sleep(100 * time.Millisecond) // sleep has replaced the shell
	if err := c.ExecInput(ctx, "pty-2", []byte{3}, false); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-p.done:
		if p.err != nil {
			t.Fatal(p.err)
		}
		if st.Signal != "SIGINT" {
			t.Errorf("exit %+v, want SIGINT", st)
		}
	case <-time.After(10 * time.Second):
		c.ExecSignal(ctx, "pty-2", "SIGKILL")
		t.Fatal("^C did not end the command")
	}
}

func TestExecPTYErrors(t *testing.T) {
	c, _ := startAgent(t)
	ctx := context.Background()
	for _, req := range []*wire.ExecRequest{
		{Cmd: "/bin/true", PTY: &wire.PTYSize{Cols: 80, Rows: 24}},             // no id
		{Cmd: "/bin/true", ID: "pty-e", PTY: &wire.PTYSize{Cols: 0, Rows: 24}}, // too small
		{Cmd: "/bin/true", ID: "pty-e", PTY: &wire.PTYSize{Cols: 80, Rows: 1001}},
	} {
		_, err := c.Exec(ctx, req, func(wire.ExecEvent) {})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("exec %+v: %v, want invalid argument", req.PTY, err)
		}
	}
	// Resizing an exec without a pty, or one that does not run.
	b := startBg(t, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "cat"}, Cwd: "/tmp", ID: "nopty", KeepStdin: true})
	if err := c.ExecResize(ctx, "nopty", wire.PTYSize{Cols: 80, Rows: 24}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("resize without a pty: %v, want failed precondition", err)
	}
	if err := c.ExecInput(ctx, "nopty", nil, true); err != nil {
		t.Fatal(err)
	}
	b.wait(t)
	if err := c.ExecResize(ctx, "nosuch", wire.PTYSize{Cols: 80, Rows: 24}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("resize of no exec: %v, want not found", err)
	}
	if err := c.ExecResize(ctx, "nosuch", wire.PTYSize{Cols: 80, Rows: 0}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("resize to 80x0: %v, want invalid argument", err)
	}
	// The agent checks the size itself, whatever its client does.
	if err := c.sendJSON(ctx, "/exec/resize", wire.ExecResizeRequest{ID: "nosuch", PTYSize: wire.PTYSize{Cols: 5000, Rows: 1}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("raw resize to 5000x1: %v, want invalid argument", err)
	}
}
