package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/kernel"
	"golang.org/x/sys/unix"
)

// Contexts are Jupyter kernels living inside the sandbox, so that a
// checkpoint of the sandbox holds them with their variables. Each context is
// started on its first execution, restarted by the next execution after it
// died, and runs its cells one at a time in arrival order (the kernel
// package's queue). Every language has a default context, made on first use.

// kernelRuntimeDir holds the kernels' connection files, their ipykernel
// config and their log. It belongs to the user (prepareKernelDir makes it at
// start) and everything in it is created, read and removed with the user's
// identity: the kernel package does its file work on the goroutine that
// calls Start, Restart and Shutdown, and the agent makes those calls from a
// user thread (asUser). Its parent, /run, is root's, so the user cannot
// swap the directory itself.
const kernelRuntimeDir = "/run/forkbox-kernels"

// runtimeDir is the kernels' runtime directory: kernelRuntimeDir, or the
// directory a test chose (the agent's tests run on the host).
func (s *server) runtimeDir() string {
	if s.kernelDir != "" {
		return s.kernelDir
	}
	return kernelRuntimeDir
}

type codeContext struct {
	id        string
	spec      *kernel.Spec
	cwd       string
	env       []string
	isDefault bool
	created   time.Time
	// hidden: started ahead by a warm pool (handlePrestart) and not yet
	// used; such a context is not listed and answers to no id, as in a
	// new sandbox, until the first call for the default context.
	hidden bool

	mu   sync.Mutex // guards k and lastCount; held while a kernel starts
	k    *kernel.Kernel
	busy int
	last int // execution count of the last cell

	// jlog is the context's Jupyter message log, made by its first
	// Jupyter call (jupyter_linux.go). The kernels' readers add to it
	// without c.mu, which is held while a kernel starts.
	jlog atomic.Pointer[jupyterLog]
}

type contexts struct {
	mu   sync.Mutex
	byID map[string]*codeContext
}

// specs finds the sandbox's kernelspecs. The user's own
// (~/.local/share/jupyter) are written by sandbox code, so discovery runs as
// the user, never follows a magic link, never opens what is not a regular
// file or a directory, and reads at most kernel.MaxSpecSize of a spec: a
// kernel.json that links to /dev/zero, the agent's memory or a root-only
// file, or is a FIFO, is skipped with a logged reason.
func (s *server) specs() (map[string]*kernel.Spec, error) {
	home := "/home/user"
	for _, kv := range s.cfg.Env {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	var specs map[string]*kernel.Spec
	var problems error
	err := s.asUser(func() error {
		specs, problems = kernel.FindSpecsWith(kernel.DefaultSpecDirs(home), openSpecFile)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.logSpecProblems(problems)
	return specs, problems
}

// logSpecProblems logs what was wrong with kernelspecs, once per change:
// discovery runs on every code call, and the agent's log must not grow with
// each one.
func (s *server) logSpecProblems(problems error) {
	msg := ""
	if problems != nil {
		msg = problems.Error()
	}
	s.specMu.Lock()
	changed := msg != s.specProblem
	s.specProblem = msg
	s.specMu.Unlock()
	if changed && msg != "" {
		s.log.Warn("kernelspecs skipped", "problems", msg)
	}
}

// openSpecFile is kernel discovery's Opener. Directories are opened with
// O_DIRECTORY (which fails before opening anything else); a file is first
// taken with O_PATH, which opens nothing, and opened for reading only when
// it is a regular file. Magic links (/proc/<pid>/fd/*, /proc/<pid>/root)
// are not followed, and nothing on a kernel pseudo filesystem is read.
func openSpecFile(name string, dir bool) (*os.File, error) {
	fail := func(err error) (*os.File, error) { return nil, &os.PathError{Op: "open", Path: name, Err: err} }
	if dir {
		fd, err := openat2(unix.AT_FDCWD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK, 0, unix.RESOLVE_NO_MAGICLINKS)
		if err != nil {
			return fail(err)
		}
		if err := notPseudo(fd); err != nil {
			unix.Close(fd)
			return fail(err)
		}
		return os.NewFile(uintptr(fd), name), nil
	}
	pfd, err := openat2(unix.AT_FDCWD, name, unix.O_PATH, 0, unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return fail(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fail(fmt.Errorf("a %s, not a regular file", kindOf(st.Mode)))
	}
	if err := notPseudo(pfd); err != nil {
		return fail(err)
	}
	fd, err := reopen(pfd, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return fail(err)
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || !sameFile(&st, &st2) {
		unix.Close(fd)
		return fail(errors.New("changed while being opened"))
	}
	return os.NewFile(uintptr(fd), name), nil
}

// pseudoFS are file systems whose "files" are kernel state: a kernelspec is
// never read from one.
var pseudoFS = map[int64]string{
	unix.PROC_SUPER_MAGIC: "proc", unix.SYSFS_MAGIC: "sysfs", unix.DEVPTS_SUPER_MAGIC: "devpts",
	unix.CGROUP_SUPER_MAGIC: "cgroup", unix.CGROUP2_SUPER_MAGIC: "cgroup2", unix.DEBUGFS_MAGIC: "debugfs",
	unix.TRACEFS_MAGIC: "tracefs", unix.SECURITYFS_MAGIC: "securityfs", unix.BPF_FS_MAGIC: "bpf",
	unix.PSTOREFS_MAGIC: "pstore", unix.EFIVARFS_MAGIC: "efivarfs", unix.NSFS_MAGIC: "nsfs",
	unix.BINFMTFS_MAGIC: "binfmt_misc",
}

func notPseudo(fd int) error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return err
	}
	if name, ok := pseudoFS[int64(sfs.Type)]; ok {
		return fmt.Errorf("on %s, a kernel pseudo filesystem", name)
	}
	return nil
}

func newContextID() string {
	var b [8]byte
	rand.Read(b[:])
	return "ctx_" + hex.EncodeToString(b[:])
}

// contextIDFree checks a context id the daemon chose: "ctx_" and 8
// lowercase hex digits (random ids have 16, so the two never meet), not
// in use.
func (s *server) contextIDFree(id string) error {
	hexPart, ok := strings.CutPrefix(id, "ctx_")
	if !ok || len(hexPart) != 8 || strings.Trim(hexPart, "0123456789abcdef") != "" {
		return errdefs.InvalidArgument("context id %q: want ctx_ and 8 lowercase hex digits", id)
	}
	s.ctxs.mu.Lock()
	defer s.ctxs.mu.Unlock()
	if s.ctxs.byID[id] != nil {
		return errdefs.Conflict("context %q exists already", id)
	}
	return nil
}

// launch starts a kernel process as the sandbox user through the reaper.
// The kernel package calls it from the goroutine that started or restarts
// the kernel, which runs on a user thread; finding the program, opening the
// log and starting the process all happen with the user's identity.
func (s *server) launch(argv, env []string, dir string) (int, <-chan kernel.ExitInfo, error) {
	if len(argv) == 0 {
		return 0, nil, errors.New("empty kernel argv")
	}
	full := wire.MergeEnv(s.cfg.Env, env)
	var pid int
	var done <-chan unix.WaitStatus
	err := s.userDo(func() error {
		bin, err := lookPath(argv[0], full)
		if err != nil {
			return err
		}
		null, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer null.Close()
		// The kernel's own stdout/stderr (not the cells' output, which
		// travels on iopub) go to a log inside the sandbox's filesystem,
		// so that a checkpoint finds the file it has open.
		logf, err := s.openKernelLog()
		if err != nil {
			s.log.Warn("kernels' log; kernel output discarded", "err", err)
			logf = null
		} else {
			defer logf.Close()
		}
		attr := &os.ProcAttr{
			Dir:   dir,
			Env:   full,
			Files: []*os.File{null, logf, logf},
			Sys:   &syscall.SysProcAttr{Setsid: true, Credential: s.credential(false)},
		}
		proc, d, err := s.reaper.start(bin, argv, attr)
		if err != nil {
			return err
		}
		pid, done = proc.Pid, d
		proc.Release()
		setOOMScoreAdj(pid, s.log)
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	exited := make(chan kernel.ExitInfo, 1)
	go func() {
		ws := <-done
		info := kernel.ExitInfo{Code: ws.ExitStatus()}
		if ws.Signaled() {
			info.Code = -1
			info.Signal = unix.SignalName(ws.Signal())
		}
		exited <- info
	}()
	return pid, exited, nil
}

// ensureKernel returns the context's live kernel, starting one if there is
// none or the last one died.
func (s *server) ensureKernel(ctx context.Context, c *codeContext) (*kernel.Kernel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.k != nil {
		select {
		case <-c.k.Dead():
			c.k = nil
		default:
			return c.k, nil
		}
	}
	if s.kernelDirErr != nil {
		return nil, fmt.Errorf("start %s kernel: the kernels' runtime directory could not be prepared: %w", c.spec.Name, s.kernelDirErr)
	}
	var k *kernel.Kernel
	err := s.asUser(func() error {
		var err error
		k, err = kernel.Start(ctx, kernel.Options{
			Spec: c.spec, Cwd: c.cwd, Env: c.env, RuntimeDir: s.runtimeDir(),
			Launch: s.launch, Logger: s.log, OnMessage: c.onKernelMessage,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start %s kernel: %w", c.spec.Name, err)
	}
	c.k = k
	c.last = 0
	return k, nil
}

// resolveContext finds the context a call names: an id, or "default" (or
// nothing) for the default context of the language, made on first use.
func (s *server) resolveContext(ref, language string) (*codeContext, error) {
	if ref != "" && ref != "default" {
		s.ctxs.mu.Lock()
		c := s.ctxs.byID[ref]
		if c != nil && c.hidden {
			c = nil
		}
		s.ctxs.mu.Unlock()
		if c == nil {
			return nil, errdefs.NotFound("context %q not found", ref)
		}
		if language != "" && !specMatches(c.spec, language) {
			return nil, errdefs.InvalidArgument("context %s runs %s, not %s", ref, c.spec.Name, language)
		}
		return c, nil
	}
	if language == "" {
		language = "python"
	}
	spec, err := s.resolveSpec(language)
	if err != nil {
		return nil, err
	}
	s.ctxs.mu.Lock()
	defer s.ctxs.mu.Unlock()
	c, made := s.defaultContextLocked(spec, false)
	if !made && c.hidden {
		// First use of a kernel a warm pool started: from now on it is
		// the context a new sandbox would have made just now.
		c.hidden = false
		c.created = time.Now().UTC()
	}
	return c, nil
}

// defaultContextLocked returns spec's default context, making it (hidden
// or not) when there is none; made says it did. s.ctxs.mu is held.
func (s *server) defaultContextLocked(spec *kernel.Spec, hidden bool) (c *codeContext, made bool) {
	id := "default-" + spec.Name
	if c := s.ctxs.byID[id]; c != nil {
		return c, false
	}
	c = &codeContext{id: id, spec: spec, cwd: s.cfg.WorkDir, isDefault: true, hidden: hidden, created: time.Now().UTC()}
	s.ctxs.byID[id] = c
	return c, true
}

// specFromBody decodes a request's body into req (what names the request
// in errors) and resolves its language ("": python) to a kernelspec.
func (s *server) specFromBody(r *http.Request, req any, language *string, what string) (*kernel.Spec, error) {
	if err := json.NewDecoder(r.Body).Decode(req); err != nil {
		return nil, errdefs.InvalidArgument("bad %s request: %v", what, err)
	}
	if *language == "" {
		*language = "python"
	}
	return s.resolveSpec(*language)
}

// handlePrestart starts the kernel of a language's default context ahead of
// its first cell, for a warm pool: the context stays hidden (unlisted, no
// id answers to it) until a call uses the default context, so a sandbox
// handed out from the pool looks like a new one whose first cell starts at
// once. A silent empty cell warms the path a first cell takes. Prestarting
// a default context that exists already is a no-op.
func (s *server) handlePrestart(w http.ResponseWriter, r *http.Request) {
	var req wire.PrestartRequest
	spec, err := s.specFromBody(r, &req, &req.Language, "prestart")
	if err != nil {
		writeError(w, err)
		return
	}
	s.ctxs.mu.Lock()
	c, _ := s.defaultContextLocked(spec, true)
	hidden := c.hidden
	s.ctxs.mu.Unlock()
	if !hidden {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	k, err := s.ensureKernel(r.Context(), c)
	if err != nil {
		writeError(w, err)
		return
	}
	// Empty code runs nothing and leaves execution_count alone; for
	// Python a silent setup and teardown run real code around it.
	setup, teardown, _ := envAround(c.spec, map[string]string{"FORKBOX_PRESTART": "1"})
	if _, err := k.ExecuteAround(r.Context(), setup, "", teardown, func(kernel.Event) {}); err != nil {
		writeError(w, fmt.Errorf("warm %s kernel: %w", c.spec.Name, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resolveSpec finds the kernelspec for a language or kernel name; an unknown
// one is a client error that lists what this sandbox has.
func (s *server) resolveSpec(language string) (*kernel.Spec, error) {
	specs, err := s.specs()
	if len(specs) == 0 && err != nil {
		return nil, err
	}
	spec, err := kernel.Resolve(specs, language)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.InvalidArgument("language: %v", err)
	}
	return spec, err
}

func specMatches(spec *kernel.Spec, language string) bool {
	return strings.EqualFold(spec.Name, language) || strings.EqualFold(spec.Language, language)
}

func (c *codeContext) view() api.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	state := "new"
	if c.k != nil {
		state = "idle"
		select {
		case <-c.k.Dead():
			state = "dead"
		default:
			if c.busy > 0 {
				state = "busy"
			}
		}
	}
	return api.Context{ID: c.id, Language: strings.ToLower(c.spec.Language), Kernel: c.spec.Name, Cwd: c.cwd,
		Default: c.isDefault, State: state, ExecutionCount: c.last, CreatedAt: c.created}
}

func (s *server) handleCreateContext(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateContextRequest
	spec, err := s.specFromBody(r, &req, &req.Language, "context")
	if err != nil {
		writeError(w, err)
		return
	}
	cwd := s.cfg.WorkDir
	if req.Cwd != "" {
		p, err := s.cleanPath(req.Cwd)
		if err != nil {
			writeError(w, err)
			return
		}
		// Checked (and made when missing, like mkdir -p) as the user: a
		// directory it may not see or make answers as one that does not
		// exist.
		ok := false
		s.asUser(func() error {
			if ok = dirEnterable(p); !ok && s.mkdirAll(p) == nil {
				ok = dirEnterable(p)
			}
			return nil
		})
		if !ok {
			writeError(w, errdefs.InvalidArgument("cwd: %s is not a directory the sandbox user can enter", p))
			return
		}
		cwd = p
	}
	id := newContextID()
	if req.ID != "" {
		if err := s.contextIDFree(req.ID); err != nil {
			writeError(w, err)
			return
		}
		id = req.ID
	}
	c := &codeContext{id: id, spec: spec, cwd: cwd, env: req.Env, created: time.Now().UTC()}
	// Start the kernel now so that errors show at once and the first cell is fast.
	k, err := s.ensureKernel(r.Context(), c)
	if err != nil {
		writeError(w, err)
		return
	}
	s.ctxs.mu.Lock()
	taken := s.ctxs.byID[c.id] != nil
	if !taken {
		s.ctxs.byID[c.id] = c
	}
	s.ctxs.mu.Unlock()
	if taken {
		// Another create with this id won the race.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		defer cancel()
		s.asUser(func() error { return k.Shutdown(ctx) })
		writeError(w, errdefs.Conflict("context %q exists already", c.id))
		return
	}
	writeJSONAnswer(w, http.StatusCreated, c.view())
}

func (s *server) handleListContexts(w http.ResponseWriter, r *http.Request) {
	s.ctxs.mu.Lock()
	list := make([]*codeContext, 0, len(s.ctxs.byID))
	for _, c := range s.ctxs.byID {
		if !c.hidden {
			list = append(list, c)
		}
	}
	s.ctxs.mu.Unlock()
	out := make([]api.Context, 0, len(list))
	for _, c := range list {
		out = append(out, c.view())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	writeJSONAnswer(w, http.StatusOK, out)
}

func (s *server) contextByPath(w http.ResponseWriter, r *http.Request) *codeContext {
	id := r.PathValue("id")
	s.ctxs.mu.Lock()
	c := s.ctxs.byID[id]
	if c != nil && c.hidden {
		c = nil
	}
	s.ctxs.mu.Unlock()
	if c == nil {
		writeError(w, errdefs.NotFound("context %q not found", id))
	}
	return c
}

func (s *server) handleDeleteContext(w http.ResponseWriter, r *http.Request) {
	c := s.contextByPath(w, r)
	if c == nil {
		return
	}
	s.ctxs.mu.Lock()
	delete(s.ctxs.byID, c.id)
	s.ctxs.mu.Unlock()
	if l := c.jlog.Load(); l != nil {
		l.close() // a client polling it hears at once
	}
	c.mu.Lock()
	k := c.k
	c.k = nil
	c.mu.Unlock()
	if k != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		// Shutdown removes the kernel's config file: as the user.
		s.asUser(func() error { return k.Shutdown(ctx) })
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) handleInterruptContext(w http.ResponseWriter, r *http.Request) {
	c := s.contextByPath(w, r)
	if c == nil {
		return
	}
	c.mu.Lock()
	k := c.k
	c.mu.Unlock()
	if k != nil {
		if err := k.Interrupt(); err != nil {
			writeError(w, err)
			return
		}
	}
	writeJSONAnswer(w, http.StatusOK, c.view())
}

func (s *server) handleRestartContext(w http.ResponseWriter, r *http.Request) {
	c := s.contextByPath(w, r)
	if c == nil {
		return
	}
	c.mu.Lock()
	k := c.k
	c.mu.Unlock()
	if k != nil {
		select {
		case <-k.Dead():
		default:
			// Restart writes a new connection file: as the user.
			if err := s.asUser(func() error { return k.Restart(r.Context()) }); err != nil {
				writeError(w, err)
				return
			}
			c.mu.Lock()
			c.last = 0
			c.mu.Unlock()
			writeJSONAnswer(w, http.StatusOK, c.view())
			return
		}
	}
	if _, err := s.ensureKernel(r.Context(), c); err != nil {
		writeError(w, err)
		return
	}
	writeJSONAnswer(w, http.StatusOK, c.view())
}

// handleCode runs one cell and streams its events as NDJSON, ending with the
// execution.
func (s *server) handleCode(w http.ResponseWriter, r *http.Request) {
	var req wire.CodeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, errdefs.InvalidArgument("bad code request: %v", err))
		return
	}
	c, err := s.resolveContext(req.Context, req.Language)
	if err != nil {
		writeError(w, err)
		return
	}
	k, err := s.ensureKernel(r.Context(), c)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	if req.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMS)*time.Millisecond)
		defer cancel()
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var wmu sync.Mutex
	enc := json.NewEncoder(w)
	send := func(ev wire.CodeEvent) {
		wmu.Lock()
		defer wmu.Unlock()
		if enc.Encode(ev) == nil && flusher != nil {
			flusher.Flush()
		}
	}
	c.mu.Lock()
	c.busy++
	c.mu.Unlock()
	setup, teardown, err := envAround(c.spec, req.Env)
	if err != nil {
		send(wire.CodeEvent{Type: "failure", Text: err.Error()})
		return
	}
	kex, err := k.ExecuteAround(ctx, setup, req.Code, teardown, func(ev kernel.Event) {
		send(wire.CodeEvent{Type: ev.Type, Text: ev.Text, Result: ev.Result, Error: apiError(ev.Error)})
	})
	exec := apiExecution(kex)
	c.mu.Lock()
	c.busy--
	if exec != nil && exec.ExecutionCount > 0 {
		c.last = exec.ExecutionCount
	}
	c.mu.Unlock()
	if err != nil {
		if errors.Is(err, kernel.ErrDead) {
			// The kernel died before this cell started: say so; the next
			// call starts a fresh one.
			exec = &api.Execution{Logs: api.Logs{Stdout: []string{}, Stderr: []string{}}, Results: []map[string]any{},
				Error: &api.ExecutionError{Name: "KernelDied", Value: err.Error(), Traceback: []string{}}}
		} else {
			send(wire.CodeEvent{Type: "failure", Text: err.Error()})
			return
		}
	}
	send(wire.CodeEvent{Type: "done", Execution: exec, ContextID: c.id, PID: k.PID()})
}

// envAround returns the silent setup and teardown that give one Python cell
// extra environment variables and then restore the previous ones.
func envAround(spec *kernel.Spec, env map[string]string) (setup, teardown string, err error) {
	if len(env) == 0 {
		return "", "", nil
	}
	if !strings.EqualFold(spec.Language, "python") {
		return "", "", errdefs.InvalidArgument("env: per-cell environment works in Python contexts; for %s set env when creating the context", spec.Language)
	}
	b, err := json.Marshal(env)
	if err != nil {
		return "", "", err
	}
	setup = fmt.Sprintf("import os as _fb_os, json as _fb_json\n_fb_env = _fb_json.loads(%q)\n_fb_saved = {k: _fb_os.environ.get(k) for k in _fb_env}\n_fb_os.environ.update(_fb_env)", b)
	teardown = "for _fb_k, _fb_v in _fb_saved.items():\n    _fb_os.environ.pop(_fb_k, None) if _fb_v is None else _fb_os.environ.__setitem__(_fb_k, _fb_v)\ndel _fb_env, _fb_saved, _fb_os, _fb_json"
	return setup, teardown, nil
}

func apiError(e *kernel.ExecError) *api.ExecutionError {
	if e == nil {
		return nil
	}
	tb := e.Traceback
	if tb == nil {
		tb = []string{}
	}
	return &api.ExecutionError{Name: e.Name, Value: e.Value, Traceback: tb}
}

func apiExecution(e *kernel.Execution) *api.Execution {
	if e == nil {
		return nil
	}
	out := &api.Execution{
		Logs:           api.Logs{Stdout: e.Logs.Stdout, Stderr: e.Logs.Stderr},
		Results:        make([]map[string]any, 0, len(e.Results)),
		Error:          apiError(e.Error),
		ExecutionCount: e.ExecutionCount,
	}
	for _, r := range e.Results {
		out.Results = append(out.Results, map[string]any(r))
	}
	return out
}

func writeJSONAnswer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
