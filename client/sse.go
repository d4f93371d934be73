package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
)

// maxSSELine bounds one line of an event stream. The daemon sends output in
// chunks far smaller than this; the bound only stops a broken peer from
// growing the buffer without limit.
const maxSSELine = 64 << 20

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	name string // "message" when the stream gave none
	data []byte
}

// sseReader parses a text/event-stream body as the WHATWG HTML spec defines
// it: lines end in LF, CRLF or CR; "data" lines of one event are joined with
// LF; lines starting with ':' are comments; a blank line dispatches the event.
// The id and retry fields are accepted and ignored (nothing reconnects).
type sseReader struct {
	sc *bufio.Scanner
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxSSELine)
	sc.Split(scanSSELines)
	return &sseReader{sc: sc}
}

// scanSSELines is a bufio.SplitFunc for LF, CRLF and lone CR line ends.
func scanSSELines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		// CR: a following LF belongs to the same line end. If the CR is the
		// last byte read so far, wait for more to tell.
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// Next returns the next event. At the end of the stream it returns io.EOF; a
// final event without its terminating blank line is discarded, as the spec
// says, so a cut connection never yields half an event.
func (r *sseReader) Next() (sseEvent, error) {
	var (
		name    string
		data    []byte
		hasData bool
	)
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if len(line) == 0 {
			if !hasData {
				name = "" // an event without data is not dispatched
				continue
			}
			if name == "" {
				name = "message"
			}
			return sseEvent{name: name, data: data}, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		}
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return sseEvent{}, fmt.Errorf("event stream line longer than %d bytes", maxSSELine)
		}
		return sseEvent{}, err
	}
	return sseEvent{}, io.EOF
}

// errStreamDone is returned by an onEvent of followStream to end the stream
// successfully.
var errStreamDone = errors.New("stream done")

// followStream sends req asking for an event stream and hands each event to
// onEvent until it returns errStreamDone (the answer is complete) or another
// error. A daemon or proxy that ignores Accept answers with plain JSON, which
// goes to onPlain instead. what names the stream in errors ("chat", "exec",
// ...); a stream that ends before its last event is io.ErrUnexpectedEOF.
func (c *Client) followStream(ctx context.Context, req *http.Request, what string,
	onPlain func(body io.Reader) error, onEvent func(ev sseEvent) error) error {
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
	events := newSSEReader(resp.Body)
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
func decodeEvent(ev sseEvent, v any) error {
	if err := json.Unmarshal(ev.data, v); err != nil {
		return fmt.Errorf("decoding %s event: %w", ev.name, err)
	}
	return nil
}
