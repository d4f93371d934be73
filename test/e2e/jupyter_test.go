package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

// The Jupyter gateway is tested with Debian's own Jupyter: a Jupyter Server
// (python3-jupyter-server 1.23) started with --GatewayClient.url pointing at
// a daemon, driven through its REST and WebSocket API as a notebook's page
// drives it, and nbclient executing a notebook through jupyter_server's
// gateway kernel manager.

const debianPython = "/usr/bin/python3"

func needJupyter(t *testing.T) {
	t.Helper()
	needRoot(t)
	if out, err := exec.Command(debianPython, "-c", "import jupyter_server, nbclient, websocket").CombinedOutput(); err != nil {
		t.Fatalf("Debian's Jupyter is missing (make setup installs python3-jupyter-server, python3-nbclient, python3-websocket): %v\n%s", err, out)
	}
}

// jupyterServer is a Jupyter Server whose kernels run in forkbox.
type jupyterServer struct {
	url, token string
	cmd        *exec.Cmd
	log        string
}

func startJupyterServer(t *testing.T, gatewayURL, key string) *jupyterServer {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	js := &jupyterServer{url: "http://" + port, token: "nb-token-e2e", log: filepath.Join(dir, "server.log")}
	_, p, _ := strings.Cut(port, ":")
	logf, err := os.Create(js.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{"-m", "jupyter_server", "--allow-root", "--ServerApp.ip=127.0.0.1", "--ServerApp.port=" + p,
		"--ServerApp.port_retries=0", "--ServerApp.open_browser=False", "--ServerApp.token=" + js.token,
		"--ServerApp.root_dir=" + dir, "--GatewayClient.url=" + gatewayURL, "--GatewayClient.request_timeout=120"}
	if key != "" {
		args = append(args, "--GatewayClient.auth_token="+key)
	}
	js.cmd = exec.Command(debianPython, args...)
	js.cmd.Env = append(os.Environ(), "HOME="+dir, "JUPYTER_CONFIG_DIR="+dir+"/cfg", "JUPYTER_DATA_DIR="+dir+"/data",
		"JUPYTER_RUNTIME_DIR="+dir+"/run", "PYTHONPATH=")
	js.cmd.Stdout, js.cmd.Stderr = logf, logf
	if err := js.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		js.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { js.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			js.cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if status, _ := js.call(t, "GET", "/api/status", nil, nil); status == 200 {
			return js
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(js.log)
			t.Fatalf("jupyter server did not start:\n%s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (js *jupyterServer) call(t *testing.T, method, path string, body, out any) (int, string) {
	t.Helper()
	var rd *strings.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	} else {
		rd = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, js.url+path, rd)
	req.Header.Set("Authorization", "token "+js.token)
	res, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := res.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal([]byte(sb.String()), out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, sb.String())
		}
	}
	return res.StatusCode, sb.String()
}

func (js *jupyterServer) logTail() string {
	b, _ := os.ReadFile(js.log)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// nbConn is a notebook's WebSocket to its kernel.
type nbConn struct {
	t       *testing.T
	c       *websocket.Conn
	session string
	n       int
	// diag says what the servers logged, for a failure.
	diag func() string
	in   chan wsFrame // what a reader goroutine read, until the connection ends
}

type wsFrame struct {
	typ websocket.MessageType
	b   []byte
	err error
}

// dialKernel opens a kernel's channels and waits until the kernel answers a
// kernel_info_request, as JupyterLab and jupyter_client do: a notebook
// server in front of a gateway drops what a client sends before its own
// connection to the gateway is up (jupyter_server 1.23 attaches such a
// message to a future that never completes), so a client greets the kernel
// until it answers before it runs anything.
func dialKernel(t *testing.T, ctx context.Context, wsURL string, hdr http.Header, diag func() string) *nbConn {
	t.Helper()
	c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatalf("websocket %s: %v", wsURL, err)
	}
	c.SetReadLimit(64 << 20)
	done := make(chan struct{})
	t.Cleanup(func() { close(done); c.CloseNow() })
	nc := &nbConn{t: t, c: c, session: fmt.Sprintf("e2e-%d", time.Now().UnixNano()), diag: diag, in: make(chan wsFrame, 64)}
	go func() {
		for {
			typ, b, err := c.Read(context.Background())
			select {
			case nc.in <- wsFrame{typ, b, err}:
			case <-done:
				return
			}
			if err != nil {
				close(nc.in)
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, cellTimeout)
	defer cancel()
	for {
		id := nc.send(ctx, "shell", "kernel_info_request", nil, map[string]any{})
		retry := time.After(2 * time.Second)
		for waiting := true; waiting; {
			m, ok := nc.next(ctx, retry)
			switch {
			case !ok:
				waiting = false
			case m.MsgType == "kernel_info_reply" && m.Parent["msg_id"] == id:
				return nc
			}
		}
	}
}

// next is the next message from the kernel; false when give fires first.
func (nc *nbConn) next(ctx context.Context, give <-chan time.Time) (nbMsg, bool) {
	var f wsFrame
	var ok bool
	select {
	case f, ok = <-nc.in:
	case <-ctx.Done():
		f.err = ctx.Err()
		ok = true
	case <-give:
		return nbMsg{}, false
	}
	if !ok {
		f.err = errors.New("the connection has ended")
	}
	if f.err != nil {
		extra := ""
		if nc.diag != nil {
			extra = nc.diag()
		}
		nc.t.Fatalf("read from the kernel: %v\n%s", f.err, extra)
	}
	if f.typ == websocket.MessageBinary {
		nc.t.Fatalf("a binary message where none was expected (%d bytes)", len(f.b))
	}
	var m nbMsg
	if err := json.Unmarshal(f.b, &m); err != nil {
		nc.t.Fatalf("a message that is not JSON: %v: %.300s", err, f.b)
	}
	return m, true
}

type nbMsg struct {
	Channel string          `json:"channel"`
	MsgType string          `json:"msg_type"`
	Header  map[string]any  `json:"header"`
	Parent  map[string]any  `json:"parent_header"`
	Content json.RawMessage `json:"content"`
}

func (nc *nbConn) send(ctx context.Context, channel, msgType string, parent map[string]any, content any) string {
	nc.n++
	id := fmt.Sprintf("%s-%d", nc.session, nc.n)
	if parent == nil {
		parent = map[string]any{}
	}
	m := map[string]any{"channel": channel, "header": map[string]any{"msg_id": id, "msg_type": msgType, "session": nc.session,
		"username": "e2e", "version": "5.3", "date": time.Now().UTC().Format(time.RFC3339Nano)},
		"parent_header": parent, "metadata": map[string]any{}, "content": content}
	b, _ := json.Marshal(m)
	if err := nc.c.Write(ctx, websocket.MessageText, b); err != nil {
		nc.t.Fatalf("send %s: %v", msgType, err)
	}
	return id
}

func (nc *nbConn) read(ctx context.Context) nbMsg {
	m, _ := nc.next(ctx, nil)
	return m
}

// cellTimeout bounds one cell of the tests (a loaded CI machine included).
const cellTimeout = 2 * time.Minute

// cellResult is what one execute_request produced.
type cellResult struct {
	status, ename string
	count         int
	stdout        string
	text          string // text/plain of the execute_result
	pngs          int
	inputPrompt   string
}

// execute runs code and collects its outputs until the reply and the idle
// status arrived; onInput answers input() when allowStdin.
func (nc *nbConn) execute(ctx context.Context, code string, onInput func(prompt string) string) cellResult {
	nc.t.Logf("cell: %.40q", code)
	ctx, cancel := context.WithTimeout(ctx, cellTimeout)
	defer cancel()
	id := nc.send(ctx, "shell", "execute_request", nil, map[string]any{"code": code, "silent": false,
		"store_history": true, "user_expressions": map[string]any{}, "allow_stdin": onInput != nil, "stop_on_error": true})
	var r cellResult
	replied, idle := false, false
	for !replied || !idle {
		m := nc.read(ctx)
		if pid, _ := m.Parent["msg_id"].(string); pid != id {
			continue
		}
		var c map[string]any
		json.Unmarshal(m.Content, &c)
		switch {
		case m.Channel == "shell" && m.MsgType == "execute_reply":
			replied = true
			r.status, _ = c["status"].(string)
			r.ename, _ = c["ename"].(string)
			if r.ename == "ForkboxError" {
				extra := ""
				if nc.diag != nil {
					extra = nc.diag()
				}
				nc.t.Fatalf("the gateway could not pass %.40q to the kernel: %s\n%s", code, m.Content, extra)
			}
			if n, ok := c["execution_count"].(float64); ok {
				r.count = int(n)
			}
		case m.Channel == "iopub" && m.MsgType == "status":
			idle = c["execution_state"] == "idle"
		case m.Channel == "iopub" && m.MsgType == "stream":
			s, _ := c["text"].(string)
			r.stdout += s
		case m.Channel == "iopub" && (m.MsgType == "execute_result" || m.MsgType == "display_data"):
			data, _ := c["data"].(map[string]any)
			if s, ok := data["text/plain"].(string); ok && m.MsgType == "execute_result" {
				r.text = s
			}
			if _, ok := data["image/png"].(string); ok {
				r.pngs++
			}
		case m.Channel == "iopub" && m.MsgType == "error":
			r.ename, _ = c["ename"].(string)
		case m.Channel == "stdin" && m.MsgType == "input_request":
			r.inputPrompt, _ = c["prompt"].(string)
			nc.send(ctx, "stdin", "input_reply", m.Header, map[string]any{"value": onInput(r.inputPrompt)})
		}
	}
	return r
}

// TestJupyterGateway: a Jupyter Server whose kernels run in forkbox — the
// notebook's cells keep state, draw, read input(), are interrupted; the
// kernel's sandbox is one of the tenant's, can be checkpointed and forked
// while the notebook is open, and after a suspend the next cell resumes it
// with its variables. Another tenant and a caller without a key reach
// nothing.
func TestJupyterGateway(t *testing.T) {
	needJupyter(t)
	const admin = "jupyter-admin-s3cret"
	d := startChatDaemon(t, "FORKBOX_API_KEY="+admin)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	mkKey := func(tenant string) string {
		var k api.Key
		adminCall(t, d, admin, "POST", "/v1/keys", api.CreateKeyRequest{Tenant: tenant}, http.StatusCreated, &k)
		return k.Secret
	}
	acmeKey, globexKey := mkKey("acme"), mkKey("globex")
	t.Cleanup(func() { deleteTenantSandboxes(t, d, admin, "acme", "globex") })
	acme := client.New("http://"+d.addr, client.WithAPIKey(acmeKey))
	gateway := "http://" + d.addr + "/jupyter"
	js := startJupyterServer(t, gateway, acmeKey)

	// The notebook server lists forkbox's kernelspecs as its own.
	var specs struct {
		Default     string                     `json:"default"`
		Kernelspecs map[string]json.RawMessage `json:"kernelspecs"`
	}
	if status, body := js.call(t, "GET", "/api/kernelspecs", nil, &specs); status != 200 || specs.Default != "python3" || specs.Kernelspecs["python3"] == nil {
		t.Fatalf("kernelspecs through the notebook server: %d %s\n%s", status, body, js.logTail())
	}

	// A notebook session: its kernel is a new sandbox of acme's.
	var sess struct {
		ID     string `json:"id"`
		Kernel struct {
			ID string `json:"id"`
		} `json:"kernel"`
	}
	if status, body := js.call(t, "POST", "/api/sessions", map[string]any{"path": "analysis.ipynb", "type": "notebook",
		"name": "analysis.ipynb", "kernel": map[string]any{"name": "python3"}}, &sess); status != 201 {
		t.Fatalf("start a session: %d %s\n%s", status, body, js.logTail())
	}
	kid := sess.Kernel.ID
	wsURL := "ws" + strings.TrimPrefix(js.url, "http") + "/api/kernels/" + kid + "/channels?session_id=" + sess.ID
	diag := func() string { return "jupyter server's log:\n" + js.logTail() + "\ndaemon's log:\n" + d.logTail() }
	nb := dialKernel(t, ctx, wsURL, http.Header{"Authorization": {"token " + js.token}}, diag)

	if r := nb.execute(ctx, "x = 21", nil); r.status != "ok" || r.count != 1 {
		t.Fatalf("x = 21: %+v\n%s\n%s", r, js.logTail(), d.logTail())
	}
	if r := nb.execute(ctx, "x * 2", nil); r.status != "ok" || r.text != "42" || r.count != 2 {
		t.Fatalf("x * 2: %+v", r)
	}
	if r := nb.execute(ctx, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()", nil); r.status != "ok" || r.pngs != 1 {
		t.Fatalf("a plot: %+v", r)
	}
	r := nb.execute(ctx, "name = input('who? ')\nprint('hello', name)", func(prompt string) string { return "forkbox" })
	if r.status != "ok" || r.inputPrompt != "who? " || !strings.Contains(r.stdout, "hello forkbox") {
		t.Fatalf("input(): %+v", r)
	}

	// Interrupt a long cell through the notebook server.
	sleepID := nb.send(ctx, "shell", "execute_request", nil, map[string]any{"code": "import time\ntime.sleep(60)", "silent": false,
		"store_history": true, "user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true})
	for busy := false; !busy; {
		m := nb.read(ctx)
		busy = m.MsgType == "status" && m.Parent["msg_id"] == sleepID && strings.Contains(string(m.Content), "busy")
	}
	time.Sleep(500 * time.Millisecond) // into the sleep
	began := time.Now()
	if status, body := js.call(t, "POST", "/api/kernels/"+kid+"/interrupt", nil, nil); status != 204 {
		t.Fatalf("interrupt: %d %s", status, body)
	}
	for {
		m := nb.read(ctx)
		if m.MsgType == "execute_reply" && m.Parent["msg_id"] == sleepID {
			if !strings.Contains(string(m.Content), "KeyboardInterrupt") {
				t.Fatalf("the interrupted cell's reply: %s", m.Content)
			}
			break
		}
	}
	if took := time.Since(began); took > 30*time.Second {
		t.Fatalf("the interrupt took %v", took)
	}

	// The kernel's sandbox is acme's: in `forkbox ls`, labelled as a kernel's.
	list, err := acme.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var sbID string
	for _, sb := range list.Sandboxes {
		if sb.Labels["forkbox.jupyter"] != "" {
			sbID = sb.ID
		}
	}
	if sbID == "" {
		t.Fatalf("no sandbox of the kernel among acme's: %+v", list)
	}
	cli := exec.Command(binary, "ls")
	cli.Env = append(os.Environ(), "FORKBOX_URL=http://"+d.addr, "FORKBOX_API_KEY="+acmeKey)
	if out, err := cli.CombinedOutput(); err != nil || !strings.Contains(string(out), sbID) {
		t.Fatalf("forkbox ls: %v\n%s", err, out)
	}
	// forkbox's own API sees the notebook's variables (the same context).
	ex, err := acme.RunCode(ctx, sbID, api.RunCodeRequest{Code: "x, name"})
	if err != nil || ex.Error != nil || len(ex.Results) == 0 || ex.Results[0]["text"] != "(21, 'forkbox')" {
		t.Fatalf("/code in the kernel's sandbox: %+v %v", ex, err)
	}

	// A memory checkpoint and a fork while the notebook is open.
	snap, err := acme.Checkpoint(ctx, sbID, api.CheckpointRequest{Type: api.SnapshotMemory})
	if err != nil {
		t.Fatalf("checkpoint with a notebook open: %v\n%s", err, d.logTail())
	}
	fork, err := acme.Fork(ctx, sbID, api.ForkRequest{Count: 1})
	if err != nil || len(fork.Sandboxes) != 1 {
		t.Fatalf("fork with a notebook open: %+v %v", fork, err)
	}
	ex, err = acme.RunCode(ctx, fork.Sandboxes[0].ID, api.RunCodeRequest{Code: "x * 3"})
	if err != nil || ex.Error != nil || len(ex.Results) == 0 || ex.Results[0]["text"] != "63" {
		t.Fatalf("the fork of a notebook's kernel: %+v %v", ex, err)
	}
	restored, err := acme.CreateSandbox(ctx, api.CreateSandboxRequest{SnapshotID: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	ex, err = acme.RunCode(ctx, restored.ID, api.RunCodeRequest{Code: "x + 1"})
	if err != nil || ex.Error != nil || len(ex.Results) == 0 || ex.Results[0]["text"] != "22" {
		t.Fatalf("a restore of the notebook's checkpoint: %+v %v", ex, err)
	}
	if r := nb.execute(ctx, "x", nil); r.text != "21" {
		t.Fatalf("the notebook after the checkpoint and fork: %+v", r)
	}

	// Suspended through forkbox: the notebook's next cell resumes it.
	if _, err := acme.Suspend(ctx, sbID); err != nil {
		t.Fatalf("suspend with a notebook open: %v\n%s", err, d.logTail())
	}
	if sb, err := acme.GetSandbox(ctx, sbID); err != nil || sb.State != api.StateSuspended {
		t.Fatalf("after suspend: %+v %v", sb, err)
	}
	if r := nb.execute(ctx, "x", nil); r.status != "ok" || r.text != "21" {
		t.Fatalf("x after the suspend: %+v\n%s", r, d.logTail())
	}
	// Suspended again, the notebook reconnects (as after a laptop's sleep).
	nb.c.Close(websocket.StatusNormalClosure, "")
	if _, err := acme.Suspend(ctx, sbID); err != nil {
		t.Fatal(err)
	}
	nb = dialKernel(t, ctx, wsURL, http.Header{"Authorization": {"token " + js.token}}, diag)
	if r := nb.execute(ctx, "x + len(name)", nil); r.status != "ok" || r.text != "28" {
		t.Fatalf("after a reconnect to a suspended kernel: %+v\n%s", r, d.logTail())
	}

	// Tenants and keys at forkbox's /jupyter.
	kernelPath := "/jupyter/api/kernels/" + kid
	for _, c := range []struct {
		method, path string
	}{{"GET", "/jupyter/api/kernels"}, {"GET", kernelPath}, {"DELETE", kernelPath}, {"POST", kernelPath + "/interrupt"},
		{"POST", kernelPath + "/restart"}, {"GET", "/jupyter/api/kernelspecs"}, {"GET", "/jupyter/api/kernelspecs/python3"},
		{"GET", "/jupyter/api/sessions"}, {"POST", "/jupyter/api/sessions"}, {"POST", "/jupyter/api/kernels"}, {"GET", kernelPath + "/channels"}} {
		if status, _, body := rawRequest(t, d, c.method, c.path, nil, nil); status != http.StatusUnauthorized {
			t.Errorf("%s %s without a key: %d %s", c.method, c.path, status, body)
		}
		if status, _, body := rawRequest(t, d, c.method, c.path, nil, map[string]string{"Authorization": "token wrong"}); status != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d %s", c.method, c.path, status, body)
		}
	}
	globexHdr := map[string]string{"Authorization": "token " + globexKey}
	if status, _, body := rawRequest(t, d, "GET", "/jupyter/api/kernels", nil, globexHdr); status != 200 || strings.Contains(body, kid) {
		t.Errorf("globex's kernel list: %d %s", status, body)
	}
	for _, c := range []struct{ method, path string }{{"GET", kernelPath}, {"DELETE", kernelPath}, {"POST", kernelPath + "/interrupt"},
		{"POST", kernelPath + "/restart"}, {"GET", kernelPath + "/channels"}} {
		if status, _, body := rawRequest(t, d, c.method, c.path, nil, globexHdr); status != http.StatusNotFound {
			t.Errorf("globex %s %s: %d %s", c.method, c.path, status, body)
		}
	}
	body := fmt.Sprintf(`{"name":"python3","env":{"KERNEL_FORKBOX_SANDBOX":%q}}`, sbID)
	if status, _, resp := rawRequest(t, d, "POST", "/jupyter/api/kernels", []byte(body), globexHdr); status != http.StatusNotFound {
		t.Errorf("globex starting a kernel in acme's sandbox: %d %s", status, resp)
	}
	if _, _, err := websocket.Dial(ctx, "ws://"+d.addr+kernelPath+"/channels", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"token " + globexKey}}}); err == nil {
		t.Error("globex opened acme's kernel channels")
	}
	// And acme's own token works directly (a client without a notebook
	// server).
	direct := dialKernel(t, ctx, "ws://"+d.addr+kernelPath+"/channels", http.Header{"Authorization": {"token " + acmeKey}}, diag)
	if r := direct.execute(ctx, "x - 1", nil); r.text != "20" {
		t.Fatalf("acme's kernel through forkbox directly: %+v", r)
	}
	if r := nb.execute(ctx, "x", nil); r.text != "21" {
		t.Fatalf("the notebook after all that: %+v", r)
	}

	// Closing the notebook's session shuts the kernel down: its sandbox goes.
	if status, body := js.call(t, "DELETE", "/api/sessions/"+sess.ID, nil, nil); status != 204 {
		t.Fatalf("delete the session: %d %s", status, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb, err := acme.GetSandbox(ctx, sbID)
		if err != nil || sb.State == api.StateTerminated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kernel's sandbox after its session was deleted: %+v", sb)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestJupyterNbclient: Debian's nbclient executes a notebook whose kernel
// is forkbox's (jupyter_server's GatewayKernelManager), and the outputs are
// saved in the notebook.
func TestJupyterNbclient(t *testing.T) {
	needJupyter(t)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.ipynb"), filepath.Join(dir, "out.ipynb")
	cells := []string{"x = 21", "x * 2", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()", "import os\nprint('sandbox', os.path.exists('/.forkbox'))"}
	var nbCells []map[string]any
	for _, c := range cells {
		nbCells = append(nbCells, map[string]any{"cell_type": "code", "metadata": map[string]any{}, "source": c, "outputs": []any{}, "execution_count": nil})
	}
	nbJSON, _ := json.Marshal(map[string]any{"nbformat": 4, "nbformat_minor": 5, "cells": nbCells,
		"metadata": map[string]any{"kernelspec": map[string]any{"name": "python3", "display_name": "Python 3", "language": "python"}}})
	if err := os.WriteFile(in, nbJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import sys, nbformat
from nbclient import NotebookClient
from jupyter_server.gateway.gateway_client import GatewayClient
from jupyter_server.gateway.managers import GatewayKernelManager
gw = GatewayClient.instance()
gw.url = sys.argv[1]
gw.request_timeout = 120.0
gw.init_static_args()
nb = nbformat.read(sys.argv[2], as_version=4)
NotebookClient(nb, kernel_manager_class=GatewayKernelManager, timeout=120, kernel_name="python3").execute()
nbformat.write(nb, sys.argv[3])
`
	cmd := exec.Command(debianPython, "-c", script, "http://"+shared.addr+"/jupyter", in, out)
	cmd.Env = append(os.Environ(), "HOME="+dir, "JUPYTER_RUNTIME_DIR="+dir+"/run", "PYTHONPATH=")
	began := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nbclient: %v\n%s\n%s", err, b, shared.logTail())
	}
	t.Logf("nbclient ran the notebook in %v", time.Since(began).Round(time.Millisecond))
	var done struct {
		Cells []struct {
			ExecutionCount *int `json:"execution_count"`
			Outputs        []struct {
				OutputType string         `json:"output_type"`
				Data       map[string]any `json:"data"`
				Text       any            `json:"text"`
			} `json:"outputs"`
		} `json:"cells"`
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &done); err != nil || len(done.Cells) != 4 {
		t.Fatalf("the executed notebook: %v\n%.2000s", err, b)
	}
	if c := done.Cells[1]; c.ExecutionCount == nil || *c.ExecutionCount != 2 || len(c.Outputs) != 1 || fmt.Sprint(c.Outputs[0].Data["text/plain"]) != "[42]" {
		t.Errorf("cell 2: %+v", c)
	}
	if c := done.Cells[2]; len(c.Outputs) == 0 || c.Outputs[len(c.Outputs)-1].Data["image/png"] == nil {
		t.Errorf("cell 3 has no PNG: %+v", c.Outputs)
	}
	if c := done.Cells[3]; len(c.Outputs) != 1 || !strings.Contains(fmt.Sprint(c.Outputs[0].Text), "sandbox True") {
		t.Errorf("cell 4: %+v", c.Outputs)
	}
	// nbclient shut its kernel down: the sandbox made for it is gone (not
	// idled out: that takes minutes).
	list, err := shared.c.ListSandboxes(ctxT(t), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list.Sandboxes {
		if sb.Labels["forkbox.jupyter"] != "" && sb.State != api.StateTerminated {
			t.Errorf("a kernel's sandbox outlived nbclient: %s %s", sb.ID, sb.State)
		}
	}
}
