package criu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Lazy restores. With `criu restore --lazy-pages` the restorer maps a
// task's private anonymous memory without filling it and registers it with
// a userfaultfd; a second CRIU process, `criu lazy-pages`, receives those
// userfaultfds over a socket in the work dir, answers each page fault from
// the images and meanwhile copies every remaining page in (UFFDIO_COPY). It
// exits once all pages are in. On a VM whose first touch of fresh memory is
// slow this is much faster than the restorer's own preadv into each mapping:
// 112 MiB of pandas kernel came back in ~0.55 s instead of ~1.3 s.
//
// A task restored into a user namespace may not call userfaultfd(2) itself
// (without vm.unprivileged_userfaultfd=1 the syscall wants CAP_SYS_PTRACE in
// the initial namespace, and forkbox does not loosen that host-wide).
// forkbox's CRIU patch 0003 has it make its userfaultfd with
// USERFAULTFD_IOC_NEW on /dev/userfaultfd, whose descriptor the caller opens
// (the daemon, outside the sandbox's device cgroup) and names in
// CRIU_UFFD_DEV_FD; CRIU's root helper passes a copy to the task, which
// closes it at once. Nothing restored keeps either descriptor: the restorer
// closes the userfaultfd before the sandbox's code runs again.

const (
	// uffdDevice is the userfaultfd device (Linux 6.1+).
	uffdDevice = "/dev/userfaultfd"
	// uffdDevEnv names the inherited descriptor of uffdDevice in CRIU's
	// environment; the string is also how lazyPagesSupport recognises a
	// CRIU with the patch.
	uffdDevEnv = "CRIU_UFFD_DEV_FD"
	// lazyLog is the lazy-pages process's log, in the restore's work dir.
	lazyLog = "lazy-pages.log"
)

// lazyPagesSupport says how restored tasks get a userfaultfd with the CRIU
// at path — through /dev/userfaultfd with a CRIU that takes it from its
// caller (viaDevice), or by the syscall where the host lets anyone
// (vm.unprivileged_userfaultfd=1) — or, in problem, why lazy restores
// cannot be used. The kernel's userfaultfd must also serve non-cooperative
// processes (features[FeatureLazyPages]).
func lazyPagesSupport(path string, features map[string]bool) (viaDevice bool, problem string) {
	if !features[FeatureLazyPages] {
		return false, "the kernel's userfaultfd cannot serve non-cooperative processes (`criu check --feature " + FeatureLazyPages + "` fails)"
	}
	devErr := errors.New("this CRIU lacks forkbox's patch that lets restored tasks take a userfaultfd from " + uffdDevice + " (scripts/build-criu.sh applies it)")
	if bin, err := os.ReadFile(path); err != nil {
		devErr = err
	} else if bytes.Contains(bin, []byte(uffdDevEnv)) {
		dev, err := os.OpenFile(uffdDevice, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			dev.Close()
			return true, ""
		}
		devErr = err
	}
	if b, err := os.ReadFile("/proc/sys/vm/unprivileged_userfaultfd"); err == nil && bytes.Equal(bytes.TrimSpace(b), []byte("1")) {
		return false, ""
	}
	return false, "restored tasks cannot get a userfaultfd: " + devErr.Error()
}

// LazyPages is a running `criu lazy-pages` process serving one restore.
type LazyPages struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error
}

// lazyReadyTimeout bounds how long StartLazyPages waits for the process to
// say it listens.
const lazyReadyTimeout = 30 * time.Second

// StartLazyPages starts `criu lazy-pages` for the images in imagesDir and
// returns once it listens on its socket in workDir, which must be the
// restore's work dir too (the socket has a fixed name there). It logs to
// lazy-pages.log in workDir. The context kills it: bound it as the restore
// is bounded. Only for hosts whose LazyPages is true.
func (h *Host) StartLazyPages(ctx context.Context, imagesDir, workDir string) (*LazyPages, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	cmd := h.Command(ctx, "lazy-pages", "--images-dir", imagesDir, "--work-dir", workDir,
		"--log-file", lazyLog, "-v2", "--status-fd", "3")
	cmd.ExtraFiles = []*os.File{pw} // fd 3
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return nil, fmt.Errorf("start criu lazy-pages: %w", err)
	}
	l := &LazyPages{cmd: cmd, logPath: filepath.Join(workDir, lazyLog), exited: make(chan struct{})}
	go func() {
		l.waitErr = cmd.Wait()
		close(l.exited)
	}()
	// CRIU writes one byte when it listens and closes the pipe; a CRIU
	// that fails first closes it (by exiting) without writing.
	ready := make(chan bool, 1)
	go func() {
		n, _ := io.ReadFull(pr, make([]byte, 1))
		ready <- n == 1
	}()
	timer := time.NewTimer(lazyReadyTimeout)
	defer timer.Stop()
	select {
	case ok := <-ready:
		if ok {
			return l, nil
		}
		<-l.exited
		return nil, l.failure("criu lazy-pages did not start")
	case <-timer.C:
		l.Kill()
		return nil, l.failure("criu lazy-pages did not start in " + lazyReadyTimeout.String())
	case <-ctx.Done():
		l.Kill()
		return nil, fmt.Errorf("criu lazy-pages: %w", ctx.Err())
	}
}

// Pid is the process's.
func (l *LazyPages) Pid() int { return l.cmd.Process.Pid }

// Wait returns once every page is in the restored tasks and the process
// has exited, or ctx ends (then it kills the process). An error means the
// restored memory is incomplete: kill the restored tree.
func (l *LazyPages) Wait(ctx context.Context) error {
	select {
	case <-l.exited:
	case <-ctx.Done():
		l.Kill()
		return fmt.Errorf("criu lazy-pages: %w", ctx.Err())
	}
	if l.waitErr != nil {
		return l.failure(fmt.Sprintf("criu lazy-pages (pid %s): %v", strconv.Itoa(l.cmd.Process.Pid), l.waitErr))
	}
	return nil
}

// Kill ends the process (if it still runs) and waits for it.
func (l *LazyPages) Kill() error {
	select {
	case <-l.exited:
		return nil
	default:
	}
	if err := l.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-l.exited
	return nil
}

// failure is a *Failure saying msg, with the errors of the process's log
// (its first as the reason).
func (l *LazyPages) failure(msg string) error {
	f := &Failure{What: msg}
	if b, err := os.ReadFile(l.logPath); err == nil && len(bytes.TrimSpace(b)) > 0 {
		f.Reason, f.Log = FailureReason(b), errorText(b)
	}
	return f
}
