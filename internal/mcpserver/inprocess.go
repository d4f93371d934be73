package mcpserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/forkbox/forkbox/client"
)

// inProcessURL is the base URL of an in-process client. Its requests never
// reach a network; the host only shows up in error messages.
const inProcessURL = "http://forkbox.in-process"

// InProcess returns a Go SDK client whose requests are served by h directly,
// in this process, without a socket: the daemon gives its own API handler
// (behind its authentication, which the /mcp request already passed) so the
// MCP tools go through exactly the code path of HTTP clients, with the same
// validation, errors and metrics.
//
// Responses stream: a handler's writes reach the client as they are made,
// and a client that stops reading (closes the body) cancels the handler's
// request context.
func InProcess(h http.Handler) *client.Client {
	return client.New(inProcessURL, client.WithHTTPClient(&http.Client{Transport: handlerTransport{h}}))
}

// handlerTransport is an http.RoundTripper that serves each request with a
// handler on a goroutine of its own.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	sreq := req.Clone(ctx)
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	sreq.RequestURI = req.URL.RequestURI()
	sreq.Host = req.URL.Host
	sreq.RemoteAddr = "in-process"
	sreq.Proto, sreq.ProtoMajor, sreq.ProtoMinor = "HTTP/1.1", 1, 1

	pr, pw := io.Pipe()
	w := &pipeResponseWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if req.Body != nil {
				req.Body.Close() // a RoundTripper closes the request body
			}
			if p := recover(); p != nil {
				w.finish(fmt.Errorf("in-process handler for %s %s panicked: %v", req.Method, req.URL.Path, p))
				return
			}
			w.finish(nil)
		}()
		t.h.ServeHTTP(w, sreq)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		cancel()
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	w.mu.Lock()
	code, header, failed := w.code, w.sent, w.failed
	w.mu.Unlock()
	if failed != nil {
		cancel()
		pr.Close()
		return nil, failed
	}
	resp := &http.Response{
		Status:        strconv.Itoa(code) + " " + http.StatusText(code),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		Body:          &cancelOnClose{ReadCloser: pr, cancel: cancel},
		ContentLength: -1,
		Request:       req,
	}
	if cl := header.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil {
			resp.ContentLength = n
		}
	}
	return resp, nil
}

// cancelOnClose cancels the handler's request context when the client closes
// the body, as a server does when its client goes away.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// pipeResponseWriter is the handler's side of an in-process exchange: the
// status and header are handed over (ready is closed) at the first write,
// flush or WriteHeader, or when the handler returns; the body goes through
// a pipe.
type pipeResponseWriter struct {
	header http.Header
	pw     *io.PipeWriter
	ready  chan struct{}

	mu      sync.Mutex
	started bool // ready is closed
	code    int
	sent    http.Header // the header as it was when the response started
	failed  error
}

func (w *pipeResponseWriter) Header() http.Header { return w.header }

func (w *pipeResponseWriter) WriteHeader(code int) {
	if code >= 100 && code <= 199 { // informational answers are not the response
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.startLocked(code)
}

// startLocked starts the response with code unless it has started.
func (w *pipeResponseWriter) startLocked(code int) {
	if w.started {
		return
	}
	if code < 100 || code > 999 {
		code = http.StatusInternalServerError
	}
	w.started = true
	w.code = code
	w.sent = w.header.Clone()
	close(w.ready)
}

func (w *pipeResponseWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.startLocked(http.StatusOK)
	w.mu.Unlock()
	return w.pw.Write(b)
}

// Flush starts the response; the pipe itself does not buffer.
func (w *pipeResponseWriter) Flush() {
	w.mu.Lock()
	w.startLocked(http.StatusOK)
	w.mu.Unlock()
}

// finish ends the response when the handler returns: a handler that wrote
// nothing answered 200 with an empty body; err (a panic) fails the call, or
// cuts the body short when the response had started.
func (w *pipeResponseWriter) finish(err error) {
	w.mu.Lock()
	if err != nil && !w.started {
		w.started = true
		w.failed = err
		close(w.ready)
		w.mu.Unlock()
		w.pw.CloseWithError(err)
		return
	}
	w.startLocked(http.StatusOK)
	w.mu.Unlock()
	if err != nil {
		w.pw.CloseWithError(err)
		return
	}
	w.pw.Close()
}
