package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/harden"
	"golang.org/x/sys/unix"
)

// Main runs the agent as a sandbox's init. fd 4, when open, is the status pipe
// to the daemon: "ok" is written there once the agent serves.
func Main() error {
	status := os.NewFile(4, "status")
	if err := run(status); err != nil {
		if status != nil {
			fmt.Fprintf(status, "error: agent: %v\n", err)
		}
		return err
	}
	return nil
}

func run(status *os.File) error {
	trace := func(step string) {
		if status != nil {
			fmt.Fprintf(status, "trace: %s %d\n", step, time.Now().UnixMicro())
		}
	}
	trace("agent-start")
	// Before anything else: the agent's memory, environment and descriptors
	// are for no other process of the sandbox to read.
	if err := setNotDumpable(); err != nil {
		return err
	}
	// Standard streams point at the host's /dev/null until now; reopen them
	// inside the sandbox so that nothing refers outside its mounts.
	null, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	for fd := 0; fd <= 2; fd++ {
		if err := unix.Dup3(int(null.Fd()), fd, 0); err != nil {
			return fmt.Errorf("reopen fd %d: %w", fd, err)
		}
	}
	null.Close()
	log := slog.New(slog.NewTextHandler(appendFile(filepath.Join(wire.RunDir, wire.LogName)), nil))
	b, err := os.ReadFile(filepath.Join(wire.RunDir, wire.ConfigName))
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	var cfg wire.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("parse config: %w", err)
	}
	// The agent must outlive what it runs: keep the OOM killer off it. Each
	// child is set back to 0 right after it starts.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	reserveThreads(12)
	if err := dropGroups(); err != nil {
		return err
	}
	s := &server{cfg: cfg, log: log, reaper: newReaper(), ctxs: contexts{byID: map[string]*codeContext{}}}
	if s.rootFD, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return err
	}
	// What needs chown happens now, before the capabilities go.
	s.ensureWorkDir()
	if !cfg.Build {
		// A build's layer must not carry it, and builds run no kernels.
		if err := s.prepareKernelDir(); err != nil {
			log.Warn("kernels' runtime directory; code contexts will not start", "err", err)
			s.kernelDirErr = err
		}
	}
	var keep []uintptr
	if cfg.Build {
		keep = harden.BuildCaps
	}
	if err := harden.ApplyKeeping(keep); err != nil {
		return fmt.Errorf("harden: %w", err)
	}
	trace("agent-hardened")
	sock := filepath.Join(wire.RunDir, wire.SocketName)
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		return err
	}
	caps := wantedCaps(cfg.Build)
	if err := dropCapabilities(caps); err != nil {
		return err
	}
	s.caps = &caps
	trace("agent-least-privilege")
	log.Info("agent serving", "sandbox", cfg.SandboxID, "socket", sock, "cap_eff", capHex(caps.eff), "cap_prm", capHex(caps.prm))
	if status != nil {
		fmt.Fprintln(status, "ok")
		status.Close()
	}
	return s.httpServer().Serve(ln)
}

// httpServer is the agent's HTTP server (its tests serve with it too).
func (s *server) httpServer() *http.Server {
	return &http.Server{Handler: s.routes(), ReadHeaderTimeout: 30 * time.Second}
}

type server struct {
	cfg    wire.Config
	log    *slog.Logger
	reaper *reaper
	rootFD int // the sandbox's root, O_PATH: where every path is resolved from
	ctxs   contexts
	// execs are the running execs with an ID.
	execs execTable
	// caps are the capability sets the agent keeps once it serves; nil
	// until then.
	caps *capSets
	// kernelDirErr says why the kernels' runtime directory could not be
	// prepared at start; code contexts then fail with it.
	kernelDirErr error
	// kernelDir, when set, replaces kernelRuntimeDir (tests).
	kernelDir string

	specMu      sync.Mutex
	specProblem string // the last kernelspec problems logged
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /self", func(w http.ResponseWriter, r *http.Request) {
		rep, err := s.selfReport()
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSONAnswer(w, http.StatusOK, rep)
	})
	mux.HandleFunc("POST /exec", s.handleExec)
	mux.HandleFunc("POST /exec/input", s.handleExecInput)
	mux.HandleFunc("POST /exec/signal", s.handleExecSignal)
	mux.HandleFunc("POST /exec/resize", s.handleExecResize)
	mux.HandleFunc("GET /files", s.handleRead)
	mux.HandleFunc("PUT /files", s.handleWrite)
	mux.HandleFunc("DELETE /files", s.handleRemove)
	mux.HandleFunc("GET /files/list", s.handleList)
	mux.HandleFunc("POST /watch", s.handleWatch)
	mux.HandleFunc("POST /code", s.handleCode)
	mux.HandleFunc("POST /contexts", s.handleCreateContext)
	mux.HandleFunc("POST /contexts/prestart", s.handlePrestart)
	mux.HandleFunc("GET /contexts", s.handleListContexts)
	mux.HandleFunc("DELETE /contexts/{id}", s.handleDeleteContext)
	mux.HandleFunc("POST /contexts/{id}/interrupt", s.handleInterruptContext)
	mux.HandleFunc("POST /contexts/{id}/restart", s.handleRestartContext)
	mux.HandleFunc("POST /contexts/{id}/jupyter/send", s.handleJupyterSend)
	mux.HandleFunc("GET /contexts/{id}/jupyter/recv", s.handleJupyterRecv)
	return mux
}

func writeError(w http.ResponseWriter, err error) {
	status, code := errdefs.HTTPStatus(err)
	var body wire.ErrorBody
	body.Error.Code = code
	body.Error.Message = err.Error()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

// lookPath finds cmd on the PATH of env, as execvp would. It looks with the
// calling thread's identity and through no magic link: run as the user, a
// directory the user cannot search hides what is in it, exactly as it does
// for the user's own shell.
func lookPath(cmd string, env []string) (string, error) {
	if strings.Contains(cmd, "/") {
		return cmd, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		if p := filepath.Join(dir, cmd); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", cmd)
}

// credential is who a command or kernel runs as: the sandbox user, or root
// for a build's root command, with no supplementary groups.
//
// It is nil in one case only: the agent is not root and already is that
// very user (its real and effective uid and gid). Then the child needs no
// change of identity, and none is possible: setgroups needs CAP_SETGID
// even to empty the list. The child then keeps the agent's own groups,
// which grant it nothing that user did not hold. That case is the agent's
// tests run as an ordinary user; in a sandbox the agent is root of the
// sandbox's user namespace (uid 0), so every command and kernel starts with
// a credential and its groups cleared, the sandbox user's too when it is
// root.
func (s *server) credential(root bool) *syscall.Credential {
	uid, gid := s.cfg.UID, s.cfg.GID
	if root {
		uid, gid = 0, 0
	}
	if uid != 0 && os.Getuid() == uid && os.Geteuid() == uid && os.Getgid() == gid && os.Getegid() == gid {
		return nil
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

// asCaller runs fn with the identity a command runs as: the user's (on a
// user thread), or root's for a build's root command, which only the daemon
// can ask for.
func (s *server) asCaller(root bool, fn func() error) error {
	if root {
		return fn()
	}
	return s.asUser(fn)
}

func (s *server) handleExec(w http.ResponseWriter, r *http.Request) {
	var req wire.ExecRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, errdefs.InvalidArgument("bad exec request: %v", err))
		return
	}
	if req.Cmd == "" {
		writeError(w, errdefs.InvalidArgument("cmd is required"))
		return
	}
	if req.Root && !s.cfg.Build {
		writeError(w, errdefs.PermissionDenied("commands run as root only in image builds"))
		return
	}
	if req.KeepStdin && req.ID == "" {
		writeError(w, errdefs.InvalidArgument("keep_stdin needs an exec id"))
		return
	}
	if req.PTY != nil {
		if req.ID == "" {
			writeError(w, errdefs.InvalidArgument("an exec with a pty needs an exec id"))
			return
		}
		if err := req.PTY.Check(); err != nil {
			writeError(w, err)
			return
		}
		req.KeepStdin = true
	}
	var entry *execEntry
	if req.ID != "" {
		var err error
		if entry, err = s.execs.reserve(req.ID); err != nil {
			writeError(w, err)
			return
		}
	}
	env := wire.MergeEnv(s.cfg.Env, req.Env)
	cwd := req.Cwd
	if cwd == "" {
		cwd = s.cfg.WorkDir
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var wmu sync.Mutex
	enc := json.NewEncoder(w)
	send := func(ev wire.ExecEvent) {
		wmu.Lock()
		defer wmu.Unlock()
		if enc.Encode(ev) == nil && flusher != nil {
			flusher.Flush()
		}
	}
	exit := s.runCommand(r, &req, entry, env, cwd, send)
	send(wire.ExecEvent{Exit: exit})
}

// runCommand runs one command to its end, streaming output through send.
// entry, when not nil, is the command's registration under req.ID: it is
// given the pid and the stdin pipe (with KeepStdin) once the command
// started, and removed when it has been reaped.
func (s *server) runCommand(r *http.Request, req *wire.ExecRequest, entry *execEntry, env []string, cwd string, send func(wire.ExecEvent)) *wire.ExitStatus {
	if entry != nil {
		defer s.execs.exited(req.ID, entry)
	}
	start := time.Now()
	fail := func(code int, msg string) *wire.ExitStatus {
		send(wire.ExecEvent{Stream: "stderr", Data: []byte(msg + "\n")})
		return &wire.ExitStatus{Code: code, Error: msg, DurationMS: time.Since(start).Milliseconds()}
	}
	// The command's ends (closed here once it started) and the agent's:
	// pipes, or with a PTY its slave and, for the agent, its master (the
	// output) and a dup of it (the input, closable on its own).
	var stdinR, stdinW, outR, outW, errR, errW, ptyS *os.File
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	sys := &syscall.SysProcAttr{Setsid: true, Credential: s.credential(req.Root)}
	var files []*os.File
	if req.PTY != nil {
		var perr error
		err := s.asCaller(req.Root, func() error {
			outR, stdinW, ptyS, perr = openPTY(*req.PTY)
			return nil
		})
		if err == nil {
			err = perr
		}
		if err != nil {
			return fail(126, err.Error())
		}
		files = []*os.File{ptyS, ptyS, ptyS}
		// A new session (Setsid) whose controlling terminal is the
		// slave, the child's fd 0.
		sys.Setctty = true
		sys.Ctty = 0
	} else {
		var err error
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			return fail(126, err.Error())
		}
		if outR, outW, err = os.Pipe(); err != nil {
			closeAll(stdinR, stdinW)
			return fail(126, err.Error())
		}
		if errR, errW, err = os.Pipe(); err != nil {
			closeAll(stdinR, stdinW, outR, outW)
			return fail(126, err.Error())
		}
		files = []*os.File{stdinR, outW, errW}
	}
	attr := &os.ProcAttr{Dir: cwd, Env: env, Files: files, Sys: sys}
	// Finding the command, checking the working directory, starting the
	// process and resetting its OOM score all happen with the identity it
	// runs as: the agent finds out nothing about the filesystem on the
	// user's behalf that the user could not see.
	var pid int
	var done <-chan unix.WaitStatus
	var failed *wire.ExitStatus
	err := s.asCaller(req.Root, func() error {
		path, err := lookPath(req.Cmd, env)
		if err != nil {
			failed = fail(127, err.Error())
			return nil
		}
		// A build's root command may enter what the agent itself no
		// longer may (it runs with the build capabilities): its own chdir
		// decides.
		if cwd != "" && !req.Root && !dirEnterable(cwd) {
			failed = fail(126, fmt.Sprintf("cwd %s: no such directory, or its user may not enter it", cwd))
			return nil
		}
		proc, d, err := s.reaper.start(path, append([]string{req.Cmd}, req.Args...), attr)
		if err != nil {
			code := 126
			if errors.Is(err, os.ErrNotExist) {
				code = 127
			}
			failed = fail(code, fmt.Sprintf("%s: %v", req.Cmd, err))
			return nil
		}
		pid, done = proc.Pid, d
		proc.Release()
		setOOMScoreAdj(pid, s.log)
		return nil
	})
	closeAll(stdinR, outW, errW, ptyS)
	if err != nil && failed == nil {
		failed = fail(126, err.Error())
	}
	if failed != nil {
		closeAll(stdinW, outR, errR)
		return failed
	}
	if entry != nil {
		var keep, pty *os.File
		if req.KeepStdin {
			keep = stdinW
		}
		if req.PTY != nil {
			pty = outR
		}
		s.execs.started(entry, pid, keep, pty)
	}
	// Whoever waits for the command to be reachable (an input right after
	// the start) may go on now.
	send(wire.ExecEvent{Started: true})
	go func() {
		if len(req.Stdin) > 0 {
			stdinW.Write(req.Stdin)
		}
		if req.KeepStdin && entry != nil {
			entry.wmu.Unlock()
			return
		}
		stdinW.Close()
	}()
	var wg sync.WaitGroup
	pump := func(name string, f *os.File) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				send(wire.ExecEvent{Stream: name, Data: append([]byte(nil), buf[:n]...)})
			}
			if err != nil {
				return
			}
		}
	}
	if req.PTY != nil {
		// A terminal's one output; a read fails (EIO) once every
		// holder of the slave closed it.
		wg.Add(1)
		go pump("pty", outR)
	} else {
		wg.Add(2)
		go pump("stdout", outR)
		go pump("stderr", errR)
	}

	var timeout <-chan time.Time
	if req.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(req.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	killGroup := func() { _ = unix.Kill(-pid, unix.SIGKILL); _ = unix.Kill(pid, unix.SIGKILL) }
	var ws unix.WaitStatus
	st := &wire.ExitStatus{}
	select {
	case ws = <-done:
	case <-timeout:
		killGroup()
		ws = <-done
		st.TimedOut = true
		st.Error = fmt.Sprintf("command timed out after %s and was killed", time.Duration(req.TimeoutMS)*time.Millisecond)
	case <-r.Context().Done():
		killGroup()
		ws = <-done
		st.Error = "client went away; command killed"
	}
	if entry != nil {
		// Reaped: no signal may be sent to its pid any more, and its
		// stdin is closed (a process it left behind may hold it).
		s.execs.exited(req.ID, entry)
	}
	// Output still buffered in the pipes is drained; a background process that
	// keeps the pipes open must not hold the call, so stop reading after a grace.
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(200 * time.Millisecond):
		for _, f := range []*os.File{outR, errR} {
			if f != nil {
				f.SetReadDeadline(time.Now())
			}
		}
		<-drained
	}
	// With a PTY, outR is its master: closed only after the exec is
	// marked exited (execTable.resize relies on it).
	closeAll(outR, errR)
	st.DurationMS = time.Since(start).Milliseconds()
	switch {
	case ws.Exited():
		st.Code = ws.ExitStatus()
	case ws.Signaled():
		st.Code = -1
		st.Signal = unix.SignalName(ws.Signal())
	}
	return st
}

// appendFile is a log destination that opens, appends and closes on every
// write, so the agent holds no file open outside the sandbox's own tree (a
// checkpoint restores a sandbox with a new run dir).
type appendFile string

func (f appendFile) Write(b []byte) (int, error) {
	// A line logged while a thread works as the user (the kernel package
	// logs from its caller) is written from another thread: the log is
	// root's, in a directory the user may not enter.
	if uid, err := unix.SetfsuidRetUid(-1); err == nil && uid != 0 {
		type result struct {
			n   int
			err error
		}
		ch := make(chan result, 1)
		go func() {
			n, err := f.write(b)
			ch <- result{n, err}
		}()
		r := <-ch
		return r.n, r.err
	}
	return f.write(b)
}

func (f appendFile) write(b []byte) (int, error) {
	fh, err := os.OpenFile(string(f), os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	return fh.Write(b)
}
