package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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
	waitReady := func(d *daemon) {
		deadline := time.Now().Add(2 * time.Minute)
		for runningSandboxes(b, d) < 2 {
			if time.Now().After(deadline) {
				b.Fatalf("the default pool never filled; log:\n%s", d.logTail(30))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	measure := func(d *daemon) time.Duration {
		t0 := time.Now()
		sb, err := d.client.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "user"})
		if err != nil {
			b.Fatalf("create: %v\n%s", err, d.logTail(20))
		}
		ex, err := d.client.RunCode(ctx, sb.ID, api.RunCodeRequest{Code: "1+1"})
		took := time.Since(t0)
		if err != nil || ex.Error != nil || ex.ExecutionCount != 1 {
			b.Fatalf("first cell: %v %+v", err, ex)
		}
		d.deleteSandbox(b, sb.ID)
		return took
	}
	const n = 20
	var withPool, without samples
	waitReady(pooled)
	measure(pooled) // warm-up
	measure(cold)
	for range n {
		waitReady(pooled)
		time.Sleep(300 * time.Millisecond) // the refill's kernel warm-up settles
		withPool = append(withPool, measure(pooled))
		without = append(without, measure(cold))
	}
	waitReady(pooled)
	time.Sleep(300 * time.Millisecond)
	var burst samples
	done := make(chan time.Duration, 4)
	for range 4 {
		go func() { done <- measure(pooled) }()
	}
	for range 4 {
		burst = append(burst, <-done)
	}
	loadEnd := loadAvg()
	tableHeader("create → first `1+1` answer", "daemon", "n", "p50 ms", "p95 ms", "mean ms", fmt.Sprintf("target p50 ≤ %d ms", firstAnswerTargetMS))
	tableRow("default pool of 2 (refilled between creates)", fmt.Sprint(n), f(withPool.p50()), f(withPool.p95()), f(withPool.mean()), verdict(withPool.p50(), firstAnswerTargetMS))
	tableRow("no pool (kernel starts on the first cell)", fmt.Sprint(n), f(without.p50()), f(without.p95()), f(without.mean()), "baseline")
	tableRow("default pool of 2, burst of 4 at once", "4", f(burst.p50()), f(burst.p95()), f(burst.mean()), "")
	fmt.Printf("load average before %s, after %s\n", loadStart, loadEnd)
	withPool.report(b, "pool-")
	without.report(b, "cold-")
	burst.report(b, "burst-")
}

// runningSandboxes reads forkbox_sandboxes_running (ready pool members
// included) from d's /metrics.
func runningSandboxes(b *testing.B, d *daemon) int {
	resp, err := http.Get(d.url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "forkbox_sandboxes_running "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return -1
}
