package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

const (
	jupyterSamples = 300 // measured `1+1` cells per path, interleaved
	jupyterWarmups = 20  // unmeasured cells per path before them
	jupyterKey     = "bench-jupyter-key"
)

// BenchmarkJupyterGateway measures the round trip of a `1+1` cell as a
// notebook's page sees it — execute_request sent on the kernel's WebSocket,
// until its execute_reply and its idle status have arrived — through Debian's
// Jupyter Server (python3-jupyter-server) in two setups started the same way:
// one with --gateway-url pointing at forkbox (the kernel runs in a sandbox),
// one running its own local ipykernel (the baseline). Two diagnostic rows
// show where the time goes: forkbox's /jupyter WebSocket without a notebook
// server in front, and forkbox's own /v1 code API on the same kernel. The
// paths' cells are interleaved one by one, so a drift of the machine hits
// them alike.
func BenchmarkJupyterGateway(b *testing.B) {
	requireRoot(b)
	hideNsPerOp(b)
	if out, err := exec.Command(hostPython, "-c", "import jupyter_server, ipykernel").CombinedOutput(); err != nil {
		skip(b, fmt.Sprintf("Debian's Jupyter Server and ipykernel are needed (make setup installs them): %v %s", err, out))
	}
	d := startDaemonWith(b, daemonOpts{env: []string{"FORKBOX_API_KEY=" + jupyterKey}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	gw := startNotebookServer(b, d.url+"/jupyter")
	local := startNotebookServer(b, "")

	gwKernel := gw.startKernel(b, ctx)
	localKernel := local.startKernel(b, ctx)
	// The forkbox kernel's sandbox and id, for the diagnostic paths.
	list, err := d.client.ListSandboxes(ctx, client.ListOptions{Labels: map[string]string{"forkbox.jupyter.spec": "python3"}})
	if err != nil || len(list.Sandboxes) != 1 {
		b.Fatalf("the gateway kernel's sandbox: %+v %v", list, err)
	}
	sbID := list.Sandboxes[0].ID
	hdr := http.Header{"Authorization": {"token " + jupyterKey}}
	direct, err := dialCells(ctx, strings.Replace(d.url, "http", "ws", 1)+"/jupyter/api/kernels/"+gwKernel+"/channels", hdr)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.close()
	viaGateway, err := dialCells(ctx, gw.wsURL(gwKernel), gw.header())
	if err != nil {
		b.Fatal(err)
	}
	defer viaGateway.close()
	viaLocal, err := dialCells(ctx, local.wsURL(localKernel), local.header())
	if err != nil {
		b.Fatal(err)
	}
	defer viaLocal.close()
	codeAPI := func(ctx context.Context) (time.Duration, time.Duration, error) {
		t := time.Now()
		ex, err := d.client.RunCode(ctx, sbID, api.RunCodeRequest{Code: "1+1"})
		if err == nil && (ex.Error != nil || len(ex.Results) == 0 || ex.Results[0]["text"] != "2") {
			err = fmt.Errorf("1+1 through /v1/code: %+v", ex)
		}
		el := time.Since(t)
		return el, el, err
	}

	type path struct {
		label      string
		run        func(context.Context) (reply, idle time.Duration, err error)
		reply, all samples
	}
	paths := []*path{
		{label: "Jupyter Server → forkbox gateway → sandbox kernel", run: viaGateway.cell},
		{label: "baseline: Jupyter Server → its local ipykernel", run: viaLocal.cell},
		{label: "diagnostic: forkbox /jupyter WebSocket directly (no notebook server)", run: direct.cell},
		{label: "diagnostic: forkbox /v1/sandboxes/{id}/code on the same kernel", run: codeAPI},
	}
	for range jupyterWarmups {
		for _, p := range paths {
			if _, _, err := p.run(ctx); err != nil {
				b.Fatalf("%s: %v", p.label, err)
			}
		}
	}
	for range jupyterSamples {
		for _, p := range paths {
			reply, all, err := p.run(ctx)
			if err != nil {
				b.Fatalf("%s: %v", p.label, err)
			}
			p.reply = append(p.reply, reply)
			p.all = append(p.all, all)
		}
	}
	paths[0].all.report(b, "gateway-")
	paths[1].all.report(b, "local-")
	tableTitle(fmt.Sprintf("Round trip of a `1+1` cell on a kernel's WebSocket (%d cells per path, interleaved, after %d warm-ups)", jupyterSamples, jupyterWarmups))
	tableHeader("path", "to execute_reply p50 ms", "to idle p50 ms", "to idle p95 ms", "to idle mean ms", "÷ baseline (p50 to idle)")
	base := paths[1].all.p50()
	for _, p := range paths {
		tableRow(p.label, f(p.reply.p50()), f(p.all.p50()), f(p.all.p95()), f(p.all.mean()), f(p.all.p50()/base)+"×")
	}
}

// notebookServer is a Debian Jupyter Server run for a benchmark.
type notebookServer struct {
	url, token string
	cmd        *exec.Cmd
	logPath    string
}

// startNotebookServer starts a Jupyter Server on a free loopback port: with
// gateway set, its kernels are the gateway's; else it runs them itself.
func startNotebookServer(b *testing.B, gateway string) *notebookServer {
	b.Helper()
	addr, err := freeLoopbackAddr()
	if err != nil {
		b.Fatal(err)
	}
	_, port, _ := strings.Cut(addr, ":")
	dir := b.TempDir()
	ns := &notebookServer{url: "http://" + addr, token: "bench-nb-token", logPath: filepath.Join(dir, "server.log")}
	logf, err := os.Create(ns.logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	args := []string{"-m", "jupyter_server", "--allow-root", "--ServerApp.ip=127.0.0.1", "--ServerApp.port=" + port,
		"--ServerApp.port_retries=0", "--ServerApp.open_browser=False", "--ServerApp.token=" + ns.token, "--ServerApp.root_dir=" + dir}
	if gateway != "" {
		args = append(args, "--GatewayClient.url="+gateway, "--GatewayClient.auth_token="+jupyterKey, "--GatewayClient.request_timeout=120")
	}
	ns.cmd = exec.Command(hostPython, args...)
	// Debian's python first: the local kernelspec runs /usr/bin/python3,
	// and nothing of a user's Python setup leaks in.
	ns.cmd.Env = append(os.Environ(), "HOME="+dir, "JUPYTER_CONFIG_DIR="+dir+"/cfg", "JUPYTER_DATA_DIR="+dir+"/data",
		"JUPYTER_RUNTIME_DIR="+dir+"/run", "PYTHONPATH=", "PATH=/usr/bin:/bin:/usr/sbin:/sbin")
	ns.cmd.Stdout, ns.cmd.Stderr = logf, logf
	ns.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := ns.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ns.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { ns.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			ns.cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if status, _, _ := ns.call(context.Background(), "GET", "/api/status", nil); status == 200 {
			return ns
		}
		if time.Now().After(deadline) {
			b.Fatalf("jupyter server did not start: %s", ns.logTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (ns *notebookServer) header() http.Header {
	return http.Header{"Authorization": {"token " + ns.token}}
}

func (ns *notebookServer) wsURL(kernel string) string {
	return strings.Replace(ns.url, "http", "ws", 1) + "/api/kernels/" + kernel + "/channels"
}

func (ns *notebookServer) call(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		js, _ := json.Marshal(body)
		rd = strings.NewReader(string(js))
	}
	req, err := http.NewRequestWithContext(ctx, method, ns.url+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header = ns.header()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}

// startKernel opens a notebook session and returns its kernel's id.
func (ns *notebookServer) startKernel(b *testing.B, ctx context.Context) string {
	b.Helper()
	status, out, err := ns.call(ctx, "POST", "/api/sessions", map[string]any{"path": "bench.ipynb", "type": "notebook",
		"name": "bench.ipynb", "kernel": map[string]any{"name": "python3"}})
	if err != nil || status != 201 {
		b.Fatalf("start a session: %d %s %v\n%s", status, out, err, ns.logTail())
	}
	var sess struct {
		Kernel struct {
			ID string `json:"id"`
		} `json:"kernel"`
	}
	if err := json.Unmarshal(out, &sess); err != nil || sess.Kernel.ID == "" {
		b.Fatalf("session: %s %v", out, err)
	}
	return sess.Kernel.ID
}

func (ns *notebookServer) logTail() string {
	out, _ := os.ReadFile(ns.logPath)
	if len(out) > 4000 {
		out = out[len(out)-4000:]
	}
	return string(out)
}

// cellConn is a kernel's WebSocket, used one cell at a time.
type cellConn struct {
	c       *websocket.Conn
	session string
	n       int
}

// dialCells opens a kernel's channels and greets the kernel until it
// answers (a notebook server drops what arrives before its own connection
// to a gateway is up).
func dialCells(ctx context.Context, url string, hdr http.Header) (*cellConn, error) {
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		return nil, fmt.Errorf("websocket %s: %w", url, err)
	}
	c.SetReadLimit(64 << 20)
	cc := &cellConn{c: c, session: fmt.Sprintf("bench-%d", time.Now().UnixNano())}
	// Reads cannot time out without closing the connection, so the greeting
	// is answered on a kernel_info_request sent once a second until the
	// reader sees a reply.
	got := make(chan error, 1)
	var first string
	go func() {
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				got <- err
				return
			}
			var m cellMsg
			if json.Unmarshal(data, &m) == nil && m.Header.MsgType == "kernel_info_reply" {
				got <- nil
				return
			}
		}
	}()
	for tick := time.NewTicker(time.Second); ; {
		if first, err = cc.send(ctx, "kernel_info_request", map[string]any{}); err != nil {
			return nil, err
		}
		select {
		case err := <-got:
			tick.Stop()
			if err != nil {
				return nil, fmt.Errorf("greeting the kernel (%s): %w", first, err)
			}
			return cc, nil
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

type cellMsg struct {
	Channel string `json:"channel"`
	Header  struct {
		MsgType string `json:"msg_type"`
	} `json:"header"`
	Parent struct {
		MsgID string `json:"msg_id"`
	} `json:"parent_header"`
	Content json.RawMessage `json:"content"`
}

func (cc *cellConn) send(ctx context.Context, msgType string, content any) (string, error) {
	cc.n++
	id := fmt.Sprintf("%s-%d", cc.session, cc.n)
	m := map[string]any{"channel": "shell", "header": map[string]any{"msg_id": id, "msg_type": msgType, "session": cc.session,
		"username": "bench", "version": "5.3", "date": time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00")},
		"parent_header": map[string]any{}, "metadata": map[string]any{}, "content": content}
	js, _ := json.Marshal(m)
	return id, cc.c.Write(ctx, websocket.MessageText, js)
}

// cell runs `1+1` and times its execute_reply and its idle status.
func (cc *cellConn) cell(ctx context.Context) (reply, idle time.Duration, err error) {
	start := time.Now()
	id, err := cc.send(ctx, "execute_request", map[string]any{"code": "1+1", "silent": false, "store_history": true,
		"user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true})
	if err != nil {
		return 0, 0, err
	}
	result := ""
	for reply == 0 || idle == 0 {
		_, data, err := cc.c.Read(ctx)
		if err != nil {
			return 0, 0, err
		}
		var m cellMsg
		if err := json.Unmarshal(data, &m); err != nil || m.Parent.MsgID != id {
			continue
		}
		switch m.Header.MsgType {
		case "execute_reply":
			reply = time.Since(start)
			if !strings.Contains(string(m.Content), `"ok"`) {
				return 0, 0, fmt.Errorf("execute_reply: %s", m.Content)
			}
		case "execute_result":
			var c struct {
				Data map[string]string `json:"data"`
			}
			json.Unmarshal(m.Content, &c)
			result = c.Data["text/plain"]
		case "status":
			if strings.Contains(string(m.Content), `"idle"`) {
				idle = time.Since(start)
			}
		}
	}
	if result != "2" {
		return 0, 0, errors.New("1+1 answered " + result)
	}
	return reply, idle, nil
}

func (cc *cellConn) close() { cc.c.Close(websocket.StatusNormalClosure, "") }
