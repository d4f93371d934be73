package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// Nodes: daemons that share one store (PostgreSQL) form a cluster, each a
// node with an id. A sandbox row names its node (store.Sandbox.Node): the
// node that runs it, or that suspended it and has its image cached. A
// Manager acts only on its own node's sandboxes; package cluster routes
// calls for the others to their node, and hands this Manager the suspended
// sandboxes of nodes that went down (Adopt) and reports their running ones
// lost (NodeLost). Rows without a node (a single daemon's, from before
// nodes) belong to whichever daemon reads them. A Manager without a node id
// (SetNode not called) is a single daemon: every row is its own.

// SetNode makes the Manager node id of a cluster. Call before Start.
func (m *Manager) SetNode(id string) { m.node = id }

// Node is the Manager's node id ("" for a single daemon).
func (m *Manager) Node() string { return m.node }

// elsewhere reports whether sb belongs to another node.
func (m *Manager) elsewhere(sb *store.Sandbox) bool {
	return m.node != "" && sb.Node != "" && sb.Node != m.node
}

// errElsewhere is the error of a call this node cannot serve: sb is on
// another node.
func errElsewhere(sb *store.Sandbox) error {
	return errdefs.Unavailable("sandbox %s is on node %s, not this one; its calls go there (a node's HTTP API forwards them)", sb.ID, sb.Node)
}

// Capacity is what this node gives sandboxes and holds now, for its
// heartbeat (ID, Address and times are the caller's).
func (m *Manager) Capacity() store.Node {
	h := m.hostLimits()
	info := h.read(h.diskDir)
	n := store.Node{
		CPUs:          float64(info.CPUs),
		MemoryBytes:   info.MemTotalMB << 20,
		DiskBytes:     info.DiskTotalMB << 20,
		DiskFreeBytes: info.DiskFreeMB << 20,
	}
	m.mu.Lock()
	for _, l := range m.live {
		n.Running++
		n.MemoryReserved += l.memoryMB << 20
	}
	m.mu.Unlock()
	return n
}

// Adopt makes suspended sandbox id, which node from holds, this node's:
// from went down, and its image is in the shared blob store. The next call
// that needs it running resumes it here. A sandbox no longer suspended on
// from is left alone (another node adopted it first, or it changed): that
// is not an error.
func (m *Manager) Adopt(ctx context.Context, id, from string) error {
	if m.node == "" {
		return errdefs.FailedPrecondition("adopt: this daemon is not a node of a cluster")
	}
	moved, err := m.Move(ctx, id, from, m.node)
	if moved {
		m.log.Info("adopted suspended sandbox of a node that is down", "sandbox", id, "from", from)
	}
	return err
}

// Move hands suspended sandbox id from node from to node to (a suspended
// sandbox holds nothing on its node but a cached copy of its image, which
// the bucket also has), and reports whether it did: not when it is no
// longer suspended on from (another call moved or resumed it first). The
// row lock makes a move and from's own resume exclusive: a resume rechecks
// the node under the same lock (setState).
func (m *Manager) Move(ctx context.Context, id, from, to string) (bool, error) {
	if m.node == "" || to == "" {
		return false, errdefs.FailedPrecondition("move: this daemon is not a node of a cluster")
	}
	_, err := m.store.Update(tenant.Unscoped(ctx), id, func(s *store.Sandbox) error {
		if s.Node != from || s.State != api.StateSuspended {
			return errNotAdopted
		}
		s.Node = to
		return nil
	})
	if err == errNotAdopted {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("move sandbox %s from node %s to %s: %w", id, from, to, err)
	}
	return true, nil
}

var errNotAdopted = errdefs.FailedPrecondition("not adopted")

// NodeLost settles the sandboxes of node, which stopped answering: those it
// was running (or creating, suspending, resuming) are lost with it. With
// resume, one that has a suspend image becomes this node's and suspended
// instead, to be resumed from that image (older than its last state) by
// its next call. Suspended sandboxes are left for Adopt. It reports how
// many it marked lost and how many it took to resume.
func (m *Manager) NodeLost(ctx context.Context, node string, heartbeat time.Time, resume bool) (lost, resumable int, err error) {
	if node == "" || node == m.node {
		return 0, 0, nil
	}
	ctx = tenant.Unscoped(ctx)
	// Gone no longer? (A restart slower than the timeout comes back.)
	if ns, ok := m.store.(store.NodeStore); ok {
		if x, err := ns.GetNode(ctx, node); err == nil && x.HeartbeatAt.After(heartbeat) {
			return 0, 0, nil
		}
	}
	list, err := m.store.List(ctx, store.ListFilter{Node: node})
	if err != nil {
		return 0, 0, err
	}
	for _, sb := range list {
		if sb.Node != node {
			continue // a row without a node matches every filter
		}
		if !sb.State.HoldsProcesses() {
			continue
		}
		var took bool
		_, uerr := m.store.Update(ctx, sb.ID, func(s *store.Sandbox) error {
			took = false
			if s.Node != node {
				return errNotAdopted
			}
			if !s.State.HoldsProcesses() {
				return errNotAdopted
			}
			if resume && s.SuspendImage != "" && s.State != api.StateCreating {
				s.State = api.StateSuspended
				s.StateReason = fmt.Sprintf("node %s stopped answering (last heartbeat %s); resumed from its last suspend image on its next call, without what changed since",
					node, heartbeat.UTC().Format(time.RFC3339))
				s.Node = m.node
				s.Runtime = nil
				took = true
				return nil
			}
			s.StateReason = fmt.Sprintf("node %s stopped answering (last heartbeat %s) while the sandbox was %s; its processes are gone with it, unless the node comes back with them",
				node, heartbeat.UTC().Format(time.RFC3339), s.State)
			s.State = api.StateLost
			// Runtime is kept: the node, should it come back with the
			// processes, adopts them from it (reconcile).
			return nil
		})
		switch {
		case uerr == errNotAdopted:
		case uerr != nil:
			err = fmt.Errorf("node %s lost: sandbox %s: %w", node, sb.ID, uerr)
		case took:
			resumable++
			m.log.Warn("sandbox of a lost node will resume here from its last suspend image", "sandbox", sb.ID, "node", node)
		default:
			lost++
			m.log.Warn("sandbox lost with its node", "sandbox", sb.ID, "node", node)
		}
	}
	return lost, resumable, err
}

// SyncPools brings this node's pools in line with the store's records, which
// every node shares: a pool created on another node gets its ready
// sandboxes here too (each node keeps Size of its own), one deleted there
// loses them here.
func (m *Manager) SyncPools(ctx context.Context) error {
	recs, err := m.store.ListPools(tenant.Unscoped(ctx))
	if err != nil {
		return fmt.Errorf("sync pools: %w", err)
	}
	want := map[string]store.Pool{}
	for _, r := range recs {
		want[poolKey(r.Tenant, r.Name)] = *r
	}
	var added, gone []*pool
	m.mu.Lock()
	if m.pools == nil {
		m.pools = map[string]*pool{}
	}
	for k, r := range want {
		if p, ok := m.pools[k]; !ok || !p.rec.CreatedAt.Equal(r.CreatedAt) {
			if ok {
				gone = append(gone, p) // deleted and made again under its name
			}
			p := &pool{rec: r}
			m.pools[k] = p
			added = append(added, p)
		}
	}
	for k, p := range m.pools {
		if _, ok := want[k]; !ok {
			delete(m.pools, k)
			gone = append(gone, p)
		}
	}
	m.mu.Unlock()
	for _, p := range gone {
		p.mu.Lock()
		p.deleted = true
		ready := p.ready
		p.ready = nil
		p.mu.Unlock()
		for _, id := range ready {
			m.terminate(context.WithoutCancel(ctx), id, "pool deleted", lockOpts{})
		}
		m.log.Info("pool deleted on another node; its sandboxes here are ended", "pool", p.rec.Name, "tenant", p.rec.Tenant)
	}
	for _, p := range added {
		m.log.Info("pool created on another node; filling it here too", "pool", p.rec.Name, "tenant", p.rec.Tenant)
		m.refill(p)
	}
	return nil
}
