package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/internal/blob"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/snapshot"
	"github.com/forkbox/forkbox/internal/tenant"
)

// blobGCInterval is how often the collector of unreferenced objects runs.
const blobGCInterval = time.Hour

// openBlobs puts snaps in object storage when the configuration says so.
func (d *Daemon) openBlobs(ctx context.Context, snaps *snapshot.Store, images *image.Store) error {
	d.snaps = snaps
	if d.cfg.Blobs == "" {
		return nil
	}
	b, err := blob.Open(d.cfg.Blobs)
	if err != nil {
		return fmt.Errorf("--blobs: %w", err)
	}
	snaps.SetRemote(b, d.cfg.BlobCacheMB<<20)
	images.SetLogger(d.log)
	images.SetRemote(b) // images built or imported here are usable on every node
	d.blobsOn = true
	d.blobs = b // uploads too (analyst.Config.Blobs)
	d.log.Info("snapshots in object storage", "blobs", b.Redacted(), "local_cache_mb", d.cfg.BlobCacheMB)
	return nil
}

// startBlobGC collects, at start and then hourly, the objects that no
// snapshot record names (a checkpoint that died mid-upload, a deleted
// snapshot's pages no other snapshot shares).
func (d *Daemon) startBlobGC() {
	if !d.blobsOn {
		return
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		t := time.NewTicker(blobGCInterval)
		defer t.Stop()
		for {
			d.collectBlobs(d.bgCtx)
			select {
			case <-d.bgCtx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (d *Daemon) collectBlobs(ctx context.Context) {
	all := tenant.Unscoped(ctx)
	var lookupErr error
	keep := func(id string) bool {
		_, err := d.store.GetSnapshot(all, id)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			lookupErr = err
			return true // unsure: keep
		}
		return err == nil
	}
	n, err := d.snaps.GC(ctx, keep, d.cfg.BlobGCGrace)
	if err == nil {
		err = lookupErr
	}
	if err != nil && ctx.Err() == nil {
		d.log.Error("collect unreferenced snapshot objects", "err", err)
	}
	if n > 0 {
		d.log.Info("collected unreferenced snapshot objects", "removed", n)
	}
}
