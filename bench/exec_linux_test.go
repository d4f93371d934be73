package bench

import (
	"context"
	"fmt"
	"os/exec"
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
// 10 warm-ups): the JSON answer path, then the streaming (SSE) path. Two
// rows without a target help read them: the same path with no process
// started, and the host's own cost of starting /usr/bin/true.
func BenchmarkExecRoundTrip(b *testing.B) {
	d := startDaemon(b, false)
	sb := d.createSandbox(b)
	tableHeader("exec round trip of `true`", "path", "n", "p50 ms", "p95 ms", "mean ms", "agent duration_ms p50", fmt.Sprintf("target p50 ≤ %d ms", execTargetMS))

	b.Run("json", func(b *testing.B) {
		benchExec(b, "forkbox exec (JSON)", execTargetMS, func(ctx context.Context) (*api.ExecResult, error) {
			return d.execTrue(ctx, sb.ID)
		})
	})
	b.Run("sse", func(b *testing.B) {
		benchExec(b, "forkbox exec (SSE stream)", execTargetMS, func(ctx context.Context) (*api.ExecResult, error) {
			res, err := d.client.ExecStream(ctx, sb.ID, api.ExecRequest{Cmd: "true"}, nil, nil)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("`true` exited %d: %s", res.ExitCode, res.Error)
			}
			return res, err
		})
	})
	// Diagnostic: a command that does not exist fails in the agent before
	// any process is started, so this is the exec path's own cost (client →
	// daemon → agent and back) without the spawn.
	b.Run("no-spawn", func(b *testing.B) {
		benchExec(b, "diagnostic: forkbox exec of a missing command (nothing spawned)", 0, func(ctx context.Context) (*api.ExecResult, error) {
			res, err := d.client.Exec(ctx, sb.ID, api.ExecRequest{Cmd: "/forkbox-bench-no-such-command"})
			if err == nil && res.ExitCode == 0 {
				err = fmt.Errorf("exec of a missing command exited 0")
			}
			return res, err
		})
	})
	// Baseline: what starting and waiting for /usr/bin/true costs on this
	// host with no sandbox, daemon or HTTP in the way (Go's os/exec, as the
	// agent uses).
	b.Run("host-spawn", func(b *testing.B) {
		benchExec(b, "baseline: host os/exec of /usr/bin/true (no sandbox)", 0, func(context.Context) (*api.ExecResult, error) {
			return nil, exec.Command("/usr/bin/true").Run()
		})
	})
	d.deleteSandbox(b, sb.ID)
}

// benchExec times execSamples calls of exec after execWarmups, reports them
// and prints a table row; targetMS 0 means the row has no target. exec may
// return a nil result (no agent duration to report).
func benchExec(b *testing.B, label string, targetMS float64, exec func(context.Context) (*api.ExecResult, error)) {
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
		if res != nil {
			agent = append(agent, time.Duration(res.DurationMS)*time.Millisecond)
		}
	}
	rt.report(b, "")
	if len(agent) > 0 {
		b.ReportMetric(agent.p50(), "agent-duration-p50-ms")
	}
	target := "–"
	if targetMS > 0 {
		target = verdict(rt.p50(), targetMS)
	}
	tableRow("exec round trip", label, fmt.Sprint(len(rt)), f(rt.p50()), f(rt.p95()), f(rt.mean()), f(agent.p50()), target)
}
