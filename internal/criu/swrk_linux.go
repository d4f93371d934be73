package criu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// Swrk is one conversation with CRIU over its RPC socket (`criu swrk`):
// the daemon sends a request as a protobuf message, CRIU answers with
// notifications at each stage of the work (which the daemon handles in
// process, where an --action-script would cost CRIU a fork and exec of a
// shell per stage) and finally with the result. The message types are
// go-criu's generated ones; the process is started here so the caller can
// place it (in a sandbox's cgroups, say) before it does anything.
//
// Lifecycle: StartSwrk → (place the process by Pid) → one Do → Close.
type Swrk struct {
	cmd *exec.Cmd
	sk  *os.File
	// exited is closed when the CRIU process has exited (waitErr then
	// holds how). CRIU's helpers (usernsd, cgroupd, tasks half restored)
	// may outlive it holding its end of the socket, so its exit, not the
	// socket's end, is what says it is gone.
	exited  chan struct{}
	waitErr error
}

// Notify handles CRIU's notification script ("setup-namespaces",
// "post-restore", …) with the pid CRIU gives (the restored root task's, or
// 0). An error fails the operation.
type Notify func(script string, pid int32) error

// StartSwrk starts `criu swrk` with the host's environment. CRIU waits for
// a request and does nothing until Do sends one. The context kills it. For
// a lazy restore (opts.LazyPages) pass lazy: CRIU then also gets
// /dev/userfaultfd for the tasks it restores (lazy_linux.go).
func (h *Host) StartSwrk(ctx context.Context, lazy bool) (*Swrk, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("criu socket: %w", err)
	}
	// Ours non-blocking, so that reads have deadlines (see watch).
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("criu socket: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "criu-rpc")
	theirs := os.NewFile(uintptr(fds[1]), "criu-rpc-swrk")
	defer theirs.Close()
	// The child gets its end as fd 3 (ExtraFiles clears close-on-exec).
	cmd := h.Command(ctx, "swrk", "3")
	cmd.ExtraFiles = []*os.File{theirs}
	if lazy && h.LazyPages && h.viaDevice {
		// Opened here, by the daemon: CRIU will stand in the sandbox's
		// cgroups, whose device controller refuses the device.
		dev, err := os.OpenFile(uffdDevice, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			ours.Close()
			return nil, fmt.Errorf("lazy restore: %w", err)
		}
		defer dev.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, dev) // fd 4
		cmd.Env = append(cmd.Environ(), uffdDevEnv+"=4")
	}
	// No Pdeathsig: it fires when the forking thread exits, and the daemon
	// throws away threads (those that entered a sandbox's namespaces).
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, fmt.Errorf("start criu swrk: %w", err)
	}
	sw := &Swrk{cmd: cmd, sk: ours, exited: make(chan struct{})}
	go func() {
		sw.waitErr = cmd.Wait()
		close(sw.exited)
	}()
	go func() {
		// A read waiting for CRIU ends when CRIU has exited or the
		// context ends (the context also kills CRIU).
		select {
		case <-sw.exited:
		case <-ctx.Done():
		}
		ours.SetReadDeadline(time.Now())
	}()
	return sw, nil
}

// Pid is the CRIU process's.
func (s *Swrk) Pid() int { return s.cmd.Process.Pid }

// Do sends one request of type typ with opts and answers CRIU's
// notifications with notify (nil: every notification succeeds) until CRIU
// gives its result, which it returns. A failed operation's error carries
// CRIU's message and errno.
func (s *Swrk) Do(typ rpc.CriuReqType, opts *rpc.CriuOpts, notify Notify) (*rpc.CriuResp, error) {
	if notify != nil {
		opts.NotifyScripts = proto.Bool(true)
	}
	req := &rpc.CriuReq{Type: typ.Enum(), Opts: opts}
	buf := make([]byte, 64<<10)
	for {
		b, err := proto.Marshal(req)
		if err != nil {
			return nil, err
		}
		if _, err := s.sk.Write(b); err != nil {
			return nil, fmt.Errorf("criu rpc: send: %w", err)
		}
		n, err := s.sk.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// CRIU exited or its time is up: take what it sent last, if
			// anything (a deadline stops reads before they look).
			n, err = s.drain(buf)
		}
		if err != nil {
			return nil, fmt.Errorf("criu rpc: receive: %w", err)
		}
		if n == 0 {
			return nil, errors.New("criu rpc: criu went away without an answer")
		}
		resp := &rpc.CriuResp{}
		if err := proto.Unmarshal(buf[:n], resp); err != nil {
			return nil, fmt.Errorf("criu rpc: %w", err)
		}
		if !resp.GetSuccess() {
			msg := resp.GetCrErrmsg()
			if msg == "" {
				msg = "failed"
			}
			return resp, fmt.Errorf("criu %s: %s (errno %d)", typ, msg, resp.GetCrErrno())
		}
		if resp.GetType() != rpc.CriuReqType_NOTIFY {
			if resp.GetType() != typ {
				return resp, fmt.Errorf("criu rpc: answer of type %s to a %s", resp.GetType(), typ)
			}
			return resp, nil
		}
		nt := resp.GetNotify()
		if notify != nil {
			if err := notify(nt.GetScript(), nt.GetPid()); err != nil {
				return resp, fmt.Errorf("criu %s, at %s: %w", typ, nt.GetScript(), err)
			}
		}
		req = &rpc.CriuReq{Type: rpc.CriuReqType_NOTIFY.Enum(), NotifySuccess: proto.Bool(true)}
	}
}

// drain reads a message that is already there, without waiting; io.EOF
// style "went away" when there is none.
func (s *Swrk) drain(buf []byte) (int, error) {
	rc, err := s.sk.SyscallConn()
	if err != nil {
		return 0, err
	}
	// What set the deadline (CRIU's exit, the context's end) is for good:
	// lift it for this one look, then set it again.
	s.sk.SetReadDeadline(time.Time{})
	defer s.sk.SetReadDeadline(time.Now())
	n, rerr := 0, error(nil)
	if err := rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		return true
	}); err != nil {
		return 0, err
	}
	if rerr != nil || n <= 0 {
		select {
		case <-s.exited:
			return 0, fmt.Errorf("criu exited without an answer (%v)", s.waitErr)
		default:
			return 0, errors.New("criu did not answer in time")
		}
	}
	return n, nil
}

// Close ends the conversation and waits for CRIU to exit.
func (s *Swrk) Close() error {
	s.sk.Close()
	<-s.exited
	if s.waitErr != nil {
		return fmt.Errorf("criu swrk (pid %s): %w", strconv.Itoa(s.cmd.Process.Pid), s.waitErr)
	}
	return nil
}
