package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/blob"
	"github.com/forkbox/forkbox/internal/blob/miniotest"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/jupyter/kernelid"
	"github.com/forkbox/forkbox/internal/store/pgtest"
	"github.com/forkbox/forkbox/internal/testnet"
)

// clusterKey is the admin key every node of the test cluster shares.
const clusterKey = "cluster-admin-key-0123456789"

// clusterNode starts (or restarts) node i of a cluster.
func clusterNode(t *testing.T, tn *testnet.Net, i int, dir, dsn, blobs string, extra ...string) *daemon {
	t.Helper()
	id := string(rune('a' + i))
	d := &daemon{dataDir: filepath.Join(dir, "node-"+id), addr: tn.Addrs[i] + ":8080", netns: tn.Namespaces[i],
		env:  []string{"FORKBOX_API_KEY=" + clusterKey},
		args: append([]string{"--store", dsn, "--blobs", blobs, "--node-id", id, "--node-timeout", "3s"}, extra...)}
	return startUntilCleanup(t, d)
}

// startUntilCleanup starts d; when t ends, d's sandboxes are deleted and
// it is stopped, unless it already exited (a test that killed it).
func startUntilCleanup(t *testing.T, d *daemon) *daemon {
	t.Helper()
	if err := d.start(); err != nil {
		t.Fatalf("start daemon %s: %v", d.addr, err)
	}
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			d.deleteAll()
			d.stop()
		}
	})
	return d
}

// waitNodes waits until d lists want's nodes in their states.
func waitNodes(t *testing.T, d *daemon, want map[string]api.NodeState) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last []api.Node
	for time.Now().Before(deadline) {
		list, err := d.c.Nodes(ctxT(t))
		if err == nil {
			last = list.Nodes
			ok := len(last) >= len(want)
			for _, n := range last {
				if s, named := want[n.ID]; named && s != n.State {
					ok = false
				}
			}
			if ok {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("nodes never became %v; last seen %+v", want, last)
}

func runPy(t *testing.T, d *daemon, sb, code string) string {
	t.Helper()
	ex, err := d.c.RunCode(ctxT(t), sb, api.RunCodeRequest{Code: code})
	if err != nil {
		t.Fatalf("run %q in %s through %s: %v", code, sb, d.addr, err)
	}
	if ex.Error != nil {
		t.Fatalf("run %q in %s: %s: %s", code, sb, ex.Error.Name, ex.Error.Value)
	}
	for _, r := range ex.Results {
		if v, ok := r["text"].(string); ok {
			return v
		}
	}
	return strings.TrimSpace(strings.Join(ex.Logs.Stdout, ""))
}

// TestCluster runs three nodes, each in a network namespace of its own with
// its own address, sharing one PostgreSQL and one MinIO bucket: any node
// serves any sandbox; a suspended session of a node that dies resumes on
// another with its variables and files; its running sandboxes are reported
// lost; pools hand each sandbox out once; tenants stay apart on every node;
// a restarted node adopts its running sandboxes; and no sandbox reaches the
// shared stores.
func TestCluster(t *testing.T) {
	needRoot(t)
	t.Parallel() // with the other parallel tests, after the sequential ones
	tn := testnet.New(t, "fbc", 3)
	pg := pgtest.Start(t, pgtest.Listen("127.0.0.1,"+tn.Gateway))
	u, err := url.Parse(pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSNFor(tn.Gateway, strings.TrimPrefix(u.Path, "/"))
	s3 := miniotest.Start(t, tn.Gateway)
	blobs := s3.URLWithPrefix("cluster")
	dir := t.TempDir()
	a := clusterNode(t, tn, 0, dir, dsn, blobs)
	b := clusterNode(t, tn, 1, dir, dsn, blobs)
	c := clusterNode(t, tn, 2, dir, dsn, blobs)
	waitNodes(t, c, map[string]api.NodeState{"a": api.NodeUp, "b": api.NodeUp, "c": api.NodeUp})
	ctx := ctxT(t)
	out, err := exec.Command(binary, "nodes", "--url", "http://"+c.addr, "--api-key", clusterKey).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "c *") || strings.Count(string(out), " up ") != 3 {
		t.Fatalf("forkbox nodes: %v\n%s", err, out)
	}

	// Created on A through B's API; code and files through B.
	sess, err := b.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "sess", Node: "a"})
	if err != nil {
		t.Fatalf("create on a through b: %v", err)
	}
	if sess.Node != "a" {
		t.Fatalf("created on node %q, want a", sess.Node)
	}
	if got := runPy(t, b, sess.ID, "x = 21\nx * 2"); got != "42" {
		t.Fatalf("x * 2 through b = %q", got)
	}
	if _, err := b.c.WriteFile(ctx, sess.ID, "/workspace/notes.txt", strings.NewReader("kept across nodes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Listed from C, with its node.
	list, err := c.c.ListSandboxes(ctx, client.ListOptions{Name: "sess"})
	if err != nil || len(list.Sandboxes) != 1 || list.Sandboxes[0].Node != "a" {
		t.Fatalf("list from c: %+v, %v", list, err)
	}
	// Sandboxes left running on A, to be lost with it: one whose processes
	// die with the host, one whose processes outlive the daemon (as in a
	// partition, or a restart slower than the node timeout).
	doomed, err := c.c.CreateSandbox(ctx, api.CreateSandboxRequest{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	survivor, err := c.c.CreateSandbox(ctx, api.CreateSandboxRequest{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	runPy(t, c, survivor.ID, "w = 'survived'")

	// Suspended on A (through C), then A dies.
	if sb, err := c.c.Suspend(ctx, "sess"); err != nil || sb.State != api.StateSuspended {
		t.Fatalf("suspend through c: %+v, %v", sb, err)
	}
	a.kill9()
	killSandboxProcesses(t, doomed.ID)
	// The host is gone: so is its data dir (its claims on user namespace
	// id ranges with it; on real hosts they are per host anyway).
	if err := os.Rename(a.dataDir, a.dataDir+".gone"); err != nil {
		t.Fatal(err)
	}
	waitNodes(t, c, map[string]api.NodeState{"a": api.NodeDown, "b": api.NodeUp, "c": api.NodeUp})

	// A call through C resumes it on C, variables and files intact.
	if got := runPy(t, c, "sess", "x"); got != "21" {
		t.Fatalf("x after the node died = %q, want 21", got)
	}
	sb, err := c.c.GetSandbox(ctx, "sess")
	if err != nil || sb.State != api.StateRunning || (sb.Node != "b" && sb.Node != "c") {
		t.Fatalf("after resume elsewhere: %+v, %v", sb, err)
	}
	if got, err := b.c.ReadFile(ctx, "sess", "/workspace/notes.txt"); err != nil || string(got) != "kept across nodes\n" {
		t.Fatalf("file after the move, read through b: %q, %v", got, err)
	}
	// The running ones are reported lost, never silently gone.
	for _, id := range []string{doomed.ID, survivor.ID} {
		lost, err := b.c.GetSandbox(ctx, id)
		if err != nil || lost.State != api.StateLost || !strings.Contains(lost.StateReason, "node a") {
			t.Fatalf("sandbox running on the dead node: %+v, %v", lost, err)
		}
		if _, err := b.c.Exec(ctx, id, api.ExecRequest{Cmd: "true"}); err == nil {
			t.Fatal("exec in a lost sandbox succeeded")
		}
	}

	// The host comes back: its node frees what the lost sandbox whose
	// processes died held (it stays lost), adopts the one whose processes
	// survived (running again, its variables kept), and leaves the session
	// that moved on alone.
	if err := os.Rename(a.dataDir+".gone", a.dataDir); err != nil {
		t.Fatal(err)
	}
	a = clusterNode(t, tn, 0, dir, dsn, blobs)
	waitNodes(t, c, map[string]api.NodeState{"a": api.NodeUp})
	if sb, err := a.c.GetSandbox(ctx, doomed.ID); err != nil || sb.State != api.StateLost {
		t.Fatalf("the lost sandbox after its node came back: %+v, %v", sb, err)
	}
	assertNoLeaks(t, a, doomed.ID)
	if sb, err := c.c.GetSandbox(ctx, survivor.ID); err != nil || sb.State != api.StateRunning || sb.Node != "a" {
		t.Fatalf("the surviving sandbox after its node came back: %+v, %v", sb, err)
	}
	if got := runPy(t, c, survivor.ID, "w"); got != "'survived'" {
		t.Fatalf("w in the surviving sandbox = %q", got)
	}
	if sb, err := a.c.DeleteSandbox(ctx, doomed.ID); err != nil || sb.State != api.StateTerminated {
		t.Fatalf("delete a lost sandbox: %+v, %v", sb, err)
	}
	if got := runPy(t, a, "sess", "x + 1"); got != "22" {
		t.Fatalf("the moved session through the node that came back: %q", got)
	}

	t.Run("pool claims race", func(t *testing.T) {
		ctx := ctxT(t)
		if _, err := b.c.CreatePool(ctx, api.CreatePoolRequest{Name: "warm", Image: "python", Size: 2}); err != nil {
			t.Fatal(err)
		}
		defer b.c.DeletePool(context.Background(), "warm")
		// Both live nodes fill it (pools are per node).
		for _, d := range []*daemon{b, c} {
			deadline := time.Now().Add(90 * time.Second)
			for {
				pl, err := d.c.ListPools(ctx)
				if err == nil && len(pl.Pools) == 1 && pl.Pools[0].Ready == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("pool never ready on %s: %+v, %v", d.addr, pl, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		var mu sync.Mutex
		got := map[string]int{}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			d := []*daemon{b, c}[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Pool: "warm"})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				got[sb.ID]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("create from the pool: %v", err)
		}
		if len(got) != 8 {
			t.Fatalf("8 creates from the pool got %d distinct sandboxes: %v", len(got), got)
		}
		for id := range got {
			if out := run(t, b, id, "echo", "mine"); strings.TrimSpace(out.Stdout) != "mine" {
				t.Fatalf("pool sandbox %s: %+v", id, out)
			}
			b.c.DeleteSandbox(ctx, id)
		}
	})

	t.Run("streams, ports and websockets through another node", func(t *testing.T) {
		ctx := ctxT(t)
		sb := newSandbox(t, b, api.CreateSandboxRequest{Node: "b"})
		// Output streams through C as the cell prints it.
		var chunks []string
		ex, err := c.c.RunCodeStream(ctx, sb.ID, api.RunCodeRequest{Code: "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.3)"},
			client.CodeHandlers{OnStdout: func(s string) { chunks = append(chunks, s) }})
		if err != nil || ex.Error != nil || len(chunks) < 2 || !strings.Contains(strings.Join(chunks, ""), "tick 2") {
			t.Fatalf("streamed through c: %d chunks %q, %+v, %v", len(chunks), chunks, ex, err)
		}
		// A WebSocket to a server in the sandbox, through C's port proxy.
		if _, err := c.c.WriteFile(ctx, sb.ID, "/workspace/ws.py", strings.NewReader(wsEchoPy), 0o644); err != nil {
			t.Fatal(err)
		}
		sh(t, b, sb.ID, "nohup python3 /workspace/ws.py >/dev/null 2>&1 &")
		for i := 0; ; i++ {
			res := sh(t, b, sb.ID, "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8765), 1).close()\" && echo up")
			if strings.TrimSpace(res.Stdout) == "up" {
				break
			}
			if i > 50 {
				t.Fatalf("the server in the sandbox did not come up: %+v", res)
			}
			time.Sleep(100 * time.Millisecond)
		}
		p, err := c.c.Port(ctx, sb.ID, 8765)
		if err != nil {
			t.Fatal(err)
		}
		wsURL := "ws://" + c.addr + "/v1/sandboxes/" + sb.ID + "/ports/8765/chat"
		conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"X-Forkbox-Token": {p.Token}}})
		if err != nil {
			t.Fatalf("websocket through c: %v", err)
		}
		defer conn.CloseNow()
		if err := conn.Write(ctx, websocket.MessageText, []byte("across")); err != nil {
			t.Fatal(err)
		}
		if _, got, err := conn.Read(ctx); err != nil || string(got) != "echo: across" {
			t.Fatalf("websocket echo through c: %q %v", got, err)
		}
	})

	t.Run("a notebook's kernel through another node", func(t *testing.T) {
		ctx := ctxT(t)
		sb := newSandbox(t, b, api.CreateSandboxRequest{Node: "b"})
		// The sandbox's default context as a Jupyter kernel, through C:
		// the id names the sandbox, so C forwards the WebSocket to B.
		kid, err := kernelid.Format(sb.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		hdr := http.Header{"Authorization": {"token " + clusterKey}}
		nb := dialKernel(t, ctx, "ws://"+c.addr+"/jupyter/api/kernels/"+kid+"/channels", hdr, func() string { return b.logTail() })
		if r := nb.execute(ctx, "y = 6 * 7\ny", nil); r.status != "ok" || r.text != "42" {
			t.Fatalf("a cell through c: %+v", r)
		}
		// The same context through B's own API.
		if got := runPy(t, b, sb.ID, "y + 1"); got != "43" {
			t.Fatalf("y + 1 through b = %q", got)
		}
		// A new kernel in that sandbox, started through C, runs on B.
		body := fmt.Sprintf(`{"name":"python3","env":{"KERNEL_FORKBOX_SANDBOX":%q}}`, sb.ID)
		status, _, resp := rawRequest(t, c, "POST", "/jupyter/api/kernels", []byte(body), map[string]string{"Authorization": "token " + clusterKey})
		if status != http.StatusCreated {
			t.Fatalf("kernel start in b's sandbox through c: %d %s", status, resp)
		}
		var k struct {
			ID string `json:"id"`
		}
		json.Unmarshal([]byte(resp), &k)
		if got, ctxN, ok := kernelid.Parse(k.ID); !ok || got != sb.ID || ctxN == 0 {
			t.Fatalf("the new kernel's id %q names %q context %d", k.ID, got, ctxN)
		}
		nb2 := dialKernel(t, ctx, "ws://"+c.addr+"/jupyter/api/kernels/"+k.ID+"/channels", hdr, func() string { return b.logTail() })
		if r := nb2.execute(ctx, "'y' in dir()", nil); r.status != "ok" || r.text != "False" {
			t.Fatalf("a new context sees the default one's variables: %+v", r)
		}
	})

	t.Run("MCP and E2B's API through another node", func(t *testing.T) {
		ctx := ctxT(t)
		sb, err := b.c.CreateSandbox(ctx, api.CreateSandboxRequest{Node: "b"})
		if err != nil {
			t.Fatal(err)
		}
		defer b.c.DeleteSandbox(context.Background(), sb.ID)
		// MCP served by C: its in-process calls go to B as the caller.
		cs, err := mcpHTTP(t, c, clusterKey)
		if err != nil {
			t.Fatal(err)
		}
		mcpOK(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "z = 6"})
		if txt := mcpText(mcpOK(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "z * 7"})); !strings.Contains(txt, "42") {
			t.Fatalf("MCP run_code through c: %q", txt)
		}
		// E2B: connect through C (control plane, forwarded with the key),
		// then the data plane through C with the sandbox's own token.
		key := map[string]string{"X-API-KEY": clusterKey}
		status, _, body := e2bCall(t, c, "POST", "/sandboxes/"+sb.ID+"/connect", `{"timeout":300}`, key)
		var conn map[string]any
		if status/100 != 2 || json.Unmarshal([]byte(body), &conn) != nil {
			t.Fatalf("E2B connect through c: %d %s", status, body)
		}
		tok, _ := conn["envdAccessToken"].(string)
		traffic, _ := conn["trafficAccessToken"].(string)
		jup := map[string]string{"E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": "49999", "E2B-Traffic-Access-Token": traffic, "X-Access-Token": tok}
		status, _, body = e2bCall(t, c, "POST", "/execute", `{"code":"6*7"}`, jup)
		if status != http.StatusOK || !strings.Contains(body, `"text":"42"`) {
			t.Fatalf("E2B execute through c: %d %s", status, body)
		}
		// Wrong tokens are refused by the node that checks them.
		jup["X-Access-Token"], jup["E2B-Traffic-Access-Token"] = "wrong", "wrong"
		if status, _, body = e2bCall(t, c, "POST", "/execute", `{"code":"1"}`, jup); status != http.StatusUnauthorized {
			t.Fatalf("E2B execute with a wrong token through c: %d %s", status, body)
		}
	})

	t.Run("tenants apart on every node", func(t *testing.T) {
		ctx := ctxT(t)
		acme, err := b.c.CreateKey(ctx, api.CreateKeyRequest{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		zed, err := c.c.CreateKey(ctx, api.CreateKeyRequest{Tenant: "zed"})
		if err != nil {
			t.Fatal(err)
		}
		as := func(d *daemon, key string) *client.Client {
			return client.New("http://"+d.addr, client.WithAPIKey(key))
		}
		sb, err := as(c, acme.Secret).CreateSandbox(ctx, api.CreateSandboxRequest{Node: "b"})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []*daemon{b, c} {
			if _, err := as(d, acme.Secret).Exec(ctx, sb.ID, api.ExecRequest{Cmd: "true"}); err != nil {
				t.Fatalf("acme's own sandbox through %s: %v", d.addr, err)
			}
			if _, err := as(d, zed.Secret).GetSandbox(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("zed sees acme's sandbox through %s: %v", d.addr, err)
			}
			if _, err := as(d, zed.Secret).Exec(ctx, sb.ID, api.ExecRequest{Cmd: "true"}); !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("zed runs in acme's sandbox through %s: %v", d.addr, err)
			}
			l, err := as(d, zed.Secret).ListSandboxes(ctx, client.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range l.Sandboxes {
				if x.ID == sb.ID {
					t.Fatalf("zed lists acme's sandbox through %s", d.addr)
				}
			}
			if _, err := client.New("http://"+d.addr).GetSandbox(ctx, sb.ID); err == nil {
				t.Fatalf("no key reached a sandbox through %s", d.addr)
			}
		}
		as(b, acme.Secret).DeleteSandbox(ctx, sb.ID)
	})

	t.Run("sandboxes do not reach the shared stores", func(t *testing.T) {
		sb := newSandbox(t, b, api.CreateSandboxRequest{Node: "b", AllowInternetAccess: true})
		for _, target := range []string{fmt.Sprintf("%s:%d", tn.Gateway, pg.Port), s3.Endpoint} {
			host, port, _ := strings.Cut(target, ":")
			got := runPy(t, b, sb.ID, fmt.Sprintf(`import socket
try:
    socket.create_connection((%q, %s), timeout=3).close()
    print("REACHED")
except OSError as e:
    print("blocked:", type(e).__name__)`, host, port))
			if !strings.HasPrefix(got, "blocked:") {
				t.Fatalf("a sandbox's connection to %s: %q", target, got)
			}
		}
	})

	t.Run("a restarted node adopts its running sandboxes", func(t *testing.T) {
		ctx := ctxT(t)
		keep, err := c.c.CreateSandbox(ctx, api.CreateSandboxRequest{Node: "b"})
		if err != nil {
			t.Fatal(err)
		}
		runPy(t, c, keep.ID, "y = 'still here'")
		b.stop() // --on-exit=keep: its sandboxes run on
		b2 := clusterNode(t, tn, 1, dir, dsn, blobs)
		if got := runPy(t, c, keep.ID, "y"); got != "'still here'" {
			t.Fatalf("y after b restarted = %q", got)
		}
		if sb, err := b2.c.GetSandbox(ctx, keep.ID); err != nil || sb.Node != "b" || sb.State != api.StateRunning {
			t.Fatalf("after the restart: %+v, %v", sb, err)
		}
		// A restart slower than the node timeout: the others take b for
		// down and report its sandbox lost meanwhile; b, back, finds it
		// alive and runs it again.
		b2.stop()
		waitNodes(t, c, map[string]api.NodeState{"b": api.NodeDown})
		deadline := time.Now().Add(30 * time.Second)
		for {
			sb, err := c.c.GetSandbox(ctx, keep.ID)
			if err == nil && sb.State == api.StateLost {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sandbox of a node that is down: %+v, %v", sb, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		clusterNode(t, tn, 1, dir, dsn, blobs)
		if got := runPy(t, c, keep.ID, "y"); got != "'still here'" {
			t.Fatalf("y after b came back late = %q", got)
		}
		if sb, err := c.c.GetSandbox(ctx, keep.ID); err != nil || sb.Node != "b" || sb.State != api.StateRunning {
			t.Fatalf("after the late restart: %+v, %v", sb, err)
		}
		c.c.DeleteSandbox(ctx, keep.ID)
	})
}

// TestBlobsCheckpointCrash kills a daemon whose snapshots live in object
// storage in the middle of a checkpoint's upload: no snapshot is visible
// afterwards, and the restarted daemon's collector leaves in the bucket only
// the objects of the snapshots that exist.
func TestBlobsCheckpointCrash(t *testing.T) {
	needRoot(t)
	t.Parallel()
	s3 := miniotest.Start(t, "")
	blobs := s3.URLWithPrefix("crash")
	dir := t.TempDir()
	start := func(env ...string) *daemon {
		addr, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		return startUntilCleanup(t, &daemon{dataDir: filepath.Join(dir, "data"), addr: addr, env: env, args: []string{"--blobs", blobs, "--blob-gc-grace", "0s"}})
	}
	d := start()
	ctx := ctxT(t)
	sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "crashy"})
	runPy(t, d, sb.ID, "v = 7")
	kept, err := d.c.Checkpoint(ctx, sb.ID, api.CheckpointRequest{Type: api.SnapshotMemory, Name: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	d.stop()

	d = start("FORKBOX_FAULT=snapshot:uploading")
	if _, err := d.c.Checkpoint(ctx, sb.ID, api.CheckpointRequest{Type: api.SnapshotMemory, Name: "torn"}); err == nil {
		t.Fatal("the checkpoint whose upload was cut succeeded")
	}
	<-d.exited
	d = start()
	list, err := d.c.ListSnapshots(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Snapshots {
		if s.Name == "torn" {
			t.Fatalf("the torn checkpoint is visible: %+v", s)
		}
	}
	// The collector ran at start (grace 0): every object left belongs to
	// the snapshot that exists.
	store, err := blob.Open(blobs)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		stray, err := strayObjects(ctx, store, kept.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(stray) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("objects of the torn checkpoint left after the collector ran: %v", stray)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The kept snapshot restores from the bucket alone.
	os.RemoveAll(filepath.Join(d.dataDir, "snapshots", kept.ID))
	fork, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{SnapshotID: kept.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := runPy(t, d, fork.ID, "v"); got != "7" {
		t.Fatalf("v in the restore = %q", got)
	}
}

// killSandboxProcesses kills every process of sandbox id, as the death of
// its host would.
func killSandboxProcesses(t *testing.T, id string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	n := 0
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "/"+id) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no process of sandbox %s to kill", id)
	}
}

// strayObjects lists the bucket's snapshot objects (manifests and blobs;
// images' layers live beside them) that are neither snapshot keep's
// manifest nor a file it names.
func strayObjects(ctx context.Context, st *blob.S3, keep string) ([]string, error) {
	r, err := st.Get(ctx, "snapshots/"+keep+"/manifest.json")
	if err != nil {
		return nil, fmt.Errorf("the kept snapshot's manifest: %w", err)
	}
	var m struct {
		Files map[string]string `json:"files"`
	}
	err = json.NewDecoder(r).Decode(&m)
	r.Close()
	if err != nil {
		return nil, err
	}
	want := map[string]bool{"snapshots/" + keep + "/manifest.json": true}
	for _, sum := range m.Files {
		want["blobs/sha256/"+sum] = true
	}
	var objs []blob.Object
	for _, prefix := range []string{"snapshots/", "blobs/"} {
		o, err := st.List(ctx, prefix)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o...)
	}
	var stray []string
	for _, o := range objs {
		if !want[o.Key] {
			stray = append(stray, o.Key)
		}
	}
	return stray, nil
}
