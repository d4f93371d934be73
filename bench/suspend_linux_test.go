package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

// Issue 5: sessions. Suspend and resume of a named sandbox whose kernel
// holds a 1e6-row DataFrame (next to the cold path), create from a warm
// pool, and how many suspended and live pandas sandboxes one host holds.
// It shares snapClient, dfCell and the log and CRIU helpers with
// BenchmarkSnapshots (snapshot_linux_test.go).
const (
	susMemoryMB       = 2048
	susCycles         = 5    // timed cycles of each resume kind (and cold paths)
	susResumeTargetMS = 350  // target: p50 resume → first df.shape answer
	susTimeoutSecs    = 3600 // idle timeout of the named sandboxes: no idle suspend mid-run

	poolName        = "bench-pandas"
	poolSize        = 3
	poolCreates     = 10 // timed creates from the pool
	poolDirect      = 3  // diagnostic: plain restores of the golden snapshot
	poolWarmed      = 5  // diagnostic: creates from the pool after a `1+1` in every ready sandbox
	poolTargetMS    = 20 // target: p50 create from the pool → first `1+1` answer
	poolFillTimeout = 3 * time.Minute

	densityCount    = 200
	densityParallel = 4
	densityLive     = 100             // suspended sandboxes resumed at once to check the estimate
	densityBudget   = 8 * time.Minute // create + suspend phase: no new sandbox is started after it
	densityHeadroom = 4 << 30         // MemAvailable the live check leaves untouched
	densityCell     = "import pandas as pd; df = pd.DataFrame({'a': range(1000)})"
	densityCheck    = "len(df)"
	// densityDiskMB is the density sandboxes' disk_mb: a running sandbox
	// reserves its whole disk on the data dir's filesystem, and the live
	// check resumes 100 at once, which at the default 2 GiB would ask more
	// than this VM's free space (507); what is measured here is memory.
	densityDiskMB int64 = 256
)

// susResults holds what BenchmarkSuspendResume's parts measured, for the
// tables printed at the end.
type susResults struct {
	loadStart, loadEnd string

	// resume
	srcID             string
	srcMem, srcPeak   int64 // usage after building df
	resumedMem        int64 // usage after the first resume's answer
	buildDF           time.Duration
	suspend           samples // client: POST /suspend, every suspend
	suspendHandler    values
	suspendLogMS      values // "sandbox suspended ms=": image + free
	imageFiles        snapFiles
	imageAlloc        int64
	dumpStats         []map[int]uint64
	auto              samples // /code df.shape on the suspended sandbox → answer
	autoHandler       values  // its /code handler
	explicitTotal     samples
	explicitResume    samples // client: POST /resume
	explicitFirst     samples // client: df.shape after it
	resumeHandler     values
	resumedLogMS      values // "sandbox resumed ms=": restore only, every resume
	restoreStats      []map[int]uint64
	resumeKinds       []string // "auto" or "explicit", in the order of the resumes
	touchMS           float64  // host: first touch of pages-sized fresh memory
	touchErr          string
	cold              samples
	coldCreate        samples
	coldFirst         samples
	coldCellMS        values
	susStateChecked   int // suspends whose answer said suspended
	resumeStateChecks int // resumes after which GET said running

	// pool
	goldenID                          string
	goldenFiles                       snapFiles
	poolFill                          time.Duration // pool created → ready == size
	poolWait                          samples       // wait for a full pool before each create
	poolTotal, poolCreate, poolFirst  samples
	poolHits, poolLogHits             int
	poolHandler                       values
	poolCodeHandler                   values  // daemon: the first /code handler of each handed-out sandbox
	poolCellMS                        values  // its `duration_ms` (agent)
	poolSecond                        samples // diagnostic: a second `1+1` right after the first
	directSecond                      samples
	warmedTotal                       samples // diagnostic: pool creates whose ready sandboxes had run a cell
	warmedHits                        int
	directTotal, directCreate, direct samples // plain restores of the golden snapshot

	// density
	dRan                               bool
	cachedBase, cachedSusp             int64 // meminfo Cached
	freeBase, freeSusp                 int64 // meminfo MemFree
	dCreated                           int
	dBudgetHit                         bool
	availBase, availPeak, availSusp    int64
	availLive, availLivePeak, availEnd int64
	dWall                              time.Duration
	dCreate, dCell, dSuspend           samples
	dKernelMem                         values // MiB: usage.memory_bytes after the cell
	dImages                            int
	dImageAlloc, dImageApparent        int64
	dDataAlloc                         int64 // the whole data dir, all suspended
	rssBase, rssSusp, rssLive          int64
	liveN, liveOK                      int
	liveResume                         samples
	liveWall                           time.Duration
	liveMem                            values // MiB: usage.memory_bytes of the live ones
	deleteWall                         time.Duration
	snapAllocEnd                       int64
}

// BenchmarkSuspendResume measures sessions (issue 5), on one daemon with
// --debug:
//
//   - resume: a named sandbox (memory_mb 2048) whose kernel holds a 1e6-row
//     DataFrame is suspended and brought back 2×5 times: 5 by a /code call
//     on the suspended sandbox (auto-resume), 5 by POST /resume then /code.
//     Interleaved with 5 cold paths (new sandbox, import pandas, rebuild the
//     frame, first answer).
//   - pool: a pool of 3 restored from a golden memory snapshot in which
//     pandas is imported; 10 creates from it, each timed to its first `1+1`
//     answer, each made once the pool is full again (so each is a hit).
//     Diagnostics: 3 plain restores of the same snapshot (a pool miss), and
//     5 more creates after the benchmark ran a `1+1` in every ready sandbox.
//   - density: 200 named sandboxes (4 at a time, disk_mb 256) that each build a small
//     DataFrame and are suspended; host MemAvailable and disk along the way;
//     then 100 of them resumed at once to check how many live kernels fit.
func BenchmarkSuspendResume(b *testing.B) {
	hideNsPerOp(b)
	d := startDaemon(b, true)
	c := &snapClient{codeCaller: newCodeCaller(d), d: d}
	c.hc.Transport.(*http.Transport).MaxIdleConnsPerHost = 2 * densityParallel
	res := &susResults{loadStart: loadAvg()}

	b.Run("resume", func(b *testing.B) { benchSusResume(b, c, res) })
	b.Run("pool", func(b *testing.B) { benchSusPool(b, c, res) })
	b.Run("density", func(b *testing.B) { benchSusDensity(b, c, res) })

	res.loadEnd = loadAvg()
	printSuspendResume(res)
}

// susSuspend suspends a sandbox and checks the answer says so.
func (c *snapClient) susSuspend(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.call(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/suspend", nil, &sb); err != nil {
		return nil, err
	}
	if sb.State != api.StateSuspended {
		return &sb, fmt.Errorf("suspend %s: answer says %s (%s), want suspended", id, sb.State, sb.StateReason)
	}
	return &sb, nil
}

// susResume resumes a sandbox and checks the answer says running.
func (c *snapClient) susResume(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.call(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/resume", nil, &sb); err != nil {
		return nil, err
	}
	if sb.State != api.StateRunning {
		return &sb, fmt.Errorf("resume %s: answer says %s (%s), want running", id, sb.State, sb.StateReason)
	}
	return &sb, nil
}

// benchSusResume: suspend, then auto-resume or explicit resume, each timed to
// the first df.shape answer, interleaved with cold paths.
func benchSusResume(b *testing.B, c *snapClient, res *susResults) {
	hideNsPerOp(b)
	ctx := context.Background()
	d := c.d
	mem, timeout := int64(susMemoryMB), int64(susTimeoutSecs)
	src, err := c.create(ctx, api.CreateSandboxRequest{Name: "bench-session", MemoryMB: &mem, TimeoutSecs: &timeout})
	if err != nil {
		b.Fatalf("create named sandbox: %v\ndaemon log:\n%s", err, d.logTail(20))
	}
	res.srcID = src.ID
	// The /code calls to src, in order, so the daemon's handler times of the
	// auto-resuming ones can be picked from its log.
	codeCalls := 0
	var autoIdx []int
	code := func(cell string) (*api.Execution, error) {
		codeCalls++
		return c.code(ctx, src.ID, cell)
	}
	shape := func() error {
		ex, err := code(shapeCell)
		if err != nil {
			return err
		}
		if got := mainText(ex); got != wantShape {
			return fmt.Errorf("df.shape gave %q, want %s", got, wantShape)
		}
		return nil
	}
	t := time.Now()
	if _, err := code(dfCell); err != nil {
		b.Fatalf("build df: %v\ndaemon log:\n%s", err, d.logTail(20))
	}
	res.buildDF = time.Since(t)
	if err := shape(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let the cgroup's counters settle
	if sb, err := c.get(ctx, src.ID); err == nil && sb.Usage != nil {
		res.srcMem, res.srcPeak = sb.Usage.MemoryBytes, sb.Usage.MemoryPeakBytes
	}

	suspend := func() error {
		t0 := time.Now()
		_, err := c.susSuspend(ctx, src.ID)
		if err != nil {
			return fmt.Errorf("%w\ndaemon log:\n%s", err, d.logTail(20))
		}
		res.suspend = append(res.suspend, time.Since(t0))
		res.susStateChecked++
		if len(res.suspend) == 1 {
			// The one suspend image there is now (no other snapshot exists
			// yet in this daemon): its files, as on disk.
			imgs, _ := filepath.Glob(filepath.Join(d.dir, "data", "snapshots", "snap_*"))
			if len(imgs) == 1 {
				if fl, err := statSnapshotFiles(imgs[0]); err == nil {
					res.imageFiles = fl
				}
				res.imageAlloc, _ = duBytes(imgs[0])
			} else {
				b.Logf("diagnostic: %d snapshot dirs after the first suspend, want 1", len(imgs))
			}
		}
		if imgs, _ := filepath.Glob(filepath.Join(d.dir, "data", "snapshots", "snap_*", "criu", "stats-dump")); len(imgs) == 1 {
			if st, err := readCRIUStats(imgs[0]); err == nil {
				res.dumpStats = append(res.dumpStats, st)
			}
		}
		return nil
	}
	afterResume := func() {
		if st, err := readCRIUStats(filepath.Join(d.dir, "data", "sandboxes", src.ID, "stats-restore")); err == nil {
			res.restoreStats = append(res.restoreStats, st)
		}
		if sb, err := c.get(ctx, src.ID); err == nil && sb.State == api.StateRunning {
			res.resumeStateChecks++
			if res.resumedMem == 0 && sb.Usage != nil {
				res.resumedMem = sb.Usage.MemoryBytes
			}
		}
	}
	auto := func() error {
		if err := suspend(); err != nil {
			return err
		}
		autoIdx = append(autoIdx, codeCalls) // index of the next /code call
		t0 := time.Now()
		if err := shape(); err != nil {
			return fmt.Errorf("auto-resume: %w\ndaemon log:\n%s", err, d.logTail(20))
		}
		res.auto = append(res.auto, time.Since(t0))
		res.resumeKinds = append(res.resumeKinds, "auto")
		afterResume()
		return nil
	}
	explicit := func() error {
		if err := suspend(); err != nil {
			return err
		}
		t0 := time.Now()
		if _, err := c.susResume(ctx, src.ID); err != nil {
			return fmt.Errorf("%w\ndaemon log:\n%s", err, d.logTail(20))
		}
		t1 := time.Now()
		if err := shape(); err != nil {
			return err
		}
		t2 := time.Now()
		res.explicitTotal = append(res.explicitTotal, t2.Sub(t0))
		res.explicitResume = append(res.explicitResume, t1.Sub(t0))
		res.explicitFirst = append(res.explicitFirst, t2.Sub(t1))
		res.resumeKinds = append(res.resumeKinds, "explicit")
		afterResume()
		return nil
	}
	cold := func() error {
		r, err := c.coldPath(ctx, mem)
		if err != nil {
			return err
		}
		res.cold = append(res.cold, r.create+r.first)
		res.coldCreate = append(res.coldCreate, r.create)
		res.coldFirst = append(res.coldFirst, r.first)
		res.coldCellMS = append(res.coldCellMS, r.cellMS)
		return nil
	}
	// Interleaved, the order rotating each cycle, so load changes on a
	// shared machine hit all three alike.
	for i := range susCycles {
		steps := []func() error{auto, explicit, cold}
		for range i % 3 {
			steps = append(steps[1:], steps[0])
		}
		for _, step := range steps {
			if err := step(); err != nil {
				b.Fatal(err)
			}
		}
	}

	codeMS := handlerMS(d.logPath, http.MethodPost, "/v1/sandboxes/"+src.ID+"/code")
	if len(codeMS) == codeCalls {
		for _, i := range autoIdx {
			res.autoHandler = append(res.autoHandler, codeMS[i])
		}
	} else {
		b.Logf("diagnostic: %d /code lines in the daemon log for %d calls", len(codeMS), codeCalls)
	}
	res.suspendHandler = handlerMS(d.logPath, http.MethodPost, "/v1/sandboxes/"+src.ID+"/suspend")
	res.resumeHandler = handlerMS(d.logPath, http.MethodPost, "/v1/sandboxes/"+src.ID+"/resume")
	res.suspendLogMS = logMsgMS(d.logPath, "sandbox suspended", src.ID)
	res.resumedLogMS = logMsgMS(d.logPath, "sandbox resumed", src.ID)

	if err := c.remove(ctx, src.ID); err != nil {
		b.Errorf("delete %s: %v", src.ID, err)
	}
	// The machine's floor for bringing the image's pages back: the first
	// touch of as much fresh anonymous memory, in one process on the host.
	if res.imageFiles.pages > 0 {
		var err error
		if res.touchMS, err = firstTouchMS(res.imageFiles.pages); err != nil {
			res.touchErr = err.Error()
		}
	}
	res.suspend.report(b, "suspend-")
	res.auto.report(b, "auto-resume-")
	res.explicitTotal.report(b, "resume-")
	res.cold.report(b, "cold-")
}

// benchSusPool: creates from a warm pool of sandboxes restored from a golden
// snapshot in which pandas is imported, each timed to its first `1+1`.
func benchSusPool(b *testing.B, c *snapClient, res *susResults) {
	hideNsPerOp(b)
	ctx := context.Background()
	d := c.d
	src, err := c.create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		b.Fatalf("create golden source: %v\ndaemon log:\n%s", err, d.logTail(20))
	}
	if _, err := c.code(ctx, src.ID, "import pandas as pd"); err != nil {
		b.Fatalf("import pandas: %v", err)
	}
	golden, err := c.checkpoint(ctx, src.ID)
	if err != nil {
		b.Fatalf("golden checkpoint: %v\ndaemon log:\n%s", err, d.logTail(20))
	}
	res.goldenID = golden.ID
	if fl, err := statSnapshotFiles(filepath.Join(d.dir, "data", "snapshots", golden.ID)); err == nil {
		res.goldenFiles = fl
	}
	if err := c.remove(ctx, src.ID); err != nil {
		b.Fatalf("delete golden source: %v", err)
	}
	defer func() {
		if err := c.removeSnapshot(ctx, golden.ID); err != nil {
			b.Errorf("delete golden snapshot: %v", err)
		}
	}()

	// firstAnswer runs `1+1` in a sandbox and checks the answer.
	var lastCellMS float64
	firstAnswer := func(id string) error {
		ex, err := c.code(ctx, id, "1+1")
		if err != nil {
			return err
		}
		if got := mainText(ex); got != "2" {
			return fmt.Errorf("%s: 1+1 gave %q", id, got)
		}
		lastCellMS = float64(ex.DurationMS)
		return nil
	}
	// second times one more `1+1` (untimed diagnostic: the steady state).
	second := func(id string, into *samples) error {
		t := time.Now()
		if err := firstAnswer(id); err != nil {
			return err
		}
		*into = append(*into, time.Since(t))
		return nil
	}

	// Diagnostic, before the pool exists (its refills would compete): a
	// plain restore of the same snapshot, what a pool miss costs.
	for range poolDirect {
		t0 := time.Now()
		sb, err := c.create(ctx, api.CreateSandboxRequest{SnapshotID: golden.ID})
		t1 := time.Now()
		if err != nil {
			b.Fatalf("restore golden: %v\ndaemon log:\n%s", err, d.logTail(20))
		}
		if err := firstAnswer(sb.ID); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		res.directTotal = append(res.directTotal, t2.Sub(t0))
		res.directCreate = append(res.directCreate, t1.Sub(t0))
		res.direct = append(res.direct, t2.Sub(t1))
		if err := second(sb.ID, &res.directSecond); err != nil {
			b.Fatal(err)
		}
		if err := c.remove(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
	}

	t0 := time.Now()
	var pl api.Pool
	if err := c.call(ctx, http.MethodPost, "/v1/pools", api.CreatePoolRequest{Name: poolName, SnapshotID: golden.ID, Size: poolSize}, &pl); err != nil {
		b.Fatalf("create pool: %v", err)
	}
	defer func() {
		if err := c.call(ctx, http.MethodDelete, "/v1/pools/"+poolName, nil, nil); err != nil {
			b.Errorf("delete pool: %v", err)
		}
	}()
	if err := c.waitPoolFull(ctx, poolName); err != nil {
		b.Fatalf("%v\ndaemon log:\n%s", err, d.logTail(20))
	}
	res.poolFill = time.Since(t0)

	var claimed []string
	for i := range poolCreates {
		tw := time.Now()
		if err := c.waitPoolFull(ctx, poolName); err != nil {
			b.Fatalf("%v\ndaemon log:\n%s", err, d.logTail(20))
		}
		res.poolWait = append(res.poolWait, time.Since(tw))
		ready, err := c.poolReadyIDs(ctx, poolName)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // untimed: let the last refill's work settle
		t0 := time.Now()
		sb, err := c.create(ctx, api.CreateSandboxRequest{Pool: poolName, Name: fmt.Sprintf("pool-claim-%d", i)})
		t1 := time.Now()
		if err != nil {
			b.Fatalf("create from pool: %v\ndaemon log:\n%s", err, d.logTail(20))
		}
		if err := firstAnswer(sb.ID); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		res.poolTotal = append(res.poolTotal, t2.Sub(t0))
		res.poolCreate = append(res.poolCreate, t1.Sub(t0))
		res.poolFirst = append(res.poolFirst, t2.Sub(t1))
		res.poolCellMS = append(res.poolCellMS, lastCellMS)
		if err := second(sb.ID, &res.poolSecond); err != nil {
			b.Fatal(err)
		}
		if slices.Contains(ready, sb.ID) {
			res.poolHits++
		}
		claimed = append(claimed, sb.ID)
		if err := c.remove(ctx, sb.ID); err != nil { // untimed
			b.Fatal(err)
		}
	}
	// Diagnostic: what a pool whose sandboxes had already answered one cell
	// would give. The benchmark runs `1+1` in every ready sandbox (by id,
	// untimed) before each create; the pool itself does no such thing.
	for i := range poolWarmed {
		if err := c.waitPoolFull(ctx, poolName); err != nil {
			b.Fatalf("%v\ndaemon log:\n%s", err, d.logTail(20))
		}
		ready, err := c.poolReadyIDs(ctx, poolName)
		if err != nil {
			b.Fatal(err)
		}
		for _, id := range ready {
			if err := firstAnswer(id); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
		t0 := time.Now()
		sb, err := c.create(ctx, api.CreateSandboxRequest{Pool: poolName, Name: fmt.Sprintf("pool-warmed-%d", i)})
		if err != nil {
			b.Fatalf("create from pool: %v\ndaemon log:\n%s", err, d.logTail(20))
		}
		if err := firstAnswer(sb.ID); err != nil {
			b.Fatal(err)
		}
		res.warmedTotal = append(res.warmedTotal, time.Since(t0))
		if slices.Contains(ready, sb.ID) {
			res.warmedHits++
		}
		if err := c.remove(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
	}

	handed := map[string]bool{}
	for _, id := range logMsgSandboxes(d.logPath, "sandbox handed out from pool") {
		handed[id] = true
	}
	for _, id := range claimed {
		if handed[id] {
			res.poolLogHits++
		}
		if v := handlerMS(d.logPath, http.MethodPost, "/v1/sandboxes/"+id+"/code"); len(v) > 0 {
			res.poolCodeHandler = append(res.poolCodeHandler, v[0])
		}
	}
	if dl, err := parseDaemonLog(d.logPath); err == nil {
		if h := dl.httpMS["POST /v1/sandboxes"]; len(h) >= poolCreates+poolWarmed {
			res.poolHandler = h[len(h)-poolCreates-poolWarmed : len(h)-poolWarmed]
		}
	}
	res.poolTotal.report(b, "")
	b.ReportMetric(float64(res.poolHits), "pool-hits")
	res.directTotal.report(b, "direct-restore-")
}

// waitPoolFull polls GET /v1/pools until the pool has all its sandboxes
// ready.
func (c *snapClient) waitPoolFull(ctx context.Context, name string) error {
	deadline := time.Now().Add(poolFillTimeout)
	for {
		var list api.PoolList
		if err := c.call(ctx, http.MethodGet, "/v1/pools", nil, &list); err != nil {
			return err
		}
		for _, p := range list.Pools {
			if p.Name == name && p.Ready >= p.Size {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pool %s not full after %s: %+v", name, poolFillTimeout, list.Pools)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// poolReadyIDs lists the ready sandboxes of a pool (by their labels).
func (c *snapClient) poolReadyIDs(ctx context.Context, name string) ([]string, error) {
	q := url.Values{"label": {"forkbox.pool:" + name, "forkbox.pool.ready:true"}}
	var list api.SandboxList
	if err := c.call(ctx, http.MethodGet, "/v1/sandboxes?"+q.Encode(), nil, &list); err != nil {
		return nil, err
	}
	var ids []string
	for _, sb := range list.Sandboxes {
		if sb.State == api.StateRunning {
			ids = append(ids, sb.ID)
		}
	}
	return ids, nil
}

// memWatch samples MemAvailable every 100 ms and keeps the lowest.
type memWatch struct {
	mu   sync.Mutex
	low  int64
	stop chan struct{}
	done chan struct{}
}

func watchMemAvailable() *memWatch {
	w := &memWatch{low: -1, stop: make(chan struct{}), done: make(chan struct{})}
	w.sample()
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				w.sample()
				return
			case <-tick.C:
				w.sample()
			}
		}
	}()
	return w
}

func (w *memWatch) sample() {
	v, err := memAvailableBytes()
	if err != nil {
		return
	}
	w.mu.Lock()
	if w.low < 0 || v < w.low {
		w.low = v
	}
	w.mu.Unlock()
}

// end stops the sampling and returns the lowest MemAvailable seen.
func (w *memWatch) end() int64 {
	close(w.stop)
	<-w.done
	return w.low
}

// settledMemAvailable reads MemAvailable after a short pause.
func settledMemAvailable(b *testing.B) int64 {
	time.Sleep(2 * time.Second)
	v, err := memAvailableBytes()
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// benchSusDensity: 200 named sandboxes holding a small DataFrame, suspended;
// then as many live at once as the estimate allows (up to 100).
func benchSusDensity(b *testing.B, c *snapClient, res *susResults) {
	hideNsPerOp(b)
	ctx := context.Background()
	d := c.d
	res.dRan = true
	res.rssBase, _ = d.rssBytes()
	res.availBase = settledMemAvailable(b)
	res.cachedBase, _ = kbField("/proc/meminfo", "Cached")
	res.freeBase, _ = kbField("/proc/meminfo", "MemFree")
	timeout := int64(susTimeoutSecs)

	type made struct {
		id                   string
		create, cell, suspnd time.Duration
		memMiB               float64
	}
	out := make([]*made, densityCount)
	errs := make([]error, densityCount)
	var mu sync.Mutex
	watch := watchMemAvailable()
	start := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	for range densityParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				m := &made{}
				t0 := time.Now()
				disk := densityDiskMB
				sb, err := c.create(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("dense-%03d", i), TimeoutSecs: &timeout, DiskMB: &disk})
				if err != nil {
					errs[i] = fmt.Errorf("create %d: %w", i, err)
					continue
				}
				m.id = sb.ID
				mu.Lock()
				out[i] = m
				mu.Unlock()
				t1 := time.Now()
				if _, err := c.code(ctx, sb.ID, densityCell); err != nil {
					errs[i] = fmt.Errorf("cell in %d: %w", i, err)
					continue
				}
				t2 := time.Now()
				if got, err := c.get(ctx, sb.ID); err == nil && got.Usage != nil {
					m.memMiB = float64(got.Usage.MemoryBytes) / mib
				}
				t3 := time.Now()
				if _, err := c.susSuspend(ctx, sb.ID); err != nil {
					errs[i] = fmt.Errorf("suspend %d: %w", i, err)
					continue
				}
				m.create, m.cell, m.suspnd = t1.Sub(t0), t2.Sub(t1), time.Since(t3)
			}
		}()
	}
	for i := range densityCount {
		if time.Since(start) > densityBudget {
			res.dBudgetHit = true
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	res.dWall = time.Since(start)
	res.availPeak = watch.end()
	if err := errors.Join(errs...); err != nil {
		b.Fatalf("%v\ndaemon log:\n%s", err, d.logTail(20))
	}
	var ids []string
	for _, m := range out {
		if m == nil {
			continue
		}
		ids = append(ids, m.id)
		res.dCreate = append(res.dCreate, m.create)
		res.dCell = append(res.dCell, m.cell)
		res.dSuspend = append(res.dSuspend, m.suspnd)
		if m.memMiB > 0 {
			res.dKernelMem = append(res.dKernelMem, m.memMiB)
		}
	}
	res.dCreated = len(ids)
	res.availSusp = settledMemAvailable(b)
	res.cachedSusp, _ = kbField("/proc/meminfo", "Cached")
	res.freeSusp, _ = kbField("/proc/meminfo", "MemFree")
	res.rssSusp, _ = d.rssBytes()
	res.dImages, res.dImageAlloc, res.dImageApparent = snapshotsDu(filepath.Join(d.dir, "data", "snapshots"))
	res.dDataAlloc, _ = duBytes(filepath.Join(d.dir, "data"))

	// How many live ones fit, by the estimate; resume up to densityLive of
	// them, leaving densityHeadroom of MemAvailable untouched.
	perKernel := res.dKernelMem.p50() * mib
	n := min(densityLive, len(ids))
	if perKernel > 0 {
		n = min(n, int(float64(res.availSusp-densityHeadroom)/perKernel))
	}
	n = max(n, 0)
	res.liveN = n
	live := ids[:n]
	watch = watchMemAvailable()
	start = time.Now()
	resumeTimes := make([]time.Duration, n)
	rerrs := make([]error, n)
	next = make(chan int)
	for range densityParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				if _, err := c.susResume(ctx, live[i]); err != nil {
					rerrs[i] = err
					continue
				}
				resumeTimes[i] = time.Since(t0)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	res.liveWall = time.Since(start)
	if err := errors.Join(rerrs...); err != nil {
		b.Fatalf("resume: %v\ndaemon log:\n%s", err, d.logTail(20))
	}
	res.liveResume = resumeTimes
	// Every live kernel still holds its frame.
	for _, id := range live {
		ex, err := c.code(ctx, id, densityCheck)
		if err != nil {
			b.Fatalf("%s after resume: %v", id, err)
		}
		if got := mainText(ex); got == "1000" {
			res.liveOK++
		} else {
			b.Errorf("%s after resume: len(df) gave %q, want 1000", id, got)
		}
	}
	res.availLive = settledMemAvailable(b)
	res.availLivePeak = watch.end()
	res.rssLive, _ = d.rssBytes()
	for _, id := range live {
		if sb, err := c.get(ctx, id); err == nil && sb.Usage != nil {
			res.liveMem = append(res.liveMem, float64(sb.Usage.MemoryBytes)/mib)
		}
	}

	// Delete everything, 4 at a time.
	start = time.Now()
	next = make(chan int)
	derrs := make([]error, len(ids))
	for range densityParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				derrs[i] = c.remove(ctx, ids[i])
			}
		}()
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	res.deleteWall = time.Since(start)
	if err := errors.Join(derrs...); err != nil {
		b.Errorf("delete: %v", err)
	}
	res.availEnd = settledMemAvailable(b)
	_, res.snapAllocEnd, _ = snapshotsDu(filepath.Join(d.dir, "data", "snapshots"))

	b.ReportMetric(float64(res.dCreated), "suspended-sandboxes")
	b.ReportMetric(float64(res.availBase)/mib, "memavail-base-MiB")
	b.ReportMetric(float64(res.availPeak)/mib, "memavail-low-MiB")
	b.ReportMetric(float64(res.availSusp)/mib, "memavail-suspended-MiB")
	b.ReportMetric(float64(res.dImageAlloc)/mib, "images-du-MiB")
	if n > 0 {
		b.ReportMetric(float64(res.availSusp-res.availLive)/float64(n)/mib, "host-MiB-per-live-kernel")
	}
}

// duBytes is `du -s` of a path: the blocks allocated to its files, counting
// a hard-linked file once.
func duBytes(root string) (int64, error) {
	var total int64
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(root, func(_ string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		info, err := de.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		key := [2]uint64{st.Dev, st.Ino}
		if seen[key] {
			return nil
		}
		seen[key] = true
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// snapshotsDu counts the snapshot directories under dir and sums their
// allocated and apparent sizes.
func snapshotsDu(dir string) (n int, alloc, apparent int64) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		n++
		a, _ := duBytes(filepath.Join(dir, e.Name()))
		alloc += a
		if fl, err := statSnapshotFiles(filepath.Join(dir, e.Name())); err == nil {
			apparent += fl.total
		}
	}
	return n, alloc, apparent
}

// logMsgMS returns the ms= values of the daemon's log lines with message
// msg about one sandbox, in log order.
func logMsgMS(logPath, msg, sandbox string) values {
	var out values
	forLogMsg(logPath, msg, func(kv map[string]string) {
		if kv["sandbox"] != sandbox {
			return
		}
		if v, err := strconv.ParseFloat(kv["ms"], 64); err == nil {
			out = append(out, v)
		}
	})
	return out
}

// logMsgSandboxes returns the sandbox= values of the log lines with message
// msg, in log order.
func logMsgSandboxes(logPath, msg string) []string {
	var out []string
	forLogMsg(logPath, msg, func(kv map[string]string) { out = append(out, kv["sandbox"]) })
	return out
}

func forLogMsg(logPath, msg string, fn func(map[string]string)) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		m := logMsgRE.FindStringSubmatch(line)
		if m == nil || strings.Trim(m[1], `"`) != msg {
			continue
		}
		rest := line[strings.Index(line, m[0])+len(m[0]):]
		kv := map[string]string{}
		for _, x := range logKVRE.FindAllStringSubmatch(rest, -1) {
			kv[x[1]] = strings.Trim(x[2], `"`)
		}
		fn(kv)
	}
}

func mibStr(v int64) string { return fmt.Sprintf("%s MiB", f(float64(v)/mib)) }

func printSuspendResume(r *susResults) {
	tableTitle(fmt.Sprintf("sessions: suspend, resume, pools; load average %s at start, %s at end", r.loadStart, r.loadEnd))
	tableHeader("metric", "forkbox (this run)", "same run, for comparison", "target", "met?")
	if len(r.auto) > 0 {
		tableRow(fmt.Sprintf("suspend (POST /suspend → answer `suspended`), p50 of %d", len(r.suspend)), fmtMS(r.suspend.p50()),
			fmt.Sprintf("max %s", fmtMS(r.suspend.max())), "–", "–")
		tableRow(fmt.Sprintf("auto-resume: `df.shape` via /code on the suspended sandbox → answer, p50 of %d", len(r.auto)),
			fmtMS(r.auto.p50()), fmt.Sprintf("cold path p50 of %d: %s", len(r.cold), fmtMS(r.cold.p50())),
			fmt.Sprintf("≤ %d ms", susResumeTargetMS), verdict(r.auto.p50(), susResumeTargetMS))
		tableRow(fmt.Sprintf("explicit: POST /resume, then `df.shape` → answer, p50 of %d", len(r.explicitTotal)),
			fmtMS(r.explicitTotal.p50()), fmt.Sprintf("%.1f× faster than cold (auto: %.1f×)", r.cold.p50()/r.explicitTotal.p50(), r.cold.p50()/r.auto.p50()),
			fmt.Sprintf("≤ %d ms", susResumeTargetMS), verdict(r.explicitTotal.p50(), susResumeTargetMS))
	}
	if len(r.poolTotal) > 0 {
		tableRow(fmt.Sprintf("create from a warm pool → first `1+1` answer, p50 of %d (pool hits: %d of %d)", len(r.poolTotal), r.poolHits, len(r.poolTotal)),
			fmtMS(r.poolTotal.p50()), fmt.Sprintf("plain restore of the golden snapshot → `1+1`, p50 of %d: %s", len(r.directTotal), fmtMS(r.directTotal.p50())),
			fmt.Sprintf("≤ %d ms", poolTargetMS), verdict(r.poolTotal.p50(), poolTargetMS))
	}
	if r.dRan {
		tableRow(fmt.Sprintf("density: MemAvailable baseline → lowest → after %d suspended", r.dCreated),
			fmt.Sprintf("%s → %s → %s", mibStr(r.availBase), mibStr(r.availPeak), mibStr(r.availSusp)),
			"after − baseline: "+signedMiB(r.availSusp-r.availBase), "back near the baseline", nearVerdict(r.availSusp-r.availBase, r.dImageAlloc))
		tableRow(fmt.Sprintf("density: disk of the %d suspend images (du)", r.dImages), mibStr(r.dImageAlloc),
			fmt.Sprintf("%s MiB each", f(float64(r.dImageAlloc)/float64(max(r.dImages, 1))/mib)), "–", "–")
	}

	if len(r.auto) > 0 {
		tableTitle("suspend and resume, parts (p50 / max ms)")
		tableHeader("part", "p50 ms", "max ms")
		pm := func(name string, s samples) { tableRow(name, f(s.p50()), f(s.max())) }
		pv := func(name string, v values) {
			if len(v) > 0 {
				tableRow(name, f(v.p50()), f(v.max()))
			}
		}
		pm("client: POST /suspend", r.suspend)
		pv("  daemon: suspend handler", r.suspendHandler)
		pv("  daemon: `sandbox suspended ms=` (image written and committed + processes freed)", r.suspendLogMS)
		if len(r.dumpStats) > 0 {
			pv("    CRIU stats-dump: frozen_time", statValues(r.dumpStats, 2).scale(1e-3))
			pv("    CRIU stats-dump: memdump_time", statValues(r.dumpStats, 3).scale(1e-3))
			pv("    CRIU stats-dump: memwrite_time", statValues(r.dumpStats, 4).scale(1e-3))
		}
		pm("auto-resume: client `df.shape` on the suspended sandbox", r.auto)
		pv("  daemon: its /code handler (resume + the cell)", r.autoHandler)
		pm("explicit: client POST /resume", r.explicitResume)
		pv("  daemon: resume handler", r.resumeHandler)
		pm("explicit: client `df.shape` after it", r.explicitFirst)
		pv(fmt.Sprintf("daemon: `sandbox resumed ms=` (restore only, after the image's re-hash), all %d resumes", len(r.resumedLogMS)), r.resumedLogMS)
		if len(r.resumedLogMS) == len(r.resumeKinds) {
			var explPre values
			expl := 0
			for i, kind := range r.resumeKinds {
				if kind == "explicit" && expl < len(r.resumeHandler) {
					explPre = append(explPre, r.resumeHandler[expl]-r.resumedLogMS[i])
					expl++
				}
			}
			pv("  explicit: resume handler − `sandbox resumed`: lookup + re-hash of the image (Verify) + store", explPre)
		}
		if len(r.restoreStats) > 0 {
			pv("  CRIU stats-restore: restore_time", statValues(r.restoreStats, 4).scale(1e-3))
			pv("  CRIU stats-restore: forking_time", statValues(r.restoreStats, 3).scale(1e-3))
		}
		if r.touchMS > 0 {
			tableRow(fmt.Sprintf("machine floor: first touch of %s of fresh anonymous memory (the image's pages) in one host process", mibStr(r.imageFiles.pages)), f(r.touchMS), "")
		} else if r.touchErr != "" {
			tableRow("machine floor: first touch of fresh memory", "skipped: "+r.touchErr, "")
		}
		pm("cold: total, request → first answer", r.cold)
		pm("  client: POST /v1/sandboxes", r.coldCreate)
		pm("  client: first cell (kernel start + import pandas + build df + df.shape)", r.coldFirst)
		pv("    its `duration_ms`", r.coldCellMS)

		tableTitle("suspend and resume, sizes and checks")
		tableHeader("what", "value")
		tableRow("sandbox `usage.memory_bytes` after building df (peak)", fmt.Sprintf("%s (%s)", mibStr(r.srcMem), mibStr(r.srcPeak)))
		if r.resumedMem > 0 {
			tableRow("after a resume and its first answer", mibStr(r.resumedMem))
		}
		if r.imageFiles.total > 0 {
			tableRow("suspend image: files / allocated (du)", fmt.Sprintf("%s / %s", mibStr(r.imageFiles.total), mibStr(r.imageAlloc)))
			tableRow("  CRIU pages / fs.tar", fmt.Sprintf("%s / %s", mibStr(r.imageFiles.pages), mibStr(r.imageFiles.fsTar)))
		}
		tableRow("suspends answered `suspended`; resumes after which GET said `running`", fmt.Sprintf("%d of %d; %d of %d", r.susStateChecked, len(r.suspend), r.resumeStateChecks, len(r.auto)+len(r.explicitTotal)))
		tableRow("one-time: building df (first cell: kernel start + import + build)", fmtMS(ms(r.buildDF)))
	}

	if len(r.poolTotal) > 0 {
		tableTitle("warm pool, parts (p50 / max ms)")
		tableHeader("part", "p50 ms", "max ms")
		tableRow("total: POST /v1/sandboxes {pool} → first `1+1` answer", f(r.poolTotal.p50()), f(r.poolTotal.max()))
		tableRow("  client: POST /v1/sandboxes {pool}", f(r.poolCreate.p50()), f(r.poolCreate.max()))
		if len(r.poolHandler) > 0 {
			tableRow("    daemon: create handler (integer ms)", f(r.poolHandler.p50()), f(r.poolHandler.max()))
		}
		tableRow("  client: first `1+1`", f(r.poolFirst.p50()), f(r.poolFirst.max()))
		if len(r.poolCodeHandler) > 0 {
			tableRow("    daemon: its /code handler (integer ms)", f(r.poolCodeHandler.p50()), f(r.poolCodeHandler.max()))
		}
		tableRow("    agent: its `duration_ms`", f(r.poolCellMS.p50()), f(r.poolCellMS.max()))
		tableRow("diagnostic, untimed: a second `1+1` right after the first", f(r.poolSecond.p50()), f(r.poolSecond.max()))
		tableRow("untimed: wait for the pool to be full again before each create", f(r.poolWait.p50()), f(r.poolWait.max()))
		if len(r.warmedTotal) > 0 {
			tableRow(fmt.Sprintf("diagnostic: create → first `1+1` when every ready sandbox had already run a `1+1` (%d creates, %d hits)", len(r.warmedTotal), r.warmedHits),
				f(r.warmedTotal.p50()), f(r.warmedTotal.max()))
		}
		tableRow("plain restore of the golden snapshot → `1+1` (a pool miss)", f(r.directTotal.p50()), f(r.directTotal.max()))
		tableRow("  of which POST /v1/sandboxes {snapshot_id}", f(r.directCreate.p50()), f(r.directCreate.max()))
		tableRow("  of which the first `1+1`", f(r.direct.p50()), f(r.direct.max()))
		tableRow("  then a second `1+1`", f(r.directSecond.p50()), f(r.directSecond.max()))
		tableRow(fmt.Sprintf("pool hits: handed-out id was ready before the create / daemon logged a hand-out: %d / %d of %d", r.poolHits, r.poolLogHits, len(r.poolTotal)), "", "")
		tableRow(fmt.Sprintf("pool created → %d ready: %s; golden snapshot files %s (pages %s)", poolSize, fmtMS(ms(r.poolFill)), mibStr(r.goldenFiles.total), mibStr(r.goldenFiles.pages)), "", "")
	}

	if r.dRan {
		tableTitle(fmt.Sprintf("density: %d of %d named pandas sandboxes created and suspended, %d at a time", r.dCreated, densityCount, densityParallel))
		tableHeader("what", "value")
		if r.dBudgetHit {
			tableRow("stopped early", fmt.Sprintf("the %s budget ran out", densityBudget))
		}
		tableRow("wall time: create + cell + suspend of all", fmt.Sprintf("%.1f s", r.dWall.Seconds()))
		tableRow("per sandbox p50 / max: create, cell, suspend (ms)", fmt.Sprintf("%s / %s, %s / %s, %s / %s",
			f(r.dCreate.p50()), f(r.dCreate.max()), f(r.dCell.p50()), f(r.dCell.max()), f(r.dSuspend.p50()), f(r.dSuspend.max())))
		tableRow("MemAvailable: baseline", mibStr(r.availBase))
		tableRow("MemAvailable: lowest while creating (100 ms samples)", mibStr(r.availPeak))
		tableRow("MemAvailable: all suspended (2 s after)", fmt.Sprintf("%s (%s vs the baseline)", mibStr(r.availSusp), signedMiB(r.availSusp-r.availBase)))
		tableRow("MemFree / Cached: baseline → all suspended", fmt.Sprintf("%s → %s / %s → %s", mibStr(r.freeBase), mibStr(r.freeSusp), mibStr(r.cachedBase), mibStr(r.cachedSusp)))
		tableRow("suspend images: count, du, apparent size", fmt.Sprintf("%d, %s, %s", r.dImages, mibStr(r.dImageAlloc), mibStr(r.dImageApparent)))
		tableRow("whole data dir du, all suspended", mibStr(r.dDataAlloc))
		tableRow("daemon RSS: baseline / all suspended / live", fmt.Sprintf("%s / %s / %s", mibStr(r.rssBase), mibStr(r.rssSusp), mibStr(r.rssLive)))
		km := r.dKernelMem
		tableRow("per kernel: `usage.memory_bytes` after the cell, p50 / mean / max (first sandbox)",
			fmt.Sprintf("%s / %s / %s MiB (%s MiB)", f(km.p50()), f(km.mean()), f(km.max()), f(firstOr(km))))
		if km.p50() > 0 {
			tableRow("estimate: live kernels that fit = MemAvailable (all suspended) / per-kernel p50",
				fmt.Sprintf("%.0f", float64(r.availSusp)/(km.p50()*mib)))
		}
		if r.liveN > 0 {
			per := float64(r.availSusp-r.availLive) / float64(r.liveN)
			tableRow(fmt.Sprintf("resumed at once (%d at a time): wall, p50 / max resume", densityParallel),
				fmt.Sprintf("%d in %.1f s, %s / %s", r.liveN, r.liveWall.Seconds(), fmtMS(r.liveResume.p50()), fmtMS(r.liveResume.max())))
			tableRow("  answered `len(df)` = 1000 after resume", fmt.Sprintf("%d of %d", r.liveOK, r.liveN))
			tableRow("  MemAvailable with them live (lowest)", fmt.Sprintf("%s (%s)", mibStr(r.availLive), mibStr(r.availLivePeak)))
			tableRow("  measured host memory per live kernel: MemAvailable drop / N", fmt.Sprintf("%s MiB", f(per/mib)))
			tableRow("  their `usage.memory_bytes` p50 / mean / max", fmt.Sprintf("%s / %s / %s MiB", f(r.liveMem.p50()), f(r.liveMem.mean()), f(r.liveMem.max())))
			if per > 0 {
				tableRow("  measured: live kernels that fit = MemAvailable (all suspended) / measured per kernel",
					fmt.Sprintf("%.0f", float64(r.availSusp)/per))
			}
		}
		tableRow(fmt.Sprintf("delete all %d (%d at a time)", r.dCreated, densityParallel), fmt.Sprintf("%.1f s", r.deleteWall.Seconds()))
		tableRow("after deleting: MemAvailable, snapshots du", fmt.Sprintf("%s, %s", mibStr(r.availEnd), mibStr(r.snapAllocEnd)))
	}
}

// signedMiB formats a byte difference in MiB with its sign.
func signedMiB(v int64) string {
	if v >= 0 {
		return "+" + mibStr(v)
	}
	return "−" + mibStr(-v)
}

// nearVerdict: MemAvailable is back near the baseline when the drop left is
// under 2% of what the images hold on disk (what the sandboxes would hold in
// memory).
func nearVerdict(diff, images int64) string {
	if images <= 0 {
		return "n/a"
	}
	if -diff <= images/50 {
		return "yes"
	}
	return "**no**"
}

func firstOr(v values) float64 {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

func TestLogMsgMS(t *testing.T) {
	log := `time=2026-01-01T00:00:00.000Z level=INFO msg="sandbox suspended" sandbox=sbx_a reason="suspended on request" ms=412
time=2026-01-01T00:00:00.000Z level=INFO msg="sandbox resumed" sandbox=sbx_a ms=180
time=2026-01-01T00:00:00.000Z level=INFO msg="sandbox suspended" sandbox=sbx_b reason="idle timeout" ms=9
time=2026-01-01T00:00:00.000Z level=INFO msg="sandbox handed out from pool" sandbox=sbx_c pool=p name=x
time=2026-01-01T00:00:00.000Z level=INFO msg="sandbox suspended" sandbox=sbx_a reason="suspended on request" ms=388
`
	path := filepath.Join(t.TempDir(), "daemon.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := logMsgMS(path, "sandbox suspended", "sbx_a"); len(got) != 2 || got[0] != 412 || got[1] != 388 {
		t.Errorf("suspended ms = %v, want [412 388]", got)
	}
	if got := logMsgMS(path, "sandbox resumed", "sbx_a"); len(got) != 1 || got[0] != 180 {
		t.Errorf("resumed ms = %v, want [180]", got)
	}
	if got := logMsgSandboxes(path, "sandbox handed out from pool"); len(got) != 1 || got[0] != "sbx_c" {
		t.Errorf("handed out = %v, want [sbx_c]", got)
	}
}
