package sandbox

import (
	"context"
	"fmt"
	"sync"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// Tenants' quotas bound what each tenant holds at once: running sandboxes
// with the memory and CPUs they were given, suspended sessions, snapshot
// bytes and image bytes. Starting a sandbox (create, restore, fork branch,
// pool refill, resume) is admitted against the running quotas with the
// starts under way counted, so that concurrent creates cannot overshoot
// together; the byte quotas are checked before a checkpoint, fork, build or
// import starts (their size is known only at the end). Over a quota the
// call fails with a QuotaError (429 naming the quota, the use and the
// limit) and changes nothing.

// QuotaSource gives a tenant's quotas (the metadata store's AccessStore).
type QuotaSource interface {
	Quotas(ctx context.Context, tenant string) (api.Quotas, error)
}

// SetQuotaSource enables quotas.
func (m *Manager) SetQuotaSource(q QuotaSource) { m.quotaSrc = q }

// QuotaError is a tenant over one of its quotas.
type QuotaError struct{ api.QuotaExceeded }

func (e *QuotaError) Error() string {
	return fmt.Sprintf("quota %s exceeded: the tenant holds %s and asks for %s more; its limit is %s",
		e.Quota, num(e.Use), num(e.Requested), num(e.Limit))
}

// Unwrap makes it a resource_exhausted error (429).
func (e *QuotaError) Unwrap() error { return errdefs.ErrResourceExhausted }

func num(f float64) string { return fmt.Sprintf("%g", f) }

// quotaState holds the starts admitted and not yet recorded running.
type quotaState struct {
	mu      sync.Mutex
	pending map[string]pendingStart // by sandbox id
}

type pendingStart struct {
	tenant   string
	memoryMB int64
	cpus     float64
}

func (m *Manager) quotas(ctx context.Context, t string) (api.Quotas, error) {
	if m.quotaSrc == nil {
		return api.Quotas{}, nil
	}
	return m.quotaSrc.Quotas(tenant.Unscoped(ctx), t)
}

// Usage measures what tenant t holds now, with its quotas.
func (m *Manager) Usage(ctx context.Context, t string) (*api.TenantUsage, error) {
	u, err := m.usage(ctx, t, "")
	if err != nil {
		return nil, err
	}
	if u.Quotas, err = m.quotas(ctx, t); err != nil {
		return nil, err
	}
	if u.ImageBytes, err = m.imageBytes(ctx, t); err != nil {
		return nil, err
	}
	return u, nil
}

// usage counts t's sandboxes and snapshots, leaving out sandbox skip (the
// one being admitted, already in the store while it resumes).
func (m *Manager) usage(ctx context.Context, t, skip string) (*api.TenantUsage, error) {
	all := tenant.Unscoped(ctx)
	u := &api.TenantUsage{Tenant: t}
	for _, state := range append(liveStates, api.StateSuspended) {
		list, err := m.store.List(all, store.ListFilter{Tenant: t, State: state})
		if err != nil {
			return nil, err
		}
		for _, sb := range list {
			if sb.ID == skip || hiddenMember(sb) {
				continue // a default pool's ready sandbox is nobody's yet
			}
			if state == api.StateSuspended {
				u.SuspendedSandboxes++
				continue
			}
			u.RunningSandboxes++
			u.MemoryMB += sb.Spec.MemoryMB
			u.CPUs += sb.Spec.CPUs
		}
	}
	snaps, err := m.store.ListSnapshots(all, "")
	if err != nil {
		return nil, err
	}
	for _, sn := range snaps {
		if sn.Tenant == t {
			u.SnapshotBytes += sn.SizeBytes
		}
	}
	return u, nil
}

// layerSizer gives a layer's size (the image store has it).
type layerSizer interface {
	GetLayer(id string) (*image.Layer, error)
}

// imageBytes sums what tenant t's images take: the layers of its own
// images, each once, leaving out the catalog's (an image built on python
// does not cost python's gigabytes again). The default tenant's images are
// the catalog: all of theirs count for it.
func (m *Manager) imageBytes(ctx context.Context, t string) (int64, error) {
	is, ok := m.images.(ImageStore)
	if !ok {
		return 0, nil
	}
	imgs, err := is.List(ctx)
	if err != nil {
		return 0, err
	}
	ls, byLayer := is.(layerSizer)
	catalog := map[string]bool{}
	if t != tenant.Default {
		for _, img := range imgs {
			if it, _ := imageOwner(img.Name); it == tenant.Default {
				for _, l := range img.Layers {
					catalog[l] = true
				}
			}
		}
	}
	var n int64
	seen := map[string]bool{}
	for _, img := range imgs {
		if it, _ := imageOwner(img.Name); it != t {
			continue
		}
		if !byLayer || len(img.Layers) == 0 {
			n += img.SizeBytes
			continue
		}
		for _, id := range img.Layers {
			if catalog[id] || seen[id] {
				continue
			}
			seen[id] = true
			if l, err := ls.GetLayer(id); err == nil {
				n += l.SizeBytes
			}
		}
	}
	return n, nil
}

// over is the QuotaError when use+asked passes limit (nil: unlimited).
func over[T int64 | float64](name api.QuotaName, use, asked T, limit *T) error {
	if limit == nil || use+asked <= *limit {
		return nil
	}
	return &QuotaError{api.QuotaExceeded{Quota: name, Use: float64(use), Requested: float64(asked), Limit: float64(*limit)}}
}

// admitQuota admits the start of sandbox id (count sandboxes of spec's
// size; 1 but for a fork's up-front check) for tenant t against its
// running quotas. release ends the promise once the start has ended (by
// then the sandbox counts from the store, or it failed).
func (m *Manager) admitQuota(ctx context.Context, t, id string, spec store.Spec) (release func(), err error) {
	q, err := m.quotas(ctx, t)
	if err != nil {
		return nil, err
	}
	if q.RunningSandboxes == nil && q.MemoryMB == nil && q.CPUs == nil {
		return func() {}, nil
	}
	qs := &m.quota
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if err := m.checkRunning(ctx, t, id, q, 1, spec); err != nil {
		return nil, err
	}
	if qs.pending == nil {
		qs.pending = map[string]pendingStart{}
	}
	qs.pending[id] = pendingStart{tenant: t, memoryMB: spec.MemoryMB, cpus: spec.CPUs}
	return func() {
		qs.mu.Lock()
		delete(qs.pending, id)
		qs.mu.Unlock()
	}, nil
}

// checkRunning checks count more sandboxes of spec against q; the caller
// holds m.quota.mu.
func (m *Manager) checkRunning(ctx context.Context, t, id string, q api.Quotas, count int64, spec store.Spec) error {
	u, err := m.usage(ctx, t, id)
	if err != nil {
		return err
	}
	for pid, p := range m.quota.pending {
		if p.tenant != t || pid == id {
			continue
		}
		// A start under way may already be in the store (creating): count
		// it once.
		if sb, err := m.store.Get(tenant.Unscoped(ctx), pid); err == nil && sb.Tenant == t && sb.State.HoldsProcesses() {
			continue
		}
		u.RunningSandboxes++
		u.MemoryMB += p.memoryMB
		u.CPUs += p.cpus
	}
	if err := over(api.QuotaRunningSandboxes, u.RunningSandboxes, count, q.RunningSandboxes); err != nil {
		return err
	}
	if err := over(api.QuotaMemoryMB, u.MemoryMB, count*spec.MemoryMB, q.MemoryMB); err != nil {
		return err
	}
	return over(api.QuotaCPUs, u.CPUs, float64(count)*spec.CPUs, q.CPUs)
}

// checkForkQuota checks, before a fork takes its snapshot, that count
// branches of sb fit the running quotas (each branch is admitted again as
// it starts).
func (m *Manager) checkForkQuota(ctx context.Context, sb *store.Sandbox, count int) error {
	q, err := m.quotas(ctx, sb.Tenant)
	if err != nil {
		return err
	}
	if err := m.checkSnapshotQuota(ctx, sb.Tenant, q); err != nil {
		return err
	}
	m.quota.mu.Lock()
	defer m.quota.mu.Unlock()
	return m.checkRunning(ctx, sb.Tenant, "", q, int64(count), sb.Spec)
}

// checkSnapshotQuota refuses a new snapshot of tenant t once its snapshots
// fill its snapshot_bytes quota (q: its quotas, or nil to read them).
func (m *Manager) checkSnapshotQuota(ctx context.Context, t string, q api.Quotas) error {
	if q.SnapshotBytes == nil {
		return nil
	}
	u, err := m.usage(ctx, t, "")
	if err != nil {
		return err
	}
	return over(api.QuotaSnapshotBytes, u.SnapshotBytes, 1, q.SnapshotBytes)
}

// checkSuspendQuota refuses a suspend that would pass tenant t's
// suspended_sandboxes quota.
func (m *Manager) checkSuspendQuota(ctx context.Context, t string) error {
	q, err := m.quotas(ctx, t)
	if err != nil || q.SuspendedSandboxes == nil {
		return err
	}
	u, err := m.usage(ctx, t, "")
	if err != nil {
		return err
	}
	return over(api.QuotaSuspendedSandboxes, u.SuspendedSandboxes, 1, q.SuspendedSandboxes)
}

// checkImageQuota refuses a build or import once the context's tenant's
// images fill its image_bytes quota.
func (m *Manager) checkImageQuota(ctx context.Context) error {
	t := owner(ctx)
	q, err := m.quotas(ctx, t)
	if err != nil || q.ImageBytes == nil {
		return err
	}
	n, err := m.imageBytes(ctx, t)
	if err != nil {
		return err
	}
	return over(api.QuotaImageBytes, n, 1, q.ImageBytes)
}

// checkPoolQuota checks that a new pool's sandboxes fit its tenant's
// running quotas now.
func (m *Manager) checkPoolQuota(ctx context.Context, rec store.Pool) error {
	q, err := m.quotas(ctx, rec.Tenant)
	if err != nil || (q.RunningSandboxes == nil && q.MemoryMB == nil && q.CPUs == nil) {
		return err
	}
	spec, _, err := m.poolSpec(ctx, rec)
	if err != nil {
		return err
	}
	m.quota.mu.Lock()
	defer m.quota.mu.Unlock()
	return m.checkRunning(ctx, rec.Tenant, "", q, int64(rec.Size), spec)
}
