package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/jackc/pgx/v5"
)

// The NodeStore half of Postgres: every daemon of the cluster keeps its row
// here; the context's tenant does not scope nodes.

// Heartbeat implements NodeStore.
func (p *Postgres) Heartbeat(ctx context.Context, n *Node) error {
	if _, err := p.pool.Exec(ctx, `INSERT INTO nodes(`+nodeCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)
		ON CONFLICT(id) DO UPDATE SET address=EXCLUDED.address, cpus=EXCLUDED.cpus, memory_bytes=EXCLUDED.memory_bytes,
			disk_bytes=EXCLUDED.disk_bytes, disk_free_bytes=EXCLUDED.disk_free_bytes, running=EXCLUDED.running,
			memory_reserved=EXCLUDED.memory_reserved, started_at=EXCLUDED.started_at, heartbeat_at=EXCLUDED.heartbeat_at`,
		n.ID, n.Address, n.CPUs, n.MemoryBytes, n.DiskBytes, n.DiskFreeBytes, n.Running, n.MemoryReserved,
		n.StartedAt.UnixNano(), n.HeartbeatAt.UnixNano()); err != nil {
		return fmt.Errorf("heartbeat of node %s: %w", n.ID, err)
	}
	return nil
}

// GetNode implements NodeStore.
func (p *Postgres) GetNode(ctx context.Context, id string) (*Node, error) {
	n, err := scanNode(p.pool.QueryRow(ctx, `SELECT `+nodeCols+` FROM nodes WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("node %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get node %q: %w", id, err)
	}
	return n, nil
}

// ListNodes implements NodeStore.
func (p *Postgres) ListNodes(ctx context.Context) ([]*Node, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+nodeCols+` FROM nodes ORDER BY id`)
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// DeleteNode implements NodeStore.
func (p *Postgres) DeleteNode(ctx context.Context, id string) error {
	tag, err := p.pool.Exec(ctx, `DELETE FROM nodes WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete node %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.NotFound("node %q not found", id)
	}
	return nil
}
