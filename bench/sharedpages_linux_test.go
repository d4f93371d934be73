package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

// Issue 18: memory snapshots and suspend images of a session started from a
// golden snapshot share the pages it did not change with that snapshot.
const (
	sharedRounds      = 5
	sharedTargetPct   = 30 // target: size_bytes ≤ 30% of usage.memory_bytes
	sharedChangeCell  = "x = 21\nnotes = ['a small change'] * 1000"
	sharedDedupLogMsg = "memory snapshot shares pages with its base"
)

// sharedSide is one side of the comparison: sessions restored from the
// golden snapshot (their saves share its pages), or sessions that built the
// same state from scratch and have no base (their first save is whole).
type sharedSide struct {
	mem                    values // usage.memory_bytes before the first save, MiB
	ckptPct, suspPct       values // size_bytes / usage.memory_bytes, %
	ckptMiB, suspMiB       values
	ckpt, suspend, resumed samples // client: POST /checkpoint; POST /suspend; POST /resume → df.shape
	restored               samples // create from the session's snapshot → df.shape
}

// BenchmarkSharedPages: a sandbox (memory_mb 2048) builds the 1e6-row
// DataFrame and is checkpointed (the golden snapshot). Each round, a session
// restored from it makes a small change and is suspended and resumed, and
// another is checkpointed and its snapshot restored; next to them, sessions
// that built the same DataFrame from scratch (no base: whole saves) go
// through the same steps. Sizes are the API's size_bytes (a suspend image's through a memory
// snapshot of the suspended session, which hard-links the image's files).
func BenchmarkSharedPages(b *testing.B) {
	hideNsPerOp(b)
	loadStart := loadAvg()
	d := startDaemon(b, true)
	c := &snapClient{codeCaller: newCodeCaller(d), d: d}
	ctx := context.Background()
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatalf("%v\n%s", err, d.logTail(30))
		}
	}
	memMB := int64(snapMemoryMB)
	src, err := c.create(ctx, api.CreateSandboxRequest{MemoryMB: &memMB})
	must(err)
	_, err = c.code(ctx, src.ID, dfCell)
	must(err)
	golden, err := c.checkpoint(ctx, src.ID)
	must(err)
	must(c.remove(ctx, src.ID))

	var shared, whole sharedSide
	var dedupMS values
	// round saves two sessions of one side: one is suspended and resumed,
	// the other checkpointed and its snapshot restored (apart, because a
	// session's first whole dump becomes the base of its next).
	round := func(side *sharedSide, session func() *api.Sandbox) {
		b.Helper()
		changed := func() (*api.Sandbox, float64) {
			sb := session()
			_, err := c.code(ctx, sb.ID, sharedChangeCell)
			must(err)
			cur, err := c.get(ctx, sb.ID)
			must(err)
			mem := float64(cur.Usage.MemoryBytes)
			side.mem = append(side.mem, mem/mib)
			return sb, mem
		}

		sb, mem := changed()
		t0 := time.Now()
		_, err := c.susSuspend(ctx, sb.ID)
		must(err)
		side.suspend = append(side.suspend, time.Since(t0))
		img, err := c.checkpoint(ctx, sb.ID) // of the suspended session: its image's files
		must(err)
		side.suspPct = append(side.suspPct, 100*float64(img.SizeBytes)/mem)
		side.suspMiB = append(side.suspMiB, float64(img.SizeBytes)/mib)
		must(c.removeSnapshot(ctx, img.ID))
		t0 = time.Now()
		_, err = c.susResume(ctx, sb.ID)
		must(err)
		must(c.shape(ctx, sb.ID))
		side.resumed = append(side.resumed, time.Since(t0))
		dedupMS = append(dedupMS, logMsgMS(d.logPath, sharedDedupLogMsg, sb.ID)...)
		must(c.remove(ctx, sb.ID))

		sb, mem = changed()
		t0 = time.Now()
		sn, err := c.checkpoint(ctx, sb.ID)
		must(err)
		side.ckpt = append(side.ckpt, time.Since(t0))
		side.ckptPct = append(side.ckptPct, 100*float64(sn.SizeBytes)/mem)
		side.ckptMiB = append(side.ckptMiB, float64(sn.SizeBytes)/mib)
		dedupMS = append(dedupMS, logMsgMS(d.logPath, sharedDedupLogMsg, sb.ID)...)
		must(c.remove(ctx, sb.ID))
		t0 = time.Now()
		r, err := c.create(ctx, api.CreateSandboxRequest{SnapshotID: sn.ID})
		must(err)
		must(c.shape(ctx, r.ID))
		side.restored = append(side.restored, time.Since(t0))
		must(c.remove(ctx, r.ID))
		must(c.removeSnapshot(ctx, sn.ID))
	}
	fromGolden := func() *api.Sandbox {
		sb, err := c.create(ctx, api.CreateSandboxRequest{SnapshotID: golden.ID})
		must(err)
		return sb
	}
	fromScratch := func() *api.Sandbox {
		sb, err := c.create(ctx, api.CreateSandboxRequest{MemoryMB: &memMB})
		must(err)
		_, err = c.code(ctx, sb.ID, dfCell)
		must(err)
		return sb
	}
	for i := 0; i < sharedRounds; i++ {
		round(&shared, fromGolden)
		round(&whole, fromScratch)
	}
	must(c.removeSnapshot(ctx, golden.ID))
	loadEnd := loadAvg()

	b.ReportMetric(shared.suspPct.p50(), "suspend-image-pct-of-memory")
	b.ReportMetric(shared.ckptPct.p50(), "snapshot-pct-of-memory")
	shared.resumed.report(b, "shared-resume-")
	whole.resumed.report(b, "whole-resume-")

	tableTitle(fmt.Sprintf("pages shared with a golden snapshot (%.1f MiB, a 1e6-row DataFrame, memory_mb %d), %d rounds; load average %s at start, %s at end",
		float64(golden.SizeBytes)/mib, snapMemoryMB, sharedRounds, loadStart, loadEnd))
	tableHeader("metric, p50 (p95)", "restored from golden: shares pages", "built from scratch: whole", "target", "met?")
	pct := func(v values) string { return fmt.Sprintf("%s%% (%s%%)", f(v.p50()), f(v.p95())) }
	mibs := func(v values) string { return fmt.Sprintf("%s MiB (%s)", f(v.p50()), f(v.p95())) }
	dur := func(s samples) string { return fmt.Sprintf("%s (%s)", fmtMS(s.p50()), f(s.p95())) }
	tableRow("session memory (`usage.memory_bytes`) after the small change", mibs(shared.mem), mibs(whole.mem), "–", "–")
	tableRow("memory snapshot `size_bytes`", mibs(shared.ckptMiB), mibs(whole.ckptMiB), "–", "–")
	tableRow("… as % of the session's memory", pct(shared.ckptPct), pct(whole.ckptPct),
		fmt.Sprintf("≤ %d%%", sharedTargetPct), verdict(shared.ckptPct.p50(), sharedTargetPct))
	tableRow("suspend image `size_bytes`", mibs(shared.suspMiB), mibs(whole.suspMiB), "–", "–")
	tableRow("… as % of the session's memory", pct(shared.suspPct), pct(whole.suspPct),
		fmt.Sprintf("≤ %d%%", sharedTargetPct), verdict(shared.suspPct.p50(), sharedTargetPct))
	tableRow("suspend request (client)", dur(shared.suspend), dur(whole.suspend), "–", "–")
	tableRow("memory checkpoint request (client)", dur(shared.ckpt), dur(whole.ckpt), "–", "–")
	tableRow("  comparing pages with the base, after the thaw (daemon log: suspends and checkpoints)",
		fmt.Sprintf("%s (%s)", fmtMS(dedupMS.p50()), f(dedupMS.p95())), "–", "–", "–")
	tableRow("resume → first `df.shape` answer", dur(shared.resumed), dur(whole.resumed), "–", "–")
	tableRow("restore of the session's snapshot → first `df.shape` answer", dur(shared.restored), dur(whole.restored), "–", "–")
}
