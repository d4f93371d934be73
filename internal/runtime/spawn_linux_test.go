package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/client"
	"github.com/forkbox/forkbox/internal/agent/wire"
)

// TestSpawnerSurvivesItsDeath: the process that starts inits is killed from
// outside while a holder it started lives; the next create starts a new
// spawner at once and works, and the init it made is the daemon's child
// (parent pid), not the spawner's.
func TestSpawnerSurvivesItsDeath(t *testing.T) {
	rt, img := testRuntime(t)
	ctx := context.Background()
	// Drain the pool so that the create below needs the spawner now.
	rt.Close()
	rt.mu.Lock()
	rt.closed = false
	rt.mu.Unlock()
	rt.spawner.mu.Lock()
	rt.spawner.closed = false
	rt.spawner.mu.Unlock()

	first := make([]*initProc, 0, 1)
	z, err := rt.startInit(0)
	if err != nil {
		t.Fatal(err)
	}
	first = append(first, z)
	if ppid, err := parentPID(z.proc.Pid); err != nil || ppid != os.Getpid() {
		t.Fatalf("init %d has parent %d (%v), want the daemon %d", z.proc.Pid, ppid, err, os.Getpid())
	}
	// A user namespace holder it started lives on: it must not hold the
	// spawner's socket, or the daemon would not see the spawner die (its
	// next request would wait for an answer until the timeout).
	holder, err := rt.newUsernsHolder(z.base)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.close()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", holder.proc.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		// (Descriptors the test process itself inherited without
		// close-on-exec from whatever started it pass down to every child;
		// a socket can only be the spawner's.)
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", holder.proc.Pid, fd.Name()))
		if strings.HasPrefix(link, "socket:") {
			t.Errorf("the holder inherited fd %s (%s): the spawner's socket", fd.Name(), link)
		}
	}
	rt.spawner.mu.Lock()
	sp := rt.spawner.cmd.Process
	rt.spawner.mu.Unlock()
	if err := sp.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let it die

	id := "sbx_spawn" + time.Now().Format("150405")
	info, err := rt.Create(ctx, spec(id, img))
	if err != nil {
		t.Fatalf("create after the spawner died: %v", err)
	}
	st, err := client.New(SocketPath(info)).Exec(ctx, &wire.ExecRequest{Cmd: "true"}, nil)
	if err != nil || st.Code != 0 {
		t.Fatalf("exec: %+v %v", st, err)
	}
	if err := rt.Destroy(ctx, id, info); err != nil {
		t.Fatal(err)
	}
	for _, z := range first {
		z.discard(rt.cfg.IDs)
	}
}

// TestSpawnerRefusesBadRequests: a request the spawner cannot serve is an
// error answer, and the spawner goes on serving.
func TestSpawnerRefusesBadRequests(t *testing.T) {
	rt, _ := testRuntime(t)
	s := rt.spawner
	cfgR, cfgW, _ := os.Pipe()
	defer cfgR.Close()
	defer cfgW.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		if err := s.start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, req := range []string{"1073741824", "init x y", "init 1073741824 0", "init 4294967295 65536", "fork 1073741824 65536", "userns 1073741824"} {
		_ = s.conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := s.conn.WriteMsgUnix([]byte(req), nil, nil); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 512)
		n, err := s.conn.Read(buf)
		if err != nil || string(buf[:n])[:6] != "error " {
			t.Fatalf("request %q: answer %q %v", req, buf[:n], err)
		}
	}
	// A holder takes no descriptors.
	if _, _, err := s.request("userns", 1<<30, []*os.File{cfgR}); err == nil || !strings.Contains(err.Error(), "takes no descriptors") {
		t.Fatalf("userns request with a descriptor: %v", err)
	}
	// The same pipe twice where two are needed.
	pid, _, err := s.request("init", 1<<30, []*os.File{cfgR, cfgR})
	var refused spawnRefused
	if err != nil && !errors.As(err, &refused) {
		t.Fatalf("request with the same pipe twice: %v", err)
	}
	if err == nil {
		// Two descriptors were passed (the same pipe twice): a real init
		// started; it is the daemon's child and is killed here.
		p, _ := os.FindProcess(pid)
		p.Kill()
		p.Wait()
	}
}
