package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// The NodeStore half of SQLite (migration 9). Nodes are the cluster's, not a
// tenant's: the context's tenant does not scope them.

const nodeCols = `id, address, cpus, memory_bytes, disk_bytes, disk_free_bytes, running, memory_reserved, started_at, heartbeat_at`

func scanNode(r scanner) (*Node, error) {
	var (
		n               Node
		started, beatAt int64
	)
	if err := r.Scan(&n.ID, &n.Address, &n.CPUs, &n.MemoryBytes, &n.DiskBytes, &n.DiskFreeBytes, &n.Running, &n.MemoryReserved, &started, &beatAt); err != nil {
		return nil, err
	}
	n.StartedAt = time.Unix(0, started).UTC()
	n.HeartbeatAt = time.Unix(0, beatAt).UTC()
	return &n, nil
}

// Heartbeat implements NodeStore.
func (s *SQLite) Heartbeat(ctx context.Context, n *Node) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO nodes(`+nodeCols+`) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)
		ON CONFLICT(id) DO UPDATE SET address=?2, cpus=?3, memory_bytes=?4, disk_bytes=?5, disk_free_bytes=?6,
			running=?7, memory_reserved=?8, started_at=?9, heartbeat_at=?10`,
		n.ID, n.Address, n.CPUs, n.MemoryBytes, n.DiskBytes, n.DiskFreeBytes, n.Running, n.MemoryReserved,
		n.StartedAt.UnixNano(), n.HeartbeatAt.UnixNano()); err != nil {
		return fmt.Errorf("heartbeat of node %s: %w", n.ID, err)
	}
	return nil
}

// GetNode implements NodeStore.
func (s *SQLite) GetNode(ctx context.Context, id string) (*Node, error) {
	n, err := scanNode(s.db.QueryRowContext(ctx, `SELECT `+nodeCols+` FROM nodes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("node %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get node %q: %w", id, err)
	}
	return n, nil
}

// ListNodes implements NodeStore.
func (s *SQLite) ListNodes(ctx context.Context) ([]*Node, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+nodeCols+` FROM nodes ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer rows.Close()
	var out []*Node
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// DeleteNode implements NodeStore.
func (s *SQLite) DeleteNode(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM nodes WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete node %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("node %q not found", id)
	}
	return nil
}
