package kernel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/go-zeromq/zmq4"
)

// The raw side of the client: a Jupyter client outside forkbox (a notebook
// server going through forkbox's kernel gateway) sends its own messages with
// Send and sees the kernel's through Options.OnMessage, next to forkbox's
// own cells. The two never take each other's replies: forkbox's requests
// carry the process's session, which a client may not use, and replies are
// routed to forkbox's inboxes by msg_id, which a client may not reuse while
// forkbox waits on it.

// Message is one Jupyter protocol message as a client outside the kernel package sees it.
type Message struct {
	Channel  string          // "shell", "iopub", "control" or "stdin"
	Header   json.RawMessage // JSON object
	Parent   json.RawMessage // parent_header, JSON object ({} when none)
	Metadata json.RawMessage // JSON object
	Content  json.RawMessage // JSON object
	Buffers  [][]byte
}

var emptyObject = json.RawMessage("{}")

// orEmpty gives "{}" for an absent part (nothing, or null).
func orEmpty(b json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || string(t) == "null" {
		return emptyObject
	}
	return b
}

// isObject reports whether b is one JSON object in valid UTF-8. What a
// kernel sends is checked with it before it leaves the package: its bytes
// are passed on as they are, and a consumer re-encoding them as JSON would
// otherwise fail on (or carry) whatever a hostile kernel put there.
func isObject(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && utf8.Valid(t) && json.Valid(t)
}

// Send sends a client's message on its channel: shell, control or stdin.
// The header is a JSON object with msg_id and msg_type (the client's own,
// kept byte for byte, as are the other parts); parent_header, metadata and
// content are JSON objects, "{}" when empty. Send signs the message with
// the kernel's key. It fails with an errdefs.ErrInvalidArgument error for a
// malformed message, one that uses forkbox's own session or the msg_id of a
// request forkbox is waiting on, and with an error matching ErrDead once the
// kernel process is gone; after Restart it sends to the new process.
func (k *Kernel) Send(m *Message) error {
	if m == nil {
		return errdefs.InvalidArgument("send: no message")
	}
	switch m.Channel {
	case "shell", "control", "stdin":
	default:
		return errdefs.InvalidArgument("send: channel %q: a client sends on shell, control or stdin", m.Channel)
	}
	var h struct {
		MsgID   string `json:"msg_id"`
		MsgType string `json:"msg_type"`
		Session string `json:"session"`
	}
	if !isObject(m.Header) {
		return errdefs.InvalidArgument("send: the header is not a JSON object")
	}
	if err := json.Unmarshal(m.Header, &h); err != nil || h.MsgID == "" || h.MsgType == "" {
		return errdefs.InvalidArgument("send: the header needs msg_id and msg_type strings")
	}
	parent, meta, content := orEmpty(m.Parent), orEmpty(m.Metadata), orEmpty(m.Content)
	for _, part := range []struct {
		name string
		b    []byte
	}{{"parent_header", parent}, {"metadata", meta}, {"content", content}} {
		if !isObject(part.b) {
			return errdefs.InvalidArgument("send: %s is not a JSON object", part.name)
		}
	}
	p, err := k.current()
	if err != nil {
		return err
	}
	if h.Session == p.session {
		return errdefs.InvalidArgument("send: session %q is forkbox's own; a client uses its own", h.Session)
	}
	p.mu.Lock()
	_, ours := p.inboxes[h.MsgID]
	p.mu.Unlock()
	if ours {
		return errdefs.InvalidArgument("send: msg_id %q is a request of forkbox's own", h.MsgID)
	}
	frames := make([][]byte, 0, 6+len(m.Buffers))
	frames = append(frames, []byte(delimiter), sign(p.key, m.Header, parent, meta, content), m.Header, parent, meta, content)
	frames = append(frames, m.Buffers...)
	sock, mu := p.socket(m.Channel)
	mu.Lock()
	err = sock.Send(zmq4.NewMsgFrom(frames...))
	mu.Unlock()
	if err != nil {
		if p.sctx.Err() != nil {
			// The sockets are closed once the process exited; watch marks
			// it dead right after.
			select {
			case <-p.dead:
				return &deadError{p.describe()}
			case <-time.After(time.Second):
			}
		}
		return fmt.Errorf("send %s on %s: %w", h.MsgType, m.Channel, err)
	}
	return nil
}

// socket returns a client channel's socket and the mutex that serializes
// sends on it.
func (p *proc) socket(channel string) (zmq4.Socket, *sync.Mutex) {
	switch channel {
	case "control":
		return p.control, &p.controlMu
	case "stdin":
		return p.stdin, &p.stdinMu
	default:
		return p.shell, &p.shellMu
	}
}

// relayed reports whether the client outside sees m: every iopub message
// (clients all see iopub, forkbox's cells included), and every other one
// that answers no request of forkbox's own (ours: routed to an inbox).
func (p *proc) relayed(m *message, ours bool) bool {
	return m.channel == "iopub" || !ours && m.Parent.Session != p.session
}

// relay hands m to OnMessage, unless a part of it is not a JSON object.
func (p *proc) relay(m *message) {
	out := &Message{
		Channel: m.channel, Header: m.rawHeader, Parent: orEmpty(m.rawParent),
		Metadata: orEmpty(m.Metadata), Content: orEmpty(m.Content), Buffers: m.Buffers,
	}
	for _, b := range [][]byte{out.Header, out.Parent, out.Metadata, out.Content} {
		if !isObject(b) {
			// Debug: the kernel runs sandbox code, which may send these
			// without end (it has the key), and the agent's log must not grow with it.
			p.log.Debug("not relaying a malformed kernel message", "channel", m.channel, "msg_type", m.Header.MsgType)
			return
		}
	}
	p.onMessage(out)
}
