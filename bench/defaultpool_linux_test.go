package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

// firstAnswerTargetMS is the target p50 of create → first `1+1` answer.
const firstAnswerTargetMS = 60

// BenchmarkDefaultPool: create → first `1+1` answer (execution_count 1) on
// a daemon with the default pool (2 ready sandboxes with a started Python
// kernel) and on one without it, alternating, the pool refilled before each
// create (a steady trickle of users); then a burst of 4 creates back to back
// on the pooled daemon, where the pool's 2 are handed out and the rest are
// created cold.
func BenchmarkDefaultPool(b *testing.B) {
	hideNsPerOp(b)
	loadStart := loadAvg()
	pooled := startDaemonWith(b, daemonOpts{args: []string{"--default-pool=2"}})
	cold := startDaemon(b, false)
	ctx := context.Background()
	var memMiB values // a handed-out sandbox's memory before its first cell
	var memMu sync.Mutex
	// measure times one create → first answer; it runs on goroutines too
	// (the burst), so it reports failures rather than ending the benchmark.
	measure := func(d *daemon, name string) (time.Duration, error) {
		t0 := time.Now()
		sb, err := d.client.CreateSandbox(ctx, api.CreateSandboxRequest{Name: name})
		if err != nil {
			return 0, fmt.Errorf("create: %w\n%s", err, d.logTail(20))
		}
		if d == pooled && sb.Usage != nil {
			memMu.Lock()
			memMiB = append(memMiB, float64(sb.Usage.MemoryBytes)/(1<<20))
			memMu.Unlock()
		}
		ex, err := d.client.RunCode(ctx, sb.ID, api.RunCodeRequest{Code: "1+1"})
		took := time.Since(t0)
		if err != nil || ex.Error != nil || ex.ExecutionCount != 1 {
			return 0, fmt.Errorf("first cell: %v %+v", err, ex)
		}
		if _, err := d.client.DeleteSandbox(ctx, sb.ID); err != nil {
			return 0, err
		}
		return took, nil
	}
	must := func(took time.Duration, err error) time.Duration {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
		return took
	}
	const n = 20
	var withPool, without samples
	waitDefaultPool(b, pooled, 2)
	must(measure(pooled, "user")) // warm-up
	must(measure(cold, "user"))
	for range n {
		waitDefaultPool(b, pooled, 2)
		withPool = append(withPool, must(measure(pooled, "user")))
		without = append(without, must(measure(cold, "user")))
	}
	waitDefaultPool(b, pooled, 2)
	var burst samples
	measureAt := len(memMiB)
	type result struct {
		took time.Duration
		err  error
	}
	done := make(chan result, 4)
	for i := range 4 {
		go func() {
			took, err := measure(pooled, fmt.Sprintf("burst-%d", i))
			done <- result{took, err}
		}()
	}
	for range 4 {
		r := <-done
		burst = append(burst, must(r.took, r.err))
	}
	memMiB = memMiB[:measureAt]
	loadEnd := loadAvg()
	tableHeader("create → first `1+1` answer", "daemon", "n", "p50 ms", "p95 ms", "mean ms", fmt.Sprintf("target p50 ≤ %d ms", firstAnswerTargetMS))
	tableRow("default pool of 2 (refilled between creates)", fmt.Sprint(n), f(withPool.p50()), f(withPool.p95()), f(withPool.mean()), verdict(withPool.p50(), firstAnswerTargetMS))
	tableRow("no pool (kernel starts on the first cell)", fmt.Sprint(n), f(without.p50()), f(without.p95()), f(without.mean()), "baseline")
	tableRow("default pool of 2, burst of 4 at once", "4", f(burst.p50()), f(burst.p95()), f(burst.mean()), "")
	fmt.Printf("memory of a handed-out sandbox before its first cell (its kernel started): p50 %s MiB\n", f(memMiB.p50()))
	fmt.Printf("load average before %s, after %s\n", loadStart, loadEnd)
	withPool.report(b, "pool-")
	without.report(b, "cold-")
	burst.report(b, "burst-")
}

// waitDefaultPool waits until d's default pool has n ready sandboxes (their
// kernels started), then 0.3 s more for the refill's work to settle.
func waitDefaultPool(b *testing.B, d *daemon, n int) {
	b.Helper()
	for deadline := time.Now().Add(2 * time.Minute); defaultPoolReady(b, d) < n; {
		if time.Now().After(deadline) {
			b.Fatalf("the default pool never had %d ready; log:\n%s", n, d.logTail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
}

// defaultPoolReady reads forkbox_default_pool_ready from d's /metrics.
func defaultPoolReady(b *testing.B, d *daemon) int {
	resp, err := http.Get(d.url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "forkbox_default_pool_ready "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return -1
}
