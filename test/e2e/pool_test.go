package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

func pools(t *testing.T, d *daemon) []api.Pool {
	t.Helper()
	resp, err := http.Get("http://" + d.addr + "/v1/pools")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l api.PoolList
	json.NewDecoder(resp.Body).Decode(&l)
	return l.Pools
}

func waitPoolReady(t *testing.T, d *daemon, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		for _, p := range pools(t, d) {
			if p.Name == name && p.Ready >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s never had %d ready: %+v", name, n, pools(t, d))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestWarmPool: a pool of 3 from a golden snapshot with pandas imported; 5
// creates in a row all answer pd.__version__ (the first 3 from the pool, the
// rest by restore), and the pool refills.
func TestWarmPool(t *testing.T) {
	needRoot(t)
	golden := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, golden.ID, py("import pandas as pd")))
	_, sn, raw := checkpoint(t, shared, golden.ID, api.CheckpointRequest{Type: "memory", Name: "golden"})
	if sn.ID == "" {
		t.Fatalf("golden snapshot: %s", raw)
	}
	status, raw := postJSON(t, shared, "/v1/pools", api.CreatePoolRequest{Name: "analysts", SnapshotID: sn.ID, Size: 3})
	if status != 201 {
		t.Fatalf("create pool: %d %s", status, raw)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest("DELETE", "http://"+shared.addr+"/v1/pools/analysts", nil)
		http.DefaultClient.Do(req)
	})
	waitPoolReady(t, shared, "analysts", 3)
	for i := 0; i < 5; i++ {
		name := "user-" + string(rune('a'+i))
		sb := newSandbox(t, shared, api.CreateSandboxRequest{Pool: "analysts", Name: name, Labels: map[string]string{"user": name}})
		if sb.Name != name || sb.Labels["user"] != name {
			t.Fatalf("pool sandbox %d: %+v", i, sb)
		}
		// The pool's warm-up cell is not the user's: no history yet.
		if cells, err := shared.c.Cells(ctxT(t), sb.ID); err != nil || len(cells.Cells) != 0 {
			t.Fatalf("pool sandbox %d's cell history before any call: %+v, %v", i, cells, err)
		}
		if got := mainResult(t, runCode(t, shared, name, py("pd.__version__"))); !strings.HasPrefix(got, "'") {
			t.Fatalf("pool sandbox %d: pd.__version__ = %s", i, got)
		}
	}
	waitPoolReady(t, shared, "analysts", 3)
	// Bad input.
	if status, raw := postJSON(t, shared, "/v1/pools", api.CreatePoolRequest{Name: "ghost", SnapshotID: "snap_nope", Size: 1}); status != 404 {
		t.Fatalf("pool of an unknown snapshot: %d %s", status, raw)
	}
	if status, raw := postJSON(t, shared, "/v1/pools", api.CreatePoolRequest{Name: "huge", SnapshotID: sn.ID, Size: 1000}); status != 400 || !strings.Contains(string(raw), "size") {
		t.Fatalf("pool too large: %d %s", status, raw)
	}
	if status, raw := postJSON(t, shared, "/v1/sandboxes", api.CreateSandboxRequest{Pool: "no-such-pool"}); status != 404 {
		t.Fatalf("unknown pool: %d %s", status, raw)
	}
}
