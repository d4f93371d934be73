package sse

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(t *testing.T, r *Reader) []Event {
	t.Helper()
	var out []Event
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, ev)
	}
}

// splitReader hands out its input in the pieces given, one a Read, so that a
// test chooses where the reads cut the stream.
type splitReader struct{ pieces []string }

func (s *splitReader) Read(p []byte) (int, error) {
	if len(s.pieces) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.pieces[0])
	if s.pieces[0] = s.pieces[0][n:]; s.pieces[0] == "" {
		s.pieces = s.pieces[1:]
	}
	return n, nil
}

type ev struct{ name, data string }

func check(t *testing.T, got []Event, want []ev) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events %q, want %d %q", len(got), got, len(want), want)
	}
	for i := range got {
		if got[i].Name != want[i].name || string(got[i].Data) != want[i].data {
			t.Errorf("event %d = {%q %q}, want {%q %q}", i, got[i].Name, got[i].Data, want[i].name, want[i].data)
		}
	}
}

func TestReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []ev
	}{
		{"simple", "event: stdout\ndata: {\"data\":\"hi\"}\n\n", []ev{{"stdout", `{"data":"hi"}`}}},
		{"multi-line data joined with LF", "event: exit\ndata: {\ndata:   \"exit_code\": 3\ndata: }\n\n", []ev{{"exit", "{\n  \"exit_code\": 3\n}"}}},
		{"CRLF line ends", "event: a\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n", []ev{{"a", "1"}, {"b", "2"}}},
		{"lone CR line ends", "event: a\rdata: 1\r\rdata: 2\r\r", []ev{{"a", "1"}, {"message", "2"}}},
		{"mixed line ends", "data: 1\r\ndata: 2\rdata: 3\n\r\n", []ev{{"message", "1\n2\n3"}}},
		{"comments and unknown fields skipped", ": keepalive\nid: 7\nretry: 100\nevent: x\nfoo: bar\ndata: y\n\n", []ev{{"x", "y"}}},
		{"a comment alone dispatches nothing", ":\n\n: ping\n\n", nil},
		{"only one leading space stripped", "data:  two\ndata:none\n\n", []ev{{"message", " two\nnone"}}},
		{"field without colon", "data\ndata\n\n", []ev{{"message", "\n"}}},
		{"event without data not dispatched, name reset", "event: a\n\ndata: z\n\n", []ev{{"message", "z"}}},
		{"last event without its blank line discarded", "data: 1\n\ndata: 2\n", []ev{{"message", "1"}}},
		{"last line without its line end discarded", "data: 1\n\ndata: 2", []ev{{"message", "1"}}},
		{"blank lines between events", "\n\n\ndata: 1\n\n\n\ndata: 2\n\n", []ev{{"message", "1"}, {"message", "2"}}},
		{"colon in value kept", "data: a: b\n\n", []ev{{"message", "a: b"}}},
		{"multi-byte text kept", "event: stderr\ndata: warn: ü ✓\n\n", []ev{{"stderr", "warn: ü ✓"}}},
		{"empty stream", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, readAll(t, NewReader(strings.NewReader(tt.in))), tt.want)
		})
		t.Run(tt.name+"/one byte a read", func(t *testing.T) {
			check(t, readAll(t, NewReader(iotest.OneByteReader(strings.NewReader(tt.in)))), tt.want)
		})
	}
}

// TestReaderCutReads cuts a stream at every byte into two reads: between a CR
// and its LF, inside a field name, inside a multi-byte character.
func TestReaderCutReads(t *testing.T) {
	in := "event: a\r\ndata: ü1\r\n\r\n: c\rdata: 2\r\rdata: 3\n\n"
	want := []ev{{"a", "ü1"}, {"message", "2"}, {"message", "3"}}
	for i := 0; i <= len(in); i++ {
		t.Run(fmt.Sprintf("cut at %d", i), func(t *testing.T) {
			check(t, readAll(t, NewReader(&splitReader{pieces: []string{in[:i], in[i:]}})), want)
		})
	}
}

// TestReaderCRAtEndOfStream: a lone CR as the last byte ends its line, and
// does not wait for an LF that cannot come.
func TestReaderCRAtEndOfStream(t *testing.T) {
	check(t, readAll(t, NewReader(strings.NewReader("data: 1\r\r"))), []ev{{"message", "1"}})
}

func TestReaderLongLine(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	got := readAll(t, NewReader(strings.NewReader("data: "+big+"\n\n")))
	if len(got) != 1 || string(got[0].Data) != big {
		t.Fatalf("a 1 MiB line was not read back whole")
	}
}

func TestReaderLineTooLong(t *testing.T) {
	r := newReader(strings.NewReader("data: 1\n\ndata: "+strings.Repeat("x", 100)+"\n\n"), 64)
	if ev, err := r.Next(); err != nil || string(ev.Data) != "1" {
		t.Fatalf("first event = %q, %v; want 1", ev.Data, err)
	}
	_, err := r.Next()
	if !errors.Is(err, bufio.ErrTooLong) || !strings.Contains(err.Error(), "longer than 64 bytes") {
		t.Fatalf("a line over the bound: %v, want an error wrapping bufio.ErrTooLong that names the bound", err)
	}
}

func TestReaderReadError(t *testing.T) {
	boom := errors.New("connection reset")
	r := NewReader(io.MultiReader(strings.NewReader("data: 1\n\ndata: 2\n"), iotest.ErrReader(boom)))
	if ev, err := r.Next(); err != nil || string(ev.Data) != "1" {
		t.Fatalf("first event = %q, %v; want 1", ev.Data, err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("after a failed read: %v, want %v", err, boom)
	}
}

func TestReadAll(t *testing.T) {
	evs, err := ReadAll(strings.NewReader("event: a\ndata: 1\n\nevent: b\ndata: 2\n\nevent: c\ndata: cut"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, evs, []ev{{"a", "1"}, {"b", "2"}})

	boom := errors.New("boom")
	evs, err = ReadAll(io.MultiReader(strings.NewReader("data: 1\n\n"), iotest.ErrReader(boom)))
	if !errors.Is(err, boom) {
		t.Fatalf("ReadAll error = %v, want %v", err, boom)
	}
	check(t, evs, []ev{{"message", "1"}})
}
