package server

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// The reaper reaps every child of the test binary: no test of this package
// may wait for a child of its own (os/exec).
var (
	testReaperOnce sync.Once
	testReaper     *reaper
)

// execAgent serves a test server's routes on a Unix socket, with commands
// run as the current user, and returns a client for it.
func execAgent(t *testing.T) *testAgent {
	t.Helper()
	if os.Getuid() != 0 {
		// Commands start with a credential; only root may set one,
		// even its own.
		t.Skip("needs root")
	}
	testReaperOnce.Do(func() { testReaper = newReaper() })
	s, _ := testServer(t)
	s.reaper = testReaper
	return serveTestAgent(t, s)
}

// bgExec runs req in the background; started is closed once the agent
// reports the start, output collects stdout and stderr, and the result
// arrives on the returned channel.
type bgExec struct {
	started chan struct{}
	mu      sync.Mutex
	out     strings.Builder
	done    chan *wire.ExitStatus
	err     error
}

func (b *bgExec) output() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out.String()
}

func startBg(t *testing.T, c *testAgent, req *wire.ExecRequest) *bgExec {
	t.Helper()
	b := &bgExec{started: make(chan struct{}), done: make(chan *wire.ExitStatus, 1)}
	var once sync.Once
	go func() {
		st, err := c.Exec(context.Background(), req, func(ev wire.ExecEvent) {
			if ev.Started {
				once.Do(func() { close(b.started) })
			}
			b.mu.Lock()
			b.out.Write(ev.Data)
			b.mu.Unlock()
		})
		b.err = err
		once.Do(func() { close(b.started) })
		b.done <- st
	}()
	select {
	case <-b.started:
	case <-time.After(10 * time.Second):
		t.Fatal("exec did not start")
	}
	return b
}

func (b *bgExec) wait(t *testing.T) *wire.ExitStatus {
	t.Helper()
	select {
	case st := <-b.done:
		if b.err != nil {
			t.Fatalf("exec: %v", b.err)
		}
		return st
	case <-time.After(10 * time.Second):
		t.Fatal("exec did not end")
		return nil
	}
}

func TestExecInputKeepsStdin(t *testing.T) {
	c := execAgent(t)
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
	c := execAgent(t)
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

// gone reports whether pid has exited (or is a zombie).
func gone(pid int) bool {
	if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestExecSignalKillsGroup(t *testing.T) {
	c := execAgent(t)
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
