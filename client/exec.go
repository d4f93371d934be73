package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// Exec runs a command in a sandbox and waits for it. A command that runs and
// exits non-zero is not an error: look at ExitCode (and Signal, TimedOut,
// OOMKilled) in the result. Errors are for calls that could not run the
// command at all.
func (c *Client) Exec(ctx context.Context, sandbox string, req api.ExecRequest) (*api.ExecResult, error) {
	var res api.ExecResult
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "/exec"), nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ExecStream runs a command like Exec but hands its output to onStdout and
// onStderr as the daemon sends it (either may be nil to drop that stream).
// The callbacks run on the calling goroutine, one at a time, in arrival order;
// the slice is only valid during the call. The result carries the exit status;
// its Stdout and Stderr are empty since the output went to the callbacks.
func (c *Client) ExecStream(ctx context.Context, sandbox string, req api.ExecRequest, onStdout, onStderr func([]byte)) (*api.ExecResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := c.newRequest(ctx, http.MethodPost, sandboxPath(sandbox, "/exec"), nil, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	resp, err := c.send(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()

	emit := func(fn func([]byte), data []byte) {
		if fn != nil && len(data) > 0 {
			fn(data)
		}
	}

	// A daemon (or a proxy) that ignores Accept answers with one JSON
	// result; deliver it the same way.
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		var res api.ExecResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			return nil, fmt.Errorf("decoding exec answer: %w", err)
		}
		emit(onStdout, []byte(res.Stdout))
		emit(onStderr, []byte(res.Stderr))
		res.Stdout, res.Stderr = "", ""
		return &res, nil
	}

	events := newSSEReader(resp.Body)
	for {
		ev, err := events.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("exec stream ended before the command's exit: %w", io.ErrUnexpectedEOF)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("reading exec stream: %w", err)
		}
		switch ev.name {
		case api.EventStdout, api.EventStderr:
			var chunk api.OutputChunk
			if err := json.Unmarshal(ev.data, &chunk); err != nil {
				return nil, fmt.Errorf("decoding %s event: %w", ev.name, err)
			}
			if ev.name == api.EventStdout {
				emit(onStdout, []byte(chunk.Data))
			} else {
				emit(onStderr, []byte(chunk.Data))
			}
		case api.EventExit:
			var res api.ExecResult
			if err := json.Unmarshal(ev.data, &res); err != nil {
				return nil, fmt.Errorf("decoding exit event: %w", err)
			}
			return &res, nil
		case api.EventError:
			var eb api.ErrorBody
			if err := json.Unmarshal(ev.data, &eb); err != nil || eb.Code == "" {
				return nil, &APIError{Status: http.StatusInternalServerError, Code: "internal", Message: string(ev.data)}
			}
			status, _ := errdefs.HTTPStatus(errdefs.FromCode(eb.Code))
			return nil, &APIError{Status: status, Code: eb.Code, Message: eb.Message}
		}
		// Other events are from a newer daemon; skip them.
	}
}
