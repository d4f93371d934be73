package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sandbox"
)

// Code is what the code interpreter needs of forkbox; *sandbox.Manager has
// it.
type Code interface {
	RunCode(ctx context.Context, ref string, req *api.RunCodeRequest, opts sandbox.CodeOptions) (*api.Execution, error)
	CreateContext(ctx context.Context, ref string, req *api.CreateContextRequest) (*api.Context, error)
	ListContexts(ctx context.Context, ref string) ([]api.Context, error)
	ActOnContext(ctx context.Context, ref, id string, action sandbox.ContextAction) (*api.Context, error)
	E2BDefaultContext(ctx context.Context, ref, language, cwd string) (string, error)
}

var _ Code = (*sandbox.Manager)(nil)

// jupyter serves the code interpreter's port (49999) for the sandbox in
// the request's context.
type jupyter struct {
	c   Code
	log *slog.Logger
	mux *http.ServeMux
	// defaults serializes finding (and making) E2B's default contexts;
	// known remembers them by sandbox id and language.
	defaults sync.Mutex
	known    map[string]string
}

func newJupyter(c Code, log *slog.Logger) *jupyter {
	j := &jupyter{c: c, log: log, mux: http.NewServeMux(), known: map[string]string{}}
	j.mux.HandleFunc("POST /execute", j.execute)
	j.mux.HandleFunc("GET /contexts", j.listContexts)
	j.mux.HandleFunc("POST /contexts", j.createContext)
	j.mux.HandleFunc("POST /contexts/{id}/restart", j.contextAction(sandbox.ContextRestart))
	j.mux.HandleFunc("DELETE /contexts/{id}", j.contextAction(sandbox.ContextDelete))
	j.mux.HandleFunc("POST /contexts/{id}/interrupt", j.contextAction(sandbox.ContextInterrupt))
	j.mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, "OK")
	})
	j.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "forkbox's code interpreter does not serve "+r.Method+" "+r.URL.Path, http.StatusNotFound)
	})
	return j
}

// jupyterError answers the code interpreter's way: a status and plain
// text (the SDKs turn 404 into NotFoundError, 502 into a timeout, and any
// other into SandboxError with the status).
func jupyterError(w http.ResponseWriter, err error) {
	var ce *clientError
	if errors.As(err, &ce) {
		http.Error(w, ce.msg, ce.status)
		return
	}
	status, _ := errdefs.HTTPStatus(err)
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		status = http.StatusBadGateway // the sandbox is not running: "sandbox timeout"
	}
	http.Error(w, err.Error(), status)
}

// executeJSON is the body of POST /execute (Python sends nulls for what it
// does not set).
type executeJSON struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// languages E2B names that forkbox knows by another name.
var languageAliases = map[string]string{"js": "javascript", "ts": "typescript"}

// execute runs a cell and streams it back as E2B's NDJSON lines: stdout
// and stderr as they come (with timestamps), results with their MIME keys,
// the error, the execution count, then end_of_execution. The headers go
// out at once (the SDKs time out on them), keepalives every 5 s keep the
// connection from idling out, and a client that goes away interrupts the
// cell.
func (j *jupyter) execute(w http.ResponseWriter, r *http.Request) {
	var req executeJSON
	if err := decodeBody(r, &req); err != nil {
		jupyterError(w, err)
		return
	}
	ctxID, lang := deref(req.ContextID), strings.ToLower(deref(req.Language))
	if ctxID != "" && lang != "" {
		http.Error(w, "context_id and language: give at most one (a context has its language)", http.StatusBadRequest)
		return
	}
	if a, ok := languageAliases[lang]; ok {
		lang = a
	}
	defaultKey := ""
	if ctxID == "" {
		// E2B's cells run in /home/user: a context of E2B's own per
		// language, not forkbox's default one (in /workspace).
		if lang == "" {
			lang = "python"
		}
		defaultKey = sandboxID(r.Context()) + "/" + lang
		id, err := j.defaultContext(r.Context(), defaultKey, lang, false)
		if err != nil {
			jupyterError(w, err)
			return
		}
		ctxID, lang = id, ""
	}
	run := &api.RunCodeRequest{Code: req.Code, Language: lang, Context: ctxID, Env: req.EnvVars}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var mu sync.Mutex
	line := func(v map[string]any) {
		b, err := json.Marshal(v)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		w.Write(append(b, '\n'))
		if flusher != nil {
			flusher.Flush()
		}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				line(map[string]any{"type": "keepalive"})
			}
		}
	}()
	onEvent := func(ev sandbox.CodeEvent) {
		switch ev.Type {
		case "stdout", "stderr":
			line(map[string]any{"type": ev.Type, "text": ev.Text, "timestamp": time.Now().UTC().Format(time.RFC3339Nano)})
		case "result":
			line(resultLine(ev.Result))
		case "error":
			if ev.Error != nil {
				line(errorLine(ev.Error))
			}
		}
	}
	exec, err := j.c.RunCode(r.Context(), sandboxID(r.Context()), run, sandbox.CodeOptions{OnEvent: onEvent})
	if defaultKey != "" && errors.Is(err, errdefs.ErrNotFound) {
		// The remembered context is gone (deleted, or the sandbox was
		// restored from elsewhere): find or make it again, once.
		if run.Context, err = j.defaultContext(r.Context(), defaultKey, strings.TrimPrefix(defaultKey, sandboxID(r.Context())+"/"), true); err == nil {
			exec, err = j.c.RunCode(r.Context(), sandboxID(r.Context()), run, sandbox.CodeOptions{OnEvent: onEvent})
		}
	}
	close(done)
	if err != nil {
		// The headers are out: the failure is an error line, as E2B's
		// server reports one it meets mid-cell.
		line(map[string]any{"type": "error", "name": errorName(err), "value": err.Error(), "traceback": ""})
		line(map[string]any{"type": "end_of_execution"})
		return
	}
	line(map[string]any{"type": "number_of_executions", "execution_count": exec.ExecutionCount})
	line(map[string]any{"type": "end_of_execution"})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func errorName(err error) string {
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return "NotFoundError"
	case errors.Is(err, errdefs.ErrTimeout):
		return "TimeoutError"
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return "InvalidArgumentError"
	}
	return "SandboxError"
}

// resultLine is a forkbox result (its keys are already E2B's formats) as
// E2B's result line: text loses one pair of surrounding quotes, as E2B's
// server does.
func resultLine(r map[string]any) map[string]any {
	out := map[string]any{"type": "result"}
	for k, v := range r {
		out[k] = v
	}
	if _, ok := out["is_main_result"]; !ok {
		out["is_main_result"] = false
	}
	if t, ok := out["text"].(string); ok && len(t) >= 2 && (t[0] == '\'' && t[len(t)-1] == '\'' || t[0] == '"' && t[len(t)-1] == '"') {
		out["text"] = t[1 : len(t)-1]
	}
	return out
}

func errorLine(e *api.ExecutionError) map[string]any {
	return map[string]any{"type": "error", "name": e.Name, "value": e.Value, "traceback": strings.Join(e.Traceback, "\n")}
}

// contextJSON is E2B's context: id, language, cwd.
type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func contextView(c *api.Context) contextJSON {
	return contextJSON{ID: c.ID, Language: c.Language, Cwd: c.Cwd}
}

func (j *jupyter) createContext(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := decodeBody(r, &req); err != nil {
		jupyterError(w, err)
		return
	}
	lang := strings.ToLower(req.Language)
	if a, ok := languageAliases[lang]; ok {
		lang = a
	}
	if req.Cwd == "" {
		req.Cwd = homeDir
	}
	c, err := j.c.CreateContext(r.Context(), sandboxID(r.Context()), &api.CreateContextRequest{Language: lang, Cwd: req.Cwd})
	if err != nil {
		jupyterError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, contextView(c))
}

func (j *jupyter) listContexts(w http.ResponseWriter, r *http.Request) {
	list, err := j.c.ListContexts(r.Context(), sandboxID(r.Context()))
	if err != nil {
		jupyterError(w, err)
		return
	}
	out := make([]contextJSON, 0, len(list))
	for i := range list {
		out = append(out, contextView(&list[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

func (j *jupyter) contextAction(action sandbox.ContextAction) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := j.c.ActOnContext(r.Context(), sandboxID(r.Context()), r.PathValue("id"), action)
		if err != nil {
			jupyterError(w, err)
			return
		}
		if c == nil {
			writeJSON(w, http.StatusOK, map[string]any{})
			return
		}
		writeJSON(w, http.StatusOK, contextView(c))
	}
}

// defaultContext is the id of E2B's default context for key (sandbox id /
// language): remembered, or else found or made in the sandbox (forget:
// look again even if remembered).
func (j *jupyter) defaultContext(ctx context.Context, key, lang string, forget bool) (string, error) {
	j.defaults.Lock()
	defer j.defaults.Unlock()
	if id, ok := j.known[key]; ok && !forget {
		return id, nil
	}
	id, err := j.c.E2BDefaultContext(ctx, sandboxID(ctx), lang, homeDir)
	if err != nil {
		return "", err
	}
	if len(j.known) > 4096 {
		clear(j.known) // a bound; it refills on use
	}
	j.known[key] = id
	return id, nil
}
