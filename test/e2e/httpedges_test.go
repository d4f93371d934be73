package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/forkbox/forkbox/api"
)

// edgeConn is a client connection that writes its requests by hand, so
// that no client library cleans, fixes or retries them.
type edgeConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialEdge(t *testing.T, d *daemon) *edgeConn {
	t.Helper()
	c, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &edgeConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (c *edgeConn) write(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// answer reads one answer, within 30 s.
func (c *edgeConn) answer() (*http.Response, []byte) {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer c.c.SetReadDeadline(time.Time{})
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("reading the answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatalf("reading the answer's body: %v", err)
	}
	return resp, b
}

// closedWithin reports whether the daemon closed the connection within d.
func (c *edgeConn) closedWithin(d time.Duration) bool {
	c.c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c.br)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func edgeError(t *testing.T, b []byte) api.ErrorBody {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("not an API error: %v: %q", err, b)
	}
	return e.Error
}

// TestHTTPEdges attacks the edges of the daemon's HTTP server
// (docs/SECURITY.md, "The HTTP edge"), with short timeouts set through the
// environment, and checks that what must keep working does: idle keep-alive
// connections are closed, a body sent a byte at a time is cut, ports only
// in their canonical form, ".." never leaves a port's path, a 100 MiB body
// to /mcp is a 413; a WebSocket through a port and an event stream outlive
// both timeouts; and after all of it the daemon creates a sandbox and runs
// a command. Before the edges existed: every idle connection stayed open,
// the slow body held its connection, "+80" was port 80, the ".." was a 307
// out of the port, and the /mcp body got a reset connection.
func TestHTTPEdges(t *testing.T) {
	needRoot(t)
	const key = "http-edges-key"
	d := startChatDaemon(t, "FORKBOX_API_KEY="+key, "FORKBOX_HTTP_IDLE_TIMEOUT=1s", "FORKBOX_HTTP_BODY_TIMEOUT=1s")
	ctx := ctxT(t)
	auth := "Authorization: Bearer " + key + "\r\n"

	t.Run("idle keep-alive connections are closed", func(t *testing.T) {
		const n = 200
		conns := make([]*edgeConn, n)
		for i := range conns {
			conns[i] = dialEdge(t, d)
			conns[i].write("GET /healthz HTTP/1.1\r\nHost: forkbox\r\n\r\n")
			if resp, b := conns[i].answer(); resp.StatusCode != 200 || resp.Close {
				t.Fatalf("healthz %d: %d (close %v) %s", i, resp.StatusCode, resp.Close, b)
			}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		open := 0
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !c.closedWithin(15 * time.Second) {
					mu.Lock()
					open++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if open > 0 {
			t.Errorf("%d of %d idle connections still open 15 s after an idle timeout of 1 s", open, n)
		}
	})

	t.Run("a slow body on a JSON route is cut", func(t *testing.T) {
		body := `{"name": "slow-loris", "labels": {"a": "` + strings.Repeat("x", 300) + `"}}`
		c := dialEdge(t, d)
		c.write(fmt.Sprintf("POST /v1/sandboxes HTTP/1.1\r\nHost: forkbox\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", auth, len(body)))
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for i := 1; i < len(body); i++ {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := c.c.Write([]byte{body[i]}); err != nil {
					return
				}
			}
		}()
		resp, b := c.answer()
		if resp.StatusCode != 400 || !strings.Contains(edgeError(t, b).Message, "came too slowly") {
			t.Fatalf("a body a byte every 0.2 s: %d %s", resp.StatusCode, b)
		}
		if !c.closedWithin(15 * time.Second) {
			t.Error("the connection of the cut body stays open")
		}
	})

	t.Run("a 100 MiB body is answered 413", func(t *testing.T) {
		for _, head := range []string{
			"POST /mcp HTTP/1.1\r\nHost: localhost\r\n" + auth + "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n",
			"POST /v1/sandboxes HTTP/1.1\r\nHost: forkbox\r\n" + auth + "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		} {
			// The whole body first, then the answer, as many clients do.
			const n = 100 << 20
			c := dialEdge(t, d)
			c.write(fmt.Sprintf(head, n))
			chunk := bytes.Repeat([]byte("z"), 1<<20)
			c.c.SetWriteDeadline(time.Now().Add(2 * time.Minute))
			for left := n; left > 0; left -= len(chunk) {
				if _, err := c.c.Write(chunk); err != nil {
					t.Fatalf("%s: the daemon stopped reading %d bytes before the body's end: %v", strings.Fields(head)[1], left, err)
				}
			}
			resp, b := c.answer()
			if resp.StatusCode != 413 || edgeError(t, b).Code != "too_large" {
				t.Errorf("%s, 100 MiB: %d %s", strings.Fields(head)[1], resp.StatusCode, b)
			}
		}
	})

	// A sandbox with servers on its ports: the files of 8000, the request
	// line and headers on 8001, a WebSocket echo on 8765.
	sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "edges"})
	if _, err := d.c.WriteFile(ctx, sb.ID, "/workspace/headers.py", strings.NewReader(headersPy), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.WriteFile(ctx, sb.ID, "/workspace/ws.py", strings.NewReader(wsEchoPy), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, d, sb.ID, "mkdir -p /workspace/site && echo inside > /workspace/site/hello.txt && cd /workspace/site && "+
		"(nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &) && "+
		"(nohup python3 /workspace/headers.py >/dev/null 2>&1 &) && (nohup python3 /workspace/ws.py >/dev/null 2>&1 &)")
	for i := 0; ; i++ {
		res := sh(t, d, sb.ID, "python3 -c \"import socket; [socket.create_connection(('127.0.0.1', p), 1).close() for p in (8000, 8001, 8765)]\" && echo up")
		if strings.TrimSpace(res.Stdout) == "up" {
			break
		}
		if i > 50 {
			t.Fatalf("servers inside the sandbox did not come up: %+v", res)
		}
		time.Sleep(100 * time.Millisecond)
	}
	portPath := "/v1/sandboxes/" + sb.ID + "/ports/"

	t.Run("ports only in their canonical form", func(t *testing.T) {
		for _, p := range []string{"+8000", "00008000", "08000", "8000x", "65536"} {
			for _, path := range []string{portPath + p + "/hello.txt", portPath + p} {
				c := dialEdge(t, d)
				c.write("GET " + path + " HTTP/1.1\r\nHost: forkbox\r\n" + auth + "\r\n")
				resp, b := c.answer()
				if resp.StatusCode != 400 || !strings.Contains(edgeError(t, b).Message, "is not a port number") {
					t.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
				}
			}
		}
		c := dialEdge(t, d)
		c.write("GET " + portPath + "8000/hello.txt HTTP/1.1\r\nHost: forkbox\r\n" + auth + "\r\n")
		if resp, b := c.answer(); resp.StatusCode != 200 || string(b) != "inside\n" {
			t.Errorf("port 8000: %d %q", resp.StatusCode, b)
		}
	})

	t.Run("dot segments stay under their port", func(t *testing.T) {
		for _, path := range []string{"8001/../../../../v1/keys", "8001/..", "8001/../8000/hello.txt", "8001/a/../../../files?path=/etc/passwd"} {
			for _, a := range []string{auth, ""} {
				c := dialEdge(t, d)
				c.write("GET " + portPath + path + " HTTP/1.1\r\nHost: forkbox\r\n" + a + "\r\n")
				resp, b := c.answer()
				if resp.StatusCode != 400 || resp.Header.Get("Location") != "" {
					t.Errorf("GET %s (key %v): %d, Location %q: %s", path, a != "", resp.StatusCode, resp.Header.Get("Location"), b)
				}
			}
		}
		// Within the port: the app gets the cleaned path, with no
		// redirect; percent-encoded dots and slashes are no path structure
		// to the daemon and reach the app as sent.
		for path, want := range map[string]string{
			"8001/a/./b/../c//d":              "GET /a/c/d HTTP/1.1",
			"8001/%2e%2e/%2e%2e/files?x=1":    "GET /%2e%2e/%2e%2e/files?x=1 HTTP/1.1",
			"8001/..%2f..%2f8000%2fhello.txt": "GET /..%2f..%2f8000%2fhello.txt HTTP/1.1",
		} {
			c := dialEdge(t, d)
			c.write("GET " + portPath + path + " HTTP/1.1\r\nHost: forkbox\r\n" + auth + "\r\n")
			resp, b := c.answer()
			if resp.StatusCode != 200 || !strings.HasPrefix(string(b), want) {
				t.Errorf("%s, within the port: %d %q", path, resp.StatusCode, b)
			}
		}
	})

	t.Run("streams outlive the timeouts", func(t *testing.T) {
		p, err := d.c.Port(ctx, sb.ID, 8765)
		if err != nil {
			t.Fatal(err)
		}
		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.URL, "http")+"chat", &websocket.DialOptions{HTTPHeader: http.Header{"X-Forkbox-Token": {p.Token}}})
		if err != nil {
			t.Fatalf("websocket through the port: %v", err)
		}
		defer conn.CloseNow()
		for i := 0; i < 3; i++ {
			time.Sleep(1500 * time.Millisecond) // beyond the idle and body timeouts
			msg := fmt.Sprint("after ", i)
			if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatalf("websocket write after %d pauses: %v", i, err)
			}
			if _, got, err := conn.Read(ctx); err != nil || string(got) != "echo: "+msg {
				t.Fatalf("websocket echo after %d pauses: %q %v", i, got, err)
			}
		}
		conn.Close(websocket.StatusNormalClosure, "")

		var out strings.Builder
		res, err := d.c.ExecStream(ctx, sb.ID, api.ExecRequest{Cmd: "sh", Args: []string{"-c", "for i in 1 2 3 4; do echo $i; sleep 1; done"}},
			func(b []byte) { out.Write(b) }, nil)
		if err != nil || res.ExitCode != 0 || out.String() != "1\n2\n3\n4\n" {
			t.Fatalf("a 4 s event stream: %+v %v %q", res, err, out.String())
		}
	})

	// After all of it, the daemon still works.
	sb2 := newSandbox(t, d, api.CreateSandboxRequest{})
	if res := sh(t, d, sb2.ID, "echo still-serving"); strings.TrimSpace(res.Stdout) != "still-serving" {
		t.Fatalf("a command after the attacks: %+v", res)
	}
}
