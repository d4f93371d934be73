package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

func asTenant(name string) context.Context {
	return tenant.With(context.Background(), tenant.Principal{Tenant: name})
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("%s: err = %v, want not found", what, err)
	}
}

// A context's tenant scopes every call: the other tenant's rows are not
// found, listed or changed, names are unique per tenant, and the daemon's
// own (unscoped) context sees them all.
func testTenantScoping(t *testing.T, s store.Store) {
	a, b, bg := asTenant("a"), asTenant("b"), context.Background()
	x := newSandbox("x", "dev", api.StateRunning, at(1))
	y := newSandbox("y", "dev", api.StateRunning, at(2))
	if err := s.Create(a, x); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(b, y); err != nil {
		t.Fatalf("the same name in another tenant: %v", err)
	}
	if err := s.Create(a, newSandbox("z", "dev", api.StateRunning, at(3))); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("a second live dev in tenant a: err = %v, want conflict", err)
	}
	if x.Tenant != "a" || y.Tenant != "b" {
		t.Fatalf("Create set tenants %q, %q", x.Tenant, y.Tenant)
	}
	if got, err := s.Get(a, "dev"); err != nil || got.ID != "x" {
		t.Fatalf("Get(a, dev) = %v, %v", got, err)
	}
	if got, err := s.Get(b, "dev"); err != nil || got.ID != "y" {
		t.Fatalf("Get(b, dev) = %v, %v", got, err)
	}
	_, err := s.Get(b, "x")
	wantNotFound(t, "Get(b, a's id)", err)
	if got, err := s.Get(bg, "x"); err != nil || got.Tenant != "a" {
		t.Fatalf("Get(unscoped, x) = %v, %v", got, err)
	}
	if l, err := s.List(a, store.ListFilter{}); err != nil || len(l) != 1 || l[0].ID != "x" {
		t.Fatalf("List(a) = %v, %v", ids(l), err)
	}
	if l, err := s.List(bg, store.ListFilter{Tenant: "b"}); err != nil || len(l) != 1 || l[0].ID != "y" {
		t.Fatalf("List(Tenant b) = %v, %v", ids(l), err)
	}
	if l, err := s.List(bg, store.ListFilter{}); err != nil || len(l) != 2 {
		t.Fatalf("List(unscoped) = %v, %v", ids(l), err)
	}
	_, err = s.Update(b, "x", func(sb *store.Sandbox) error { sb.State = api.StateTerminated; return nil })
	wantNotFound(t, "Update(b, a's sandbox)", err)
	if got := mustGet(t, s, "x"); got.State != api.StateRunning {
		t.Fatalf("b changed a's sandbox: %s", got.State)
	}
	// An update cannot move a sandbox to another tenant.
	if got, err := s.Update(a, "x", func(sb *store.Sandbox) error { sb.Tenant = "b"; return nil }); err != nil || got.Tenant != "a" {
		t.Fatalf("Update changing Tenant: %v, %v", got, err)
	}
	// The daemon's own work on a tenant's behalf keeps the record's tenant.
	w := newSandbox("w", "", api.StateRunning, at(4))
	w.Tenant = "b"
	if err := s.Create(bg, w); err != nil || mustGet(t, s, "w").Tenant != "b" {
		t.Fatalf("unscoped Create with Tenant b: %v", err)
	}
	v := newSandbox("v", "", api.StateRunning, at(5))
	v.Tenant = ""
	if err := s.Create(bg, v); err != nil || mustGet(t, s, "v").Tenant != api.DefaultTenant {
		t.Fatalf("unscoped Create without a tenant: %v", err)
	}

	sn := &store.Snapshot{ID: "snap_x", Type: "memory", SandboxID: "x", CreatedAt: at(6)}
	if err := s.CreateSnapshot(a, sn); err != nil || sn.Tenant != "a" {
		t.Fatalf("CreateSnapshot(a): %v, tenant %q", err, sn.Tenant)
	}
	_, err = s.GetSnapshot(b, "snap_x")
	wantNotFound(t, "GetSnapshot(b, a's)", err)
	if l, err := s.ListSnapshots(b, ""); err != nil || len(l) != 0 {
		t.Fatalf("ListSnapshots(b) = %d, %v", len(l), err)
	}
	wantNotFound(t, "DeleteSnapshot(b, a's)", s.DeleteSnapshot(b, "snap_x"))
	if got, err := s.GetSnapshot(a, "snap_x"); err != nil || got.Tenant != "a" {
		t.Fatalf("GetSnapshot(a) after b's delete: %v, %v", got, err)
	}

	for _, ctx := range []context.Context{a, b} {
		if err := s.CreatePool(ctx, &store.Pool{Name: "py", Size: 1, CreatedAt: at(7)}); err != nil {
			t.Fatalf("CreatePool py for %s: %v", tenant.Of(ctx), err)
		}
	}
	if err := s.CreatePool(a, &store.Pool{Name: "py", Size: 1, CreatedAt: at(8)}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second pool py of a: err = %v, want conflict", err)
	}
	pool := func(owner string) *store.Pool {
		return &store.Pool{Tenant: owner, Name: "py", Size: 1, CreatedAt: at(7)}
	}
	if l, err := s.ListPools(a); err != nil {
		t.Fatal(err)
	} else if d := recordDiff([]*store.Pool{pool("a")}, l); d != "" {
		t.Fatalf("ListPools(a) differs:%s", d)
	}
	wantNotFound(t, "DeletePool(b, a's py)", s.DeletePool(b, "a", "py"))
	if err := s.DeletePool(a, "a", "py"); err != nil {
		t.Fatalf("DeletePool(a, py): %v", err)
	}
	if l, err := s.ListPools(bg); err != nil {
		t.Fatal(err)
	} else if d := recordDiff([]*store.Pool{pool("b")}, l); d != "" {
		t.Fatalf("ListPools(unscoped) after delete differs:%s", d)
	}
}

func testConvTenantScoping(t *testing.T, s store.ConversationStore) {
	a, b := asTenant("a"), asTenant("b")
	c := newConversation("c1", at(1))
	c.Tenant = ""
	if err := s.CreateConversation(a, c); err != nil || c.Tenant != "a" {
		t.Fatalf("CreateConversation(a): %v, tenant %q", err, c.Tenant)
	}
	_, err := s.GetConversation(b, "c1")
	wantNotFound(t, "GetConversation(b, a's)", err)
	if l, err := s.ListConversations(b); err != nil || len(l) != 0 {
		t.Fatalf("ListConversations(b) = %d, %v", len(l), err)
	}
	wantNotFound(t, "UpdateConversation(b, a's)", s.UpdateConversation(b, &store.Conversation{ID: "c1", Title: "taken"}))
	wantNotFound(t, "AppendTurn(b, a's)", s.AppendTurn(b, &store.Turn{ConversationID: "c1"}))
	if err := s.AppendTurn(a, &store.Turn{ConversationID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if l, err := s.ListTurns(b, "c1"); err != nil || len(l) != 0 {
		t.Fatalf("ListTurns(b, a's) = %d, %v", len(l), err)
	}
	wantNotFound(t, "CreateUpload(b) into a's conversation", s.CreateUpload(b, newUpload("u0", "c1", at(2))))
	u := newUpload("u1", "", at(3))
	u.Tenant = ""
	if err := s.CreateUpload(a, u); err != nil || u.Tenant != "a" {
		t.Fatalf("CreateUpload(a): %v, tenant %q", err, u.Tenant)
	}
	_, err = s.GetUpload(b, "u1")
	wantNotFound(t, "GetUpload(b, a's)", err)
	if l, err := s.ListUploads(b, ""); err != nil || len(l) != 0 {
		t.Fatalf("ListUploads(b) = %d, %v", len(l), err)
	}
	wantNotFound(t, "SetUploadConversation(b, a's upload)", s.SetUploadConversation(b, "u1", ""))
	wantNotFound(t, "DeleteConversation(b, a's)", s.DeleteConversation(b, "c1"))
	if got, err := s.GetConversation(a, "c1"); err != nil || got.Title != c.Title {
		t.Fatalf("a's conversation after b's tries: %v, %v", got, err)
	}
	if l, err := s.ListTurns(a, "c1"); err != nil || len(l) != 1 {
		t.Fatalf("a's turns after b's tries = %d, %v", len(l), err)
	}
}
