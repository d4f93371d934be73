package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/lazyre"
	"golang.org/x/sys/unix"
)

// Execs that carry an ID (ExecRequest.ID) can be reached while they run:
// their stdin written and closed (POST /exec/input), their process group
// signalled (POST /exec/signal), their terminal resized (POST /exec/resize,
// with a PTY). Only the daemon reaches the agent, but
// every input is checked all the same.

const (
	// maxExecIDs bounds the execs with an ID that run at once.
	maxExecIDs = 1024
	// inputWriteTimeout bounds how long one input waits for the command
	// to read its stdin.
	inputWriteTimeout = 30 * time.Second
)

var execIDRE = lazyre.New(`^[A-Za-z0-9_-]{1,64}$`)

// execSignals are the signals POST /exec/signal sends.
var execSignals = map[string]unix.Signal{
	"SIGTERM": unix.SIGTERM,
	"SIGKILL": unix.SIGKILL,
	"SIGINT":  unix.SIGINT,
	"SIGHUP":  unix.SIGHUP,
}

// execEntry is a running exec with an ID.
type execEntry struct {
	pid    int // 0 until started; the leader of its own process group after
	exited bool

	wmu    sync.Mutex // serializes writes to stdin
	stdin  *os.File   // nil without KeepStdin; with a PTY, a dup of its master
	pty    *os.File   // the PTY's master, or nil; open while the exec is not exited
	closed atomic.Bool
	once   sync.Once
}

// closeStdin closes the command's stdin once; a blocked write fails.
func (e *execEntry) closeStdin() {
	e.once.Do(func() {
		e.closed.Store(true)
		if e.stdin != nil {
			e.stdin.Close()
		}
	})
}

// execTable is the agent's running execs with an ID.
type execTable struct {
	mu   sync.Mutex
	byID map[string]*execEntry
}

// reserve registers id for an exec about to start.
func (t *execTable) reserve(id string) (*execEntry, error) {
	if !execIDRE.MatchString(id) {
		return nil, errdefs.InvalidArgument("exec id %q: want 1 to 64 of A-Z a-z 0-9 _ -", id)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID == nil {
		t.byID = map[string]*execEntry{}
	}
	if _, ok := t.byID[id]; ok {
		return nil, errdefs.Conflict("exec id %q is already running", id)
	}
	if len(t.byID) >= maxExecIDs {
		return nil, errdefs.ResourceExhausted("%d execs with an id run already", maxExecIDs)
	}
	e := &execEntry{}
	t.byID[id] = e
	return e, nil
}

// started records the pid of a started exec and, with KeepStdin, its
// stdin, locked for writing until the caller has written ExecRequest.Stdin
// (and unlocks e.wmu), and with a PTY its master.
func (t *execTable) started(e *execEntry, pid int, stdin, pty *os.File) {
	if stdin != nil {
		e.wmu.Lock()
	}
	t.mu.Lock()
	e.pid = pid
	e.stdin = stdin
	e.pty = pty
	t.mu.Unlock()
}

// exited marks e's process reaped (no signal may reach its pid any more)
// and removes it.
func (t *execTable) exited(id string, e *execEntry) {
	t.mu.Lock()
	e.exited = true
	if t.byID[id] == e {
		delete(t.byID, id)
	}
	t.mu.Unlock()
	e.closeStdin()
}

// checkStdin says why e's stdin cannot be written, if it cannot.
func (t *execTable) checkStdin(id string, e *execEntry) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case e.pid == 0:
		return errdefs.FailedPrecondition("exec %q has not started yet", id)
	case e.stdin == nil:
		return errdefs.FailedPrecondition("exec %q runs without stdin (keep_stdin was not set)", id)
	}
	return nil
}

func (t *execTable) get(id string) (*execEntry, error) {
	if !execIDRE.MatchString(id) {
		return nil, errdefs.InvalidArgument("exec id %q: want 1 to 64 of A-Z a-z 0-9 _ -", id)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byID[id]
	if e == nil {
		return nil, errdefs.NotFound("no running exec %q", id)
	}
	return e, nil
}

// signal sends sig to the process group of exec id.
func (t *execTable) signal(id string, sig unix.Signal) error {
	e, err := t.get(id)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// The pid is signalled only while the exec is registered and not
	// reaped, so it cannot be another process's by then; a pid of 1 or
	// less would address the agent's own group or every process.
	if e.exited || e.pid <= 1 {
		return errdefs.NotFound("exec %q is not running", id)
	}
	if err := unix.Kill(-e.pid, sig); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return errdefs.NotFound("exec %q is not running", id)
		}
		return fmt.Errorf("signal exec %q: %w", id, err)
	}
	return nil
}

// write writes data to exec id's stdin.
func (t *execTable) write(ctx context.Context, id string, data []byte) error {
	e, err := t.get(id)
	if err != nil {
		return err
	}
	if err := t.checkStdin(id, e); err != nil {
		return err
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if e.closed.Load() {
		return errdefs.FailedPrecondition("the stdin of exec %q is closed", id)
	}
	stop := context.AfterFunc(ctx, func() { e.stdin.SetWriteDeadline(time.Now()) })
	defer stop()
	e.stdin.SetWriteDeadline(time.Now().Add(inputWriteTimeout))
	if _, err := e.stdin.Write(data); err != nil {
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return errdefs.Timeout("exec %q did not read its stdin in time", id)
		case errors.Is(err, os.ErrClosed), errors.Is(err, unix.EPIPE):
			return errdefs.FailedPrecondition("the stdin of exec %q is closed", id)
		}
		return fmt.Errorf("write stdin of exec %q: %w", id, err)
	}
	return nil
}

func (s *server) handleExecInput(w http.ResponseWriter, r *http.Request) {
	var req wire.ExecInputRequest
	// Base64 makes 1 MiB of data 4/3 as long; allow for the rest.
	body := http.MaxBytesReader(w, r.Body, wire.MaxExecInput*4/3+4096)
	if err := json.NewDecoder(body).Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, errdefs.TooLarge("exec input: at most %d bytes at once", wire.MaxExecInput))
			return
		}
		writeError(w, errdefs.InvalidArgument("bad exec input request: %v", err))
		return
	}
	if len(req.Data) > wire.MaxExecInput {
		writeError(w, errdefs.TooLarge("exec input: %d bytes; at most %d at once", len(req.Data), wire.MaxExecInput))
		return
	}
	if len(req.Data) > 0 {
		if err := s.execs.write(r.Context(), req.ID, req.Data); err != nil {
			writeError(w, err)
			return
		}
	}
	if req.Close {
		e, err := s.execs.get(req.ID)
		if err != nil {
			writeError(w, err)
			return
		}
		if err := s.execs.checkStdin(req.ID, e); err != nil {
			writeError(w, err)
			return
		}
		e.wmu.Lock()
		e.closeStdin()
		e.wmu.Unlock()
	}
	writeJSONAnswer(w, http.StatusOK, struct{}{})
}

func (s *server) handleExecSignal(w http.ResponseWriter, r *http.Request) {
	var req wire.ExecSignalRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
		writeError(w, errdefs.InvalidArgument("bad exec signal request: %v", err))
		return
	}
	sig, ok := execSignals[req.Signal]
	if !ok {
		writeError(w, errdefs.InvalidArgument("signal %q: want SIGTERM, SIGKILL, SIGINT or SIGHUP", req.Signal))
		return
	}
	if err := s.execs.signal(req.ID, sig); err != nil {
		writeError(w, err)
		return
	}
	writeJSONAnswer(w, http.StatusOK, struct{}{})
}
