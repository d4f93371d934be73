package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

const (
	createSamples  = 50  // measured creates (and baseline runs)
	createWarmups  = 2   // unmeasured runs before them
	createTargetMS = 100 // target: p50 create → first exec answer
)

// createBreakdown is printed after the create table: where forkbox's create
// time goes, from the client's timings and the daemon's log.
var createBreakdown func()

// BenchmarkCreateToFirstExec measures, 50 times, the time from asking for a
// new sandbox (default image) to the answer of a first exec of `true` in it,
// next to two baselines run in the same process: unshare(1) making the same
// namespaces around /bin/true, and `runc run` of /bin/true from a minimal
// bundle.
func BenchmarkCreateToFirstExec(b *testing.B) {
	createBreakdown = nil
	tableHeader("create → first exec", "system", "n", "p50 ms", "p95 ms", "mean ms", fmt.Sprintf("target p50 ≤ %d ms", createTargetMS))
	b.Run("forkbox", benchCreateForkbox)
	b.Run("unshare", benchCreateUnshare)
	b.Run("runc", benchCreateRunc)
	if createBreakdown != nil {
		createBreakdown()
	}
}

func benchCreateForkbox(b *testing.B) {
	hideNsPerOp(b)
	d := startDaemon(b, true)
	ctx := context.Background()

	createExec := func() (id string, create, first time.Duration, execRes *api.ExecResult) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		t0 := time.Now()
		sb, err := d.client.CreateSandbox(cctx, api.CreateSandboxRequest{})
		t1 := time.Now()
		if err != nil {
			b.Fatalf("create sandbox: %v\ndaemon log:\n%s", err, d.logTail(20))
		}
		res, err := d.execTrue(cctx, sb.ID)
		t2 := time.Now()
		if err != nil {
			b.Fatalf("first exec in %s: %v", sb.ID, err)
		}
		return sb.ID, t1.Sub(t0), t2.Sub(t1), res
	}

	// The very first create pays one-time costs (the disk template, cold
	// page cache); it is reported on its own, not in the samples.
	var cold time.Duration
	for i := range createWarmups {
		id, c, f, _ := createExec()
		if i == 0 {
			cold = c + f
		}
		d.deleteSandbox(b, id)
	}

	var total, creates, firsts, deletes, agentExec samples
	measured := map[string]bool{}
	for range createSamples {
		id, c, f, res := createExec()
		measured[id] = true
		total = append(total, c+f)
		creates = append(creates, c)
		firsts = append(firsts, f)
		agentExec = append(agentExec, time.Duration(res.DurationMS)*time.Millisecond)
		t := time.Now()
		d.deleteSandbox(b, id)
		deletes = append(deletes, time.Since(t))
	}

	total.report(b, "")
	b.ReportMetric(creates.p50(), "create-p50-ms")
	b.ReportMetric(firsts.p50(), "first-exec-p50-ms")
	b.ReportMetric(ms(cold), "cold-ms")
	tableRow("create → first exec", "forkbox", fmt.Sprint(len(total)), f(total.p50()), f(total.p95()), f(total.mean()), verdict(total.p50(), createTargetMS))

	dl, err := parseDaemonLog(d.logPath)
	if err != nil {
		b.Logf("daemon log: %v", err)
	}
	createBreakdown = func() {
		tableHeader("forkbox create → first exec, part", "p50 ms", "p95 ms", "mean ms")
		tableRow("client: POST /v1/sandboxes (create)", f(creates.p50()), f(creates.p95()), f(creates.mean()))
		if dl != nil {
			if h := lastN(dl.httpMS["POST /v1/sandboxes"], createSamples); len(h) > 0 {
				s := values(h)
				tableRow("  daemon: create handler", f(s.p50()), f(s.p95()), f(s.mean()))
			}
			var created []float64
			for id := range measured {
				if v, ok := dl.createdMS[id]; ok {
					created = append(created, v)
				}
			}
			if len(created) > 0 {
				s := values(created)
				tableRow("  daemon: \"sandbox created\" ms (runtime create + store)", f(s.p50()), f(s.p95()), f(s.mean()))
			}
			if steps := stepDeltas(dl, measured); len(steps) > 0 {
				defer func() {
					tableHeader("forkbox runtime create steps (--debug log)", "at p50 ms", "since previous step p50 ms", "p95 ms", "mean ms")
					for _, st := range steps {
						tableRow(st.name, f(st.at.p50()), f(st.delta.p50()), f(st.delta.p95()), f(st.delta.mean()))
					}
				}()
			}
		}
		tableRow("client: first exec of `true`", f(firsts.p50()), f(firsts.p95()), f(firsts.mean()))
		if dl != nil {
			if h := lastN(dl.httpMS["POST /v1/sandboxes/{id}/exec"], createSamples); len(h) > 0 {
				s := values(h)
				tableRow("  daemon: exec handler", f(s.p50()), f(s.p95()), f(s.mean()))
			}
		}
		tableRow("  agent: duration_ms of `true`", f(agentExec.p50()), f(agentExec.p95()), f(agentExec.mean()))
		tableRow("first create + exec after daemon start (cold, not in samples)", f(ms(cold)), "", "")
		tableRow("delete (not timed above)", f(deletes.p50()), f(deletes.p95()), f(deletes.mean()))
	}
}

type stepSamples struct {
	name  string
	at    samples // time since the start of runtime create
	delta samples // time since the previous step of the same sandbox
}

// stepDeltas turns the "sandbox create steps" timings of the measured
// sandboxes (µs since the start of the runtime's create, some taken by the
// daemon, some traced from inside the sandbox) into per-step times. Steps are
// ordered by time within each sandbox; the result lists them by median time.
func stepDeltas(dl *daemonLog, ids map[string]bool) []stepSamples {
	var out []stepSamples
	idx := map[string]int{}
	for id := range ids {
		steps := slices.Clone(dl.steps[id])
		slices.SortStableFunc(steps, func(a, b stepTiming) int { return cmp.Compare(a.us, b.us) })
		prev := 0.0
		for _, st := range steps {
			i, ok := idx[st.name]
			if !ok {
				i = len(out)
				idx[st.name] = i
				out = append(out, stepSamples{name: st.name})
			}
			out[i].at = append(out[i].at, time.Duration(st.us*float64(time.Microsecond)))
			out[i].delta = append(out[i].delta, time.Duration((st.us-prev)*float64(time.Microsecond)))
			prev = st.us
		}
	}
	slices.SortStableFunc(out, func(a, b stepSamples) int { return cmp.Compare(a.at.p50(), b.at.p50()) })
	return out
}

func lastN(vs []float64, n int) []float64 {
	if len(vs) > n {
		return vs[len(vs)-n:]
	}
	return vs
}

// runBaseline times createSamples runs of run after createWarmups unmeasured
// ones, reports them and prints the table row.
func runBaseline(b *testing.B, system string, run func() error) {
	for range createWarmups {
		if err := run(); err != nil {
			b.Fatal(err)
		}
	}
	var s samples
	for range createSamples {
		t := time.Now()
		if err := run(); err != nil {
			b.Fatal(err)
		}
		s = append(s, time.Since(t))
	}
	s.report(b, "")
	tableRow("create → first exec", system, fmt.Sprint(len(s)), f(s.p50()), f(s.p95()), f(s.mean()), "baseline")
}

// benchCreateUnshare: the bare cost of the namespaces, with no filesystem,
// cgroup or agent work: unshare(1) forking /bin/true in new mount, PID, net,
// IPC, UTS and cgroup namespaces.
func benchCreateUnshare(b *testing.B) {
	hideNsPerOp(b)
	requireRoot(b)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		tableRow("create → first exec", "unshare", "skipped: unshare(1) not installed (util-linux)", "", "", "", "")
		skip(b, "baseline skipped: unshare(1) not found (apt package util-linux)")
	}
	runBaseline(b, "unshare (mount,pid,net,ipc,uts,cgroup ns)", func() error {
		out, err := exec.Command(unshare, "--mount", "--pid", "--net", "--ipc", "--uts", "--cgroup", "--fork", "/bin/true").CombinedOutput()
		if err != nil {
			return fmt.Errorf("unshare: %v: %s", err, out)
		}
		return nil
	})
}

// benchCreateRunc: a full OCI runtime starting /bin/true from a minimal bundle
// (read-only rootfs holding /bin/true and its libraries; new PID, net, IPC,
// UTS, mount and cgroup namespaces; runc's default mounts and cgroup).
func benchCreateRunc(b *testing.B) {
	hideNsPerOp(b)
	requireRoot(b)
	runc, err := exec.LookPath("runc")
	if err != nil {
		tableRow("create → first exec", "runc", "skipped: runc not installed (apt package runc; `make setup` installs it)", "", "", "", "")
		skip(b, "baseline skipped: runc not found (apt package runc; `make setup` installs it)")
	}
	bundle := makeRuncBundle(b, runc)
	state := b.TempDir()
	n := 0
	runBaseline(b, "runc run (minimal bundle)", func() error {
		n++
		cmd := exec.Command(runc, "--root", state, "run", "--bundle", bundle, fmt.Sprintf("forkbox-bench-%d-%d", os.Getpid(), n))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("runc run: %v: %s", err, out)
		}
		return nil
	})
}

// makeRuncBundle makes an OCI bundle whose rootfs holds only /bin/true and
// the shared libraries ldd lists for it, with a config.json from `runc spec`
// adjusted to run /bin/true without a terminal on a read-only root.
func makeRuncBundle(b *testing.B, runc string) string {
	b.Helper()
	bundle := b.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	trueBin, err := filepath.EvalSymlinks("/bin/true")
	if err != nil {
		b.Fatal(err)
	}
	files := []string{trueBin}
	out, err := exec.Command("ldd", trueBin).Output()
	if err != nil {
		b.Fatalf("ldd %s: %v", trueBin, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if _, after, ok := strings.Cut(line, "=>"); ok {
			line = strings.TrimSpace(after)
		}
		if p, _, _ := strings.Cut(line, " "); strings.HasPrefix(p, "/") {
			files = append(files, p)
		}
	}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		dst := filepath.Join(rootfs, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if trueBin != "/bin/true" { // usrmerge: /bin/true is /usr/bin/true
		if err := os.Symlink(strings.TrimPrefix(filepath.Dir(trueBin), "/"), filepath.Join(rootfs, "bin")); err != nil {
			b.Fatal(err)
		}
	}
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}

	if out, err := exec.Command(runc, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		b.Fatalf("runc spec: %v: %s", err, out)
	}
	cfgPath := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		b.Fatal(err)
	}
	proc, _ := cfg["process"].(map[string]any)
	linux, _ := cfg["linux"].(map[string]any)
	if proc == nil || linux == nil {
		b.Fatalf("runc spec: unexpected config.json:\n%s", data)
	}
	proc["terminal"] = false
	proc["args"] = []string{"/bin/true"}
	cfg["root"] = map[string]any{"path": "rootfs", "readonly": true}
	// Fresh namespaces of the same kinds forkbox uses; none joins an
	// existing one (no "path"), so the network namespace is a new, empty one.
	nss := []map[string]any{}
	for _, t := range []string{"pid", "network", "ipc", "uts", "mount", "cgroup"} {
		nss = append(nss, map[string]any{"type": t})
	}
	linux["namespaces"] = nss
	data, err = json.MarshalIndent(cfg, "", "\t")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return bundle
}
