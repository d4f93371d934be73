package httpapi

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
	"github.com/forkbox/forkbox/internal/analyst"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/sandbox/sandboxtest"
	"github.com/forkbox/forkbox/internal/store"
)

// The list routes' pages: the real handlers, Manager, analyst and SQLite
// store, with fake images and no sandboxes running (their rows are
// written to the store directly).

const listKey = "fbx_test_key"

type listEnv struct {
	st  *store.SQLite
	srv *httptest.Server
}

func newListServer(t *testing.T) *listEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.OpenSQLite(ctx, filepath.Join(dir, "forkbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	images := &fakeImages{imgs: map[string]*image.Image{}}
	for _, n := range []string{"alpine", "base", "debian", "host", "python", "r-lang", "zeta"} {
		images.imgs[n] = &image.Image{Name: n, ID: "sha256:" + n, Base: "host", CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mgr := sandbox.New(st, sandboxtest.NoRuntime{}, images, nil, sandbox.DefaultDefaults, quiet)
	chat, err := analyst.New(st, mgr, analyst.Config{UploadsDir: filepath.Join(dir, "uploads"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{APIKey: listKey, Access: st, Chat: chat, Logger: quiet}, mgr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &listEnv{st: st, srv: srv}
}

// get calls GET path?query and decodes a 200's body into out; it returns
// the status and, for an error, its message.
func (e *listEnv) get(t *testing.T, path string, q url.Values, out any) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path+"?"+q.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+listKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		var e api.Error
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
			t.Fatalf("GET %s?%s: %d with a body that is no API error: %q", path, q.Encode(), res.StatusCode, body)
		}
		return res.StatusCode, e.Error.Message
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s?%s: %v in %q", path, q.Encode(), err, body)
	}
	return res.StatusCode, ""
}

// Every list takes limit (1 to 1000) and cursor; anything else is a 400
// naming the parameter, never a 500.
func TestListPageParameters(t *testing.T) {
	e := newListServer(t)
	otherCursor := store.Cursor{Kind: "elsewhere", T: 1, ID: "x"}.Encode()
	for _, path := range []string{"/v1/sandboxes", "/v1/snapshots", "/v1/images", "/v1/conversations", "/v1/audit"} {
		for _, tc := range []struct {
			q      url.Values
			status int
			prefix string
		}{
			{url.Values{}, 200, ""},
			{url.Values{"limit": {"1"}}, 200, ""},
			{url.Values{"limit": {"1000"}}, 200, ""},
			{url.Values{"cursor": {""}}, 200, ""},
			{url.Values{"limit": {"0"}}, 400, "limit: "},
			{url.Values{"limit": {"1001"}}, 400, "limit: "},
			{url.Values{"limit": {"-5"}}, 400, "limit: "},
			{url.Values{"limit": {"ten"}}, 400, "limit: "},
			{url.Values{"limit": {""}}, 400, "limit: "},
			{url.Values{"limit": {"1e3"}}, 400, "limit: "},
			{url.Values{"limit": {"99999999999999999999"}}, 400, "limit: "},
			{url.Values{"cursor": {"not a cursor"}}, 400, "cursor: "},
			{url.Values{"cursor": {"eyJ2IjoxfQ"}}, 400, "cursor: "}, // {"v":1}
			{url.Values{"cursor": {otherCursor}}, 400, "cursor: "},
			{url.Values{"cursor": {strings.Repeat("QUFB", 1000)}}, 400, "cursor: "},
		} {
			var out map[string]any
			status, msg := e.get(t, path, tc.q, &out)
			if status != tc.status || !strings.HasPrefix(msg, tc.prefix) {
				t.Errorf("GET %s?%s = %d %q, want %d %q…", path, tc.q.Encode(), status, msg, tc.status, tc.prefix)
			}
		}
	}
	for _, v := range []string{"maybe", "", "2"} {
		var out map[string]any
		if status, msg := e.get(t, "/v1/sandboxes", url.Values{"include_terminated": {v}}, &out); status != 400 || !strings.HasPrefix(msg, "include_terminated: ") {
			t.Errorf("include_terminated=%q: %d %q, want a 400 naming it", v, status, msg)
		}
	}
	// A cursor of one list is refused by the others.
	sbCursor := store.Cursor{Kind: store.CursorSandboxes, T: 1, ID: "sbx_1"}.Encode()
	for _, path := range []string{"/v1/snapshots", "/v1/images", "/v1/conversations", "/v1/audit"} {
		var out map[string]any
		if status, msg := e.get(t, path, url.Values{"cursor": {sbCursor}}, &out); status != 400 || !strings.HasPrefix(msg, "cursor: ") {
			t.Errorf("%s with a sandboxes cursor: %d %q", path, status, msg)
		}
	}
}

// walk follows a list's next_cursor from its first page, failing on a
// page over limit, a short page before the last or a loop; page returns
// the ids of a decoded page and its next cursor.
func walk[L any](t *testing.T, e *listEnv, path string, q url.Values, limit int, page func(L) ([]string, string)) (all []string, pages int) {
	t.Helper()
	q = cloneQuery(q)
	q.Set("limit", fmt.Sprint(limit))
	for pages < 1000 {
		var l L
		if status, msg := e.get(t, path, q, &l); status != 200 {
			t.Fatalf("GET %s?%s: %d %s", path, q.Encode(), status, msg)
		}
		pages++
		ids, next := page(l)
		if len(ids) > limit || (next != "" && len(ids) < limit) {
			t.Fatalf("%s page %d: %d rows (limit %d), next %q", path, pages, len(ids), limit, next)
		}
		all = append(all, ids...)
		if next == "" {
			return all, pages
		}
		q.Set("cursor", next)
	}
	t.Fatalf("%s: the walk does not end", path)
	return nil, 0
}

func cloneQuery(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = slices.Clone(v)
	}
	return out
}

func sandboxIDs(l api.SandboxList) ([]string, string) {
	var ids []string
	for _, sb := range l.Sandboxes {
		ids = append(ids, sb.ID)
	}
	return ids, l.NextCursor
}

// GET /v1/sandboxes hides terminated sandboxes unless state=terminated or
// include_terminated=true, never shows the default pool's ready members,
// and keeps its pages full however many of those it passes over.
func TestListSandboxesPages(t *testing.T) {
	e := newListServer(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	var live, ended []string
	for i := range 40 {
		sb := &store.Sandbox{ID: fmt.Sprintf("sbx_%02d", i), State: api.StateRunning, Spec: store.Spec{CPUs: 1, MemoryMB: 256},
			CreatedAt: t0.Add(time.Duration(i) * time.Second), LastActiveAt: t0}
		switch {
		case i%5 == 0:
			sb.State = api.StateTerminated
			ended = append([]string{sb.ID}, ended...)
		case i >= 20 && i < 32:
			// A run of twelve hidden rows in the middle of the list.
			sb.Spec.Labels = map[string]string{sandbox.PoolLabel: sandbox.DefaultPoolName, sandbox.PoolReadyLabel: "true"}
		default:
			live = append([]string{sb.ID}, live...)
		}
		if err := e.st.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	all := slices.Concat(live, ended)
	slices.SortFunc(all, func(a, b string) int { return strings.Compare(b, a) })
	for _, limit := range []int{1, 3, 5, 100} {
		if got, _ := walk(t, e, "/v1/sandboxes", nil, limit, sandboxIDs); !slices.Equal(got, live) {
			t.Errorf("default, limit %d: %v, want %v", limit, got, live)
		}
		if got, _ := walk(t, e, "/v1/sandboxes", url.Values{"state": {"terminated"}}, limit, sandboxIDs); !slices.Equal(got, ended) {
			t.Errorf("state=terminated, limit %d: %v, want %v", limit, got, ended)
		}
		if got, _ := walk(t, e, "/v1/sandboxes", url.Values{"include_terminated": {"true"}}, limit, sandboxIDs); !slices.Equal(got, all) {
			t.Errorf("include_terminated, limit %d: %v, want %v", limit, got, all)
		}
	}
	// Exactly a page of visible rows, then only hidden ones: no empty page
	// after it.
	if got, pages := walk(t, e, "/v1/sandboxes", url.Values{"state": {"running"}}, len(live), sandboxIDs); pages != 1 || len(got) != len(live) {
		t.Errorf("a list of exactly one page took %d pages (%d rows)", pages, len(got))
	}
	// The default limit is 100.
	var l api.SandboxList
	e.get(t, "/v1/sandboxes", url.Values{"include_terminated": {"1"}}, &l)
	if len(l.Sandboxes) != len(all) || l.NextCursor != "" {
		t.Errorf("default limit: %d rows, next %q", len(l.Sandboxes), l.NextCursor)
	}
}

// Snapshots, images, conversations and the audit log walk whole, by the
// limit, in their orders; a sandbox's suspend images are not on any page.
func TestListOtherPages(t *testing.T) {
	e := newListServer(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	var snaps, convs []string
	for i := range 13 {
		sn := &store.Snapshot{ID: fmt.Sprintf("snap_%02d", i), Type: api.SnapshotMemory, CreatedAt: t0.Add(time.Duration(i) * time.Second)}
		if i%4 == 0 {
			sn.Type = "suspend"
		} else {
			snaps = append([]string{sn.ID}, snaps...)
		}
		if err := e.st.CreateSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
		c := &store.Conversation{ID: fmt.Sprintf("conv_%02d", i), Title: fmt.Sprint(i), CreatedAt: t0, UpdatedAt: t0.Add(time.Duration(i) * time.Second)}
		if err := e.st.CreateConversation(ctx, c); err != nil {
			t.Fatal(err)
		}
		convs = append([]string{c.ID}, convs...)
	}
	var audit []int64
	entries := make([]store.AuditEntry, 9)
	for i := range entries {
		// Recent: the server prunes audit entries past their retention in
		// the background, which a fixed old date would meet mid-test.
		entries[i] = store.AuditEntry{At: time.Now().UTC(), Tenant: "default", Action: "POST /v1/sandboxes", Status: 201, Outcome: "ok"}
	}
	if err := e.st.AppendAudit(ctx, entries); err != nil {
		t.Fatal(err)
	}
	for i := len(entries) - 1; i >= 0; i-- {
		audit = append(audit, entries[i].ID)
	}
	images := []string{"alpine", "base", "debian", "host", "python", "r-lang", "zeta"}
	for _, limit := range []int{1, 2, 3, 50} {
		got, _ := walk(t, e, "/v1/snapshots", nil, limit, func(l api.SnapshotList) ([]string, string) {
			var ids []string
			for _, sn := range l.Snapshots {
				ids = append(ids, sn.ID)
			}
			return ids, l.NextCursor
		})
		if !slices.Equal(got, snaps) {
			t.Errorf("snapshots, limit %d: %v, want %v", limit, got, snaps)
		}
		got, _ = walk(t, e, "/v1/images", nil, limit, func(l api.ImageList) ([]string, string) {
			var ids []string
			for _, img := range l.Images {
				ids = append(ids, img.Name)
			}
			return ids, l.NextCursor
		})
		if !slices.Equal(got, images) {
			t.Errorf("images, limit %d: %v, want %v", limit, got, images)
		}
		got, _ = walk(t, e, "/v1/conversations", nil, limit, func(l api.ConversationList) ([]string, string) {
			var ids []string
			for _, c := range l.Conversations {
				ids = append(ids, c.ID)
			}
			return ids, l.NextCursor
		})
		if !slices.Equal(got, convs) {
			t.Errorf("conversations, limit %d: %v, want %v", limit, got, convs)
		}
		got, _ = walk(t, e, "/v1/audit", url.Values{"tenant": {"default"}}, limit, func(l api.AuditList) ([]string, string) {
			var ids []string
			for _, a := range l.Entries {
				ids = append(ids, fmt.Sprint(a.ID))
			}
			return ids, l.NextCursor
		})
		var want []string
		for _, id := range audit {
			want = append(want, fmt.Sprint(id))
		}
		if !slices.Equal(got, want) {
			t.Errorf("audit, limit %d: %v, want %v", limit, got, want)
		}
	}
	// before keeps working, alone and with a cursor.
	var al api.AuditList
	e.get(t, "/v1/audit", url.Values{"tenant": {"default"}, "before": {fmt.Sprint(audit[2])}, "limit": {"2"}}, &al)
	if len(al.Entries) != 2 || al.Entries[0].ID != audit[3] || al.NextCursor == "" {
		t.Fatalf("before %d, limit 2: %+v", audit[2], al)
	}
	var al2 api.AuditList
	e.get(t, "/v1/audit", url.Values{"tenant": {"default"}, "before": {fmt.Sprint(audit[2])}, "limit": {"2"}, "cursor": {al.NextCursor}}, &al2)
	if len(al2.Entries) != 2 || al2.Entries[0].ID != audit[5] {
		t.Fatalf("before with the next cursor: %+v", al2)
	}
}
