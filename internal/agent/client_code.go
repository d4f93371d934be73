package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/forkbox/forkbox/api"
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
func (c *Client) RunCode(ctx context.Context, req *CodeRequest, onEvent func(CodeEvent)) (*CodeDone, error) {
	var done *CodeDone
	err := postStream(ctx, c, "/code", req, "code", func(ev *CodeEvent) (bool, error) {
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
func (c *Client) CreateContext(ctx context.Context, req *CreateContextRequest) (*api.Context, error) {
	var out api.Context
	return &out, c.jsonCall(ctx, http.MethodPost, "/contexts", req, &out)
}

// Prestart starts a language's default kernel ahead of its first cell,
// hidden from the context list until that cell (a warm pool's sandboxes).
func (c *Client) Prestart(ctx context.Context, language string) error {
	return c.jsonCall(ctx, http.MethodPost, "/contexts/prestart", &PrestartRequest{Language: language}, nil)
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
