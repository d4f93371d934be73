package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/criu"
)

const kdatRounds = 10

// BenchmarkCRIUCache: CRIU's kernel-feature cache (criu.kdat in
// criu.KdatDir, a tmpfs) against no cache, alternating in one run on one
// daemon: a memory checkpoint of a sandbox holding the 1e6-row DataFrame,
// then a restore of that snapshot → first `df.shape` answer. For the
// uncached side the cache file is removed just before each request, so that
// CRIU probes the kernel as it did before the cache was kept (it then
// writes the cache again).
func BenchmarkCRIUCache(b *testing.B) {
	hideNsPerOp(b)
	loadStart := loadAvg()
	d := startDaemon(b, false)
	c := &snapClient{codeCaller: newCodeCaller(d), d: d}
	ctx := context.Background()
	must := fatalWithLog(b, d)
	cache := filepath.Join(criu.KdatDir, "criu.kdat")
	if _, err := os.Stat(cache); err != nil {
		skip(b, fmt.Sprintf("no CRIU kernel-feature cache at %s (%v): CRIU built without it (make setup rebuilds it)", cache, err))
	}
	memMB := int64(snapMemoryMB)
	src, err := c.create(ctx, api.CreateSandboxRequest{MemoryMB: &memMB})
	must(err)
	_, err = c.code(ctx, src.ID, dfCell)
	must(err)

	var ckpt, restore [2]samples // [0] cached, [1] not
	for i := 0; i < 2*kdatRounds; i++ {
		side := i % 2
		drop := func() {
			if side == 1 {
				if err := os.Remove(cache); err != nil && !os.IsNotExist(err) {
					b.Fatal(err)
				}
			}
		}
		drop()
		t0 := time.Now()
		sn, err := c.checkpoint(ctx, src.ID)
		must(err)
		ckpt[side] = append(ckpt[side], time.Since(t0))
		drop()
		t0 = time.Now()
		r, err := c.create(ctx, api.CreateSandboxRequest{SnapshotID: sn.ID})
		must(err)
		must(c.shape(ctx, r.ID))
		restore[side] = append(restore[side], time.Since(t0))
		must(c.remove(ctx, r.ID))
		must(c.removeSnapshot(ctx, sn.ID))
	}
	loadEnd := loadAvg()
	restore[0].report(b, "cached-restore-")
	restore[1].report(b, "uncached-restore-")

	tableTitle(fmt.Sprintf("CRIU's kernel-feature cache on a tmpfs vs none, %d rounds each, alternating; load average %s at start, %s at end",
		kdatRounds, loadStart, loadEnd))
	tableHeader("p50 (p95)", "cache kept", "no cache (removed before each)", "difference at p50")
	row := func(name string, s [2]samples) {
		tableRow(name, fmt.Sprintf("%s (%s)", fmtMS(s[0].p50()), f(s[0].p95())), fmt.Sprintf("%s (%s)", fmtMS(s[1].p50()), f(s[1].p95())),
			fmtMS(s[1].p50()-s[0].p50()))
	}
	row("memory checkpoint request (1e6-row DataFrame)", ckpt)
	row("restore → first `df.shape` answer", restore)
}
