package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/kernel"
)

// A Jupyter client (the daemon's kernel gateway, for a notebook server)
// drives a context's kernel with raw protocol messages: it sends with
// POST /contexts/{id}/jupyter/send and polls what the kernel sent with
// GET /contexts/{id}/jupyter/recv, from the context's message log
// (jupyterlog.go). {id} may be "default", the language's default context,
// as for POST /code.

const (
	// maxJupyterSend bounds the body of one send: a message and its
	// buffers, in base64.
	maxJupyterSend = 64 << 20
	// maxJupyterWait caps how long one receive waits for a message.
	maxJupyterWait = 30 * time.Second
)

// onKernelMessage is the OnMessage of every kernel of the context: it keeps
// the message once a Jupyter client attached to the context. It runs on the
// kernel's reader goroutines and does not block.
func (c *codeContext) onKernelMessage(m *kernel.Message) {
	if l := c.jlog.Load(); l != nil {
		l.add(wire.JupyterMessage{Channel: m.Channel, Header: m.Header, Parent: m.Parent,
			Metadata: m.Metadata, Content: m.Content, Buffers: m.Buffers})
	}
}

// jupyterLog returns the context's message log, making it on first use.
func (c *codeContext) jupyterLog() *jupyterLog {
	if l := c.jlog.Load(); l != nil {
		return l
	}
	c.jlog.CompareAndSwap(nil, newJupyterLog())
	return c.jlog.Load()
}

// handleJupyterSend sends a client's message to the context's kernel,
// starting the kernel if it has none (or the last one died).
func (s *server) handleJupyterSend(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxJupyterSend)
	var m wire.JupyterMessage
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, errdefs.TooLarge("jupyter message: larger than %d MiB", maxJupyterSend>>20))
			return
		}
		writeError(w, errdefs.InvalidArgument("bad jupyter message: %v", err))
		return
	}
	c, err := s.resolveContext(r.PathValue("id"), r.URL.Query().Get("language"))
	if err != nil {
		writeError(w, err)
		return
	}
	// The log first, so that what a kernel started now sends is in it.
	c.jupyterLog()
	k, err := s.ensureKernel(r.Context(), c)
	if err != nil {
		writeError(w, err)
		return
	}
	err = k.Send(&kernel.Message{Channel: m.Channel, Header: m.Header, Parent: m.Parent,
		Metadata: m.Metadata, Content: m.Content, Buffers: m.Buffers})
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleJupyterRecv answers with the context's messages after the cursor
// (after; -1 for the head alone), waiting up to wait_ms for one. It never
// starts a kernel: a notebook that reconnects to an idle context must not
// spawn one.
func (s *server) handleJupyterRecv(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, err := queryInt(q.Get("after"), "after")
	if err == nil && after < -1 {
		err = errdefs.InvalidArgument("after: %d; want -1 (the head alone) or a seq", after)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	waitMS, err := queryInt(q.Get("wait_ms"), "wait_ms")
	if err == nil && waitMS < 0 {
		err = errdefs.InvalidArgument("wait_ms: %d is negative", waitMS)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	wait := time.Duration(min(waitMS, maxJupyterWait.Milliseconds())) * time.Millisecond
	c, err := s.resolveContext(r.PathValue("id"), q.Get("language"))
	if err != nil {
		writeError(w, err)
		return
	}
	ans := c.jupyterLog().read(r.Context(), after, wait)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // the kernel's bytes as they are
	if err := enc.Encode(ans); err != nil && r.Context().Err() == nil {
		s.log.Warn("jupyter receive answer", "context", c.id, "err", err)
	}
}

// queryInt parses an integer query parameter; absent is 0.
func queryInt(v, name string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, errdefs.InvalidArgument("%s: %q is not an integer", name, v)
	}
	return n, nil
}
