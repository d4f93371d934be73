package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// An exec with a PTY runs on a new pseudo-terminal: the agent holds its
// master, the command gets its slave as stdin, stdout, stderr and
// controlling terminal (a new session, so that the terminal's signals, ^C
// and the hangup at its end, reach the command's process group).

// ptmxPath is the pty multiplexer; a sandbox's /dev/ptmx links to its own
// devpts instance's.
const ptmxPath = "/dev/ptmx"

// openPTY opens a new pseudo-terminal of size sz: its master, non-blocking
// (reads and writes go through the runtime's poller, so deadlines work),
// a second descriptor of the master for input (closing it leaves the
// output open), and its slave, for the command. Call it with the identity the command
// runs as: devpts makes the slave the opener's (fsuid and fsgid), as login
// programs do with grantpt.
func openPTY(sz wire.PTYSize) (master, input, slave *os.File, err error) {
	if err := sz.Check(); err != nil {
		return nil, nil, nil, err
	}
	mfd, err := unix.Open(ptmxPath, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open %s: %w", ptmxPath, err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(mfd)
		}
	}()
	// Whatever the path led to, it must be the multiplexer (5:2).
	var st unix.Stat_t
	if err := unix.Fstat(mfd, &st); err != nil {
		return nil, nil, nil, fmt.Errorf("stat %s: %w", ptmxPath, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(uint64(st.Rdev)) != 5 || unix.Minor(uint64(st.Rdev)) != 2 {
		return nil, nil, nil, fmt.Errorf("%s is not the pty multiplexer", ptmxPath)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return nil, nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	ws := &unix.Winsize{Col: sz.Cols, Row: sz.Rows}
	if err := unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, ws); err != nil {
		return nil, nil, nil, fmt.Errorf("set pty size: %w", err)
	}
	sfd, err := openPeer(mfd)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := unix.SetNonblock(mfd, true); err != nil {
		unix.Close(sfd)
		return nil, nil, nil, fmt.Errorf("pty: %w", err)
	}
	// The dup shares the master's open file, non-blocking flag included.
	ifd, err := unix.FcntlInt(uintptr(mfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(sfd)
		return nil, nil, nil, fmt.Errorf("pty: %w", err)
	}
	ok = true
	return os.NewFile(uintptr(mfd), "ptmx"), os.NewFile(uintptr(ifd), "ptmx"), os.NewFile(uintptr(sfd), "pts"), nil
}

// openPeer opens the slave of master mfd: through the master itself
// (TIOCGPTPEER, Linux 4.13), which resolves no path; on older kernels
// through /dev/pts/N.
func openPeer(mfd int) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno == 0 {
		return int(r), nil
	}
	if errno != unix.EINVAL && errno != unix.ENOTTY {
		return -1, fmt.Errorf("open pty slave: %w", errno)
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		return -1, fmt.Errorf("pty number: %w", err)
	}
	p := "/dev/pts/" + strconv.Itoa(n)
	sfd, err := unix.Open(p, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", p, err)
	}
	return sfd, nil
}

// resize sets the terminal size of exec id, which runs with a PTY; the
// kernel sends SIGWINCH to the terminal's foreground process group.
func (t *execTable) resize(id string, sz wire.PTYSize) error {
	if err := sz.Check(); err != nil {
		return err
	}
	e, err := t.get(id)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// The master is closed only after the exec is marked exited, which
	// takes t.mu: it is open here.
	switch {
	case e.exited:
		return errdefs.NotFound("exec %q is not running", id)
	case e.pid == 0:
		return errdefs.FailedPrecondition("exec %q has not started yet", id)
	case e.pty == nil:
		return errdefs.FailedPrecondition("exec %q runs without a pty", id)
	}
	rc, err := e.pty.SyscallConn()
	if err != nil {
		return fmt.Errorf("resize the pty of exec %q: %w", id, err)
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: sz.Cols, Row: sz.Rows})
	}); err != nil {
		ioErr = err
	}
	if ioErr != nil {
		return fmt.Errorf("resize the pty of exec %q: %w", id, ioErr)
	}
	return nil
}

func (s *server) handleExecResize(w http.ResponseWriter, r *http.Request) {
	var req wire.ExecResizeRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
		writeError(w, errdefs.InvalidArgument("bad exec resize request: %v", err))
		return
	}
	if err := s.execs.resize(req.ID, req.PTYSize); err != nil {
		writeError(w, err)
		return
	}
	writeJSONAnswer(w, http.StatusOK, struct{}{})
}
