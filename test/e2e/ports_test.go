package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/forkbox/forkbox/api"
)

// wsEchoPy is a WebSocket echo server on port 8765 in the standard library
// alone (the image has no websockets package): one text frame in, the same
// text out, until the client closes.
const wsEchoPy = `import base64, hashlib, socket, struct, threading
def serve(c):
    req = b''
    while b'\r\n\r\n' not in req:
        d = c.recv(4096)
        if not d:
            return
        req += d
    key = [l.split(b':', 1)[1].strip() for l in req.split(b'\r\n') if l.lower().startswith(b'sec-websocket-key:')][0]
    acc = base64.b64encode(hashlib.sha1(key + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())
    c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + acc + b'\r\n\r\n')
    def read(n):
        b = b''
        while len(b) < n:
            d = c.recv(n - len(b))
            if not d:
                raise EOFError
            b += d
        return b
    try:
        while True:
            h = read(2)
            op, n = h[0] & 15, h[1] & 127
            if n == 126:
                n = struct.unpack('>H', read(2))[0]
            elif n == 127:
                n = struct.unpack('>Q', read(8))[0]
            mask = read(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(read(n)))
            if op == 8:
                c.sendall(b'\x88\x00')
                return
            out = b'echo: ' + data
            c.sendall(bytes([0x81, len(out)]) + out if len(out) < 126 else bytes([0x81, 126]) + struct.pack('>H', len(out)) + out)
    except EOFError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 8765))
s.listen(8)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// headersPy answers every request on port 8001 with the request line and
// headers it got, and sets a cookie for "/" on the daemon's host.
const headersPy = `import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (self.requestline + '\n' + str(self.headers)).encode()
        self.send_response(200)
        self.send_header('Set-Cookie', 'app=1; Path=/; Domain=example.com')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(('127.0.0.1', 8001), H).serve_forever()
`

// TestPorts: a server user code starts inside a sandbox is reached through
// the daemon, with the API key, the port's token or as a public port, and
// never without; traffic keeps a named sandbox awake and a request wakes a
// suspended one.
func TestPorts(t *testing.T) {
	needRoot(t)
	const key = "ports-test-key"
	d := startChatDaemon(t, "FORKBOX_API_KEY="+key)
	ctx := ctxT(t)
	sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "ports", TimeoutSecs: i64(4)})
	sh(t, d, sb.ID, "mkdir -p /workspace/site && echo served-from-inside > /workspace/site/hello.txt && cd /workspace/site && nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &")
	// The echo server, from a file, in the background.
	if _, err := d.c.WriteFile(ctx, sb.ID, "/workspace/ws.py", strings.NewReader(wsEchoPy), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.WriteFile(ctx, sb.ID, "/workspace/headers.py", strings.NewReader(headersPy), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, d, sb.ID, "nohup python3 /workspace/ws.py >/dev/null 2>&1 & nohup python3 /workspace/headers.py >/dev/null 2>&1 &")
	for i := 0; ; i++ {
		res := sh(t, d, sb.ID, "python3 -c \"import socket; [socket.create_connection(('127.0.0.1', p), 1).close() for p in (8000, 8765, 8001)]\" && echo up")
		if strings.TrimSpace(res.Stdout) == "up" {
			break
		}
		if i > 50 {
			t.Fatalf("servers inside the sandbox did not come up: %+v", res)
		}
		time.Sleep(100 * time.Millisecond)
	}

	p, err := d.c.Port(ctx, sb.ID, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(p.URL, "/v1/sandboxes/"+sb.ID+"/ports/8000/") || len(p.Token) < 20 || p.Public {
		t.Fatalf("port: %+v", p)
	}
	get := func(url string, hdr map[string]string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	// The directory listing and a file, with the API key.
	code, body, hdr := get(p.URL, map[string]string{"Authorization": "Bearer " + key})
	if code != 200 || !strings.Contains(body, "hello.txt") {
		t.Fatalf("listing with the key: %d %q", code, body)
	}
	if !strings.Contains(hdr.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("a sandbox's page is served without the sandbox CSP: %v", hdr)
	}
	// Without key or token: 401; a wrong token: 401; the token, as a
	// header or a query parameter: 200.
	if code, _, _ := get(p.URL+"hello.txt", nil); code != 401 {
		t.Errorf("no credentials: %d; want 401", code)
	}
	if code, _, _ := get(p.URL+"hello.txt", map[string]string{"X-Forkbox-Token": "fbxp_wrong"}); code != 401 {
		t.Errorf("a wrong token: %d; want 401", code)
	}
	if code, body, _ := get(p.URL+"hello.txt", map[string]string{"X-Forkbox-Token": p.Token}); code != 200 || body != "served-from-inside\n" {
		t.Errorf("token header: %d %q", code, body)
	}
	code, body, qh := get(p.URL+"hello.txt?forkbox_token="+p.Token, nil)
	if code != 200 || body != "served-from-inside\n" {
		t.Errorf("token query: %d %q", code, body)
	}
	// A token given on the URL is kept in an HttpOnly cookie of the port's
	// path, so the pages the app links to pass too.
	var tokCookie *http.Cookie
	for _, c := range (&http.Response{Header: qh}).Cookies() {
		if c.Name == "forkbox_token" {
			tokCookie = c
		}
	}
	if tokCookie == nil || tokCookie.Value != p.Token || tokCookie.Path != "/v1/sandboxes/"+sb.ID+"/ports/8000/" || !tokCookie.HttpOnly {
		t.Fatalf("the token's cookie: %+v", tokCookie)
	}
	if code, body, _ := get(p.URL+"hello.txt", map[string]string{"Cookie": "forkbox_token=" + p.Token}); code != 200 || body != "served-from-inside\n" {
		t.Errorf("the token's cookie alone: %d %q", code, body)
	}
	if code, _, _ := get(p.URL+"hello.txt", map[string]string{"Cookie": "forkbox_token=fbxp_wrong"}); code != 401 {
		t.Errorf("a wrong token's cookie: %d; want 401", code)
	}
	// The listing of the sandbox's ports: the three servers, named, and
	// none of its Jupyter kernel's ports (a kernel runs from the cell).
	if _, err := d.c.RunCode(ctx, sb.ID, api.RunCodeRequest{Code: "1 + 1"}); err != nil {
		t.Fatal(err)
	}
	pl, err := d.c.ListPorts(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var listening []string
	for _, lp := range pl.Ports {
		if lp.Listening {
			listening = append(listening, fmt.Sprintf("%d:%s", lp.Port, lp.Process))
		}
		if lp.Token != "" {
			t.Errorf("a port listing shows a token: %+v", lp)
		}
	}
	if strings.Join(listening, ",") != "8000:python3,8001:python3,8765:python3" {
		t.Errorf("listening ports: %v; want the three servers only", listening)
	}
	// Another port's token does not open this one; another sandbox's
	// neither, and an unknown sandbox answers as a wrong key does.
	p2, err := d.c.Port(ctx, sb.ID, 8765)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := get(p.URL+"hello.txt", map[string]string{"X-Forkbox-Token": p2.Token}); code != 401 {
		t.Errorf("port 8765's token on port 8000: %d; want 401", code)
	}
	if code, _, _ := get(strings.Replace(p.URL, sb.ID, "sbx_nosuchsandbox00000", 1), map[string]string{"X-Forkbox-Token": p.Token}); code != 401 {
		t.Errorf("an unknown sandbox with a token: %d; want 401", code)
	}
	// The sandbox never sees the API key or the token, and its cookies stay
	// under its port's path, on the daemon's host.
	ph, err := d.c.Port(ctx, sb.ID, 8001)
	if err != nil {
		t.Fatal(err)
	}
	for _, creds := range []map[string]string{{"Authorization": "Bearer " + key}, {"X-Forkbox-Token": ph.Token}} {
		code, body, hdr := get(ph.URL+"some/path?x=1&forkbox_token="+ph.Token, creds)
		if code != 200 || !strings.HasPrefix(body, "GET /some/path?x=1 HTTP/1.1") || strings.Contains(body, key) || strings.Contains(body, ph.Token) {
			t.Errorf("what the sandbox got: %d\n%s", code, body)
		}
		var app string
		for _, c := range hdr.Values("Set-Cookie") {
			if strings.HasPrefix(c, "app=") {
				app = c
			}
		}
		if !strings.Contains(app, "Path=/v1/sandboxes/"+sb.ID+"/ports/8001/") || strings.Contains(app, "Domain") {
			t.Errorf("the sandbox's cookie: %q", app)
		}
	}
	// A token does not open the API: a path that climbs out of the port
	// is not proxied, and the API beyond still wants the key.
	for _, path := range []string{"../../../../v1/sandboxes", "..%2f..%2f..%2f..%2fv1%2fsandboxes", "%2e%2e/%2e%2e/%2e%2e/%2e%2e/v1/sandboxes"} {
		req, _ := http.NewRequest("GET", ph.URL+path, nil)
		req.Header.Set("X-Forkbox-Token", ph.Token)
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), `"sandboxes"`) {
			t.Errorf("%s with a port token listed the sandboxes: %d %s", path, resp.StatusCode, b)
		}
	}
	// Revoked: the old token stops at once.
	rp, err := d.c.RevokePort(ctx, sb.ID, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := get(p.URL+"hello.txt", map[string]string{"X-Forkbox-Token": p.Token}); code != 401 || rp.Token == p.Token {
		t.Errorf("revoked token: %d (new token differs: %v)", code, rp.Token != p.Token)
	}
	// Public: no credentials needed; private again: 401.
	if _, err := d.c.SetPortPublic(ctx, sb.ID, 8000, true); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(p.URL+"hello.txt", nil); code != 200 || body != "served-from-inside\n" {
		t.Errorf("public port: %d %q", code, body)
	}
	if _, err := d.c.SetPortPublic(ctx, sb.ID, 8000, false); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := get(p.URL+"hello.txt", nil); code != 401 {
		t.Errorf("private again: %d; want 401", code)
	}
	// Nothing listens: a clear 503.
	p3, _ := d.c.Port(ctx, sb.ID, 9)
	if code, body, _ := get(p3.URL, map[string]string{"X-Forkbox-Token": p3.Token}); code != 503 || !strings.Contains(body, "nothing listens") {
		t.Errorf("a closed port: %d %q", code, body)
	}

	// WebSocket through the proxy, with the token.
	wsURL := "ws" + strings.TrimPrefix(p2.URL, "http") + "chat"
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"X-Forkbox-Token": {p2.Token}}})
	if err != nil {
		t.Fatalf("websocket through the proxy: %v", err)
	}
	for _, msg := range []string{"hello", strings.Repeat("x", 300)} {
		if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := conn.Read(ctx)
		if err != nil || string(got) != "echo: "+msg {
			t.Fatalf("websocket echo: %q %v", got, err)
		}
	}
	conn.Close(websocket.StatusNormalClosure, "")

	// Traffic keeps the named sandbox awake past its 4 s idle timeout.
	for i := 0; i < 8; i++ {
		if code, _, _ := get(p.URL+"hello.txt", map[string]string{"Authorization": "Bearer " + key}); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
		time.Sleep(time.Second)
	}
	if got, err := d.c.GetSandbox(ctx, sb.ID); err != nil || got.State != api.StateRunning {
		t.Fatalf("after 8 s of traffic with a 4 s idle timeout: %+v %v", got, err)
	}
	// Left alone it is suspended; a request to its port resumes it and
	// is answered by the same server, restored.
	waitState(t, d, sb.ID, api.StateSuspended, 60*time.Second)
	if code, body, _ := get(p.URL+"hello.txt", map[string]string{"Authorization": "Bearer " + key}); code != 200 || body != "served-from-inside\n" {
		t.Fatalf("request to a suspended sandbox's port: %d %q", code, body)
	}
	if got, _ := d.c.GetSandbox(ctx, sb.ID); got.State != api.StateRunning {
		t.Fatalf("after the request: %s", got.State)
	}
}

// TestPortsDomain: with --ports-domain, <port>-<sandbox>.<domain> serves the
// port at "/" on a host of its own; a token given once as ?forkbox_token= is
// kept in that host's cookie and never reaches the sandbox.
func TestPortsDomain(t *testing.T) {
	needRoot(t)
	const key = "ports-domain-key"
	d := startChatDaemon(t, "FORKBOX_API_KEY="+key, "FORKBOX_PORTS_DOMAIN=sbx.fbx.test")
	ctx := ctxT(t)
	sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "hosted"})
	if _, err := d.c.WriteFile(ctx, sb.ID, "/workspace/headers.py", strings.NewReader(headersPy), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, d, sb.ID, "nohup python3 /workspace/headers.py >/dev/null 2>&1 &")
	p, err := d.c.Port(ctx, sb.ID, 8001)
	if err != nil {
		t.Fatal(err)
	}
	_, daemonPort, _ := strings.Cut(d.addr, ":")
	if want := "http://8001-" + sb.ID + ".sbx.fbx.test:" + daemonPort + "/"; p.HostURL != want {
		t.Fatalf("host_url %q", p.HostURL)
	}
	jar := map[string]string{}
	do := func(host, path string) (int, string, http.Header) {
		t.Helper()
		for i := 0; ; i++ {
			req, _ := http.NewRequest("GET", "http://"+d.addr+path, nil)
			req.Host = host
			for k, v := range jar {
				req.AddCookie(&http.Cookie{Name: k, Value: v})
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, c := range resp.Cookies() {
				jar[c.Name] = c.Value
			}
			if resp.StatusCode == 503 && i < 50 { // the server is still starting
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return resp.StatusCode, string(b), resp.Header
		}
	}
	host := "8001-" + sb.ID + ".sbx.fbx.test:" + daemonPort
	if code, _, _ := do(host, "/"); code != 401 {
		t.Fatalf("no credentials: %d; want 401", code)
	}
	code, body, hdr := do(host, "/app/?forkbox_token="+p.Token)
	if code != 200 || !strings.HasPrefix(body, "GET /app/ HTTP/1.1") || strings.Contains(body, p.Token) {
		t.Fatalf("with the token in the query: %d\n%s", code, body)
	}
	if hdr.Get("Content-Security-Policy") != "" {
		t.Errorf("a host of its own got the sandboxing CSP: %v", hdr)
	}
	// The cookie carries the token on: the next page passes, and the
	// sandbox does not see it.
	code, body, _ = do(host, "/next")
	if code != 200 || strings.Contains(body, p.Token) || strings.Contains(body, "forkbox_token") {
		t.Fatalf("with the cookie: %d\n%s", code, body)
	}
	// By name too; another domain, or a bad label, is the API (which wants
	// the key).
	if code, _, _ := do("8001-hosted.sbx.fbx.test", "/?forkbox_token="+p.Token); code != 200 {
		t.Errorf("by name: %d", code)
	}
	for _, h := range []string{"8001-" + sb.ID + ".other.test", "x-" + sb.ID + ".sbx.fbx.test", "8001-.sbx.fbx.test"} {
		jar = map[string]string{}
		if code, _, _ := do(h, "/v1/sandboxes"); code != 401 {
			t.Errorf("host %s without the key: %d; want 401 (the API)", h, code)
		}
	}
}
