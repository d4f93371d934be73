package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
)

// RunConversations runs the conformance suite of store.ConversationStore.
// newStore must return a fresh, empty store each time it is called (once per
// subtest) and arrange for its closing with t.Cleanup: ConversationStore has
// no Close of its own.
//
//	func TestConversations(t *testing.T) {
//		storetest.RunConversations(t, func(t *testing.T) store.ConversationStore { return openFresh(t) })
//	}
func RunConversations(t *testing.T, newStore func(t *testing.T) store.ConversationStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.ConversationStore)
	}{
		{"CreateGet", testConvCreateGet},
		{"CreateDuplicate", testConvCreateDuplicate},
		{"GetNotFound", testConvGetNotFound},
		{"ListNewestUpdatedFirst", testConvList},
		{"Update", testConvUpdate},
		{"UpdateNotFound", testConvUpdateNotFound},
		{"AppendTurn", testAppendTurn},
		{"AppendTurnBumpsUpdatedAt", testAppendTurnBumps},
		{"AppendTurnNotFound", testAppendTurnNotFound},
		{"AppendTurnInvalidJSON", testAppendTurnInvalidJSON},
		{"AppendTurnConcurrent", testAppendTurnConcurrent},
		{"DeleteCascades", testConvDelete},
		{"DeleteNotFound", testConvDeleteNotFound},
		{"Uploads", testUploads},
		{"UploadConversation", testUploadConversation},
		{"UploadNotFound", testUploadNotFound},
		{"TimesUTC", testConvTimesUTC},
		{"TenantScoping", testConvTenantScoping},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

func newConversation(id string, created time.Time) *store.Conversation {
	return &store.Conversation{
		ID:          id,
		Tenant:      api.DefaultTenant,
		Title:       "Sales by region " + id,
		SandboxID:   "sbx_" + id,
		SandboxName: "conv-" + id,
		Model:       "gpt-4o-mini",
		CreatedAt:   created,
		UpdatedAt:   created,
	}
}

func mustCreateConv(t *testing.T, s store.ConversationStore, c *store.Conversation) {
	t.Helper()
	if err := s.CreateConversation(context.Background(), c); err != nil {
		t.Fatalf("CreateConversation(%s): %v", c.ID, err)
	}
}

func mustGetConv(t *testing.T, s store.ConversationStore, id string) *store.Conversation {
	t.Helper()
	c, err := s.GetConversation(context.Background(), id)
	if err != nil {
		t.Fatalf("GetConversation(%s): %v", id, err)
	}
	return c
}

func mustListConvs(t *testing.T, s store.ConversationStore) []string {
	t.Helper()
	list, err := s.ListConversations(context.Background())
	if err != nil {
		t.Fatalf("ListConversations: %v", err)
	}
	out := make([]string, 0, len(list))
	for _, c := range list {
		out = append(out, c.ID)
	}
	return out
}

func mustAppend(t *testing.T, s store.ConversationStore, conv string, n int, created time.Time) *store.Turn {
	t.Helper()
	tr := &store.Turn{
		ConversationID: conv,
		Turn:           json.RawMessage(fmt.Sprintf(`{"question":"q%d","answer":"a%d","images":[],"steps":[]}`, n, n)),
		Messages:       json.RawMessage(fmt.Sprintf(`[{"role":"user","content":"q%d"},{"role":"assistant","content":"a%d"}]`, n, n)),
		CreatedAt:      created,
	}
	if err := s.AppendTurn(context.Background(), tr); err != nil {
		t.Fatalf("AppendTurn(%s, %d): %v", conv, n, err)
	}
	return tr
}

func mustTurns(t *testing.T, s store.ConversationStore, conv string) []*store.Turn {
	t.Helper()
	list, err := s.ListTurns(context.Background(), conv)
	if err != nil {
		t.Fatalf("ListTurns(%s): %v", conv, err)
	}
	return list
}

func mustUploads(t *testing.T, s store.ConversationStore, conv string) []string {
	t.Helper()
	list, err := s.ListUploads(context.Background(), conv)
	if err != nil {
		t.Fatalf("ListUploads(%q): %v", conv, err)
	}
	out := make([]string, 0, len(list))
	for _, u := range list {
		out = append(out, u.ID)
	}
	return out
}

func isKind(err, kind error) bool { return err != nil && errors.Is(err, kind) }

func testConvCreateGet(t *testing.T, s store.ConversationStore) {
	c := newConversation("c1", at(1))
	c.UpdatedAt = at(2)
	mustBeFull(t, "the conversation", c)
	want := *c
	mustCreateConv(t, s, c)
	if d := recordDiff(&want, mustGetConv(t, s, "c1")); d != "" {
		t.Errorf("GetConversation differs:%s", d)
	}
	// Empty optional fields round-trip too; no tenant is the default one.
	mustCreateConv(t, s, &store.Conversation{ID: "c2", CreatedAt: at(3), UpdatedAt: at(3)})
	bare := &store.Conversation{ID: "c2", Tenant: api.DefaultTenant, CreatedAt: at(3), UpdatedAt: at(3)}
	if d := recordDiff(bare, mustGetConv(t, s, "c2")); d != "" {
		t.Errorf("bare conversation differs:%s", d)
	}
}

func testConvCreateDuplicate(t *testing.T, s store.ConversationStore) {
	mustCreateConv(t, s, newConversation("c1", at(1)))
	dup := newConversation("c1", at(5))
	dup.Title = "other"
	if err := s.CreateConversation(context.Background(), dup); !isKind(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate CreateConversation: err = %v, want conflict", err)
	}
	if d := recordDiff(newConversation("c1", at(1)), mustGetConv(t, s, "c1")); d != "" {
		t.Errorf("duplicate create changed the record:%s", d)
	}
}

func testConvGetNotFound(t *testing.T, s store.ConversationStore) {
	if _, err := s.GetConversation(context.Background(), "nope"); !isKind(err, errdefs.ErrNotFound) {
		t.Fatalf("GetConversation(unknown): err = %v, want not found", err)
	}
	if list := mustListConvs(t, s); len(list) != 0 {
		t.Errorf("ListConversations on an empty store = %v", list)
	}
}

func testConvList(t *testing.T, s store.ConversationStore) {
	// Created in one order, updated in another: the list follows UpdatedAt.
	for i, id := range []string{"c1", "c2", "c3", "c4"} {
		c := newConversation(id, at(i))
		c.UpdatedAt = at(10 + []int{3, 1, 4, 2}[i])
		mustCreateConv(t, s, c)
	}
	if got, want := mustListConvs(t, s), []string{"c3", "c1", "c4", "c2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ListConversations = %v, want %v (newest UpdatedAt first)", got, want)
	}
	// A new turn brings a conversation to the top.
	mustAppend(t, s, "c2", 1, at(20))
	if got, want := mustListConvs(t, s), []string{"c2", "c3", "c1", "c4"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after AppendTurn(c2): ListConversations = %v, want %v", got, want)
	}
	// So does an update.
	c4 := mustGetConv(t, s, "c4")
	c4.UpdatedAt = at(30)
	if err := s.UpdateConversation(context.Background(), c4); err != nil {
		t.Fatal(err)
	}
	if got, want := mustListConvs(t, s), []string{"c4", "c2", "c3", "c1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after UpdateConversation(c4): ListConversations = %v, want %v", got, want)
	}
	list, err := s.ListConversations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := newConversation("c4", at(3))
	want.UpdatedAt = at(30)
	if d := recordDiff(want, list[0]); d != "" {
		t.Errorf("listed record differs:%s", d)
	}
}

func testConvUpdate(t *testing.T, s store.ConversationStore) {
	ctx := context.Background()
	mustCreateConv(t, s, newConversation("c1", at(1)))
	mustCreateConv(t, s, newConversation("c2", at(2)))
	upd := &store.Conversation{ID: "c1", Title: "Profit by region", SandboxID: "sbx_new", SandboxName: "conv-c1",
		Model: "claude-sonnet-4", CreatedAt: at(99), UpdatedAt: at(7)}
	if err := s.UpdateConversation(ctx, upd); err != nil {
		t.Fatalf("UpdateConversation: %v", err)
	}
	want := *upd
	want.CreatedAt = at(1)          // kept
	want.Tenant = api.DefaultTenant // kept too
	if d := recordDiff(&want, mustGetConv(t, s, "c1")); d != "" {
		t.Errorf("after update:%s", d)
	}
	if d := recordDiff(newConversation("c2", at(2)), mustGetConv(t, s, "c2")); d != "" {
		t.Errorf("another conversation changed:%s", d)
	}
	// Fields can be cleared.
	upd = &store.Conversation{ID: "c1", UpdatedAt: at(8)}
	if err := s.UpdateConversation(ctx, upd); err != nil {
		t.Fatal(err)
	}
	want = store.Conversation{ID: "c1", Tenant: api.DefaultTenant, CreatedAt: at(1), UpdatedAt: at(8)}
	if d := recordDiff(&want, mustGetConv(t, s, "c1")); d != "" {
		t.Errorf("after clearing update:%s", d)
	}
}

func testConvUpdateNotFound(t *testing.T, s store.ConversationStore) {
	err := s.UpdateConversation(context.Background(), newConversation("nope", at(1)))
	if !isKind(err, errdefs.ErrNotFound) {
		t.Fatalf("UpdateConversation(unknown): err = %v, want not found", err)
	}
	if _, err := s.GetConversation(context.Background(), "nope"); !isKind(err, errdefs.ErrNotFound) {
		t.Errorf("UpdateConversation created a conversation: %v", err)
	}
}

func testAppendTurn(t *testing.T, s store.ConversationStore) {
	mustCreateConv(t, s, newConversation("c1", at(1)))
	mustCreateConv(t, s, newConversation("c2", at(1)))
	if turns := mustTurns(t, s, "c1"); len(turns) != 0 {
		t.Fatalf("ListTurns of a new conversation = %d turns", len(turns))
	}
	var want []*store.Turn
	for i := 1; i <= 3; i++ {
		tr := mustAppend(t, s, "c1", i, at(10+i))
		if tr.Seq != i {
			t.Errorf("turn %d: Seq = %d, want %d", i, tr.Seq, i)
		}
		want = append(want, tr)
		// The other conversation's numbering is its own.
		if o := mustAppend(t, s, "c2", 100+i, at(10+i)); o.Seq != i {
			t.Errorf("c2 turn %d: Seq = %d, want %d", i, o.Seq, i)
		}
	}
	mustBeFull(t, "the turn", want[0])
	if d := recordDiff(want, mustTurns(t, s, "c1")); d != "" {
		t.Errorf("ListTurns differs:%s", d)
	}
	// A turn without Messages (a failed question, say) keeps them empty; a
	// zero CreatedAt is set to the time of the append.
	before := time.Now()
	tr := &store.Turn{ConversationID: "c1", Turn: json.RawMessage(`{"question":"q","answer":"","images":[],"steps":[],"error":"provider down"}`)}
	if err := s.AppendTurn(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
	if tr.Seq != 4 {
		t.Errorf("Seq = %d, want 4", tr.Seq)
	}
	if tr.CreatedAt.Before(before.Add(-time.Second)) || tr.CreatedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("zero CreatedAt became %v, want about now", tr.CreatedAt)
	}
	// Its empty Messages stay empty (RecordOptions: an empty document is
	// only equal to an empty one).
	if d := recordDiff(append(want, tr), mustTurns(t, s, "c1")); d != "" {
		t.Errorf("ListTurns after a turn without messages differs:%s", d)
	}
	if turns := mustTurns(t, s, "nope"); len(turns) != 0 {
		t.Errorf("ListTurns(unknown) = %d turns, want none", len(turns))
	}
}

func testAppendTurnBumps(t *testing.T, s store.ConversationStore) {
	mustCreateConv(t, s, newConversation("c1", at(1)))
	mustAppend(t, s, "c1", 1, at(5))
	got := mustGetConv(t, s, "c1")
	if !got.UpdatedAt.Equal(at(5)) {
		t.Errorf("UpdatedAt after a turn at %v = %v", at(5), got.UpdatedAt)
	}
	if !got.CreatedAt.Equal(at(1)) {
		t.Errorf("CreatedAt changed to %v", got.CreatedAt)
	}
	// A turn stamped earlier than the last update does not move it back.
	mustAppend(t, s, "c1", 2, at(3))
	if got := mustGetConv(t, s, "c1"); !got.UpdatedAt.Equal(at(5)) {
		t.Errorf("UpdatedAt after an older turn = %v, want it kept at %v", got.UpdatedAt, at(5))
	}
}

func testAppendTurnNotFound(t *testing.T, s store.ConversationStore) {
	tr := &store.Turn{ConversationID: "nope", Turn: json.RawMessage(`{}`), CreatedAt: at(1)}
	if err := s.AppendTurn(context.Background(), tr); !isKind(err, errdefs.ErrNotFound) {
		t.Fatalf("AppendTurn(unknown conversation): err = %v, want not found", err)
	}
	if tr.Seq != 0 {
		t.Errorf("a failed append set Seq = %d", tr.Seq)
	}
	if turns := mustTurns(t, s, "nope"); len(turns) != 0 {
		t.Errorf("turns stored for an unknown conversation: %d", len(turns))
	}
}

func testAppendTurnInvalidJSON(t *testing.T, s store.ConversationStore) {
	mustCreateConv(t, s, newConversation("c1", at(1)))
	for _, tr := range []*store.Turn{
		{ConversationID: "c1", Turn: json.RawMessage(`{"question":`), CreatedAt: at(2)},
		{ConversationID: "c1", Turn: json.RawMessage(`{}`), Messages: json.RawMessage(`[1,`), CreatedAt: at(2)},
	} {
		if err := s.AppendTurn(context.Background(), tr); !isKind(err, errdefs.ErrInvalidArgument) {
			t.Errorf("AppendTurn(%s, %s): err = %v, want invalid argument", tr.Turn, tr.Messages, err)
		}
	}
	if turns := mustTurns(t, s, "c1"); len(turns) != 0 {
		t.Errorf("invalid turns were stored: %d", len(turns))
	}
}

func testAppendTurnConcurrent(t *testing.T, s store.ConversationStore) {
	const (
		workers = 16
		rounds  = 5
	)
	mustCreateConv(t, s, newConversation("c1", at(1)))
	mustCreateConv(t, s, newConversation("c2", at(1)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		start = make(chan struct{})
		// assigned[conv][seq] is the body of the turn that got seq.
		assigned = map[string]map[int]string{"c1": {}, "c2": {}}
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for r := range rounds {
				conv := "c1"
				if w%4 == 3 {
					conv = "c2"
				}
				body := fmt.Sprintf(`{"worker":%d,"round":%d}`, w, r)
				tr := &store.Turn{ConversationID: conv, Turn: json.RawMessage(body), CreatedAt: at(10 + w*rounds + r)}
				if err := s.AppendTurn(ctx, tr); err != nil {
					t.Errorf("concurrent AppendTurn: %v", err)
					return
				}
				mu.Lock()
				if prev, dup := assigned[conv][tr.Seq]; dup {
					t.Errorf("%s: Seq %d given to both %s and %s", conv, tr.Seq, prev, body)
				}
				assigned[conv][tr.Seq] = body
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	for conv, byseq := range assigned {
		turns := mustTurns(t, s, conv)
		if len(turns) != len(byseq) {
			t.Errorf("%s: %d turns stored, %d appended", conv, len(turns), len(byseq))
		}
		var seqs []int
		for i, tr := range turns {
			seqs = append(seqs, tr.Seq)
			if tr.Seq != i+1 {
				t.Errorf("%s: turn %d has Seq %d: want 1, 2, 3… without gaps", conv, i, tr.Seq)
			}
			if body, ok := byseq[tr.Seq]; !ok || !rawEqual(json.RawMessage(body), tr.Turn) {
				t.Errorf("%s: turn %d is %s, but AppendTurn gave that Seq to %s", conv, tr.Seq, tr.Turn, body)
			}
		}
		if !sort.IntsAreSorted(seqs) {
			t.Errorf("%s: ListTurns not by Seq: %v", conv, seqs)
		}
	}
	// UpdatedAt is the latest turn's CreatedAt, whatever the commit order.
	latest := at(10 + (workers-1)*rounds + rounds - 1) // worker 15 appends to c2
	if got := mustGetConv(t, s, "c2"); !got.UpdatedAt.Equal(latest) {
		t.Errorf("c2 UpdatedAt = %v, want the latest turn's %v", got.UpdatedAt, latest)
	}
}

func testConvDelete(t *testing.T, s store.ConversationStore) {
	ctx := context.Background()
	mustCreateConv(t, s, newConversation("c1", at(1)))
	mustCreateConv(t, s, newConversation("c2", at(2)))
	for i := 1; i <= 3; i++ {
		mustAppend(t, s, "c1", i, at(10+i))
	}
	mustAppend(t, s, "c2", 1, at(20))
	for i, conv := range []string{"c1", "c1", "c2", ""} {
		u := newUpload(fmt.Sprintf("file_%d", i), conv, at(30+i))
		if err := s.CreateUpload(ctx, u); err != nil {
			t.Fatal(err)
		}
	}

	if err := s.DeleteConversation(ctx, "c1"); err != nil {
		t.Fatalf("DeleteConversation: %v", err)
	}
	if _, err := s.GetConversation(ctx, "c1"); !isKind(err, errdefs.ErrNotFound) {
		t.Errorf("GetConversation after delete: err = %v, want not found", err)
	}
	if got := mustListConvs(t, s); !reflect.DeepEqual(got, []string{"c2"}) {
		t.Errorf("ListConversations after delete = %v", got)
	}
	if turns := mustTurns(t, s, "c1"); len(turns) != 0 {
		t.Errorf("%d turns left after delete", len(turns))
	}
	if turns := mustTurns(t, s, "c2"); len(turns) != 1 {
		t.Errorf("the other conversation has %d turns, want 1", len(turns))
	}
	// The uploads stay, detached.
	if got := mustUploads(t, s, "c1"); len(got) != 0 {
		t.Errorf("uploads still attached to the deleted conversation: %v", got)
	}
	if got := mustUploads(t, s, ""); !reflect.DeepEqual(got, []string{"file_0", "file_1", "file_2", "file_3"}) {
		t.Errorf("all uploads after delete = %v", got)
	}
	for i, id := range []string{"file_0", "file_1"} {
		u, err := s.GetUpload(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d := recordDiff(newUpload(id, "", at(30+i)), u); d != "" {
			t.Errorf("%s after its conversation was deleted:%s", id, d)
		}
	}
	if got := mustUploads(t, s, "c2"); !reflect.DeepEqual(got, []string{"file_2"}) {
		t.Errorf("c2 uploads = %v", got)
	}
	// The id can be used again, and its turns start over.
	mustCreateConv(t, s, newConversation("c1", at(40)))
	if turns := mustTurns(t, s, "c1"); len(turns) != 0 {
		t.Errorf("a re-created conversation has %d old turns", len(turns))
	}
	if tr := mustAppend(t, s, "c1", 1, at(41)); tr.Seq != 1 {
		t.Errorf("re-created conversation's first turn: Seq = %d, want 1", tr.Seq)
	}
}

func testConvDeleteNotFound(t *testing.T, s store.ConversationStore) {
	ctx := context.Background()
	if err := s.DeleteConversation(ctx, "nope"); !isKind(err, errdefs.ErrNotFound) {
		t.Fatalf("DeleteConversation(unknown): err = %v, want not found", err)
	}
	mustCreateConv(t, s, newConversation("c1", at(1)))
	if err := s.DeleteConversation(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteConversation(ctx, "c1"); !isKind(err, errdefs.ErrNotFound) {
		t.Fatalf("second DeleteConversation: err = %v, want not found", err)
	}
}

func newUpload(id, conv string, created time.Time) *store.Upload {
	return &store.Upload{
		ID:             id,
		Tenant:         api.DefaultTenant,
		Name:           "sales-" + id + ".csv",
		SizeBytes:      123456,
		SHA256:         "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Columns:        []string{"date", "product", "region", "units_sold", "revenue", "cost"},
		Rows:           1000,
		ConversationID: conv,
		CreatedAt:      created,
	}
}

func testUploads(t *testing.T, s store.ConversationStore) {
	ctx := context.Background()
	mustCreateConv(t, s, newConversation("c1", at(1)))
	// Created out of order: lists are oldest first.
	ups := []*store.Upload{
		newUpload("file_b", "c1", at(12)),
		newUpload("file_a", "", at(11)),
		newUpload("file_c", "c1", at(10)),
		{ID: "file_d", Name: "empty.csv", CreatedAt: at(13)}, // no columns, no rows
	}
	ups[1].Columns = []string{"a,b", "ü \"quoted\"", ""}
	mustBeFull(t, "the upload", ups[0])
	want := map[string]*store.Upload{}
	for _, u := range ups {
		w := *u
		if w.Tenant == "" {
			w.Tenant = api.DefaultTenant
		}
		want[u.ID] = &w
		if err := s.CreateUpload(ctx, u); err != nil {
			t.Fatalf("CreateUpload(%s): %v", u.ID, err)
		}
	}
	for _, u := range ups {
		got, err := s.GetUpload(ctx, u.ID)
		if err != nil {
			t.Fatalf("GetUpload(%s): %v", u.ID, err)
		}
		if d := recordDiff(want[u.ID], got); d != "" {
			t.Errorf("%s differs:%s", u.ID, d)
		}
	}
	if err := s.CreateUpload(ctx, newUpload("file_a", "", at(20))); !isKind(err, errdefs.ErrConflict) {
		t.Errorf("duplicate CreateUpload: err = %v, want conflict", err)
	}
	if got := mustUploads(t, s, ""); !reflect.DeepEqual(got, []string{"file_c", "file_a", "file_b", "file_d"}) {
		t.Errorf("ListUploads(all) = %v, want oldest first", got)
	}
	if got := mustUploads(t, s, "c1"); !reflect.DeepEqual(got, []string{"file_c", "file_b"}) {
		t.Errorf("ListUploads(c1) = %v, want oldest first", got)
	}
	list, err := s.ListUploads(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if d := recordDiff([]*store.Upload{want["file_c"], want["file_b"]}, list); d != "" {
		t.Errorf("listed uploads differ:%s", d)
	}
	if got := mustUploads(t, s, "nope"); len(got) != 0 {
		t.Errorf("ListUploads(unknown) = %v", got)
	}
	// An upload for an unknown conversation is refused.
	if err := s.CreateUpload(ctx, newUpload("file_x", "nope", at(30))); !isKind(err, errdefs.ErrNotFound) {
		t.Errorf("CreateUpload for an unknown conversation: err = %v, want not found", err)
	}
	if _, err := s.GetUpload(ctx, "file_x"); !isKind(err, errdefs.ErrNotFound) {
		t.Errorf("refused upload was stored: %v", err)
	}
}

func testUploadConversation(t *testing.T, s store.ConversationStore) {
	ctx := context.Background()
	mustCreateConv(t, s, newConversation("c1", at(1)))
	mustCreateConv(t, s, newConversation("c2", at(2)))
	if err := s.CreateUpload(ctx, newUpload("file_1", "", at(10))); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateUpload(ctx, newUpload("file_2", "c1", at(11))); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUploadConversation(ctx, "file_1", "c1"); err != nil {
		t.Fatalf("SetUploadConversation: %v", err)
	}
	if got := mustUploads(t, s, "c1"); !reflect.DeepEqual(got, []string{"file_1", "file_2"}) {
		t.Errorf("c1 uploads = %v", got)
	}
	// Moved to another conversation, then detached.
	if err := s.SetUploadConversation(ctx, "file_2", "c2"); err != nil {
		t.Fatal(err)
	}
	if got := mustUploads(t, s, "c2"); !reflect.DeepEqual(got, []string{"file_2"}) {
		t.Errorf("c2 uploads = %v", got)
	}
	if err := s.SetUploadConversation(ctx, "file_1", ""); err != nil {
		t.Fatal(err)
	}
	if got := mustUploads(t, s, "c1"); len(got) != 0 {
		t.Errorf("c1 uploads after detaching = %v", got)
	}
	u, err := s.GetUpload(ctx, "file_1")
	if err != nil {
		t.Fatal(err)
	}
	if d := recordDiff(newUpload("file_1", "", at(10)), u); d != "" {
		t.Errorf("detached upload:%s", d)
	}
	// Unknown upload, unknown conversation.
	if err := s.SetUploadConversation(ctx, "nope", "c1"); !isKind(err, errdefs.ErrNotFound) {
		t.Errorf("SetUploadConversation(unknown upload): err = %v, want not found", err)
	}
	if err := s.SetUploadConversation(ctx, "file_2", "nope"); !isKind(err, errdefs.ErrNotFound) {
		t.Errorf("SetUploadConversation(unknown conversation): err = %v, want not found", err)
	}
	if u, err := s.GetUpload(ctx, "file_2"); err != nil {
		t.Error(err)
	} else if d := recordDiff(newUpload("file_2", "c2", at(11)), u); d != "" {
		t.Errorf("a refused SetUploadConversation changed the upload:%s", d)
	}
}

func testUploadNotFound(t *testing.T, s store.ConversationStore) {
	if _, err := s.GetUpload(context.Background(), "nope"); !isKind(err, errdefs.ErrNotFound) {
		t.Fatalf("GetUpload(unknown): err = %v, want not found", err)
	}
	if got := mustUploads(t, s, ""); len(got) != 0 {
		t.Errorf("ListUploads on an empty store = %v", got)
	}
}

func testConvTimesUTC(t *testing.T, s store.ConversationStore) {
	ctx := context.Background()
	zone := time.FixedZone("UTC-03:00", -3*3600)
	created := time.Date(2031, 12, 31, 23, 59, 59, 999999999, zone)
	now := time.Now() // with a monotonic reading
	c := &store.Conversation{ID: "c1", CreatedAt: created, UpdatedAt: now}
	mustCreateConv(t, s, c)
	turn := &store.Turn{ConversationID: "c1", Turn: json.RawMessage(`{}`), CreatedAt: created.Add(1)}
	if err := s.AppendTurn(ctx, turn); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateUpload(ctx, newUpload("file_1", "c1", created.Add(2))); err != nil {
		t.Fatal(err)
	}
	check := func(what string, got, want time.Time) {
		t.Helper()
		if !got.Equal(want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
		if got.Location() != time.UTC {
			t.Errorf("%s location = %v, want UTC", what, got.Location())
		}
	}
	got := mustGetConv(t, s, "c1")
	check("CreatedAt", got.CreatedAt, created)
	check("UpdatedAt", got.UpdatedAt, created.Add(1)) // the turn is later than now
	turns := mustTurns(t, s, "c1")
	if len(turns) != 1 {
		t.Fatalf("%d turns", len(turns))
	}
	check("Turn.CreatedAt", turns[0].CreatedAt, created.Add(1))
	u, err := s.GetUpload(ctx, "file_1")
	if err != nil {
		t.Fatal(err)
	}
	check("Upload.CreatedAt", u.CreatedAt, created.Add(2))
	list, err := s.ListConversations(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("ListConversations = %v, %v", list, err)
	}
	check("listed UpdatedAt", list[0].UpdatedAt, created.Add(1))
}
