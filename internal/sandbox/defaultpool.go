package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// The default pool: the daemon keeps a few sandboxes of the default image
// running, each with its Python kernel started (hidden in the agent until
// the first cell), so that a plain create is handed one and its first cell
// answers at once instead of after the kernel's start (~0.5 s).
//
// A handed-out sandbox must be indistinguishable from a new one: its
// creation time, hostname, name, labels and timeouts are the request's, its
// running time counts from the hand-out, its first cell has execution_count
// 1 and its history is empty; its ready state is invisible (not listed, not
// found by id). Only requests the member could have come from are served:
// the default tenant's (never another tenant's: a member is the default
// tenant's until handed out), with the default image and resources, no
// environment (the kernel already runs with the image's), no network, no
// snapshot. Everything else is an ordinary create.

// DefaultPoolName is the PoolLabel value of the default pool's members (not
// a valid pool name, so no user pool collides with it).
const DefaultPoolName = "_default"

// DefaultPoolSize is the default pool's size unless configured.
const DefaultPoolSize = 2

// SetDefaultPool sets how many ready sandboxes the default pool keeps (0:
// none). Call before Start.
func (m *Manager) SetDefaultPool(size int) error {
	if size < 0 || size > maxPoolSize {
		return rangeErr("default pool size", size, 0, maxPoolSize)
	}
	m.defPoolSize = size
	return nil
}

// defaultPoolFits reports whether req could be served by the default pool.
func (m *Manager) defaultPoolFits(ctx context.Context, req *api.CreateSandboxRequest) bool {
	if m.defaultPool() == nil || owner(ctx) != tenant.Default {
		return false
	}
	if req.Pool != "" || req.SnapshotID != "" || (req.Image != "" && req.Image != image.DefaultImage) ||
		(req.Node != "" && req.Node != m.node) || req.AllowInternetAccess || req.Network != nil || len(req.Env) > 0 {
		return false
	}
	d := m.defaults
	if (req.CPUs != nil && *req.CPUs != d.CPUs) || (req.MemoryMB != nil && *req.MemoryMB != d.MemoryMB) ||
		(req.DiskMB != nil && *req.DiskMB != d.DiskMB) || (req.PIDsLimit != nil && *req.PIDsLimit != d.PIDsLimit) {
		return false
	}
	return m.noQuotas(ctx)
}

// noQuotas: the default tenant has no quotas. With quotas its ready members
// would count against them, so the default pool serves no one then.
func (m *Manager) noQuotas(ctx context.Context) bool {
	q, err := m.quotas(ctx, tenant.Default)
	return err == nil && q.RunningSandboxes == nil && q.MemoryMB == nil && q.CPUs == nil
}

// startDefaultPool makes the default pool and starts filling it, adopting
// ready members that a restarted daemon left running; members beyond the
// size (or all, when the pool is off) are ended.
func (m *Manager) startDefaultPool(ctx context.Context) error {
	list, err := m.store.List(tenant.Unscoped(ctx), store.ListFilter{Node: m.node,
		Labels: map[string]string{PoolLabel: DefaultPoolName, PoolReadyLabel: "true"}})
	if err != nil {
		return err
	}
	var p *pool
	if m.defPoolSize > 0 {
		p = &pool{rec: store.Pool{Tenant: tenant.Default, Name: DefaultPoolName, Image: image.DefaultImage, Size: m.defPoolSize}}
	}
	// Oldest first; members that failed (no API call shows them) are
	// ended too.
	for i := len(list) - 1; i >= 0; i-- {
		sb := list[i]
		if sb.State == api.StateTerminated || m.elsewhere(sb) {
			continue
		}
		if p != nil && len(p.ready) < p.rec.Size && sb.State == api.StateRunning && sb.Tenant == tenant.Default && m.findLive(sb.ID) != nil {
			p.ready = append(p.ready, sb.ID)
			m.markPooled(sb.ID, true)
			continue
		}
		m.terminate(context.WithoutCancel(ctx), sb.ID, "default pool is smaller now", lockOpts{})
	}
	if p == nil {
		return nil
	}
	m.mu.Lock()
	m.defPool = p
	m.mu.Unlock()
	if m.noQuotas(ctx) {
		m.refill(p)
	}
	return nil
}

// prestart starts the Python kernel of a new default pool member.
func (m *Manager) prestart(ctx context.Context, id string) error {
	l := m.findLive(id)
	if l == nil {
		return fmt.Errorf("pool sandbox %s is not running", id)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := l.agent.Prestart(ctx, "python"); err != nil {
		return fmt.Errorf("start the kernel of pool sandbox %s: %w", id, err)
	}
	return nil
}

// createFromDefaultPool hands out a ready member of the default pool for
// req, or returns nil (and no error) when there is none to hand out.
func (m *Manager) createFromDefaultPool(ctx context.Context, req *api.CreateSandboxRequest) (*api.Sandbox, error) {
	p := m.defaultPool()
	spec, err := m.validate(req)
	if err != nil {
		return nil, err
	}
	img, err := m.resolveImage(ctx, image.DefaultImage)
	if err != nil {
		return nil, err
	}
	sb, err := m.handOut(ctx, p, req, spec, claimOpts{fresh: true, imageID: img.ID})
	if sb != nil {
		m.metrics.defaultPoolHits.Inc()
	}
	return sb, err
}

// defaultPool returns the default pool (nil: off).
func (m *Manager) defaultPool() *pool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.defPool
}

// hiddenMember reports whether sb is a ready member of the default pool,
// which no API call shows.
func hiddenMember(sb *store.Sandbox) bool {
	return sb.Spec.Labels[PoolLabel] == DefaultPoolName && sb.Spec.Labels[PoolReadyLabel] == "true"
}
