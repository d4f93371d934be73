package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

// Issue 4: memory snapshots (CRIU), restores and forks of a sandbox whose
// Python context holds a 1e6-row DataFrame.
const (
	snapMemoryMB    = 2048
	snapCheckpoints = 5 // timed memory checkpoints of the source sandbox
	snapRestores    = 5 // timed restores → first answer (and as many cold paths)
	snapForks       = 3 // timed forks
	snapForkCount   = 4 // branches per fork

	snapCheckpointTargetMS = 400  // target: checkpoint (client) and pause, each
	snapRestoreTargetMS    = 350  // target: p50 restore → first df.shape answer
	snapSpeedupTarget      = 4    // target: restore ≥ 4× faster than the cold path
	snapForkTargetMS       = 1500 // target: p50 fork of 4 → all 4 answered

	// tickerLimitS bounds the in-kernel ticker thread, so a copy of it
	// caught in a snapshot stops soon after a restore.
	tickerLimitS = 30
	// tickerSettle is left before and after a checkpoint while the ticker
	// runs, so it sees the pause whole.
	tickerSettle = 100 * time.Millisecond
	// controlWindow is the length of the ticker's control windows (no
	// checkpoint): the gaps the kernel sees anyway on this machine.
	controlWindow = time.Second

	snapCallTimeout = 5 * time.Minute

	dfCell    = "import pandas as pd, numpy as np; df = pd.DataFrame({'a': np.arange(1_000_000), 'b': np.random.rand(1_000_000), 'c': np.random.choice(['x','y','z'], 1_000_000)})"
	shapeCell = "df.shape"
	wantShape = "(1000000, 3)"
)

// tickerStartCell starts a background thread in the kernel that sleeps 1 ms
// at a time and records the largest gap between two of its ticks (and the
// wall-clock time that gap ended), so a pause of the process can be seen
// from inside it.
var tickerStartCell = fmt.Sprintf(`
import threading as _fbx_threading, time as _fbx_time
class _FbxTicker:
    def __init__(self, limit_s):
        self.gap, self.gap_end, self.ticks, self.stop = 0.0, 0.0, 0, False
        self.deadline = _fbx_time.monotonic() + limit_s
        self.thread = _fbx_threading.Thread(target=self._run, daemon=True)
        self.thread.start()
    def _run(self):
        last = _fbx_time.monotonic()
        while not self.stop and last < self.deadline:
            _fbx_time.sleep(0.001)
            now = _fbx_time.monotonic()
            if now - last > self.gap:
                self.gap, self.gap_end = now - last, _fbx_time.time()
            self.ticks += 1
            last = now
    def result(self):
        self.stop = True
        self.thread.join()
        return {"max_gap_ms": round(self.gap * 1e3, 3), "ticks": self.ticks, "gap_end": self.gap_end}
_fbx_ticker = _FbxTicker(%d)
`, tickerLimitS)

const tickerReadCell = "import json as _fbx_json; print(_fbx_json.dumps(_fbx_ticker.result()))"

// tickerResult is what the ticker read back.
type tickerResult struct {
	MaxGapMS float64 `json:"max_gap_ms"`
	Ticks    int     `json:"ticks"`
	GapEnd   float64 `json:"gap_end"` // Unix seconds
}

// snapClient drives the snapshot endpoints with plain net/http JSON calls.
type snapClient struct {
	*codeCaller
	d *daemon
}

func (c *snapClient) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, snapCallTimeout)
	defer cancel()
	data, err := c.do(cctx, method, path, body)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %v: %s", method, path, err, data)
		}
	}
	return nil
}

func (c *snapClient) create(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	var sb api.Sandbox
	return &sb, c.call(ctx, http.MethodPost, "/v1/sandboxes", req, &sb)
}

func (c *snapClient) get(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	return &sb, c.call(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id), nil, &sb)
}

func (c *snapClient) remove(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(id), nil, nil)
}

func (c *snapClient) checkpoint(ctx context.Context, id string) (*api.Snapshot, error) {
	var sn api.Snapshot
	return &sn, c.call(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/checkpoint",
		api.CheckpointRequest{Type: api.SnapshotMemory}, &sn)
}

func (c *snapClient) fork(ctx context.Context, id string, n int) (*api.ForkResult, error) {
	var res api.ForkResult
	return &res, c.call(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/fork", api.ForkRequest{Count: n}, &res)
}

func (c *snapClient) removeSnapshot(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(id), nil, nil)
}

// code runs a cell with a generous timeout.
func (c *snapClient) code(ctx context.Context, id, cell string) (*api.Execution, error) {
	cctx, cancel := context.WithTimeout(ctx, snapCallTimeout)
	defer cancel()
	return c.run(cctx, id, cell)
}

// shape runs df.shape and checks the answer.
// coldRun is one cold path: creating a sandbox, then building the DataFrame
// and asking df.shape in one cell.
type coldRun struct {
	create, first time.Duration // create request; the cell to its answer
	cellMS        float64       // the cell's duration_ms in the sandbox
}

// coldPath runs the cold path once with memMB and removes the sandbox: what a
// restore or a resume is compared with.
func (c *snapClient) coldPath(ctx context.Context, memMB int64) (coldRun, error) {
	t0 := time.Now()
	sb, err := c.create(ctx, api.CreateSandboxRequest{MemoryMB: &memMB})
	t1 := time.Now()
	if err != nil {
		return coldRun{}, fmt.Errorf("cold create: %w", err)
	}
	ex, err := c.code(ctx, sb.ID, dfCell+"\n"+shapeCell)
	t2 := time.Now()
	if err != nil {
		return coldRun{}, err
	}
	if got := mainText(ex); got != wantShape {
		return coldRun{}, fmt.Errorf("cold path: df.shape gave %q", got)
	}
	return coldRun{create: t1.Sub(t0), first: t2.Sub(t1), cellMS: float64(ex.DurationMS)}, c.remove(ctx, sb.ID)
}

func (c *snapClient) shape(ctx context.Context, id string) error {
	ex, err := c.code(ctx, id, shapeCell)
	if err != nil {
		return err
	}
	if got := mainText(ex); got != wantShape {
		return fmt.Errorf("%s: df.shape gave %q, want %s", id, got, wantShape)
	}
	return nil
}

// snapResults holds what BenchmarkSnapshots' parts measured, for the tables
// printed at the end.
type snapResults struct {
	loadStart, loadEnd  string
	memBytes, peakBytes int64 // source sandbox's usage after building df
	restoredMemBytes    int64 // a restored sandbox's usage after its first answer
	buildDF             time.Duration

	// checkpoint
	ckpt, paused, kernelGap, control samples
	gapInWindow                      int
	ckptHandlerMS                    values
	sizes                            []int64
	files                            snapFiles
	dumpStats                        []map[int]uint64
	touchMS                          float64 // host: first touch of pages-sized fresh memory
	touchErr                         string

	// restore and cold
	restoreTotal, restoreCreate, restoreFirst samples
	restoreHandlerMS, restoreCreatedMS        values
	restoreCodeMS                             values
	restoreStats                              []map[int]uint64
	coldTotal, coldCreate, coldFirst          samples
	coldCellMS                                values

	// fork
	forkTotal, forkCall, forkAnswers samples
	forkPaused                       samples
	forkHandlerMS                    values
	forkCreatedMS                    values // the branches' "sandbox created" ms
}

// BenchmarkSnapshots measures memory snapshots on a sandbox (memory_mb 2048)
// whose default Python context holds a 1e6-row DataFrame: checkpoint time and
// the pause the kernel sees, restore → first answer next to the cold path
// (new sandbox, import pandas, rebuild the frame), fork of 4 branches → all
// answered, and the snapshot's size on disk. The daemon runs with --debug;
// its log and the CRIU stats images give the breakdowns.
func BenchmarkSnapshots(b *testing.B) {
	hideNsPerOp(b)
	d := startDaemon(b, true)
	c := &snapClient{codeCaller: newCodeCaller(d), d: d}
	c.hc.Transport.(*http.Transport).MaxIdleConnsPerHost = 2 * snapForkCount
	ctx, cancel := context.WithTimeout(context.Background(), 28*time.Minute)
	defer cancel()
	res := &snapResults{loadStart: loadAvg()}

	mem := int64(snapMemoryMB)
	src, err := c.create(ctx, api.CreateSandboxRequest{MemoryMB: &mem})
	if err != nil {
		b.Fatalf("create source sandbox: %v\ndaemon log:\n%s", err, d.logTail(20))
	}
	t := time.Now()
	if _, err := c.code(ctx, src.ID, dfCell); err != nil {
		b.Fatalf("build df: %v\ndaemon log:\n%s", err, d.logTail(20))
	}
	res.buildDF = time.Since(t)
	if err := c.shape(ctx, src.ID); err != nil {
		b.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let the cgroup's counters settle
	if sb, err := c.get(ctx, src.ID); err != nil {
		b.Fatal(err)
	} else if sb.Usage != nil {
		res.memBytes, res.peakBytes = sb.Usage.MemoryBytes, sb.Usage.MemoryPeakBytes
	}

	b.Run("checkpoint", func(b *testing.B) { benchCheckpoint(b, c, src.ID, res) })
	b.Run("restore", func(b *testing.B) { benchRestore(b, c, src.ID, res) })
	b.Run("fork", func(b *testing.B) { benchFork(b, c, src.ID, res) })

	res.loadEnd = loadAvg()
	printSnapshots(res)
	if err := c.remove(ctx, src.ID); err != nil {
		b.Errorf("delete source sandbox: %v", err)
	}
}

// benchCheckpoint takes 5 memory checkpoints of the source, each inside a
// window of the in-kernel ticker, with a control window (no checkpoint)
// before each.
func benchCheckpoint(b *testing.B, c *snapClient, src string, res *snapResults) {
	hideNsPerOp(b)
	ctx := context.Background()
	window := func(during func() error) (*tickerResult, error) {
		if _, err := c.code(ctx, src, tickerStartCell); err != nil {
			return nil, fmt.Errorf("start ticker: %w", err)
		}
		time.Sleep(tickerSettle)
		if err := during(); err != nil {
			return nil, err
		}
		time.Sleep(tickerSettle)
		ex, err := c.code(ctx, src, tickerReadCell)
		if err != nil {
			return nil, fmt.Errorf("read ticker: %w", err)
		}
		var tr tickerResult
		out := strings.TrimSpace(strings.Join(ex.Logs.Stdout, ""))
		if err := json.Unmarshal([]byte(out), &tr); err != nil {
			return nil, fmt.Errorf("ticker printed %q: %v", out, err)
		}
		return &tr, nil
	}
	var snaps []string
	for i := range snapCheckpoints {
		ctl, err := window(func() error { time.Sleep(controlWindow); return nil })
		if err != nil {
			b.Fatal(err)
		}
		res.control = append(res.control, msDur(ctl.MaxGapMS))

		var sn *api.Snapshot
		var t0, t1 time.Time
		stopCapture := captureDumpLog(c.d)
		tr, err := window(func() error {
			var cerr error
			t0 = time.Now()
			sn, cerr = c.checkpoint(ctx, src)
			t1 = time.Now()
			return cerr
		})
		stopCapture()
		if err != nil {
			b.Fatalf("checkpoint %d: %v\ndaemon log:\n%s", i+1, err, c.d.logTail(20))
		}
		snaps = append(snaps, sn.ID)
		res.ckpt = append(res.ckpt, t1.Sub(t0))
		res.paused = append(res.paused, time.Duration(sn.PausedMS)*time.Millisecond)
		res.kernelGap = append(res.kernelGap, msDur(tr.MaxGapMS))
		end := time.Unix(0, int64(tr.GapEnd*1e9))
		if !end.Before(t0) && !end.After(t1.Add(10*time.Millisecond)) {
			res.gapInWindow++
		}
		res.sizes = append(res.sizes, sn.SizeBytes)
		dir := filepath.Join(c.d.dir, "data", "snapshots", sn.ID)
		if st, err := readCRIUStats(filepath.Join(dir, "criu", "stats-dump")); err == nil {
			res.dumpStats = append(res.dumpStats, st)
		} else {
			b.Logf("diagnostic: %v", err)
		}
		if i == 0 {
			if fl, err := statSnapshotFiles(dir); err == nil {
				res.files = fl
			} else {
				b.Logf("diagnostic: snapshot files: %v", err)
			}
		}
	}
	if dl, err := parseDaemonLog(c.d.logPath); err == nil {
		res.ckptHandlerMS = lastN(dl.httpMS["POST /v1/sandboxes/{id}/checkpoint"], snapCheckpoints)
	}
	for _, id := range snaps {
		if err := c.removeSnapshot(ctx, id); err != nil {
			b.Errorf("delete snapshot %s: %v", id, err)
		}
	}
	// The machine's floor for bringing that much memory back: the first
	// touch of as much fresh anonymous memory, in one process on the host.
	if res.files.pages > 0 {
		var err error
		if res.touchMS, err = firstTouchMS(res.files.pages); err != nil {
			res.touchErr = err.Error()
		}
	}

	res.ckpt.report(b, "")
	b.ReportMetric(res.paused.p50(), "paused-p50-ms")
	b.ReportMetric(res.kernelGap.p50(), "kernel-gap-p50-ms")
	b.ReportMetric(res.control.p50(), "kernel-gap-control-p50-ms")
	if res.memBytes > 0 && len(res.sizes) > 0 {
		sz := values(int64sToFloat(res.sizes)).p50()
		b.ReportMetric(sz/mib, "size-MiB")
		b.ReportMetric(sz/float64(res.memBytes), "size-over-memory")
	}
}

// benchRestore restores a memory snapshot of the source 5 times, each timed
// to its first df.shape answer, interleaved with 5 cold paths: a new
// sandbox that imports pandas and rebuilds the frame.
func benchRestore(b *testing.B, c *snapClient, src string, res *snapResults) {
	hideNsPerOp(b)
	ctx := context.Background()
	sn, err := c.checkpoint(ctx, src) // untimed: the snapshot to restore
	if err != nil {
		b.Fatalf("checkpoint: %v", err)
	}
	mem := int64(snapMemoryMB)
	var restored []string
	restore := func(first bool) error {
		t0 := time.Now()
		sb, err := c.create(ctx, api.CreateSandboxRequest{SnapshotID: sn.ID})
		t1 := time.Now()
		if err != nil {
			return fmt.Errorf("restore: %w\ndaemon log:\n%s", err, c.d.logTail(20))
		}
		err = c.shape(ctx, sb.ID)
		t2 := time.Now()
		if err != nil {
			return err
		}
		res.restoreTotal = append(res.restoreTotal, t2.Sub(t0))
		res.restoreCreate = append(res.restoreCreate, t1.Sub(t0))
		res.restoreFirst = append(res.restoreFirst, t2.Sub(t1))
		restored = append(restored, sb.ID)
		if first {
			time.Sleep(500 * time.Millisecond)
			if got, err := c.get(ctx, sb.ID); err == nil && got.Usage != nil {
				res.restoredMemBytes = got.Usage.MemoryBytes
			}
		}
		sbDir := filepath.Join(c.d.dir, "data", "sandboxes", sb.ID)
		if st, err := readCRIUStats(filepath.Join(sbDir, "stats-restore")); err == nil {
			res.restoreStats = append(res.restoreStats, st)
		} else {
			b.Logf("diagnostic: %v", err)
		}
		keepCRIULog(c.d, filepath.Join(sbDir, "restore.log"), sb.ID+"-restore.log")
		return c.remove(ctx, sb.ID)
	}
	cold := func() error {
		r, err := c.coldPath(ctx, mem)
		if err != nil {
			return err
		}
		res.coldTotal = append(res.coldTotal, r.create+r.first)
		res.coldCreate = append(res.coldCreate, r.create)
		res.coldFirst = append(res.coldFirst, r.first)
		res.coldCellMS = append(res.coldCellMS, r.cellMS)
		return nil
	}
	// Interleaved, alternating which goes first, so load changes on a
	// shared machine hit both alike.
	for i := range snapRestores {
		steps := []func() error{func() error { return restore(i == 0) }, cold}
		if i%2 == 1 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, step := range steps {
			if err := step(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if dl, err := parseDaemonLog(c.d.logPath); err == nil {
		for _, id := range restored {
			if v, ok := dl.createdMS[id]; ok {
				res.restoreCreatedMS = append(res.restoreCreatedMS, v)
			}
			if v := handlerMS(c.d.logPath, http.MethodPost, "/v1/sandboxes/"+id+"/code"); len(v) > 0 {
				res.restoreCodeMS = append(res.restoreCodeMS, v[0])
			}
		}
		// POST /v1/sandboxes handlers in log order: restores and colds
		// alternate as above.
		all := lastN(dl.httpMS["POST /v1/sandboxes"], 2*snapRestores)
		if len(all) == 2*snapRestores {
			for i := range snapRestores {
				k := 2 * i
				if i%2 == 1 {
					k++
				}
				res.restoreHandlerMS = append(res.restoreHandlerMS, all[k])
			}
		}
	}
	if err := c.removeSnapshot(ctx, sn.ID); err != nil {
		b.Errorf("delete snapshot %s: %v", sn.ID, err)
	}

	res.restoreTotal.report(b, "restore-")
	res.coldTotal.report(b, "cold-")
	b.ReportMetric(res.coldTotal.p50()/res.restoreTotal.p50(), "speedup-p50")
}

// benchFork forks the source into 4 branches 3 times, each timed from the
// fork request to the 4 branches' df.shape answers (asked in parallel).
func benchFork(b *testing.B, c *snapClient, src string, res *snapResults) {
	hideNsPerOp(b)
	ctx := context.Background()
	var branches []string
	for i := range snapForks {
		t0 := time.Now()
		fr, err := c.fork(ctx, src, snapForkCount)
		t1 := time.Now()
		if err != nil {
			b.Fatalf("fork %d: %v\ndaemon log:\n%s", i+1, err, c.d.logTail(20))
		}
		if len(fr.Sandboxes) != snapForkCount {
			b.Fatalf("fork %d: %d sandboxes, want %d", i+1, len(fr.Sandboxes), snapForkCount)
		}
		errs := make([]error, snapForkCount)
		var wg sync.WaitGroup
		for j, sb := range fr.Sandboxes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = c.shape(ctx, sb.ID)
			}()
		}
		wg.Wait()
		t2 := time.Now()
		if err := errors.Join(errs...); err != nil {
			b.Fatalf("fork %d: %v", i+1, err)
		}
		res.forkTotal = append(res.forkTotal, t2.Sub(t0))
		res.forkCall = append(res.forkCall, t1.Sub(t0))
		res.forkAnswers = append(res.forkAnswers, t2.Sub(t1))
		res.forkPaused = append(res.forkPaused, time.Duration(fr.Snapshot.PausedMS)*time.Millisecond)
		for _, sb := range fr.Sandboxes {
			branches = append(branches, sb.ID)
			sbDir := filepath.Join(c.d.dir, "data", "sandboxes", sb.ID)
			keepCRIULog(c.d, filepath.Join(sbDir, "restore.log"), sb.ID+"-restore.log")
			if err := c.remove(ctx, sb.ID); err != nil {
				b.Fatalf("delete branch %s: %v", sb.ID, err)
			}
		}
		if err := c.removeSnapshot(ctx, fr.Snapshot.ID); err != nil {
			b.Errorf("delete snapshot %s: %v", fr.Snapshot.ID, err)
		}
	}
	if dl, err := parseDaemonLog(c.d.logPath); err == nil {
		res.forkHandlerMS = lastN(dl.httpMS["POST /v1/sandboxes/{id}/fork"], snapForks)
		for _, id := range branches {
			if v, ok := dl.createdMS[id]; ok {
				res.forkCreatedMS = append(res.forkCreatedMS, v)
			}
		}
	}
	res.forkTotal.report(b, "")
	b.ReportMetric(res.forkCall.p50(), "fork-call-p50-ms")
}

func printSnapshots(r *snapResults) {
	tableTitle(fmt.Sprintf("memory snapshots of a sandbox (memory_mb %d) holding a 1e6-row DataFrame; load average %s at start, %s at end",
		snapMemoryMB, r.loadStart, r.loadEnd))
	tableHeader("metric", "forkbox (this run)", "target", "met?")
	if len(r.ckpt) > 0 {
		tableRow(fmt.Sprintf("memory checkpoint, client-measured, p50 of %d", len(r.ckpt)), fmtMS(r.ckpt.p50()),
			fmt.Sprintf("≤ %d ms each", snapCheckpointTargetMS), countVerdict(r.ckpt, snapCheckpointTargetMS))
		tableRow("pause the daemon reports (snapshot `paused_ms`), p50", fmtMS(r.paused.p50()),
			fmt.Sprintf("≤ %d ms each", snapCheckpointTargetMS), countVerdict(r.paused, snapCheckpointTargetMS))
		tableRow("pause seen inside the kernel (largest gap between 1 ms ticks), p50", fmtMS(r.kernelGap.p50()),
			fmt.Sprintf("≤ %d ms each", snapCheckpointTargetMS), countVerdict(r.kernelGap, snapCheckpointTargetMS))
	}
	if len(r.restoreTotal) > 0 {
		speedup := r.coldTotal.p50() / r.restoreTotal.p50()
		tableRow(fmt.Sprintf("restore → first `df.shape` answer, p50 of %d", len(r.restoreTotal)), fmtMS(r.restoreTotal.p50()),
			fmt.Sprintf("≤ %d ms", snapRestoreTargetMS), verdict(r.restoreTotal.p50(), snapRestoreTargetMS))
		tableRow(fmt.Sprintf("cold path: new sandbox, import pandas, rebuild df → first answer, p50 of %d", len(r.coldTotal)),
			fmtMS(r.coldTotal.p50()), "–", "–")
		tableRow("restore speedup over the cold path (p50 / p50)", fmt.Sprintf("%.1f×", speedup),
			fmt.Sprintf("≥ %d×", snapSpeedupTarget), verdictAtLeast(speedup, snapSpeedupTarget))
	}
	if len(r.forkTotal) > 0 {
		tableRow(fmt.Sprintf("fork into %d → all %d answered `df.shape`, p50 of %d", snapForkCount, snapForkCount, len(r.forkTotal)),
			fmtMS(r.forkTotal.p50()), fmt.Sprintf("≤ %.1f s", snapForkTargetMS/1000.0), verdict(r.forkTotal.p50(), snapForkTargetMS))
	}
	if len(r.sizes) > 0 && r.memBytes > 0 {
		sz := values(int64sToFloat(r.sizes)).p50()
		tableRow("memory snapshot size on disk (`size_bytes`) / sandbox memory (`usage.memory_bytes`)",
			fmt.Sprintf("%s MiB / %s MiB = %.2f× (%.1f%% of memory_mb %d)", f(sz/mib), f(float64(r.memBytes)/mib), sz/float64(r.memBytes),
				100*sz/(snapMemoryMB*mib), snapMemoryMB), "–", "–")
	}

	if len(r.ckpt) > 0 {
		tableTitle("checkpoints, one by one (ms)")
		tableHeader("", "1", "2", "3", "4", "5")
		row := func(name string, s samples) {
			cells := []string{name}
			for _, d := range s {
				cells = append(cells, f(ms(d)))
			}
			tableRow(cells...)
		}
		row("client: POST /checkpoint", r.ckpt)
		if len(r.ckptHandlerMS) == len(r.ckpt) {
			row("  daemon: checkpoint handler", msSamples(r.ckptHandlerMS))
		}
		row("  `paused_ms`: freeze → fs.tar + `criu dump` → thaw", r.paused)
		if len(r.ckptHandlerMS) == len(r.ckpt) {
			var rest samples
			for i, h := range r.ckptHandlerMS {
				rest = append(rest, msDur(h)-r.paused[i])
			}
			row("  handler − paused: mostly the commit (sha256 + fsync of every file)", rest)
		}
		if len(r.dumpStats) == len(r.ckpt) {
			row("  CRIU stats-dump: frozen_time (tasks seized)", statSamples(r.dumpStats, 2))
			row("  CRIU stats-dump: memdump_time (pages drained from the tasks)", statSamples(r.dumpStats, 3))
			row("  CRIU stats-dump: memwrite_time (pages written to the image)", statSamples(r.dumpStats, 4))
		}
		row("inside the kernel: largest gap between 1 ms ticks during the checkpoint", r.kernelGap)
		row("inside the kernel: largest gap in a 1 s control window (no checkpoint)", r.control)
		tableRow(fmt.Sprintf("the kernel's largest gap fell inside the checkpoint request: %d of %d", r.gapInWindow, len(r.ckpt)))
	}

	tableTitle("sizes")
	tableHeader("what", "value")
	tableRow("source sandbox `usage.memory_bytes` after building df (peak)", fmt.Sprintf("%s MiB (%s MiB)", f(float64(r.memBytes)/mib), f(float64(r.peakBytes)/mib)))
	if r.restoredMemBytes > 0 {
		tableRow("a restored sandbox's `usage.memory_bytes` after its first answer", fmt.Sprintf("%s MiB", f(float64(r.restoredMemBytes)/mib)))
	}
	if len(r.sizes) > 0 {
		tableRow("snapshot `size_bytes`, p50", fmt.Sprintf("%s MiB", f(values(int64sToFloat(r.sizes)).p50()/mib)))
	}
	if r.files.total > 0 {
		fl := r.files
		tableRow("  CRIU memory pages (`criu/pages-*.img`)", fmt.Sprintf("%s MiB", f(float64(fl.pages)/mib)))
		tableRow("  writable layer (`fs.tar`)", fmt.Sprintf("%s MiB", f(float64(fl.fsTar)/mib)))
		tableRow("  other CRIU images and the manifest", fmt.Sprintf("%s KiB", f(float64(fl.total-fl.pages-fl.fsTar)/1024)))
	}
	if len(r.dumpStats) > 0 {
		tableRow("CRIU pages written (stats-dump), p50", fmt.Sprintf("%s MiB", f(statValues(r.dumpStats, 7).p50()*4096/mib)))
	}
	tableRow("one-time: building df in the source's context (first cell: kernel start + import + build)", fmtMS(ms(r.buildDF)))

	if len(r.restoreTotal) > 0 {
		tableTitle("restore vs cold path, parts (p50 / max ms)")
		tableHeader("part", "p50 ms", "max ms")
		pm := func(name string, s samples) { tableRow(name, f(s.p50()), f(s.max())) }
		pv := func(name string, v values) {
			if len(v) > 0 {
				tableRow(name, f(v.p50()), f(v.max()))
			}
		}
		pm("restore: total, request → first `df.shape` answer", r.restoreTotal)
		pm("  client: POST /v1/sandboxes {snapshot_id}", r.restoreCreate)
		pv("    daemon: create handler", r.restoreHandlerMS)
		pv("    daemon: `sandbox created ms` (runtime restore incl. `criu restore`, + store)", r.restoreCreatedMS)
		if len(r.restoreHandlerMS) == len(r.restoreCreatedMS) && len(r.restoreHandlerMS) > 0 {
			var pre values
			for i := range r.restoreHandlerMS {
				pre = append(pre, r.restoreHandlerMS[i]-r.restoreCreatedMS[i])
			}
			pv("    handler − created: snapshot lookup + re-hash of its files (Verify) + store", pre)
		}
		if len(r.restoreStats) > 0 {
			pv("    CRIU stats-restore: restore_time", statValues(r.restoreStats, 4).scale(1e-3))
			pv("    CRIU stats-restore: forking_time", statValues(r.restoreStats, 3).scale(1e-3))
		}
		pm("  client: first `df.shape` after the restore", r.restoreFirst)
		pv("    daemon: its /code handler", r.restoreCodeMS)
		pm("cold: total, request → first answer", r.coldTotal)
		pm("  client: POST /v1/sandboxes", r.coldCreate)
		pm("  client: first cell (kernel start + import pandas + build df + df.shape)", r.coldFirst)
		pv("    its `duration_ms`", r.coldCellMS)
		if r.touchMS > 0 {
			tableRow(fmt.Sprintf("machine floor: first touch of %s MiB of fresh anonymous memory (the pages' size) in one host process", f(float64(r.files.pages)/mib)), f(r.touchMS), "")
		} else if r.touchErr != "" {
			tableRow("machine floor: first touch of fresh memory", "skipped: "+r.touchErr, "")
		}
	}

	if len(r.forkTotal) > 0 {
		tableTitle(fmt.Sprintf("fork into %d, parts (ms)", snapForkCount))
		tableHeader("part", "p50 ms", "max ms")
		tableRow("total: fork request → all 4 answered", f(r.forkTotal.p50()), f(r.forkTotal.max()))
		tableRow("  client: POST /fork (checkpoint + 4 restores in parallel)", f(r.forkCall.p50()), f(r.forkCall.max()))
		if len(r.forkHandlerMS) > 0 {
			tableRow("    daemon: fork handler", f(values(r.forkHandlerMS).p50()), f(values(r.forkHandlerMS).max()))
		}
		tableRow("    its checkpoint's `paused_ms`", f(r.forkPaused.p50()), f(r.forkPaused.max()))
		if len(r.forkCreatedMS) > 0 {
			tableRow(fmt.Sprintf("    a branch's `sandbox created ms` (%d branches)", len(r.forkCreatedMS)), f(values(r.forkCreatedMS).p50()), f(values(r.forkCreatedMS).max()))
		}
		tableRow("  client: fork answer → all 4 `df.shape` answers (in parallel)", f(r.forkAnswers.p50()), f(r.forkAnswers.max()))
	}
}

// handlerMS returns the daemon's --debug handler times (ms) of the requests
// to exactly method and path, in log order.
func handlerMS(logPath, method, path string) []float64 {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return nil
	}
	var out []float64
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, "msg=http ") || !strings.Contains(line, " path="+path+" ") {
			continue
		}
		kv := map[string]string{}
		for _, m := range logKVRE.FindAllStringSubmatch(line, -1) {
			kv[m[1]] = strings.Trim(m[2], `"`)
		}
		if kv["method"] != method || kv["path"] != path {
			continue
		}
		if v, err := strconv.ParseFloat(kv["ms"], 64); err == nil {
			out = append(out, v)
		}
	}
	return out
}

// countVerdict says how many samples meet a "≤ target each" goal.
func countVerdict(s samples, target float64) string {
	n := 0
	for _, d := range s {
		if ms(d) <= target {
			n++
		}
	}
	if n == len(s) {
		return fmt.Sprintf("yes (%d of %d)", n, len(s))
	}
	return fmt.Sprintf("**no** (%d of %d)", n, len(s))
}

// verdictAtLeast says whether value meets a "≥ target" goal.
func verdictAtLeast(value, target float64) string {
	if math.IsNaN(value) {
		return "n/a"
	}
	if value >= target {
		return "yes"
	}
	return "**no**"
}

func fmtMS(v float64) string { return f(v) + " ms" }

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func int64sToFloat(vs []int64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = float64(v)
	}
	return out
}

func (v values) scale(k float64) values {
	out := make(values, len(v))
	for i, x := range v {
		out[i] = x * k
	}
	return out
}

// statValues collects one field of decoded CRIU stats.
func statValues(sts []map[int]uint64, field int) values {
	var out values
	for _, st := range sts {
		if v, ok := st[field]; ok {
			out = append(out, float64(v))
		}
	}
	return out
}

// statSamples is statValues of a µs field as durations.
func statSamples(sts []map[int]uint64, field int) samples {
	var out samples
	for _, v := range statValues(sts, field) {
		out = append(out, time.Duration(v)*time.Microsecond)
	}
	return out
}

// loadAvg returns the 1, 5 and 15 min load averages.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	fields := strings.Fields(string(data))
	if len(fields) < 3 {
		return "?"
	}
	return strings.Join(fields[:3], " / ")
}

// snapFiles is what a snapshot directory holds, by kind.
type snapFiles struct{ pages, fsTar, total int64 }

// statSnapshotFiles sums the files of a snapshot directory (diagnostic:
// relies on the daemon's on-disk layout, not on the API).
func statSnapshotFiles(dir string) (snapFiles, error) {
	var fl snapFiles
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n := info.Size()
		fl.total += n
		switch name := d.Name(); {
		case strings.HasPrefix(name, "pages-") && strings.HasSuffix(name, ".img"):
			fl.pages += n
		case name == "fs.tar":
			fl.fsTar += n
		}
		return nil
	})
	return fl, err
}

// readCRIUStats decodes a CRIU stats image (stats-dump or stats-restore):
// two magics, a 4-byte size, then a stats_entry protobuf whose dump (1) or
// restore (2) message holds varint fields. It returns the fields of
// whichever is there, by field number: for a dump 2 frozen_time, 3
// memdump_time, 4 memwrite_time (µs), 7 pages_written; for a restore 3
// forking_time, 4 restore_time (µs), 5 pages_restored.
func readCRIUStats(path string) (map[int]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CRIU stats: %w", err)
	}
	return parseCRIUStats(data)
}

func parseCRIUStats(data []byte) (map[int]uint64, error) {
	if len(data) < 12 {
		return nil, fmt.Errorf("CRIU stats: %d bytes, too short", len(data))
	}
	size := int(binary.LittleEndian.Uint32(data[8:12]))
	if 12+size > len(data) {
		return nil, fmt.Errorf("CRIU stats: entry of %d bytes in a file of %d", size, len(data))
	}
	top, err := protoFields(data[12 : 12+size])
	if err != nil {
		return nil, err
	}
	for _, fl := range top {
		if (fl.num == 1 || fl.num == 2) && fl.bytes != nil {
			inner, err := protoFields(fl.bytes)
			if err != nil {
				return nil, err
			}
			out := map[int]uint64{}
			for _, x := range inner {
				if x.bytes == nil {
					out[x.num] = x.varint
				}
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("CRIU stats: no dump or restore entry")
}

type protoField struct {
	num    int
	varint uint64
	bytes  []byte
}

// protoFields decodes the varint and length-delimited fields of a protobuf
// message (all that CRIU's stats use).
func protoFields(b []byte) ([]protoField, error) {
	var out []protoField
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("CRIU stats: bad field key")
		}
		b = b[n:]
		fl := protoField{num: int(key >> 3)}
		switch key & 7 {
		case 0:
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return nil, fmt.Errorf("CRIU stats: bad varint")
			}
			fl.varint, b = v, b[n:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return nil, fmt.Errorf("CRIU stats: bad length")
			}
			fl.bytes, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return nil, fmt.Errorf("CRIU stats: unexpected wire type %d", key&7)
		}
		out = append(out, fl)
	}
	return out, nil
}

// captureDumpLog keeps CRIU's dump.log of the checkpoint about to run when
// FORKBOX_BENCH_KEEP=1: the daemon removes it from the snapshot once the dump
// succeeds, so a hard link is made to it (under <tmp>/criu-logs) while it is
// being written. The returned func stops watching.
func captureDumpLog(d *daemon) func() {
	if !keepTemp {
		return func() {}
	}
	out := filepath.Join(d.dir, "criu-logs")
	_ = os.MkdirAll(out, 0o755)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			matches, _ := filepath.Glob(filepath.Join(d.dir, "data", "snapshots", ".tmp-*", "criu", "dump.log"))
			for _, m := range matches {
				snap := strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(m))), ".tmp-")
				_ = os.Link(m, filepath.Join(out, snap+"-dump.log"))
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// keepCRIULog copies a restored sandbox's restore.log under <tmp>/criu-logs
// when FORKBOX_BENCH_KEEP=1 (the sandbox's dir goes with the sandbox).
func keepCRIULog(d *daemon, src, name string) {
	if !keepTemp {
		return
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return
	}
	out := filepath.Join(d.dir, "criu-logs")
	_ = os.MkdirAll(out, 0o755)
	_ = os.WriteFile(filepath.Join(out, name), data, 0o644)
}

// firstTouchMS times, in a host Python process, the first write to every
// page of n bytes of fresh anonymous memory: what the kernel alone charges
// to bring that much memory into a process on this machine.
func firstTouchMS(n int64) (float64, error) {
	script := `
import mmap, sys, time
n = int(sys.argv[1])
m = mmap.mmap(-1, n)
t = time.perf_counter()
for off in range(0, n, 4096):
    m[off] = 1
print((time.perf_counter() - t) * 1e3)
`
	out, err := exec.Command(hostPython, "-c", script, strconv.FormatInt(n, 10)).Output()
	if err != nil {
		return 0, fmt.Errorf("%s: %v", hostPython, err)
	}
	return strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
}

func TestParseCRIUStats(t *testing.T) {
	// A stats-dump written by CRIU 4.2.1 for this benchmark's sandbox.
	data := []byte("\x40\x59\x10\x55\x06\x33\x09\x57\x29\x00\x00\x00\x0a\x27\x08\x8c\x61\x10\x93\xf4\x32\x18\xd2\xa7\x12\x20" +
		"\x90\x81\x05\x28\xd5\xe5\x01\x30\x00\x38\xad\xe0\x01\x40\x00\x48\x00\x50\x0e\x58\x0e\x60\x00\x68\x00\x70\x00")
	st, err := parseCRIUStats(data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]uint64{1: 12428, 2: 834067, 3: 299986, 4: 82064, 5: 29397, 7: 28717}
	for k, v := range want {
		if st[k] != v {
			t.Errorf("field %d = %d, want %d", k, st[k], v)
		}
	}
	if _, err := parseCRIUStats(data[:20]); err == nil {
		t.Error("truncated stats: want an error")
	}
}

func TestHandlerMS(t *testing.T) {
	log := `time=2026-01-01T00:00:00.000Z level=DEBUG msg=http method=POST path=/v1/sandboxes/sbx_a/code code=200 ms=61 err=<nil>
time=2026-01-01T00:00:00.000Z level=DEBUG msg=http method=POST path=/v1/sandboxes/sbx_b/code code=200 ms=7 err=<nil>
time=2026-01-01T00:00:00.000Z level=DEBUG msg=http method=GET path=/v1/sandboxes/sbx_a/code code=405 ms=1 err=<nil>
time=2026-01-01T00:00:00.000Z level=DEBUG msg=http method=POST path=/v1/sandboxes/sbx_a/code code=200 ms=3 err=<nil>
`
	path := filepath.Join(t.TempDir(), "daemon.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got := handlerMS(path, http.MethodPost, "/v1/sandboxes/sbx_a/code")
	if len(got) != 2 || got[0] != 61 || got[1] != 3 {
		t.Errorf("handlerMS = %v, want [61 3]", got)
	}
}
