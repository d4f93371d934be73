package store_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/store/storetest"
	"github.com/google/go-cmp/cmp"
)

// Keys, quotas and audit entries survive a reopen (storetest.RunAccess holds
// both backends to the rest of AccessStore's contract).
func TestSQLiteAccessDurable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forkbox.db")
	s := openSQLite(t, path)
	now := time.Date(2026, 12, 1, 2, 3, 4, 5, time.UTC)
	if err := s.CreateKey(ctx, &store.Key{ID: "key_1", Hash: "h1", Tenant: "acme", Role: api.RoleUser, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeKey(ctx, "key_1", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	two := int64(2)
	if err := s.SetQuotas(ctx, "acme", api.Quotas{RunningSandboxes: &two}); err != nil {
		t.Fatal(err)
	}
	audit := []store.AuditEntry{{At: now, Tenant: "acme", Action: "GET /v1/sandboxes", Status: 200}}
	if err := s.AppendAudit(ctx, audit); err != nil { // it assigns audit[0].ID
		t.Fatal(err)
	}
	s.Close()
	s = openClosing(t, path)
	revoked := now.Add(time.Minute)
	wantKey := &store.Key{ID: "key_1", Hash: "h1", Tenant: "acme", Role: api.RoleUser, CreatedAt: now, RevokedAt: &revoked}
	if got, err := s.KeyByHash(ctx, "h1"); err != nil {
		t.Fatalf("key after reopen: %v", err)
	} else if d := cmp.Diff(wantKey, got, storetest.RecordOptions); d != "" {
		t.Fatalf("key after reopen (-want +got):\n%s", d)
	}
	if q, err := s.Quotas(ctx, "acme"); err != nil {
		t.Fatalf("quotas after reopen: %v", err)
	} else if d := cmp.Diff(api.Quotas{RunningSandboxes: &two}, q); d != "" {
		t.Fatalf("quotas after reopen (-want +got):\n%s", d)
	}
	if l, err := s.ListAudit(ctx, store.AuditFilter{}); err != nil {
		t.Fatalf("audit after reopen: %v", err)
	} else if d := cmp.Diff(audit, l, storetest.RecordOptions); d != "" {
		t.Fatalf("audit after reopen (-want +got):\n%s", d)
	}
}
