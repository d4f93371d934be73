package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// CodeDone is the end of a cell: its execution, the context that ran it and
// the kernel's pid inside the sandbox.
type CodeDone struct {
	Execution *api.Execution
	ContextID string
	PID       int
}

// RunCode runs a cell and calls onEvent for each event while it runs.
func (c *Client) RunCode(ctx context.Context, req *wire.CodeRequest, onEvent func(wire.CodeEvent)) (*CodeDone, error) {
	var done *CodeDone
	err := postStream(ctx, c, "/code", req, "code", func(ev *wire.CodeEvent) (bool, error) {
		switch ev.Type {
		case "done":
			if ev.Execution == nil {
				return true, errors.New("sandbox agent sent no execution")
			}
			done = &CodeDone{Execution: ev.Execution, ContextID: ev.ContextID, PID: ev.PID}
			return true, nil
		case "failure":
			return true, errors.New(ev.Text)
		}
		if onEvent != nil {
			onEvent(*ev)
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

func (c *Client) jsonCall(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.do(ctx, method, path, nil, body, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode agent answer: %w", err)
	}
	return nil
}

// CreateContext starts a new code context.
func (c *Client) CreateContext(ctx context.Context, req *wire.CreateContextRequest) (*api.Context, error) {
	var out api.Context
	return &out, c.jsonCall(ctx, http.MethodPost, "/contexts", req, &out)
}

// Prestart starts a language's default kernel ahead of its first cell,
// hidden from the context list until that cell (a warm pool's sandboxes).
func (c *Client) Prestart(ctx context.Context, language string) error {
	return c.jsonCall(ctx, http.MethodPost, "/contexts/prestart", &wire.PrestartRequest{Language: language}, nil)
}

// ListContexts lists the sandbox's code contexts.
func (c *Client) ListContexts(ctx context.Context) ([]api.Context, error) {
	var out []api.Context
	return out, c.jsonCall(ctx, http.MethodGet, "/contexts", nil, &out)
}

// DeleteContext shuts a context's kernel down and forgets it.
func (c *Client) DeleteContext(ctx context.Context, id string) error {
	if id == "" {
		return errdefs.InvalidArgument("context id is empty")
	}
	return c.jsonCall(ctx, http.MethodDelete, "/contexts/"+id, nil, nil)
}

// InterruptContext interrupts the cell running in a context.
func (c *Client) InterruptContext(ctx context.Context, id string) (*api.Context, error) {
	var out api.Context
	return &out, c.jsonCall(ctx, http.MethodPost, "/contexts/"+id+"/interrupt", nil, &out)
}

// RestartContext restarts a context's kernel; its variables are gone.
func (c *Client) RestartContext(ctx context.Context, id string) (*api.Context, error) {
	var out api.Context
	return &out, c.jsonCall(ctx, http.MethodPost, "/contexts/"+id+"/restart", nil, &out)
}

// maxJupyterAnswer bounds a receive's answer in the daemon: the agent
// answers with at most 8 MiB of messages, or with one message of at most
// 32 MiB (its buffers a third larger in base64) when that one is larger.
const maxJupyterAnswer = 64 << 20

// jupyterPath is the path of a context's Jupyter call.
func jupyterPath(contextID, call string) string {
	return "/contexts/" + url.PathEscape(contextID) + "/jupyter/" + call
}

// JupyterSend sends a Jupyter client's message to a context's kernel
// (contextID "default": the language's default context, made on first use
// as for RunCode), starting the kernel if the context has none running.
// language may be empty. A malformed message is an errdefs.ErrInvalidArgument
// error, an unknown context errdefs.ErrNotFound.
func (c *Client) JupyterSend(ctx context.Context, contextID, language string, m *wire.JupyterMessage) error {
	if contextID == "" {
		return errdefs.InvalidArgument("context id is empty")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the client's bytes as they are
	if err := enc.Encode(m); err != nil {
		return errdefs.InvalidArgument("jupyter message: %v", err)
	}
	var q url.Values
	if language != "" {
		q = url.Values{"language": {language}}
	}
	resp, err := c.do(ctx, http.MethodPost, jupyterPath(contextID, "send"), q, &b, "application/json")
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return nil
}

// JupyterRecv returns a context's Jupyter messages with seq > after,
// waiting up to wait (at most 30 s; 0: answer at once) for one to come;
// after = -1 asks for the head alone. The next cursor is the last
// message's seq, or Head when none came; a Head below after means the
// context's log started over (the context was made anew). It never starts a
// kernel. The answer is checked, as the agent is the sandbox's: seqs rise
// above after up to Head, channels and parts are what the protocol has.
func (c *Client) JupyterRecv(ctx context.Context, contextID, language string, after int64, wait time.Duration) (*wire.JupyterRecvAnswer, error) {
	if contextID == "" {
		return nil, errdefs.InvalidArgument("context id is empty")
	}
	q := url.Values{"after": {strconv.FormatInt(after, 10)}, "wait_ms": {strconv.FormatInt(max(wait.Milliseconds(), 0), 10)}}
	if language != "" {
		q.Set("language", language)
	}
	resp, err := c.do(ctx, http.MethodGet, jupyterPath(contextID, "recv"), q, nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body := &io.LimitedReader{R: resp.Body, N: maxJupyterAnswer + 1}
	var ans wire.JupyterRecvAnswer
	if err := json.NewDecoder(body).Decode(&ans); err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case body.N <= 0:
			return nil, errdefs.ResourceExhausted("the sandbox's jupyter answer is larger than %d MiB; refused", maxJupyterAnswer>>20)
		}
		return nil, fmt.Errorf("decode agent answer: %w", err)
	}
	if ctx.Err() != nil {
		// The caller went away while the answer came: it is not read (a
		// receive takes nothing away; the next one asks from the same
		// cursor).
		return nil, ctx.Err()
	}
	if err := checkRecvAnswer(&ans, after); err != nil {
		return nil, fmt.Errorf("sandbox agent's jupyter answer: %w", err)
	}
	if ans.Messages == nil {
		ans.Messages = []wire.JupyterMessage{}
	}
	return &ans, nil
}

// checkRecvAnswer says what is wrong with an answer to a receive after the
// cursor.
func checkRecvAnswer(a *wire.JupyterRecvAnswer, after int64) error {
	if a.Head < 0 || a.Dropped < 0 {
		return fmt.Errorf("head %d, dropped %d", a.Head, a.Dropped)
	}
	if after < 0 && len(a.Messages) > 0 {
		return errors.New("messages for a head-only receive")
	}
	last := after
	for i := range a.Messages {
		m := &a.Messages[i]
		if m.Seq <= last || m.Seq > a.Head {
			return fmt.Errorf("message seq %d after %d (head %d)", m.Seq, last, a.Head)
		}
		last = m.Seq
		switch m.Channel {
		case "shell", "iopub", "control", "stdin":
		default:
			return fmt.Errorf("message %d on channel %q", m.Seq, m.Channel)
		}
		for _, part := range []json.RawMessage{m.Header, m.Parent, m.Metadata, m.Content} {
			if t := bytes.TrimLeft(part, " \t\r\n"); len(t) == 0 || t[0] != '{' {
				return fmt.Errorf("message %d: a part is not a JSON object", m.Seq)
			}
		}
	}
	return nil
}
