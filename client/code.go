package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sse"
)

// eventFailure ends a code stream whose call failed after the stream began
// (data: api.ErrorBody). It is not "error", which carries the cell's error.
const eventFailure = "failure"

// RunCode runs a cell of code in a context of a sandbox and waits for it
// (docs/API.md, "The execution result"). A cell that raises (NameError, SyntaxError, TimeoutError,
// KernelDied, …) is not an error of the call: it comes back in the
// execution's Error. Errors are for calls that could not run the cell.
//
// An empty req.Context means the default context of req.Language (Python
// when empty); the context keeps its variables between calls.
func (c *Client) RunCode(ctx context.Context, sandbox string, req api.RunCodeRequest) (*api.Execution, error) {
	var exec api.Execution
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "/code"), nil, req, &exec); err != nil {
		return nil, err
	}
	return &exec, nil
}

// CodeHandlers receive the events of a streaming cell as the daemon sends
// them. Any of them may be nil to drop that kind of event.
type CodeHandlers struct {
	// OnStdout and OnStderr get what the code printed, one chunk at a time.
	OnStdout, OnStderr func(string)
	// OnResult gets each displayed value: a result object keyed by format
	// (text, html, markdown, latex, png, jpeg, svg, json, javascript, pdf,
	// "extra" for other MIME types) with "is_main_result": true on the value
	// of the cell's last expression.
	OnResult func(map[string]any)
	// OnError gets the cell's error (NameError, TimeoutError, …) when it
	// raises; it is also in the returned execution's Error.
	OnError func(api.ExecutionError)
}

// RunCodeStream runs a cell like RunCode and hands its output, results and
// error to h as they are produced. The handlers run on the calling goroutine,
// one at a time, in arrival order. The returned execution is the whole one,
// so its Logs and Results repeat what the handlers were given.
//
// If the call fails after the stream began (the sandbox's agent went away,
// say), the error is an *APIError as for a refused call.
func (c *Client) RunCodeStream(ctx context.Context, sandbox string, req api.RunCodeRequest, h CodeHandlers) (*api.Execution, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := c.newRequest(ctx, http.MethodPost, sandboxPath(sandbox, "/code"), nil, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	var exec api.Execution
	// A daemon (or a proxy) that ignores Accept answers with the execution
	// as JSON; replay it to the handlers. The order of stdout against stderr
	// and results is lost then.
	err = c.followStream(ctx, hreq, "code", func(body io.Reader) error {
		if err := json.NewDecoder(body).Decode(&exec); err != nil {
			return err
		}
		h.replay(&exec)
		return nil
	}, func(ev sse.Event) error {
		switch ev.Name {
		case api.EventStdout, api.EventStderr:
			var chunk api.OutputChunk
			if err := decodeEvent(ev, &chunk); err != nil {
				return err
			}
			fn := h.OnStdout
			if ev.Name == api.EventStderr {
				fn = h.OnStderr
			}
			if fn != nil && chunk.Data != "" {
				fn(chunk.Data)
			}
		case api.EventResult:
			var r map[string]any
			if err := decodeEvent(ev, &r); err != nil {
				return err
			}
			if h.OnResult != nil && r != nil {
				h.OnResult(r)
			}
		case api.EventError:
			var e api.ExecutionError
			if err := decodeEvent(ev, &e); err != nil {
				return err
			}
			if h.OnError != nil {
				h.OnError(e)
			}
		case api.EventDone:
			if err := decodeEvent(ev, &exec); err != nil {
				return err
			}
			return errStreamDone
		case eventFailure:
			return failureError(ev.Data)
		}
		// Other events are from a newer daemon; skip them.
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &exec, nil
}

// replay hands a complete execution to the handlers: stdout, stderr, the
// results, then the error.
func (h CodeHandlers) replay(e *api.Execution) {
	for _, s := range e.Logs.Stdout {
		if h.OnStdout != nil && s != "" {
			h.OnStdout(s)
		}
	}
	for _, s := range e.Logs.Stderr {
		if h.OnStderr != nil && s != "" {
			h.OnStderr(s)
		}
	}
	for _, r := range e.Results {
		if h.OnResult != nil && r != nil {
			h.OnResult(r)
		}
	}
	if h.OnError != nil && e.Error != nil {
		h.OnError(*e.Error)
	}
}

// failureError turns the data of a stream's failure event (an api.ErrorBody)
// into an *APIError with the status its code maps to.
func failureError(data []byte) error {
	var eb api.ErrorBody
	if err := json.Unmarshal(data, &eb); err != nil || eb.Code == "" {
		return &APIError{Status: http.StatusInternalServerError, Code: "internal", Message: string(data)}
	}
	status, _ := errdefs.HTTPStatus(errdefs.FromCode(eb.Code))
	return &APIError{Status: status, Code: eb.Code, Message: eb.Message, Quota: eb.Quota}
}

// MainText returns the text of e's main result (the value of the cell's last
// expression, like "215" for sum([120, 95])), or "" when there is none.
func MainText(e *api.Execution) string {
	if e == nil {
		return ""
	}
	for _, r := range e.Results {
		if r["is_main_result"] == true {
			s, _ := r["text"].(string)
			return s
		}
	}
	return ""
}

// CreateContext starts a new code context in a sandbox: a kernel of
// req.Language (Python when empty) with its own variables, working
// directory (an existing directory; default /workspace) and environment.
// Pass its ID as RunCodeRequest.Context.
func (c *Client) CreateContext(ctx context.Context, sandbox string, req api.CreateContextRequest) (*api.Context, error) {
	var out api.Context
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "/contexts"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListContexts returns the code contexts of a sandbox.
func (c *Client) ListContexts(ctx context.Context, sandbox string) (*api.ContextList, error) {
	var list api.ContextList
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, "/contexts"), nil, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// DeleteContext shuts a context's kernel down and forgets the context.
func (c *Client) DeleteContext(ctx context.Context, sandbox, id string) error {
	p, err := contextPath(sandbox, id, "")
	if err != nil {
		return err
	}
	return c.doJSON(ctx, http.MethodDelete, p, nil, nil, nil)
}

// InterruptContext interrupts the cell running in a context (a
// KeyboardInterrupt in Python); the context keeps its variables.
func (c *Client) InterruptContext(ctx context.Context, sandbox, id string) (*api.Context, error) {
	return c.contextAction(ctx, sandbox, id, "/interrupt")
}

// RestartContext restarts a context's kernel: its variables are gone and
// its execution count starts again.
func (c *Client) RestartContext(ctx context.Context, sandbox, id string) (*api.Context, error) {
	return c.contextAction(ctx, sandbox, id, "/restart")
}

func (c *Client) contextAction(ctx context.Context, sandbox, id, action string) (*api.Context, error) {
	p, err := contextPath(sandbox, id, action)
	if err != nil {
		return nil, err
	}
	var out api.Context
	if err := c.doJSON(ctx, http.MethodPost, p, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// contextPath returns /v1/sandboxes/{sandbox}/contexts/{id}{suffix}. An empty
// id is refused: the path would name the collection instead.
func contextPath(sandbox, id, suffix string) (string, error) {
	if id == "" {
		return "", errdefs.InvalidArgument("context id is empty")
	}
	return sandboxPath(sandbox, "/contexts/"+url.PathEscape(id)+suffix), nil
}

// Cells lists the cells a sandbox ran, oldest first: its history, the
// last 1,000 kept (the daemon's own warm-up cells are not in it).
func (c *Client) Cells(ctx context.Context, sandbox string) (*api.CellList, error) {
	var list api.CellList
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, "/cells"), nil, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}
