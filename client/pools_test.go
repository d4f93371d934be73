package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestSuspendResume(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	sb := api.Sandbox{ID: "sbx_1", Name: "my box", Image: "python", CPUs: 1, MemoryMB: 1024, AutoResume: true,
		CreatedAt: created, LastActiveAt: created}
	var (
		mu   sync.Mutex
		seen []string
	)
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Method + " " + r.URL.EscapedPath()
		mu.Lock()
		seen = append(seen, key)
		mu.Unlock()
		if len(body) != 0 {
			t.Errorf("%s: sent a body %q", key, body)
		}
		switch key {
		case "POST /v1/sandboxes/my%20box/suspend":
			s := sb
			s.State, s.StateReason = api.StateSuspended, "suspended on request"
			writeJSON(w, 200, s)
		case "POST /v1/sandboxes/my%20box/resume":
			s := sb
			s.State = api.StateRunning
			writeJSON(w, 200, s)
		case "POST /v1/sandboxes/sbx_1/resume":
			writeErr(w, errdefs.FailedPrecondition("sandbox sbx_1 is running; only a suspended sandbox can be resumed"))
		case "POST /v1/sandboxes/sbx_2/suspend":
			writeErr(w, errdefs.FailedPrecondition("sandbox sbx_2 is suspended; only a running sandbox can be suspended"))
		case "POST /v1/sandboxes/nocriu/suspend":
			writeErr(w, errdefs.Unavailable("suspend needs memory snapshots, unavailable on this host: criu not found"))
		default:
			writeErr(w, errdefs.NotFound("no route %s", key))
		}
	})
	ctx := context.Background()

	got, err := c.Suspend(ctx, "my box")
	if err != nil || got.State != api.StateSuspended || got.ID != "sbx_1" || !got.AutoResume || got.StateReason != "suspended on request" {
		t.Fatalf("suspend = %+v, %v", got, err)
	}
	got, err = c.Resume(ctx, "my box")
	if err != nil || got.State != api.StateRunning || got.Name != "my box" {
		t.Fatalf("resume = %+v, %v", got, err)
	}
	for _, tt := range []struct {
		call func() (*api.Sandbox, error)
		kind error
		msg  string
	}{
		{func() (*api.Sandbox, error) { return c.Resume(ctx, "sbx_1") }, ErrFailedPrecondition,
			"sandbox sbx_1 is running; only a suspended sandbox can be resumed"},
		{func() (*api.Sandbox, error) { return c.Suspend(ctx, "sbx_2") }, ErrFailedPrecondition,
			"sandbox sbx_2 is suspended; only a running sandbox can be suspended"},
		{func() (*api.Sandbox, error) { return c.Suspend(ctx, "nocriu") }, ErrUnavailable,
			"suspend needs memory snapshots, unavailable on this host: criu not found"},
		{func() (*api.Sandbox, error) { return c.Resume(ctx, "a/b") }, ErrNotFound,
			"no route POST /v1/sandboxes/a%2Fb/resume"},
	} {
		got, err := tt.call()
		var ae *APIError
		if got != nil || !errors.Is(err, tt.kind) || err.Error() != tt.msg || !errors.As(err, &ae) {
			t.Errorf("got %+v, err = %v, want %v %q", got, err, tt.kind, tt.msg)
		} else if tt.kind == ErrFailedPrecondition && ae.Status != 409 {
			t.Errorf("%q: status %d, want 409", tt.msg, ae.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"POST /v1/sandboxes/my%20box/suspend", "POST /v1/sandboxes/my%20box/resume"}
	if !reflect.DeepEqual(seen[:2], want) {
		t.Errorf("requests %q, want %q", seen[:2], want)
	}
}

func TestPoolCalls(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var (
		mu     sync.Mutex
		seen   []string
		bodies = map[string]string{}
		pools  = []api.Pool{{Name: "img", Image: "python", Size: 1, Ready: 1, CreatedAt: created}}
	)
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Method + " " + r.URL.EscapedPath()
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, key)
		bodies[key] = string(body)
		if len(body) > 0 && r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: Content-Type = %q", key, r.Header.Get("Content-Type"))
		}
		switch key {
		case "POST /v1/pools":
			var req api.CreatePoolRequest
			if err := json.Unmarshal(body, &req); err != nil {
				writeErr(w, errdefs.InvalidArgument("bad body: %v", err))
				return
			}
			switch {
			case req.Size < 1 || req.Size > 32:
				writeErr(w, errdefs.InvalidArgument("size: %d is not between 1 and 32", req.Size))
			case (req.SnapshotID == "") == (req.Image == ""):
				writeErr(w, errdefs.InvalidArgument("give exactly one of snapshot_id and image"))
			case req.SnapshotID == "snap_9":
				writeErr(w, errdefs.NotFound("snapshot %q not found", req.SnapshotID))
			case req.Name == "img" || req.Name == "warm" && len(pools) > 1:
				writeErr(w, errdefs.Conflict("pool %q exists", req.Name))
			default:
				p := api.Pool{Name: req.Name, SnapshotID: req.SnapshotID, Image: "python", Size: req.Size, CreatedAt: created}
				pools = append(pools, p)
				writeJSON(w, 201, p)
			}
		case "GET /v1/pools":
			writeJSON(w, 200, api.PoolList{Pools: pools})
		case "DELETE /v1/pools/warm":
			pools = pools[:1]
			w.WriteHeader(204)
		case "POST /v1/sandboxes":
			writeJSON(w, 201, api.Sandbox{ID: "sbx_7", Name: "s1", State: api.StateRunning, SnapshotID: "snap_1", AutoResume: true})
		default:
			writeErr(w, errdefs.NotFound("no route %s", key))
		}
	})
	ctx := context.Background()

	p, err := c.CreatePool(ctx, api.CreatePoolRequest{Name: "warm", SnapshotID: "snap_1", Size: 4})
	want := api.Pool{Name: "warm", SnapshotID: "snap_1", Image: "python", Size: 4, CreatedAt: created}
	if err != nil || !reflect.DeepEqual(*p, want) {
		t.Fatalf("create = %+v, %v", p, err)
	}
	if got := bodies["POST /v1/pools"]; got != `{"name":"warm","snapshot_id":"snap_1","size":4}` {
		t.Errorf("create sent %s", got)
	}
	list, err := c.ListPools(ctx)
	if err != nil || len(list.Pools) != 2 || !reflect.DeepEqual(list.Pools[1], want) || list.Pools[0].Ready != 1 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Pool: "warm", Name: "s1", AutoResume: ptr(false)})
	if err != nil || sb.ID != "sbx_7" {
		t.Fatalf("create from pool = %+v, %v", sb, err)
	}
	if got := bodies["POST /v1/sandboxes"]; got != `{"name":"s1","auto_resume":false,"pool":"warm"}` {
		t.Errorf("create from pool sent %s", got)
	}
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{}); err != nil || bodies["POST /v1/sandboxes"] != "{}" {
		t.Errorf("create without pool sent %s (%v)", bodies["POST /v1/sandboxes"], err)
	}
	if err := c.DeletePool(ctx, "warm"); err != nil {
		t.Errorf("delete: %v", err)
	}

	for _, tt := range []struct {
		req  api.CreatePoolRequest
		kind error
		msg  string
	}{
		{api.CreatePoolRequest{Name: "x", Image: "python", Size: 33}, ErrInvalidArgument, "size: 33 is not between 1 and 32"},
		{api.CreatePoolRequest{Name: "x", Size: 2}, ErrInvalidArgument, "give exactly one of snapshot_id and image"},
		{api.CreatePoolRequest{Name: "x", SnapshotID: "snap_9", Size: 2}, ErrNotFound, `snapshot "snap_9" not found`},
		{api.CreatePoolRequest{Name: "img", Image: "python", Size: 2}, ErrConflict, `pool "img" exists`},
	} {
		p, err := c.CreatePool(ctx, tt.req)
		if p != nil || !errors.Is(err, tt.kind) || err.Error() != tt.msg {
			t.Errorf("create %+v: %+v, %v; want %v %q", tt.req, p, err, tt.kind, tt.msg)
		}
	}
	if err := c.DeletePool(ctx, "a b"); !errors.Is(err, ErrNotFound) || err.Error() != "no route DELETE /v1/pools/a%20b" {
		t.Errorf("delete unknown: %v", err)
	}
}
