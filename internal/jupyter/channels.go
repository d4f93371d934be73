package jupyter

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sandbox"
)

const (
	// maxWSMessage bounds one message from a client (a notebook's cell
	// source or a widget's buffers).
	maxWSMessage = 64 << 20
	// maxBuffers bounds the binary buffers of one message.
	maxBuffers = 1024
	// pollWait is how long one poll of the agent's log waits for a message.
	pollWait = 25 * time.Second
	// idleRetry is how often a connection looks again at a sandbox that is
	// not running (suspended: a message from the client resumes it at once).
	idleRetry = time.Second
	// pingEvery is how often a connection is pinged.
	pingEvery = 15 * time.Second
)

// wsMessage is a Jupyter message as the notebook servers' WebSocket carries
// it (JSON, with the channel in the message).
type wsMessage struct {
	Channel  string          `json:"channel,omitempty"`
	Header   json.RawMessage `json:"header"`
	Parent   json.RawMessage `json:"parent_header"`
	Metadata json.RawMessage `json:"metadata"`
	Content  json.RawMessage `json:"content"`
	Buffers  []any           `json:"buffers,omitempty"`
	MsgID    string          `json:"msg_id,omitempty"`
	MsgType  string          `json:"msg_type,omitempty"`
}

// headerFields are what the gateway reads of a header.
type headerFields struct {
	MsgID   string `json:"msg_id"`
	MsgType string `json:"msg_type"`
}

// Channels answers GET /api/kernels/{id}/channels: a WebSocket carrying the
// kernel's shell, control, stdin and iopub messages.
func (g *Gateway) Channels(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	k, _, err := g.kernelFor(ctx, r.PathValue("id"))
	if err != nil {
		return err
	}
	if !isUpgrade(r) {
		return errdefs.InvalidArgument("the kernel's channels are a WebSocket: send an upgrade request")
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		// Accept has answered the client already.
		g.log.Debug("jupyter: websocket refused", "kernel", k.id, "err", err)
		return nil
	}
	defer c.CloseNow()
	c.SetReadLimit(maxWSMessage)
	k.mu.Lock()
	k.conns++
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.conns--
		k.mu.Unlock()
	}()
	conn := &channelConn{g: g, k: k, c: c, wake: make(chan struct{}, 1)}
	conn.lang = ""
	if k.ref.ctx == 0 {
		conn.lang = "python"
	}
	conn.after = conn.startCursor(ctx)
	go func() {
		defer cancel()
		conn.readClient(ctx)
	}()
	go conn.ping(ctx)
	reason := conn.relayKernel(ctx)
	if reason != "" {
		c.Close(websocket.StatusNormalClosure, reason)
	}
	return nil
}

// isUpgrade reports whether r asks for a WebSocket (Accept answers anything
// else in its own words, not the API's).
func isUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") &&
		strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") &&
		r.Header.Get("Sec-WebSocket-Version") == "13" && r.Header.Get("Sec-WebSocket-Key") != ""
}

// channelConn is one WebSocket connection to a kernel.
type channelConn struct {
	g     *Gateway
	k     *kernel
	c     *websocket.Conn
	lang  string
	after int64
	wake  chan struct{} // a client message was sent: poll now
}

// ping keeps a quiet connection alive: jupyter_server's gateway kernel
// client gives up on a WebSocket that says nothing for 40 seconds (a long
// silent cell), and proxies drop idle ones.
func (cc *channelConn) ping(ctx context.Context) {
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, pingEvery)
			err := cc.c.Ping(pctx)
			cancel()
			if err != nil {
				cc.c.CloseNow()
				return
			}
		}
	}
}

// startCursor is where the connection's messages start: what the kernel
// sends from now on. A sandbox that is not running cannot say; the newest
// message an earlier connection saw stands in (the log is saved with the
// sandbox, so nothing it sent before its suspend is missed).
func (cc *channelConn) startCursor(ctx context.Context) int64 {
	ans, err := cc.g.sb.JupyterRecv(ctx, cc.k.ref.sandbox, cc.k.ref.contextRef(), cc.lang, -1, 0)
	if err == nil {
		return ans.Head
	}
	cc.k.mu.Lock()
	defer cc.k.mu.Unlock()
	return cc.k.head
}

// readClient sends the client's messages to the kernel until the
// connection ends.
func (cc *channelConn) readClient(ctx context.Context) {
	for {
		typ, data, err := cc.c.Read(ctx)
		if err != nil {
			return
		}
		m, err := parseClientMessage(typ, data)
		if err != nil {
			cc.g.log.Debug("jupyter: dropping a client message", "kernel", cc.k.id, "err", err)
			continue
		}
		if m.Channel == "iopub" || m.Channel == "hb" {
			continue // nothing to send a kernel there
		}
		cc.k.touch(cc.g.now(), "")
		cc.g.log.Debug("jupyter: to the kernel", "kernel", cc.k.id, "channel", m.Channel, "bytes", len(data))
		if err := cc.g.sb.JupyterSend(ctx, cc.k.ref.sandbox, cc.k.ref.contextRef(), cc.lang, m); err != nil {
			if ctx.Err() != nil {
				return
			}
			cc.g.log.Info("jupyter: a message did not reach the kernel", "kernel", cc.k.id, "err", err)
			cc.replyError(ctx, m, err)
			continue
		}
		select {
		case cc.wake <- struct{}{}:
		default:
		}
	}
}

// replyError answers a request the kernel never got as a kernel would
// have: status busy, an error reply, status idle (clients such as nbclient
// wait for the idle status as well as the reply), so that the client shows
// why instead of waiting forever.
func (cc *channelConn) replyError(ctx context.Context, m *sandbox.JupyterMessage, cause error) {
	var h headerFields
	if json.Unmarshal(m.Header, &h) != nil || !strings.HasSuffix(h.MsgType, "_request") {
		return
	}
	header := func(msgType string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{
			"msg_id": uuid.NewString(), "msg_type": msgType, "session": "forkbox", "username": "forkbox",
			"date": cc.g.now().UTC().Format(jupyterTime), "version": "5.3",
		})
		return b
	}
	status := func(state string) *sandbox.JupyterMessage {
		return &sandbox.JupyterMessage{Channel: "iopub", Header: header("status"), Parent: m.Header,
			Metadata: json.RawMessage("{}"), Content: json.RawMessage(`{"execution_state":"` + state + `"}`)}
	}
	content, _ := json.Marshal(map[string]any{
		"status": "error", "ename": "ForkboxError", "evalue": cause.Error(),
		"traceback": []string{"forkbox could not pass the request to the kernel: " + cause.Error()},
	})
	reply := &sandbox.JupyterMessage{Channel: m.Channel, Header: header(strings.TrimSuffix(h.MsgType, "_request") + "_reply"),
		Parent: m.Header, Metadata: json.RawMessage("{}"), Content: content}
	_ = cc.write(ctx, status("busy")) && cc.write(ctx, reply) && cc.write(ctx, status("idle"))
}

// relayKernel polls the kernel's messages and writes them to the client
// until the connection ends; it returns why it closes the connection
// itself ("" when the client went away).
func (cc *channelConn) relayKernel(ctx context.Context) string {
	sandbox, cref := cc.k.ref.sandbox, cc.k.ref.contextRef()
	for ctx.Err() == nil {
		ans, err := cc.g.sb.JupyterRecv(ctx, sandbox, cref, cc.lang, cc.after, pollWait)
		if err != nil {
			if ctx.Err() != nil {
				return ""
			}
			if errors.Is(err, errdefs.ErrNotFound) {
				return "the kernel's sandbox is gone"
			}
			cc.g.log.Debug("jupyter: polling the kernel", "kernel", cc.k.id, "err", err)
			if errors.Is(err, errdefs.ErrFailedPrecondition) {
				sb, gerr := cc.g.sb.Get(ctx, sandbox)
				switch {
				case errors.Is(gerr, errdefs.ErrNotFound):
					return "the kernel's sandbox is gone"
				case gerr == nil && (sb.State.Ended() || sb.State == api.StateLost):
					return fmt.Sprintf("the kernel's sandbox is %s", sb.State)
				}
			} else {
				cc.g.log.Warn("jupyter: polling a kernel's messages", "kernel", cc.k.id, "err", err)
			}
			select {
			case <-ctx.Done():
				return ""
			case <-cc.wake:
			case <-time.After(idleRetry):
			}
			continue
		}
		cc.g.log.Debug("jupyter: from the kernel", "kernel", cc.k.id, "after", cc.after, "head", ans.Head, "messages", len(ans.Messages))
		if ans.Head < cc.after {
			// A new agent (the sandbox was started again from its
			// record): its log starts over.
			cc.after = 0
			continue
		}
		if ans.Dropped > 0 {
			cc.g.log.Warn("jupyter: kernel messages dropped before the client read them", "kernel", cc.k.id, "dropped", ans.Dropped)
		}
		for i := range ans.Messages {
			m := &ans.Messages[i]
			if !cc.write(ctx, m) {
				return ""
			}
			cc.after = m.Seq
			cc.noteState(m)
		}
		cc.k.mu.Lock()
		cc.k.head = max(cc.k.head, cc.after)
		cc.k.mu.Unlock()
	}
	return ""
}

// noteState follows the kernel's execution_state from its status messages.
func (cc *channelConn) noteState(m *sandbox.JupyterMessage) {
	if m.Channel != "iopub" {
		return
	}
	var h headerFields
	if json.Unmarshal(m.Header, &h) != nil || h.MsgType != "status" {
		return
	}
	var c struct {
		State string `json:"execution_state"`
	}
	if json.Unmarshal(m.Content, &c) == nil && c.State != "" && len(c.State) < 32 {
		cc.k.touch(cc.g.now(), c.State)
	}
}

// write sends one kernel message to the client: JSON text, or Jupyter's
// binary framing when it has buffers.
func (cc *channelConn) write(ctx context.Context, m *sandbox.JupyterMessage) bool {
	typ, data, err := encodeKernelMessage(m)
	if err != nil {
		cc.g.log.Debug("jupyter: dropping a kernel message", "kernel", cc.k.id, "err", err)
		return true
	}
	return cc.c.Write(ctx, typ, data) == nil
}

// parseClientMessage reads a client's message: JSON text, or Jupyter's
// binary framing (JSON and buffers). A message without a channel goes to
// shell, except input_reply (stdin): Jupyter's own gateway kernel client
// sends none.
func parseClientMessage(typ websocket.MessageType, data []byte) (*sandbox.JupyterMessage, error) {
	var bufs [][]byte
	if typ == websocket.MessageBinary {
		parts, err := decodeBinary(data)
		if err != nil {
			return nil, err
		}
		data, bufs = parts[0], parts[1:]
	}
	var w wsMessage
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("not a Jupyter message: %w", err)
	}
	var h headerFields
	if err := json.Unmarshal(w.Header, &h); err != nil || h.MsgID == "" || h.MsgType == "" {
		return nil, errors.New("a Jupyter message's header needs msg_id and msg_type")
	}
	ch := w.Channel
	switch ch {
	case "shell", "control", "stdin", "iopub", "hb":
	case "":
		ch = "shell"
		if h.MsgType == "input_reply" {
			ch = "stdin"
		}
	default:
		return nil, fmt.Errorf("unknown channel %q", ch)
	}
	return &sandbox.JupyterMessage{Channel: ch, Header: isoDate(w.Header), Parent: isoDate(orEmpty(w.Parent)),
		Metadata: orEmpty(w.Metadata), Content: orEmpty(w.Content), Buffers: bufs}, nil
}

// isoDate gives a header's date as the ISO 8601 string, microseconds at
// most, that kernels expect: jupyter_server's gateway kernel client sends a
// Unix timestamp (a number), and Go clients nanoseconds; ipykernel answers
// neither.
func isoDate(h json.RawMessage) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(h, &fields) != nil {
		return h
	}
	d, ok := fields["date"]
	if !ok {
		return h
	}
	var when time.Time
	var ts float64
	var str string
	switch {
	case json.Unmarshal(d, &ts) == nil:
		sec := int64(ts)
		when = time.Unix(sec, int64((ts-float64(sec))*1e9))
	case json.Unmarshal(d, &str) == nil:
		t, err := time.Parse(time.RFC3339Nano, str)
		if err != nil {
			return h
		}
		when = t
	default:
		return h
	}
	fields["date"], _ = json.Marshal(when.UTC().Format(jupyterTime))
	out, err := json.Marshal(fields)
	if err != nil {
		return h
	}
	return out
}

func orEmpty(r json.RawMessage) json.RawMessage {
	if len(r) == 0 || string(r) == "null" {
		return json.RawMessage("{}")
	}
	return r
}

// encodeKernelMessage is a kernel message as the client gets it.
func encodeKernelMessage(m *sandbox.JupyterMessage) (websocket.MessageType, []byte, error) {
	var h headerFields
	if err := json.Unmarshal(m.Header, &h); err != nil {
		return 0, nil, fmt.Errorf("bad header: %w", err)
	}
	w := wsMessage{Channel: m.Channel, Header: m.Header, Parent: orEmpty(m.Parent), Metadata: orEmpty(m.Metadata),
		Content: orEmpty(m.Content), Buffers: []any{}, MsgID: h.MsgID, MsgType: h.MsgType}
	data, err := json.Marshal(w)
	if err != nil {
		return 0, nil, err
	}
	if len(m.Buffers) == 0 {
		return websocket.MessageText, data, nil
	}
	return websocket.MessageBinary, encodeBinary(data, m.Buffers), nil
}

// Jupyter's binary WebSocket framing (the one notebook servers use without
// a subprotocol): a big-endian uint32 count n of parts, n uint32 offsets
// (from the frame's start) of each part, then the parts: the message's
// JSON, then its buffers.

func decodeBinary(b []byte) ([][]byte, error) {
	if len(b) < 4 {
		return nil, errors.New("binary message too short")
	}
	n := int(binary.BigEndian.Uint32(b))
	if n < 1 || n > maxBuffers+1 || len(b) < 4*(n+1) {
		return nil, fmt.Errorf("binary message: bad part count %d", n)
	}
	offs := make([]int, n+1)
	for i := range n {
		offs[i] = int(binary.BigEndian.Uint32(b[4*(i+1):]))
	}
	offs[n] = len(b)
	parts := make([][]byte, n)
	for i := range n {
		if offs[i] < 4*(n+1) || offs[i] > offs[i+1] {
			return nil, errors.New("binary message: bad offsets")
		}
		parts[i] = b[offs[i]:offs[i+1]]
	}
	return parts, nil
}

func encodeBinary(msg []byte, bufs [][]byte) []byte {
	parts := append([][]byte{msg}, bufs...)
	n := len(parts)
	size := 4 * (n + 1)
	for _, p := range parts {
		size += len(p)
	}
	out := make([]byte, 4*(n+1), size)
	binary.BigEndian.PutUint32(out, uint32(n))
	off := 4 * (n + 1)
	for i, p := range parts {
		binary.BigEndian.PutUint32(out[4*(i+1):], uint32(off))
		off += len(p)
	}
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
