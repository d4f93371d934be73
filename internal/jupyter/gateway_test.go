package jupyter

import (
	"bytes"
	"context"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// testB32 encodes sandbox ids as the daemon makes them.
var testB32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// fakeSandboxes is an in-memory sandbox manager: sandboxes with tenants,
// contexts, and per-context message logs the test feeds.
type fakeSandboxes struct {
	mu        sync.Mutex
	n         int
	sbs       map[string]*api.Sandbox
	owner     map[string]string
	contexts  map[string][]string // sandbox → context ids made
	actions   []string
	sent      []*sandbox.JupyterMessage
	log       map[string][]sandbox.JupyterMessage // sandbox/context → messages
	changed   chan struct{}
	onSend    func(f *fakeSandboxes, sb, cref string, m *sandbox.JupyterMessage)
	sendErr   error // what JupyterSend fails with, when set
	suspended map[string]bool
}

func newFake() *fakeSandboxes {
	return &fakeSandboxes{sbs: map[string]*api.Sandbox{}, owner: map[string]string{}, contexts: map[string][]string{},
		log: map[string][]sandbox.JupyterMessage{}, changed: make(chan struct{}), suspended: map[string]bool{}}
}

func (f *fakeSandboxes) get(ctx context.Context, ref string) (*api.Sandbox, error) {
	sb := f.sbs[ref]
	if sb == nil || f.owner[ref] != tenant.Of(ctx) {
		return nil, errdefs.NotFound("sandbox %q not found", ref)
	}
	return sb, nil
}

func (f *fakeSandboxes) Create(ctx context.Context, req *api.CreateSandboxRequest) (*api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	id := "sbx_" + strings.ToLower(testB32.EncodeToString([]byte(fmt.Sprintf("%012d", f.n))))
	sb := &api.Sandbox{ID: id, Image: req.Image, State: api.StateRunning, Labels: req.Labels, CreatedAt: time.Now()}
	f.sbs[id], f.owner[id] = sb, tenant.Of(ctx)
	return sb, nil
}

func (f *fakeSandboxes) Get(ctx context.Context, ref string) (*api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	c := *sb
	return &c, nil
}

func (f *fakeSandboxes) List(ctx context.Context, _ store.ListFilter) ([]api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Sandbox
	for id, sb := range f.sbs {
		if f.owner[id] == tenant.Of(ctx) {
			out = append(out, *sb)
		}
	}
	return out, nil
}

func (f *fakeSandboxes) Delete(ctx context.Context, ref string) (*api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	sb.State = api.StateTerminated
	f.actions = append(f.actions, "delete "+ref)
	return sb, nil
}

func (f *fakeSandboxes) ListImages(context.Context) ([]api.Image, error) {
	return []api.Image{{Name: "python"}, {Name: "datasci"}}, nil
}

func (f *fakeSandboxes) CreateContextWithID(ctx context.Context, ref, id string, req *api.CreateContextRequest) (*api.Context, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(ctx, ref); err != nil {
		return nil, err
	}
	f.contexts[ref] = append(f.contexts[ref], id)
	return &api.Context{ID: id, Language: req.Language}, nil
}

func (f *fakeSandboxes) ListContexts(ctx context.Context, ref string) ([]api.Context, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(ctx, ref); err != nil {
		return nil, err
	}
	return []api.Context{{ID: "default-python3", Language: "python", Default: true}}, nil
}

func (f *fakeSandboxes) ActOnContext(ctx context.Context, ref, id string, action sandbox.ContextAction) (*api.Context, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(ctx, ref); err != nil {
		return nil, err
	}
	f.actions = append(f.actions, string(action)+" "+ref+" "+id)
	return &api.Context{ID: id}, nil
}

func (f *fakeSandboxes) JupyterSend(ctx context.Context, ref, cref, language string, m *sandbox.JupyterMessage) error {
	f.mu.Lock()
	if _, err := f.get(ctx, ref); err != nil {
		f.mu.Unlock()
		return err
	}
	if f.sendErr != nil {
		f.mu.Unlock()
		return f.sendErr
	}
	delete(f.suspended, ref) // a message resumes
	f.sent = append(f.sent, m)
	on := f.onSend
	f.mu.Unlock()
	if on != nil {
		on(f, ref, cref, m)
	}
	return nil
}

// emit appends a kernel message to a context's log.
func (f *fakeSandboxes) emit(sb, cref string, m sandbox.JupyterMessage) {
	f.mu.Lock()
	key := sb + "/" + cref
	m.Seq = int64(len(f.log[key]) + 1)
	f.log[key] = append(f.log[key], m)
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeSandboxes) JupyterRecv(ctx context.Context, ref, cref, language string, after int64, wait time.Duration) (*sandbox.JupyterRecvAnswer, error) {
	deadline := time.After(wait)
	for {
		f.mu.Lock()
		sb, err := f.get(ctx, ref)
		if err != nil {
			f.mu.Unlock()
			return nil, err
		}
		if f.suspended[ref] || sb.State != api.StateRunning {
			f.mu.Unlock()
			return nil, errdefs.FailedPrecondition("sandbox %s is %s", ref, sb.State)
		}
		log := f.log[ref+"/"+cref]
		ans := &sandbox.JupyterRecvAnswer{Head: int64(len(log)), Messages: []sandbox.JupyterMessage{}}
		if after >= 0 && int64(len(log)) > after {
			ans.Messages = append(ans.Messages, log[after:]...)
		}
		ch := f.changed
		f.mu.Unlock()
		if after < 0 || len(ans.Messages) > 0 {
			return ans, nil
		}
		select {
		case <-ch:
		case <-deadline:
			return ans, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// serve serves the gateway as the daemon routes it, with the tenant named
// by the X-Tenant header (the daemon's keys stand behind it).
func serve(t *testing.T, g *Gateway) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	h := func(p string, f func(http.ResponseWriter, *http.Request) error) {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			if err := f(w, r); err != nil {
				status, _ := errdefs.HTTPStatus(err)
				http.Error(w, err.Error(), status)
			}
		})
	}
	h("GET /jupyter/api/kernelspecs", g.Kernelspecs)
	h("GET /jupyter/api/kernelspecs/{name}", g.Kernelspec)
	h("GET /jupyter/api/kernels", g.ListKernels)
	h("POST /jupyter/api/kernels", g.StartKernel)
	h("GET /jupyter/api/kernels/{id}", g.GetKernel)
	h("DELETE /jupyter/api/kernels/{id}", g.DeleteKernel)
	h("POST /jupyter/api/kernels/{id}/interrupt", g.InterruptKernel)
	h("POST /jupyter/api/kernels/{id}/restart", g.RestartKernel)
	h("GET /jupyter/api/kernels/{id}/channels", g.Channels)
	h("GET /jupyter/api/sessions", g.ListSessions)
	h("POST /jupyter/api/sessions", g.CreateSession)
	h("GET /jupyter/api/sessions/{id}", g.GetSession)
	h("PATCH /jupyter/api/sessions/{id}", g.UpdateSession)
	h("DELETE /jupyter/api/sessions/{id}", g.DeleteSession)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := r.Header.Get("X-Tenant")
		if who == "" {
			who = tenant.Default
		}
		mux.ServeHTTP(w, r.WithContext(tenant.With(r.Context(), tenant.Principal{Tenant: who})))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func call(t *testing.T, srv *httptest.Server, who, method, path, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if who != "" {
		req.Header.Set("X-Tenant", who)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return res.StatusCode
}

func TestKernelIDs(t *testing.T) {
	for _, kr := range []kernelRef{{sandbox: "sbx_aaaaaaaaaaaaaaaaaaaa"}, {sandbox: "sbx_7zq2m4k5x6v3c2b1n0a9", ctx: 0xdeadbeef}} {
		if kr.sandbox == "sbx_7zq2m4k5x6v3c2b1n0a9" {
			// Only base32 letters and 2-7 are sandbox ids.
			kr.sandbox = "sbx_" + strings.ToLower(testB32.EncodeToString([]byte("twelve bytes")))
		}
		id, err := kr.id()
		if err != nil {
			t.Fatal(err)
		}
		back, err := parseKernelID(id)
		if err != nil || back != kr {
			t.Fatalf("%+v → %s → %+v, %v", kr, id, back, err)
		}
	}
	for _, bad := range []string{"", "x", "../../etc/passwd", "00000000-0000-0000-0000-00000000000g", "0000000000000000000000000000000000000"} {
		if _, err := parseKernelID(bad); !errorsIsNotFound(err) {
			t.Errorf("parseKernelID(%q) = %v, want not found", bad, err)
		}
	}
	if _, err := (kernelRef{sandbox: "my-named-box"}).id(); err == nil {
		t.Error("a name made a kernel id")
	}
	if n, ok := parseContextRef("ctx_0000002a"); !ok || n != 42 {
		t.Errorf("parseContextRef = %d, %v", n, ok)
	}
	for _, bad := range []string{"ctx_00000000", "ctx_zz", "default", "ctx_0000002a0"} {
		if _, ok := parseContextRef(bad); ok {
			t.Errorf("parseContextRef(%q) accepted", bad)
		}
	}
}

func TestBinaryFraming(t *testing.T) {
	msg := []byte(`{"header":{}}`)
	bufs := [][]byte{[]byte("one"), {}, []byte("three")}
	parts, err := decodeBinary(encodeBinary(msg, bufs))
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 4 || !bytes.Equal(parts[0], msg) || string(parts[1]) != "one" || len(parts[2]) != 0 || string(parts[3]) != "three" {
		t.Fatalf("parts = %q", parts)
	}
	for _, bad := range [][]byte{nil, {0, 0, 0}, {0, 0, 0, 0}, {0xff, 0xff, 0xff, 0xff}, {0, 0, 0, 1, 0, 0, 0, 2}, {0, 0, 0, 1, 0xff, 0, 0, 0}} {
		if _, err := decodeBinary(bad); err == nil {
			t.Errorf("decodeBinary(%v) accepted", bad)
		}
	}
}

func TestParseClientMessage(t *testing.T) {
	m, err := parseClientMessage(websocket.MessageText, []byte(`{"header":{"msg_id":"a","msg_type":"input_reply"},"content":{"value":"x"}}`))
	if err != nil || m.Channel != "stdin" || string(m.Parent) != "{}" || string(m.Metadata) != "{}" {
		t.Fatalf("input_reply without a channel: %+v, %v", m, err)
	}
	m, err = parseClientMessage(websocket.MessageText, []byte(`{"header":{"msg_id":"a","msg_type":"execute_request"},"parent_header":null,"content":{}}`))
	if err != nil || m.Channel != "shell" || string(m.Parent) != "{}" {
		t.Fatalf("execute_request without a channel: %+v, %v", m, err)
	}
	m, err = parseClientMessage(websocket.MessageText, []byte(`{"header":{"msg_id":"a","msg_type":"kernel_info_request","date":1764722000.5},"content":{}}`))
	if err != nil || !strings.Contains(string(m.Header), `"date":"2025-12-03T00:33:20.500000Z"`) {
		t.Fatalf("a Unix timestamp as the date: %s, %v", m.Header, err)
	}
	m, err = parseClientMessage(websocket.MessageBinary, encodeBinary([]byte(`{"channel":"shell","header":{"msg_id":"b","msg_type":"comm_msg"},"content":{}}`), [][]byte{[]byte("buf")}))
	if err != nil || len(m.Buffers) != 1 || string(m.Buffers[0]) != "buf" {
		t.Fatalf("binary: %+v, %v", m, err)
	}
	for _, bad := range []string{`nonsense`, `{"header":{}}`, `{"header":{"msg_id":"a"}}`, `{"channel":"elsewhere","header":{"msg_id":"a","msg_type":"x"}}`, `{"header":"x"}`} {
		if _, err := parseClientMessage(websocket.MessageText, []byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestKernelsREST(t *testing.T) {
	f := newFake()
	g := New(f, nil)
	srv := serve(t, g)

	var specs struct {
		Default     string               `json:"default"`
		Kernelspecs map[string]specModel `json:"kernelspecs"`
	}
	if call(t, srv, "", "GET", "/jupyter/api/kernelspecs", "", &specs) != 200 || specs.Default != "python3" ||
		specs.Kernelspecs["python3"].Spec.Language != "python" || specs.Kernelspecs["forkbox-datasci"].Name != "forkbox-datasci" {
		t.Fatalf("kernelspecs: %+v", specs)
	}
	if code := call(t, srv, "", "GET", "/jupyter/api/kernelspecs/forkbox-nothere", "", nil); code != 404 {
		t.Errorf("unknown kernelspec: %d", code)
	}

	var k kernelModel
	if code := call(t, srv, "", "POST", "/jupyter/api/kernels", `{"name":"forkbox-datasci"}`, &k); code != 201 {
		t.Fatalf("start: %d", code)
	}
	sb := f.sbs[k.Forkbox.Sandbox]
	if sb == nil || sb.Image != "datasci" || sb.Labels[LabelKernel] == "" || sb.Labels[LabelSpec] != "forkbox-datasci" || k.Forkbox.Context != "default" {
		t.Fatalf("the kernel's sandbox: %+v, model %+v", sb, k)
	}
	if _, err := time.Parse(jupyterTime, k.LastActivity); err != nil || k.Name != "forkbox-datasci" || k.ExecutionState == "" {
		t.Fatalf("model: %+v (%v)", k, err)
	}
	if code := call(t, srv, "", "POST", "/jupyter/api/kernels", `{"name":"ruby"}`, nil); code != 404 {
		t.Errorf("unknown kernelspec start: %d", code)
	}

	// Another tenant sees nothing of it.
	var list []kernelModel
	if call(t, srv, "other", "GET", "/jupyter/api/kernels", "", &list) != 200 || len(list) != 0 {
		t.Fatalf("other tenant's list: %+v", list)
	}
	for _, p := range []string{"", "/interrupt", "/restart"} {
		method := "GET"
		if p != "" {
			method = "POST"
		}
		if code := call(t, srv, "other", method, "/jupyter/api/kernels/"+k.ID+p, "", nil); code != 404 {
			t.Errorf("other tenant %s %s: %d", method, p, code)
		}
	}
	if code := call(t, srv, "other", "DELETE", "/jupyter/api/kernels/"+k.ID, "", nil); code != 404 {
		t.Errorf("other tenant delete: %d", code)
	}

	// A kernel in an existing sandbox: a new context there.
	var k2 kernelModel
	body := fmt.Sprintf(`{"name":"python3","env":{"KERNEL_FORKBOX_SANDBOX":%q}}`, k.Forkbox.Sandbox)
	if code := call(t, srv, "", "POST", "/jupyter/api/kernels", body, &k2); code != 201 {
		t.Fatalf("start in a sandbox: %d", code)
	}
	if k2.Forkbox.Sandbox != k.Forkbox.Sandbox || !strings.HasPrefix(k2.Forkbox.Context, "ctx_") ||
		len(f.contexts[k.Forkbox.Sandbox]) != 1 || f.contexts[k.Forkbox.Sandbox][0] != k2.Forkbox.Context {
		t.Fatalf("second kernel %+v, contexts %v", k2, f.contexts)
	}
	if code := call(t, srv, "other", "POST", "/jupyter/api/kernels", body, nil); code != 404 {
		t.Errorf("other tenant starting a kernel in my sandbox: %d", code)
	}

	if call(t, srv, "", "GET", "/jupyter/api/kernels", "", &list) != 200 || len(list) != 2 {
		t.Fatalf("list: %+v", list)
	}
	if code := call(t, srv, "", "POST", "/jupyter/api/kernels/"+k.ID+"/interrupt", "", nil); code != 204 {
		t.Errorf("interrupt: %d", code)
	}
	if code := call(t, srv, "", "POST", "/jupyter/api/kernels/"+k2.ID+"/restart", "", nil); code != 200 {
		t.Errorf("restart: %d", code)
	}
	if code := call(t, srv, "", "DELETE", "/jupyter/api/kernels/"+k2.ID, "", nil); code != 204 {
		t.Errorf("delete the context kernel: %d", code)
	}
	if code := call(t, srv, "", "DELETE", "/jupyter/api/kernels/"+k.ID, "", nil); code != 204 {
		t.Errorf("delete: %d", code)
	}
	sbID := k.Forkbox.Sandbox
	want := []string{"interrupt " + sbID + " default-python3", "restart " + sbID + " " + k2.Forkbox.Context,
		"delete " + sbID + " " + k2.Forkbox.Context, "delete " + sbID}
	if fmt.Sprint(f.actions) != fmt.Sprint(want) {
		t.Errorf("actions %q, want %q", f.actions, want)
	}
	if code := call(t, srv, "", "GET", "/jupyter/api/kernels/"+k.ID, "", nil); code != 404 {
		t.Errorf("a deleted kernel: %d", code)
	}

	// A restarted daemon (a new gateway) lists the kernel of a sandbox made
	// for one.
	var k3 kernelModel
	call(t, srv, "", "POST", "/jupyter/api/kernels", `{}`, &k3)
	srv2 := serve(t, New(f, nil))
	if call(t, srv2, "", "GET", "/jupyter/api/kernels", "", &list) != 200 || len(list) != 1 || list[0].ID != k3.ID || list[0].Name != "python3" {
		t.Fatalf("after a restart: %+v", list)
	}
}

func TestSessions(t *testing.T) {
	f := newFake()
	srv := serve(t, New(f, nil))
	var s sessionModel
	if code := call(t, srv, "", "POST", "/jupyter/api/sessions", `{"path":"a.ipynb","type":"notebook","name":"a","kernel":{"name":"python3"}}`, &s); code != 201 {
		t.Fatalf("create: %d", code)
	}
	if s.Kernel.ID == "" || s.Path != "a.ipynb" || s.Notebook.Path != "a.ipynb" {
		t.Fatalf("session %+v", s)
	}
	var again sessionModel
	call(t, srv, "", "POST", "/jupyter/api/sessions", `{"path":"a.ipynb","kernel":{"name":"python3"}}`, &again)
	if again.ID != s.ID || len(f.sbs) != 1 {
		t.Fatalf("the same path made a second session %+v (sandboxes %d)", again, len(f.sbs))
	}
	var list []sessionModel
	if call(t, srv, "other", "GET", "/jupyter/api/sessions", "", &list) != 200 || len(list) != 0 {
		t.Fatalf("other tenant sees %+v", list)
	}
	if code := call(t, srv, "other", "GET", "/jupyter/api/sessions/"+s.ID, "", nil); code != 404 {
		t.Errorf("other tenant get: %d", code)
	}
	var moved sessionModel
	if code := call(t, srv, "", "PATCH", "/jupyter/api/sessions/"+s.ID, `{"path":"b.ipynb"}`, &moved); code != 200 || moved.Path != "b.ipynb" || moved.Kernel.ID != s.Kernel.ID {
		t.Fatalf("rename: %d %+v", code, moved)
	}
	if code := call(t, srv, "", "DELETE", "/jupyter/api/sessions/"+s.ID, "", nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if f.sbs[s.Kernel.Forkbox.Sandbox].State != api.StateTerminated {
		t.Error("deleting the session left its kernel's sandbox")
	}
	if call(t, srv, "", "GET", "/jupyter/api/sessions", "", &list) != 200 || len(list) != 0 {
		t.Fatalf("after delete: %+v", list)
	}
}

func TestChannelsRelay(t *testing.T) {
	f := newFake()
	g := New(f, nil)
	srv := serve(t, g)
	var k kernelModel
	call(t, srv, "", "POST", "/jupyter/api/kernels", `{}`, &k)
	sbID := k.Forkbox.Sandbox
	// The kernel: every execute_request gets a status and a reply.
	f.onSend = func(f *fakeSandboxes, sb, cref string, m *sandbox.JupyterMessage) {
		var h headerFields
		json.Unmarshal(m.Header, &h)
		f.emit(sb, cref, sandbox.JupyterMessage{Channel: "iopub", Header: json.RawMessage(`{"msg_id":"s1","msg_type":"status"}`),
			Parent: m.Header, Metadata: json.RawMessage(`{}`), Content: json.RawMessage(`{"execution_state":"busy"}`)})
		f.emit(sb, cref, sandbox.JupyterMessage{Channel: "shell", Header: json.RawMessage(`{"msg_id":"r1","msg_type":"execute_reply"}`),
			Parent: m.Header, Metadata: json.RawMessage(`{}`), Content: json.RawMessage(`{"status":"ok","execution_count":1}`),
			Buffers: [][]byte{[]byte("raw")}})
	}
	// Something the kernel said before this connection: not replayed.
	f.emit(sbID, "default", sandbox.JupyterMessage{Channel: "iopub", Header: json.RawMessage(`{"msg_id":"old","msg_type":"stream"}`)})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/jupyter/api/kernels/" + k.ID + "/channels"
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	send := `{"channel":"shell","header":{"msg_id":"m1","msg_type":"execute_request"},"parent_header":{},"metadata":{},"content":{"code":"1"}}`
	if err := c.Write(ctx, websocket.MessageText, []byte(send)); err != nil {
		t.Fatal(err)
	}
	typ, data, err := c.Read(ctx)
	if err != nil || typ != websocket.MessageText {
		t.Fatalf("first message: %v %v", typ, err)
	}
	var got wsMessage
	json.Unmarshal(data, &got)
	if got.Channel != "iopub" || got.MsgType != "status" || got.MsgID != "s1" || !strings.Contains(string(got.Parent), `"m1"`) {
		t.Fatalf("status: %s", data)
	}
	typ, data, err = c.Read(ctx)
	if err != nil || typ != websocket.MessageBinary {
		t.Fatalf("reply with a buffer: %v %v", typ, err)
	}
	parts, err := decodeBinary(data)
	if err != nil || len(parts) != 2 || string(parts[1]) != "raw" {
		t.Fatalf("binary reply: %q %v", parts, err)
	}
	json.Unmarshal(parts[0], &got)
	if got.Channel != "shell" || got.MsgType != "execute_reply" {
		t.Fatalf("reply: %s", parts[0])
	}
	if s := f.sent[0]; s.Channel != "shell" || !strings.Contains(string(s.Content), `"code":"1"`) {
		t.Fatalf("sent %+v", s)
	}
	var model kernelModel
	call(t, srv, "", "GET", "/jupyter/api/kernels/"+k.ID, "", &model)
	if model.ExecutionState != "busy" || model.Connections != 1 {
		t.Errorf("model after the status: %+v", model)
	}

	// Suspended: polls fail until a message resumes it; the reply arrives.
	f.mu.Lock()
	f.suspended[sbID] = true
	f.mu.Unlock()
	time.Sleep(50 * time.Millisecond)
	c.Write(ctx, websocket.MessageText, []byte(strings.ReplaceAll(send, "m1", "m2")))
	for {
		_, data, err = c.Read(ctx)
		if err != nil {
			t.Fatalf("after the resume: %v", err)
		}
		if strings.Contains(string(data), `"m2"`) {
			break
		}
	}

	// A bad message is dropped, the connection lives on.
	c.Write(ctx, websocket.MessageText, []byte(`{"garbage":`))
	c.Write(ctx, websocket.MessageText, []byte(strings.ReplaceAll(send, "m1", "m3")))
	for {
		_, data, err = c.Read(ctx)
		if err != nil {
			t.Fatalf("after garbage: %v", err)
		}
		if strings.Contains(string(data), `"m3"`) {
			break
		}
	}

	// A request that cannot reach the kernel is answered as a kernel
	// would: busy, an error reply saying why, idle.
	f.mu.Lock()
	f.sendErr = errdefs.Unavailable("the sandbox could not be resumed")
	f.mu.Unlock()
	c.Write(ctx, websocket.MessageText, []byte(strings.ReplaceAll(send, "m1", "m4")))
	var seen []string
	for len(seen) < 3 {
		_, data, err = c.Read(ctx)
		if err != nil {
			t.Fatalf("after a failed send: %v", err)
		}
		if !strings.Contains(string(data), `"m4"`) {
			continue
		}
		json.Unmarshal(data, &got)
		seen = append(seen, got.Channel+" "+got.MsgType+" "+string(got.Content))
	}
	if !strings.Contains(seen[0], `iopub status {"execution_state":"busy"}`) || !strings.HasPrefix(seen[1], "shell execute_reply") ||
		!strings.Contains(seen[1], `"ename":"ForkboxError"`) || !strings.Contains(seen[1], "could not be resumed") ||
		!strings.Contains(seen[2], `iopub status {"execution_state":"idle"}`) {
		t.Fatalf("a failed send's answers: %q", seen)
	}
	f.mu.Lock()
	f.sendErr = nil
	f.mu.Unlock()

	// The sandbox ends: the gateway closes the connection.
	f.mu.Lock()
	f.sbs[sbID].State = api.StateTerminated
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	for {
		if _, _, err = c.Read(ctx); err != nil {
			break
		}
	}
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("close: %v", err)
	}

	// Another tenant cannot open the channels.
	req, _ := http.NewRequest("GET", srv.URL+"/jupyter/api/kernels/"+k.ID+"/channels", nil)
	req.Header.Set("X-Tenant", "other")
	res, err := http.DefaultClient.Do(req)
	if err == nil {
		res.Body.Close()
		if res.StatusCode != 404 {
			t.Errorf("other tenant's channels: %d", res.StatusCode)
		}
	}
}
