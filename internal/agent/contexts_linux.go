package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/kernel"
	"golang.org/x/sys/unix"
)

// Contexts are Jupyter kernels living inside the sandbox, so that a
// checkpoint of the sandbox holds them with their variables. Each context is
// started on its first execution, restarted by the next execution after it
// died, and runs its cells one at a time in arrival order (the kernel
// package's queue). Every language has a default context, made on first use.

// kernelRuntimeDir holds the kernels' connection files (owned by the user).
const kernelRuntimeDir = "/run/forkbox-kernels"

type codeContext struct {
	id        string
	spec      *kernel.Spec
	cwd       string
	env       []string
	isDefault bool
	created   time.Time

	mu   sync.Mutex // guards k and lastCount; held while a kernel starts
	k    *kernel.Kernel
	busy int
	last int // execution count of the last cell
}

type contexts struct {
	mu   sync.Mutex
	byID map[string]*codeContext
}

func (s *server) specs() (map[string]*kernel.Spec, error) {
	home := "/home/user"
	for _, kv := range s.cfg.Env {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	return kernel.FindSpecs(kernel.DefaultSpecDirs(home))
}

func newContextID() string {
	var b [8]byte
	rand.Read(b[:])
	return "ctx_" + hex.EncodeToString(b[:])
}

// launch starts a kernel process as the sandbox user through the reaper.
func (s *server) launch(argv, env []string, dir string) (int, <-chan kernel.ExitInfo, error) {
	if len(argv) == 0 {
		return 0, nil, errors.New("empty kernel argv")
	}
	full := MergeEnv(s.cfg.Env, env)
	bin, err := lookPath(argv[0], full)
	if err != nil {
		return 0, nil, err
	}
	null, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		return 0, nil, err
	}
	defer null.Close()
	// The kernel's own stdout/stderr (not the cells' output, which travels on
	// iopub) go to a log inside the sandbox's filesystem, so that a
	// checkpoint finds the file it has open.
	logf, err := os.OpenFile(path.Join(kernelRuntimeDir, "kernels.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		logf = null
	} else {
		defer logf.Close()
	}
	attr := &os.ProcAttr{
		Dir:   dir,
		Env:   full,
		Files: []*os.File{null, logf, logf},
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Credential: &syscall.Credential{Uid: uint32(s.cfg.UID), Gid: uint32(s.cfg.GID), Groups: []uint32{}},
		},
	}
	proc, done, err := s.reaper.start(bin, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	pid := proc.Pid
	proc.Release()
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte("0"), 0)
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
	if err := os.MkdirAll(kernelRuntimeDir, 0o700); err != nil {
		return nil, err
	}
	os.Chown(kernelRuntimeDir, s.cfg.UID, s.cfg.GID)
	k, err := kernel.Start(ctx, kernel.Options{
		Spec: c.spec, Cwd: c.cwd, Env: c.env, RuntimeDir: kernelRuntimeDir,
		Launch: s.launch, Logger: s.log,
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
	id := "default-" + spec.Name
	s.ctxs.mu.Lock()
	defer s.ctxs.mu.Unlock()
	if c := s.ctxs.byID[id]; c != nil {
		return c, nil
	}
	c := &codeContext{id: id, spec: spec, cwd: s.cfg.WorkDir, isDefault: true, created: time.Now().UTC()}
	s.ctxs.byID[id] = c
	return c, nil
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
	var req CreateContextRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, errdefs.InvalidArgument("bad context request: %v", err))
		return
	}
	if req.Language == "" {
		req.Language = "python"
	}
	spec, err := s.resolveSpec(req.Language)
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
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			writeError(w, errdefs.InvalidArgument("cwd: %s is not a directory in the sandbox", p))
			return
		}
		cwd = p
	}
	c := &codeContext{id: newContextID(), spec: spec, cwd: cwd, env: req.Env, created: time.Now().UTC()}
	// Start the kernel now so that errors show at once and the first cell is fast.
	if _, err := s.ensureKernel(r.Context(), c); err != nil {
		writeError(w, err)
		return
	}
	s.ctxs.mu.Lock()
	s.ctxs.byID[c.id] = c
	s.ctxs.mu.Unlock()
	writeJSONAnswer(w, http.StatusCreated, c.view())
}

func (s *server) handleListContexts(w http.ResponseWriter, r *http.Request) {
	s.ctxs.mu.Lock()
	list := make([]*codeContext, 0, len(s.ctxs.byID))
	for _, c := range s.ctxs.byID {
		list = append(list, c)
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
	c.mu.Lock()
	k := c.k
	c.k = nil
	c.mu.Unlock()
	if k != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		k.Shutdown(ctx)
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
			if err := k.Restart(r.Context()); err != nil {
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
	var req CodeRequest
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
	send := func(ev CodeEvent) {
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
		send(CodeEvent{Type: "failure", Text: err.Error()})
		return
	}
	kex, err := k.ExecuteAround(ctx, setup, req.Code, teardown, func(ev kernel.Event) {
		send(CodeEvent{Type: ev.Type, Text: ev.Text, Result: ev.Result, Error: apiError(ev.Error)})
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
			send(CodeEvent{Type: "failure", Text: err.Error()})
			return
		}
	}
	send(CodeEvent{Type: "done", Execution: exec, ContextID: c.id, PID: k.PID()})
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
