package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

// BenchmarkImageBuild builds the default image (images/python.yaml) into a
// fresh images directory: cold (debootstrap from the host's mirror, then apt
// in a build sandbox) and again with every layer cached.
func BenchmarkImageBuild(b *testing.B) {
	hideNsPerOp(b)
	bin := forkboxBinary(b)
	dir, err := os.MkdirTemp("", "forkbox-bench-image-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	prepare := func() (time.Duration, string) {
		t0 := time.Now()
		cmd := exec.Command(bin, "prepare", "--data-dir", filepath.Join(dir, "data"), "--images-dir", filepath.Join(dir, "images"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("prepare: %v\n%s", err, out)
		}
		return time.Since(t0), string(out)
	}
	cold, _ := prepare()
	var cached samples
	var log string
	for range 5 {
		d, out := prepare()
		cached = append(cached, d)
		log = out
	}
	if strings.Count(log, "CACHED") < 2 {
		b.Fatalf("the cached build was not cached:\n%s", log)
	}
	du, _ := exec.Command("du", "-sm", filepath.Join(dir, "images")).Output()
	tableHeader("default image build (`forkbox prepare`)", "run", "time", "images dir")
	tableRow("cold (debootstrap + apt)", fmt.Sprintf("%.1f s", cold.Seconds()), strings.Fields(string(du) + " ?")[0]+" MiB")
	tableRow("cached, p50 of 5", f(cached.p50())+" ms", "")
	b.ReportMetric(cold.Seconds(), "cold-s")
	b.ReportMetric(cached.p50(), "cached-p50-ms")
}

// BenchmarkImageCreateFirstAnswer compares, on one daemon and alternating,
// create → first exec answer and create → first code answer on the built
// python image and on the host-derived image of the foundation issue.
func BenchmarkImageCreateFirstAnswer(b *testing.B) {
	hideNsPerOp(b)
	d := startDaemon(b, false)
	ctx := context.Background()
	const n = 20
	type result struct{ exec, code samples }
	res := map[string]*result{"python": {}, "host": {}}
	measure := func(img string, withCode bool) {
		t0 := time.Now()
		sb, err := d.client.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img})
		if err != nil {
			b.Fatalf("create on %s: %v\n%s", img, err, d.logTail(20))
		}
		defer d.deleteSandbox(b, sb.ID)
		if withCode {
			ex, err := d.client.RunCode(ctx, sb.ID, api.RunCodeRequest{Code: "1+1"})
			if err != nil || ex.Error != nil {
				b.Fatalf("code on %s: %v %+v", img, err, ex)
			}
			res[img].code = append(res[img].code, time.Since(t0))
			return
		}
		if _, err := d.execTrue(ctx, sb.ID); err != nil {
			b.Fatalf("exec on %s: %v", img, err)
		}
		res[img].exec = append(res[img].exec, time.Since(t0))
	}
	for _, img := range []string{"python", "host"} { // warm-up
		measure(img, false)
		measure(img, true)
	}
	res["python"], res["host"] = &result{}, &result{}
	for range n {
		for _, img := range []string{"python", "host"} {
			measure(img, false)
			measure(img, true)
		}
	}
	tableHeader("create → first answer by image", "image", "n", "exec p50 ms", "exec p95 ms", "code `1+1` p50 ms", "code p95 ms")
	for _, img := range []string{"python", "host"} {
		r := res[img]
		tableRow(img, fmt.Sprint(n), f(r.exec.p50()), f(r.exec.p95()), f(r.code.p50()), f(r.code.p95()))
		r.exec.report(b, img+"-exec-")
		r.code.report(b, img+"-code-")
	}
}
