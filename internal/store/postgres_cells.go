package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/forkbox/forkbox/internal/tenant"
	"github.com/jackc/pgx/v5"
)

// The CellStore half of Postgres.

// AppendCells implements CellStore. A sandbox's cells have no parent row to
// lock, so the batch takes a transaction advisory lock per sandbox (in
// order, so that batches never deadlock) before it reads the last Seq:
// another daemon's batch for the same sandbox waits, then numbers after it.
func (p *Postgres) AppendCells(ctx context.Context, cells []Cell) error {
	if len(cells) == 0 {
		return nil
	}
	var sandboxes []string
	seen := map[string]bool{}
	for _, c := range cells {
		if !seen[c.SandboxID] {
			seen[c.SandboxID] = true
			sandboxes = append(sandboxes, c.SandboxID)
		}
	}
	sort.Strings(sandboxes)
	return p.inTx(ctx, func(tx pgx.Tx) error {
		for _, id := range sandboxes {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, pgLockCells, id); err != nil {
				return fmt.Errorf("lock cells of %s: %w", id, err)
			}
		}
		next := map[string]int{}
		for i := range cells {
			c := &cells[i]
			if !json.Valid(c.Execution) {
				return fmt.Errorf("cell %s: execution is not JSON", c.ID)
			}
			seq, ok := next[c.SandboxID]
			if !ok {
				if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM cells WHERE sandbox_id = $1`, c.SandboxID).Scan(&seq); err != nil {
					return fmt.Errorf("last cell of %s: %w", c.SandboxID, err)
				}
			}
			seq++
			next[c.SandboxID] = seq
			c.Seq = seq
			if c.Tenant == "" {
				c.Tenant = tenant.Default
			}
			if c.CreatedAt.IsZero() {
				c.CreatedAt = time.Now().UTC()
			}
			if _, err := tx.Exec(ctx, `INSERT INTO cells(id, tenant, sandbox_id, seq, source, language, code, execution, created_at)
				VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)`, c.ID, c.Tenant, c.SandboxID, c.Seq, c.Source, c.Language, c.Code, string(c.Execution), c.CreatedAt.UnixNano()); err != nil {
				return fmt.Errorf("insert cell %s: %w", c.ID, err)
			}
		}
		for id, last := range next {
			if last > MaxCellsPerSandbox {
				if _, err := tx.Exec(ctx, `DELETE FROM cells WHERE sandbox_id = $1 AND seq <= $2`, id, last-MaxCellsPerSandbox); err != nil {
					return fmt.Errorf("trim cells of %s: %w", id, err)
				}
			}
		}
		return nil
	})
}

// ListCells implements CellStore.
func (p *Postgres) ListCells(ctx context.Context, sandboxID string) ([]*Cell, error) {
	rows, err := p.pool.Query(ctx, `SELECT id, tenant, sandbox_id, seq, source, language, code, execution, created_at
		FROM cells WHERE sandbox_id = $1 AND ($2 = '' OR tenant = $2) ORDER BY seq`, sandboxID, tenant.Of(ctx))
	if err != nil {
		return nil, fmt.Errorf("list cells of %s: %w", sandboxID, err)
	}
	defer rows.Close()
	var out []*Cell
	for rows.Next() {
		var (
			c       Cell
			exec    string
			created int64
		)
		if err := rows.Scan(&c.ID, &c.Tenant, &c.SandboxID, &c.Seq, &c.Source, &c.Language, &c.Code, &exec, &created); err != nil {
			return nil, err
		}
		c.Execution = json.RawMessage(exec)
		c.CreatedAt = time.Unix(0, created).UTC()
		out = append(out, &c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list cells of %s: %w", sandboxID, err)
	}
	return out, nil
}
