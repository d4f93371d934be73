package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// TestCredential: commands and kernels start as the sandbox user with no
// supplementary groups, and a build's root commands as root; only an agent
// that is not root and already is that user starts them as itself.
func TestCredential(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	s := &server{cfg: wire.Config{UID: uid, GID: gid}}
	own := s.credential(false)
	if uid == 0 {
		if own == nil || own.Uid != 0 || own.Gid != uint32(gid) || own.Groups == nil || len(own.Groups) != 0 || own.NoSetGroups {
			t.Errorf("root agent, root user: credential %+v; want uid 0 and no groups", own)
		}
	} else if own != nil {
		t.Errorf("agent that is the user: credential %+v; want none", own)
	}
	s.cfg.UID, s.cfg.GID = uid+1, gid+1
	other := s.credential(false)
	if other == nil || other.Uid != uint32(uid+1) || other.Gid != uint32(gid+1) || other.Groups == nil || len(other.Groups) != 0 || other.NoSetGroups {
		t.Errorf("another user: credential %+v; want uid %d gid %d and no groups", other, uid+1, gid+1)
	}
	if root := s.credential(true); root == nil || root.Uid != 0 || root.Gid != 0 || root.Groups == nil || len(root.Groups) != 0 {
		t.Errorf("a build's root command: credential %+v; want uid 0 and no groups", root)
	}
}

// statusField returns a field of /proc/<pid>/status as the command printed it.
func statusField(status, name string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "(none)"
}

// TestCommandRunsAsTheUser: the agent, root as in a sandbox, starts a
// command as the sandbox user, every id of it, with no supplementary
// groups; and as root, the same.
func TestCommandRunsAsTheUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only root starts a command as another user")
	}
	for _, id := range []int{65534, 0} {
		s, _ := testServer(t)
		s.cfg.UID, s.cfg.GID = id, id
		c := serveTestAgent(t, s)
		st, b := runExec(t, c, &wire.ExecRequest{Cmd: "/bin/cat", Args: []string{"/proc/self/status"}, Cwd: "/"})
		out, _ := b.stream("stdout")
		want := fmt.Sprintf("%d %d %d %d", id, id, id, id)
		if st.Code != 0 || statusField(out, "Uid") != want || statusField(out, "Gid") != want || statusField(out, "Groups") != "" {
			t.Errorf("user %d: exit %+v, Uid %q Gid %q Groups %q; want %q and no groups", id, st, statusField(out, "Uid"), statusField(out, "Gid"), statusField(out, "Groups"), want)
		}
	}
}

// TestCommandAsAnotherUserFailsWithoutRoot: an agent that is not root and
// is asked to run commands as another user does not run them as itself.
func TestCommandAsAnotherUserFailsWithoutRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may become any user")
	}
	s, _ := testServer(t)
	s.cfg.UID = os.Getuid() + 1
	c := serveTestAgent(t, s)
	st, b := runExec(t, c, &wire.ExecRequest{Cmd: "/bin/true", Cwd: "/"})
	if st.Code != 126 || !strings.Contains(b.output(), "cannot act as uid") {
		t.Errorf("exit %+v, output %q; want 126, cannot act as uid", st, b.output())
	}
}

// TestExecStreamsAndExits: stdout and stderr stream apart; the exit code,
// or the signal that ended the command, comes last; a command that cannot
// start says why on stderr with the shell's codes (127: not found, 126:
// found but not runnable).
func TestExecStreamsAndExits(t *testing.T) {
	c, root := startAgent(t)
	ctx := context.Background()
	st, b := runExec(t, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "echo out; echo err >&2; exit 7"}, Cwd: "/tmp"})
	stdout, _ := b.stream("stdout")
	stderr, _ := b.stream("stderr")
	if st.Code != 7 || st.Signal != "" || st.TimedOut || stdout != "out\n" || stderr != "err\n" {
		t.Errorf("exit %+v, stdout %q, stderr %q", st, stdout, stderr)
	}
	if st, _ := runExec(t, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "kill -TERM $$"}, Cwd: "/tmp"}); st.Code != -1 || st.Signal != "SIGTERM" {
		t.Errorf("a command killed by a signal: %+v", st)
	}

	plain := filepath.Join(root, "plain")
	if err := os.WriteFile(plain, []byte("echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  wire.ExecRequest
		code int
		says string
	}{
		{"not on the PATH", wire.ExecRequest{Cmd: "no-such-command-forkbox"}, 127, "command not found"},
		{"no such file", wire.ExecRequest{Cmd: "/no/such/program"}, 127, "no such file"},
		{"not executable", wire.ExecRequest{Cmd: plain}, 126, "permission denied"},
		{"a directory", wire.ExecRequest{Cmd: "/tmp"}, 126, "permission denied"},
		{"a missing cwd", wire.ExecRequest{Cmd: "/bin/true", Cwd: "/no/such/dir"}, 126, "no such directory"},
		{"a file as cwd", wire.ExecRequest{Cmd: "/bin/true", Cwd: plain}, 126, "no such directory"},
		// The agent's own root, which the agent could enter: a magic link
		// the user's own process could not follow is not followed.
		{"a magic link as cwd", wire.ExecRequest{Cmd: "/bin/true", Cwd: "/proc/1/root"}, 126, "no such directory"},
	} {
		if tc.req.Cwd == "" {
			tc.req.Cwd = "/tmp"
		}
		st, b := runExec(t, c, &tc.req)
		stderr, _ := b.stream("stderr")
		if st.Code != tc.code || !strings.Contains(strings.ToLower(stderr), tc.says) || !strings.Contains(st.Error, strings.TrimSpace(stderr)) {
			t.Errorf("%s: exit %+v, stderr %q; want %d and %q", tc.name, st, stderr, tc.code, tc.says)
		}
	}

	wantKind(t, "no cmd", c.sendJSON(ctx, "/exec", wire.ExecRequest{}), errdefs.ErrInvalidArgument)
	wantKind(t, "a malformed request", c.send(ctx, http.MethodPost, "/exec", `{"cmd":`), errdefs.ErrInvalidArgument)
	wantKind(t, "root outside a build", c.sendJSON(ctx, "/exec", wire.ExecRequest{Cmd: "/bin/true", Root: true}), errdefs.ErrPermissionDenied)
}

// TestExecEnvCwdStdin: the sandbox's environment under the request's, the
// workdir by default, the PATH of that environment, and stdin given whole.
func TestExecEnvCwdStdin(t *testing.T) {
	s, _ := testServer(t)
	work, bin1, bin2 := t.TempDir(), t.TempDir(), t.TempDir()
	s.cfg.WorkDir = work
	s.cfg.Env = []string{"PATH=" + bin1 + ":" + bin2 + ":/usr/bin:/bin", "A=base", "B=base"}
	// On the PATH: a tool that is not executable, a directory by a tool's
	// name, and then the executable ones.
	for p, body := range map[string]string{
		filepath.Join(bin1, "tool"):  "#!/bin/sh\necho wrong\n",
		filepath.Join(bin2, "tool"):  "#!/bin/sh\necho right \"$@\"\n",
		filepath.Join(bin2, "tool2"): "#!/bin/sh\necho two\n",
	} {
		mode := os.FileMode(0o755)
		if strings.HasPrefix(p, bin1) {
			mode = 0o644
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(bin1, "tool2"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := serveTestAgent(t, s)

	st, b := runExec(t, c, &wire.ExecRequest{Cmd: "sh", Args: []string{"-c", `echo "$A $B $C"; pwd`}, Env: []string{"B=over", "C=new"}})
	if want := "base over new\n" + work + "\n"; st.Code != 0 || b.output() != want {
		t.Errorf("exit %+v, output %q; want %q", st, b.output(), want)
	}
	for cmd, want := range map[string]string{"tool": "right x\n", "tool2": "two\n"} {
		if st, b := runExec(t, c, &wire.ExecRequest{Cmd: cmd, Args: []string{"x"}}); st.Code != 0 || b.output() != want {
			t.Errorf("%s: exit %+v, output %q; want %q", cmd, st, b.output(), want)
		}
	}
	// The request's PATH decides.
	if st, _ := runExec(t, c, &wire.ExecRequest{Cmd: "tool2", Env: []string{"PATH=/usr/bin:/bin"}}); st.Code != 127 {
		t.Errorf("tool2 off the request's PATH: %+v", st)
	}
	// Stdin without keep_stdin is given whole, then closed.
	if st, b := runExec(t, c, &wire.ExecRequest{Cmd: "cat", Stdin: []byte("all of it\n")}); st.Code != 0 || b.output() != "all of it\n" {
		t.Errorf("stdin: exit %+v, output %q", st, b.output())
	}
}

// TestExecLargeOutput: all of a large output arrives, in order.
func TestExecLargeOutput(t *testing.T) {
	c, _ := startAgent(t)
	const n = 4 << 20
	st, b := runExec(t, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "head -c 4194304 /dev/zero | tr '\\0' x; echo end >&2"}, Cwd: "/tmp"})
	stdout, _ := b.stream("stdout")
	stderr, _ := b.stream("stderr")
	if st.Code != 0 || len(stdout) != n || strings.Trim(stdout, "x") != "" || stderr != "end\n" {
		t.Errorf("exit %+v, %d bytes of stdout (want %d), stderr %q", st, len(stdout), n, stderr)
	}
}

// TestExecTimeout: what streamed before the timeout arrives; then the
// command's group is killed and the status says so.
func TestExecTimeout(t *testing.T) {
	c, _ := startAgent(t)
	start := time.Now()
	st, b := runExec(t, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "echo first; sleep 30 & exec sleep 30"}, Cwd: "/tmp", TimeoutMS: 300})
	if !st.TimedOut || st.Code != -1 || st.Signal != "SIGKILL" || !strings.Contains(st.Error, "timed out after 300ms") || b.output() != "first\n" {
		t.Errorf("exit %+v, output %q", st, b.output())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a 300 ms timeout took %s", d)
	}
}

// TestExecLeavesBackgroundProcesses: a command that leaves a process
// holding its output open ends when the command does.
func TestExecLeavesBackgroundProcesses(t *testing.T) {
	c, _ := startAgent(t)
	start := time.Now()
	st, b := runExec(t, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "sleep 30 & echo $!"}, Cwd: "/tmp"})
	if pid, err := strconv.Atoi(strings.TrimSpace(b.output())); err == nil && pid > 1 {
		defer unix.Kill(pid, unix.SIGKILL)
	}
	if st.Code != 0 || time.Since(start) > 5*time.Second {
		t.Errorf("exit %+v after %s", st, time.Since(start))
	}
}

// TestExecClientGoesAway: a client that disconnects mid-stream has its
// command killed and its id freed; the agent goes on serving.
func TestExecClientGoesAway(t *testing.T) {
	c, _ := startAgent(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := startBgCtx(t, ctx, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "echo $$; exec sleep 30"}, Cwd: "/tmp", ID: "away"})
	b.waitFor(t, "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(b.output()))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case st := <-b.done:
		// The client closes its writing half first (see
		// client.agentConn), so the agent's last word may still arrive.
		if b.err == nil && (st.Error != "client went away; command killed" || st.Signal != "SIGKILL") {
			t.Errorf("the cancelled call ended %+v", st)
		} else if b.err != nil && !errors.Is(b.err, context.Canceled) {
			t.Errorf("the cancelled call: %v", b.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled call did not end")
	}
	waitFor(t, "end of the command", func() bool { return gone(pid) })
	waitFor(t, "release of the id", func() bool {
		return errors.Is(c.ExecSignal(context.Background(), "away", "SIGTERM"), errdefs.ErrNotFound)
	})
	if st, _ := runExec(t, c, &wire.ExecRequest{Cmd: "/bin/true", Cwd: "/tmp", ID: "away"}); st.Code != 0 {
		t.Errorf("the id again: %+v", st)
	}
}

// TestExecInputStates: input to a closed stdin, to a command that does not
// read it, and to an exec not yet started; and the bound on execs with an
// id.
func TestExecInputStates(t *testing.T) {
	s, _ := testServer(t)
	c := serveTestAgent(t, s)
	ctx := context.Background()

	b := startBg(t, c, &wire.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "cat; echo eof; exec sleep 30"}, Cwd: "/tmp", ID: "in", KeepStdin: true})
	if err := c.ExecInput(ctx, "in", []byte("a\n"), true); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "a\neof\n")
	wantKind(t, "input after the close", c.ExecInput(ctx, "in", []byte("b"), false), errdefs.ErrFailedPrecondition)
	if err := c.ExecInput(ctx, "in", nil, true); err != nil {
		t.Errorf("a second close: %v", err)
	}
	if err := c.ExecSignal(ctx, "in", "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	b.wait(t)

	// A command that never reads: an input larger than the pipe holds
	// waits, and ends when its caller goes away.
	b = startBg(t, c, &wire.ExecRequest{Cmd: "/bin/sleep", Args: []string{"30"}, Cwd: "/tmp", ID: "full", KeepStdin: true})
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := c.ExecInput(wctx, "full", make([]byte, wire.MaxExecInput), false)
	cancel()
	wantKind(t, "input nobody reads", err, context.DeadlineExceeded)
	// The write gave up: stdin can be closed, and the exec signalled.
	if err := c.ExecInput(ctx, "full", nil, true); err != nil {
		t.Errorf("close after a stuck input: %v", err)
	}
	if err := c.ExecSignal(ctx, "full", "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	b.wait(t)

	// An id reserved but not started yet.
	e, err := s.execs.reserve("early")
	if err != nil {
		t.Fatal(err)
	}
	wantKind(t, "input before the start", c.ExecInput(ctx, "early", []byte("x"), false), errdefs.ErrFailedPrecondition)
	wantKind(t, "signal before the start", c.ExecSignal(ctx, "early", "SIGTERM"), errdefs.ErrNotFound)
	wantKind(t, "resize before the start", c.ExecResize(ctx, "early", wire.PTYSize{Cols: 80, Rows: 24}), errdefs.ErrFailedPrecondition)
	s.execs.exited("early", e)

	// At most maxExecIDs execs with an id at once.
	var held []*execEntry
	for i := range maxExecIDs {
		e, err := s.execs.reserve("id-" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, e)
	}
	_, err = c.Exec(ctx, &wire.ExecRequest{Cmd: "/bin/true", Cwd: "/tmp", ID: "one-more"}, nil)
	wantKind(t, "one exec with an id too many", err, errdefs.ErrResourceExhausted)
	for i, e := range held {
		s.execs.exited("id-"+strconv.Itoa(i), e)
	}
	if st, _ := runExec(t, c, &wire.ExecRequest{Cmd: "/bin/true", Cwd: "/tmp", ID: "one-more"}); st.Code != 0 {
		t.Errorf("after the others ended: %+v", st)
	}
}
