package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

var chatTime = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

func sampleChatResponse() api.ChatResponse {
	exec := sampleExecution()
	return api.ChatResponse{
		Answer:         "Profit by region: North 41,230.50, South 38,112.00.",
		Images:         []api.ChatImage{{FileName: "chart-1.png", PNGBase64: "iVBORw0KGgo="}},
		Steps:          []api.ChatStep{{Code: "df.groupby('region').profit.sum()", Execution: &exec}, {Code: "boom(", Execution: nil}},
		ConversationID: "conv_1",
		Sandbox:        "sbx_1",
		Rounds:         3,
		Truncated:      true,
	}
}

// decodeStrict decodes a request body as the daemon does: unknown fields are
// errors.
func decodeStrict(t *testing.T, r io.Reader, v any) {
	t.Helper()
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Errorf("request body: %v", err)
	}
}

func TestChat(t *testing.T) {
	req := api.ChatRequest{Question: "Profit by region?", CSV: "a,b\n1,2\n", CSVName: "x.csv",
		FileIDs: []string{"file_1", "file_2"}, ConversationID: "conv_1", Model: "gpt-4o-mini"}
	want := sampleChatResponse()
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat" {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
		if a := r.Header.Get("Accept"); a != "application/json" {
			t.Errorf("Accept = %q", a)
		}
		var got api.ChatRequest
		decodeStrict(t, r.Body, &got)
		if !reflect.DeepEqual(got, req) {
			t.Errorf("request = %+v, want %+v", got, req)
		}
		writeJSON(w, 200, want)
	})
	got, err := c.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("response = %+v\nwant %+v", got, want)
	}
}

func TestChatErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind error
	}{
		{errdefs.Unavailable("no model provider is configured: set OPENAI_API_KEY or ANTHROPIC_API_KEY"), ErrUnavailable},
		{errdefs.InvalidArgument("question: must not be empty"), ErrInvalidArgument},
		{errdefs.NotFound("conversation %q not found", "conv_x"), ErrNotFound},
	} {
		_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) { writeErr(w, tc.err) })
		for name, call := range map[string]func() (*api.ChatResponse, error){
			"Chat": func() (*api.ChatResponse, error) { return c.Chat(context.Background(), api.ChatRequest{Question: "q"}) },
			"ChatStream": func() (*api.ChatResponse, error) {
				return c.ChatStream(context.Background(), api.ChatRequest{Question: "q"}, nil)
			},
		} {
			res, err := call()
			if !errors.Is(err, tc.kind) || err.Error() != tc.err.Error() || res != nil {
				t.Errorf("%s: %v, %v; want %v", name, res, err, tc.err)
			}
		}
	}
}

// chatStream is a question's whole event stream, as the daemon sends it.
func chatStream(res api.ChatResponse) (string, []api.ChatEvent) {
	exec := sampleExecution()
	events := []api.ChatEvent{
		{Type: api.ChatEventConversation, ConversationID: "conv_1", Sandbox: "sbx_1"},
		{Type: api.ChatEventText, Round: 1, Text: "Let me "},
		{Type: api.ChatEventText, Round: 1, Text: "compute that — ü."},
		{Type: api.ChatEventToolCall, Round: 1, CallID: "call_1", Code: "df = pd.read_csv('sales.csv')\ndf.head()"},
		{Type: api.ChatEventOutput, Round: 1, CallID: "call_1", Output: &api.ChatOutput{Type: "stdout", Text: "hi\n"}},
		{Type: api.ChatEventOutput, Round: 1, CallID: "call_1", Output: &api.ChatOutput{Type: "result", Result: map[string]any{"text": "215"}}},
		{Type: api.ChatEventOutput, Round: 1, CallID: "call_1", Output: &api.ChatOutput{Type: "error",
			Error: &api.ExecutionError{Name: "NameError", Value: "x", Traceback: []string{"line 1"}}}},
		{Type: api.ChatEventExecution, Round: 1, CallID: "call_1", Execution: &exec, Images: res.Images},
		{Type: api.ChatEventToolError, Round: 2, CallID: "call_2", Error: "arguments are not valid JSON"},
		{Type: api.ChatEventAnswer, Round: 3, Text: res.Answer, Images: res.Images},
	}
	var b strings.Builder
	b.WriteString(": connected\n\n")
	for i, ev := range events {
		b.WriteString(sseEventText(ev.Type, ev))
		if i == 3 {
			b.WriteString(": keepalive\n\n")
		}
	}
	b.WriteString(sseEventText(api.ChatEventDone, res))
	return b.String(), events
}

func TestChatStream(t *testing.T) {
	want := sampleChatResponse()
	stream, wantEvents := chatStream(want)
	for _, chunk := range []int{1, 3, 7, 1 << 20} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			var body api.ChatRequest
			_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/v1/chat" {
					t.Errorf("%s %s", r.Method, r.URL.Path)
				}
				if a := r.Header.Get("Accept"); a != "text/event-stream" {
					t.Errorf("Accept = %q", a)
				}
				if ct := r.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q", ct)
				}
				decodeStrict(t, r.Body, &body)
				w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
				w.WriteHeader(200)
				for s := stream; len(s) > 0; {
					n := min(chunk, len(s))
					io.WriteString(w, s[:n])
					w.(http.Flusher).Flush()
					s = s[n:]
				}
			})
			var got []api.ChatEvent
			res, err := c.ChatStream(context.Background(), api.ChatRequest{Question: "q", ConversationID: "conv_1"},
				func(ev api.ChatEvent) { got = append(got, ev) })
			if err != nil {
				t.Fatal(err)
			}
			if body.Question != "q" || body.ConversationID != "conv_1" {
				t.Errorf("request = %+v", body)
			}
			if !reflect.DeepEqual(got, wantEvents) {
				t.Errorf("events:\n%+v\nwant\n%+v", got, wantEvents)
			}
			if !reflect.DeepEqual(*res, want) {
				t.Errorf("response = %+v\nwant %+v", res, want)
			}
		})
	}
}

// Event kinds from a newer daemon are passed on, named by the event when
// their data has no type; a nil onEvent is fine.
func TestChatStreamUnknownEventsAndNilHandler(t *testing.T) {
	res := api.ChatResponse{Answer: "42", Images: []api.ChatImage{}, Steps: []api.ChatStep{}, ConversationID: "c", Sandbox: "s", Rounds: 1}
	stream := sseEventText("thinking", map[string]string{"text": "hmm"}) + sseEventText(api.ChatEventDone, res)
	var got []api.ChatEvent
	out, err := sseServer(t, stream, 5).ChatStream(context.Background(), api.ChatRequest{Question: "q"},
		func(ev api.ChatEvent) { got = append(got, ev) })
	if err != nil || !reflect.DeepEqual(*out, res) {
		t.Fatalf("ChatStream = %+v, %v", out, err)
	}
	if want := []api.ChatEvent{{Type: "thinking", Text: "hmm"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("events = %+v, want %+v", got, want)
	}
	out, err = sseServer(t, stream, 5).ChatStream(context.Background(), api.ChatRequest{Question: "q"}, nil)
	if err != nil || out.Answer != "42" {
		t.Fatalf("nil onEvent: %+v, %v", out, err)
	}
}

func TestChatStreamErrors(t *testing.T) {
	start := sseEventText(api.ChatEventConversation, api.ChatEvent{Type: api.ChatEventConversation, ConversationID: "c1", Sandbox: "s1"})
	t.Run("error event", func(t *testing.T) {
		c := sseServer(t, start+sseEventText(api.ChatEventError, api.ErrorBody{Code: "unavailable", Message: "model provider: connection refused"}), 5)
		var got []api.ChatEventType
		_, err := c.ChatStream(context.Background(), api.ChatRequest{Question: "q"}, func(ev api.ChatEvent) { got = append(got, ev.Type) })
		var ae *APIError
		if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ae) || ae.Status != 503 || ae.Message != "model provider: connection refused" {
			t.Fatalf("err = %#v", err)
		}
		if !reflect.DeepEqual(got, []api.ChatEventType{api.ChatEventConversation}) {
			t.Errorf("events = %q", got)
		}
	})
	t.Run("error event without a body", func(t *testing.T) {
		c := sseServer(t, "event: error\ndata: boom\n\n", 5)
		_, err := c.ChatStream(context.Background(), api.ChatRequest{Question: "q"}, nil)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != "internal" || ae.Message != "boom" {
			t.Fatalf("err = %#v", err)
		}
	})
	t.Run("cut before done", func(t *testing.T) {
		c := sseServer(t, start+"event: done\ndata: {\"answer\":\"42\"}\n", 5) // no blank line: never dispatched
		_, err := c.ChatStream(context.Background(), api.ChatRequest{Question: "q"}, nil)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v, want ErrUnexpectedEOF", err)
		}
	})
	for _, ev := range []string{string(api.ChatEventText), api.ChatEventDone} {
		t.Run("bad "+ev+" json", func(t *testing.T) {
			c := sseServer(t, "event: "+ev+"\ndata: {nope\n\n", 5)
			_, err := c.ChatStream(context.Background(), api.ChatRequest{Question: "q"}, nil)
			if err == nil || !strings.Contains(err.Error(), ev+" event") {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func TestChatStreamJSONFallback(t *testing.T) {
	want := sampleChatResponse()
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, want) })
	called := false
	got, err := c.ChatStream(context.Background(), api.ChatRequest{Question: "q"}, func(api.ChatEvent) { called = true })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("response = %+v", got)
	}
	if called {
		t.Errorf("onEvent called for a plain JSON answer")
	}
}

func TestChatStreamCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseEventText(api.ChatEventText, api.ChatEvent{Type: api.ChatEventText, Text: "Let me"}))
		w.(http.Flusher).Flush()
		select { // a model that never finishes
		case <-r.Context().Done():
		case <-release:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.ChatStream(ctx, api.ChatRequest{Question: "q"}, func(api.ChatEvent) { cancel() })
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ChatStream did not return after cancel")
	}
}

func sampleConversation() api.Conversation {
	return api.Conversation{ID: "conv/1 ü", Title: "Sales", Sandbox: "sbx_1", SandboxName: "conv-1", Model: "m",
		CreatedAt: chatTime, UpdatedAt: chatTime.Add(time.Minute)}
}

func TestConversationCalls(t *testing.T) {
	conv := sampleConversation()
	full := conv
	full.Turns = []api.ChatTurn{{Question: "q", Answer: "a", Images: []api.ChatImage{}, Steps: []api.ChatStep{}, CreatedAt: chatTime},
		{Question: "q2", Answer: "", Images: []api.ChatImage{}, Steps: []api.ChatStep{}, Error: "provider down", CreatedAt: chatTime}}
	full.Files = []api.UploadedFile{{ID: "file_1", Name: "sales.csv", SizeBytes: 10, SHA256: "ab", CreatedAt: chatTime, Columns: []string{"a"}, Rows: 2}}
	var (
		mu  sync.Mutex
		got []string
	)
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/conversations":
			var req api.CreateConversationRequest
			decodeStrict(t, r.Body, &req)
			c := conv
			c.Title = req.Title
			writeJSON(w, 201, c)
		case r.Method == http.MethodGet && r.URL.Path == "/v1/conversations":
			writeJSON(w, 200, api.ConversationList{Conversations: []api.Conversation{conv, {ID: "conv_2"}}})
		case r.Method == http.MethodGet && r.URL.Path == "/v1/conversations/"+conv.ID:
			writeJSON(w, 200, full)
		case r.Method == http.MethodDelete && r.URL.Path == "/v1/conversations/"+conv.ID:
			w.WriteHeader(http.StatusNoContent)
		default:
			writeErr(w, errdefs.NotFound("conversation %q not found", strings.TrimPrefix(r.URL.Path, "/v1/conversations/")))
		}
	})
	ctx := context.Background()

	created, err := c.CreateConversation(ctx, api.CreateConversationRequest{Title: "Q3 sales"})
	if err != nil || created.Title != "Q3 sales" || created.ID != conv.ID || !created.CreatedAt.Equal(chatTime) {
		t.Fatalf("CreateConversation = %+v, %v", created, err)
	}
	if _, err := c.CreateConversation(ctx, api.CreateConversationRequest{}); err != nil {
		t.Fatalf("CreateConversation without a title: %v", err)
	}
	list, err := c.ListConversations(ctx)
	if err != nil || len(list) != 2 || !reflect.DeepEqual(list[0], conv) || list[1].ID != "conv_2" {
		t.Fatalf("ListConversations = %+v, %v", list, err)
	}
	g, err := c.GetConversation(ctx, conv.ID)
	if err != nil || !reflect.DeepEqual(*g, full) {
		t.Fatalf("GetConversation = %+v, %v", g, err)
	}
	if err := c.DeleteConversation(ctx, conv.ID); err != nil {
		t.Fatalf("DeleteConversation: %v", err)
	}
	if _, err := c.GetConversation(ctx, "nope"); !errors.Is(err, ErrNotFound) || err.Error() != `conversation "nope" not found` {
		t.Errorf("GetConversation(unknown) = %v", err)
	}
	if err := c.DeleteConversation(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteConversation(unknown) = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	esc := "/v1/conversations/conv%2F1%20%C3%BC"
	want := []string{"POST /v1/conversations", "POST /v1/conversations", "GET /v1/conversations", "GET " + esc, "DELETE " + esc,
		"GET /v1/conversations/nope", "DELETE /v1/conversations/nope"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("requests:\n%q\nwant\n%q", got, want)
	}
}

// uploadServer parses POST /v1/files as the daemon does: an optional
// conversation_id field, then the file part, read as a stream.
type upload struct {
	conv, name, partType string
	content              []byte
	contentLength        int64
	parts                []string
}

func readUpload(t *testing.T, r *http.Request) upload {
	t.Helper()
	var u upload
	u.contentLength = r.ContentLength
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		t.Errorf("Content-Type = %q", r.Header.Get("Content-Type"))
		return u
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return u
		}
		if err != nil {
			t.Errorf("multipart: %v", err)
			return u
		}
		u.parts = append(u.parts, part.FormName())
		b, err := io.ReadAll(part)
		if err != nil {
			t.Errorf("part %s: %v", part.FormName(), err)
		}
		switch part.FormName() {
		case "conversation_id":
			u.conv = string(b)
		case "file":
			u.name, u.partType, u.content = part.FileName(), part.Header.Get("Content-Type"), b
		}
	}
}

func TestUploadFile(t *testing.T) {
	csv := "date,product,region,units_sold,revenue,cost\n2025-01-01,A,North,3,30.5,10\n"
	want := api.UploadedFile{ID: "file_1", Name: "sales.csv", SizeBytes: int64(len(csv)), SHA256: "ab", CreatedAt: chatTime,
		Columns: []string{"date", "product", "region", "units_sold", "revenue", "cost"}, Rows: 1}
	for _, tc := range []struct{ name, conv string }{
		{"sales.csv", ""},
		{"sales.csv", "conv_1"},
		{`Q3 "final" — ventes ü.csv`, "conv_1"},
	} {
		t.Run(tc.name+"/"+tc.conv, func(t *testing.T) {
			var got upload
			_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/v1/files" {
					t.Errorf("%s %s", r.Method, r.URL.Path)
				}
				got = readUpload(t, r)
				writeJSON(w, 201, want)
			})
			// A reader of unknown length, read as the request goes out.
			res, err := c.UploadFile(context.Background(), tc.name, io.MultiReader(strings.NewReader(csv[:10]), strings.NewReader(csv[10:])), tc.conv)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*res, want) {
				t.Errorf("UploadFile = %+v", res)
			}
			if got.name != tc.name || string(got.content) != csv || got.partType != "text/csv" || got.conv != tc.conv {
				t.Errorf("daemon got name %q, type %q, conversation %q, content %q", got.name, got.partType, got.conv, got.content)
			}
			wantParts := []string{"file"}
			if tc.conv != "" {
				wantParts = []string{"conversation_id", "file"} // the conversation first
			}
			if !reflect.DeepEqual(got.parts, wantParts) {
				t.Errorf("parts = %q, want %q", got.parts, wantParts)
			}
			if got.contentLength != -1 {
				t.Errorf("ContentLength = %d: want a streamed (chunked) body", got.contentLength)
			}
		})
	}
}

// A daemon that refuses a file part-way (over the size limit) or at once
// (not CSV) gets its refusal to the caller, and the writer stops.
func TestUploadFileRefused(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789,abcdef\n"), 1<<20) // 18 MiB: more than the pipes hold
	for _, tc := range []struct {
		name string
		read int64
		err  error
		kind error
	}{
		{"too large", 1 << 20, errdefs.TooLarge("the upload is larger than the limit of 1 MiB"), ErrTooLarge},
		{"not csv", 0, errdefs.InvalidArgument("sales.xlsx is not a CSV file"), ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				io.CopyN(io.Discard, r.Body, tc.read)
				writeErr(w, tc.err)
			})
			done := make(chan error, 1)
			go func() {
				_, err := c.UploadFile(context.Background(), "sales.csv", bytes.NewReader(big), "")
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tc.kind) || err.Error() != tc.err.Error() {
					t.Errorf("err = %v, want %v", err, tc.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("UploadFile hangs after a refusal")
			}
		})
	}
}

type failingReader struct{ n int }

var errDisk = errors.New("input/output error")

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errDisk
	}
	n := min(len(p), r.n)
	for i := range n {
		p[i] = 'a'
	}
	r.n -= n
	return n, nil
}

// A reader that fails makes the upload fail with its error, and the daemon
// never sees a complete body.
func TestUploadFileReaderError(t *testing.T) {
	complete := make(chan bool, 1)
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		complete <- err == nil
		writeErr(w, errdefs.InvalidArgument("malformed multipart body"))
	})
	_, err := c.UploadFile(context.Background(), "sales.csv", &failingReader{n: 100 << 10}, "")
	if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), "sales.csv") {
		t.Fatalf("err = %v, want the reader's error", err)
	}
	select {
	case ok := <-complete:
		if ok {
			t.Errorf("the daemon read a complete body")
		}
	case <-time.After(5 * time.Second):
	}
}

func TestUploadFileCancel(t *testing.T) {
	started := make(chan struct{})
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		io.Copy(io.Discard, r.Body) // until the client goes away
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	pr, pw := io.Pipe() // a reader that blocks, never giving a byte
	defer pw.Close()
	done := make(chan error, 1)
	go func() {
		_, err := c.UploadFile(ctx, "sales.csv", pr, "")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("UploadFile did not return after cancel")
	}
}

func TestGetUpload(t *testing.T) {
	want := api.UploadedFile{ID: "file 1", Name: "sales.csv", SizeBytes: 10, SHA256: "ab", CreatedAt: chatTime, Columns: []string{"a", "b"}, Rows: 3}
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			t.Errorf("method %s", r.Method)
		}
		if r.URL.EscapedPath() == "/v1/files/file%201" {
			writeJSON(w, 200, want)
			return
		}
		writeErr(w, errdefs.NotFound("file %q not found", strings.TrimPrefix(r.URL.Path, "/v1/files/")))
	})
	got, err := c.GetUpload(context.Background(), "file 1")
	if err != nil || !reflect.DeepEqual(*got, want) {
		t.Fatalf("GetUpload = %+v, %v", got, err)
	}
	if _, err := c.GetUpload(context.Background(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetUpload(unknown) = %v", err)
	}
}
