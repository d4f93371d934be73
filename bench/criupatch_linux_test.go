package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

// criuBaselineEnv names a CRIU binary to compare the installed one with
// (for instance one built by scripts/build-criu.sh without the newest patch,
// into another prefix).
const criuBaselineEnv = "FORKBOX_BENCH_BASELINE_CRIU"

const criuPatchRounds = 8

// BenchmarkCRIUPatch: the installed CRIU against a baseline CRIU
// ($FORKBOX_BENCH_BASELINE_CRIU), side by side in one run: two daemons,
// each with a sandbox holding the 1e6-row DataFrame, taking turns: a
// memory checkpoint (request and the pause the daemon reports), then a
// restore of it → first `df.shape` answer. For measuring a change to
// forkbox's CRIU patches.
func BenchmarkCRIUPatch(b *testing.B) {
	hideNsPerOp(b)
	baseline := os.Getenv(criuBaselineEnv)
	if baseline == "" {
		skip(b, criuBaselineEnv+" is not set: build a baseline CRIU (scripts/build-criu.sh with another PREFIX and without the patch to measure) and name its sbin/criu")
	}
	loadStart := loadAvg()
	ctx := context.Background()
	memMB := int64(snapMemoryMB)
	type side struct {
		c                     *snapClient
		must                  func(error)
		src                   string
		ckpt, paused, restore samples
	}
	var sides [2]*side
	for i, env := range [][]string{nil, {"FORKBOX_CRIU=" + baseline}} {
		d := startDaemonWith(b, daemonOpts{env: env})
		s := &side{c: &snapClient{codeCaller: newCodeCaller(d), d: d}, must: fatalWithLog(b, d)}
		src, err := s.c.create(ctx, api.CreateSandboxRequest{MemoryMB: &memMB})
		s.must(err)
		_, err = s.c.code(ctx, src.ID, dfCell)
		s.must(err)
		s.src = src.ID
		sides[i] = s
	}
	for i := 0; i < 2*criuPatchRounds; i++ {
		s := sides[i%2]
		t0 := time.Now()
		sn, err := s.c.checkpoint(ctx, s.src)
		s.must(err)
		s.ckpt = append(s.ckpt, time.Since(t0))
		s.paused = append(s.paused, time.Duration(sn.PausedMS)*time.Millisecond)
		t0 = time.Now()
		r, err := s.c.create(ctx, api.CreateSandboxRequest{SnapshotID: sn.ID})
		s.must(err)
		s.must(s.c.shape(ctx, r.ID))
		s.restore = append(s.restore, time.Since(t0))
		s.must(s.c.remove(ctx, r.ID))
		s.must(s.c.removeSnapshot(ctx, sn.ID))
	}
	loadEnd := loadAvg()
	sides[0].restore.report(b, "installed-restore-")
	sides[1].restore.report(b, "baseline-restore-")

	tableTitle(fmt.Sprintf("Installed CRIU vs baseline (%s), %d rounds each, alternating between two daemons; load average %s at start, %s at end",
		baseline, criuPatchRounds, loadStart, loadEnd))
	tableHeader("p50 (p95)", "installed", "baseline", "difference at p50")
	row := func(name string, a, c samples) {
		tableRow(name, fmt.Sprintf("%s (%s)", fmtMS(a.p50()), f(a.p95())), fmt.Sprintf("%s (%s)", fmtMS(c.p50()), f(c.p95())),
			fmtMS(a.p50()-c.p50()))
	}
	row("memory checkpoint request (1e6-row DataFrame)", sides[0].ckpt, sides[1].ckpt)
	row("… of which paused", sides[0].paused, sides[1].paused)
	row("restore → first `df.shape` answer", sides[0].restore, sides[1].restore)
}
