package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
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
// through the same steps. Sizes are the API's size_bytes (a suspend
// image's through a memory snapshot of the suspended session, which
// hard-links the image's files).
func BenchmarkSharedPages(b *testing.B) {
	hideNsPerOp(b)
	loadStart := loadAvg()
	d := startDaemon(b, true)
	c := &snapClient{codeCaller: newCodeCaller(d), d: d}
	ctx := context.Background()
	must := fatalWithLog(b, d)
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

// The suspended-sessions density target: one host holds 1,000 suspended
// sessions, verified, with its memory back to where it started.
const (
	manySessions       = 1000
	manyTarget         = 1000
	manyParallel       = 4
	manyBudget         = 25 * time.Minute // create + suspend phase
	manyVerified       = 50               // resumed and checked, spread over all
	manyCell           = "import pandas as pd; df = pd.DataFrame({'a': range(1000)})"
	manyMemSlackMiB    = 256 // MemAvailable after all are suspended vs before the first
	manyDiskPerSession = 16  // target: MiB of disk per suspended session (du, links counted once)
)

// BenchmarkSuspendedSessions: a golden memory snapshot of a pandas kernel;
// FORKBOX_BENCH_SESSIONS (default 1,000) sessions restored from it, 4 at a
// time, each told its number (`n = i`) and suspended. Then: how many are
// suspended (the list), the disk their images take (du of the snapshots,
// hard links once), MemAvailable and the daemon's RSS against before the
// first, 50 of them spread over the range resumed, asked `n, len(df)` and
// suspended again, and everything deleted.
func BenchmarkSuspendedSessions(b *testing.B) {
	hideNsPerOp(b)
	count := envInt("FORKBOX_BENCH_SESSIONS", manySessions)
	loadStart := loadAvg()
	d := startDaemon(b, false)
	c := &snapClient{codeCaller: newCodeCaller(d), d: d}
	ctx := context.Background()
	must := fatalWithLog(b, d)
	rssBase, _ := d.rssBytes()
	availBase := settledMemAvailable(b)
	snapDir := filepath.Join(d.dir, "data", "snapshots")

	src, err := c.create(ctx, api.CreateSandboxRequest{})
	must(err)
	_, err = c.code(ctx, src.ID, manyCell)
	must(err)
	golden, err := c.checkpoint(ctx, src.ID)
	must(err)
	must(c.remove(ctx, src.ID))
	goldenAlloc, _ := duBytes(snapDir)

	timeout := int64(susTimeoutSecs)
	ids := make([]string, count)
	var create, suspend samples
	var mu sync.Mutex
	var errs []error
	watch := watchMemAvailable()
	start := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	for range manyParallel {
		wg.Go(func() {
			for i := range next {
				t0 := time.Now()
				sb, err := c.create(ctx, api.CreateSandboxRequest{SnapshotID: golden.ID, Name: fmt.Sprintf("s-%04d", i), TimeoutSecs: &timeout})
				if err == nil {
					_, err = c.code(ctx, sb.ID, fmt.Sprintf("n = %d", i))
				}
				t1 := time.Now()
				if err == nil {
					_, err = c.susSuspend(ctx, sb.ID)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("session %d: %w", i, err))
				} else {
					ids[i] = sb.ID
					create = append(create, t1.Sub(t0))
					suspend = append(suspend, time.Since(t1))
				}
				mu.Unlock()
			}
		})
	}
	made := 0
	for i := range count {
		if time.Since(start) > manyBudget {
			break
		}
		next <- i
		made++
	}
	close(next)
	wg.Wait()
	wall := time.Since(start)
	availLow := watch.end()
	if err := errors.Join(errs...); err != nil {
		b.Fatalf("%v\n%s", err, d.logTail(30))
	}

	var list api.SandboxList
	must(c.call(ctx, http.MethodGet, "/v1/sandboxes?state=suspended", nil, &list))
	suspended := len(list.Sandboxes)
	availSusp := settledMemAvailable(b)
	rssSusp, _ := d.rssBytes()
	images, _, apparent := snapshotsDu(snapDir)
	alloc, _ := duBytes(snapDir) // hard links once
	dataAlloc, _ := duBytes(filepath.Join(d.dir, "data"))

	// Resume a spread of them: each still knows its number and its frame.
	verified := 0
	var resumed samples
	for k := range manyVerified {
		i := k * made / manyVerified
		if ids[i] == "" {
			continue
		}
		t0 := time.Now()
		ex, err := c.code(ctx, ids[i], "n, len(df)")
		must(err)
		resumed = append(resumed, time.Since(t0))
		if got, want := mainText(ex), fmt.Sprintf("(%d, 1000)", i); got != want {
			b.Errorf("session %d after resume: %q, want %s", i, got, want)
			continue
		}
		verified++
		// Suspended again: running ones reserve their disks, and the host
		// keeps only so much room for those.
		_, err = c.susSuspend(ctx, ids[i])
		must(err)
	}

	delStart := time.Now()
	next = make(chan int)
	derrs := make([]error, count)
	for range manyParallel {
		wg.Go(func() {
			for i := range next {
				if ids[i] != "" {
					derrs[i] = c.remove(ctx, ids[i])
				}
			}
		})
	}
	for i := range count {
		next <- i
	}
	close(next)
	wg.Wait()
	delWall := time.Since(delStart)
	if err := errors.Join(derrs...); err != nil {
		b.Errorf("delete: %v", err)
	}
	must(c.removeSnapshot(ctx, golden.ID))
	allocEnd, _ := duBytes(snapDir)
	loadEnd := loadAvg()

	perSession := float64(alloc-goldenAlloc) / float64(max(suspended, 1)) / mib
	memDelta := float64(availBase-availSusp) / mib
	b.ReportMetric(float64(suspended), "suspended-sessions")
	b.ReportMetric(perSession, "disk-MiB-per-session")
	b.ReportMetric(memDelta, "memavail-drop-MiB")

	tableTitle(fmt.Sprintf("suspended sessions one host holds: %d sessions restored from a golden snapshot (%.1f MiB, a pandas kernel), told their number and suspended, %d at a time; load average %s at start, %s at end",
		made, float64(golden.SizeBytes)/mib, manyParallel, loadStart, loadEnd))
	tableHeader("metric", "this run", "target", "met?")
	tableRow("sessions suspended (listed `state=suspended`)", fmt.Sprint(suspended), fmt.Sprintf("≥ %d", manyTarget), verdictAtLeast(float64(suspended), manyTarget))
	tableRow(fmt.Sprintf("resumed and checked (`n, len(df)`), %d spread over all", manyVerified), fmt.Sprintf("%d of %d", verified, len(resumed)),
		"all", map[bool]string{true: "yes", false: "no"}[verified == manyVerified && len(resumed) == manyVerified])
	tableRow("disk per suspended session (du of the snapshots, hard links once, golden excluded)", fmt.Sprintf("%s MiB", f(perSession)),
		fmt.Sprintf("≤ %d MiB", manyDiskPerSession), verdict(perSession, manyDiskPerSession))
	tableRow("snapshots dir: du (hard links once) / apparent size (per name)", fmt.Sprintf("%s / %s MiB in %d dirs", f(float64(alloc)/mib), f(float64(apparent)/mib), images), "–", "–")
	tableRow("data dir du with all suspended", mibStr(dataAlloc), "–", "–")
	tableRow("MemAvailable: before the first / lowest while saving / all suspended", fmt.Sprintf("%s / %s / %s", mibStr(availBase), mibStr(availLow), mibStr(availSusp)), "–", "–")
	tableRow("… drop with all suspended (RAM back to baseline)", fmt.Sprintf("%s MiB", f(memDelta)), fmt.Sprintf("≤ %d MiB", manyMemSlackMiB), verdict(memDelta, manyMemSlackMiB))
	tableRow("daemon RSS: before / all suspended", fmt.Sprintf("%s / %s", mibStr(rssBase), mibStr(rssSusp)), "–", "–")
	tableRow("wall time to save them all", fmt.Sprintf("%s s (%s sessions/s)", f(wall.Seconds()), f(float64(len(create))/wall.Seconds())), "–", "–")
	tableRow("per session: restore + `n = i`, p50 (p95)", fmt.Sprintf("%s (%s)", fmtMS(create.p50()), f(create.p95())), "–", "–")
	tableRow("per session: suspend, p50 (p95)", fmt.Sprintf("%s (%s)", fmtMS(suspend.p50()), f(suspend.p95())), "–", "–")
	tableRow("resume → answer of the checked ones, p50 (p95)", fmt.Sprintf("%s (%s)", fmtMS(resumed.p50()), f(resumed.p95())), "–", "–")
	tableRow("delete them all, 4 at a time; snapshots du after", fmt.Sprintf("%s s; %s", f(delWall.Seconds()), mibStr(allocEnd)), "–", "–")
}

// fatalWithLog returns a check that ends the benchmark on an error, with
// the tail of d's log.
func fatalWithLog(b *testing.B, d *daemon) func(error) {
	return func(err error) {
		b.Helper()
		if err != nil {
			b.Fatalf("%v\n%s", err, d.logTail(30))
		}
	}
}
