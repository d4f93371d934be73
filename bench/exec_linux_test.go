package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

const (
	execSamples  = 200
	execWarmups  = 10
	execTargetMS = 5 // target: p50 exec round trip
)

// BenchmarkExecRoundTrip measures 200 execs of `true` in one sandbox (after
// 10 warm-ups): the JSON answer path, then the streaming (SSE) path.
func BenchmarkExecRoundTrip(b *testing.B) {
	d := startDaemon(b, false)
	sb := d.createSandbox(b)
	tableHeader("exec round trip of `true`", "path", "n", "p50 ms", "p95 ms", "mean ms", "agent duration_ms p50", fmt.Sprintf("target p50 ≤ %d ms", execTargetMS))

	b.Run("json", func(b *testing.B) {
		benchExec(b, "forkbox exec (JSON)", func(ctx context.Context) (*api.ExecResult, error) {
			return d.execTrue(ctx, sb.ID)
		})
	})
	b.Run("sse", func(b *testing.B) {
		benchExec(b, "forkbox exec (SSE stream)", func(ctx context.Context) (*api.ExecResult, error) {
			res, err := d.client.ExecStream(ctx, sb.ID, api.ExecRequest{Cmd: "true"}, nil, nil)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("`true` exited %d: %s", res.ExitCode, res.Error)
			}
			return res, err
		})
	})
	d.deleteSandbox(b, sb.ID)
}

func benchExec(b *testing.B, label string, exec func(context.Context) (*api.ExecResult, error)) {
	hideNsPerOp(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for range execWarmups {
		if _, err := exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var rt, agent samples
	for range execSamples {
		t := time.Now()
		res, err := exec(ctx)
		d := time.Since(t)
		if err != nil {
			b.Fatal(err)
		}
		rt = append(rt, d)
		agent = append(agent, time.Duration(res.DurationMS)*time.Millisecond)
	}
	rt.report(b, "")
	b.ReportMetric(agent.p50(), "agent-duration-p50-ms")
	tableRow("exec round trip", label, fmt.Sprint(len(rt)), f(rt.p50()), f(rt.p95()), f(rt.mean()), f(agent.p50()), verdict(rt.p50(), execTargetMS))
}
