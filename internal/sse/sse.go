// Package sse reads server-sent event streams (text/event-stream bodies): the
// daemon streams exec output, code cells, chat turns and image builds this
// way, and the Go client and the end-to-end tests read them with this one
// reader.
//
// The format is the WHATWG HTML one: lines end in LF, CRLF or a lone CR;
// the "data" lines of one event are joined with LF; lines starting with ':'
// are comments; a blank line dispatches the event. The id and retry fields
// are accepted and ignored (nothing here reconnects).
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxLine bounds one line of a stream. The daemon sends output in chunks far
// smaller than this; the bound only stops a broken peer from growing the
// buffer without limit.
const MaxLine = 64 << 20

// Event is one dispatched event.
type Event struct {
	Name string // "message" when the stream gave none
	Data []byte // the event's data lines, joined with LF
}

// Reader reads the events of one stream in order.
type Reader struct {
	sc  *bufio.Scanner
	max int
}

// NewReader returns a Reader of the stream r, with lines of at most MaxLine
// bytes.
func NewReader(r io.Reader) *Reader { return newReader(r, MaxLine) }

func newReader(r io.Reader, maxLine int) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(64<<10, maxLine)), maxLine)
	sc.Split(scanLines)
	return &Reader{sc: sc, max: maxLine}
}

// scanLines is a bufio.SplitFunc for LF, CRLF and lone CR line ends.
func scanLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
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
// final event without its terminating blank line is discarded, as the format
// says, so a cut connection never yields half an event. A line longer than
// the bound is an error that wraps bufio.ErrTooLong.
func (r *Reader) Next() (Event, error) {
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
			return Event{Name: name, Data: data}, nil
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
			return Event{}, fmt.Errorf("event stream line longer than %d bytes: %w", r.max, err)
		}
		return Event{}, err
	}
	return Event{}, io.EOF
}

// ReadAll reads the events of r up to its end. On an error it returns the
// events read before it with the error.
func ReadAll(r io.Reader) ([]Event, error) {
	sr := NewReader(r)
	var out []Event
	for {
		ev, err := sr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}
