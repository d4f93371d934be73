// Package cluster makes daemons that share one metadata store (PostgreSQL)
// and one blob store (S3) a cluster of equal nodes, with no coordinator of
// its own:
//
//   - Every node registers itself in the store and heartbeats (its address
//     and capacity: CPUs, memory, disk, running sandboxes). A node whose
//     heartbeat is older than the timeout is down.
//   - Any node's API accepts any call. A call for a sandbox on another node
//     that is up is forwarded there (a reverse proxy: streams, server-sent
//     events and WebSockets pass through); the owner authenticates it with
//     the same key, since keys live in the shared store. A forwarded call is
//     never forwarded again.
//   - A create goes to the node it names, else to the node with the most
//     free memory (this one when it is within 10% of the best, to save the
//     hop; a restore to the node that took its snapshot, which likely has
//     it cached, when that one is within 10% too); a create from a warm
//     pool stays on the node that got it (pools are per node: every node
//     keeps Size ready sandboxes of every pool).
//   - A suspended sandbox of a node that is down is adopted by the node that
//     gets its next call and resumed there from the shared blob store; one
//     whose node is up but has no memory left for it is moved to the node
//     with the most room and resumed there. The
//     running sandboxes of a down node are marked lost (or, with
//     --on-node-lost=resume, suspended from their last suspend image) by the
//     first node that notices: never silently gone.
//
// The store's row locks make each of these steps happen once however many
// nodes race for it (an adoption, a lost mark, a pool claim).
package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/jupyter/kernelid"
	"github.com/forkbox/forkbox/internal/store"
)

// ForwardedHeader marks a call one node forwarded to another (its value is
// the forwarding node's id): it is served where it arrives.
const ForwardedHeader = "X-Forkbox-Forwarded-By"

// On-node-lost policies.
const (
	OnLostReport = "report"
	OnLostResume = "resume"
)

// DefaultTimeout is how old a heartbeat may be before its node is down.
const DefaultTimeout = 15 * time.Second

// Config configures a node.
type Config struct {
	// NodeID names this node; unique in the cluster.
	NodeID string
	// Advertise is the base URL other nodes reach this node's API at.
	Advertise string
	// Timeout: a node whose last heartbeat is older is down (default
	// DefaultTimeout). Nodes heartbeat every Timeout/5.
	Timeout time.Duration
	// OnLost is what becomes of a down node's running sandboxes:
	// OnLostReport (default) or OnLostResume.
	OnLost string
	Logger *slog.Logger
}

// Manager is what a node needs of its sandbox manager.
type Manager interface {
	Node() string
	Capacity() store.Node
	Adopt(ctx context.Context, id, from string) error
	Move(ctx context.Context, id, from, to string) (bool, error)
	NodeLost(ctx context.Context, node string, heartbeat time.Time, resume bool) (lost, resumable int, err error)
	SyncPools(ctx context.Context) error
}

// Store is what a node needs of the metadata store.
type Store interface {
	store.NodeStore
	Get(ctx context.Context, ref string) (*store.Sandbox, error)
	GetConversation(ctx context.Context, id string) (*store.Conversation, error)
	GetSnapshot(ctx context.Context, id string) (*store.Snapshot, error)
}

// Node is one node of the cluster, running.
type Node struct {
	cfg     Config
	st      Store
	mgr     Manager
	log     *slog.Logger
	started time.Time
	self    *url.URL

	mu    sync.Mutex
	nodes map[string]*store.Node // the store's, as of the last refresh
	seen  time.Time              // when nodes was read
	// settled are the down nodes whose sandboxes this node settled, with
	// the heartbeat they were down at (a node that comes back and goes
	// down again is settled again).
	settled map[string]time.Time

	stop chan struct{}
	done chan struct{} // made by a successful Start, closed when its loop ends
}

// ValidOnLost checks an on-node-lost policy.
func ValidOnLost(p string) error {
	switch p {
	case OnLostReport, OnLostResume:
		return nil
	}
	return fmt.Errorf("--on-node-lost %q: want %s or %s", p, OnLostReport, OnLostResume)
}

// New makes this daemon a node; Start registers it.
func New(cfg Config, st Store, mgr Manager) (*Node, error) {
	if cfg.NodeID == "" || strings.ContainsAny(cfg.NodeID, "/ \t\n") || len(cfg.NodeID) > 128 {
		return nil, fmt.Errorf("node id %q: want 1 to 128 characters without slashes or spaces", cfg.NodeID)
	}
	if cfg.NodeID != mgr.Node() {
		return nil, fmt.Errorf("node id %q differs from the sandbox manager's %q", cfg.NodeID, mgr.Node())
	}
	u, err := url.Parse(cfg.Advertise)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--advertise %q: want the URL other nodes reach this one at, like http://10.0.0.2:8080", cfg.Advertise)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Timeout < 2*time.Second {
		return nil, fmt.Errorf("--node-timeout %s: at least 2s", cfg.Timeout)
	}
	if cfg.OnLost == "" {
		cfg.OnLost = OnLostReport
	}
	if err := ValidOnLost(cfg.OnLost); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Node{cfg: cfg, st: st, mgr: mgr, log: cfg.Logger, self: u, nodes: map[string]*store.Node{},
		settled: map[string]time.Time{}, stop: make(chan struct{})}, nil
}

// ID is this node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Start registers the node (refusing an id that a live node at another
// address holds) and starts its heartbeat.
func (n *Node) Start(ctx context.Context) error {
	if n.started.IsZero() {
		if err := n.Announce(ctx); err != nil {
			return err
		}
	}
	n.done = make(chan struct{})
	go n.loop()
	return nil
}

// Announce registers the node (refusing an id that a live node at another
// address holds) with one heartbeat, without starting the loop: a daemon
// announces itself before it reconciles its sandboxes, so that no other
// node, seeing it down, settles them meanwhile. Start announces if this
// was not called.
func (n *Node) Announce(ctx context.Context) error {
	if old, err := n.st.GetNode(ctx, n.cfg.NodeID); err == nil {
		if n.up(old, time.Now()) && old.Address != n.cfg.Advertise {
			return fmt.Errorf("node id %q is taken by a node that is up at %s (last heartbeat %s ago): give this one another --node-id",
				n.cfg.NodeID, old.Address, time.Since(old.HeartbeatAt).Round(time.Second))
		}
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("node registry: %w", err)
	}
	n.started = time.Now().UTC()
	if err := n.heartbeat(ctx); err != nil {
		return fmt.Errorf("register node %s: %w", n.cfg.NodeID, err)
	}
	n.log.Info("node registered", "node", n.cfg.NodeID, "address", n.cfg.Advertise, "timeout", n.cfg.Timeout)
	return nil
}

// Close stops the heartbeat. The node's row stays: it goes down after the
// timeout, unless it starts again sooner.
func (n *Node) Close() {
	select {
	case <-n.stop:
		return
	default:
	}
	close(n.stop)
	if n.done != nil { // nil: Start failed or never ran, no loop to wait for
		<-n.done
	}
}

func (n *Node) heartbeat(ctx context.Context) error {
	c := n.mgr.Capacity()
	c.ID, c.Address, c.StartedAt, c.HeartbeatAt = n.cfg.NodeID, n.cfg.Advertise, n.started, time.Now().UTC()
	return n.st.Heartbeat(ctx, &c)
}

func (n *Node) loop() {
	defer close(n.done)
	t := time.NewTicker(n.cfg.Timeout / 5)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Timeout)
		if err := n.heartbeat(ctx); err != nil {
			n.log.Error("node heartbeat", "err", err)
		}
		if _, err := n.refresh(ctx); err != nil {
			n.log.Error("read the cluster's nodes", "err", err)
		} else {
			n.settleDown(ctx)
		}
		if err := n.mgr.SyncPools(ctx); err != nil {
			n.log.Error("sync pools", "err", err)
		}
		cancel()
	}
}

// up reports whether node's heartbeat is recent at now.
func (n *Node) up(node *store.Node, now time.Time) bool {
	return now.Sub(node.HeartbeatAt) < n.cfg.Timeout
}

// refresh reads the nodes from the store.
func (n *Node) refresh(ctx context.Context) (map[string]*store.Node, error) {
	list, err := n.st.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[string]*store.Node, len(list))
	for _, x := range list {
		m[x.ID] = x
	}
	n.mu.Lock()
	n.nodes, n.seen = m, time.Now()
	n.mu.Unlock()
	return m, nil
}

// lookup returns node id, read from the store when the cached list is
// older than a second or lacks it.
func (n *Node) lookup(ctx context.Context, id string) (*store.Node, error) {
	n.mu.Lock()
	x, fresh := n.nodes[id], time.Since(n.seen) < time.Second
	n.mu.Unlock()
	if x != nil && fresh {
		return x, nil
	}
	m, err := n.refresh(ctx)
	if err != nil {
		return nil, err
	}
	if x = m[id]; x == nil {
		return nil, errdefs.NotFound("node %q not found", id)
	}
	return x, nil
}

// settleDown settles the sandboxes of every node that went down since it
// was last settled.
func (n *Node) settleDown(ctx context.Context) {
	n.mu.Lock()
	var down []*store.Node
	now := time.Now()
	for _, x := range n.nodes {
		if x.ID == n.cfg.NodeID || n.up(x, now) {
			continue
		}
		if at, ok := n.settled[x.ID]; ok && at.Equal(x.HeartbeatAt) {
			continue
		}
		down = append(down, x)
	}
	n.mu.Unlock()
	for _, x := range down {
		lost, resumable, err := n.mgr.NodeLost(ctx, x.ID, x.HeartbeatAt, n.cfg.OnLost == OnLostResume)
		if err != nil {
			n.log.Error("settle the sandboxes of a node that is down", "node", x.ID, "err", err)
			continue
		}
		if lost+resumable > 0 {
			n.log.Warn("node is down; its running sandboxes are settled", "node", x.ID, "last_heartbeat", x.HeartbeatAt,
				"lost", lost, "resume_from_image", resumable)
		}
		n.mu.Lock()
		n.settled[x.ID] = x.HeartbeatAt
		n.mu.Unlock()
	}
}

// Nodes lists the cluster's nodes for the API.
func (n *Node) Nodes(ctx context.Context) ([]api.Node, error) {
	m, err := n.refresh(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]api.Node, 0, len(m))
	for _, x := range m {
		state := api.NodeUp
		if !n.up(x, now) {
			state = api.NodeDown
		}
		out = append(out, api.Node{ID: x.ID, Address: x.Address, State: state, Self: x.ID == n.cfg.NodeID,
			CPUs: x.CPUs, MemoryBytes: x.MemoryBytes, DiskBytes: x.DiskBytes, DiskFreeBytes: x.DiskFreeBytes,
			Running: x.Running, MemoryReservedBytes: x.MemoryReserved, StartedAt: x.StartedAt, HeartbeatAt: x.HeartbeatAt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Paths of the calls that name a sandbox, or a conversation (whose sandbox
// runs its code): /v1/sandboxes/{ref}…, E2B's /sandboxes/{id}… and
// /v2/sandboxes/{id}…, /v1/conversations/{id}….
var (
	sandboxPath      = regexp.MustCompile(`^/v1/sandboxes/([^/]+)(?:/|$)`)
	e2bSandboxPath   = regexp.MustCompile(`^/(?:v2/)?sandboxes/([^/]+)(?:/|$)`)
	conversationPath = regexp.MustCompile(`^/v1/conversations/([^/]+)(?:/|$)`)
	// A Jupyter kernel's id names its sandbox (package kernelid).
	jupyterKernelPath = regexp.MustCompile(`^/jupyter/api/kernels/([^/]+)(?:/|$)`)
)

// maxChatBody bounds the chat body read to route it (a question with CSV
// text); a larger one is served here, which refuses it.
const maxChatBody = 64 << 20

// routeChat forwards a question about an existing conversation to the node
// of the conversation's sandbox, where its code runs.
func (n *Node) routeChat(w http.ResponseWriter, r *http.Request) (bool, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxChatBody+1))
	if err != nil {
		return false, errdefs.InvalidArgument("read request body: %v", err)
	}
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	if len(body) > maxChatBody {
		return false, nil
	}
	var req struct {
		ConversationID string `json:"conversation_id"`
	}
	if json.Unmarshal(body, &req) != nil || req.ConversationID == "" {
		return false, nil // a new conversation starts here
	}
	return n.routeConversation(w, r, req.ConversationID)
}

// routeConversation routes a call about conversation id by its sandbox.
func (n *Node) routeConversation(w http.ResponseWriter, r *http.Request, id string) (bool, error) {
	c, err := n.st.GetConversation(r.Context(), id)
	if err != nil || c.SandboxID == "" {
		return false, nil // answered here
	}
	return n.RouteSandbox(w, r, c.SandboxID)
}

// maxCreateBody bounds the create body read to place it.
const maxCreateBody = 1 << 20

// Route serves r by forwarding it when it belongs to another node; it
// reports whether it did. A call it cannot place answers err (the caller
// writes it); handled false and err nil: serve r here. It runs after
// authentication (r's context has the caller's tenant), so a caller learns
// nothing of other tenants' sandboxes.
func (n *Node) Route(w http.ResponseWriter, r *http.Request) (handled bool, err error) {
	if r.Header.Get(ForwardedHeader) != "" {
		return false, nil
	}
	switch {
	case r.URL.Path == "/v1/sandboxes" && r.Method == http.MethodPost:
		return n.routeCreate(w, r)
	case r.URL.Path == "/v1/chat" && r.Method == http.MethodPost:
		return n.routeChat(w, r)
	}
	if m := conversationPath.FindStringSubmatch(r.URL.Path); m != nil {
		id, err := url.PathUnescape(m[1])
		if err != nil {
			return false, nil
		}
		return n.routeConversation(w, r, id)
	}
	if m := jupyterKernelPath.FindStringSubmatch(r.URL.Path); m != nil {
		if sandbox, _, ok := kernelid.Parse(m[1]); ok {
			return n.RouteSandbox(w, r, sandbox)
		}
		return false, nil // not a kernel id: answered here (404)
	}
	if r.URL.Path == "/jupyter/api/kernels" && r.Method == http.MethodPost {
		return n.routeKernelStart(w, r)
	}
	for _, re := range []*regexp.Regexp{sandboxPath, e2bSandboxPath} {
		if m := re.FindStringSubmatch(r.URL.Path); m != nil {
			ref, err := url.PathUnescape(m[1])
			if err != nil {
				return false, nil
			}
			return n.RouteSandbox(w, r, ref)
		}
	}
	return false, nil
}

// RouteSandbox is Route for a call about sandbox ref however it names it
// (E2B's data plane names it in a header): forwarded to its node when that
// is another node that is up; a down node's sandbox is settled here first.
func (n *Node) RouteSandbox(w http.ResponseWriter, r *http.Request, ref string) (handled bool, err error) {
	if r.Header.Get(ForwardedHeader) != "" || ref == "" {
		return false, nil
	}
	ctx := r.Context()
	sb, err := n.st.Get(ctx, ref)
	if err != nil || sb.Node == "" || sb.Node == n.cfg.NodeID {
		return false, nil // not found (answered here), or this node's
	}
	owner, err := n.lookup(ctx, sb.Node)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return false, err
	}
	if owner != nil && !n.up(owner, time.Now()) {
		// Down as of the cached list: read it again before acting on it
		// (it may have just come back).
		if x, err := n.st.GetNode(ctx, sb.Node); err == nil {
			owner = x
		}
	}
	if owner != nil && n.up(owner, time.Now()) {
		// A suspended session whose node has no room for it now resumes
		// on a node that has (not for a look at it or its delete, which
		// resume nothing).
		self := strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/"+url.PathEscape(ref))
		if sb.State == api.StateSuspended && !self && r.Method != http.MethodDelete {
			if to := n.roomFor(ctx, sb, owner); to != nil {
				moved, err := n.mgr.Move(context.WithoutCancel(ctx), sb.ID, owner.ID, to.ID)
				if err != nil {
					return false, err
				}
				if moved {
					n.log.Info("suspended session moved to a node with room", "sandbox", sb.ID, "from", owner.ID, "to", to.ID)
					if to.ID == n.cfg.NodeID {
						return false, nil
					}
					owner = to
				}
			}
		}
		n.forward(w, r, owner)
		return true, nil
	}
	// The owner is down (or gone from the registry).
	var hb time.Time
	if owner != nil {
		hb = owner.HeartbeatAt
	}
	bg := context.WithoutCancel(ctx)
	switch {
	case sb.State == api.StateSuspended:
		if err := n.mgr.Adopt(bg, sb.ID, sb.Node); err != nil {
			return false, err
		}
	case sb.State.HoldsProcesses():
		if _, _, err := n.mgr.NodeLost(bg, sb.Node, hb, n.cfg.OnLost == OnLostResume); err != nil {
			return false, err
		}
	}
	return false, nil // served here: resumed, or the store's answer
}

// routeCreate places a create.
func (n *Node) routeCreate(w http.ResponseWriter, r *http.Request) (bool, error) {
	body, err := bufferBody(r)
	if err != nil {
		return false, err
	}
	var req api.CreateSandboxRequest
	if len(body) > 0 && json.Unmarshal(body, &req) != nil {
		return false, nil // the handler here explains what is wrong with it
	}
	if req.Pool != "" && req.Node == "" {
		return false, nil // pools are per node: this one's
	}
	target, err := n.place(r.Context(), &req)
	if err != nil {
		return false, err
	}
	if target == nil {
		return false, nil
	}
	n.forward(w, r, target)
	return true, nil
}

// bufferBody reads r's body (at most maxCreateBody bytes) to decide where
// the request goes, and puts it back for whoever serves it.
func bufferBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCreateBody+1))
	if err != nil {
		return nil, errdefs.InvalidArgument("read request body: %v", err)
	}
	r.Body.Close()
	if len(body) > maxCreateBody {
		return nil, errdefs.InvalidArgument("request body is larger than %d bytes", maxCreateBody)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return body, nil
}

// routeKernelStart places a Jupyter kernel start: one in an existing
// sandbox (KERNEL_FORKBOX_SANDBOX in its env) goes to that sandbox's node; a
// kernel in a new sandbox starts here.
func (n *Node) routeKernelStart(w http.ResponseWriter, r *http.Request) (bool, error) {
	body, err := bufferBody(r)
	if err != nil {
		return false, err
	}
	var req struct {
		Env map[string]any `json:"env"`
	}
	if len(body) == 0 || json.Unmarshal(body, &req) != nil {
		return false, nil // the handler here explains what is wrong with it
	}
	ref, _ := req.Env["KERNEL_FORKBOX_SANDBOX"].(string)
	if ref == "" {
		return false, nil
	}
	return n.RouteSandbox(w, r, ref)
}

// roomFor returns a node up with room for suspended sandbox sb's memory
// when its own node owner has not (nil: stay). Room is free memory
// (capacity less what running sandboxes' limits reserve) as of the last
// heartbeats; the node with the most wins.
func (n *Node) roomFor(ctx context.Context, sb *store.Sandbox, owner *store.Node) *store.Node {
	need := sb.Spec.MemoryMB << 20
	free := func(x *store.Node) int64 { return x.MemoryBytes - x.MemoryReserved }
	if need <= 0 || free(owner) >= need {
		return nil
	}
	if _, err := n.refresh(ctx); err != nil {
		return nil
	}
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	var best *store.Node
	for _, x := range n.nodes {
		if x.ID != owner.ID && n.up(x, now) && free(x) >= need && (best == nil || free(x) > free(best)) {
			best = x
		}
	}
	return best
}

// place picks the node for a create: nil is this one.
func (n *Node) place(ctx context.Context, req *api.CreateSandboxRequest) (*store.Node, error) {
	now := time.Now()
	if req.Node != "" {
		if req.Node == n.cfg.NodeID {
			return nil, nil
		}
		x, err := n.lookup(ctx, req.Node)
		if err != nil {
			return nil, err
		}
		if !n.up(x, now) {
			return nil, errdefs.Unavailable("node %s is down (last heartbeat %s ago)", x.ID, now.Sub(x.HeartbeatAt).Round(time.Second))
		}
		return x, nil
	}
	// A restore prefers the node that took the snapshot: its files are
	// likely still in that node's cache.
	var cached string
	if req.SnapshotID != "" {
		if sn, err := n.st.GetSnapshot(ctx, req.SnapshotID); err == nil {
			if src, err := n.st.Get(ctx, sn.SandboxID); err == nil {
				cached = src.Node
			}
		}
	}
	n.mu.Lock()
	stale := time.Since(n.seen) > time.Second
	n.mu.Unlock()
	if stale {
		if _, err := n.refresh(ctx); err != nil {
			return nil, err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	free := func(x *store.Node) int64 { return x.MemoryBytes - x.MemoryReserved }
	// within10 reports whether a has at least 90% of b's free memory.
	within10 := func(a, b *store.Node) bool { return free(a) >= free(b)-free(b)/10 }
	var best, self *store.Node
	for _, x := range n.nodes {
		if x.ID == n.cfg.NodeID {
			self = x
			continue
		}
		if n.up(x, now) && (best == nil || free(x) > free(best) || (free(x) == free(best) && x.ID < best.ID)) {
			best = x
		}
	}
	if best == nil || self == nil || within10(self, best) {
		best = nil // this node: as good as any
	}
	if c := n.nodes[cached]; cached != "" && c != nil && n.up(c, now) {
		top := best
		if top == nil {
			top = self
		}
		if top == nil || within10(c, top) {
			if c.ID == n.cfg.NodeID {
				return nil, nil
			}
			return c, nil
		}
	}
	return best, nil
}

// forward proxies r to node x.
func (n *Node) forward(w http.ResponseWriter, r *http.Request, x *store.Node) {
	target, err := url.Parse(x.Address)
	if err != nil {
		writeUnavailable(w, fmt.Sprintf("node %s has a bad address %q", x.ID, x.Address))
		return
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			pr.Out.Header.Set(ForwardedHeader, n.cfg.NodeID)
		},
		FlushInterval: -1, // streams and events as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the caller went away
			}
			n.log.Warn("forward a call to its node", "node", x.ID, "address", x.Address, "path", r.URL.Path, "err", err)
			writeUnavailable(w, fmt.Sprintf("node %s (%s), which has this sandbox, did not answer: %v", x.ID, x.Address, err))
		},
	}
	p.ServeHTTP(w, r)
}

// writeUnavailable answers 503 in the API's error shape.
func writeUnavailable(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "5")
	w.WriteHeader(http.StatusServiceUnavailable)
	json.NewEncoder(w).Encode(api.Error{Error: api.ErrorBody{Code: "unavailable", Message: msg}})
}
