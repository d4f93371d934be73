package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

const (
	idleSandboxes = 50
	idleParallel  = 4
	idleWait      = 2 * time.Second
	idleTargetMB  = 10 // target: mean memory per idle sandbox
)

const mib = 1 << 20

// idleDiskMB is the disk each idle sandbox asks for.
var idleDiskMB int64 = 256

// BenchmarkIdleSandboxMemory creates 50 sandboxes (4 at a time), lets them
// sit idle for 2 s, and measures what each costs: its cgroup's memory (the
// agent and whatever the kernel charges to it, from usage.memory_bytes) plus
// its share of the daemon's RSS growth (bookkeeping).
func BenchmarkIdleSandboxMemory(b *testing.B) {
	hideNsPerOp(b)
	d := startDaemon(b, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	// One create/delete first, so one-time costs (the disk template, the
	// image, lazily made daemon state) are not counted per sandbox.
	d.deleteSandbox(b, d.createSandbox(b).ID)
	time.Sleep(500 * time.Millisecond)
	rssBefore, err := d.rssBytes()
	if err != nil {
		b.Fatal(err)
	}
	availBefore, err := memAvailableBytes()
	if err != nil {
		b.Fatal(err)
	}

	ids := make([]string, idleSandboxes)
	errs := make([]error, idleSandboxes)
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range idleParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				// A small disk: 50 of the default 2 GiB do not fit the
				// daemon's disk admission on a VM with ~70 GB free, and
				// idle sandboxes write nothing.
				sb, err := d.client.CreateSandbox(ctx, api.CreateSandboxRequest{DiskMB: &idleDiskMB})
				if err != nil {
					errs[i] = err
					continue
				}
				ids[i] = sb.ID
			}
		}()
	}
	for i := range idleSandboxes {
		next <- i
	}
	close(next)
	wg.Wait()
	createWall := time.Since(start)
	for i, err := range errs {
		if err != nil {
			b.Fatalf("create sandbox %d of %d: %v\ndaemon log:\n%s", i+1, idleSandboxes, err, d.logTail(20))
		}
	}

	time.Sleep(idleWait)

	var cg values // MiB
	var pids int64
	for _, id := range ids {
		sb, err := d.client.GetSandbox(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if sb.State != api.StateRunning {
			b.Fatalf("sandbox %s is %s (%s), want running", id, sb.State, sb.StateReason)
		}
		if sb.Usage == nil {
			b.Fatalf("sandbox %s: no usage in GET answer", id)
		}
		cg = append(cg, float64(sb.Usage.MemoryBytes)/mib)
		pids += sb.Usage.PIDs
	}
	rssAfter, err := d.rssBytes()
	if err != nil {
		b.Fatal(err)
	}
	availAfter, err := memAvailableBytes()
	if err != nil {
		b.Fatal(err)
	}

	cgMean, cgP95, cgMax := cg.mean(), cg.percentile(95), cg.max()
	rssPer := float64(rssAfter-rssBefore) / idleSandboxes / mib
	perSandbox := cgMean + rssPer
	hostPer := float64(availBefore-availAfter) / idleSandboxes / mib

	b.ReportMetric(perSandbox, "per-sandbox-MiB")
	b.ReportMetric(cgMean, "cgroup-mean-MiB")
	b.ReportMetric(rssPer, "daemon-rss-per-sandbox-MiB")
	b.ReportMetric(hostPer, "host-memavail-per-sandbox-MiB")
	b.ReportMetric(createWall.Seconds(), "create-50-s")

	tableHeader("idle memory, 50 sandboxes", "value", fmt.Sprintf("target ≤ %d MiB", idleTargetMB))
	tableRow("per sandbox: cgroup mean + daemon RSS growth / 50", fmt.Sprintf("%s MiB", f(perSandbox)), verdict(perSandbox, idleTargetMB))
	tableRow("  cgroup memory (usage.memory_bytes) mean / p95 / max", fmt.Sprintf("%s / %s / %s MiB", f(cgMean), f(cgP95), f(cgMax)), "")
	tableRow("  daemon RSS growth / 50", fmt.Sprintf("%s MiB (%s → %s MiB)", f(rssPer), f(float64(rssBefore)/mib), f(float64(rssAfter)/mib)), "")
	tableRow("  tasks (threads) per sandbox (usage.pids)", f(float64(pids)/idleSandboxes), "")
	tableRow("host MemAvailable drop / 50 (all costs incl. page cache, kernel; noisy)", fmt.Sprintf("%s MiB", f(hostPer)), "")
	tableRow(fmt.Sprintf("wall time to create %d (%d in parallel)", idleSandboxes, idleParallel), fmt.Sprintf("%.2f s (%s ms per sandbox)", createWall.Seconds(), f(ms(createWall)/idleSandboxes)), "")

	start = time.Now()
	for _, id := range ids {
		d.deleteSandbox(b, id)
	}
	tableRow(fmt.Sprintf("wall time to delete %d (sequential)", idleSandboxes), fmt.Sprintf("%.2f s", time.Since(start).Seconds()), "")
}
