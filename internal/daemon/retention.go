package daemon

import (
	"context"
	"time"

	"github.com/forkbox/forkbox/internal/tenant"
)

// retentionInterval is how often terminated sandboxes' records are pruned.
const retentionInterval = time.Hour

// startRetention prunes, at start and then hourly, the records of the
// sandboxes terminated longer ago than Config.RetainTerminated, with their
// events and cells (store.PruneTerminated: those a snapshot or a
// conversation names are kept while it exists). Every node of a cluster
// runs it; a prune is idempotent, so they need not take turns.
func (d *Daemon) startRetention() {
	if d.cfg.RetainTerminated <= 0 {
		return
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		t := time.NewTicker(retentionInterval)
		defer t.Stop()
		for {
			d.pruneTerminated(d.bgCtx, time.Now())
			select {
			case <-d.bgCtx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// pruneTerminated runs one prune as of now.
func (d *Daemon) pruneTerminated(ctx context.Context, now time.Time) {
	n, err := d.store.PruneTerminated(tenant.Unscoped(ctx), now.Add(-d.cfg.RetainTerminated))
	if err != nil && ctx.Err() == nil {
		d.log.Error("prune terminated sandboxes' records", "err", err)
	}
	if n > 0 {
		d.log.Info("pruned terminated sandboxes' records", "removed", n, "retain_terminated", d.cfg.RetainTerminated)
	}
}
