package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sse"
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
	emit := func(fn func([]byte), data []byte) {
		if fn != nil && len(data) > 0 {
			fn(data)
		}
	}
	var res api.ExecResult
	// A daemon (or a proxy) that ignores Accept answers with one JSON
	// result; deliver it the same way.
	err = c.followStream(ctx, hreq, "exec", func(body io.Reader) error {
		if err := json.NewDecoder(body).Decode(&res); err != nil {
			return err
		}
		emit(onStdout, []byte(res.Stdout))
		emit(onStderr, []byte(res.Stderr))
		res.Stdout, res.Stderr = "", ""
		return nil
	}, func(ev sse.Event) error {
		switch ev.Name {
		case api.EventStdout, api.EventStderr:
			var chunk api.OutputChunk
			if err := decodeEvent(ev, &chunk); err != nil {
				return err
			}
			if ev.Name == api.EventStdout {
				emit(onStdout, []byte(chunk.Data))
			} else {
				emit(onStderr, []byte(chunk.Data))
			}
		case api.EventExit:
			if err := decodeEvent(ev, &res); err != nil {
				return err
			}
			return errStreamDone
		case api.EventError:
			var eb api.ErrorBody
			if err := json.Unmarshal(ev.Data, &eb); err != nil || eb.Code == "" {
				return &APIError{Status: http.StatusInternalServerError, Code: "internal", Message: string(ev.Data)}
			}
			status, _ := errdefs.HTTPStatus(errdefs.FromCode(eb.Code))
			return &APIError{Status: status, Code: eb.Code, Message: eb.Message, Quota: eb.Quota}
		}
		// Other events are from a newer daemon; skip them.
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &res, nil
}
