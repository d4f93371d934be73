package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/blob/miniotest"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/store/pgtest"
	"github.com/forkbox/forkbox/internal/testnet"
)

// Issue 17: many nodes. Two nodes, each in a network namespace of its own,
// share a PostgreSQL and a MinIO bucket (both on the bridge between them):
//
//   - exec round trip and create → first exec, straight to the node that
//     runs the sandbox next to through the other node, which forwards;
//   - resume → first answer of a pandas session on the node that suspended
//     it (image in its local cache) next to on the other node after the
//     first one stopped (image downloaded from the bucket first);
//   - the store's hot paths on PostgreSQL next to SQLite (BenchmarkStores).
const (
	clExecs         = 200
	clCreates       = 20
	clResumeCycles  = 4
	clKey           = "bench-cluster-key-0123456789"
	clNodeTimeout   = 3 * time.Second
	clResumeTimeout = 3 * time.Minute
)

// clusterNode starts node i of the bench cluster (dir: a restart's).
func clusterNode(b *testing.B, tn *testnet.Net, i int, dsn, blobs, dir string) *daemon {
	return startDaemonWith(b, daemonOpts{addr: tn.Addrs[i] + ":8080", netns: tn.Namespaces[i], dir: dir,
		env: []string{"FORKBOX_API_KEY=" + clKey},
		args: []string{"--store", dsn, "--blobs", blobs, "--node-id", nodeName(i), "--node-timeout", clNodeTimeout.String(),
			"--on-exit=keep"}})
}

func nodeName(i int) string { return string(rune('a' + i)) }

// waitNode waits until d sees node id in state.
func waitNode(b *testing.B, d *daemon, id string, state api.NodeState) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		list, err := d.client.Nodes(ctx)
		cancel()
		if err == nil {
			for _, n := range list.Nodes {
				if n.ID == id && n.State == state {
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatalf("node %s never became %s", id, state)
}

func BenchmarkCluster(b *testing.B) {
	requireRoot(b)
	hideNsPerOp(b)
	loadStart := loadAvg()
	tn := testnet.New(b, "fbb", 2)
	pg := pgtest.Start(b, pgtest.Listen("127.0.0.1,"+tn.Gateway), pgtest.Durable())
	u, err := url.Parse(pg.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	dsn := pg.DSNFor(tn.Gateway, strings.TrimPrefix(u.Path, "/"))
	s3 := miniotest.Start(b, tn.Gateway)
	blobs := s3.URLWithPrefix("bench")
	nodes := []*daemon{clusterNode(b, tn, 0, dsn, blobs, ""), clusterNode(b, tn, 1, dsn, blobs, "")}
	waitNode(b, nodes[0], "b", api.NodeUp)
	waitNode(b, nodes[1], "a", api.NodeUp)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	// Exec round trip: the same sandbox on a, straight and through b.
	sb, err := nodes[1].client.CreateSandbox(ctx, api.CreateSandboxRequest{Node: "a"})
	if err != nil {
		b.Fatal(err)
	}
	var execDirect, execVia samples
	for i := 0; i < clExecs; i++ {
		for _, via := range []int{0, 1} {
			t0 := time.Now()
			if _, err := nodes[via].execTrue(ctx, sb.ID); err != nil {
				b.Fatalf("exec through %s: %v", nodeName(via), err)
			}
			if via == 0 {
				execDirect = append(execDirect, time.Since(t0))
			} else {
				execVia = append(execVia, time.Since(t0))
			}
		}
	}
	nodes[0].deleteSandbox(b, sb.ID)

	// Create → first exec on a, asked of a and of b; and on a single
	// daemon (SQLite, snapshots on local disk), the baseline of one box.
	solo := startDaemon(b, false)
	var createDirect, createVia, createSolo, execSolo samples
	sbSolo := solo.createSandbox(b)
	for i := 0; i < clExecs; i++ {
		t0 := time.Now()
		if _, err := solo.execTrue(ctx, sbSolo.ID); err != nil {
			b.Fatal(err)
		}
		execSolo = append(execSolo, time.Since(t0))
	}
	solo.deleteSandbox(b, sbSolo.ID)
	for i := 0; i < clCreates; i++ {
		t0 := time.Now()
		sb := solo.createSandbox(b)
		if _, err := solo.execTrue(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		createSolo = append(createSolo, time.Since(t0))
		solo.deleteSandbox(b, sb.ID)
		for _, via := range []int{0, 1} {
			t0 := time.Now()
			sb, err := nodes[via].client.CreateSandbox(ctx, api.CreateSandboxRequest{Node: "a"})
			if err != nil {
				b.Fatalf("create through %s: %v", nodeName(via), err)
			}
			if _, err := nodes[via].execTrue(ctx, sb.ID); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			if via == 0 {
				createDirect = append(createDirect, d)
			} else {
				createVia = append(createVia, d)
			}
			nodes[0].deleteSandbox(b, sb.ID)
		}
	}

	// Resume of a pandas session: on the node that suspended it, then on
	// the other after the first stopped. The session moves a → b → a ….
	var resumeSame, resumeOther samples
	var imageBytes int64
	owner := 0
	sess, err := nodes[owner].client.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "bench-session", Node: "a", MemoryMB: ptr(int64(2048))})
	if err != nil {
		b.Fatal(err)
	}
	code := func(d *daemon, c string) {
		b.Helper()
		rctx, cancel := context.WithTimeout(ctx, clResumeTimeout)
		defer cancel()
		ex, err := d.client.RunCode(rctx, sess.ID, api.RunCodeRequest{Code: c})
		if err != nil || ex.Error != nil {
			b.Fatalf("%q through %s: %+v %v\n%s", c, d.url, ex, err, d.logTail(20))
		}
	}
	code(nodes[owner], dfCell)
	for cycle := 0; cycle < clResumeCycles; cycle++ {
		other := 1 - owner
		// Same node: suspend, then the next call resumes it where its
		// image is cached.
		if _, err := nodes[owner].client.Suspend(ctx, sess.ID); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		code(nodes[owner], shapeCell)
		resumeSame = append(resumeSame, time.Since(t0))
		// Other node: suspend, stop the owner, wait until it is down; the
		// next call through the other node adopts it and resumes it there,
		// downloading its image first.
		if _, err := nodes[owner].client.Suspend(ctx, sess.ID); err != nil {
			b.Fatal(err)
		}
		dir := nodes[owner].dir
		nodes[owner].halt(b)
		// Its host is gone: its data dir with it, and so its claims on
		// user namespace id ranges (per host; both nodes share this one).
		data := filepath.Join(dir, "data")
		if err := os.Rename(data, data+".gone"); err != nil {
			b.Fatal(err)
		}
		waitNode(b, nodes[other], nodeName(owner), api.NodeDown)
		t0 = time.Now()
		code(nodes[other], shapeCell)
		resumeOther = append(resumeOther, time.Since(t0))
		imageBytes = dirBytes(filepath.Join(nodes[other].dir, "data", "snapshots"))
		if err := os.Rename(data+".gone", data); err != nil {
			b.Fatal(err)
		}
		nodes[owner] = clusterNode(b, tn, owner, dsn, blobs, dir)
		waitNode(b, nodes[other], nodeName(owner), api.NodeUp)
		owner = other
	}
	loadEnd := loadAvg()

	execDirect.report(b, "exec-direct-")
	execVia.report(b, "exec-forwarded-")
	resumeSame.report(b, "resume-same-node-")
	resumeOther.report(b, "resume-other-node-")
	fmt.Printf("\nIssue 17 — two nodes (network namespaces on one host), shared PostgreSQL and MinIO; load average %s → %s\n", loadStart, loadEnd)
	tableHeader("measure", "samples", "p50 ms", "p95 ms", "mean ms")
	row := func(name string, s samples) { tableRow(name, fmt.Sprint(len(s)), f(s.p50()), f(s.p95()), f(s.mean())) }
	row("exec `true` round trip, single daemon (SQLite, baseline)", execSolo)
	row("exec `true` round trip, straight to the sandbox's node", execDirect)
	row("exec `true` round trip, through the other node (forwarded)", execVia)
	row("create → first exec, single daemon (SQLite, baseline)", createSolo)
	row("create → first exec, straight to the node", createDirect)
	row("create → first exec, through the other node", createVia)
	row("resume → first `df.shape` on the node that suspended it", resumeSame)
	row("resume → first `df.shape` on another node (image downloaded)", resumeOther)
	fmt.Printf("\nlocal snapshot cache of the node that resumed last: %.0f MiB\n", float64(imageBytes)/(1<<20))
}

// dirBytes adds up the sizes of the regular files under dir.
func dirBytes(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

func ptr[T any](v T) *T { return &v }

// BenchmarkStores times the metadata store's hot paths, PostgreSQL (a local
// throwaway server with its durable defaults, over TCP on loopback) next to
// SQLite (a file in a temp dir, as the daemon opens it), through the same
// interface the daemon uses.
func BenchmarkStores(b *testing.B) {
	requireRoot(b)
	hideNsPerOp(b)
	loadStart := loadAvg()
	ctx := context.Background()
	pg := pgtest.Start(b, pgtest.Durable())
	pgStore, err := store.Open(ctx, pg.NewDatabase(b), "")
	if err != nil {
		b.Fatal(err)
	}
	defer pgStore.Close()
	dir := b.TempDir()
	liteStore, err := store.Open(ctx, "", dir)
	if err != nil {
		b.Fatal(err)
	}
	defer liteStore.Close()
	type op struct {
		name string
		run  func(st store.Backend, i int) error
	}
	const n = 500
	now := time.Now().UTC()
	seed := func(st store.Backend) {
		for i := 0; i < 50; i++ {
			sb := &store.Sandbox{ID: fmt.Sprintf("seed%03d", i), State: api.StateRunning, Image: "python", Node: "a", CreatedAt: now, LastActiveAt: now}
			if err := st.Create(ctx, sb); err != nil {
				b.Fatal(err)
			}
		}
	}
	seed(pgStore)
	seed(liteStore)
	ops := []op{
		{"create (row + first event)", func(st store.Backend, i int) error {
			return st.Create(ctx, &store.Sandbox{ID: fmt.Sprintf("sbx%05d", i), State: api.StateCreating, Image: "python", Node: "a", CreatedAt: now, LastActiveAt: now})
		}},
		{"get by id", func(st store.Backend, i int) error {
			_, err := st.Get(ctx, fmt.Sprintf("sbx%05d", i))
			return err
		}},
		{"update with a state change (row lock + event)", func(st store.Backend, i int) error {
			_, err := st.Update(ctx, fmt.Sprintf("sbx%05d", i), func(s *store.Sandbox) error { s.State = api.StateRunning; return nil })
			return err
		}},
		{"touch (last active)", func(st store.Backend, i int) error {
			return st.Touch(ctx, fmt.Sprintf("sbx%05d", i), now.Add(time.Second))
		}},
		{"list a node's running sandboxes (550 rows)", func(st store.Backend, i int) error {
			_, err := st.List(ctx, store.ListFilter{State: api.StateRunning, Node: "a"})
			return err
		}},
		{"heartbeat", func(st store.Backend, i int) error {
			return st.Heartbeat(ctx, &store.Node{ID: "a", Address: "http://a:8080", HeartbeatAt: time.Now().UTC()})
		}},
	}
	type result struct{ pg, lite samples }
	results := make([]result, len(ops))
	for k, o := range ops {
		for i := 0; i < n; i++ {
			for _, which := range []int{0, 1} {
				st := pgStore
				if which == 1 {
					st = liteStore
				}
				t0 := time.Now()
				if err := o.run(st, i); err != nil {
					b.Fatalf("%s on %s: %v", o.name, st.Kind(), err)
				}
				if which == 0 {
					results[k].pg = append(results[k].pg, time.Since(t0))
				} else {
					results[k].lite = append(results[k].lite, time.Since(t0))
				}
			}
		}
	}
	loadEnd := loadAvg()
	fmt.Printf("\nIssue 17 — the metadata store's hot paths, %d of each, interleaved; load average %s → %s\n", n, loadStart, loadEnd)
	tableHeader("operation", "PostgreSQL p50 ms", "p95 ms", "SQLite p50 ms", "p95 ms")
	for k, o := range ops {
		r := results[k]
		tableRow(o.name, f(r.pg.p50()), f(r.pg.p95()), f(r.lite.p50()), f(r.lite.p95()))
		b.ReportMetric(r.pg.p50(), strings.ReplaceAll(strings.Fields(o.name)[0], " ", "-")+"-pg-p50-ms")
	}
}
