package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkE2BCompat measures what the E2B layer costs per call: the same
// calls through E2B's own SDK (npm @e2b/code-interpreter, as the e2e test
// pins it) and through forkbox's TypeScript SDK, against one daemon,
// interleaved (test/e2bcompat/bench.mjs). FORKBOX_BENCH_E2B_ROUNDS sets the
// per-call rounds (default 200), FORKBOX_BENCH_E2B_CREATES the
// create → first cell → kill rounds (default 5).
func BenchmarkE2BCompat(b *testing.B) {
	dir, err := filepath.Abs("../test/e2bcompat")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@e2b", "code-interpreter")); err != nil {
		skip(b, "E2B's SDK is not installed: run `make setup` (npm ci in test/e2bcompat)")
	}
	if _, err := os.Stat("../sdk/js/dist/index.js"); err != nil {
		skip(b, "forkbox's TypeScript SDK is not built (sdk/js/dist)")
	}
	d := startDaemon(b, false)
	rounds, creates := envInt("FORKBOX_BENCH_E2B_ROUNDS", 200), envInt("FORKBOX_BENCH_E2B_CREATES", 5)
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("node", "bench.mjs", strconv.Itoa(rounds), strconv.Itoa(creates))
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "E2B_API_URL="+d.url, "E2B_SANDBOX_URL="+d.url, "E2B_API_KEY=e2b_0000",
			"FORKBOX_URL="+d.url, "FORKBOX_API_KEY=")
		out, err := cmd.Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			b.Fatalf("bench.mjs: %v\n%s\n%s\ndaemon log:\n%s", err, out, stderr, d.logTail(40))
		}
		var res map[string]map[string]struct {
			N        int
			P50, P95 float64
		}
		line := strings.TrimSpace(string(out))
		if i := strings.LastIndexByte(line, '\n'); i >= 0 {
			line = line[i+1:]
		}
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			b.Fatalf("bench.mjs output: %v\n%s", err, out)
		}
		ops := make([]string, 0, len(res))
		for op := range res {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		fmt.Printf("%-15s %6s %10s %10s %10s %10s %8s\n", "call", "n", "e2b p50", "fb p50", "e2b p95", "fb p95", "Δp50")
		for _, op := range ops {
			e, f := res[op]["e2b"], res[op]["forkbox"]
			fmt.Printf("%-15s %6d %9.2fms %9.2fms %9.2fms %9.2fms %+7.2fms\n", op, e.N, e.P50, f.P50, e.P95, f.P95, e.P50-f.P50)
			b.ReportMetric(e.P50, op+"-e2b-p50-ms")
			b.ReportMetric(f.P50, op+"-fb-p50-ms")
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
