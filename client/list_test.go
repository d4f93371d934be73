package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// pagedServer serves n items of each list by pages as the daemon does:
// limit (default 100) items after the cursor "at-<i>", and next_cursor
// while more follow. It records every query.
type pagedServer struct {
	n       int
	mu      sync.Mutex
	queries []string
}

func (p *pagedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.queries = append(p.queries, r.URL.Path+"?"+r.URL.RawQuery)
	p.mu.Unlock()
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeErr(w, errdefs.InvalidArgument("limit: %q is not a number from 1 to 1000", v))
			return
		}
		limit = n
	}
	start := 0
	if c := q.Get("cursor"); c != "" {
		i, err := strconv.Atoi(strings.TrimPrefix(c, "at-"))
		if err != nil || !strings.HasPrefix(c, "at-") {
			writeErr(w, errdefs.InvalidArgument("cursor: not a cursor this server made"))
			return
		}
		start = i + 1
	}
	end := min(start+limit, p.n)
	next := ""
	if end < p.n {
		next = fmt.Sprintf("at-%d", end-1)
	}
	switch r.URL.Path {
	case "/v1/sandboxes":
		l := api.SandboxList{Sandboxes: []api.Sandbox{}, NextCursor: next}
		for i := start; i < end; i++ {
			l.Sandboxes = append(l.Sandboxes, api.Sandbox{ID: fmt.Sprintf("sbx_%d", i)})
		}
		writeJSON(w, 200, l)
	case "/v1/snapshots":
		l := api.SnapshotList{Snapshots: []api.Snapshot{}, NextCursor: next}
		for i := start; i < end; i++ {
			l.Snapshots = append(l.Snapshots, api.Snapshot{ID: fmt.Sprintf("snap_%d", i)})
		}
		writeJSON(w, 200, l)
	case "/v1/images":
		l := api.ImageList{Images: []api.Image{}, NextCursor: next}
		if start == 0 {
			l.Building = []api.ImageReadiness{{Name: "python", State: api.ImageBuilding}}
		}
		for i := start; i < end; i++ {
			l.Images = append(l.Images, api.Image{Name: fmt.Sprintf("img-%d", i)})
		}
		writeJSON(w, 200, l)
	case "/v1/conversations":
		l := api.ConversationList{Conversations: []api.Conversation{}, NextCursor: next}
		for i := start; i < end; i++ {
			l.Conversations = append(l.Conversations, api.Conversation{ID: fmt.Sprintf("conv_%d", i)})
		}
		writeJSON(w, 200, l)
	default:
		writeErr(w, errdefs.NotFound("no route %s", r.URL.Path))
	}
}

func (p *pagedServer) taken() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.queries
	p.queries = nil
	return out
}

// The List calls follow next_cursor to the last page and return every
// item once, in order, whatever the page size; a list that fits one page
// takes one request.
func TestListCallsWalkEveryPage(t *testing.T) {
	ps := &pagedServer{n: 7}
	srv, _ := newServer(t, ps.ServeHTTP)
	ctx := context.Background()
	ids := func(prefix string) []string {
		var out []string
		for i := range 7 {
			out = append(out, fmt.Sprintf("%s%d", prefix, i))
		}
		return out
	}
	c := New(srv.URL, WithHTTPClient(srv.Client()), WithPageLimit(3))

	sbs, err := c.ListSandboxes(ctx, ListOptions{IncludeTerminated: true, State: api.StateRunning})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sb := range sbs.Sandboxes {
		got = append(got, sb.ID)
	}
	if !reflect.DeepEqual(got, ids("sbx_")) || sbs.NextCursor != "" {
		t.Errorf("ListSandboxes = %v (next %q), want %v", got, sbs.NextCursor, ids("sbx_"))
	}
	want := []string{
		"/v1/sandboxes?include_terminated=true&limit=3&state=running",
		"/v1/sandboxes?cursor=at-2&include_terminated=true&limit=3&state=running",
		"/v1/sandboxes?cursor=at-5&include_terminated=true&limit=3&state=running",
	}
	if q := ps.taken(); !reflect.DeepEqual(q, want) {
		t.Errorf("ListSandboxes asked\n%q\nwant\n%q", q, want)
	}

	sns, err := c.ListSnapshots(ctx, "my box")
	got = nil
	for _, sn := range sns.Snapshots {
		got = append(got, sn.ID)
	}
	if err != nil || !reflect.DeepEqual(got, ids("snap_")) {
		t.Errorf("ListSnapshots = %v, %v", got, err)
	}
	if q := ps.taken(); len(q) != 3 || q[2] != "/v1/snapshots?cursor=at-5&limit=3&sandbox=my+box" {
		t.Errorf("ListSnapshots asked %q", q)
	}

	il, err := c.ImageList(ctx)
	got = nil
	for _, img := range il.Images {
		got = append(got, img.Name)
	}
	if err != nil || !reflect.DeepEqual(got, ids("img-")) || len(il.Building) != 1 {
		t.Errorf("ImageList = %v, building %v, %v", got, il.Building, err)
	}
	ps.taken()
	imgs, err := c.ListImages(ctx)
	if err != nil || len(imgs) != 7 {
		t.Errorf("ListImages = %d images, %v", len(imgs), err)
	}
	ps.taken()

	convs, err := c.ListConversations(ctx)
	got = nil
	for _, cv := range convs {
		got = append(got, cv.ID)
	}
	if err != nil || !reflect.DeepEqual(got, ids("conv_")) {
		t.Errorf("ListConversations = %v, %v", got, err)
	}
	ps.taken()

	// By default the walk asks for the most a page holds: one request here.
	d := New(srv.URL, WithHTTPClient(srv.Client()))
	if l, err := d.ListSandboxes(ctx, ListOptions{}); err != nil || len(l.Sandboxes) != 7 {
		t.Fatalf("ListSandboxes = %v, %v", l, err)
	}
	if q := ps.taken(); !reflect.DeepEqual(q, []string{"/v1/sandboxes?limit=1000"}) {
		t.Errorf("default walk asked %q", q)
	}
	// An empty list is an empty, non-nil one.
	empty := New(httptestURL(t, &pagedServer{}), WithPageLimit(2))
	if l, err := empty.ListSandboxes(ctx, ListOptions{}); err != nil || l.Sandboxes == nil || len(l.Sandboxes) != 0 {
		t.Errorf("empty list = %#v, %v", l, err)
	}
	if l, err := empty.ListConversations(ctx); err != nil || l == nil {
		t.Errorf("empty conversations = %#v, %v", l, err)
	}
}

func httptestURL(t *testing.T, h http.Handler) string {
	t.Helper()
	srv, _ := newServer(t, h.ServeHTTP)
	return srv.URL
}

// The page calls send limit and cursor as given and return the page with
// its cursor; the daemon's refusals come back as errors.
func TestListPageCalls(t *testing.T) {
	ps := &pagedServer{n: 5}
	_, c := newServer(t, ps.ServeHTTP)
	ctx := context.Background()
	l, err := c.ListSandboxesPage(ctx, ListOptions{Labels: map[string]string{"team": "a"}}, Page{Limit: 2, Cursor: "at-0"})
	if err != nil || len(l.Sandboxes) != 2 || l.Sandboxes[0].ID != "sbx_1" || l.NextCursor != "at-2" {
		t.Fatalf("ListSandboxesPage = %+v, %v", l, err)
	}
	if sl, err := c.ListSnapshotsPage(ctx, "", Page{}); err != nil || len(sl.Snapshots) != 5 || sl.NextCursor != "" {
		t.Fatalf("ListSnapshotsPage = %+v, %v", sl, err)
	}
	if il, err := c.ListImagesPage(ctx, Page{Limit: 4}); err != nil || len(il.Images) != 4 || il.NextCursor != "at-3" {
		t.Fatalf("ListImagesPage = %+v, %v", il, err)
	}
	if cl, err := c.ListConversationsPage(ctx, Page{Limit: 1, Cursor: "at-3"}); err != nil || len(cl.Conversations) != 1 || cl.NextCursor != "" {
		t.Fatalf("ListConversationsPage = %+v, %v", cl, err)
	}
	want := []string{
		"/v1/sandboxes?cursor=at-0&label=team%3Aa&limit=2",
		"/v1/snapshots?",
		"/v1/images?limit=4",
		"/v1/conversations?cursor=at-3&limit=1",
	}
	if q := ps.taken(); !reflect.DeepEqual(q, want) {
		t.Errorf("asked\n%q\nwant\n%q", q, want)
	}
	if _, err := c.ListSandboxesPage(ctx, ListOptions{}, Page{Cursor: "bogus"}); !errors.Is(err, ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "cursor: ") {
		t.Errorf("a bad cursor: %v", err)
	}
	if _, err := c.ListImagesPage(ctx, Page{Limit: 5000}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a limit of 5000: %v", err)
	}
}

// A daemon that answers the cursor it was sent as the next one would keep
// a walk going forever: the walk stops with an error instead.
func TestListWalkStopsOnARepeatedCursor(t *testing.T) {
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		next := "same"
		writeJSON(w, 200, api.SandboxList{Sandboxes: []api.Sandbox{{ID: "sbx_" + url.QueryEscape(r.URL.Query().Get("cursor"))}}, NextCursor: next})
	})
	_, err := c.ListSandboxes(context.Background(), ListOptions{})
	if err == nil || !strings.Contains(err.Error(), "cursor") {
		t.Fatalf("a repeated cursor: err = %v", err)
	}
}

// Audit sends the cursor it is given, and its page carries the next one.
func TestAuditCursor(t *testing.T) {
	var got url.Values
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Query()
		writeJSON(w, 200, api.AuditList{Entries: []api.AuditEntry{{ID: 3}}, NextCursor: "next-one"})
	})
	l, err := c.Audit(context.Background(), AuditOptions{Tenant: "acme", Limit: 1, Before: 9, Cursor: "c1"})
	if err != nil || l.NextCursor != "next-one" {
		t.Fatalf("Audit = %+v, %v", l, err)
	}
	if got.Encode() != "before=9&cursor=c1&limit=1&tenant=acme" {
		t.Errorf("Audit asked %s", got.Encode())
	}
}
