package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/forkbox/forkbox/internal/sse"
)

// errStreamDone is returned by an onEvent of followStream to end the stream
// successfully.
var errStreamDone = errors.New("stream done")

// followStream sends req asking for an event stream and hands each event to
// onEvent until it returns errStreamDone (the answer is complete) or another
// error. A daemon or proxy that ignores Accept answers with plain JSON, which
// goes to onPlain instead. what names the stream in errors ("chat", "exec",
// ...); a stream that ends before its last event is io.ErrUnexpectedEOF.
func (c *Client) followStream(ctx context.Context, req *http.Request, what string,
	onPlain func(body io.Reader) error, onEvent func(ev sse.Event) error) error {
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		if err := onPlain(resp.Body); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("decoding %s answer: %w", what, err)
		}
		return nil
	}
	events := sse.NewReader(resp.Body)
	for {
		ev, err := events.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s stream ended before its end: %w", what, io.ErrUnexpectedEOF)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("reading %s stream: %w", what, err)
		}
		if err := onEvent(ev); errors.Is(err, errStreamDone) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// decodeEvent decodes an event's data into v, naming the event on failure.
func decodeEvent(ev sse.Event, v any) error {
	if err := json.Unmarshal(ev.Data, v); err != nil {
		return fmt.Errorf("decoding %s event: %w", ev.Name, err)
	}
	return nil
}
