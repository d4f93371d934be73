package store_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/store"
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
	if err := s.AppendAudit(ctx, []store.AuditEntry{{At: now, Tenant: "acme", Action: "GET /v1/sandboxes", Status: 200}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openClosing(t, path)
	if got, err := s.KeyByHash(ctx, "h1"); err != nil || got.RevokedAt == nil || !got.RevokedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("key after reopen: %+v, %v", got, err)
	}
	if q, err := s.Quotas(ctx, "acme"); err != nil || q.RunningSandboxes == nil || *q.RunningSandboxes != 2 {
		t.Fatalf("quotas after reopen: %+v, %v", q, err)
	}
	if l, err := s.ListAudit(ctx, store.AuditFilter{}); err != nil || len(l) != 1 {
		t.Fatalf("audit after reopen: %+v, %v", l, err)
	}
}
