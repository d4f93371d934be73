package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/mcpserver"
)

// Request bodies at the edge (bodies.go), through the daemon's own
// http.Server (newEdgeServer). Before: a body sent a byte at a time held
// its connection for as long as the client liked (with a key or without),
// and a 100 MiB body to /mcp was a reset connection.

// trickle sends b a byte at a time, every, until done or the connection
// fails.
func trickle(c net.Conn, b string, every time.Duration, done <-chan struct{}) {
	for i := 0; i < len(b); i++ {
		select {
		case <-done:
			return
		case <-time.After(every):
		}
		if _, err := c.Write([]byte{b[i]}); err != nil {
			return
		}
	}
}

func TestEdgeSlowBodyIsCut(t *testing.T) {
	e := newEdgeServer(t, Config{BodyTimeout: 500 * time.Millisecond, BodyMinRate: 1024}, nil)
	body := `{"image": "python", "labels": {"a": "` + strings.Repeat("x", 200) + `"}}`

	// An ordinary JSON route: a 400 that says why, and the connection
	// closes.
	c := e.dial(t)
	c.write(fmt.Sprintf("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", edgeKey, len(body)))
	done := make(chan struct{})
	defer close(done)
	go trickle(c.c, body[1:], 100*time.Millisecond, done)
	resp, b := c.mustResponse()
	if resp.StatusCode != 400 || !strings.Contains(errorOf(t, b).Message, "came too slowly") {
		t.Fatalf("slow body: %d %s", resp.StatusCode, b)
	}
	if !c.closedWithin(15 * time.Second) {
		t.Fatal("the connection of a body cut for its pace stays open")
	}

	// A body nobody reads (a GET's) is read under the same rate.
	c = e.dial(t)
	c.write(fmt.Sprintf("GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n{", edgeKey, len(body)))
	go trickle(c.c, body[1:], 100*time.Millisecond, done)
	if !c.closedWithin(15 * time.Second) {
		t.Fatal("a GET's slow body holds its connection")
	}

	// /mcp too.
	c = e.dial(t)
	c.write(fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n{", edgeKey, len(body)))
	go trickle(c.c, body[1:], 100*time.Millisecond, done)
	resp, b = c.mustResponse()
	if resp.StatusCode != 400 {
		t.Fatalf("slow /mcp body: %d %s", resp.StatusCode, b)
	}
	if !c.closedWithin(15 * time.Second) {
		t.Fatal("/mcp: the connection of a body cut for its pace stays open")
	}

	// Without a key: the 401 goes out at once, and the rest of the body
	// is read under the same rate.
	for _, head := range []string{
		"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{",
		// E2B's data plane (its bodies stream) with no token: once
		// answered, what is left is read for the body timeout at most.
		"POST /files HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: sb\r\nE2b-Sandbox-Port: 49983\r\nContent-Length: %d\r\n\r\n{",
	} {
		c = e.dial(t)
		c.write(fmt.Sprintf(head, len(body)))
		go trickle(c.c, body[1:], 100*time.Millisecond, done)
		if resp, b := c.mustResponse(); resp.StatusCode != 401 {
			t.Fatalf("slow body without credentials: %d %s", resp.StatusCode, b)
		}
		if !c.closedWithin(15 * time.Second) {
			t.Fatalf("%s: a slow body without credentials holds its connection", strings.Fields(head)[1])
		}
	}

	// E2B's control plane too.
	c = e.dial(t)
	c.write(fmt.Sprintf("POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", edgeKey, len(body)))
	go trickle(c.c, body[1:], 100*time.Millisecond, done)
	resp, b = c.mustResponse()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "came too slowly") {
		t.Fatalf("slow E2B body: %d %s", resp.StatusCode, b)
	}
	if !c.closedWithin(15 * time.Second) {
		t.Fatal("E2B: the connection of a body cut for its pace stays open")
	}
	e.healthy(t)
}

// A handler that takes its time between reads does not use up the client's
// allowance, and once the body has ended, nothing bounds the connection's
// reads: an event stream outlives the body timeout and the idle timeout
// without its call being cancelled.
func TestEdgeBodyRateCountsOnlyWaitsForTheClient(t *testing.T) {
	const grace = 300 * time.Millisecond
	e := newEdgeServer(t, Config{BodyTimeout: grace, BodyMinRate: 1 << 20, IdleTimeout: grace}, func(s *Server) {
		s.mux.Handle("POST /test/pauses", s.instrument("POST /test/pauses", func(w http.ResponseWriter, r *http.Request) error {
			var got bytes.Buffer
			buf := make([]byte, 1<<10)
			for {
				n, err := r.Body.Read(buf)
				got.Write(buf[:n])
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
				time.Sleep(2 * grace) // busy with what it read
			}
			w.Write([]byte(fmt.Sprint(got.Len())))
			return nil
		}))
		s.mux.Handle("POST /test/stream", s.instrument("POST /test/stream", func(w http.ResponseWriter, r *http.Request) error {
			if _, err := io.ReadAll(r.Body); err != nil {
				return err
			}
			sse := newSSE(w)
			for i := 0; i < 10; i++ {
				time.Sleep(grace / 2)
				if err := r.Context().Err(); err != nil {
					return err
				}
				sse.send("tick", i)
			}
			sse.send("end", "ok")
			return nil
		}))
	})
	post := func(path, body string) (*http.Response, error) {
		req, _ := http.NewRequest("POST", "http://"+e.addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+edgeKey)
		return http.DefaultClient.Do(req)
	}
	body := strings.Repeat("y", 4<<10)
	resp, err := post("/test/pauses", body)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != fmt.Sprint(len(body)) {
		t.Fatalf("a body sent at once, read with pauses: %d %s", resp.StatusCode, b)
	}

	resp, err = post("/test/stream", `{"a": 1}`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "event: end\ndata: \"ok\"") {
		t.Fatalf("an event stream longer than the body and idle timeouts was cut: %s", b)
	}
}

// sendAllThenRead writes a request with a body of n bytes, all of it, and
// only then reads the answer, as many clients do.
func sendAllThenRead(t *testing.T, e *edgeEnv, head string, n int) (*http.Response, []byte) {
	t.Helper()
	c := e.dial(t)
	c.write(fmt.Sprintf(head, n))
	chunk := bytes.Repeat([]byte("z"), 1<<20)
	c.c.SetWriteDeadline(time.Now().Add(60 * time.Second))
	for left := n; left > 0; left -= len(chunk) {
		if _, err := c.c.Write(chunk[:min(left, len(chunk))]); err != nil {
			t.Fatalf("the server stopped reading the body %d bytes before its end: %v", left, err)
		}
	}
	return c.mustResponse()
}

func TestEdgeTooLargeBodiesAreAnswered(t *testing.T) {
	e := newEdgeServer(t, Config{MaxUploadBytes: 1 << 20}, nil)
	auth := "Authorization: Bearer " + edgeKey + "\r\n"
	for _, tc := range []struct {
		name, head string
		n          int
	}{
		{"/mcp", "POST /mcp HTTP/1.1\r\nHost: localhost\r\n" + auth + "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n", 100 << 20},
		{"a JSON route", "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", 100 << 20},
		{"a file upload", "PUT /v1/sandboxes/sb/files?path=a HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: %d\r\n\r\n", 8 << 20},
	} {
		resp, b := sendAllThenRead(t, e, tc.head, tc.n)
		if resp.StatusCode != 413 || errorOf(t, b).Code != "too_large" {
			t.Errorf("%s, %d bytes: %d %s", tc.name, tc.n, resp.StatusCode, b)
		}
	}

	// /mcp's bound as it streams, without a length: the API's 413, not
	// the SDK's plain text.
	req, _ := http.NewRequest("POST", "http://"+e.addr+"/mcp", io.MultiReader(bytes.NewReader(make([]byte, mcpserver.MaxRequestBodyBytes+1<<20))))
	req.Header.Set("Authorization", "Bearer "+edgeKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || errorOf(t, b).Code != "too_large" {
		t.Errorf("/mcp streamed over its bound: %d %s", resp.StatusCode, b)
	}

	// A body refused before it was read, for another reason (the MCP
	// SDK's 415), is answered too.
	resp, b = sendAllThenRead(t, e, "POST /mcp HTTP/1.1\r\nHost: localhost\r\n"+auth+"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n", 8<<20)
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("/mcp, wrong content type: %d %s", resp.StatusCode, b)
	}

	// A client that waits for "100 Continue" gets the 413 at once.
	c := e.dial(t)
	c.write(fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: localhost\r\n%sContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", auth, 100<<20))
	if resp, b := c.mustResponse(); resp.StatusCode != 413 {
		t.Errorf("/mcp with Expect: %d %s", resp.StatusCode, b)
	}

	// The MCP endpoint still works.
	req, _ = http.NewRequest("POST", "http://"+e.addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+edgeKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"serverInfo"`) {
		t.Errorf("/mcp initialize after the attacks: %d %s", resp.StatusCode, b)
	}
	e.healthy(t)
}
