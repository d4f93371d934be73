package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

// lazyRounds is how many timed rounds each side gets; the two daemons take
// turns, round by round.
const lazyRounds = 7

// BenchmarkLazyRestore: restores that fill memory lazily (criu lazy-pages,
// the default where the host allows) against eager ones (--lazy-restore=
// false: CRIU's restorer reads every page before the tree runs), side by
// side in one run: two daemons, each with a sandbox holding the 1e6-row
// DataFrame and its memory snapshot, taking turns round by round. Each
// round times, on one side: a restore of the snapshot → first `df.shape`
// answer; a fork into 4 → all 4 answered; a resume of a suspended session
// (restored from the snapshot, so its suspend image shares pages with it)
// → first answer, after which the session is suspended again untimed. The
// cold path (new sandbox, build the frame, df.shape) runs on the eager
// daemon for the ratio.
func BenchmarkLazyRestore(b *testing.B) {
	hideNsPerOp(b)
	loadStart := loadAvg()
	ctx := context.Background()
	memMB := int64(snapMemoryMB)
	type side struct {
		name                  string
		c                     *snapClient
		must                  func(error)
		snap                  string
		sess                  string
		restore, fork, resume samples
	}
	var sides [2]*side
	for i, args := range [][]string{nil, {"--lazy-restore=false"}} {
		d := startDaemonWith(b, daemonOpts{args: args})
		s := &side{name: []string{"lazy", "eager"}[i], c: &snapClient{codeCaller: newCodeCaller(d), d: d}, must: fatalWithLog(b, d)}
		src, err := s.c.create(ctx, api.CreateSandboxRequest{MemoryMB: &memMB})
		s.must(err)
		_, err = s.c.code(ctx, src.ID, dfCell)
		s.must(err)
		sn, err := s.c.checkpoint(ctx, src.ID)
		s.must(err)
		s.snap = sn.ID
		sess, err := s.c.create(ctx, api.CreateSandboxRequest{SnapshotID: s.snap, Name: "lazy-bench-" + s.name})
		s.must(err)
		s.sess = sess.ID
		s.must(s.c.shape(ctx, s.sess))
		_, err = s.c.susSuspend(ctx, s.sess)
		s.must(err)
		sides[i] = s
	}

	for i := 0; i < 2*lazyRounds; i++ {
		s := sides[i%2]
		// Restore → first answer.
		t0 := time.Now()
		r, err := s.c.create(ctx, api.CreateSandboxRequest{SnapshotID: s.snap})
		s.must(err)
		s.must(s.c.shape(ctx, r.ID))
		s.restore = append(s.restore, time.Since(t0))
		s.must(s.c.remove(ctx, r.ID))

		// Fork into 4 → all answered (the source is the restored session's
		// sibling: a fork checkpoints a running sandbox, so use a fresh
		// restore of the snapshot, untimed).
		fsrc, err := s.c.create(ctx, api.CreateSandboxRequest{SnapshotID: s.snap})
		s.must(err)
		s.must(s.c.shape(ctx, fsrc.ID))
		t0 = time.Now()
		fr, err := s.c.fork(ctx, fsrc.ID, snapForkCount)
		s.must(err)
		errs := make([]error, len(fr.Sandboxes))
		var wg sync.WaitGroup
		for j, sb := range fr.Sandboxes {
			wg.Go(func() { errs[j] = s.c.shape(ctx, sb.ID) })
		}
		wg.Wait()
		s.must(errors.Join(errs...))
		if len(fr.Sandboxes) != snapForkCount {
			s.must(fmt.Errorf("fork made %d sandboxes, want %d", len(fr.Sandboxes), snapForkCount))
		}
		s.fork = append(s.fork, time.Since(t0))
		for _, sb := range fr.Sandboxes {
			s.must(s.c.remove(ctx, sb.ID))
		}
		s.must(s.c.remove(ctx, fsrc.ID))
		s.must(s.c.removeSnapshot(ctx, fr.Snapshot.ID))

		// Resume → first answer (auto-resume by the call), then suspend.
		t0 = time.Now()
		s.must(s.c.shape(ctx, s.sess))
		s.resume = append(s.resume, time.Since(t0))
		_, err = s.c.susSuspend(ctx, s.sess)
		s.must(err)
	}

	var cold samples
	for range 3 {
		run, err := sides[1].c.coldPath(ctx, memMB)
		sides[1].must(err)
		cold = append(cold, run.create+run.first)
	}
	loadEnd := loadAvg()
	sides[0].restore.report(b, "lazy-restore-")
	sides[1].restore.report(b, "eager-restore-")

	tableTitle(fmt.Sprintf("Lazy vs eager memory restores (1e6-row DataFrame kernel, memory_mb %d), %d rounds each, alternating between two daemons; load average %s at start, %s at end",
		snapMemoryMB, lazyRounds, loadStart, loadEnd))
	tableHeader("p50 (p95)", "lazy (default)", "eager (--lazy-restore=false)", "lazy / eager at p50", "issue 18 target")
	row := func(name string, l, e samples, target string) {
		tableRow(name, fmt.Sprintf("%s (%s)", fmtMS(l.p50()), f(l.p95())), fmt.Sprintf("%s (%s)", fmtMS(e.p50()), f(e.p95())),
			fmt.Sprintf("%.2f", l.p50()/e.p50()), target)
	}
	row("restore → first `df.shape` answer", sides[0].restore, sides[1].restore, "≤ 200 ms")
	row("fork into 4 → all 4 answered", sides[0].fork, sides[1].fork, "≤ 600 ms")
	row("resume (auto, by the call) → first answer", sides[0].resume, sides[1].resume, "≤ 200 ms")
	tableRow("cold path: create, build the frame, `df.shape`", fmt.Sprintf("%s (%s), %d runs", fmtMS(cold.p50()), f(cold.p95()), len(cold)), "", "", "")
	tableRow("cold path / restore at p50", fmt.Sprintf("%.1f×", cold.p50()/sides[0].restore.p50()), fmt.Sprintf("%.1f×", cold.p50()/sides[1].restore.p50()), "", "≥ 6×")
}
