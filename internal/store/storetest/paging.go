package storetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
)

// RunPaging runs the conformance suite of the lists' pages (Page, the
// cursors) and of PruneTerminated, which need the whole backend.
// newBackend must return a fresh, empty backend each time it is called
// (once per subtest) and arrange for its closing with t.Cleanup.
func RunPaging(t *testing.T, newBackend func(t *testing.T) store.Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b store.Backend)
	}{
		{"SandboxPagesOrderAndLimit", testSandboxPages},
		{"SandboxPagesOldestFirst", testSandboxPagesOldest},
		{"SandboxPagesFilters", testSandboxPagesFilters},
		{"SandboxPagesHideTerminated", testSandboxPagesHideTerminated},
		{"SandboxPagesTenantScoped", testSandboxPagesTenants},
		{"SandboxPagesConcurrentInserts", testSandboxPagesConcurrentInserts},
		{"SnapshotPages", testSnapshotPages},
		{"ConversationPages", testConversationPages},
		{"AuditPages", testAuditPages},
		{"BadCursors", testBadCursors},
		{"PruneTerminated", testPruneTerminated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newBackend(t)) })
	}
}

// walkSandboxes lists every page of f by limit, failing on a page longer
// than limit, an empty page before the last, or a walk that does not end.
func walkSandboxes(t *testing.T, ctx context.Context, s store.Store, f store.ListFilter, limit int, oldest bool) (all []string, pages int) {
	t.Helper()
	cursor := ""
	for {
		page, next, err := s.ListPage(ctx, f, store.Page{Limit: limit, Cursor: cursor, Oldest: oldest})
		if err != nil {
			t.Fatalf("ListPage(%+v, limit %d, page %d): %v", f, limit, pages+1, err)
		}
		pages++
		if len(page) > limit {
			t.Fatalf("page %d has %d rows, limit %d", pages, len(page), limit)
		}
		if next != "" && len(page) < limit {
			t.Fatalf("page %d has %d rows (limit %d) and a next cursor", pages, len(page), limit)
		}
		if len(page) == 0 && pages > 1 {
			t.Fatalf("page %d is empty: the page before it should have been the last", pages)
		}
		all = append(all, ids(page)...)
		if next == "" {
			return all, pages
		}
		if next == cursor {
			t.Fatalf("page %d returned its own cursor again", pages)
		}
		if pages > 1000 {
			t.Fatalf("the walk does not end")
		}
		cursor = next
	}
}

// sandboxesAt creates sandboxes id-0 … id-(n-1), the i-th created at
// created(i), in a shuffled order (insertion order is not the list's).
func sandboxesAt(t *testing.T, ctx context.Context, s store.Store, prefix string, n int, created func(i int) time.Time, state api.SandboxState) {
	t.Helper()
	for k := range n {
		i := (k * 7) % n // 7 is prime to the counts used: every i once
		if n%7 == 0 {
			i = k
		}
		sb := newSandbox(fmt.Sprintf("%s-%03d", prefix, i), "", state, created(i))
		if err := s.Create(ctx, sb); err != nil {
			t.Fatalf("Create(%s): %v", sb.ID, err)
		}
	}
}

// Pages of a limit hold the whole list, in List's order (newest first, the
// greater id first among equal instants), each page full but the last, and
// the last page says so: a list of an exact number of pages has no empty
// page after it. A cursor can be used again and gives the same page.
func testSandboxPages(t *testing.T, b store.Backend) {
	ctx := context.Background()
	// 23 rows; rows 10 to 13 share one instant, so that ties are paged by id.
	sandboxesAt(t, ctx, b, "sb", 23, func(i int) time.Time {
		if i >= 10 && i <= 13 {
			return at(10)
		}
		return at(i)
	}, api.StateRunning)
	all, err := b.List(ctx, store.ListFilter{})
	if err != nil || len(all) != 23 {
		t.Fatalf("List = %d rows, %v", len(all), err)
	}
	want := ids(all)
	if want[0] != "sb-022" || want[len(want)-1] != "sb-000" {
		t.Fatalf("List is not newest first: %v", want)
	}
	if ties := want[9:13]; !slices.Equal(ties, []string{"sb-013", "sb-012", "sb-011", "sb-010"}) {
		t.Fatalf("rows of one instant in List: %v, want the greater id first", ties)
	}
	for _, limit := range []int{1, 2, 3, 4, 5, 22, 23, 24, 1000} {
		got, pages := walkSandboxes(t, ctx, b, store.ListFilter{}, limit, false)
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: pages hold %v, want %v", limit, got, want)
		}
		if wantPages := max(1, (23+limit-1)/limit); pages != wantPages {
			t.Errorf("limit %d: %d pages, want %d", limit, pages, wantPages)
		}
	}
	// A cursor is a position, not a session: asked again, the same page.
	first, next, err := b.ListPage(ctx, store.ListFilter{}, store.Page{Limit: 5})
	if err != nil || len(first) != 5 || next == "" {
		t.Fatalf("first page: %d rows, next %q, %v", len(first), next, err)
	}
	p1, n1, err1 := b.ListPage(ctx, store.ListFilter{}, store.Page{Limit: 5, Cursor: next})
	p2, n2, err2 := b.ListPage(ctx, store.ListFilter{}, store.Page{Limit: 5, Cursor: next})
	if err1 != nil || err2 != nil || !slices.Equal(ids(p1), ids(p2)) || n1 != n2 || !slices.Equal(ids(p1), want[5:10]) {
		t.Fatalf("the same cursor twice: %v %q %v / %v %q %v; want %v", ids(p1), n1, err1, ids(p2), n2, err2, want[5:10])
	}
	// A page's rows are whole records.
	expectSame(t, "a page's record", all[5], p1[0])
	// SandboxCursor continues after any row, as a page's cursor does.
	after, _, err := b.ListPage(ctx, store.ListFilter{}, store.Page{Limit: 3, Cursor: store.SandboxCursor(all[11], false)})
	if err != nil || !slices.Equal(ids(after), want[12:15]) {
		t.Fatalf("after SandboxCursor(%s): %v, %v; want %v", all[11].ID, ids(after), err, want[12:15])
	}
	// An empty list is one empty page.
	none, next, err := b.ListPage(ctx, store.ListFilter{Name: "nobody"}, store.Page{Limit: 10})
	if err != nil || len(none) != 0 || next != "" {
		t.Fatalf("empty list: %v, %q, %v", ids(none), next, err)
	}
}

// Oldest first is the same list reversed, with its own cursors.
func testSandboxPagesOldest(t *testing.T, b store.Backend) {
	ctx := context.Background()
	sandboxesAt(t, ctx, b, "sb", 11, func(i int) time.Time { return at(i / 2) }, api.StateRunning)
	newest, _ := walkSandboxes(t, ctx, b, store.ListFilter{}, 4, false)
	oldest, _ := walkSandboxes(t, ctx, b, store.ListFilter{}, 4, true)
	slices.Reverse(newest)
	if !slices.Equal(oldest, newest) {
		t.Fatalf("oldest first = %v, want the newest-first list reversed %v", oldest, newest)
	}
	_, next, err := b.ListPage(ctx, store.ListFilter{}, store.Page{Limit: 4})
	if err != nil || next == "" {
		t.Fatal(next, err)
	}
	if _, _, err := b.ListPage(ctx, store.ListFilter{}, store.Page{Limit: 4, Cursor: next, Oldest: true}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a newest-first cursor in an oldest-first list: err = %v, want invalid argument", err)
	}
}

// Filters apply before the page is cut: a page of a filtered list is full
// of matching rows (labels included, whatever their keys hold), and the
// filters combine.
func testSandboxPagesFilters(t *testing.T, b store.Backend) {
	ctx := context.Background()
	odd := map[string]string{`a.b`: `x"y`, `"q"`: "$.labels", "team": "core"}
	var wantOdd, wantState []string
	for i := range 30 {
		sb := newSandbox(fmt.Sprintf("sb-%02d", i), "", api.StateRunning, at(i))
		sb.Spec.Labels = map[string]string{"team": "ml"}
		if i%3 == 0 {
			sb.Spec.Labels = odd
		}
		if i%2 == 0 {
			sb.State = api.StateSuspended
		}
		mustCreate(t, b, sb)
	}
	for i := 29; i >= 0; i-- {
		id := fmt.Sprintf("sb-%02d", i)
		if i%3 == 0 {
			wantOdd = append(wantOdd, id)
		}
		if i%2 == 0 {
			wantState = append(wantState, id)
		}
	}
	cases := []struct {
		name string
		f    store.ListFilter
		want []string
	}{
		{"labels", store.ListFilter{Labels: map[string]string{`a.b`: `x"y`, `"q"`: "$.labels"}}, wantOdd},
		{"label value", store.ListFilter{Labels: map[string]string{`a.b`: `x`}}, nil},
		{"label key is no path", store.ListFilter{Labels: map[string]string{`a`: `x"y`}}, nil},
		{"state", store.ListFilter{State: api.StateSuspended}, wantState},
		{"states", store.ListFilter{States: []api.SandboxState{api.StateRunning, api.StateCreating}}, func() (out []string) {
			for _, id := range ids(mustList(t, b, store.ListFilter{})) {
				if !slices.Contains(wantState, id) {
					out = append(out, id)
				}
			}
			return out
		}()},
		{"states and labels", store.ListFilter{States: []api.SandboxState{api.StateRunning}, Labels: map[string]string{"team": "core"}}, func() (out []string) {
			for _, id := range wantOdd {
				if !slices.Contains(wantState, id) {
					out = append(out, id)
				}
			}
			return out
		}()},
	}
	for _, tc := range cases {
		for _, limit := range []int{1, 4, 100} {
			got, _ := walkSandboxes(t, ctx, b, tc.f, limit, false)
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s, limit %d: %v, want %v", tc.name, limit, got, tc.want)
			}
		}
		if all := ids(mustList(t, b, tc.f)); !slices.Equal(all, tc.want) {
			t.Errorf("%s: List = %v, want %v", tc.name, all, tc.want)
		}
	}
}

func mustList(t *testing.T, s store.Store, f store.ListFilter) []*store.Sandbox {
	t.Helper()
	l, err := s.List(context.Background(), f)
	if err != nil {
		t.Fatalf("List(%+v): %v", f, err)
	}
	return l
}

// HideTerminated leaves terminated rows out of every page (and pages stay
// full); State terminated lists them alone; no filter lists them all.
func testSandboxPagesHideTerminated(t *testing.T, b store.Backend) {
	ctx := context.Background()
	var live, ended, all []string
	for i := 39; i >= 0; i-- {
		id := fmt.Sprintf("sb-%02d", i)
		all = append(all, id)
		if i%4 == 0 {
			ended = append(ended, id)
		} else {
			live = append(live, id)
		}
	}
	for i := range 40 {
		sb := newSandbox(fmt.Sprintf("sb-%02d", i), "", api.StateRunning, at(i))
		if i%4 == 0 {
			mustCreate(t, b, sb)
			mustUpdate(t, b, sb.ID, terminate("deleted", at(100+i)))
			continue
		}
		if i%4 == 1 {
			sb.State = api.StateError
		}
		mustCreate(t, b, sb)
	}
	for _, limit := range []int{1, 3, 7, 100} {
		if got, _ := walkSandboxes(t, ctx, b, store.ListFilter{HideTerminated: true}, limit, false); !slices.Equal(got, live) {
			t.Errorf("HideTerminated, limit %d: %v, want %v", limit, got, live)
		}
		if got, _ := walkSandboxes(t, ctx, b, store.ListFilter{State: api.StateTerminated}, limit, false); !slices.Equal(got, ended) {
			t.Errorf("State terminated, limit %d: %v, want %v", limit, got, ended)
		}
		if got, _ := walkSandboxes(t, ctx, b, store.ListFilter{}, limit, false); !slices.Equal(got, all) {
			t.Errorf("no filter, limit %d: %v, want %v", limit, got, all)
		}
	}
}

// A tenant's pages hold its rows alone, all of them; a cursor made from
// another tenant's row (as a client could forge one) positions the list
// but never lets the other tenant's rows in.
func testSandboxPagesTenants(t *testing.T, b store.Backend) {
	a, bt, bg := asTenant("a"), asTenant("b"), context.Background()
	var wantA, wantB []string
	for i := range 30 {
		ctx, id := a, fmt.Sprintf("a-%02d", i)
		if i%3 == 0 {
			ctx, id = bt, fmt.Sprintf("b-%02d", i)
		}
		if err := b.Create(ctx, newSandbox(id, "", api.StateRunning, at(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 29; i >= 0; i-- {
		if i%3 == 0 {
			wantB = append(wantB, fmt.Sprintf("b-%02d", i))
		} else {
			wantA = append(wantA, fmt.Sprintf("a-%02d", i))
		}
	}
	for _, limit := range []int{1, 4, 50} {
		if got, _ := walkSandboxes(t, a, b, store.ListFilter{}, limit, false); !slices.Equal(got, wantA) {
			t.Errorf("tenant a, limit %d: %v, want %v", limit, got, wantA)
		}
		if got, _ := walkSandboxes(t, bt, b, store.ListFilter{}, limit, false); !slices.Equal(got, wantB) {
			t.Errorf("tenant b, limit %d: %v, want %v", limit, got, wantB)
		}
		// A Tenant filter cannot widen a request's scope.
		if got, _ := walkSandboxes(t, a, b, store.ListFilter{Tenant: "b"}, limit, false); len(got) != 0 {
			t.Errorf("tenant a asking for b's rows got %v", got)
		}
	}
	// b's page cursor, and forged cursors on b's keys, in a's hands.
	_, next, err := b.ListPage(bt, store.ListFilter{}, store.Page{Limit: 2})
	if err != nil || next == "" {
		t.Fatalf("b's first page: %q, %v", next, err)
	}
	bRow, err := b.Get(bg, "b-24")
	if err != nil {
		t.Fatal(err)
	}
	for _, cur := range []string{next, store.SandboxCursor(bRow, false), store.Cursor{Kind: store.CursorSandboxes, T: at(100).UnixNano(), ID: "zzz"}.Encode()} {
		got, _, err := b.ListPage(a, store.ListFilter{}, store.Page{Limit: 100, Cursor: cur})
		if err != nil {
			t.Fatalf("tenant a with a cursor on b's rows: %v", err)
		}
		for _, id := range ids(got) {
			if !strings.HasPrefix(id, "a-") {
				t.Errorf("tenant a's page holds %s", id)
			}
		}
	}
	// The daemon's own (unscoped) walk sees both.
	if got, _ := walkSandboxes(t, bg, b, store.ListFilter{}, 7, false); len(got) != 30 {
		t.Errorf("unscoped walk: %d rows, want 30", len(got))
	}
}

// Rows created while a client walks the pages (newer than every row it
// has seen) neither repeat a row nor push an older one out of the walk:
// the walk returns every row that existed when it started, once.
func testSandboxPagesConcurrentInserts(t *testing.T, b store.Backend) {
	ctx := context.Background()
	sandboxesAt(t, ctx, b, "old", 60, func(i int) time.Time { return at(i) }, api.StateRunning)
	want := ids(mustList(t, b, store.ListFilter{}))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var inserted int
	var insertErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Newer than every old row, as a create is.
			if err := b.Create(ctx, newSandbox(fmt.Sprintf("new-%04d", i), "", api.StateRunning, at(1000+i))); err != nil {
				insertErr = err
				return
			}
			inserted = i + 1
		}
	}()
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		page, next, err := b.ListPage(ctx, store.ListFilter{}, store.Page{Limit: 4, Cursor: cursor})
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("page %d: %v", pages+1, err)
		}
		got = append(got, ids(page)...)
		if pages == 0 {
			// Let inserts land between the pages too, on slow machines.
			time.Sleep(5 * time.Millisecond)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	close(stop)
	wg.Wait()
	if insertErr != nil {
		t.Fatalf("insert: %v", insertErr)
	}
	seen := map[string]bool{}
	var old []string
	for _, id := range got {
		if seen[id] {
			t.Errorf("%s is on two pages", id)
		}
		seen[id] = true
		if strings.HasPrefix(id, "old-") {
			old = append(old, id)
		}
	}
	if !slices.Equal(old, want) {
		t.Errorf("the walk's older rows = %v, want every one of %v, in order", old, want)
	}
	if inserted == 0 {
		t.Logf("no insert landed during the walk")
	}
}

// Snapshots page newest first, filtered by sandbox and type before the
// page is cut, scoped to the tenant.
func testSnapshotPages(t *testing.T, b store.Backend) {
	ctx := context.Background()
	var wantAll, wantSbx, wantNoSuspend []string
	for i := range 25 {
		sn := &store.Snapshot{ID: fmt.Sprintf("snap-%02d", i), Type: api.SnapshotMemory, SandboxID: fmt.Sprintf("sbx-%d", i%2),
			CreatedAt: at(i / 2), Spec: store.Spec{CPUs: 1}}
		if i%5 == 0 {
			sn.Type = "suspend"
		}
		if err := b.CreateSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	list, err := b.ListSnapshots(ctx, "")
	if err != nil || len(list) != 25 {
		t.Fatalf("ListSnapshots = %d, %v", len(list), err)
	}
	for _, sn := range list {
		wantAll = append(wantAll, sn.ID)
		if sn.SandboxID == "sbx-1" {
			wantSbx = append(wantSbx, sn.ID)
		}
		if sn.Type != "suspend" {
			wantNoSuspend = append(wantNoSuspend, sn.ID)
		}
	}
	if wantAll[0] != "snap-24" || wantAll[1] != "snap-23" || wantAll[2] != "snap-22" {
		t.Fatalf("ListSnapshots order: %v, want newest first, then the greater id", wantAll)
	}
	walk := func(ctx context.Context, f store.SnapshotFilter, limit int) []string {
		var out []string
		cursor := ""
		for range 100 {
			page, next, err := b.ListSnapshotsPage(ctx, f, store.Page{Limit: limit, Cursor: cursor})
			if err != nil {
				t.Fatalf("ListSnapshotsPage(%+v): %v", f, err)
			}
			if len(page) > limit || (next != "" && len(page) < limit) {
				t.Fatalf("page of %d rows, limit %d, next %q", len(page), limit, next)
			}
			for _, sn := range page {
				out = append(out, sn.ID)
			}
			if next == "" {
				return out
			}
			cursor = next
		}
		t.Fatal("the walk does not end")
		return nil
	}
	for _, limit := range []int{1, 4, 25, 26} {
		if got := walk(ctx, store.SnapshotFilter{}, limit); !slices.Equal(got, wantAll) {
			t.Errorf("all, limit %d: %v, want %v", limit, got, wantAll)
		}
		if got := walk(ctx, store.SnapshotFilter{SandboxID: "sbx-1"}, limit); !slices.Equal(got, wantSbx) {
			t.Errorf("of sbx-1, limit %d: %v, want %v", limit, got, wantSbx)
		}
		if got := walk(ctx, store.SnapshotFilter{ExcludeType: "suspend"}, limit); !slices.Equal(got, wantNoSuspend) {
			t.Errorf("without suspend images, limit %d: %v, want %v", limit, got, wantNoSuspend)
		}
		if got := walk(asTenant("other"), store.SnapshotFilter{}, limit); len(got) != 0 {
			t.Errorf("another tenant's walk: %v", got)
		}
	}
	page, _, err := b.ListSnapshotsPage(ctx, store.SnapshotFilter{}, store.Page{Limit: 1})
	if err != nil || len(page) != 1 {
		t.Fatal(err)
	}
	if d := recordDiff(list[0], page[0]); d != "" {
		t.Errorf("a page's snapshot differs from ListSnapshots':%s", d)
	}
}

// Conversations page the most recently updated first; one updated while a
// client walks moves to the head, and every other is still walked once.
func testConversationPages(t *testing.T, b store.Backend) {
	ctx := context.Background()
	for i := range 17 {
		c := newConversation(fmt.Sprintf("conv-%02d", i), at(i))
		c.UpdatedAt = at(100 + i/3) // three at a time share an update instant
		mustCreateConv(t, b, c)
	}
	want := mustListConvs(t, b)
	walk := func(limit int, between func(page int)) []string {
		var out []string
		cursor := ""
		for n := 0; n < 100; n++ {
			page, next, err := b.ListConversationsPage(ctx, store.Page{Limit: limit, Cursor: cursor})
			if err != nil {
				t.Fatalf("ListConversationsPage: %v", err)
			}
			if len(page) > limit || (next != "" && len(page) < limit) {
				t.Fatalf("page of %d rows, limit %d, next %q", len(page), limit, next)
			}
			for _, c := range page {
				out = append(out, c.ID)
			}
			if next == "" {
				return out
			}
			if between != nil {
				between(n)
			}
			cursor = next
		}
		t.Fatal("the walk does not end")
		return nil
	}
	for _, limit := range []int{1, 2, 5, 17, 100} {
		if got := walk(limit, nil); !slices.Equal(got, want) {
			t.Errorf("limit %d: %v, want %v", limit, got, want)
		}
	}
	// The walk's first page has been read when conv-00, the oldest, is
	// updated: it moves ahead of the cursor, and the rest are each seen once.
	got := walk(5, func(page int) {
		if page == 0 {
			c := mustGetConv(t, b, "conv-00")
			c.UpdatedAt = at(500)
			if err := b.UpdateConversation(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	})
	rest := slices.DeleteFunc(slices.Clone(want), func(id string) bool { return id == "conv-00" })
	if !slices.Equal(got, rest) {
		t.Errorf("walk with an update: %v, want %v", got, rest)
	}
	if l := mustListConvs(t, b); l[0] != "conv-00" {
		t.Errorf("after its update conv-00 is not first: %v", l)
	}
	if page, next, err := b.ListConversationsPage(asTenant("other"), store.Page{Limit: 5}); err != nil || len(page) != 0 || next != "" {
		t.Errorf("another tenant's page: %d, %q, %v", len(page), next, err)
	}
}

// The audit log pages newest first, filters before the page is cut, and
// keeps Before (an entry id) working, alone and with a cursor.
func testAuditPages(t *testing.T, b store.Backend) {
	ctx := context.Background()
	var in []store.AuditEntry
	for i := range 23 {
		ten := "acme"
		if i%4 == 0 {
			ten = "beta"
		}
		in = append(in, store.AuditEntry{At: at(i), KeyID: "key_1", Tenant: ten, Action: "POST /v1/sandboxes", Status: 201, Outcome: "ok"})
	}
	if err := b.AppendAudit(ctx, in); err != nil {
		t.Fatal(err)
	}
	walk := func(f store.AuditFilter, limit int) []int64 {
		var out []int64
		cursor := ""
		for range 100 {
			page, next, err := b.ListAuditPage(ctx, f, store.Page{Limit: limit, Cursor: cursor})
			if err != nil {
				t.Fatalf("ListAuditPage(%+v): %v", f, err)
			}
			if page == nil || len(page) > limit || (next != "" && len(page) < limit) {
				t.Fatalf("page %v of %d rows, limit %d, next %q", page == nil, len(page), limit, next)
			}
			for _, e := range page {
				out = append(out, e.ID)
			}
			if next == "" {
				return out
			}
			cursor = next
		}
		t.Fatal("the walk does not end")
		return nil
	}
	var all, acme, below []int64
	for i := 22; i >= 0; i-- {
		all = append(all, in[i].ID)
		if in[i].Tenant == "acme" {
			acme = append(acme, in[i].ID)
		}
		if in[i].ID < in[10].ID {
			below = append(below, in[i].ID)
		}
	}
	for _, limit := range []int{1, 5, 23, 1000} {
		if got := walk(store.AuditFilter{}, limit); !slices.Equal(got, all) {
			t.Errorf("all, limit %d: %v, want %v", limit, got, all)
		}
		if got := walk(store.AuditFilter{Tenant: "acme"}, limit); !slices.Equal(got, acme) {
			t.Errorf("acme, limit %d: %v, want %v", limit, got, acme)
		}
		if got := walk(store.AuditFilter{Before: in[10].ID}, limit); !slices.Equal(got, below) {
			t.Errorf("before %d, limit %d: %v, want %v", in[10].ID, limit, got, below)
		}
	}
	// ListAudit is the first page of f.Limit (100 by default).
	if l, err := b.ListAudit(ctx, store.AuditFilter{Limit: 3}); err != nil || len(l) != 3 || l[0].ID != all[0] {
		t.Fatalf("ListAudit(limit 3) = %d entries, %v", len(l), err)
	}
	if l, err := b.ListAudit(ctx, store.AuditFilter{}); err != nil || len(l) != 23 {
		t.Fatalf("ListAudit() = %d entries, %v", len(l), err)
	}
}

// A cursor that is not one this store made for that list and order is an
// invalid argument (the API's 400), never another error or another list's
// rows.
func testBadCursors(t *testing.T, b store.Backend) {
	ctx := context.Background()
	mustCreate(t, b, newSandbox("sb-1", "", api.StateRunning, at(1)))
	raw := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	good := store.Cursor{Kind: store.CursorSandboxes, T: 5, ID: "sb-1"}.Encode()
	flip := []byte(good)
	flip[len(flip)/2] ^= 0x01
	bad := map[string]string{
		"not base64":             "%%%not-base64%%%",
		"padded base64":          good + "==",
		"base64 of text":         raw("hello"),
		"empty JSON":             raw(`{}`),
		"JSON of an array":       raw(`[1,2]`),
		"unknown field":          raw(`{"v":1,"k":"sandboxes","t":5,"i":"sb-1","x":1}`),
		"other version":          raw(`{"v":2,"k":"sandboxes","t":5,"i":"sb-1"}`),
		"no id":                  raw(`{"v":1,"k":"sandboxes","t":5}`),
		"negative time":          raw(`{"v":1,"k":"sandboxes","t":-5,"i":"sb-1"}`),
		"time not a number":      raw(`{"v":1,"k":"sandboxes","t":"5","i":"sb-1"}`),
		"time beyond int64":      raw(`{"v":1,"k":"sandboxes","t":1e30,"i":"sb-1"}`),
		"id too long":            raw(`{"v":1,"k":"sandboxes","t":5,"i":"` + strings.Repeat("x", 300) + `"}`),
		"NUL in the id":          raw(`{"v":1,"k":"sandboxes","t":5,"i":"a\u0000b"}`),
		"trailing data":          raw(`{"v":1,"k":"sandboxes","t":5,"i":"sb-1"} {}`),
		"a snapshots cursor":     store.Cursor{Kind: store.CursorSnapshots, T: 5, ID: "snap-1"}.Encode(),
		"an oldest-first cursor": store.Cursor{Kind: store.CursorSandboxes, Oldest: true, T: 5, ID: "sb-1"}.Encode(),
		"too long":               strings.Repeat("A", 4096),
		"a flipped bit":          string(flip),
	}
	for name, cur := range bad {
		if name == "a flipped bit" {
			// A flipped bit may still decode (the cursor is not signed);
			// it must then be a position like any other, not an error.
			if _, _, err := b.ListPage(ctx, store.ListFilter{}, store.Page{Limit: 5, Cursor: cur}); err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s: err = %v, want none or invalid argument", name, err)
			}
			continue
		}
		_, _, err := b.ListPage(ctx, store.ListFilter{}, store.Page{Limit: 5, Cursor: cur})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "cursor: ") {
			t.Errorf("sandboxes, %s: err = %v, want an invalid argument naming the cursor", name, err)
		}
	}
	other := store.Cursor{Kind: store.CursorSandboxes, T: 5, ID: "x"}.Encode()
	if _, _, err := b.ListSnapshotsPage(ctx, store.SnapshotFilter{}, store.Page{Limit: 5, Cursor: other}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("snapshots with a sandboxes cursor: err = %v", err)
	}
	if _, _, err := b.ListConversationsPage(ctx, store.Page{Limit: 5, Cursor: other}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("conversations with a sandboxes cursor: err = %v", err)
	}
	if _, _, err := b.ListAuditPage(ctx, store.AuditFilter{}, store.Page{Limit: 5, Cursor: other}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("audit with a sandboxes cursor: err = %v", err)
	}
	if _, _, err := b.ListAuditPage(ctx, store.AuditFilter{}, store.Page{Limit: 5, Cursor: raw(`{"v":1,"k":"audit","n":0}`)}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("audit cursor of entry 0: err = %v", err)
	}
	// DecodeCursor reads back what Encode wrote.
	c := store.Cursor{Kind: store.CursorConversations, T: 7, T2: 3, ID: "conv_é"}
	if got, err := store.DecodeCursor(c.Encode(), store.CursorConversations, false); err != nil || got != c {
		t.Errorf("DecodeCursor(Encode(%+v)) = %+v, %v", c, got, err)
	}
	var js map[string]any
	dec, _ := base64.RawURLEncoding.DecodeString(c.Encode())
	if err := json.Unmarshal(dec, &js); err != nil || js["v"] != float64(1) {
		t.Errorf("a cursor is not versioned base64url JSON: %s", dec)
	}
}

// PruneTerminated removes the sandboxes terminated before the instant with
// their events and cells, and keeps the live ones, the recently terminated
// ones and the terminated ones a snapshot or a conversation still names.
func testPruneTerminated(t *testing.T, b store.Backend) {
	ctx := context.Background()
	now := at(1000)
	mk := func(id string, state api.SandboxState, terminated time.Time) {
		sb := newSandbox(id, "", api.StateRunning, at(1))
		mustCreate(t, b, sb)
		if err := b.AppendCells(ctx, []store.Cell{{ID: "cell-" + id, Tenant: api.DefaultTenant, SandboxID: id, Source: "user",
			Code: "1", Execution: json.RawMessage(`{}`), CreatedAt: at(2)}}); err != nil {
			t.Fatal(err)
		}
		if state == api.StateTerminated {
			mustUpdate(t, b, id, terminate("deleted", terminated))
		} else if state != api.StateRunning {
			mustUpdate(t, b, id, func(sb *store.Sandbox) error { sb.State = state; return nil })
		}
	}
	old, recent := now.Add(-8*24*time.Hour), now.Add(-time.Hour)
	mk("gone-1", api.StateTerminated, old)
	mk("gone-2", api.StateTerminated, old.Add(-time.Hour))
	mk("recent", api.StateTerminated, recent)
	mk("running", api.StateRunning, time.Time{})
	mk("suspended", api.StateSuspended, time.Time{})
	mk("failed", api.StateError, time.Time{})
	mk("snapped", api.StateTerminated, old)
	mk("chatted", api.StateTerminated, old)
	if err := b.CreateSnapshot(ctx, &store.Snapshot{ID: "snap-1", Type: api.SnapshotFilesystem, SandboxID: "snapped", CreatedAt: at(3)}); err != nil {
		t.Fatal(err)
	}
	c := newConversation("conv-1", at(4))
	c.SandboxID = "chatted"
	mustCreateConv(t, b, c)
	// A terminated row from before terminated_at was recorded counts from
	// its last activity.
	legacy := newSandbox("legacy", "", api.StateTerminated, old.Add(-time.Hour))
	mustCreate(t, b, legacy)

	n, err := b.PruneTerminated(ctx, now.Add(-7*24*time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("PruneTerminated = %d, %v; want 3 (gone-1, gone-2, legacy)", n, err)
	}
	for _, id := range []string{"gone-1", "gone-2", "legacy"} {
		_, err := b.Get(ctx, id)
		wantNotFound(t, "Get("+id+") after the prune", err)
		if ev := mustEvents(t, b, id); len(ev) != 0 {
			t.Errorf("%s's events outlive it: %v", id, ev)
		}
		if cells, err := b.ListCells(ctx, id); err != nil || len(cells) != 0 {
			t.Errorf("%s's cells outlive it: %d, %v", id, len(cells), err)
		}
	}
	for _, id := range []string{"recent", "running", "suspended", "failed", "snapped", "chatted"} {
		if _, err := b.Get(ctx, id); err != nil {
			t.Errorf("%s was pruned: %v", id, err)
		}
		if len(mustEvents(t, b, id)) == 0 {
			t.Errorf("%s lost its events", id)
		}
		if cells, err := b.ListCells(ctx, id); err != nil || len(cells) != 1 {
			t.Errorf("%s lost its cells: %d, %v", id, len(cells), err)
		}
	}
	// Nothing left to prune: 0, and again once the snapshot and the
	// conversation that kept two are gone, those two go.
	if n, err := b.PruneTerminated(ctx, now.Add(-7*24*time.Hour)); err != nil || n != 0 {
		t.Fatalf("second PruneTerminated = %d, %v; want 0", n, err)
	}
	if err := b.DeleteSnapshot(ctx, "snap-1"); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteConversation(ctx, "conv-1"); err != nil {
		t.Fatal(err)
	}
	if n, err := b.PruneTerminated(ctx, now.Add(-7*24*time.Hour)); err != nil || n != 2 {
		t.Fatalf("PruneTerminated once nothing names them = %d, %v; want 2", n, err)
	}
	// More than a batch: every one goes, over several transactions.
	for i := range 1203 {
		sb := newSandbox(fmt.Sprintf("many-%04d", i), "", api.StateTerminated, at(1))
		sb.TerminatedAt = &old
		mustCreate(t, b, sb)
	}
	if n, err := b.PruneTerminated(ctx, now.Add(-7*24*time.Hour)); err != nil || n != 1203 {
		t.Fatalf("PruneTerminated of 1203 = %d, %v", n, err)
	}
	left := ids(mustList(t, b, store.ListFilter{}))
	slices.Sort(left)
	if want := []string{"failed", "recent", "running", "suspended"}; !slices.Equal(left, want) {
		t.Errorf("left after the prunes: %v, want %v", left, want)
	}
}
