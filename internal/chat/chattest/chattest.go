// Package chattest serves scripted model endpoints that speak the OpenAI
// chat-completions and Anthropic messages streaming protocols, so that tests
// drive the real provider SDKs (and a real daemon) with known model turns.
package chattest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// ToolCall is a scripted tool call: id, tool name and raw JSON arguments.
type ToolCall struct{ ID, Name, Args string }

// Turn is a scripted model turn: text, then tool calls. status, when set, is
// an HTTP error answer instead.
type Turn struct {
	Text   string
	Calls  []ToolCall
	Status int
}

// Server is a scripted model endpoint. Each request gets the next turn;
// past the script, the last turn repeats (or next, when set, makes it).
type Server struct {
	// URL is the server's base URL (OpenAI clients add /v1).
	URL   string
	t     testing.TB
	srv   *httptest.Server
	mu    sync.Mutex
	reqs  []map[string]any
	turns []Turn
	next  func(n int, req map[string]any) Turn // n is 0-based
}

// SetNext makes the server compute each turn from the request instead of
// following its script.
func (w *Server) SetNext(next func(n int, req map[string]any) Turn) {
	w.mu.Lock()
	w.next = next
	w.mu.Unlock()
}

// Requests returns the decoded request bodies received so far.
func (w *Server) Requests() []map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]map[string]any(nil), w.reqs...)
}

func (w *Server) record(r *http.Request) (map[string]any, int, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.t.Errorf("read request: %v", err)
		return nil, 0, false
	}
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		w.t.Errorf("request is not JSON: %v: %s", err, body)
		return nil, 0, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reqs = append(w.reqs, req)
	return req, len(w.reqs) - 1, true
}

func (w *Server) turn(n int, req map[string]any) Turn {
	w.mu.Lock()
	next := w.next
	w.mu.Unlock()
	if next != nil {
		return next(n, req)
	}
	if n >= len(w.turns) {
		n = len(w.turns) - 1
	}
	return w.turns[n]
}

func sse(w http.ResponseWriter, event, data string) {
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", data)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// split cuts s in pieces, as streams deliver it.
func split(s string, n int) []string {
	if s == "" {
		return nil
	}
	var out []string
	step := (len(s) + n - 1) / n
	for len(s) > step {
		out = append(out, s[:step])
		s = s[step:]
	}
	return append(out, s)
}

// NewOpenAI serves POST /v1/chat/completions with streamed chunks.
func NewOpenAI(t testing.TB, turns ...Turn) *Server {
	w := &Server{t: t, turns: turns}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
			http.NotFound(rw, r)
			return
		}
		if got := r.Header.Get("Authorization"); !strings.HasPrefix(got, "Bearer ") {
			t.Errorf("Authorization = %q", got)
		}
		req, n, ok := w.record(r)
		if !ok {
			http.Error(rw, "bad request", 400)
			return
		}
		if req["stream"] != true {
			t.Errorf("request %d is not streaming: %v", n, req["stream"])
		}
		tr := w.turn(n, req)
		if tr.Status != 0 {
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(tr.Status)
			fmt.Fprintf(rw, `{"error":{"message":"scripted failure %d","type":"server_error"}}`, tr.Status)
			return
		}
		rw.Header().Set("Content-Type", "text/event-stream")
		chunk := func(delta map[string]any, finish any) {
			sse(rw, "", mustJSON(map[string]any{
				"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion.chunk", "created": 1700000000,
				"model":   req["model"],
				"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
			}))
		}
		chunk(map[string]any{"role": "assistant", "content": ""}, nil)
		for _, piece := range split(tr.Text, 3) {
			chunk(map[string]any{"content": piece}, nil)
		}
		for i, c := range tr.Calls {
			chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "id": c.ID, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": ""},
			}}}, nil)
			for _, piece := range split(c.Args, 3) {
				chunk(map[string]any{"tool_calls": []any{map[string]any{
					"index": i, "function": map[string]any{"arguments": piece},
				}}}, nil)
			}
		}
		finish := "stop"
		if len(tr.Calls) > 0 {
			finish = "tool_calls"
		}
		chunk(map[string]any{}, finish)
		sse(rw, "", "[DONE]")
	}))
	w.URL = w.srv.URL
	t.Cleanup(w.srv.Close)
	return w
}

// NewAnthropic serves POST /v1/messages with streamed events.
func NewAnthropic(t testing.TB, turns ...Turn) *Server {
	w := &Server{t: t, turns: turns}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
			http.NotFound(rw, r)
			return
		}
		// This SDK version sends the key as a bearer token.
		key := r.Header.Get("X-Api-Key") + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if key == "" || r.Header.Get("Anthropic-Version") == "" {
			t.Errorf("headers: key %q, anthropic-version %q", key, r.Header.Get("Anthropic-Version"))
		}
		req, n, ok := w.record(r)
		if !ok {
			http.Error(rw, "bad request", 400)
			return
		}
		if req["stream"] != true {
			t.Errorf("request %d is not streaming: %v", n, req["stream"])
		}
		tr := w.turn(n, req)
		if tr.Status != 0 {
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(tr.Status)
			fmt.Fprintf(rw, `{"type":"error","error":{"type":"api_error","message":"scripted failure %d"}}`, tr.Status)
			return
		}
		rw.Header().Set("Content-Type", "text/event-stream")
		ev := func(typ string, v map[string]any) {
			v["type"] = typ
			sse(rw, typ, mustJSON(v))
		}
		ev("message_start", map[string]any{"message": map[string]any{
			"id": fmt.Sprintf("msg_%d", n), "type": "message", "role": "assistant", "model": req["model"],
			"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": 100, "output_tokens": 1},
		}})
		idx := 0
		if tr.Text != "" {
			ev("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{"type": "text", "text": ""}})
			ev("ping", map[string]any{})
			for _, piece := range split(tr.Text, 3) {
				ev("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "text_delta", "text": piece}})
			}
			ev("content_block_stop", map[string]any{"index": idx})
			idx++
		}
		for _, c := range tr.Calls {
			ev("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{
				"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{}}})
			for _, piece := range split(c.Args, 3) {
				ev("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
			}
			ev("content_block_stop", map[string]any{"index": idx})
			idx++
		}
		stop := "end_turn"
		if len(tr.Calls) > 0 {
			stop = "tool_use"
		}
		ev("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": 42}})
		ev("message_stop", map[string]any{})
	}))
	w.URL = w.srv.URL
	t.Cleanup(w.srv.Close)
	return w
}

// RunCodeArgs are the JSON arguments of a run_code call.
func RunCodeArgs(code string) string { return mustJSON(map[string]string{"code": code}) }
