package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/google/go-cmp/cmp"
)

// RunNodes runs the conformance suite of store.NodeStore. newStore must
// return a fresh, empty store each time it is called (once per subtest)
// and arrange for its closing with t.Cleanup.
func RunNodes(t *testing.T, newStore func(t *testing.T) store.NodeStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.NodeStore)
	}{
		{"HeartbeatGet", testNodeHeartbeatGet},
		{"HeartbeatReplacesEveryField", testNodeHeartbeatUpsert},
		{"ListByID", testNodeList},
		{"Delete", testNodeDelete},
		{"NotFound", testNodeNotFound},
		{"TenantDoesNotScope", testNodeUnscoped},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

func newNode(id string, n int) *store.Node {
	return &store.Node{
		ID:             id,
		Address:        fmt.Sprintf("http://10.0.0.%d:8080", n),
		CPUs:           7.5,
		MemoryBytes:    16 << 30,
		DiskBytes:      512 << 30,
		DiskFreeBytes:  300<<30 + int64(n),
		Running:        n,
		MemoryReserved: int64(n) << 28,
		StartedAt:      at(n),
		HeartbeatAt:    at(n + 1),
	}
}

func nodeDiff(want, got *store.Node) string { return cmp.Diff(want, got, RecordOptions) }

func mustHeartbeat(t *testing.T, s store.NodeStore, n *store.Node) {
	t.Helper()
	if err := s.Heartbeat(context.Background(), n); err != nil {
		t.Fatalf("Heartbeat(%s): %v", n.ID, err)
	}
}

func mustGetNode(t *testing.T, s store.NodeStore, id string) *store.Node {
	t.Helper()
	n, err := s.GetNode(context.Background(), id)
	if err != nil {
		t.Fatalf("GetNode(%s): %v", id, err)
	}
	return n
}

func testNodeHeartbeatGet(t *testing.T, s store.NodeStore) {
	n := newNode("node-a", 1)
	mustBeFull(t, "the node", n)
	mustHeartbeat(t, s, n)
	got := mustGetNode(t, s, "node-a")
	if d := nodeDiff(n, got); d != "" {
		t.Errorf("GetNode after Heartbeat (-want +got):\n%s", d)
	}
	if got.StartedAt.Location() != time.UTC || got.HeartbeatAt.Location() != time.UTC {
		t.Errorf("times not UTC: %v, %v", got.StartedAt, got.HeartbeatAt)
	}
}

func testNodeHeartbeatUpsert(t *testing.T, s store.NodeStore) {
	mustHeartbeat(t, s, newNode("node-a", 1))
	mustHeartbeat(t, s, newNode("node-b", 2))
	// Every field is replaced, zeros and earlier times too.
	next := &store.Node{ID: "node-a", Address: "http://10.9.9.9:9090", CPUs: 0.25, MemoryBytes: 1, DiskBytes: 2,
		DiskFreeBytes: 0, Running: 0, MemoryReserved: 0, StartedAt: at(0), HeartbeatAt: at(0).Add(-time.Hour)}
	mustHeartbeat(t, s, next)
	if d := nodeDiff(next, mustGetNode(t, s, "node-a")); d != "" {
		t.Errorf("GetNode after the second Heartbeat (-want +got):\n%s", d)
	}
	if d := nodeDiff(newNode("node-b", 2), mustGetNode(t, s, "node-b")); d != "" {
		t.Errorf("the other node changed (-want +got):\n%s", d)
	}
	l, err := s.ListNodes(context.Background())
	if err != nil || len(l) != 2 {
		t.Fatalf("ListNodes = %d nodes, %v; want 2: a heartbeat does not add a row", len(l), err)
	}
}

func testNodeList(t *testing.T, s store.NodeStore) {
	ctx := context.Background()
	if l, err := s.ListNodes(ctx); err != nil || len(l) != 0 {
		t.Fatalf("ListNodes of an empty store = %v, %v", l, err)
	}
	// Heartbeats out of id order, and ids that sort differently by
	// locale than bytewise.
	want := []string{"Node-Z", "node-a", "node-b", "node-c"}
	for i, id := range []string{"node-c", "node-a", "Node-Z", "node-b"} {
		mustHeartbeat(t, s, newNode(id, 10-i))
	}
	l, err := s.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range l {
		got = append(got, n.ID)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ListNodes = %v, want %v (by id)", got, want)
	}
	for i, id := range []string{"node-c", "node-a", "Node-Z", "node-b"} {
		for _, n := range l {
			if n.ID == id {
				if d := nodeDiff(newNode(id, 10-i), n); d != "" {
					t.Errorf("listed %s (-want +got):\n%s", id, d)
				}
			}
		}
	}
}

func testNodeDelete(t *testing.T, s store.NodeStore) {
	ctx := context.Background()
	mustHeartbeat(t, s, newNode("node-a", 1))
	mustHeartbeat(t, s, newNode("node-b", 2))
	if err := s.DeleteNode(ctx, "node-a"); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	if _, err := s.GetNode(ctx, "node-a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetNode after delete: err = %v, want ErrNotFound", err)
	}
	if err := s.DeleteNode(ctx, "node-a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second DeleteNode: err = %v, want ErrNotFound", err)
	}
	if l, err := s.ListNodes(ctx); err != nil || len(l) != 1 || l[0].ID != "node-b" {
		t.Errorf("ListNodes after delete = %v, %v", l, err)
	}
	// A node that comes back gets its row again.
	mustHeartbeat(t, s, newNode("node-a", 3))
	if d := nodeDiff(newNode("node-a", 3), mustGetNode(t, s, "node-a")); d != "" {
		t.Errorf("node back after delete (-want +got):\n%s", d)
	}
}

func testNodeNotFound(t *testing.T, s store.NodeStore) {
	ctx := context.Background()
	mustHeartbeat(t, s, newNode("node-a", 1))
	for _, id := range []string{"node-b", "", "NODE-A", "node-", "' OR '1'='1"} {
		if n, err := s.GetNode(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("GetNode(%q) = %v, %v; want ErrNotFound", id, n, err)
		}
	}
	if err := s.DeleteNode(ctx, "node-b"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("DeleteNode(unknown): err = %v, want ErrNotFound", err)
	}
}

// Nodes are the cluster's: a tenant's context sees and changes them too.
func testNodeUnscoped(t *testing.T, s store.NodeStore) {
	a := asTenant("a")
	mustHeartbeat(t, s, newNode("node-a", 1))
	if _, err := s.GetNode(a, "node-a"); err != nil {
		t.Errorf("GetNode from a tenant's context: %v", err)
	}
	if l, err := s.ListNodes(a); err != nil || len(l) != 1 {
		t.Errorf("ListNodes from a tenant's context = %v, %v", l, err)
	}
}

// A sandbox's Node is kept by Create and Update, as every other field.
func testNodeRoundTrip(t *testing.T, s store.Store) {
	sb := newSandbox("sb-1", "alpha", api.StateRunning, at(1))
	sb.Node = "node-a"
	mustCreate(t, s, sb)
	expectSame(t, "Get", sb, mustGet(t, s, "sb-1"))
	got := mustUpdate(t, s, "sb-1", func(sb *store.Sandbox) error {
		if sb.Node != "node-a" {
			t.Errorf("fn's argument Node = %q, want node-a", sb.Node)
		}
		sb.Node = "node-b"
		return nil
	})
	want := *sb
	want.Node = "node-b"
	expectSame(t, "Update result", &want, got)
	expectSame(t, "Get after Update", &want, mustGet(t, s, "sb-1"))
	// And back to none.
	mustUpdate(t, s, "sb-1", func(sb *store.Sandbox) error { sb.Node = ""; return nil })
	want.Node = ""
	expectSame(t, "Get after clearing Node", &want, mustGet(t, s, "sb-1"))
}

// ListFilter.Node lists one node's sandboxes and those of no node.
func testListNode(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i, c := range []struct {
		id, node string
		state    api.SandboxState
	}{
		{"a1", "node-a", api.StateRunning},
		{"b1", "node-b", api.StateRunning},
		{"old", "", api.StateRunning},
		{"a2", "node-a", api.StateSuspended},
		{"b2", "node-b", api.StateSuspended},
	} {
		sb := newSandbox(c.id, "", c.state, at(i))
		sb.Node = c.node
		mustCreate(t, s, sb)
	}
	cases := []struct {
		f    store.ListFilter
		want []string
	}{
		{store.ListFilter{}, []string{"b2", "a2", "old", "b1", "a1"}},
		{store.ListFilter{Node: "node-a"}, []string{"a2", "old", "a1"}},
		{store.ListFilter{Node: "node-b"}, []string{"b2", "old", "b1"}},
		{store.ListFilter{Node: "node-c"}, []string{"old"}},
		{store.ListFilter{Node: "node-a", State: api.StateSuspended}, []string{"a2"}},
		{store.ListFilter{Node: "node-b", State: api.StateRunning}, []string{"old", "b1"}},
		{store.ListFilter{Node: "node-a", Tenant: "other"}, nil},
	}
	for _, tc := range cases {
		got, err := s.List(ctx, tc.f)
		if err != nil {
			t.Errorf("List(%+v): %v", tc.f, err)
			continue
		}
		if g := ids(got); !reflect.DeepEqual(g, append([]string{}, tc.want...)) {
			t.Errorf("List(%+v) = %v, want %v", tc.f, g, tc.want)
		}
	}
	// A tenant's context narrows as well.
	if got, err := s.List(asTenant("other"), store.ListFilter{Node: "node-a"}); err != nil || len(got) != 0 {
		t.Errorf("List(other tenant, node-a) = %v, %v", ids(got), err)
	}
}
