package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/jackc/pgx/v5"
)

// The AccessStore half of Postgres.

// CreateKey implements AccessStore.
func (p *Postgres) CreateKey(ctx context.Context, k *Key) error {
	_, err := p.pool.Exec(ctx, `INSERT INTO api_keys(`+keyCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)`,
		k.ID, k.Hash, k.Tenant, k.Role, k.Name, k.CreatedAt.UnixNano(), nullTime(k.ExpiresAt), nullTime(k.RevokedAt))
	if pgUniqueViolation(err) {
		return errdefs.Conflict("key %s already exists", k.ID)
	}
	if err != nil {
		return fmt.Errorf("insert key: %w", err)
	}
	return nil
}

// KeyByHash implements AccessStore.
func (p *Postgres) KeyByHash(ctx context.Context, hash string) (*Key, error) {
	k, err := scanKey(p.pool.QueryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("no such key")
	}
	if err != nil {
		return nil, fmt.Errorf("look up key: %w", err)
	}
	return k, nil
}

// ListKeys implements AccessStore.
func (p *Postgres) ListKeys(ctx context.Context, tenant string) ([]*Key, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+keyCols+` FROM api_keys WHERE ($1 = '' OR tenant = $1) ORDER BY created_at, id`, tenant)
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return out, nil
}

// RevokeKey implements AccessStore.
func (p *Postgres) RevokeKey(ctx context.Context, id string, at time.Time) (*Key, error) {
	k, err := scanKey(p.pool.QueryRow(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2
		RETURNING `+keyCols, at.UnixNano(), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("key %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("revoke key %s: %w", id, err)
	}
	return k, nil
}

// SetQuotas implements AccessStore.
func (p *Postgres) SetQuotas(ctx context.Context, tenant string, q api.Quotas) error {
	b, err := json.Marshal(q)
	if err != nil {
		return fmt.Errorf("encode quotas: %w", err)
	}
	if _, err := p.pool.Exec(ctx, `INSERT INTO tenants(name, quotas, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT(name) DO UPDATE SET quotas = EXCLUDED.quotas, updated_at = EXCLUDED.updated_at`, tenant, string(b), time.Now().UnixNano()); err != nil {
		return fmt.Errorf("set quotas of %s: %w", tenant, err)
	}
	return nil
}

// Quotas implements AccessStore.
func (p *Postgres) Quotas(ctx context.Context, tenant string) (api.Quotas, error) {
	var q api.Quotas
	var raw string
	err := p.pool.QueryRow(ctx, `SELECT quotas FROM tenants WHERE name = $1`, tenant).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
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
func (p *Postgres) Tenants(ctx context.Context) ([]string, error) {
	rows, err := p.pool.Query(ctx, `SELECT name FROM tenants UNION SELECT tenant FROM api_keys ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// AppendAudit implements AccessStore.
func (p *Postgres) AppendAudit(ctx context.Context, entries []AuditEntry) error {
	if len(entries) == 0 {
		return nil
	}
	ids := make([]int64, len(entries))
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		for i := range entries {
			e := &entries[i]
			if err := tx.QueryRow(ctx, `INSERT INTO audit(at, key_id, tenant, action, resource, status, outcome, request_id, via)
				VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) RETURNING id`,
				e.At.UnixNano(), e.KeyID, e.Tenant, e.Action, e.Resource, e.Status, e.Outcome, e.RequestID, e.Via).Scan(&ids[i]); err != nil {
				return fmt.Errorf("insert audit entry: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range entries {
		entries[i].ID = ids[i]
	}
	return nil
}

// ListAudit implements AccessStore.
func (p *Postgres) ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	out, _, err := p.ListAuditPage(ctx, f, auditPage(f))
	return out, err
}

// ListAuditPage implements AccessStore.
func (p *Postgres) ListAuditPage(ctx context.Context, f AuditFilter, pg Page) ([]AuditEntry, string, error) {
	query, args, err := auditListQuery(true, f, pg)
	if err != nil {
		return nil, "", err
	}
	out, err := pgRows(ctx, p.pool, "list audit", query, args, scanAudit)
	if err != nil {
		return nil, "", err
	}
	if out == nil {
		out = []AuditEntry{}
	}
	out, next := cutPage(out, pg, auditCursor)
	return out, next, nil
}

// PruneAudit implements AccessStore.
func (p *Postgres) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	tag, err := p.pool.Exec(ctx, `DELETE FROM audit WHERE at < $1`, before.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("prune audit: %w", err)
	}
	return tag.RowsAffected(), nil
}
