package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/kernel"
)

// kernelAgent serves a test server that starts the host's Python kernels
// (its kernelspecs, /usr/share/jupyter/kernels), with a home and a workdir
// of its own. It skips when there is no python kernelspec or its python
// lacks ipykernel, which it asks the agent to find out: no test may start a
// process of its own (see testReaper).
func kernelAgent(t *testing.T) (*server, *testAgent) {
	t.Helper()
	s, _ := testServer(t)
	home, work := t.TempDir(), t.TempDir()
	s.cfg.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8", "MPLBACKEND=Agg"}
	s.cfg.WorkDir = work
	s.kernelDir = filepath.Join(t.TempDir(), "kernels")
	c := serveTestAgent(t, s)
	// Before the server closes: no kernel outlives its test.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.ctxs.mu.Lock()
		var ks []*kernel.Kernel
		for _, cx := range s.ctxs.byID {
			cx.mu.Lock()
			if cx.k != nil {
				ks = append(ks, cx.k)
			}
			cx.mu.Unlock()
		}
		s.ctxs.mu.Unlock()
		for _, k := range ks {
			s.asUser(func() error { return k.Shutdown(ctx) })
		}
	})
	spec, err := s.resolveSpec("python")
	if err != nil {
		t.Skipf("no python kernelspec: %v", err)
	}
	st, b := runExec(t, c, &wire.ExecRequest{Cmd: spec.Argv[0], Args: []string{"-c", "import ipykernel"}})
	if st.Code != 0 {
		t.Skipf("the python kernelspec's %s has no ipykernel (install python3-ipykernel): %s", spec.Argv[0], b.output())
	}
	return s, c
}

// addTestContext registers a context that has no kernel.
func addTestContext(s *server, id string) *codeContext {
	c := &codeContext{id: id, spec: &kernel.Spec{Name: "python3", Language: "python"}, created: time.Now()}
	s.ctxs.mu.Lock()
	s.ctxs.byID[id] = c
	s.ctxs.mu.Unlock()
	return c
}

// TestJupyterCalls exercises the Jupyter endpoints and their client on
// contexts without a kernel: kernels cannot start here.
func TestJupyterCalls(t *testing.T) {
	s, _ := testServer(t)
	s.kernelDirErr = errors.New("no kernels in this test")
	c := serveTestAgent(t, s)
	cx := addTestContext(s, "ctx_0000abcd")
	ctx := context.Background()

	// A receive makes the log and starts no kernel.
	ans, err := c.JupyterRecv(ctx, cx.id, "", -1, time.Minute)
	if err != nil || ans.Head != 0 || len(ans.Messages) != 0 || ans.Messages == nil {
		t.Fatalf("head-only receive: %+v, %v", ans, err)
	}
	if cx.jlog.Load() == nil || cx.k != nil {
		t.Fatalf("log %v, kernel %v", cx.jlog.Load(), cx.k)
	}

	// What the kernel sends comes back byte for byte.
	content := `{"text": "<b>&</b>\u00e9", "n": 1}`
	cx.onKernelMessage(&kernel.Message{Channel: "iopub", Header: json.RawMessage(`{"msg_id":"k1","msg_type":"stream"}`),
		Parent: json.RawMessage(`{}`), Metadata: json.RawMessage(`{}`), Content: json.RawMessage(content), Buffers: [][]byte{{0, 1, 2}}})
	ans, err = c.JupyterRecv(ctx, cx.id, "python", 0, 0)
	if err != nil || ans.Head != 1 || len(ans.Messages) != 1 {
		t.Fatalf("receive: %+v, %v", ans, err)
	}
	if m := ans.Messages[0]; m.Seq != 1 || m.Channel != "iopub" || string(m.Content) != `{"text":"<b>&</b>\u00e9","n":1}` ||
		len(m.Buffers) != 1 || string(m.Buffers[0]) != "\x00\x01\x02" {
		t.Errorf("message %+v content %s", m, m.Content)
	}

	// A waiting receive wakes when a message comes.
	got := make(chan *wire.JupyterRecvAnswer, 1)
	go func() {
		ans, err := c.JupyterRecv(ctx, cx.id, "", 1, 30*time.Second)
		if err != nil {
			t.Errorf("waiting receive: %v", err)
		}
		got <- ans
	}()
	waiting(t, cx.jlog.Load(), 1)
	cx.onKernelMessage(&kernel.Message{Channel: "shell", Header: json.RawMessage(`{}`), Parent: json.RawMessage(`{}`),
		Metadata: json.RawMessage(`{}`), Content: json.RawMessage(`{}`)})
	select {
	case ans := <-got:
		if ans == nil || len(ans.Messages) != 1 || ans.Messages[0].Seq != 2 || ans.Messages[0].Channel != "shell" {
			t.Errorf("woken receive: %+v", ans)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the receive did not wake")
	}

	// A receive whose caller goes away ends.
	rctx, cancel := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() {
		_, err := c.JupyterRecv(rctx, cx.id, "", 2, 30*time.Second)
		ended <- err
	}()
	waiting(t, cx.jlog.Load(), 1)
	cancel()
	select {
	case err := <-ended:
		wantKind(t, "cancelled receive", err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled receive did not end")
	}
	// And so does its wait in the agent.
	waiting(t, cx.jlog.Load(), 0)

	// Refusals.
	_, err = c.JupyterRecv(ctx, cx.id, "", -2, 0)
	wantKind(t, "after -2", err, errdefs.ErrInvalidArgument)
	_, err = c.JupyterRecv(ctx, cx.id, "r", 0, 0)
	wantKind(t, "another language", err, errdefs.ErrInvalidArgument)
	_, err = c.JupyterRecv(ctx, "ctx_00000000", "", 0, 0)
	wantKind(t, "unknown context", err, errdefs.ErrNotFound)
	err = c.JupyterSend(ctx, "ctx_00000000", "", &wire.JupyterMessage{Channel: "shell"})
	wantKind(t, "send to an unknown context", err, errdefs.ErrNotFound)
	for _, q := range []string{"after=x", "wait_ms=-1", "wait_ms=1.5"} {
		err := c.send(ctx, http.MethodGet, "/contexts/"+cx.id+"/jupyter/recv?"+q, "")
		wantKind(t, q, err, errdefs.ErrInvalidArgument)
	}
	err = c.send(ctx, http.MethodPost, "/contexts/"+cx.id+"/jupyter/send", `{"channel":`)
	wantKind(t, "a truncated message", err, errdefs.ErrInvalidArgument)
	// A send starts the kernel, which cannot start here.
	if err := c.JupyterSend(ctx, cx.id, "", &wire.JupyterMessage{Channel: "shell"}); err == nil || !strings.Contains(err.Error(), "no kernels in this test") {
		t.Errorf("send without a kernel: %v", err)
	}

	// Deleting the context ends its receives.
	go func() {
		_, err := c.JupyterRecv(ctx, cx.id, "", 2, 30*time.Second)
		ended <- err
	}()
	waiting(t, cx.jlog.Load(), 1)
	if err := c.DeleteContext(ctx, cx.id); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("receive on a deleted context: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the receive did not end with its context")
	}
}

// TestCreateContextID: a daemon-chosen id is checked before anything starts.
func TestCreateContextID(t *testing.T) {
	s, _ := testServer(t)
	s.kernelDirErr = errors.New("no kernels in this test")
	c := serveTestAgent(t, s)
	addTestContext(s, "ctx_0000abcd")
	ctx := context.Background()
	if _, err := s.resolveSpec("python"); err != nil {
		t.Skipf("no python kernelspec: %v", err)
	}
	for _, id := range []string{"ctx_0000ABCD", "ctx_123", "ctx_0123456789abcdef", "default-python3", "ctx_0000abcg", "../ctx_0000abcd"} {
		_, err := c.CreateContext(ctx, &wire.CreateContextRequest{ID: id, Language: "python"})
		wantKind(t, "id "+id, err, errdefs.ErrInvalidArgument)
	}
	_, err := c.CreateContext(ctx, &wire.CreateContextRequest{ID: "ctx_0000abcd", Language: "python"})
	wantKind(t, "an id in use", err, errdefs.ErrConflict)
	// A free id passes its checks and gets as far as the kernel's start.
	_, err = c.CreateContext(ctx, &wire.CreateContextRequest{ID: "ctx_0000abce", Language: "python"})
	if err == nil || !strings.Contains(err.Error(), "no kernels in this test") {
		t.Errorf("a free id: %v", err)
	}
}

// TestJupyterKernel drives a real ipykernel through the agent as the
// daemon's gateway does: raw messages in, the log out, next to forkbox's
// own cells, across a restart and a death. It needs the host's python3 with
// ipykernel.
func TestJupyterKernel(t *testing.T) {
	_, c := kernelAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() { c.DeleteContext(context.Background(), "default-python3") })

	var after int64
	var seen []wire.JupyterMessage
	// await receives until a message matches.
	await := func(what string, match func(*wire.JupyterMessage) bool) *wire.JupyterMessage {
		t.Helper()
		for _, m := range seen {
			if match(&m) {
				return &m
			}
		}
		for {
			ans, err := c.JupyterRecv(ctx, "default", "python", after, 10*time.Second)
			if err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			if ans.Dropped != 0 {
				t.Errorf("dropped %d", ans.Dropped)
			}
			for _, m := range ans.Messages {
				seen = append(seen, m)
				after = m.Seq
			}
			for i := len(seen) - len(ans.Messages); i < len(seen); i++ {
				if match(&seen[i]) {
					return &seen[i]
				}
			}
		}
	}
	msgID := 0
	send := func(channel, msgType string, parent json.RawMessage, content any) string {
		t.Helper()
		msgID++
		id := "nb-" + string(rune('a'+msgID))
		h, _ := json.Marshal(map[string]string{"msg_id": id, "msg_type": msgType, "session": "nb", "username": "nb", "version": "5.3"})
		b, _ := json.Marshal(content)
		if err := c.JupyterSend(ctx, "default", "python", &wire.JupyterMessage{Channel: channel, Header: h, Parent: parent, Content: b}); err != nil {
			t.Fatalf("send %s: %v", msgType, err)
		}
		return id
	}
	reply := func(channel, msgType, parentID string) func(*wire.JupyterMessage) bool {
		return func(m *wire.JupyterMessage) bool {
			var h, p struct {
				MsgID   string `json:"msg_id"`
				MsgType string `json:"msg_type"`
			}
			json.Unmarshal(m.Header, &h)
			json.Unmarshal(m.Parent, &p)
			return m.Channel == channel && h.MsgType == msgType && p.MsgID == parentID
		}
	}
	execute := func(code string) map[string]any {
		return map[string]any{"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{}, "allow_stdin": true, "stop_on_error": true}
	}

	// The first receive starts nothing; the first send starts the kernel.
	if ans, err := c.JupyterRecv(ctx, "default", "python", -1, 0); err != nil || ans.Head != 0 {
		t.Fatalf("first receive: %+v, %v", ans, err)
	}
	if list, _ := c.ListContexts(ctx); len(list) != 1 || list[0].State != "new" {
		t.Fatalf("contexts after a receive: %+v", list)
	}
	id := send("shell", "kernel_info_request", nil, struct{}{})
	await("kernel_info_reply", reply("shell", "kernel_info_reply", id))

	id = send("shell", "execute_request", nil, execute("x = input('name? ')"))
	req := await("input_request", reply("stdin", "input_request", id))
	send("stdin", "input_reply", req.Header, map[string]string{"value": "forkbox"})
	await("execute_reply", reply("shell", "execute_reply", id))

	// forkbox's own cell: its output reaches the attached client too.
	done, err := c.RunCode(ctx, &wire.CodeRequest{Code: "print(x + '!')"}, nil)
	if err != nil || done.Execution.Error != nil || strings.Join(done.Execution.Logs.Stdout, "") != "forkbox!\n" {
		t.Fatalf("RunCode: %+v, %v", done, err)
	}
	await("forkbox's output", func(m *wire.JupyterMessage) bool {
		return m.Channel == "iopub" && strings.Contains(string(m.Content), `forkbox!\n`)
	})

	// A restart keeps the log; the next messages come from the new kernel.
	if _, err := c.RestartContext(ctx, "default-python3"); err != nil {
		t.Fatal(err)
	}
	id = send("shell", "kernel_info_request", nil, struct{}{})
	await("kernel_info_reply after the restart", reply("shell", "kernel_info_reply", id))

	// So does a death: the next send starts a fresh kernel.
	send("shell", "execute_request", nil, execute("import os; os._exit(1)"))
	for {
		list, err := c.ListContexts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 && list[0].State == "dead" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	id = send("shell", "kernel_info_request", nil, struct{}{})
	await("kernel_info_reply after a death", reply("shell", "kernel_info_reply", id))
}
