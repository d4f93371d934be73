package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// relayLog keeps what OnMessage delivered, in order.
type relayLog struct {
	mu   sync.Mutex
	msgs []*Message
	more chan struct{}
}

func newRelayLog() *relayLog { return &relayLog{more: make(chan struct{}, 1)} }

func (r *relayLog) add(m *Message) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	select {
	case r.more <- struct{}{}:
	default:
	}
}

func (r *relayLog) all() []*Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*Message(nil), r.msgs...)
}

// wait returns the first message delivered that matches, waiting for it.
func (r *relayLog) wait(t *testing.T, what string, match func(*Message) bool) *Message {
	t.Helper()
	giveUp := time.After(30 * time.Second)
	for {
		msgs := r.all()
		for _, m := range msgs {
			if match(m) {
				return m
			}
		}
		select {
		case <-r.more:
		case <-giveUp:
			t.Fatalf("no %s among the %d messages relayed", what, len(msgs))
		}
	}
}

type testHeader struct {
	MsgID   string `json:"msg_id"`
	MsgType string `json:"msg_type"`
	Session string `json:"session"`
}

func headerOf(b json.RawMessage) testHeader {
	var h testHeader
	json.Unmarshal(b, &h)
	return h
}

// is matches a message by channel, type and the msg_id of its parent.
func is(channel, msgType, parentID string) func(*Message) bool {
	return func(m *Message) bool {
		return m.Channel == channel && headerOf(m.Header).MsgType == msgType && headerOf(m.Parent).MsgID == parentID
	}
}

// clientMsg builds a message as a notebook client would: its own session
// and msg_id, no metadata.
func clientMsg(channel, id, msgType string, parent json.RawMessage, content any) *Message {
	h, _ := json.Marshal(map[string]string{
		"msg_id": id, "msg_type": msgType, "session": "nb-session", "username": "nb",
		"date": time.Now().UTC().Format(time.RFC3339Nano), "version": protocolVersion,
	})
	c, _ := json.Marshal(content)
	return &Message{Channel: channel, Header: h, Parent: parent, Content: c}
}

func clientExecute(code string) map[string]any {
	return map[string]any{
		"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{},
		"allow_stdin": true, "stop_on_error": true,
	}
}

// TestRelay drives a kernel with raw messages, as a notebook server does
// through the gateway, while forkbox runs cells of its own on it.
func TestRelay(t *testing.T) {
	t.Parallel()
	rel := newRelayLog()
	k := startPythonWith(t, rel.add)
	send := func(m *Message) {
		t.Helper()
		if err := k.Send(m); err != nil {
			t.Fatalf("Send %s: %v", m.Header, err)
		}
	}

	t.Run("stdin", func(t *testing.T) {
		send(clientMsg("shell", "nb-1", "execute_request", nil, clientExecute("x = input('name? ')")))
		req := rel.wait(t, "input_request", is("stdin", "input_request", "nb-1"))
		var ir struct {
			Prompt string `json:"prompt"`
		}
		if json.Unmarshal(req.Content, &ir); ir.Prompt != "name? " {
			t.Errorf("input_request content %s", req.Content)
		}
		// forkbox's own cell, sent while the kernel waits for input: it
		// runs once the input came.
		own := make(chan *Execution, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ex, err := k.Execute(ctx, "print('own')", nil)
			if err != nil {
				t.Errorf("Execute: %v", err)
			}
			own <- ex
		}()
		send(clientMsg("stdin", "nb-2", "input_reply", req.Header, map[string]string{"value": "forkbox"}))
		reply := rel.wait(t, "execute_reply to nb-1", is("shell", "execute_reply", "nb-1"))
		if !strings.Contains(string(reply.Content), `"status": "ok"`) && !strings.Contains(string(reply.Content), `"status":"ok"`) {
			t.Errorf("execute_reply %s", reply.Content)
		}
		ex := <-own
		if ex == nil || ex.Error != nil || strings.Join(ex.Logs.Stdout, "") != "own\n" {
			t.Fatalf("forkbox's cell: %s", dump(ex))
		}
		out := rel.wait(t, "forkbox's own output on iopub", func(m *Message) bool {
			return m.Channel == "iopub" && headerOf(m.Header).MsgType == "stream" && strings.Contains(string(m.Content), `own\n`)
		})
		if p := headerOf(out.Parent); p.Session != k.proc().session || p.MsgType != "execute_request" {
			t.Errorf("forkbox's output has parent %s", out.Parent)
		}
	})

	t.Run("the answer", func(t *testing.T) {
		code := "print(x)\nk = get_ipython().kernel\n" +
			"k.session.send(k.iopub_socket, 'fb_test', {'a': 1}, parent=k.get_parent('shell'), buffers=[b'\\x00bin'])"
		send(clientMsg("shell", "nb-3", "execute_request", nil, clientExecute(code)))
		out := rel.wait(t, "stream to nb-3", is("iopub", "stream", "nb-3"))
		var s struct {
			Name, Text string
		}
		if json.Unmarshal(out.Content, &s); s.Name != "stdout" || s.Text != "forkbox\n" {
			t.Errorf("stream %s", out.Content)
		}
		bin := rel.wait(t, "message with a buffer", is("iopub", "fb_test", "nb-3"))
		if len(bin.Buffers) != 1 || string(bin.Buffers[0]) != "\x00bin" {
			t.Errorf("buffers %q", bin.Buffers)
		}
		reply := rel.wait(t, "execute_reply to nb-3", is("shell", "execute_reply", "nb-3"))
		if h := headerOf(reply.Parent); h.Session != "nb-session" {
			t.Errorf("reply's parent %s", reply.Parent)
		}
	})

	t.Run("forkbox's own replies are not relayed", func(t *testing.T) {
		for _, m := range rel.all() {
			if m.Channel != "iopub" && !strings.HasPrefix(headerOf(m.Parent).MsgID, "nb-") {
				t.Errorf("relayed on %s: %s (parent %s)", m.Channel, m.Header, m.Parent)
			}
		}
	})

	t.Run("refused", func(t *testing.T) {
		ours := clientMsg("shell", "nb-x", "kernel_info_request", nil, struct{}{})
		ours.Header, _ = json.Marshal(map[string]string{"msg_id": "nb-x", "msg_type": "kernel_info_request", "session": k.proc().session})
		for name, m := range map[string]*Message{
			"iopub":                  clientMsg("iopub", "nb-x", "stream", nil, struct{}{}),
			"heartbeat":              clientMsg("hb", "nb-x", "ping", nil, struct{}{}),
			"no msg_id":              {Channel: "shell", Header: json.RawMessage(`{"msg_type":"kernel_info_request"}`)},
			"header not an object":   {Channel: "shell", Header: json.RawMessage(`["msg_id"]`)},
			"no header":              {Channel: "shell"},
			"content not an object":  {Channel: "shell", Header: clientMsg("shell", "nb-x", "kernel_info_request", nil, nil).Header, Content: json.RawMessage(`"x"`)},
			"forkbox's own session":  ours,
			"nil":                    nil,
			"metadata not an object": {Channel: "control", Header: clientMsg("shell", "nb-x", "kernel_info_request", nil, nil).Header, Metadata: json.RawMessage(`[]`)},
		} {
			if err := k.Send(m); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s: Send = %v, want invalid argument", name, err)
			}
		}
	})

	t.Run("control", func(t *testing.T) {
		send(clientMsg("control", "nb-4", "kernel_info_request", nil, struct{}{}))
		rel.wait(t, "kernel_info_reply on control", is("control", "kernel_info_reply", "nb-4"))
	})

	t.Run("dead, then restarted", func(t *testing.T) {
		send(clientMsg("shell", "nb-5", "execute_request", nil, clientExecute("import os; os._exit(0)")))
		select {
		case <-k.Dead():
		case <-time.After(30 * time.Second):
			t.Fatal("the kernel did not exit")
		}
		if err := k.Send(clientMsg("shell", "nb-6", "kernel_info_request", nil, struct{}{})); !errors.Is(err, ErrDead) {
			t.Fatalf("Send to a dead kernel: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := k.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		send(clientMsg("shell", "nb-7", "kernel_info_request", nil, struct{}{}))
		rel.wait(t, "kernel_info_reply after the restart", is("shell", "kernel_info_reply", "nb-7"))
		if ex := run(t, k, "1"); mainText(t, ex) != "1" {
			t.Errorf("forkbox's cell after the restart: %s", dump(ex))
		}
	})
}

// TestRelayFilter: what reaches OnMessage, and that its bytes are the
// frames' own.
func TestRelayFilter(t *testing.T) {
	var got []*Message
	p := &proc{session: "ours", log: slog.New(slog.DiscardHandler), onMessage: func(m *Message) { got = append(got, m) }}
	key := []byte("k")
	msg := func(channel, parent, meta, content string) *message {
		t.Helper()
		hdr := []byte(`{ "msg_id": "a",  "msg_type": "stream" }`)
		f := [][]byte{hdr, []byte(parent), []byte(meta), []byte(content)}
		m, err := decode(key, append([][]byte{[]byte(delimiter), sign(key, f...)}, f...))
		if err != nil {
			t.Fatal(err)
		}
		m.channel = channel
		return m
	}
	for _, c := range []struct {
		m     *message
		ours  bool
		relay bool
	}{
		{msg("iopub", `{"session":"ours"}`, `{}`, `{}`), true, true},
		{msg("iopub", `{"session":"ours"}`, `{}`, `{}`), false, true},
		{msg("shell", `{"session":"ours"}`, `{}`, `{}`), false, false}, // a late reply to forkbox
		{msg("shell", `{"session":"nb"}`, `{}`, `{}`), true, false},
		{msg("stdin", `{"session":"nb"}`, `{}`, `{}`), false, true},
		{msg("control", `{}`, `{}`, `{}`), false, true},
	} {
		if got := p.relayed(c.m, c.ours); got != c.relay {
			t.Errorf("relayed(%s, parent %s, ours %v) = %v", c.m.channel, c.m.rawParent, c.ours, got)
		}
	}

	p.relay(msg("iopub", `{}`, `null`, ` {"text": "x"} `))
	if len(got) != 1 || string(got[0].Header) != `{ "msg_id": "a",  "msg_type": "stream" }` ||
		string(got[0].Metadata) != "{}" || string(got[0].Content) != ` {"text": "x"} ` {
		t.Fatalf("relayed %+v", got)
	}
	for _, content := range []string{`{"text":`, `[1]`, `"x"`, "{\"text\": \"\xff\"}", ``} {
		got = nil
		p.relay(msg("iopub", `{}`, `{}`, content))
		if content == `` {
			if len(got) != 1 || string(got[0].Content) != "{}" {
				t.Errorf("empty content relayed as %+v", got)
			}
			continue
		}
		if len(got) != 0 {
			t.Errorf("content %q relayed", content)
		}
	}
}
