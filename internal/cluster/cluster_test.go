package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base32"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/jupyter/kernelid"
	"github.com/forkbox/forkbox/internal/store"
)

// ---- fakes ----

type fakeStore struct {
	mu         sync.Mutex
	nodes      map[string]store.Node
	sandboxes  map[string]store.Sandbox
	convs      map[string]store.Conversation
	snaps      map[string]store.Snapshot
	heartbeats []store.Node
	getNodeErr error
}

func newFakeStore() *fakeStore {
	return &fakeStore{nodes: map[string]store.Node{}, sandboxes: map[string]store.Sandbox{}, convs: map[string]store.Conversation{}, snaps: map[string]store.Snapshot{}}
}

func (s *fakeStore) putNode(x store.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[x.ID] = x
}

func (s *fakeStore) putSandbox(sb store.Sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandboxes[sb.ID] = sb
}

func (s *fakeStore) Heartbeat(_ context.Context, n *store.Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[n.ID] = *n
	s.heartbeats = append(s.heartbeats, *n)
	return nil
}

func (s *fakeStore) GetNode(_ context.Context, id string) (*store.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.getNodeErr != nil {
		return nil, s.getNodeErr
	}
	x, ok := s.nodes[id]
	if !ok {
		return nil, errdefs.NotFound("node %q not found", id)
	}
	return &x, nil
}

func (s *fakeStore) ListNodes(context.Context) ([]*store.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*store.Node, 0, len(s.nodes))
	for _, x := range s.nodes {
		x := x
		out = append(out, &x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (s *fakeStore) DeleteNode(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.nodes[id]; !ok {
		return errdefs.NotFound("node %q not found", id)
	}
	delete(s.nodes, id)
	return nil
}

func (s *fakeStore) Get(_ context.Context, ref string) (*store.Sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[ref]
	if !ok {
		return nil, errdefs.NotFound("sandbox %q not found", ref)
	}
	return &sb, nil
}

func (s *fakeStore) GetConversation(_ context.Context, id string) (*store.Conversation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.convs[id]
	if !ok {
		return nil, errdefs.NotFound("conversation %q not found", id)
	}
	return &c, nil
}

func (s *fakeStore) GetSnapshot(_ context.Context, id string) (*store.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn, ok := s.snaps[id]
	if !ok {
		return nil, errdefs.NotFound("snapshot %q not found", id)
	}
	return &sn, nil
}

func (s *fakeStore) heartbeatLog() []store.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]store.Node(nil), s.heartbeats...)
}

type adoptCall struct{ id, from string }

type lostCall struct {
	node      string
	heartbeat time.Time
	resume    bool
}

type fakeManager struct {
	id  string
	cap store.Node

	mu       sync.Mutex
	adopts   []adoptCall
	moves    [][3]string // id, from, to
	lost     []lostCall
	syncs    int
	adoptErr error
	lostErr  error
}

func (m *fakeManager) Node() string         { return m.id }
func (m *fakeManager) Capacity() store.Node { return m.cap }

func (m *fakeManager) Adopt(_ context.Context, id, from string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.adopts = append(m.adopts, adoptCall{id, from})
	return m.adoptErr
}

func (m *fakeManager) Move(_ context.Context, id, from, to string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.moves = append(m.moves, [3]string{id, from, to})
	return true, nil
}

func (m *fakeManager) NodeLost(_ context.Context, node string, hb time.Time, resume bool) (int, int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lost = append(m.lost, lostCall{node, hb, resume})
	if m.lostErr != nil {
		return 0, 0, m.lostErr
	}
	return 1, 0, nil
}

func (m *fakeManager) SyncPools(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.syncs++
	return nil
}

func (m *fakeManager) snapshot() ([]adoptCall, []lostCall, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]adoptCall(nil), m.adopts...), append([]lostCall(nil), m.lost...), m.syncs
}

// ---- helpers ----

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const testTimeout = 10 * time.Second

func newTestNode(t *testing.T, id, advertise string, st *fakeStore, mgr *fakeManager, onLost string) *Node {
	t.Helper()
	n, err := New(Config{NodeID: id, Advertise: advertise, Timeout: testTimeout, OnLost: onLost, Logger: quiet}, st, mgr)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return n
}

func upNode(id, addr string, mem, reserved int64) store.Node {
	now := time.Now().UTC()
	return store.Node{ID: id, Address: addr, MemoryBytes: mem, MemoryReserved: reserved, StartedAt: now.Add(-time.Hour), HeartbeatAt: now}
}

func downNode(id, addr string, ago time.Duration) store.Node {
	now := time.Now().UTC()
	return store.Node{ID: id, Address: addr, StartedAt: now.Add(-2 * time.Hour), HeartbeatAt: now.Add(-ago)}
}

// recorded is what a fake owner node saw of a call.
type recorded struct {
	method, path, query, auth, fwd, host string
	body                                 []byte
}

// owner is an httptest server standing in for another node's API.
type owner struct {
	*httptest.Server
	mu    sync.Mutex
	calls []recorded
}

func newOwner(t *testing.T, extra http.Handler) *owner {
	t.Helper()
	o := &owner{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if extra != nil && r.Header.Get("Upgrade") != "" || extra != nil && strings.HasSuffix(r.URL.Path, "/events") {
			o.record(r, nil)
			extra.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		o.record(r, body)
		w.Header().Set("X-Served-By", "owner")
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "owner says hi")
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *owner) record(r *http.Request, body []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, recorded{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery,
		auth: r.Header.Get("Authorization"), fwd: r.Header.Get(ForwardedHeader), host: r.Host, body: body})
}

func (o *owner) reset() {
	o.mu.Lock()
	o.calls = nil
	o.mu.Unlock()
}

func (o *owner) seen() []recorded {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]recorded(nil), o.calls...)
}

// frontend serves a node's API the way httpapi does: Route first, then the
// local handler ("local" + the body it got), errors mapped by errdefs.
func frontend(t *testing.T, n *Node) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled, err := n.Route(w, r)
		if err != nil {
			status, code := errdefs.HTTPStatus(err)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(api.Error{Error: api.ErrorBody{Code: code, Message: err.Error()}})
			return
		}
		if handled {
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Served-By", "local")
		w.WriteHeader(http.StatusOK)
		w.Write(append([]byte("local:"), body...))
	}))
	t.Cleanup(s.Close)
	return s
}

// route calls n.Route directly on a recorder.
func route(n *Node, method, target string, body io.Reader, hdr map[string]string) (*httptest.ResponseRecorder, bool, error) {
	r := httptest.NewRequest(method, target, body)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	handled, err := n.Route(w, r)
	return w, handled, err
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---- New / Start / heartbeat ----

func TestNewValidates(t *testing.T) {
	mgr := &fakeManager{id: "a"}
	ok := Config{NodeID: "a", Advertise: "http://10.0.0.2:8080", Logger: quiet}
	cases := []struct {
		name string
		mod  func(*Config)
		mgr  string
	}{
		{"empty id", func(c *Config) { c.NodeID = "" }, ""},
		{"slash in id", func(c *Config) { c.NodeID = "a/b" }, "a/b"},
		{"space in id", func(c *Config) { c.NodeID = "a b" }, "a b"},
		{"long id", func(c *Config) { c.NodeID = strings.Repeat("x", 129) }, strings.Repeat("x", 129)},
		{"id differs from manager", func(c *Config) { c.NodeID = "b" }, "a"},
		{"advertise without scheme", func(c *Config) { c.Advertise = "10.0.0.2:8080" }, "a"},
		{"advertise other scheme", func(c *Config) { c.Advertise = "ftp://10.0.0.2" }, "a"},
		{"advertise without host", func(c *Config) { c.Advertise = "http://" }, "a"},
		{"advertise empty", func(c *Config) { c.Advertise = "" }, "a"},
		{"timeout too short", func(c *Config) { c.Timeout = time.Second }, "a"},
		{"bad on-lost", func(c *Config) { c.OnLost = "ignore" }, "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			if _, err := New(c, newFakeStore(), &fakeManager{id: tc.mgr}); err == nil {
				t.Fatalf("New(%+v) succeeded, want an error", c)
			}
		})
	}

	n, err := New(ok, newFakeStore(), mgr)
	if err != nil {
		t.Fatalf("New(valid): %v", err)
	}
	if n.ID() != "a" || n.cfg.Timeout != DefaultTimeout || n.cfg.OnLost != OnLostReport {
		t.Fatalf("defaults: id %q timeout %s on-lost %q", n.ID(), n.cfg.Timeout, n.cfg.OnLost)
	}
	long := strings.Repeat("x", 128)
	if _, err := New(Config{NodeID: long, Advertise: "https://node.example", Timeout: 2 * time.Second, OnLost: OnLostResume},
		newFakeStore(), &fakeManager{id: long}); err != nil {
		t.Fatalf("New(128-char id, https, 2s, resume): %v", err)
	}
	if ValidOnLost(OnLostReport) != nil || ValidOnLost(OnLostResume) != nil || ValidOnLost("") == nil {
		t.Fatal("ValidOnLost")
	}
}

func TestStartHeartbeatWritesCapacity(t *testing.T) {
	st := newFakeStore()
	mgr := &fakeManager{id: "a", cap: store.Node{ID: "bogus", Address: "bogus", CPUs: 6, MemoryBytes: 8 << 30,
		DiskBytes: 100 << 30, DiskFreeBytes: 60 << 30, Running: 3, MemoryReserved: 2 << 30}}
	n := newTestNode(t, "a", "http://10.0.0.1:8080", st, mgr, "")
	before := time.Now().UTC()
	if err := n.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer n.Close()
	hbs := st.heartbeatLog()
	if len(hbs) == 0 {
		t.Fatal("Start wrote no heartbeat")
	}
	got := hbs[0]
	if got.ID != "a" || got.Address != "http://10.0.0.1:8080" {
		t.Fatalf("heartbeat id/address = %q %q", got.ID, got.Address)
	}
	if got.CPUs != 6 || got.MemoryBytes != 8<<30 || got.DiskBytes != 100<<30 || got.DiskFreeBytes != 60<<30 ||
		got.Running != 3 || got.MemoryReserved != 2<<30 {
		t.Fatalf("heartbeat capacity = %+v", got)
	}
	if got.StartedAt.IsZero() || got.StartedAt.Before(before.Add(-time.Second)) || got.HeartbeatAt.Before(got.StartedAt) {
		t.Fatalf("heartbeat times: started %v heartbeat %v (test began %v)", got.StartedAt, got.HeartbeatAt, before)
	}
	if got.StartedAt.Location() != time.UTC || got.HeartbeatAt.Location() != time.UTC {
		t.Fatalf("heartbeat times not UTC: %v %v", got.StartedAt, got.HeartbeatAt)
	}
}

func TestStartRefusesIDOfLiveNodeElsewhere(t *testing.T) {
	st := newFakeStore()
	st.putNode(upNode("a", "http://10.0.0.9:8080", 0, 0))
	n := newTestNode(t, "a", "http://10.0.0.1:8080", st, &fakeManager{id: "a"}, "")
	err := n.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "10.0.0.9") {
		t.Fatalf("Start with the id of a live node elsewhere: err %v, want a refusal naming its address", err)
	}
	if len(st.heartbeatLog()) != 0 {
		t.Fatal("a refused Start heartbeat anyway")
	}
	closeReturns(t, n) // as the daemon's cleanup does after a failed Start
}

func TestStartAcceptsRestartOrDownHolder(t *testing.T) {
	for _, tc := range []struct {
		name string
		old  store.Node
	}{
		{"restart at the same address", upNode("a", "http://10.0.0.1:8080", 0, 0)},
		{"holder elsewhere is down", downNode("a", "http://10.0.0.9:8080", time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			st.putNode(tc.old)
			n := newTestNode(t, "a", "http://10.0.0.1:8080", st, &fakeManager{id: "a"}, "")
			if err := n.Start(context.Background()); err != nil {
				t.Fatalf("Start: %v", err)
			}
			n.Close()
			n.Close() // twice is fine
			x, _ := st.GetNode(context.Background(), "a")
			if x.Address != "http://10.0.0.1:8080" || !x.HeartbeatAt.After(tc.old.HeartbeatAt) {
				t.Fatalf("row after Start = %+v", x)
			}
		})
	}
}

func TestStartStoreError(t *testing.T) {
	st := newFakeStore()
	boom := errors.New("connection reset")
	st.getNodeErr = boom
	n := newTestNode(t, "a", "http://10.0.0.1:8080", st, &fakeManager{id: "a"}, "")
	if err := n.Start(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Start with the store failing: %v, want it wrapped", err)
	}
	closeReturns(t, n)
}

// closeReturns checks that Close returns (on a node whose Start failed or
// never ran there is no loop to wait for).
func closeReturns(t *testing.T, n *Node) {
	t.Helper()
	done := make(chan struct{})
	go func() { n.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close of a node that did not start never returns")
	}
}

func TestCloseWithoutStart(t *testing.T) {
	n := newTestNode(t, "a", "http://10.0.0.1:8080", newFakeStore(), &fakeManager{id: "a"}, "")
	closeReturns(t, n)
}

// ---- Route: calls for sandboxes ----

func TestRouteForwardsToUpOwner(t *testing.T) {
	st := newFakeStore()
	own := newOwner(t, nil)
	st.putNode(upNode("b", own.URL, 0, 0))
	st.putSandbox(store.Sandbox{ID: "sbx_1", State: api.StateRunning, Node: "b"})
	n := newTestNode(t, "a", "http://a.invalid", st, &fakeManager{id: "a"}, "")
	fe := frontend(t, n)

	body := `{"cmd":["echo","hi"]}`
	req, _ := http.NewRequest(http.MethodPost, fe.URL+"/v1/sandboxes/sbx_1/exec?wait=true&x=%2F", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer fk_secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || string(got) != "owner says hi" || resp.Header.Get("X-Served-By") != "owner" {
		t.Fatalf("response %d %q %v, want the owner's", resp.StatusCode, got, resp.Header)
	}
	calls := own.seen()
	if len(calls) != 1 {
		t.Fatalf("owner saw %d calls, want 1", len(calls))
	}
	c := calls[0]
	if c.method != http.MethodPost || c.path != "/v1/sandboxes/sbx_1/exec" || c.query != "wait=true&x=%2F" ||
		string(c.body) != body || c.auth != "Bearer fk_secret" || c.fwd != "a" {
		t.Fatalf("owner saw %+v", c)
	}

	// The sandbox's own path (no suffix) is forwarded too.
	w, handled, err := route(n, http.MethodDelete, "/v1/sandboxes/sbx_1", nil, nil)
	if err != nil || !handled || w.Code != http.StatusTeapot {
		t.Fatalf("DELETE /v1/sandboxes/sbx_1: handled %v err %v code %d", handled, err, w.Code)
	}
	if c := own.seen()[1]; c.method != http.MethodDelete || c.path != "/v1/sandboxes/sbx_1" {
		t.Fatalf("owner saw %+v", c)
	}
}

// Calls about a conversation go to the node of its sandboxes (the chat's
// code runs there); E2B's paths name sandboxes too.
func TestRouteConversationsChatAndE2B(t *testing.T) {
	st := newFakeStore()
	own := newOwner(t, nil)
	st.putNode(upNode("b", own.URL, 0, 0))
	st.putSandbox(store.Sandbox{ID: "sbx_1", State: api.StateRunning, Node: "b"})
	st.putSandbox(store.Sandbox{ID: "sbx_2", State: api.StateRunning, Node: "a"})
	st.convs["conv_b"] = store.Conversation{ID: "conv_b", SandboxID: "sbx_1"}
	st.convs["conv_a"] = store.Conversation{ID: "conv_a", SandboxID: "sbx_2"}
	st.convs["conv_new"] = store.Conversation{ID: "conv_new"}
	n := newTestNode(t, "a", "http://a.invalid", st, &fakeManager{id: "a"}, "")
	for _, tc := range []struct {
		method, target, body string
		forwarded            bool
	}{
		{http.MethodPost, "/v1/chat", `{"question":"mean?","conversation_id":"conv_b"}`, true},
		{http.MethodPost, "/v1/chat", `{"question":"mean?","conversation_id":"conv_a"}`, false},
		{http.MethodPost, "/v1/chat", `{"question":"a new one"}`, false},
		{http.MethodPost, "/v1/chat", `not json`, false},
		{http.MethodPost, "/v1/chat", `{"conversation_id":"conv_unknown"}`, false},
		{http.MethodGet, "/v1/conversations/conv_b", "", true},
		{http.MethodDelete, "/v1/conversations/conv_b", "", true},
		{http.MethodGet, "/v1/conversations/conv_b/notebook", "", true},
		{http.MethodGet, "/v1/conversations/conv_a", "", false},
		{http.MethodGet, "/v1/conversations/conv_new", "", false},
		{http.MethodGet, "/v1/conversations", "", false},
		{http.MethodGet, "/sandboxes/sbx_1", "", true},
		{http.MethodPost, "/sandboxes/sbx_1/pause", "", true},
		{http.MethodPost, "/v2/sandboxes/sbx_1/connect", "{}", true},
		{http.MethodGet, "/v2/sandboxes", "", false},
		{http.MethodGet, "/sandboxes/sbx_2", "", false},
	} {
		before := len(own.seen())
		_, handled, err := route(n, tc.method, tc.target, strings.NewReader(tc.body), nil)
		if err != nil || handled != tc.forwarded {
			t.Fatalf("%s %s %s: handled %v err %v, want forwarded %v", tc.method, tc.target, tc.body, handled, err, tc.forwarded)
		}
		if tc.forwarded {
			c := own.seen()[before]
			if c.path != tc.target || string(c.body) != tc.body {
				t.Fatalf("%s %s: owner saw %+v", tc.method, tc.target, c)
			}
		}
	}
}

// E2B's data plane names its sandbox in a header; RouteSandbox takes it.
func TestRouteSandboxByRef(t *testing.T) {
	st := newFakeStore()
	own := newOwner(t, nil)
	st.putNode(upNode("b", own.URL, 0, 0))
	st.putSandbox(store.Sandbox{ID: "sbx_1", State: api.StateRunning, Node: "b"})
	n := newTestNode(t, "a", "http://a.invalid", st, &fakeManager{id: "a"}, "")
	req := httptest.NewRequest(http.MethodPost, "/execute", strings.NewReader(`{"code":"1+1"}`))
	w := httptest.NewRecorder()
	if handled, err := n.RouteSandbox(w, req, "sbx_1"); err != nil || !handled || w.Code != http.StatusTeapot {
		t.Fatalf("RouteSandbox: handled %v err %v code %d", handled, err, w.Code)
	}
	if handled, err := n.RouteSandbox(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/health", nil), ""); handled || err != nil {
		t.Fatalf("no ref: handled %v err %v", handled, err)
	}
}

func TestRouteNeverForwardsAForwardedCall(t *testing.T) {
	st := newFakeStore()
	own := newOwner(t, nil)
	st.putNode(upNode("b", own.URL, 1<<40, 0))
	st.putNode(upNode("a", "http://a.invalid", 1, 0))
	st.putSandbox(store.Sandbox{ID: "sbx_1", State: api.StateRunning, Node: "b"})
	n := newTestNode(t, "a", "http://a.invalid", st, &fakeManager{id: "a"}, "")
	hdr := map[string]string{ForwardedHeader: "c"}
	for _, tc := range []struct{ method, target, body string }{
		{http.MethodGet, "/v1/sandboxes/sbx_1", ""},
		{http.MethodPost, "/v1/sandboxes", `{"node":"b"}`},
		{http.MethodPost, "/v1/sandboxes", `{}`},
	} {
		_, handled, err := route(n, tc.method, tc.target, strings.NewReader(tc.body), hdr)
		if handled || err != nil {
			t.Fatalf("%s %s forwarded: handled %v err %v", tc.method, tc.target, handled, err)
		}
	}
	if len(own.seen()) != 0 {
		t.Fatal("a forwarded call was forwarded again")
	}
}

func TestRouteNotHandled(t *testing.T) {
	st := newFakeStore()
	own := newOwner(t, nil)
	st.putNode(upNode("b", own.URL, 0, 0))
	st.putSandbox(store.Sandbox{ID: "sbx_mine", State: api.StateRunning, Node: "a"})
	st.putSandbox(store.Sandbox{ID: "sbx_legacy", State: api.StateRunning, Node: ""})
	st.putSandbox(store.Sandbox{ID: "sbx_b", State: api.StateRunning, Node: "b"})
	mgr := &fakeManager{id: "a"}
	n := newTestNode(t, "a", "http://a.invalid", st, mgr, "")
	for _, target := range []string{
		"/v1/sandboxes/sbx_mine",
		"/v1/sandboxes/sbx_mine/exec",
		"/v1/sandboxes/sbx_legacy",
		"/v1/sandboxes/sbx_nope/files",
		"/v1/sandboxes",
		"/v1/nodes",
		"/v1/images/sbx_b",
		"/v1/sandboxesX/sbx_b",
		"/healthz",
	} {
		_, handled, err := route(n, http.MethodGet, target, nil, nil)
		if handled || err != nil {
			t.Errorf("GET %s: handled %v err %v, want served here", target, handled, err)
		}
	}
	if len(own.seen()) != 0 {
		t.Fatalf("owner saw %+v", own.seen())
	}
	if a, l, _ := mgr.snapshot(); len(a)+len(l) != 0 {
		t.Fatalf("manager called: adopts %v lost %v", a, l)
	}
}

// TestRouteStreamsPieceByPiece: a streamed response reaches the client piece
// by piece before the upstream finishes. Server-sent events (and any chunked
// response) ReverseProxy flushes by itself; a response that declares its
// length but is written slowly needs FlushInterval -1.
func TestRouteStreamsPieceByPiece(t *testing.T) {
	for _, tc := range []struct {
		name, contentType string
		declareLength     bool
	}{
		{"server-sent events", "text/event-stream", false},
		{"declared length", "text/plain", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testStream(t, tc.contentType, tc.declareLength) })
	}
}

func testStream(t *testing.T, contentType string, declareLength bool) {
	st := newFakeStore()
	next := make(chan struct{})
	finished := make(chan struct{})
	const pieces = 3
	piece := func(i int) string { return "data: piece " + string(rune('0'+i)) + "\n\n" }
	events := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(finished)
		w.Header().Set("Content-Type", contentType)
		if declareLength {
			w.Header().Set("Content-Length", strconv.Itoa(pieces*len(piece(0))))
		}
		w.WriteHeader(http.StatusOK)
		for i := 0; i < pieces; i++ {
			io.WriteString(w, piece(i))
			w.(http.Flusher).Flush()
			if i < pieces-1 {
				// The next piece waits until the client has this one: a
				// proxy that buffers would never deliver it.
				select {
				case <-next:
				case <-time.After(5 * time.Second):
					return
				case <-r.Context().Done():
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	own := newOwner(t, events)
	st.putNode(upNode("b", own.URL, 0, 0))
	st.putSandbox(store.Sandbox{ID: "sbx_1", State: api.StateRunning, Node: "b"})
	n := newTestNode(t, "a", "http://a.invalid", st, &fakeManager{id: "a"}, "")
	fe := frontend(t, n)

	resp, err := http.Get(fe.URL + "/v1/sandboxes/sbx_1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != contentType {
		t.Fatalf("Content-Type %q", ct)
	}
	lines := make(chan string)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				select {
				case lines <- sc.Text():
				case <-quit:
					return
				}
			}
		}
	}()
	for i := 0; i < pieces; i++ {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("stream ended before piece %d", i)
			}
			if want := strings.TrimSpace(piece(i)); l != want {
				t.Fatalf("piece %d = %q, want %q", i, l, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("piece %d did not arrive before the upstream finished (buffered?)", i)
		}
		if i < pieces-1 {
			select {
			case <-finished:
				t.Fatal("the upstream finished before the client read all but the last piece")
			default:
			}
			next <- struct{}{}
		}
	}
	if c := own.seen(); len(c) != 1 || c[0].fwd != "a" {
		t.Fatalf("owner saw %+v", c)
	}
}

func TestRouteWebSocketPassesThrough(t *testing.T) {
	st := newFakeStore()
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), msg...)); err != nil {
				return
			}
		}
	})
	own := newOwner(t, echo)
	st.putNode(upNode("b", own.URL, 0, 0))
	st.putSandbox(store.Sandbox{ID: "sbx_1", State: api.StateRunning, Node: "b"})
	n := newTestNode(t, "a", "http://a.invalid", st, &fakeManager{id: "a"}, "")
	fe := frontend(t, n)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer fk_secret")
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(fe.URL, "http")+"/v1/sandboxes/sbx_1/pty?cols=80",
		&websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatalf("dial through the routing node: %v", err)
	}
	defer c.CloseNow()
	for _, m := range []string{"hello", "again"} {
		if err := c.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
		typ, got, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if typ != websocket.MessageText || string(got) != "echo: "+m {
			t.Fatalf("got %v %q", typ, got)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
	calls := own.seen()
	if len(calls) != 1 || calls[0].path != "/v1/sandboxes/sbx_1/pty" || calls[0].query != "cols=80" ||
		calls[0].auth != "Bearer fk_secret" || calls[0].fwd != "a" {
		t.Fatalf("owner saw %+v", calls)
	}
}

func TestRouteDownOwner(t *testing.T) {
	for _, tc := range []struct {
		name      string
		state     api.SandboxState
		onLost    string
		inReg     bool
		wantAdopt bool
		wantLost  bool
		resume    bool
	}{
		{"suspended is adopted", api.StateSuspended, "", true, true, false, false},
		{"running is lost (report)", api.StateRunning, OnLostReport, true, false, true, false},
		{"running is lost (resume)", api.StateRunning, OnLostResume, true, false, true, true},
		{"creating is lost", api.StateCreating, "", true, false, true, false},
		{"suspending is lost", api.StateSuspending, "", true, false, true, false},
		{"resuming is lost", api.StateResuming, "", true, false, true, false},
		{"running, owner gone from the registry", api.StateRunning, "", false, false, true, false},
		{"suspended, owner gone from the registry", api.StateSuspended, "", false, true, false, false},
		{"terminated is left alone", api.StateTerminated, "", true, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			own := newOwner(t, nil)
			b := downNode("b", own.URL, time.Minute)
			if tc.inReg {
				st.putNode(b)
			}
			st.putSandbox(store.Sandbox{ID: "sbx_1", State: tc.state, Node: "b"})
			mgr := &fakeManager{id: "a"}
			n := newTestNode(t, "a", "http://a.invalid", st, mgr, tc.onLost)
			_, handled, err := route(n, http.MethodGet, "/v1/sandboxes/sbx_1", nil, nil)
			if handled || err != nil {
				t.Fatalf("handled %v err %v, want served here", handled, err)
			}
			if len(own.seen()) != 0 {
				t.Fatal("forwarded to a down node")
			}
			adopts, lost, _ := mgr.snapshot()
			if tc.wantAdopt != (len(adopts) == 1) || len(adopts) > 1 {
				t.Fatalf("adopts %v", adopts)
			}
			if tc.wantAdopt && adopts[0] != (adoptCall{"sbx_1", "b"}) {
				t.Fatalf("Adopt(%+v), want (sbx_1, b)", adopts[0])
			}
			if tc.wantLost != (len(lost) == 1) || len(lost) > 1 {
				t.Fatalf("lost %v", lost)
			}
			if tc.wantLost {
				var hb time.Time
				if tc.inReg {
					hb = b.HeartbeatAt
				}
				if lost[0].node != "b" || !lost[0].heartbeat.Equal(hb) || lost[0].resume != tc.resume {
					t.Fatalf("NodeLost(%+v), want (b, %v, %v)", lost[0], hb, tc.resume)
				}
			}
		})
	}
}

func TestRouteDownOwnerManagerErrors(t *testing.T) {
	st := newFakeStore()
	st.putNode(downNode("b", "http://b.invalid", time.Minute))
	st.putSandbox(store.Sandbox{ID: "sbx_s", State: api.StateSuspended, Node: "b"})
	st.putSandbox(store.Sandbox{ID: "sbx_r", State: api.StateRunning, Node: "b"})
	mgr := &fakeManager{id: "a", adoptErr: errdefs.Busy("adopting"), lostErr: errdefs.Conflict("racing")}
	n := newTestNode(t, "a", "http://a.invalid", st, mgr, "")
	if _, handled, err := route(n, http.MethodGet, "/v1/sandboxes/sbx_s", nil, nil); handled || !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("adopt failing: handled %v err %v", handled, err)
	}
	if _, handled, err := route(n, http.MethodGet, "/v1/sandboxes/sbx_r", nil, nil); handled || !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("NodeLost failing: handled %v err %v", handled, err)
	}
}

func TestRouteOwnerRefusingConnections(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	addr := dead.URL
	dead.Close()
	st := newFakeStore()
	st.putNode(upNode("b", addr, 0, 0))
	st.putSandbox(store.Sandbox{ID: "sbx_1", State: api.StateRunning, Node: "b"})
	n := newTestNode(t, "a", "http://a.invalid", st, &fakeManager{id: "a"}, "")
	w, handled, err := route(n, http.MethodGet, "/v1/sandboxes/sbx_1/files?path=/", nil, nil)
	if !handled || err != nil {
		t.Fatalf("handled %v err %v, want handled with a 503", handled, err)
	}
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", w.Code)
	}
	if w.Header().Get("Retry-After") == "" || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("headers %v", w.Header())
	}
	var e api.Error
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	if e.Error.Code != "unavailable" || !strings.Contains(e.Error.Message, "b") || errdefs.FromCode(e.Error.Code) != errdefs.ErrUnavailable {
		t.Fatalf("error %+v", e.Error)
	}
	// The raw JSON shape: {"error":{"code":...,"message":...}}.
	var raw map[string]map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil || raw["error"]["code"] != "unavailable" || raw["error"]["message"] == "" {
		t.Fatalf("raw body %q", w.Body.String())
	}
}

// ---- routeCreate / place ----

func TestRouteCreateNamedNode(t *testing.T) {
	st := newFakeStore()
	own := newOwner(t, nil)
	st.putNode(upNode("a", "http://a.invalid", 1<<30, 0))
	st.putNode(upNode("b", own.URL, 1<<30, 0))
	st.putNode(downNode("c", "http://c.invalid", time.Minute))
	n := newTestNode(t, "a", "http://a.invalid", st, &fakeManager{id: "a"}, "")
	fe := frontend(t, n)

	post := func(body io.Reader) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, fe.URL+"/v1/sandboxes?x=1", body)
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	// Another up node: forwarded with the body byte for byte (odd spacing,
	// unknown fields and all), with a length and chunked.
	body := "{ \"node\" : \"b\",\n\t\"image\":\"python\", \"unknown\": [1, 2.50, {\"k\":null}] }\n"
	for _, rd := range []io.Reader{strings.NewReader(body), io.MultiReader(strings.NewReader(body))} {
		resp, got := post(rd)
		if resp.StatusCode != http.StatusTeapot || got != "owner says hi" {
			t.Fatalf("create on b: %d %q", resp.StatusCode, got)
		}
	}
	calls := own.seen()
	if len(calls) != 2 {
		t.Fatalf("owner saw %d calls", len(calls))
	}
	for _, c := range calls {
		if !bytes.Equal(c.body, []byte(body)) || c.method != http.MethodPost || c.path != "/v1/sandboxes" ||
			c.query != "x=1" || c.auth != "Bearer k" || c.fwd != "a" {
			t.Fatalf("owner saw %+v", c)
		}
	}

	// This node: served here, with the body intact for the local handler.
	local := `{"node":"a","image":"python"}`
	if resp, got := post(strings.NewReader(local)); resp.StatusCode != http.StatusOK || got != "local:"+local {
		t.Fatalf("create on a: %d %q", resp.StatusCode, got)
	}

	// A down node, an unknown one.
	_, handled, err := route(n, http.MethodPost, "/v1/sandboxes", strings.NewReader(`{"node":"c"}`), nil)
	if handled || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("create on a down node: handled %v err %v, want ErrUnavailable", handled, err)
	}
	_, handled, err = route(n, http.MethodPost, "/v1/sandboxes", strings.NewReader(`{"node":"zz"}`), nil)
	if handled || !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("create on an unknown node: handled %v err %v, want ErrNotFound", handled, err)
	}
	// A pool with a node naming another: forwarded.
	if resp, _ := post(strings.NewReader(`{"pool":"py","node":"b"}`)); resp.StatusCode != http.StatusTeapot {
		t.Fatalf("pool create on b: %d", resp.StatusCode)
	}
	if len(own.seen()) != 3 {
		t.Fatalf("owner saw %d calls, want 3", len(own.seen()))
	}
}

func TestRouteCreateStaysLocal(t *testing.T) {
	st := newFakeStore()
	own := newOwner(t, nil)
	st.putNode(upNode("a", "http://a.invalid", 1<<30, 1<<30)) // full
	st.putNode(upNode("b", own.URL, 64<<30, 0))               // empty
	n := newTestNode(t, "a", "http://a.invalid", st, &fakeManager{id: "a"}, "")

	for _, body := range []string{
		`{"pool":"py"}`,   // pools are per node
		`{"image": nope}`, // malformed: the local handler explains
		`[1,2]`,
		`{"node": 7}`,
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes", strings.NewReader(body))
		handled, err := n.Route(httptest.NewRecorder(), r)
		if handled || err != nil {
			t.Fatalf("%s: handled %v err %v, want served here", body, handled, err)
		}
		got, _ := io.ReadAll(r.Body)
		if string(got) != body {
			t.Fatalf("%s: the local handler reads %q", body, got)
		}
	}
	if len(own.seen()) != 0 {
		t.Fatalf("owner saw %+v", own.seen())
	}
	// With no pool and no node, the empty node wins.
	if _, handled, err := route(n, http.MethodPost, "/v1/sandboxes", strings.NewReader(`{"image":"x"}`), nil); !handled || err != nil {
		t.Fatalf("placed create: handled %v err %v", handled, err)
	}
	// So does an empty body.
	if _, handled, err := route(n, http.MethodPost, "/v1/sandboxes", nil, nil); !handled || err != nil {
		t.Fatalf("placed create, empty body: handled %v err %v", handled, err)
	}
	// Only POST creates: a GET of the list is served here.
	if _, handled, err := route(n, http.MethodGet, "/v1/sandboxes", nil, nil); handled || err != nil {
		t.Fatalf("GET /v1/sandboxes: handled %v err %v", handled, err)
	}
}

func TestRouteCreateBodyLimit(t *testing.T) {
	st := newFakeStore()
	own := newOwner(t, nil)
	st.putNode(upNode("b", own.URL, 0, 0))
	n := newTestNode(t, "a", "http://a.invalid", st, &fakeManager{id: "a"}, "")

	// Exactly the limit: read and served here (it names this node).
	head := `{"node":"a","image":"x"}`
	exact := head + strings.Repeat(" ", maxCreateBody-len(head))
	r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes", strings.NewReader(exact))
	if handled, err := n.Route(httptest.NewRecorder(), r); handled || err != nil {
		t.Fatalf("body of exactly %d bytes: handled %v err %v", maxCreateBody, handled, err)
	}
	if got, _ := io.ReadAll(r.Body); len(got) != maxCreateBody || r.ContentLength != maxCreateBody {
		t.Fatalf("the local handler reads %d bytes (ContentLength %d)", len(got), r.ContentLength)
	}
	// One byte over: refused.
	over := `{"node":"b","image":"x"}` + strings.Repeat(" ", maxCreateBody)
	_, handled, err := route(n, http.MethodPost, "/v1/sandboxes", strings.NewReader(over), nil)
	if handled || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("body over 1 MiB: handled %v err %v, want ErrInvalidArgument", handled, err)
	}
	if len(own.seen()) != 0 {
		t.Fatal("an oversized create was forwarded")
	}
}

func TestPlaceByFreeMemory(t *testing.T) {
	const G = int64(1 << 30)
	for _, tc := range []struct {
		name  string
		nodes []store.Node
		want  string // "" = this node
	}{
		{"most free wins", []store.Node{upNode("a", "http://a", 4*G, 3*G), upNode("b", "http://b", 16*G, 8*G), upNode("c", "http://c", 16*G, 4*G)}, "c"},
		{"self within 10% stays", []store.Node{upNode("a", "http://a", 95*G, 0), upNode("b", "http://b", 100*G, 0)}, ""},
		{"self exactly 10% below stays", []store.Node{upNode("a", "http://a", 90*G, 0), upNode("b", "http://b", 100*G, 0)}, ""},
		{"self just over 10% below moves", []store.Node{upNode("a", "http://a", 89*G, 0), upNode("b", "http://b", 100*G, 0)}, "b"},
		{"self the most free", []store.Node{upNode("a", "http://a", 100*G, 0), upNode("b", "http://b", 10*G, 0)}, ""},
		{"down node ignored", []store.Node{upNode("a", "http://a", 1*G, 0), downNode("b", "http://b", time.Minute), upNode("c", "http://c", 2*G, 0)}, "c"},
		{"tie goes to the smaller id", []store.Node{upNode("a", "http://a", 1*G, 0), upNode("c", "http://c", 8*G, 0), upNode("b", "http://b", 8*G, 0)}, "b"},
		{"alone", []store.Node{upNode("a", "http://a", 1*G, 0)}, ""},
		{"all others down", []store.Node{upNode("a", "http://a", 1*G, 0), downNode("b", "http://b", time.Minute)}, ""},
		{"self not registered", []store.Node{upNode("b", "http://b", 100*G, 0)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			for _, x := range tc.nodes {
				if x.ID == "b" && x.MemoryBytes == 0 && x.HeartbeatAt.Before(time.Now().Add(-testTimeout)) {
					x.MemoryBytes = 1 << 50 // a down node with the most memory still loses
				}
				st.putNode(x)
			}
			n := newTestNode(t, "a", "http://a", st, &fakeManager{id: "a"}, "")
			if id := placedOn(t, n, &api.CreateSandboxRequest{Image: "x"}); id != tc.want {
				t.Fatalf("placed on %q, want %q", id, tc.want)
			}
		})
	}
}

// placedOn is the node place picks for req ("" for this one).
func placedOn(t *testing.T, n *Node, req *api.CreateSandboxRequest) string {
	t.Helper()
	got, err := n.place(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		return ""
	}
	return got.ID
}

// A restore prefers the node that took its snapshot (its files are likely
// in that node's cache) when that node has room within 10% of the best.
func TestPlaceRestoreNearItsSnapshot(t *testing.T) {
	const G = int64(1 << 30)
	for _, tc := range []struct {
		name     string
		nodes    []store.Node
		snapNode string
		want     string
	}{
		{"the snapshot's node, though another is freer", []store.Node{upNode("a", "http://a", 50*G, 0), upNode("b", "http://b", 95*G, 0), upNode("c", "http://c", 100*G, 0)}, "b", "b"},
		{"this node took it", []store.Node{upNode("a", "http://a", 95*G, 0), upNode("c", "http://c", 100*G, 0)}, "a", ""},
		{"the snapshot's node is short of room", []store.Node{upNode("a", "http://a", 50*G, 0), upNode("b", "http://b", 20*G, 0), upNode("c", "http://c", 100*G, 0)}, "b", "c"},
		{"the snapshot's node is down", []store.Node{upNode("a", "http://a", 50*G, 0), downNode("b", "http://b", time.Minute), upNode("c", "http://c", 100*G, 0)}, "b", "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			for _, x := range tc.nodes {
				if x.HeartbeatAt.Before(time.Now().Add(-testTimeout)) {
					x.MemoryBytes = 200 * G
				}
				st.putNode(x)
			}
			st.putSandbox(store.Sandbox{ID: "sbx_src", State: api.StateRunning, Node: tc.snapNode})
			st.snaps["snap_1"] = store.Snapshot{ID: "snap_1", SandboxID: "sbx_src"}
			n := newTestNode(t, "a", "http://a", st, &fakeManager{id: "a"}, "")
			if id := placedOn(t, n, &api.CreateSandboxRequest{SnapshotID: "snap_1"}); id != tc.want {
				t.Fatalf("placed on %q, want %q", id, tc.want)
			}
		})
	}
}

// A suspended session whose node is up but full moves to the node with
// the most room and is forwarded there (or served here when that is this
// node); one whose node has room stays.
func TestRouteMovesSuspendedSessionToRoom(t *testing.T) {
	const G = int64(1 << 30)
	for _, tc := range []struct {
		name      string
		ownerFree int64
		nodes     []store.Node
		wantMove  string // "" no move
		forwarded string // the node the call goes to ("" served here)
	}{
		{"owner has room", 4 * G, []store.Node{upNode("c", "", 64*G, 0)}, "", "b"},
		{"owner full, c has room", 1 * G, []store.Node{upNode("c", "", 64*G, 0)}, "c", "c"},
		{"owner full, this node has room", 1 * G, []store.Node{upNode("a", "http://a.invalid", 64*G, 0)}, "a", ""},
		{"owner full, nobody has room", 1 * G, []store.Node{upNode("c", "", 1*G, 0)}, "", "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore()
			ownerSrv, otherSrv := newOwner(t, nil), newOwner(t, nil)
			st.putNode(upNode("b", ownerSrv.URL, tc.ownerFree, 0))
			for _, x := range tc.nodes {
				if x.Address == "" {
					x.Address = otherSrv.URL
				}
				st.putNode(x)
			}
			st.putSandbox(store.Sandbox{ID: "sbx_1", State: api.StateSuspended, Node: "b", Spec: store.Spec{MemoryMB: 2048}})
			mgr := &fakeManager{id: "a"}
			n := newTestNode(t, "a", "http://a.invalid", st, mgr, "")
			// A look at it moves nothing.
			if _, _, err := route(n, http.MethodGet, "/v1/sandboxes/sbx_1", nil, nil); err != nil || len(mgr.moves) != 0 {
				t.Fatalf("GET of the sandbox: moves %v, err %v", mgr.moves, err)
			}
			ownerSrv.reset()
			_, handled, err := route(n, http.MethodPost, "/v1/sandboxes/sbx_1/code", strings.NewReader(`{"code":"x"}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantMove == "" && len(mgr.moves) != 0 || tc.wantMove != "" && (len(mgr.moves) != 1 || mgr.moves[0] != [3]string{"sbx_1", "b", tc.wantMove}) {
				t.Fatalf("moves %v, want to %q", mgr.moves, tc.wantMove)
			}
			switch tc.forwarded {
			case "":
				if handled {
					t.Fatal("forwarded, want served here")
				}
			case "b":
				if !handled || len(ownerSrv.seen()) != 1 {
					t.Fatalf("not forwarded to the owner (handled %v)", handled)
				}
			default:
				if !handled || len(otherSrv.seen()) != 1 || len(ownerSrv.seen()) != 0 {
					t.Fatalf("not forwarded to %s (handled %v)", tc.forwarded, handled)
				}
			}
		})
	}
}

// ---- settleDown / loop ----

func TestSettleDownOncePerHeartbeat(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	hb1 := time.Now().UTC().Add(-time.Minute)
	st.putNode(store.Node{ID: "a", Address: "http://a", HeartbeatAt: hb1}) // this node, even if its row is old
	st.putNode(store.Node{ID: "b", Address: "http://b", HeartbeatAt: hb1})
	st.putNode(upNode("c", "http://c", 0, 0))
	mgr := &fakeManager{id: "a"}
	n := newTestNode(t, "a", "http://a", st, mgr, OnLostResume)
	tick := func() {
		t.Helper()
		if _, err := n.refresh(ctx); err != nil {
			t.Fatal(err)
		}
		n.settleDown(ctx)
	}
	for i := 0; i < 4; i++ {
		tick()
	}
	_, lost, _ := mgr.snapshot()
	if len(lost) != 1 || lost[0].node != "b" || !lost[0].heartbeat.Equal(hb1) || !lost[0].resume {
		t.Fatalf("after 4 ticks: NodeLost calls %+v, want one (b, %v, resume)", lost, hb1)
	}

	// b comes back: nothing to settle.
	st.putNode(upNode("b", "http://b", 0, 0))
	tick()
	tick()
	if _, lost, _ = mgr.snapshot(); len(lost) != 1 {
		t.Fatalf("b up: NodeLost calls %+v", lost)
	}
	// b goes down again with a new heartbeat: settled again, once.
	hb2 := time.Now().UTC().Add(-30 * time.Second)
	st.putNode(store.Node{ID: "b", Address: "http://b", HeartbeatAt: hb2})
	tick()
	tick()
	_, lost, _ = mgr.snapshot()
	if len(lost) != 2 || lost[1].node != "b" || !lost[1].heartbeat.Equal(hb2) {
		t.Fatalf("b down again: NodeLost calls %+v", lost)
	}
	for _, l := range lost {
		if l.node == "a" || l.node == "c" {
			t.Fatalf("settled %s", l.node)
		}
	}
}

func TestSettleDownRetriesAfterError(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	st.putNode(downNode("b", "http://b", time.Minute))
	mgr := &fakeManager{id: "a", lostErr: errors.New("store hiccup")}
	n := newTestNode(t, "a", "http://a", st, mgr, "")
	n.refresh(ctx)
	n.settleDown(ctx)
	mgr.mu.Lock()
	mgr.lostErr = nil
	mgr.mu.Unlock()
	n.settleDown(ctx)
	n.settleDown(ctx)
	if _, lost, _ := mgr.snapshot(); len(lost) != 2 || lost[1].resume {
		t.Fatalf("NodeLost calls %+v, want a failed one then one that sticks (report)", lost)
	}
}

func TestLoopHeartbeatsAndSettlesOnce(t *testing.T) {
	st := newFakeStore()
	hb := time.Now().UTC().Add(-time.Minute)
	st.putNode(store.Node{ID: "b", Address: "http://b", HeartbeatAt: hb})
	mgr := &fakeManager{id: "a", cap: store.Node{CPUs: 2}}
	n, err := New(Config{NodeID: "a", Advertise: "http://a", Timeout: 2 * time.Second, Logger: quiet}, st, mgr)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three loop ticks", func() bool { _, _, s := mgr.snapshot(); return s >= 3 })
	n.Close()
	_, lost, _ := mgr.snapshot()
	if len(lost) != 1 || lost[0].node != "b" || !lost[0].heartbeat.Equal(hb) {
		t.Fatalf("NodeLost calls over several ticks: %+v, want exactly one for b", lost)
	}
	hbs := st.heartbeatLog()
	if len(hbs) < 4 { // Start's and one a tick
		t.Fatalf("%d heartbeats, want at least 4", len(hbs))
	}
	for i, h := range hbs {
		if h.ID != "a" || h.CPUs != 2 || !h.StartedAt.Equal(hbs[0].StartedAt) || (i > 0 && h.HeartbeatAt.Before(hbs[i-1].HeartbeatAt)) {
			t.Fatalf("heartbeat %d = %+v", i, h)
		}
	}
}

// ---- Nodes ----

func TestNodesList(t *testing.T) {
	st := newFakeStore()
	c := upNode("c", "http://c", 8<<30, 1<<30)
	c.CPUs, c.DiskBytes, c.DiskFreeBytes, c.Running = 4, 100, 50, 2
	st.putNode(c)
	st.putNode(downNode("b", "http://b", time.Minute))
	st.putNode(upNode("a", "http://a", 0, 0))
	n := newTestNode(t, "a", "http://a", st, &fakeManager{id: "a"}, "")
	got, err := n.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != "a" || got[1].ID != "b" || got[2].ID != "c" {
		t.Fatalf("Nodes = %+v, want a, b, c", got)
	}
	if got[0].State != api.NodeUp || !got[0].Self || got[1].State != api.NodeDown || got[1].Self || got[2].State != api.NodeUp || got[2].Self {
		t.Fatalf("states/self: %+v", got)
	}
	g := got[2]
	if g.Address != "http://c" || g.CPUs != 4 || g.MemoryBytes != 8<<30 || g.MemoryReservedBytes != 1<<30 || g.DiskBytes != 100 ||
		g.DiskFreeBytes != 50 || g.Running != 2 || !g.StartedAt.Equal(c.StartedAt) || !g.HeartbeatAt.Equal(c.HeartbeatAt) {
		t.Fatalf("c = %+v", g)
	}
}

// A Jupyter kernel's id names its sandbox: calls about it go to that
// sandbox's node, and so does a kernel start in an existing sandbox.
func TestRouteJupyterKernels(t *testing.T) {
	b32 := base32.StdEncoding.WithPadding(base32.NoPadding)
	onB := "sbx_" + strings.ToLower(b32.EncodeToString([]byte("kernel-on-b!")))
	onA := "sbx_" + strings.ToLower(b32.EncodeToString([]byte("kernel-on-a!")))
	st := newFakeStore()
	own := newOwner(t, nil)
	st.putNode(upNode("b", own.URL, 0, 0))
	st.putSandbox(store.Sandbox{ID: onB, State: api.StateRunning, Node: "b"})
	st.putSandbox(store.Sandbox{ID: onA, State: api.StateRunning, Node: "a"})
	n := newTestNode(t, "a", "http://a.invalid", st, &fakeManager{id: "a"}, "")
	kernel := func(sb string, ctx uint32) string {
		id, err := kernelid.Format(sb, ctx)
		if err != nil {
			t.Fatal(err)
		}
		return "/jupyter/api/kernels/" + id
	}
	startInB := `{"name":"python3","env":{"KERNEL_FORKBOX_SANDBOX":"` + onB + `"}}`
	for _, tc := range []struct {
		method, target, body string
		forwarded            bool
	}{
		{http.MethodGet, kernel(onB, 0), "", true},
		{http.MethodDelete, kernel(onB, 7), "", true},
		{http.MethodPost, kernel(onB, 7) + "/interrupt", "", true},
		{http.MethodGet, kernel(onB, 0) + "/channels", "", true},
		{http.MethodGet, kernel(onA, 0), "", false},
		{http.MethodGet, "/jupyter/api/kernels/not-a-kernel-id", "", false},
		{http.MethodPost, "/jupyter/api/kernels", startInB, true},
		{http.MethodPost, "/jupyter/api/kernels", `{"name":"python3"}`, false},
		{http.MethodPost, "/jupyter/api/kernels", `{"env":{"KERNEL_FORKBOX_SANDBOX":"` + onA + `"}}`, false},
		{http.MethodPost, "/jupyter/api/kernels", `not json`, false},
		{http.MethodGet, "/jupyter/api/kernels", "", false},
		{http.MethodGet, "/jupyter/api/sessions", "", false},
	} {
		before := len(own.seen())
		_, handled, err := route(n, tc.method, tc.target, strings.NewReader(tc.body), nil)
		if err != nil || handled != tc.forwarded {
			t.Fatalf("%s %s %s: handled %v err %v, want forwarded %v", tc.method, tc.target, tc.body, handled, err, tc.forwarded)
		}
		if tc.forwarded {
			c := own.seen()[before]
			if c.path != tc.target || string(c.body) != tc.body || c.fwd != "a" {
				t.Fatalf("%s %s: owner saw %+v", tc.method, tc.target, c)
			}
		}
	}
}
