package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/internal/tenant"
)

// The CellStore half of SQLite (migration 8).

// AppendCells implements CellStore.
func (s *SQLite) AppendCells(ctx context.Context, cells []Cell) error {
	if len(cells) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	next := map[string]int{}
	for i := range cells {
		c := &cells[i]
		if !json.Valid(c.Execution) {
			return fmt.Errorf("cell %s: execution is not JSON", c.ID)
		}
		seq, ok := next[c.SandboxID]
		if !ok {
			if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM cells WHERE sandbox_id = ?`, c.SandboxID).Scan(&seq); err != nil {
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
		if _, err := tx.ExecContext(ctx, `INSERT INTO cells(id, tenant, sandbox_id, seq, source, language, code, execution, created_at)
			VALUES (?,?,?,?,?,?,?,?,?)`, c.ID, c.Tenant, c.SandboxID, c.Seq, c.Source, c.Language, c.Code, string(c.Execution), c.CreatedAt.UnixNano()); err != nil {
			return fmt.Errorf("insert cell %s: %w", c.ID, err)
		}
	}
	for id, last := range next {
		if last > MaxCellsPerSandbox {
			if _, err := tx.ExecContext(ctx, `DELETE FROM cells WHERE sandbox_id = ? AND seq <= ?`, id, last-MaxCellsPerSandbox); err != nil {
				return fmt.Errorf("trim cells of %s: %w", id, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit cells: %w", err)
	}
	return nil
}

// ListCells implements CellStore.
func (s *SQLite) ListCells(ctx context.Context, sandboxID string) ([]*Cell, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, tenant, sandbox_id, seq, source, language, code, execution, created_at
		FROM cells WHERE sandbox_id = ?1 AND (?2 = '' OR tenant = ?2) ORDER BY seq`, sandboxID, tenant.Of(ctx))
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
	return out, rows.Err()
}
