package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// metricValue reads one unlabelled metric from d's /metrics (-1: absent).
func metricValue(t *testing.T, d *daemon, key, name string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+d.addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %q", name, v)
			}
			return f
		}
	}
	return -1
}

// waitPool waits until d's default pool has n ready sandboxes and d runs
// running sandboxes in all (ready ones included).
func waitPool(t *testing.T, d *daemon, key string, n, running int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for metricValue(t, d, key, "forkbox_default_pool_ready") != float64(n) || metricValue(t, d, key, "forkbox_sandboxes_running") != float64(running) {
		if time.Now().After(deadline) {
			t.Fatalf("the default pool never had %d ready of %d running (now %v of %v); log:\n%s", n, running,
				metricValue(t, d, key, "forkbox_default_pool_ready"), metricValue(t, d, key, "forkbox_sandboxes_running"), d.logTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kernelState is what a cell can see of a fresh kernel: its user-visible
// names, its input history, its cwd and environment markers.
const kernelState = `import os, json
json.dumps({"names": sorted(k for k in globals() if not k.startswith("_") and k not in ("In", "Out", "exit", "quit", "get_ipython", "os", "json")),
 "history": len(In), "cwd": os.getcwd(), "prestart": os.environ.get("FORKBOX_PRESTART"), "warmup": os.environ.get("FORKBOX_POOL_WARMUP")})`

// TestDefaultPool: a daemon with a default pool of 2 hands its ready
// sandboxes (Python kernel started) to plain creates; each is
// indistinguishable from a new one — its creation time, name, hostname,
// labels, timeouts, empty history and context list, execution_count 1,
// kernel state, an empty /workspace — while ready members are invisible.
// Requests a member could not have come from (env, other resources,
// another tenant) are created as always; pool labels are refused in
// requests; a name in use gives the member back; the pool refills, and a
// restarted daemon adopts its members instead of starting new ones.
func TestDefaultPool(t *testing.T) {
	needRoot(t)
	const admin = "pool-admin-s3cret"
	d, err := startDaemon(filepath.Join(t.TempDir(), "data"), []string{"FORKBOX_API_KEY=" + admin})
	if err != nil {
		t.Fatal(err)
	}
	d.args = append(d.args, "--default-pool=2")
	d.stop()
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Ready members are not listed (deleteAll misses them) and stay
		// running over a stop (--on-exit=keep): a start with the pool
		// off ends them.
		d.deleteAll()
		d.stop()
		d.args = []string{"--default-pool=0"}
		if d.start() == nil {
			d.stop()
		}
	})
	ctx := ctxT(t)
	hits := func() float64 { return metricValue(t, d, admin, "forkbox_default_pool_hits_total") }
	waitPool(t, d, admin, 2, 2)

	// Ready members are nobody's yet: not listed.
	if list, err := d.c.ListSandboxes(ctx, client.ListOptions{}); err != nil || len(list.Sandboxes) != 0 {
		t.Fatalf("list with only ready pool members: %+v, %v", list, err)
	}

	// A plain create with a name, labels and timeouts is served by the
	// pool, and is the request's new sandbox in every field.
	before := time.Now().UTC()
	sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "alpha", Labels: map[string]string{"team": "data"},
		TimeoutSecs: i64(120), MaxLifetimeSecs: i64(3600), SuspendOnIdle: true})
	if hits() != 1 {
		t.Fatalf("the create was not served by the default pool (hits %v); log:\n%s", hits(), d.logTail())
	}
	fresh := newSandbox(t, shared, api.CreateSandboxRequest{Name: "alpha-fresh", Labels: map[string]string{"team": "data"},
		TimeoutSecs: i64(120), MaxLifetimeSecs: i64(3600), SuspendOnIdle: true})
	if sb.CreatedAt.Before(before.Add(-time.Second)) || sb.Name != "alpha" || !strings.HasPrefix(sb.ID, "sbx_") {
		t.Fatalf("pool sandbox: created %v (request at %v), name %q, id %q", sb.CreatedAt, before, sb.Name, sb.ID)
	}
	same := func(field string, a, b any) {
		t.Helper()
		if a != b {
			t.Errorf("%s: pool sandbox %v, new sandbox %v", field, a, b)
		}
	}
	same("state", sb.State, fresh.State)
	same("image", sb.Image, fresh.Image)
	same("snapshot_id", sb.SnapshotID, fresh.SnapshotID)
	same("cpus", sb.CPUs, fresh.CPUs)
	same("memory_mb", sb.MemoryMB, fresh.MemoryMB)
	same("disk_mb", sb.DiskMB, fresh.DiskMB)
	same("pids_limit", sb.PIDsLimit, fresh.PIDsLimit)
	same("timeout_secs", sb.TimeoutSecs, fresh.TimeoutSecs)
	same("max_lifetime_secs", sb.MaxLifetimeSecs, fresh.MaxLifetimeSecs)
	same("auto_resume", sb.AutoResume, fresh.AutoResume)
	same("suspend_on_idle", sb.SuspendOnIdle, fresh.SuspendOnIdle)
	same("allow_internet_access", sb.AllowInternetAccess, fresh.AllowInternetAccess)
	same("labels", len(sb.Labels), 1)
	same("label team", sb.Labels["team"], "data")
	same("env", len(sb.Env), len(fresh.Env))
	if sb.Usage == nil || sb.Usage.RunningSeconds > time.Since(before).Seconds()+1 {
		t.Errorf("running_seconds counts the time in the pool: %+v (request %.1fs ago)", sb.Usage, time.Since(before).Seconds())
	}
	if h := strings.TrimSpace(sh(t, d, sb.ID, "hostname").Stdout); h != "alpha" {
		t.Errorf("hostname of the pool sandbox: %q, want alpha", h)
	}
	if r := sh(t, d, sb.ID, "ls -A /workspace; env | grep -c FORKBOX_ || true"); strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("/workspace or exec env of the pool sandbox: %q", r.Stdout)
	}
	if cells, err := d.c.Cells(ctx, sb.ID); err != nil || len(cells.Cells) != 0 {
		t.Fatalf("history before the first cell: %+v, %v", cells, err)
	}
	if l, err := d.c.ListContexts(ctx, sb.ID); err != nil || l.Contexts == nil || len(l.Contexts) != 0 {
		t.Fatalf("contexts before the first cell: %+v, %v", l, err)
	}
	// The prestarted kernel answers to no context id until used.
	if status, _, raw := call(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/code", `{"code":"1","context":"default-python3"}`,
		map[string]string{"Authorization": "Bearer " + admin, "Content-Type": "application/json"}); status != 404 {
		t.Fatalf("the hidden kernel by id: %d %s", status, raw)
	}
	first := time.Now().UTC()
	ex, err := d.c.RunCode(ctx, sb.ID, api.RunCodeRequest{Code: "1+1"})
	if err != nil || ex.Error != nil || ex.ExecutionCount != 1 || len(ex.Results) != 1 || ex.Results[0]["text"] != "2" {
		t.Fatalf("first cell of the pool sandbox: %+v, %v", ex, err)
	}
	freshEx, err := shared.c.RunCode(ctx, fresh.ID, api.RunCodeRequest{Code: "1+1"})
	if err != nil || freshEx.ExecutionCount != 1 {
		t.Fatalf("first cell of the new sandbox: %+v, %v", freshEx, err)
	}
	pst, err := d.c.RunCode(ctx, sb.ID, api.RunCodeRequest{Code: kernelState})
	if err != nil || pst.Error != nil {
		t.Fatalf("pool kernel state: %+v, %v", pst, err)
	}
	fst, err := shared.c.RunCode(ctx, fresh.ID, api.RunCodeRequest{Code: kernelState})
	if err != nil || fst.Error != nil {
		t.Fatalf("new kernel state: %+v, %v", fst, err)
	}
	t.Logf("kernel state of the pool sandbox after its first cell: %v", pst.Results[0]["text"])
	same("kernel state", pst.Results[0]["text"], fst.Results[0]["text"])
	same("execution_count of the second cell", pst.ExecutionCount, fst.ExecutionCount)
	ctxs, err := d.c.ListContexts(ctx, sb.ID)
	if err != nil || len(ctxs.Contexts) != 1 || !ctxs.Contexts[0].Default || ctxs.Contexts[0].CreatedAt.Before(first.Add(-time.Second)) {
		t.Fatalf("contexts after the first cell: %+v, %v", ctxs, err)
	}
	if cells, err := d.c.Cells(ctx, sb.ID); err != nil || len(cells.Cells) != 2 || cells.Cells[0].Code != "1+1" {
		t.Fatalf("history: %+v, %v", cells, err)
	}
	waitPool(t, d, admin, 2, 3) // refilled

	// Requests a member could not have come from: created as always.
	for _, req := range []api.CreateSandboxRequest{
		{Env: map[string]string{"X": "1"}},
		{MemoryMB: i64(512)},
		{AllowInternetAccess: true},
	} {
		o := newSandbox(t, d, req)
		if hits() != 1 {
			t.Fatalf("%+v was served by the pool", req)
		}
		d.c.DeleteSandbox(ctx, o.ID)
	}
	// Pool labels are the daemon's.
	for _, k := range []string{"forkbox.pool", "forkbox.pool.ready"} {
		body := `{"labels":{"` + k + `":"_default"}}`
		if status, e, raw := call(t, d, "POST", "/v1/sandboxes", body, map[string]string{"Authorization": "Bearer " + admin, "Content-Type": "application/json"}); status != 400 || !strings.Contains(e.Message, "reserved") {
			t.Fatalf("label %s: %d %s", k, status, raw)
		}
	}
	// A name in use: 409, and the member stays in the pool.
	if _, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "alpha"}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("create with a name in use: %v", err)
	}
	waitPool(t, d, admin, 2, 3)

	// Another tenant is never handed the default tenant's sandbox.
	var key api.Key
	adminCall(t, d, admin, "POST", "/v1/keys", api.CreateKeyRequest{Tenant: "acme"}, http.StatusCreated, &key)
	acme := client.New("http://"+d.addr, client.WithAPIKey(key.Secret))
	asb, err := acme.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if hits() != 1 {
		t.Fatalf("a tenant's create was served by the default pool")
	}
	if ex, err := acme.RunCode(ctx, asb.ID, api.RunCodeRequest{Code: "1+1"}); err != nil || ex.ExecutionCount != 1 {
		t.Fatalf("tenant sandbox: %+v, %v", ex, err)
	}
	acme.DeleteSandbox(ctx, asb.ID)

	// The second member, unnamed: its hostname is its id, as a new one's.
	sb2 := newSandbox(t, d, api.CreateSandboxRequest{})
	if hits() != 2 {
		t.Fatalf("second create not served by the pool (hits %v)", hits())
	}
	if h := strings.TrimSpace(sh(t, d, sb2.ID, "hostname").Stdout); h != sb2.ID {
		t.Errorf("hostname of an unnamed pool sandbox: %q, want %s", h, sb2.ID)
	}
	// A pool sandbox suspends and resumes as any other, variables kept.
	if ex, err := d.c.RunCode(ctx, sb.ID, py("x = 21")); err != nil || ex.Error != nil {
		t.Fatal(ex, err)
	}
	if _, err := d.c.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if ex, err := d.c.RunCode(ctx, "alpha", py("x * 2")); err != nil || mainResult(t, ex) != "42" {
		t.Fatalf("x * 2 after suspend/resume: %+v, %v", ex, err)
	}
	waitPool(t, d, admin, 2, 4)

	// A restart adopts the ready members (the test daemon keeps its
	// sandboxes running when stopped): no new ones are started.
	dirs := func() []string {
		m, _ := filepath.Glob(filepath.Join(d.dataDir, "sandboxes", "sbx_*"))
		slices.Sort(m)
		return m
	}
	was := dirs()
	d.stop()
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	waitPool(t, d, admin, 2, 4)
	time.Sleep(time.Second)
	if now := dirs(); !slices.Equal(was, now) {
		t.Fatalf("sandboxes after a restart: %v, before %v", now, was)
	}
	sb3 := newSandbox(t, d, api.CreateSandboxRequest{})
	if ex, err := d.c.RunCode(ctx, sb3.ID, api.RunCodeRequest{Code: "1+1"}); err != nil || ex.ExecutionCount != 1 || !slices.Contains(was, filepath.Join(d.dataDir, "sandboxes", sb3.ID)) {
		t.Fatalf("a member adopted after a restart: %+v, %v (%s not among %v)", ex, err, sb3.ID, was)
	}

	// Members left running over a restart are no list's sandboxes, but an
	// admin sees them (forkbox pool ls --members), a start trims them to
	// the configured size, and each can be removed by its id.
	waitPool(t, d, admin, 2, 4)
	members := func() []api.PoolMember {
		t.Helper()
		cmd := exec.Command(binary, "pool", "ls", "--members", "--json")
		cmd.Env = append(os.Environ(), "FORKBOX_URL=http://"+d.addr, "FORKBOX_API_KEY="+admin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("forkbox pool ls --members: %v\n%s", err, out)
		}
		var list api.PoolList
		if err := json.Unmarshal(out, &list); err != nil {
			t.Fatalf("forkbox pool ls --members --json: %v\n%s", err, out)
		}
		for _, p := range list.Pools {
			if p.Name == "_default" {
				return p.Members
			}
		}
		t.Fatalf("forkbox pool ls --members shows no default pool to an admin:\n%s", out)
		return nil
	}
	prev := members()
	if len(prev) != 2 {
		t.Fatalf("default pool members: %+v; want 2", prev)
	}
	d.stop()
	d.args = []string{"--default-pool=1"}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	waitPool(t, d, admin, 1, 3)
	after := members()
	if len(after) != 1 || after[0].ID != prev[0].ID || after[0].State != api.StateRunning {
		t.Fatalf("members after a restart with --default-pool=1: %+v; want the oldest of %+v, running", after, prev)
	}
	if sb, err := d.c.GetSandbox(ctx, prev[1].ID); err == nil && sb.State != api.StateTerminated {
		t.Fatalf("a trimmed member is still there: %+v", sb)
	}
	assertNoLeaks(t, d, prev[1].ID)
	if _, err := d.c.DeleteSandbox(ctx, after[0].ID); err != nil {
		t.Fatalf("delete a member by its id: %v", err)
	}
	// The pool refills (the users' sandboxes may have idled out by now:
	// count members, not running sandboxes).
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		again := members()
		if len(again) == 1 && again[0].ID != after[0].ID && again[0].State == api.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members after deleting one: %+v; want a new one", again)
		}
	}
	// Without members, the default pool is not among the pools.
	if list, err := d.c.ListPools(ctx); err != nil || len(list.Pools) != 0 {
		t.Fatalf("pools without members: %+v %v", list, err)
	}
}
