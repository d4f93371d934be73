package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
	"github.com/google/go-cmp/cmp"
)

// RunAccess runs the conformance suite of store.AccessStore. newStore must
// return a fresh, empty store each time it is called (once per subtest) and
// arrange for its closing with t.Cleanup.
func RunAccess(t *testing.T, newStore func(t *testing.T) store.AccessStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.AccessStore)
	}{
		{"Keys", testKeys},
		{"QuotasAndTenants", testQuotasAndTenants},
		{"Audit", testAudit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

func testKeys(t *testing.T, s store.AccessStore) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 2, 3, 4, 5, time.UTC)
	exp := now.Add(time.Hour)
	k := &store.Key{ID: "key_1", Hash: "h1", Tenant: "acme", Role: api.RoleUser, Name: "ci", CreatedAt: now, ExpiresAt: &exp}
	want1 := *k
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateKey(ctx, &store.Key{ID: "key_2", Hash: "h1", Tenant: "b", Role: api.RoleUser, CreatedAt: now}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate hash: %v", err)
	}
	if err := s.CreateKey(ctx, &store.Key{ID: "key_1", Hash: "h9", Tenant: "b", Role: api.RoleUser, CreatedAt: now}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate id: %v", err)
	}
	want2 := store.Key{ID: "key_2", Hash: "h2", Tenant: "beta", Role: api.RoleAdmin, CreatedAt: now}
	if err := s.CreateKey(ctx, &store.Key{ID: "key_2", Hash: "h2", Tenant: "beta", Role: api.RoleAdmin, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	got, err := s.KeyByHash(ctx, "h1")
	if err != nil {
		t.Fatalf("KeyByHash: %v", err)
	}
	if d := recordDiff(&want1, got); d != "" {
		t.Fatalf("KeyByHash differs:%s", d)
	}
	if got.CreatedAt.Location() != time.UTC || got.ExpiresAt.Location() != time.UTC {
		t.Errorf("KeyByHash times = %v, %v; want UTC", got.CreatedAt, got.ExpiresAt)
	}
	if _, err := s.KeyByHash(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown hash: %v", err)
	}
	if l, err := s.ListKeys(ctx, "acme"); err != nil {
		t.Fatal(err)
	} else if d := recordDiff([]*store.Key{&want1}, l); d != "" {
		t.Fatalf("ListKeys(acme) differs:%s", d)
	}
	if l, err := s.ListKeys(ctx, ""); err != nil {
		t.Fatal(err)
	} else if d := recordDiff([]*store.Key{&want1, &want2}, l); d != "" {
		t.Fatalf("ListKeys() differs:%s", d)
	}
	revoked := want1
	revokedAt := now.Add(time.Minute)
	revoked.RevokedAt = &revokedAt
	mustBeFull(t, "the revoked key", &revoked)
	rk, err := s.RevokeKey(ctx, "key_1", revokedAt)
	if err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	if d := recordDiff(&revoked, rk); d != "" {
		t.Fatalf("RevokeKey result differs:%s", d)
	}
	// A second revoke keeps the first time.
	if rk, err = s.RevokeKey(ctx, "key_1", now.Add(time.Hour)); err != nil {
		t.Fatalf("second RevokeKey: %v", err)
	} else if d := recordDiff(&revoked, rk); d != "" {
		t.Fatalf("second RevokeKey result differs:%s", d)
	}
	if _, err := s.RevokeKey(ctx, "key_x", now); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	if got, err := s.KeyByHash(ctx, "h1"); err != nil {
		t.Fatalf("KeyByHash after revoke: %v", err)
	} else if d := recordDiff(&revoked, got); d != "" {
		t.Fatalf("KeyByHash after revoke differs:%s", d)
	}
	// Not scoped by the context's tenant.
	if got, err := s.KeyByHash(asTenant("other"), "h2"); err != nil {
		t.Fatalf("KeyByHash from another tenant's context: %v", err)
	} else if d := recordDiff(&want2, got); d != "" {
		t.Fatalf("KeyByHash from another tenant's context differs:%s", d)
	}
}

func testQuotasAndTenants(t *testing.T, s store.AccessStore) {
	ctx := context.Background()
	if q, err := s.Quotas(ctx, "acme"); err != nil || q != (api.Quotas{}) {
		t.Fatalf("Quotas of a tenant with none = %+v, %v", q, err)
	}
	if ts, err := s.Tenants(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("Tenants of an empty store = %v, %v", ts, err)
	}
	two, half := int64(2), 0.5
	if err := s.SetQuotas(ctx, "acme", api.Quotas{RunningSandboxes: &two, CPUs: &half}); err != nil {
		t.Fatal(err)
	}
	q, err := s.Quotas(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(api.Quotas{RunningSandboxes: &two, CPUs: &half}, q); d != "" {
		t.Fatalf("Quotas differ (-want +got):\n%s", d)
	}
	// Every quota, zeros included, round-trips.
	zero, mem, snapBytes := int64(0), int64(4096), int64(1<<40)
	all := api.Quotas{RunningSandboxes: &zero, MemoryMB: &mem, CPUs: &half, SuspendedSandboxes: &two, SnapshotBytes: &snapBytes, ImageBytes: &zero}
	mustBeFull(t, "the quotas", &all)
	if err := s.SetQuotas(ctx, "acme", all); err != nil {
		t.Fatal(err)
	}
	if q, err := s.Quotas(ctx, "acme"); err != nil {
		t.Fatal(err)
	} else if d := cmp.Diff(all, q); d != "" {
		t.Fatalf("all quotas differ (-want +got):\n%s", d)
	}
	if err := s.SetQuotas(ctx, "acme", api.Quotas{}); err != nil {
		t.Fatal(err)
	}
	if q, _ := s.Quotas(ctx, "acme"); q != (api.Quotas{}) {
		t.Fatalf("quotas not replaced whole: %+v", q)
	}
	for _, k := range []*store.Key{
		{ID: "key_1", Hash: "h", Tenant: "beta", Role: api.RoleUser, CreatedAt: time.Now()},
		{ID: "key_2", Hash: "h2", Tenant: "acme", Role: api.RoleUser, CreatedAt: time.Now()},
		{ID: "key_3", Hash: "h3", Tenant: "Zed", Role: api.RoleUser, CreatedAt: time.Now()},
	} {
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	// Once each, bytewise.
	if ts, err := s.Tenants(ctx); err != nil || fmt.Sprint(ts) != "[Zed acme beta]" {
		t.Fatalf("Tenants = %v, %v; want [Zed acme beta]", ts, err)
	}
}

func testAudit(t *testing.T, s store.AccessStore) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 7, time.UTC)
	in := []store.AuditEntry{
		{At: t0, KeyID: "key_1", Tenant: "acme", Action: "POST /v1/sandboxes", Status: 201, Outcome: "ok", RequestID: "r1"},
		{At: t0.Add(time.Second), KeyID: "key_1", Tenant: "acme", Action: "DELETE /v1/sandboxes/{sandbox}", Resource: "sbx_1", Status: 404, Outcome: "not_found"},
		{At: t0.Add(2 * time.Second), KeyID: "key_2", Tenant: "beta", Action: "POST /v1/sandboxes/{sandbox}/exec", Resource: "sbx_2", Status: 200, Outcome: "ok", Via: "mcp"},
	}
	if err := s.AppendAudit(ctx, in); err != nil {
		t.Fatal(err)
	}
	if in[0].ID == 0 || in[1].ID <= in[0].ID || in[2].ID <= in[1].ID {
		t.Fatalf("ids not assigned in order: %d %d %d", in[0].ID, in[1].ID, in[2].ID)
	}
	if err := s.AppendAudit(ctx, nil); err != nil {
		t.Fatalf("AppendAudit(nil): %v", err)
	}
	all, err := s.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatalf("ListAudit: %v", err)
	}
	if d := recordDiff([]store.AuditEntry{in[2], in[1], in[0]}, all); d != "" {
		t.Errorf("ListAudit (newest first) differs:%s", d)
	}
	if l, _ := s.ListAudit(ctx, store.AuditFilter{Tenant: "acme"}); len(l) != 2 {
		t.Fatalf("by tenant: %d", len(l))
	}
	if l, _ := s.ListAudit(ctx, store.AuditFilter{KeyID: "key_2"}); len(l) != 1 || l[0].Tenant != "beta" {
		t.Fatalf("by key: %+v", l)
	}
	if l, _ := s.ListAudit(ctx, store.AuditFilter{Resource: "sbx_1"}); len(l) != 1 || l[0].Outcome != "not_found" {
		t.Fatalf("by resource: %+v", l)
	}
	if l, _ := s.ListAudit(ctx, store.AuditFilter{Before: in[2].ID, Limit: 1}); len(l) != 1 || l[0].ID != in[1].ID {
		t.Fatalf("paging: %+v", l)
	}
	if l, err := s.ListAudit(ctx, store.AuditFilter{Tenant: "nobody"}); err != nil || l == nil || len(l) != 0 {
		t.Fatalf("no match: %#v, %v; want an empty, non-nil list", l, err)
	}
	if n, err := s.PruneAudit(ctx, t0.Add(1500*time.Millisecond)); err != nil || n != 2 {
		t.Fatalf("PruneAudit = %d, %v", n, err)
	}
	if l, _ := s.ListAudit(ctx, store.AuditFilter{}); len(l) != 1 {
		t.Fatalf("after prune: %d", len(l))
	}
}

// RunCells runs the conformance suite of store.CellStore. newStore must
// return a fresh, empty store each time it is called (once per subtest) and
// arrange for its closing with t.Cleanup.
func RunCells(t *testing.T, newStore func(t *testing.T) store.CellStore) {
	t.Run("Cells", func(t *testing.T) { testCells(t, newStore(t)) })
}

// A sandbox's cells get the next seq in order, across batches; each tenant
// sees only its own; the oldest go beyond MaxCellsPerSandbox; a bad
// execution writes nothing of its batch.
func testCells(t *testing.T, s store.CellStore) {
	ctx := context.Background()
	cell := func(id, sbx, ten string) store.Cell {
		return store.Cell{ID: id, Tenant: ten, SandboxID: sbx, Source: "user", Language: "python",
			Code: "x = " + id, Execution: json.RawMessage(`{"execution_count":1}`)}
	}
	// stored is c as ListCells must return it.
	stored := func(c store.Cell, seq int, created time.Time) *store.Cell {
		c.Seq, c.CreatedAt = seq, created
		if c.Tenant == "" {
			c.Tenant = api.DefaultTenant
		}
		return &c
	}
	c1, c2, c3, c4 := cell("c1", "sbx_a", "acme"), cell("c2", "sbx_b", "beta"), cell("c3", "sbx_a", "acme"), cell("c4", "sbx_a", "acme")
	c1.CreatedAt, c2.CreatedAt, c3.CreatedAt = at(1), at(2), at(3) // c4's is stamped by AppendCells
	mustBeFull(t, "the cell", stored(c1, 1, at(1)))
	if err := s.AppendCells(ctx, []store.Cell{c1, c2, c3}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := s.AppendCells(ctx, []store.Cell{c4}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	acme := tenant.With(ctx, tenant.Principal{Tenant: "acme"})
	got, err := s.ListCells(acme, "sbx_a")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("cells of sbx_a: %d, want 3", len(got))
	}
	stamped := got[2].CreatedAt
	if stamped.Before(before.Add(-time.Second)) || stamped.After(after.Add(time.Second)) {
		t.Errorf("cell without a time stamped %v, want between %v and %v", stamped, before, after)
	}
	if d := recordDiff([]*store.Cell{stored(c1, 1, at(1)), stored(c3, 2, at(3)), stored(c4, 3, stamped)}, got); d != "" {
		t.Fatalf("cells of sbx_a differ:%s", d)
	}
	if got, _ := s.ListCells(acme, "sbx_b"); len(got) != 0 {
		t.Fatalf("acme sees beta's cells: %v", got)
	}
	if got, err := s.ListCells(tenant.Unscoped(ctx), "sbx_b"); err != nil {
		t.Fatal(err)
	} else if d := recordDiff([]*store.Cell{stored(c2, 1, at(2))}, got); d != "" {
		t.Fatalf("unscoped, cells of sbx_b differ:%s", d)
	}
	// Times and the tenant default.
	when := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	c := cell("t1", "sbx_t", "")
	c.CreatedAt = when
	if err := s.AppendCells(ctx, []store.Cell{c}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ListCells(ctx, "sbx_t"); err != nil {
		t.Fatal(err)
	} else if d := recordDiff([]*store.Cell{stored(c, 1, when)}, got); d != "" {
		t.Fatalf("cell with a time and no tenant differs:%s", d)
	} else if got[0].CreatedAt.Location() != time.UTC {
		t.Errorf("cell CreatedAt location = %v, want UTC", got[0].CreatedAt.Location())
	}
	bad := cell("c5", "sbx_a", "acme")
	bad.Execution = json.RawMessage(`{`)
	if err := s.AppendCells(ctx, []store.Cell{cell("c6", "sbx_a", "acme"), bad}); err == nil {
		t.Fatal("a cell whose execution is not JSON was stored")
	}
	if got, _ := s.ListCells(acme, "sbx_a"); len(got) != 3 {
		t.Fatalf("a failed batch left %d cells, want 3", len(got))
	}
	var many []store.Cell
	for i := range store.MaxCellsPerSandbox + 5 {
		many = append(many, cell(fmt.Sprintf("m%d", i), "sbx_c", "acme"))
	}
	if err := s.AppendCells(ctx, many); err != nil {
		t.Fatal(err)
	}
	got, _ = s.ListCells(acme, "sbx_c")
	if len(got) != store.MaxCellsPerSandbox || got[0].ID != "m5" || got[len(got)-1].Seq != store.MaxCellsPerSandbox+5 {
		t.Fatalf("after %d cells: %d kept, first %s, last seq %d", store.MaxCellsPerSandbox+5, len(got), got[0].ID, got[len(got)-1].Seq)
	}
}
