package sandbox

import (
	"context"
	"log/slog"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/userns"
)

// Every lineage (a sandbox, its snapshots and what is restored from them)
// keeps one user namespace id range (package userns). The records name it
// (Spec.UIDBase); the allocator only learns from them: at start which ranges
// are taken, and, from time to time, which are free again.

// referencedRanges returns the ranges that live sandboxes (running or
// suspended, any state but terminated) and snapshots name.
func referencedRanges(ctx context.Context, st store.Store) (map[uint32]bool, error) {
	out := map[uint32]bool{}
	sbs, err := st.List(ctx, store.ListFilter{})
	if err != nil {
		return nil, err
	}
	for _, sb := range sbs {
		if sb.State != api.StateTerminated && sb.Spec.UIDBase != 0 {
			out[sb.Spec.UIDBase] = true
		}
	}
	sns, err := st.ListSnapshots(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, sn := range sns {
		if sn.Spec.UIDBase != 0 {
			out[sn.Spec.UIDBase] = true
		}
	}
	return out, nil
}

// ReserveIDRanges marks in a every range the store still references, before
// anything allocates from it. A record whose range lies outside this
// daemon's pool (the pool was reconfigured) is logged; its restores fail with
// that reason.
func ReserveIDRanges(ctx context.Context, st store.Store, a *userns.Allocator, log *slog.Logger) error {
	refs, err := referencedRanges(ctx, st)
	if err != nil {
		return err
	}
	for base := range refs {
		if err := a.Reserve(base); err != nil {
			log.Warn("user namespace id range of a stored sandbox or snapshot", "base", base, "err", err)
		}
	}
	return nil
}

// SetIDRanges gives the Manager the allocator to sweep. Call before Start.
func (m *Manager) SetIDRanges(a *userns.Allocator) { m.ids = a }

// sweepIDRanges returns to the pool the ranges no record names any more.
func (m *Manager) sweepIDRanges(ctx context.Context) {
	if m.ids == nil {
		return
	}
	refs, err := referencedRanges(ctx, m.store)
	if err != nil {
		m.log.Warn("sweep user namespace id ranges", "err", err)
		return
	}
	if n := m.ids.Sweep(refs); n > 0 {
		m.log.Debug("user namespace id ranges freed", "count", n, "in_use", m.ids.InUse())
	}
}
