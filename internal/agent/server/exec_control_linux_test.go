package server

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

func TestExecInputKeepsStdin(t *testing.T) {
	c, _ := startAgent(t)
	ctx := context.Background()
	b := startBg(t, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "read a; echo got:$a; cat"},
		Cwd: "/tmp", ID: "keep-1", KeepStdin: true, Stdin: []byte("first\n")})
	if err := c.ExecInput(ctx, "keep-1", []byte("second\n"), false); err != nil {
		t.Fatal(err)
	}
	if err := c.ExecInput(ctx, "keep-1", []byte("third\n"), true); err != nil {
		t.Fatal(err)
	}
	st := b.wait(t)
	if st.Code != 0 || b.output() != "got:first\nsecond\nthird\n" {
		t.Errorf("exit %+v, output %q", st, b.output())
	}
	// Gone once it ended.
	if err := c.ExecInput(ctx, "keep-1", []byte("x"), false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("input after the end: %v, want not found", err)
	}
	if err := c.ExecSignal(ctx, "keep-1", "SIGTERM"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("signal after the end: %v, want not found", err)
	}
	// The id is free again.
	b = startBg(t, c, &wire.ExecRequest{Cmd: "/bin/true", Cwd: "/tmp", ID: "keep-1"})
	if st := b.wait(t); st.Code != 0 {
		t.Errorf("second exec with the id: %+v", st)
	}
}

func TestExecControlRefusals(t *testing.T) {
	c, _ := startAgent(t)
	ctx := context.Background()
	for _, id := range []string{"bad id", "a/b", strings.Repeat("x", 65), "ü"} {
		if _, err := c.Exec(ctx, &wire.ExecRequest{Cmd: "/bin/true", Cwd: "/tmp", ID: id}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("exec id %q: %v, want invalid argument", id, err)
		}
		if err := c.ExecInput(ctx, id, []byte("x"), false); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("input id %q: %v, want invalid argument", id, err)
		}
		if err := c.ExecSignal(ctx, id, "SIGKILL"); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("signal id %q: %v, want invalid argument", id, err)
		}
	}
	if _, err := c.Exec(ctx, &wire.ExecRequest{Cmd: "/bin/true", Cwd: "/tmp", KeepStdin: true}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("keep_stdin without id: %v", err)
	}
	if err := c.ExecInput(ctx, "nope", []byte("x"), false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("input to an unknown id: %v, want not found", err)
	}
	if err := c.ExecInput(ctx, "nope", nil, true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("close of an unknown id: %v, want not found", err)
	}
	if err := c.ExecSignal(ctx, "nope", "SIGKILL"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("signal to an unknown id: %v, want not found", err)
	}

	b := startBg(t, c, &wire.ExecRequest{Cmd: "/bin/sleep", Args: []string{"100"}, Cwd: "/tmp", ID: "busy"})
	if _, err := c.Exec(ctx, &wire.ExecRequest{Cmd: "/bin/true", Cwd: "/tmp", ID: "busy"}, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a second exec with a running id: %v, want conflict", err)
	}
	for _, sig := range []string{"", "SIGSTOP", "9", "KILL", "sigkill"} {
		if err := c.ExecSignal(ctx, "busy", sig); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("signal %q: %v, want invalid argument", sig, err)
		}
	}
	// Without keep_stdin there is no stdin to write.
	if err := c.ExecInput(ctx, "busy", []byte("x"), false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("input without keep_stdin: %v, want failed precondition", err)
	}
	// Oversize input: the client refuses it, and so does the agent.
	big := make([]byte, wire.MaxExecInput+1)
	if err := c.ExecInput(ctx, "busy", big, false); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("client, oversize input: %v, want too large", err)
	}
	if err := c.sendJSON(ctx, "/exec/input", wire.ExecInputRequest{ID: "busy", Data: big}); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("agent, oversize input: %v, want too large", err)
	}
	if err := c.ExecSignal(ctx, "busy", "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if st := b.wait(t); st.Signal != "SIGKILL" {
		t.Errorf("killed exec ended %+v", st)
	}
}

func TestExecSignalKillsGroup(t *testing.T) {
	c, _ := startAgent(t)
	b := startBg(t, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "sleep 100 & echo $!; wait"}, Cwd: "/tmp", ID: "group"})
	var child int
	deadline := time.Now().Add(10 * time.Second)
	for child == 0 && time.Now().Before(deadline) {
		if out := b.output(); strings.HasSuffix(out, "\n") {
			child, _ = strconv.Atoi(strings.TrimSpace(out))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if child <= 1 {
		t.Fatalf("no child pid in %q", b.output())
	}
	if err := c.ExecSignal(context.Background(), "group", "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	st := b.wait(t)
	if st.Signal != "SIGTERM" {
		t.Errorf("exec ended %+v, want SIGTERM", st)
	}
	for !gone(child) {
		if time.Now().After(deadline) {
			unix.Kill(child, unix.SIGKILL)
			t.Fatalf("the command's child %d outlived a signal to its group", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
