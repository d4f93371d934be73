package httpapi

import (
	"context"
	"slices"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/tenant"
	"github.com/prometheus/client_golang/prometheus"
)

// tenantCollector exports each tenant's usage and quotas at scrape time.
type tenantCollector struct{ s *Server }

var (
	tenantUsageDesc = prometheus.NewDesc("forkbox_tenant_usage", "What a tenant holds now, by quota (running_sandboxes, memory_mb, cpus, suspended_sandboxes, snapshot_bytes, image_bytes).",
		[]string{"tenant", "quota"}, nil)
	tenantLimitDesc = prometheus.NewDesc("forkbox_tenant_quota", "A tenant's quota limit (absent: unlimited).",
		[]string{"tenant", "quota"}, nil)
)

func (c *tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tenantUsageDesc
	ch <- tenantLimitDesc
}

func (c *tenantCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	names, err := c.s.cfg.Access.Tenants(ctx)
	if err != nil {
		c.s.log.Warn("metrics: list tenants", "err", err)
		return
	}
	if !slices.Contains(names, tenant.Default) {
		names = append(names, tenant.Default)
	}
	for _, n := range names {
		u, err := c.s.mgr.Usage(ctx, n)
		if err != nil {
			c.s.log.Warn("metrics: tenant usage", "tenant", n, "err", err)
			continue
		}
		for _, q := range quotaRows(u) {
			ch <- prometheus.MustNewConstMetric(tenantUsageDesc, prometheus.GaugeValue, q.use, n, string(q.name))
			if q.limit != nil {
				ch <- prometheus.MustNewConstMetric(tenantLimitDesc, prometheus.GaugeValue, *q.limit, n, string(q.name))
			}
		}
	}
}

type quotaRow struct {
	name  api.QuotaName
	use   float64
	limit *float64
}

func quotaRows(u *api.TenantUsage) []quotaRow {
	i := func(p *int64) *float64 {
		if p == nil {
			return nil
		}
		f := float64(*p)
		return &f
	}
	q := u.Quotas
	return []quotaRow{
		{api.QuotaRunningSandboxes, float64(u.RunningSandboxes), i(q.RunningSandboxes)},
		{api.QuotaMemoryMB, float64(u.MemoryMB), i(q.MemoryMB)},
		{api.QuotaCPUs, u.CPUs, q.CPUs},
		{api.QuotaSuspendedSandboxes, float64(u.SuspendedSandboxes), i(q.SuspendedSandboxes)},
		{api.QuotaSnapshotBytes, float64(u.SnapshotBytes), i(q.SnapshotBytes)},
		{api.QuotaImageBytes, float64(u.ImageBytes), i(q.ImageBytes)},
	}
}
