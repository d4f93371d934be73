package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
)

func TestSQLiteKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forkbox.db")
	s := openSQLite(t, path)
	now := time.Date(2026, 12, 1, 2, 3, 4, 5, time.UTC)
	exp := now.Add(time.Hour)
	k := &store.Key{ID: "key_1", Hash: "h1", Tenant: "acme", Role: api.RoleUser, Name: "ci", CreatedAt: now, ExpiresAt: &exp}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateKey(ctx, &store.Key{ID: "key_2", Hash: "h1", Tenant: "b", Role: api.RoleUser, CreatedAt: now}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate hash: %v", err)
	}
	if err := s.CreateKey(ctx, &store.Key{ID: "key_2", Hash: "h2", Tenant: "beta", Role: api.RoleAdmin, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	got, err := s.KeyByHash(ctx, "h1")
	if err != nil || got.ID != "key_1" || got.Tenant != "acme" || got.Name != "ci" || !got.ExpiresAt.Equal(exp) || got.RevokedAt != nil {
		t.Fatalf("KeyByHash = %+v, %v", got, err)
	}
	if _, err := s.KeyByHash(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown hash: %v", err)
	}
	if l, err := s.ListKeys(ctx, "acme"); err != nil || len(l) != 1 || l[0].ID != "key_1" {
		t.Fatalf("ListKeys(acme) = %v, %v", l, err)
	}
	if l, err := s.ListKeys(ctx, ""); err != nil || len(l) != 2 {
		t.Fatalf("ListKeys() = %v, %v", l, err)
	}
	rk, err := s.RevokeKey(ctx, "key_1", now.Add(time.Minute))
	if err != nil || rk.RevokedAt == nil || !rk.RevokedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("RevokeKey = %+v, %v", rk, err)
	}
	// A second revoke keeps the first time.
	if rk, err = s.RevokeKey(ctx, "key_1", now.Add(time.Hour)); err != nil || !rk.RevokedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("second RevokeKey = %+v, %v", rk, err)
	}
	if _, err := s.RevokeKey(ctx, "key_x", now); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	s.Close()
	s = openSQLite(t, path) // durable
	if got, err := s.KeyByHash(ctx, "h1"); err != nil || got.RevokedAt == nil {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
}

func TestSQLiteQuotasAndTenants(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t, filepath.Join(t.TempDir(), "forkbox.db"))
	if q, err := s.Quotas(ctx, "acme"); err != nil || q != (api.Quotas{}) {
		t.Fatalf("Quotas of a tenant with none = %+v, %v", q, err)
	}
	two, half := int64(2), 0.5
	if err := s.SetQuotas(ctx, "acme", api.Quotas{RunningSandboxes: &two, CPUs: &half}); err != nil {
		t.Fatal(err)
	}
	q, err := s.Quotas(ctx, "acme")
	if err != nil || q.RunningSandboxes == nil || *q.RunningSandboxes != 2 || *q.CPUs != 0.5 || q.MemoryMB != nil {
		t.Fatalf("Quotas = %+v, %v", q, err)
	}
	if err := s.SetQuotas(ctx, "acme", api.Quotas{}); err != nil {
		t.Fatal(err)
	}
	if q, _ := s.Quotas(ctx, "acme"); q.RunningSandboxes != nil {
		t.Fatalf("quotas not replaced whole: %+v", q)
	}
	if err := s.CreateKey(ctx, &store.Key{ID: "key_1", Hash: "h", Tenant: "beta", Role: api.RoleUser, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if ts, err := s.Tenants(ctx); err != nil || len(ts) != 2 || ts[0] != "acme" || ts[1] != "beta" {
		t.Fatalf("Tenants = %v, %v", ts, err)
	}
}

func TestSQLiteAudit(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t, filepath.Join(t.TempDir(), "forkbox.db"))
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	in := []store.AuditEntry{
		{At: t0, KeyID: "key_1", Tenant: "acme", Action: "POST /v1/sandboxes", Status: 201, Outcome: "ok", RequestID: "r1"},
		{At: t0.Add(time.Second), KeyID: "key_1", Tenant: "acme", Action: "DELETE /v1/sandboxes/{sandbox}", Resource: "sbx_1", Status: 404, Outcome: "not_found"},
		{At: t0.Add(2 * time.Second), KeyID: "key_2", Tenant: "beta", Action: "POST /v1/sandboxes/{sandbox}/exec", Resource: "sbx_2", Status: 200, Outcome: "ok", Via: "mcp"},
	}
	if err := s.AppendAudit(ctx, in); err != nil {
		t.Fatal(err)
	}
	if in[0].ID == 0 || in[2].ID <= in[1].ID {
		t.Fatalf("ids not assigned in order: %d %d %d", in[0].ID, in[1].ID, in[2].ID)
	}
	all, err := s.ListAudit(ctx, store.AuditFilter{})
	if err != nil || len(all) != 3 || all[0].ID != in[2].ID || all[0].Via != "mcp" || !all[2].At.Equal(t0) {
		t.Fatalf("ListAudit = %+v, %v", all, err)
	}
	if l, _ := s.ListAudit(ctx, store.AuditFilter{Tenant: "acme"}); len(l) != 2 {
		t.Fatalf("by tenant: %d", len(l))
	}
	if l, _ := s.ListAudit(ctx, store.AuditFilter{Resource: "sbx_1"}); len(l) != 1 || l[0].Outcome != "not_found" {
		t.Fatalf("by resource: %+v", l)
	}
	if l, _ := s.ListAudit(ctx, store.AuditFilter{Before: in[2].ID, Limit: 1}); len(l) != 1 || l[0].ID != in[1].ID {
		t.Fatalf("paging: %+v", l)
	}
	if n, err := s.PruneAudit(ctx, t0.Add(1500*time.Millisecond)); err != nil || n != 2 {
		t.Fatalf("PruneAudit = %d, %v", n, err)
	}
	if l, _ := s.ListAudit(ctx, store.AuditFilter{}); len(l) != 1 {
		t.Fatalf("after prune: %d", len(l))
	}
}
