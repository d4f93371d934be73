package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/sandbox/sandboxtest"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

type noImages struct{}

func (noImages) Get(_ context.Context, name string) (*image.Image, error) {
	return nil, errdefs.NotFound("image %q not found", name)
}

// listServer is the control plane over a real Manager and SQLite store,
// called as tenant "acme".
func listServer(t *testing.T) (*store.SQLite, func(path string, q url.Values) (int, http.Header, []byte)) {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "forkbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := New(sandbox.New(st, sandboxtest.NoRuntime{}, noImages{}, nil, sandbox.DefaultDefaults, quiet), quiet)
	return st, func(path string, q url.Values) (int, http.Header, []byte) {
		r := httptest.NewRequest(http.MethodGet, path+"?"+q.Encode(), nil)
		r = r.WithContext(tenant.With(r.Context(), tenant.Principal{Tenant: "acme", KeyID: "key_1"}))
		w := httptest.NewRecorder()
		srv.ServeControl(w, r)
		return w.Code, w.Header(), w.Body.Bytes()
	}
}

// GET /v2/sandboxes pages with the store's keysets: limit and nextToken
// (X-Next-Token, absent on the last page), newest first or, with
// order=asc, oldest first; filtered by state and metadata before the page
// is cut; ended sandboxes and other tenants' are on no page.
func TestListPages(t *testing.T) {
	st, get := listServer(t)
	ctx := context.Background()
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	var running, paused []string
	for i := range 30 {
		sb := &store.Sandbox{ID: fmt.Sprintf("sbx_%02d", i), Tenant: "acme", State: api.StateRunning,
			Spec: store.Spec{CPUs: 1, MemoryMB: 256, Labels: map[string]string{"who": "demo"}}, CreatedAt: t0.Add(time.Duration(i) * time.Second), LastActiveAt: t0}
		switch i % 6 {
		case 0:
			sb.State = api.StateTerminated
		case 1:
			sb.State = api.StateError
		case 2:
			sb.State = api.StateSuspended
			paused = append([]string{sb.ID}, paused...)
		case 3:
			sb.Spec.Labels = map[string]string{"who": "else"}
			running = append([]string{sb.ID}, running...)
		case 4:
			sb.Tenant = "other"
		default:
			running = append([]string{sb.ID}, running...)
		}
		if err := st.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	walk := func(q url.Values, limit int) []string {
		t.Helper()
		q.Set("limit", fmt.Sprint(limit))
		var out []string
		for range 100 {
			code, h, body := get("/v2/sandboxes", q)
			if code != http.StatusOK {
				t.Fatalf("GET /v2/sandboxes?%s: %d %s", q.Encode(), code, body)
			}
			var page []struct {
				SandboxID string            `json:"sandboxID"`
				State     string            `json:"state"`
				Metadata  map[string]string `json:"metadata"`
			}
			if err := json.Unmarshal(body, &page); err != nil || page == nil {
				t.Fatalf("body %s: %v", body, err)
			}
			next := h.Get("X-Next-Token")
			if len(page) > limit || (next != "" && len(page) < limit) {
				t.Fatalf("page of %d (limit %d), next %q", len(page), limit, next)
			}
			for _, sb := range page {
				out = append(out, sb.SandboxID)
			}
			if next == "" {
				return out
			}
			q.Set("nextToken", next)
		}
		t.Fatal("the walk does not end")
		return nil
	}
	both := slices.Concat(running, paused)
	slices.SortFunc(both, func(a, b string) int { return strings.Compare(b, a) })
	onlyDemo := slices.DeleteFunc(slices.Clone(both), func(id string) bool {
		var n int
		fmt.Sscanf(id, "sbx_%d", &n)
		return n%6 == 3
	})
	for _, limit := range []int{1, 4, 100} {
		if got := walk(url.Values{}, limit); !slices.Equal(got, both) {
			t.Errorf("limit %d: %v, want %v", limit, got, both)
		}
		asc := slices.Clone(both)
		slices.Reverse(asc)
		if got := walk(url.Values{"order": {"asc"}}, limit); !slices.Equal(got, asc) {
			t.Errorf("order=asc, limit %d: %v, want %v", limit, got, asc)
		}
		if got := walk(url.Values{"state": {"paused"}}, limit); !slices.Equal(got, paused) {
			t.Errorf("state=paused, limit %d: %v, want %v", limit, got, paused)
		}
		if got := walk(url.Values{"state": {"running,paused"}}, limit); !slices.Equal(got, both) {
			t.Errorf("state=running,paused, limit %d: %v, want %v", limit, got, both)
		}
		if got := walk(url.Values{"metadata": {"who=demo"}}, limit); !slices.Equal(got, onlyDemo) {
			t.Errorf("metadata who=demo, limit %d: %v, want %v", limit, got, onlyDemo)
		}
	}
	// A token of the other order, or none of this server's, is a 400.
	_, h, _ := get("/v2/sandboxes", url.Values{"limit": {"2"}})
	if h.Get("X-Next-Token") == "" {
		t.Fatal("no X-Next-Token on a first page of 2")
	}
	for _, q := range []url.Values{
		{"nextToken": {h.Get("X-Next-Token")}, "order": {"asc"}},
		{"nextToken": {"12"}},
		{"limit": {"0"}},
		{"limit": {"1001"}},
		{"state": {"killed"}},
	} {
		if code, _, body := get("/v2/sandboxes", q); code != http.StatusBadRequest {
			t.Errorf("?%s: %d %s, want 400", q.Encode(), code, body)
		}
	}
}

// GET /snapshots pages the same way, newest first, by sandbox and name,
// without the sandboxes' own suspend images.
func TestListSnapshotPages(t *testing.T) {
	st, get := listServer(t)
	ctx := context.Background()
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	if err := st.Create(ctx, &store.Sandbox{ID: "sbx_src", Tenant: "acme", State: api.StateRunning, CreatedAt: t0, LastActiveAt: t0}); err != nil {
		t.Fatal(err)
	}
	var all, named []string
	for i := range 12 {
		sn := &store.Snapshot{ID: fmt.Sprintf("snap_%02d", i), Tenant: "acme", Type: api.SnapshotMemory, CreatedAt: t0.Add(time.Duration(i) * time.Second)}
		switch {
		case i%4 == 0:
			sn.Type = "suspend"
		case i%3 == 0:
			sn.Name, sn.SandboxID = "keep", "sbx_src"
			named = append([]string{sn.ID}, named...)
			all = append([]string{sn.ID}, all...)
		default:
			all = append([]string{sn.ID}, all...)
		}
		if err := st.CreateSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	walk := func(q url.Values, limit int) []string {
		t.Helper()
		q.Set("limit", fmt.Sprint(limit))
		var out []string
		for range 100 {
			code, h, body := get("/snapshots", q)
			if code != http.StatusOK {
				t.Fatalf("GET /snapshots?%s: %d %s", q.Encode(), code, body)
			}
			var page []snapshotJSON
			if err := json.Unmarshal(body, &page); err != nil || page == nil {
				t.Fatalf("body %s: %v", body, err)
			}
			next := h.Get("X-Next-Token")
			if len(page) > limit || (next != "" && len(page) < limit) {
				t.Fatalf("page of %d (limit %d), next %q", len(page), limit, next)
			}
			for _, sn := range page {
				out = append(out, sn.SnapshotID)
			}
			if next == "" {
				return out
			}
			q.Set("nextToken", next)
		}
		t.Fatal("the walk does not end")
		return nil
	}
	for _, limit := range []int{1, 3, 100} {
		if got := walk(url.Values{}, limit); !slices.Equal(got, all) {
			t.Errorf("limit %d: %v, want %v", limit, got, all)
		}
		if got := walk(url.Values{"name": {"keep"}}, limit); !slices.Equal(got, named) {
			t.Errorf("name=keep, limit %d: %v, want %v", limit, got, named)
		}
		if got := walk(url.Values{"sandboxID": {"sbx_src"}}, limit); !slices.Equal(got, named) {
			t.Errorf("sandboxID=sbx_src, limit %d: %v, want %v", limit, got, named)
		}
	}
	if got := walk(url.Values{"sandboxID": {"sbx_nope"}}, 5); len(got) != 0 {
		t.Errorf("an unknown sandbox's snapshots: %v, want none", got)
	}
	sbToken := store.Cursor{Kind: store.CursorSandboxes, T: 1, ID: "x"}.Encode()
	if code, _, body := get("/snapshots", url.Values{"nextToken": {sbToken}}); code != http.StatusBadRequest {
		t.Errorf("a sandbox list's token: %d %s, want 400", code, body)
	}
}
