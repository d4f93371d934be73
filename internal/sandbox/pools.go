package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// Warm pools: a pool keeps Size sandboxes restored from a golden snapshot
// (or started from an image) running and unclaimed, so that a create that
// names the pool gets one at once; the pool refills in the background. Ready
// sandboxes are ordinary sandbox rows labelled PoolLabel=<pool> and
// PoolReadyLabel; handing one out renames and relabels it in one
// transaction. Ready sandboxes are never idle-reaped.

// Labels that mark pool sandboxes.
const (
	PoolLabel      = "forkbox.pool"
	PoolReadyLabel = "forkbox.pool.ready"
	// PoolImageLabel is the id of the image a default pool's sandbox
	// started from.
	PoolImageLabel = "forkbox.pool.image"
	maxPoolSize    = 32
)

type pool struct {
	rec     store.Pool
	mu      sync.Mutex
	ready   []string // ids of ready sandboxes, oldest first
	filling int      // creates under way
	deleted bool
	// adopting: loaded at start, its members not adopted yet (no refill
	// until they are).
	adopting bool
}

func (m *Manager) poolView(p *pool) api.Pool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return api.Pool{Name: p.rec.Name, SnapshotID: p.rec.SnapshotID, Image: displayImage(p.rec.Image), Size: p.rec.Size,
		Ready: len(p.ready), CreatedAt: p.rec.CreatedAt}
}

// CreatePool records a pool and starts filling it.
func (m *Manager) CreatePool(ctx context.Context, req *api.CreatePoolRequest) (*api.Pool, error) {
	if !nameRE.MatchString(req.Name) {
		return nil, errdefs.InvalidArgument("name: %q must match %s", req.Name, nameRE)
	}
	if req.Size < 1 || req.Size > maxPoolSize {
		return nil, rangeErr("size", req.Size, 1, maxPoolSize)
	}
	if (req.SnapshotID == "") == (req.Image == "") {
		return nil, errdefs.InvalidArgument("snapshot_id, image: give exactly one")
	}
	rec := store.Pool{Tenant: owner(ctx), Name: req.Name, SnapshotID: req.SnapshotID, Image: req.Image, Size: req.Size, CreatedAt: m.now().UTC()}
	if req.SnapshotID != "" {
		sn, err := m.store.GetSnapshot(ctx, req.SnapshotID)
		if err != nil || sn.Type == snapshotSuspend {
			return nil, errdefs.NotFound("snapshot %q not found", req.SnapshotID)
		}
		rec.Image = sn.Image
	} else if _, err := m.resolveImage(ctx, req.Image); err != nil {
		return nil, err
	}
	if err := m.checkPool(ctx, rec); err != nil {
		return nil, err
	}
	if err := m.checkPoolQuota(ctx, rec); err != nil {
		return nil, err
	}
	if err := m.store.CreatePool(ctx, &rec); err != nil {
		return nil, err
	}
	p := &pool{rec: rec}
	m.mu.Lock()
	if m.pools == nil {
		m.pools = map[string]*pool{}
	}
	m.pools[poolKey(rec.Tenant, rec.Name)] = p
	m.mu.Unlock()
	m.refill(p)
	v := m.poolView(p)
	return &v, nil
}

// poolKey is a pool's key in Manager.pools: names are unique per tenant.
func poolKey(tenantName, name string) string { return tenantName + "/" + name }

// owner is the tenant a request acts for (the default one for the daemon's
// own work).
func owner(ctx context.Context) string {
	if t := tenant.Of(ctx); t != "" {
		return t
	}
	return tenant.Default
}

// PoolListOptions tune ListPools.
type PoolListOptions struct {
	// Members lists each pool's sandboxes not handed out yet.
	Members bool
	// DefaultPool adds the default pool (DefaultPoolName), whose members
	// no other call shows: for admins.
	DefaultPool bool
}

// ListPools lists the pools (of the context's tenant, if it has one).
func (m *Manager) ListPools(ctx context.Context, o PoolListOptions) ([]api.Pool, error) {
	scope := tenant.Of(ctx)
	m.mu.Lock()
	ps := make([]*pool, 0, len(m.pools))
	for _, p := range m.pools {
		if scope == "" || p.rec.Tenant == scope {
			ps = append(ps, p)
		}
	}
	if o.DefaultPool && m.defPool != nil {
		ps = append(ps, m.defPool)
	}
	m.mu.Unlock()
	out := make([]api.Pool, 0, len(ps)+1)
	for _, p := range ps {
		out = append(out, m.poolView(p))
	}
	if o.DefaultPool && m.defaultPool() == nil {
		// Off (size 0), but members a previous daemon left may be there.
		out = append(out, api.Pool{Name: DefaultPoolName, Image: image.DefaultImage})
	}
	if o.Members {
		for i := range out {
			owner := scope
			if out[i].Name == DefaultPoolName {
				owner = tenant.Default
			}
			members, err := m.poolMembers(ctx, owner, out[i].Name)
			if err != nil {
				return nil, err
			}
			out[i].Members = members
		}
	}
	sortPools(out)
	return out, nil
}

// poolMembers lists the live sandboxes labelled ready for pool name of
// tenant owner ("": any) on this node, oldest first.
func (m *Manager) poolMembers(ctx context.Context, owner, name string) ([]api.PoolMember, error) {
	if name == DefaultPoolName {
		ctx = tenant.Unscoped(ctx)
	}
	list, err := m.store.List(ctx, store.ListFilter{Tenant: owner, Node: m.node, Labels: map[string]string{PoolLabel: name, PoolReadyLabel: "true"}})
	if err != nil {
		return nil, err
	}
	var out []api.PoolMember
	for i := len(list) - 1; i >= 0; i-- {
		sb := list[i]
		if sb.State == api.StateTerminated || m.elsewhere(sb) {
			continue
		}
		pm := api.PoolMember{ID: sb.ID, State: sb.State, CreatedAt: sb.CreatedAt}
		if m.node != "" {
			pm.Node = sb.Node
		}
		out = append(out, pm)
	}
	return out, nil
}

// DeletePool removes a pool and terminates its ready sandboxes.
func (m *Manager) DeletePool(ctx context.Context, name string) error {
	key := poolKey(owner(ctx), name)
	m.mu.Lock()
	p := m.pools[key]
	delete(m.pools, key)
	m.mu.Unlock()
	if p == nil {
		return errdefs.NotFound("pool %q not found", name)
	}
	p.mu.Lock()
	p.deleted = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, id := range ready {
		m.terminate(context.WithoutCancel(ctx), id, "pool deleted", lockOpts{})
	}
	return m.store.DeletePool(ctx, p.rec.Tenant, name)
}

// refill starts creates until the pool is full again.
func (m *Manager) refill(p *pool) {
	m.mu.Lock()
	closing := m.closing
	m.mu.Unlock()
	if closing {
		return // the daemon is stopping: nothing new starts
	}
	p.mu.Lock()
	need := p.rec.Size - len(p.ready) - p.filling
	if p.deleted || p.adopting || need <= 0 {
		p.mu.Unlock()
		return
	}
	p.filling += need
	p.mu.Unlock()
	for i := 0; i < need; i++ {
		go func() {
			var id string
			var err error
			func() {
				defer recoverTo(m.log, &err, "pool refill")
				// The refill acts for the pool's tenant: its sandboxes
				// are the tenant's, and count against its quotas.
				id, err = m.createPooled(tenant.With(context.Background(), tenant.Principal{Tenant: p.rec.Tenant}), p)
			}()
			p.mu.Lock()
			p.filling--
			deleted := p.deleted
			if err == nil && !deleted {
				p.ready = append(p.ready, id)
			}
			p.mu.Unlock()
			if err != nil {
				m.log.Error("fill pool", "pool", p.rec.Name, "err", err)
				return
			}
			if deleted {
				m.terminate(context.Background(), id, "pool deleted", lockOpts{})
			}
		}()
	}
}

func (m *Manager) createPooled(ctx context.Context, p *pool) (string, error) {
	labels := map[string]string{PoolLabel: p.rec.Name, PoolReadyLabel: "true"}
	if p.rec.Name == DefaultPoolName {
		img, err := m.resolveImage(ctx, image.DefaultImage)
		if err != nil {
			return "", err
		}
		labels[PoolImageLabel] = img.ID
		sb, err := m.create(ctx, &api.CreateSandboxRequest{}, createOpts{poolLabels: labels})
		if err != nil {
			return "", err
		}
		m.markPooled(sb.ID, true)
		if err := m.prestart(ctx, sb.ID); err != nil {
			m.terminate(context.WithoutCancel(ctx), sb.ID, "pool sandbox failed to start its kernel", lockOpts{})
			return "", err
		}
		m.markPooled(sb.ID, true) // the call above counted as activity
		return sb.ID, nil
	}
	sb, err := m.create(ctx, &api.CreateSandboxRequest{SnapshotID: p.rec.SnapshotID, Image: imageIfNoSnapshot(p.rec)},
		createOpts{poolLabels: labels})
	if err != nil {
		return "", err
	}
	m.markPooled(sb.ID, true)
	m.warmContexts(ctx, sb.ID)
	return sb.ID, nil
}

// warmContexts runs an empty cell in every restored kernel of a ready
// sandbox: the first cell after a restore costs ~50 ms (measured), which the
// pool pays here instead of the user. The cell is empty (execution_count does
// not move); for Python a per-cell env makes the kernel run real code too,
// in its silent setup and teardown, which warms the rest of the path.
func (m *Manager) warmContexts(ctx context.Context, id string) {
	list, err := m.ListContexts(ctx, id)
	if err != nil {
		return
	}
	for _, c := range list {
		if c.State != "idle" {
			continue
		}
		req := &api.RunCodeRequest{Context: c.ID}
		if c.Language == "python" {
			req.Env = map[string]string{"FORKBOX_POOL_WARMUP": "1"}
		}
		if _, err := m.RunCode(ctx, id, req, CodeOptions{Unrecorded: true}); err != nil {
			m.log.Debug("warm pool context", "sandbox", id, "context", c.ID, "err", err)
		}
	}
	m.markPooled(id, true) // the calls above counted as activity
}

func imageIfNoSnapshot(r store.Pool) string {
	if r.SnapshotID != "" {
		return ""
	}
	return r.Image
}

// memberGone takes sandbox id out of the pool that keeps it ready, if
// any, and refills that pool: a ready sandbox that was deleted by its id,
// or died, is no longer ready. One that died (failed) is ended too, in the
// background (whatever failed it may hold its lock): nobody else would.
func (m *Manager) memberGone(id string, failed bool) {
	m.mu.Lock()
	ps := make([]*pool, 0, len(m.pools)+1)
	for _, p := range m.pools {
		ps = append(ps, p)
	}
	if m.defPool != nil {
		ps = append(ps, m.defPool)
	}
	m.mu.Unlock()
	for _, p := range ps {
		p.mu.Lock()
		i := slices.Index(p.ready, id)
		if i >= 0 {
			p.ready = slices.Delete(p.ready, i, i+1)
		}
		p.mu.Unlock()
		if i >= 0 {
			if failed {
				go m.terminate(context.Background(), id, "unusable pool sandbox", lockOpts{})
			}
			m.refill(p)
			return
		}
	}
}

// markPooled exempts a ready sandbox from idle reaping (or ends that).
func (m *Manager) markPooled(id string, pooled bool) {
	if l := m.findLive(id); l != nil {
		l.mu.Lock()
		l.pooled = pooled
		l.lastActive = m.now()
		l.mu.Unlock()
	}
}

// createFromPool hands out a ready sandbox of the named pool, or (when the
// pool is empty) creates one from the pool's source.
func (m *Manager) createFromPool(ctx context.Context, req *api.CreateSandboxRequest) (*api.Sandbox, error) {
	m.mu.Lock()
	p := m.pools[poolKey(owner(ctx), req.Pool)]
	m.mu.Unlock()
	if p == nil {
		return nil, errdefs.NotFound("pool %q not found", req.Pool)
	}
	if req.SnapshotID != "" || req.Image != "" {
		return nil, errdefs.InvalidArgument("pool: a pool sandbox comes from the pool's own snapshot or image; leave snapshot_id and image empty")
	}
	spec, err := m.validate(req)
	if err != nil {
		return nil, err
	}
	if sb, err := m.handOut(ctx, p, req, spec, claimOpts{}); sb != nil || err != nil {
		return sb, err
	}
	// Empty pool: a normal restore.
	fallback := *req
	fallback.Pool, fallback.SnapshotID, fallback.Image = "", p.rec.SnapshotID, imageIfNoSnapshot(p.rec)
	return m.Create(ctx, &fallback)
}

// handOut claims the oldest ready sandbox of p for req, and refills p.
// A ready sandbox that cannot be claimed is ended and the next one tried;
// a request that is itself wrong (a name in use) gives it back. With none
// left it returns nil and no error.
func (m *Manager) handOut(ctx context.Context, p *pool, req *api.CreateSandboxRequest, spec store.Spec, o claimOpts) (*api.Sandbox, error) {
	defer m.refill(p)
	for {
		p.mu.Lock()
		if len(p.ready) == 0 {
			p.mu.Unlock()
			return nil, nil
		}
		id := p.ready[0]
		p.ready = p.ready[1:]
		p.mu.Unlock()
		sb, err := m.claim(ctx, id, req, spec, o)
		if err == nil {
			return sb, nil
		}
		if errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrInvalidArgument) {
			p.mu.Lock()
			p.ready = append([]string{id}, p.ready...)
			p.mu.Unlock()
			return nil, err
		}
		m.log.Warn("pool sandbox unusable; trying the next", "pool", p.rec.Name, "sandbox", id, "err", err)
		m.terminate(context.WithoutCancel(ctx), id, "unusable pool sandbox", lockOpts{})
	}
}

// claimOpts are what a hand-out from the default pool adds to a claim.
type claimOpts struct {
	// fresh: the sandbox takes the hand-out as its creation (its time in
	// the pool is not the requester's).
	fresh bool
	// imageID, when set, is the image id the sandbox must have started
	// from (the default image as it is now; PoolImageLabel).
	imageID string
}

// claim turns a ready pool sandbox into the requester's sandbox: its name
// (and hostname), labels, env for later calls and idle timeout.
func (m *Manager) claim(ctx context.Context, id string, req *api.CreateSandboxRequest, spec store.Spec, o claimOpts) (*api.Sandbox, error) {
	l := m.findLive(id)
	if l == nil {
		return nil, fmt.Errorf("pool sandbox %s is not running", id)
	}
	if req.Name != "" {
		// As a new sandbox's: its name. Done before the record changes
		// (a failure leaves the sandbox unclaimed, and it is ended).
		if err := m.rt.SetHostname(id, l.info, req.Name); err != nil {
			return nil, fmt.Errorf("rename pool sandbox %s: %w", id, err)
		}
	}
	now := m.now().UTC()
	sb, err := m.store.Update(ctx, id, func(s *store.Sandbox) error {
		if s.State != api.StateRunning {
			return fmt.Errorf("pool sandbox %s is %s", id, s.State)
		}
		// The row is locked: a sandbox is handed out once, whatever
		// else (another node, a delete of the pool) reaches for it.
		if s.Spec.Labels[PoolReadyLabel] != "true" {
			return fmt.Errorf("pool sandbox %s was handed out already", id)
		}
		if o.imageID != "" && s.Spec.Labels[PoolImageLabel] != o.imageID {
			return fmt.Errorf("pool sandbox %s started from image %s, which was rebuilt since (now %s)", id, s.Spec.Labels[PoolImageLabel], o.imageID)
		}
		s.Name = req.Name
		s.Spec.Labels = spec.Labels
		s.Spec.TimeoutSecs = spec.TimeoutSecs
		s.Spec.MaxLifetimeSecs = spec.MaxLifetimeSecs
		s.Spec.NoAutoResume = spec.NoAutoResume
		s.Spec.SuspendOnIdle = spec.SuspendOnIdle
		s.LastActiveAt = now
		if o.fresh {
			s.CreatedAt = now
		}
		return nil
	})
	if err != nil {
		if req.Name != "" {
			// Back to its unclaimed name: a request refused (a name in
			// use) gives the sandbox back to the pool.
			if herr := m.rt.SetHostname(id, l.info, id); herr != nil {
				m.log.Warn("rename pool sandbox back", "sandbox", id, "err", herr)
			}
		}
		return nil, err
	}
	l.mu.Lock()
	l.name = req.Name
	l.pooled = false
	l.timeout = time.Duration(spec.TimeoutSecs) * time.Second
	l.lastActive = now
	l.keepOnIdle = spec.SuspendOnIdle
	if spec.MaxLifetimeSecs > 0 {
		l.deadline = now.Add(time.Duration(spec.MaxLifetimeSecs) * time.Second)
	}
	l.mu.Unlock()
	pool := req.Pool
	if o.fresh {
		pool = DefaultPoolName
	}
	m.log.Info("sandbox handed out from pool", "sandbox", id, "pool", pool, "name", req.Name)
	return m.view(sb), nil
}

// loadPools restores the pools' records at start (before the API
// serves: a create naming a pool finds it), each waiting to adopt its
// members; adoptPoolMembers does that once the sandboxes are settled.
func (m *Manager) loadPools(ctx context.Context) error {
	recs, err := m.store.ListPools(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pools == nil {
		m.pools = map[string]*pool{}
	}
	for _, rec := range recs {
		m.pools[poolKey(rec.Tenant, rec.Name)] = &pool{rec: *rec, adopting: true}
	}
	return nil
}

// adoptPoolMembers takes the running sandboxes still labelled ready as
// their pools' ready sandboxes, up to each pool's size (the oldest first),
// ends the rest and the ready sandboxes whose pool is gone, and refills
// the pools.
func (m *Manager) adoptPoolMembers(ctx context.Context) error {
	m.mu.Lock()
	pools := maps.Clone(m.pools)
	m.mu.Unlock()
	strays, err := m.store.List(ctx, store.ListFilter{Node: m.node, Labels: map[string]string{PoolReadyLabel: "true"}})
	if err != nil {
		return err
	}
	for _, sb := range strays {
		name := sb.Spec.Labels[PoolLabel]
		if !sb.State.Ended() && !m.elsewhere(sb) && name != DefaultPoolName && pools[poolKey(sb.Tenant, name)] == nil {
			m.terminate(context.WithoutCancel(ctx), sb.ID, "its pool no longer exists", lockOpts{})
		}
	}
	for _, p := range pools {
		p.mu.Lock()
		adopting := p.adopting
		p.mu.Unlock()
		if !adopting {
			continue // made since the start
		}
		list, err := m.store.List(ctx, store.ListFilter{Tenant: p.rec.Tenant, State: api.StateRunning, Node: m.node, Labels: map[string]string{PoolLabel: p.rec.Name, PoolReadyLabel: "true"}})
		if err != nil {
			return err
		}
		for i := len(list) - 1; i >= 0; i-- {
			if m.elsewhere(list[i]) || m.findLive(list[i].ID) == nil {
				continue
			}
			p.mu.Lock()
			keep := !p.deleted && len(p.ready) < p.rec.Size
			if keep {
				p.ready = append(p.ready, list[i].ID)
			}
			p.mu.Unlock()
			if !keep {
				m.terminate(context.WithoutCancel(ctx), list[i].ID, "pool is smaller now", lockOpts{})
				continue
			}
			m.markPooled(list[i].ID, true)
		}
		p.mu.Lock()
		p.adopting = false
		p.mu.Unlock()
		m.refill(p)
	}
	return nil
}
