package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// The AccessStore half of SQLite (migration 7).

var _ AccessStore = (*SQLite)(nil)

const keyCols = `id, hash, tenant, role, name, created_at, expires_at, revoked_at`

func scanKey(r scanner) (*Key, error) {
	var (
		k                Key
		created          int64
		expires, revoked sql.NullInt64
	)
	if err := r.Scan(&k.ID, &k.Hash, &k.Tenant, &k.Role, &k.Name, &created, &expires, &revoked); err != nil {
		return nil, err
	}
	k.CreatedAt = time.Unix(0, created).UTC()
	k.ExpiresAt, k.RevokedAt = fromNullTime(expires), fromNullTime(revoked)
	return &k, nil
}

func fromNullTime(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := time.Unix(0, n.Int64).UTC()
	return &t
}

// CreateKey implements AccessStore.
func (s *SQLite) CreateKey(ctx context.Context, k *Key) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_keys(`+keyCols+`) VALUES (?,?,?,?,?,?,?,?)`,
		k.ID, k.Hash, k.Tenant, k.Role, k.Name, k.CreatedAt.UnixNano(), nullTime(k.ExpiresAt), nullTime(k.RevokedAt))
	if isUniqueViolation(err) {
		return errdefs.Conflict("key %s already exists", k.ID)
	}
	if err != nil {
		return fmt.Errorf("insert key: %w", err)
	}
	return nil
}

// KeyByHash implements AccessStore.
func (s *SQLite) KeyByHash(ctx context.Context, hash string) (*Key, error) {
	k, err := scanKey(s.db.QueryRowContext(ctx, `SELECT `+keyCols+` FROM api_keys WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("no such key")
	}
	if err != nil {
		return nil, fmt.Errorf("look up key: %w", err)
	}
	return k, nil
}

// ListKeys implements AccessStore.
func (s *SQLite) ListKeys(ctx context.Context, tenant string) ([]*Key, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyCols+` FROM api_keys WHERE (?1 = '' OR tenant = ?1) ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	var out []*Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeKey implements AccessStore.
func (s *SQLite) RevokeKey(ctx context.Context, id string, at time.Time) (*Key, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, at.UnixNano(), id); err != nil {
		return nil, fmt.Errorf("revoke key %s: %w", id, err)
	}
	k, err := scanKey(tx.QueryRowContext(ctx, `SELECT `+keyCols+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("key %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("read key %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return k, nil
}

// SetQuotas implements AccessStore.
func (s *SQLite) SetQuotas(ctx context.Context, tenant string, q api.Quotas) error {
	b, err := json.Marshal(q)
	if err != nil {
		return fmt.Errorf("encode quotas: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO tenants(name, quotas, updated_at) VALUES (?1, ?2, ?3)
		ON CONFLICT(name) DO UPDATE SET quotas = ?2, updated_at = ?3`, tenant, string(b), time.Now().UnixNano()); err != nil {
		return fmt.Errorf("set quotas of %s: %w", tenant, err)
	}
	return nil
}

// Quotas implements AccessStore.
func (s *SQLite) Quotas(ctx context.Context, tenant string) (api.Quotas, error) {
	var q api.Quotas
	var raw string
	err := s.db.QueryRowContext(ctx, `SELECT quotas FROM tenants WHERE name = ?`, tenant).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return q, nil
	}
	if err != nil {
		return q, fmt.Errorf("quotas of %s: %w", tenant, err)
	}
	if err := json.Unmarshal([]byte(raw), &q); err != nil {
		return q, fmt.Errorf("quotas of %s: %w", tenant, err)
	}
	return q, nil
}

// Tenants implements AccessStore.
func (s *SQLite) Tenants(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name FROM tenants UNION SELECT tenant FROM api_keys ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// AppendAudit implements AccessStore.
func (s *SQLite) AppendAudit(ctx context.Context, entries []AuditEntry) error {
	if len(entries) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	for i := range entries {
		e := &entries[i]
		res, err := tx.ExecContext(ctx, `INSERT INTO audit(at, key_id, tenant, action, resource, status, outcome, request_id, via) VALUES (?,?,?,?,?,?,?,?,?)`,
			e.At.UnixNano(), e.KeyID, e.Tenant, e.Action, e.Resource, e.Status, e.Outcome, e.RequestID, e.Via)
		if err != nil {
			return fmt.Errorf("insert audit entry: %w", err)
		}
		e.ID, _ = res.LastInsertId()
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ListAudit implements AccessStore.
func (s *SQLite) ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	out, _, err := s.ListAuditPage(ctx, f, auditPage(f))
	return out, err
}

// ListAuditPage implements AccessStore.
func (s *SQLite) ListAuditPage(ctx context.Context, f AuditFilter, p Page) ([]AuditEntry, string, error) {
	query, args, err := auditListQuery(false, f, p)
	if err != nil {
		return nil, "", err
	}
	out, err := sqliteRows(ctx, s.db, "list audit", query, args, scanAudit)
	if err != nil {
		return nil, "", err
	}
	if out == nil {
		out = []AuditEntry{}
	}
	out, next := cutPage(out, p, auditCursor)
	return out, next, nil
}

// PruneAudit implements AccessStore.
func (s *SQLite) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM audit WHERE at < ?`, before.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("prune audit: %w", err)
	}
	return res.RowsAffected()
}
