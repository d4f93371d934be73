package sandbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/lazyre"
)

var (
	contextIDRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	languageRE  = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$`)
)

// CodeOptions streams a cell's events while it runs; nil callbacks are skipped.
type CodeOptions struct {
	OnEvent func(CodeEvent)
	// Source is who runs the cell, as its history records it: api.CellUser
	// (the default) or api.CellModel.
	Source api.CellSource
	// OnRecorded is given the cell as its history records it (nil: skipped).
	OnRecorded func(api.Cell)
	// Unrecorded keeps the cell out of the history: the daemon's own
	// cells (a pool's warm-up), which the sandbox's user never ran.
	Unrecorded bool
}

// CodeEvent is a cell's output while it runs: Type "stdout" or "stderr"
// with Text, "result" with Result (a MIME bundle), "error" with Error. The
// cell's end is RunCode's answer, never an event.
type CodeEvent struct {
	Type   string
	Text   string
	Result map[string]any
	Error  *api.ExecutionError
}

// RunCode runs a cell in a context of a sandbox and answers with its
// execution (docs/API.md, "The execution result").
func (m *Manager) RunCode(ctx context.Context, ref string, req *api.RunCodeRequest, opts CodeOptions) (*api.Execution, error) {
	areq := &wire.CodeRequest{Code: req.Code, Language: req.Language, Context: req.Context}
	if req.Language != "" && !languageRE.MatchString(req.Language) {
		return nil, errdefs.InvalidArgument("language: %q is not a language or kernel name", req.Language)
	}
	if req.Context != "" && req.Context != "default" && !contextIDRE.MatchString(req.Context) {
		return nil, errdefs.InvalidArgument("context: %q is not a context id", req.Context)
	}
	if i := strings.IndexByte(req.Code, 0); i >= 0 {
		// No language's source holds one, and ipykernel never answers a
		// cell that does (its compile raises outside the cell's handling):
		// the call would hang and block the context's queue.
		return nil, errdefs.InvalidArgument("code: contains a NUL byte (at byte %d)", i)
	}
	if req.TimeoutMS != nil {
		if *req.TimeoutMS < 1 || *req.TimeoutMS > 86_400_000 {
			return nil, rangeErr("timeout_ms", *req.TimeoutMS, 1, 86_400_000)
		}
		areq.TimeoutMS = *req.TimeoutMS
	}
	if len(req.Env) > 0 {
		for k, v := range req.Env {
			if !envKeyRE.MatchString(k) {
				return nil, errdefs.InvalidArgument("env: %q is not a valid variable name", k)
			}
			if strings.ContainsRune(v, 0) {
				return nil, errdefs.InvalidArgument("env: value of %s contains a NUL byte", k)
			}
		}
		areq.Env = req.Env
	}
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer release()
	before := m.rt.OOMKills(l.id)
	start := time.Now()
	var onEvent func(wire.CodeEvent)
	if opts.OnEvent != nil {
		onEvent = func(ev wire.CodeEvent) {
			opts.OnEvent(CodeEvent{Type: ev.Type, Text: ev.Text, Result: ev.Result, Error: ev.Error})
		}
	}
	done, err := l.agent.RunCode(ctx, areq, onEvent)
	m.metrics.codeSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, m.agentErr(l, err)
	}
	exec := done.Execution
	exec.ContextID = done.ContextID
	exec.DurationMS = time.Since(start).Milliseconds()
	if exec.Error != nil && exec.Error.Name == "KernelDied" && m.rt.OOMKills(l.id) > before {
		exec.Error.Value = fmt.Sprintf("the kernel ran out of memory and was killed (the sandbox's memory_mb limit was reached): %s", exec.Error.Value)
	}
	normalize(exec)
	m.recordCell(l, req, opts, exec, start)
	return exec, nil
}

// normalize makes empty lists [] rather than null, as the contract shows.
func normalize(e *api.Execution) {
	if e.Logs.Stdout == nil {
		e.Logs.Stdout = []string{}
	}
	if e.Logs.Stderr == nil {
		e.Logs.Stderr = []string{}
	}
	if e.Results == nil {
		e.Results = []map[string]any{}
	}
	if e.Error != nil && e.Error.Traceback == nil {
		e.Error.Traceback = []string{}
	}
}

// CreateContext starts a new code context in a sandbox.
func (m *Manager) CreateContext(ctx context.Context, ref string, req *api.CreateContextRequest) (*api.Context, error) {
	return m.createContext(ctx, ref, "", req)
}

func (m *Manager) createContext(ctx context.Context, ref, id string, req *api.CreateContextRequest) (*api.Context, error) {
	if req.Language != "" && !languageRE.MatchString(req.Language) {
		return nil, errdefs.InvalidArgument("language: %q is not a language or kernel name", req.Language)
	}
	if strings.ContainsRune(req.Cwd, 0) {
		return nil, errdefs.InvalidArgument("cwd: %q contains a NUL byte", req.Cwd)
	}
	env, err := envList(req.Env)
	if err != nil {
		return nil, err
	}
	areq := &wire.CreateContextRequest{ID: id, Language: req.Language, Cwd: req.Cwd, Env: env}
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer release()
	c, err := l.agent.CreateContext(ctx, areq)
	if err != nil {
		return nil, m.agentErr(l, err)
	}
	return c, nil
}

// ListContexts lists the code contexts of a sandbox.
func (m *Manager) ListContexts(ctx context.Context, ref string) ([]api.Context, error) {
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer release()
	list, err := l.agent.ListContexts(ctx)
	if err != nil {
		return nil, m.agentErr(l, err)
	}
	if list == nil {
		list = []api.Context{}
	}
	return list, nil
}

// ContextAction is what can be done to an existing context.
type ContextAction string

// Context actions.
const (
	ContextDelete    ContextAction = "delete"
	ContextInterrupt ContextAction = "interrupt"
	ContextRestart   ContextAction = "restart"
)

// ActOnContext deletes, interrupts or restarts a context.
func (m *Manager) ActOnContext(ctx context.Context, ref, id string, action ContextAction) (*api.Context, error) {
	if !contextIDRE.MatchString(id) || strings.Contains(id, "..") {
		return nil, errdefs.InvalidArgument("context: %q is not a context id", id)
	}
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer release()
	var c *api.Context
	switch action {
	case ContextDelete:
		err = l.agent.DeleteContext(ctx, id)
	case ContextInterrupt:
		c, err = l.agent.InterruptContext(ctx, id)
	case ContextRestart:
		c, err = l.agent.RestartContext(ctx, id)
	default:
		return nil, errdefs.InvalidArgument("unknown context action %q", action)
	}
	if err != nil {
		return nil, m.agentErr(l, err)
	}
	return c, nil
}
