package server

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/internal/agent/wire"
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
