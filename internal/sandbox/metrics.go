package sandbox

import (
	"context"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Manager's Prometheus collectors. Register them with
// Register; per-sandbox usage is read from cgroups at scrape time.
type Metrics struct {
	createSeconds  prometheus.Histogram
	createFailures prometheus.Counter
	// defaultPoolHits: creates served by the default pool.
	defaultPoolHits prometheus.Counter
	execSeconds     prometheus.Histogram
	codeSeconds     prometheus.Histogram
	terminated      *prometheus.CounterVec
	snapshots       *prometheus.CounterVec
	restores        *prometheus.CounterVec
}

func newMetrics() *Metrics {
	return &Metrics{
		createSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "forkbox_sandbox_create_seconds", Help: "Time to create a sandbox until its agent answers.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		createFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forkbox_sandbox_create_failures_total", Help: "Sandbox creates that failed after validation.",
		}),
		defaultPoolHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forkbox_default_pool_hits_total", Help: "Sandbox creates handed a ready sandbox of the default pool.",
		}),
		execSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "forkbox_exec_seconds", Help: "Duration of exec calls.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		codeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "forkbox_code_seconds", Help: "Duration of run_code calls.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forkbox_snapshots_total", Help: "Checkpoints attempted, by type.",
		}, []string{"type"}),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forkbox_memory_restores_total",
			Help: "Sandboxes restored from memory images (from a snapshot, forked, resumed), by how their memory came back: lazy (copied in while they start) or eager.",
		}, []string{"fill"}),
		terminated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forkbox_sandbox_terminations_total", Help: "Sandboxes terminated, by reason.",
		}, []string{"reason"}),
	}
}

// Register adds the Manager's metrics, including live per-sandbox gauges, to reg.
func (m *Manager) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.metrics.createSeconds, m.metrics.createFailures, m.metrics.defaultPoolHits, m.metrics.execSeconds, m.metrics.codeSeconds, m.metrics.terminated, m.metrics.snapshots, m.metrics.restores, (*usageCollector)(m)} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

type usageCollector Manager

var (
	descLive   = prometheus.NewDesc("forkbox_sandboxes_running", "Sandboxes running on this daemon.", nil, nil)
	descPool   = prometheus.NewDesc("forkbox_default_pool_ready", "Ready sandboxes in the default pool (kernel started, not handed out).", nil, nil)
	descStates = prometheus.NewDesc("forkbox_sandboxes", "Sandboxes by state (terminated ones excluded).", []string{"state"}, nil)
	descTime   = prometheus.NewDesc("forkbox_sandbox_state_seconds", "Time a live sandbox has spent running or suspended.", []string{"sandbox", "name", "state"}, nil)
	descCPU    = prometheus.NewDesc("forkbox_sandbox_cpu_seconds_total", "CPU time used by a sandbox.", []string{"sandbox", "name"}, nil)
	descMem    = prometheus.NewDesc("forkbox_sandbox_memory_bytes", "Memory in use by a sandbox.", []string{"sandbox", "name"}, nil)
	descMemMax = prometheus.NewDesc("forkbox_sandbox_memory_peak_bytes", "Peak memory of a sandbox.", []string{"sandbox", "name"}, nil)
	descPIDs   = prometheus.NewDesc("forkbox_sandbox_pids", "Processes in a sandbox.", []string{"sandbox", "name"}, nil)
	descDisk   = prometheus.NewDesc("forkbox_sandbox_disk_used_bytes", "Bytes used on a sandbox's writable layer.", []string{"sandbox", "name"}, nil)
)

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLive, descPool, descStates, descTime, descCPU, descMem, descMemMax, descPIDs, descDisk} {
		ch <- d
	}
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	m := (*Manager)(c)
	m.mu.Lock()
	ls := make([]*live, 0, len(m.live))
	for _, l := range m.live {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(len(ls)))
	ready := 0
	if p := m.defaultPool(); p != nil {
		p.mu.Lock()
		ready = len(p.ready)
		p.mu.Unlock()
	}
	ch <- prometheus.MustNewConstMetric(descPool, prometheus.GaugeValue, float64(ready))
	if all, err := m.store.List(context.Background(), store.ListFilter{Node: m.node}); err == nil {
		counts := map[api.SandboxState]int{}
		for _, sb := range all {
			if sb.State == api.StateTerminated {
				continue
			}
			counts[sb.State]++
			running, suspended := m.stateTimes(sb)
			ch <- prometheus.MustNewConstMetric(descTime, prometheus.CounterValue, running, sb.ID, sb.Name, string(api.StateRunning))
			ch <- prometheus.MustNewConstMetric(descTime, prometheus.CounterValue, suspended, sb.ID, sb.Name, string(api.StateSuspended))
		}
		for _, st := range api.SandboxStates {
			if st == api.StateTerminated {
				continue
			}
			ch <- prometheus.MustNewConstMetric(descStates, prometheus.GaugeValue, float64(counts[st]), string(st))
		}
	}
	for _, l := range ls {
		u := m.rt.Usage(l.id)
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, u.CPUSeconds, l.id, l.name)
		ch <- prometheus.MustNewConstMetric(descMem, prometheus.GaugeValue, float64(u.MemoryBytes), l.id, l.name)
		ch <- prometheus.MustNewConstMetric(descMemMax, prometheus.GaugeValue, float64(u.MemoryPeakBytes), l.id, l.name)
		ch <- prometheus.MustNewConstMetric(descPIDs, prometheus.GaugeValue, float64(u.PIDs), l.id, l.name)
		ch <- prometheus.MustNewConstMetric(descDisk, prometheus.GaugeValue, float64(u.DiskUsedBytes), l.id, l.name)
	}
}
