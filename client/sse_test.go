package client

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readAllEvents(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	sr := newSSEReader(r)
	var out []sseEvent
	for {
		ev, err := sr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, ev)
	}
}

func TestSSEReader(t *testing.T) {
	type ev struct{ name, data string }
	tests := []struct {
		name string
		in   string
		want []ev
	}{
		{"simple", "event: stdout\ndata: {\"data\":\"hi\"}\n\n", []ev{{"stdout", `{"data":"hi"}`}}},
		{"multi-line data joined with LF", "event: exit\ndata: {\ndata:   \"exit_code\": 3\ndata: }\n\n", []ev{{"exit", "{\n  \"exit_code\": 3\n}"}}},
		{"CRLF line ends", "event: a\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n", []ev{{"a", "1"}, {"b", "2"}}},
		{"lone CR line ends", "event: a\rdata: 1\r\rdata: 2\r\r", []ev{{"a", "1"}, {"message", "2"}}},
		{"comments and unknown fields skipped", ": keepalive\nid: 7\nretry: 100\nevent: x\nfoo: bar\ndata: y\n\n", []ev{{"x", "y"}}},
		{"only one leading space stripped", "data:  two\ndata:none\n\n", []ev{{"message", " two\nnone"}}},
		{"field without colon", "data\ndata\n\n", []ev{{"message", "\n"}}},
		{"event without data not dispatched, name reset", "event: a\n\ndata: z\n\n", []ev{{"message", "z"}}},
		{"unterminated last event discarded", "data: 1\n\ndata: 2\n", []ev{{"message", "1"}}},
		{"blank lines between events", "\n\n\ndata: 1\n\n\n\ndata: 2\n\n", []ev{{"message", "1"}, {"message", "2"}}},
		{"colon in value kept", "data: a: b\n\n", []ev{{"message", "a: b"}}},
	}
	for _, tt := range tests {
		for _, oneByte := range []bool{false, true} {
			name := tt.name
			var r io.Reader = strings.NewReader(tt.in)
			if oneByte {
				name += "/one byte at a time"
				r = iotest.OneByteReader(r)
			}
			t.Run(name, func(t *testing.T) {
				got := readAllEvents(t, r)
				if len(got) != len(tt.want) {
					t.Fatalf("got %d events %q, want %d %q", len(got), got, len(tt.want), tt.want)
				}
				for i := range got {
					if got[i].name != tt.want[i].name || string(got[i].data) != tt.want[i].data {
						t.Errorf("event %d = {%q %q}, want {%q %q}", i, got[i].name, got[i].data, tt.want[i].name, tt.want[i].data)
					}
				}
			})
		}
	}
}

func TestSSEReaderLongLine(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	got := readAllEvents(t, strings.NewReader("data: "+big+"\n\n"))
	if len(got) != 1 || string(got[0].data) != big {
		t.Fatalf("long line not read back whole")
	}
}
