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

func TestSnapshotCalls(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	mem := api.Snapshot{ID: "snap_2", Type: api.SnapshotMemory, Name: "warm", SandboxID: "sbx_1", ParentID: "snap_1",
		Image: "python", SizeBytes: 50 << 20, PausedMS: 420, CreatedAt: created.Add(time.Minute)}
	fs := api.Snapshot{ID: "snap_1", Type: api.SnapshotFilesystem, SandboxID: "sbx_1", Image: "python", SizeBytes: 4096, PausedMS: 12, CreatedAt: created}
	var (
		mu     sync.Mutex
		seen   []string
		bodies = map[string]string{}
	)
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Method + " " + r.URL.EscapedPath()
		mu.Lock()
		seen = append(seen, key+"?"+r.URL.RawQuery)
		bodies[key] = string(body)
		mu.Unlock()
		if len(body) > 0 && r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: Content-Type = %q", key, r.Header.Get("Content-Type"))
		}
		switch key {
		case "POST /v1/sandboxes/my%20box/checkpoint":
			var req api.CheckpointRequest
			json.Unmarshal(body, &req)
			if req.Type == api.SnapshotMemory {
				writeJSON(w, 201, mem)
			} else {
				writeJSON(w, 201, fs)
			}
		case "POST /v1/sandboxes/dead/checkpoint":
			writeErr(w, errdefs.FailedPrecondition("sandbox sbx_9 is terminated"))
		case "POST /v1/sandboxes/nocriu/checkpoint":
			writeErr(w, errdefs.Unavailable("memory snapshots are unavailable on this host: criu not found"))
		case "POST /v1/sandboxes/full/checkpoint":
			writeErr(w, errdefs.ResourceExhausted("no space left for the snapshot"))
		case "POST /v1/sandboxes/sbx_1/fork":
			var req api.ForkRequest
			json.Unmarshal(body, &req)
			res := api.ForkResult{Snapshot: mem}
			for i := range req.Count {
				sb := api.Sandbox{ID: "sbx_1" + string(rune('0'+i)), State: api.StateRunning, SnapshotID: mem.ID, CreatedAt: created}
				if len(req.Names) > 0 {
					sb.Name = req.Names[i]
				}
				res.Sandboxes = append(res.Sandboxes, sb)
			}
			writeJSON(w, 201, res)
		case "GET /v1/snapshots":
			list := api.SnapshotList{Snapshots: []api.Snapshot{mem, fs}}
			if r.URL.Query().Get("sandbox") == "nope" {
				writeErr(w, errdefs.NotFound(`sandbox "nope" not found`))
				return
			}
			writeJSON(w, 200, list)
		case "GET /v1/snapshots/snap_2":
			writeJSON(w, 200, mem)
		case "DELETE /v1/snapshots/snap_2":
			w.WriteHeader(204)
		case "GET /v1/snapshots/snap_bad":
			writeErr(w, errdefs.FailedPrecondition("snapshot snap_bad is corrupt: checksum mismatch"))
		default:
			writeErr(w, errdefs.NotFound("no route %s", key))
		}
	})
	ctx := context.Background()

	sn, err := c.Checkpoint(ctx, "my box", api.CheckpointRequest{})
	if err != nil || !reflect.DeepEqual(*sn, fs) {
		t.Fatalf("checkpoint = %+v, %v", sn, err)
	}
	if got := bodies["POST /v1/sandboxes/my%20box/checkpoint"]; got != "{}" {
		t.Errorf("default checkpoint sent %s, want {}", got)
	}
	sn, err = c.Checkpoint(ctx, "my box", api.CheckpointRequest{Type: api.SnapshotMemory, Name: "warm"})
	if err != nil || !reflect.DeepEqual(*sn, mem) {
		t.Fatalf("memory checkpoint = %+v, %v", sn, err)
	}
	if got := bodies["POST /v1/sandboxes/my%20box/checkpoint"]; got != `{"type":"memory","name":"warm"}` {
		t.Errorf("memory checkpoint sent %s", got)
	}

	res, err := c.Fork(ctx, "sbx_1", api.ForkRequest{Count: 2, Names: []string{"a", "b"}})
	if err != nil || res.Snapshot.ID != "snap_2" || len(res.Sandboxes) != 2 || res.Sandboxes[1].Name != "b" {
		t.Fatalf("fork = %+v, %v", res, err)
	}
	if got := bodies["POST /v1/sandboxes/sbx_1/fork"]; got != `{"count":2,"names":["a","b"]}` {
		t.Errorf("fork sent %s", got)
	}
	if _, err := c.Fork(ctx, "sbx_1", api.ForkRequest{Count: 1}); err != nil {
		t.Fatal(err)
	}
	if got := bodies["POST /v1/sandboxes/sbx_1/fork"]; got != `{"count":1}` {
		t.Errorf("fork without names sent %s", got)
	}

	list, err := c.ListSnapshots(ctx, "")
	if err != nil || len(list.Snapshots) != 2 || list.Snapshots[0].ID != "snap_2" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if _, err := c.ListSnapshots(ctx, "my box"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListSnapshots(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("list of a missing sandbox: %v", err)
	}
	if got, err := c.GetSnapshot(ctx, "snap_2"); err != nil || !reflect.DeepEqual(*got, mem) {
		t.Errorf("get = %+v, %v", got, err)
	}
	if err := c.DeleteSnapshot(ctx, "snap_2"); err != nil {
		t.Errorf("delete: %v", err)
	}

	for _, tt := range []struct {
		call func() error
		kind error
		msg  string
	}{
		{func() error { _, err := c.Checkpoint(ctx, "dead", api.CheckpointRequest{}); return err },
			ErrFailedPrecondition, "sandbox sbx_9 is terminated"},
		{func() error {
			_, err := c.Checkpoint(ctx, "nocriu", api.CheckpointRequest{Type: api.SnapshotMemory})
			return err
		}, ErrUnavailable, "memory snapshots are unavailable on this host: criu not found"},
		{func() error { _, err := c.Checkpoint(ctx, "full", api.CheckpointRequest{}); return err },
			ErrResourceExhausted, "no space left for the snapshot"},
		{func() error { _, err := c.Fork(ctx, "missing", api.ForkRequest{Count: 1}); return err },
			ErrNotFound, "no route POST /v1/sandboxes/missing/fork"},
		{func() error { _, err := c.GetSnapshot(ctx, "snap_bad"); return err },
			ErrFailedPrecondition, "snapshot snap_bad is corrupt: checksum mismatch"},
		{func() error { return c.DeleteSnapshot(ctx, "a/b") }, ErrNotFound, "no route DELETE /v1/snapshots/a%2Fb"},
	} {
		err := tt.call()
		if !errors.Is(err, tt.kind) || err.Error() != tt.msg {
			t.Errorf("err = %v, want %v %q", err, tt.kind, tt.msg)
		}
	}

	want := []string{
		"POST /v1/sandboxes/my%20box/checkpoint?",
		"POST /v1/sandboxes/my%20box/checkpoint?",
		"POST /v1/sandboxes/sbx_1/fork?",
		"POST /v1/sandboxes/sbx_1/fork?",
		"GET /v1/snapshots?limit=1000",
		"GET /v1/snapshots?limit=1000&sandbox=my+box",
		"GET /v1/snapshots?limit=1000&sandbox=nope",
		"GET /v1/snapshots/snap_2?",
		"DELETE /v1/snapshots/snap_2?",
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(seen[:len(want)], want) {
		t.Errorf("requests:\n%q\nwant\n%q", seen[:len(want)], want)
	}
}
