package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forkbox/forkbox/internal/sandboxinit"
	"github.com/forkbox/forkbox/internal/userns"
	"golang.org/x/sys/unix"
)

// spawner is the daemon's end of the long-lived process that starts sandbox
// inits in new user namespaces (sandboxinit.Spawn says why it exists). It
// starts on first use and again after it died; one request at a time.
type spawner struct {
	bin string

	mu     sync.Mutex
	cmd    *exec.Cmd
	conn   *net.UnixConn
	closed bool
}

// spawnTimeout bounds one request: starting a process takes milliseconds.
const spawnTimeout = 30 * time.Second

// start starts the spawner process; the caller holds s.mu.
func (s *spawner) start() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox spawner socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spawner"), os.NewFile(uintptr(fds[1]), "spawner")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		return fmt.Errorf("sandbox spawner socket: %w", err)
	}
	cmd := exec.Command(s.bin, sandboxinit.SpawnRole, s.bin)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fc.Close()
		return fmt.Errorf("start sandbox spawner: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	s.cmd, s.conn = cmd, fc.(*net.UnixConn)
	return nil
}

// stop ends the spawner process (it exits when its socket closes; the kill
// is for one that hangs); the caller holds s.mu.
func (s *spawner) stop() {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		s.cmd = nil
	}
}

// close stops the spawner for good.
func (s *spawner) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.stop()
}

// spawnInit starts an init with config and status as its fd 3 and 4, in
// new namespaces whose user namespace maps the id range at base, and
// returns it: a child of the daemon, reachable through a pidfd.
func (s *spawner) spawnInit(base uint32, config, status *os.File) (*os.Process, error) {
	return s.spawn("init", base, config, status)
}

// spawnUserns starts a sleeping process in a new user namespace mapping the
// id range at base (a usernsHolder's).
func (s *spawner) spawnUserns(base uint32) (*os.Process, error) {
	return s.spawn("userns", base)
}

func (s *spawner) spawn(kind string, base uint32, files ...*os.File) (*os.Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("runtime is closed")
	}
	// A spawner that died (killed from outside) is replaced, and the
	// request sent again if it never reached it. Once it did, the init may
	// exist with these pipes: no second one is started with them.
	var pid int
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if s.conn == nil {
			if err = s.start(); err != nil {
				return nil, err
			}
		}
		var sent bool
		pid, sent, err = s.request(kind, base, files)
		if err == nil {
			break
		}
		var refused spawnRefused
		if errors.As(err, &refused) {
			return nil, err
		}
		s.stop()
		if sent {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	proc, err := os.FindProcess(pid) // a pidfd: signals and waits reach this process only
	if err != nil {
		return nil, fmt.Errorf("sandbox spawner: %w", err)
	}
	if ppid, err := parentPID(pid); err != nil || ppid != os.Getpid() {
		_ = proc.Kill()
		return nil, fmt.Errorf("sandbox spawner: process %d is not the daemon's child (parent %d, %v)", pid, ppid, err)
	}
	return proc, nil
}

// spawnRefused is the spawner's own "error" answer (as opposed to a broken
// connection, after which the spawner is restarted).
type spawnRefused string

func (e spawnRefused) Error() string { return "sandbox spawner: " + string(e) }

// request sends one request and reads its answer; sent reports whether the
// request reached the spawner.
func (s *spawner) request(kind string, base uint32, files []*os.File) (pid int, sent bool, err error) {
	_ = s.conn.SetDeadline(time.Now().Add(spawnTimeout))
	msg := []byte(kind + " " + strconv.FormatUint(uint64(base), 10) + " " + strconv.Itoa(userns.Size))
	var rights []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		rights = unix.UnixRights(fds...)
	}
	if _, _, err := s.conn.WriteMsgUnix(msg, rights, nil); err != nil {
		return 0, false, fmt.Errorf("sandbox spawner: %w", err)
	}
	buf := make([]byte, 512)
	n, err := s.conn.Read(buf)
	if err != nil {
		return 0, true, fmt.Errorf("sandbox spawner: %w", err)
	}
	answer := string(buf[:n])
	if rest, ok := strings.CutPrefix(answer, "error "); ok {
		return 0, true, spawnRefused(rest)
	}
	rest, ok := strings.CutPrefix(answer, "pid ")
	pid, err = strconv.Atoi(rest)
	if !ok || err != nil || pid <= 1 {
		return 0, true, fmt.Errorf("sandbox spawner answered %q", answer)
	}
	return pid, true, nil
}

// parentPID reads a process's parent pid from /proc/<pid>/stat.
func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields after
	// its closing parenthesis are state, then ppid.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	return strconv.Atoi(f[1])
}
