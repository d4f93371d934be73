package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

// pagingCLI runs the forkbox binary against daemon d, stdout and stderr
// apart.
func pagingCLI(t *testing.T, d *daemon, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "FORKBOX_URL=http://"+d.addr)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// walkAPI follows GET path?query's next_cursor from the first page, by
// pages of limit, failing on a page over the limit, a short page before
// the last, or a walk that does not end; between runs after each page but
// the last.
func walkAPI(t *testing.T, d *daemon, path string, q url.Values, key string, limit int, between func(page int)) (ids []string, pages int) {
	t.Helper()
	q = cloneValues(q)
	q.Set("limit", fmt.Sprint(limit))
	for pages < 1000 {
		status, e, raw := call(t, d, "GET", path+"?"+q.Encode(), "", nil)
		if status != 200 {
			t.Fatalf("GET %s?%s: %d %+v", path, q.Encode(), status, e)
		}
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, raw)
		}
		var items []struct {
			ID string `json:"id"`
		}
		var next string
		if err := json.Unmarshal(doc[key], &items); err != nil || items == nil {
			t.Fatalf("GET %s: no %s array in %s", path, key, raw)
		}
		if c, ok := doc["next_cursor"]; ok {
			json.Unmarshal(c, &next)
		}
		pages++
		if len(items) > limit || (next != "" && len(items) < limit) {
			t.Fatalf("GET %s page %d: %d items (limit %d), next %q", path, pages, len(items), limit, next)
		}
		for _, it := range items {
			ids = append(ids, it.ID)
		}
		if next == "" {
			return ids, pages
		}
		if between != nil {
			between(pages)
		}
		q.Set("cursor", next)
	}
	t.Fatalf("GET %s: the walk does not end", path)
	return nil, 0
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = slices.Clone(v)
	}
	return out
}

// A daemon's lists come in pages: enough sandboxes for several pages of a
// small limit are walked through the API (newest first, terminated ones
// only when asked for, nothing missing or twice, a sandbox created during
// the walk not pushing an older one out), through the CLI (forkbox ls and
// snapshots ask for every page) and the Go SDK; a bad cursor or limit is a
// 400. A restart with a short --retain-terminated prunes the terminated
// records, but keeps the one a snapshot names.
func TestPagingLists(t *testing.T) {
	needRoot(t)
	d, err := startDaemon(filepath.Join(t.TempDir(), "paging"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			d.deleteAll()
			d.stop()
		}
	})
	ctx := ctxT(t)

	// 13 sandboxes, created a few at a time.
	const n = 13
	ids := make([]string, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMB: i64(128), Labels: map[string]string{"suite": "paging"}})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			ids[i] = sb.ID
			mu.Unlock()
		}()
		if i%3 == 2 {
			wg.Wait()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	all, err := d.c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil || len(all.Sandboxes) != n {
		t.Fatalf("ListSandboxes: %d, %v; want %d", len(all.Sandboxes), err, n)
	}
	newest := make([]string, 0, n)
	for i, sb := range all.Sandboxes {
		newest = append(newest, sb.ID)
		if i > 0 && sb.CreatedAt.After(all.Sandboxes[i-1].CreatedAt) {
			t.Fatalf("ListSandboxes is not newest first at %d: %v after %v", i, sb.CreatedAt, all.Sandboxes[i-1].CreatedAt)
		}
	}
	// Three terminated: hidden unless asked for.
	var ended []string
	for _, i := range []int{2, 6, 10} {
		if _, err := d.c.DeleteSandbox(ctx, newest[i]); err != nil {
			t.Fatal(err)
		}
		ended = append(ended, newest[i])
	}
	live := slices.DeleteFunc(slices.Clone(newest), func(id string) bool { return slices.Contains(ended, id) })

	for _, limit := range []int{1, 4, 10} {
		if got, pages := walkAPI(t, d, "/v1/sandboxes", nil, "sandboxes", limit, nil); !slices.Equal(got, live) || pages != (len(live)+limit-1)/limit {
			t.Errorf("limit %d: %d pages %v, want %v", limit, pages, got, live)
		}
		if got, _ := walkAPI(t, d, "/v1/sandboxes", url.Values{"include_terminated": {"true"}}, "sandboxes", limit, nil); !slices.Equal(got, newest) {
			t.Errorf("include_terminated, limit %d: %v, want %v", limit, got, newest)
		}
		if got, _ := walkAPI(t, d, "/v1/sandboxes", url.Values{"state": {"terminated"}}, "sandboxes", limit, nil); !slices.Equal(got, ended) {
			t.Errorf("state=terminated, limit %d: %v, want %v", limit, got, ended)
		}
	}
	// A sandbox created between two pages is newer than the cursor: not in
	// this walk, and no older one is missed or repeated.
	var extra string
	got, _ := walkAPI(t, d, "/v1/sandboxes", url.Values{"label": {"suite:paging"}}, "sandboxes", 3, func(page int) {
		if page == 1 {
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMB: i64(128), Labels: map[string]string{"suite": "paging"}})
			if err != nil {
				t.Fatal(err)
			}
			extra = sb.ID
		}
	})
	if !slices.Equal(got, live) {
		t.Errorf("walk with a create after page 1: %v, want %v", got, live)
	}
	live = append([]string{extra}, live...)
	newest = append([]string{extra}, newest...)
	for _, q := range []url.Values{{"limit": {"0"}}, {"limit": {"1001"}}, {"limit": {"x"}}, {"cursor": {"not-a-cursor"}}, {"include_terminated": {"perhaps"}}} {
		status, e, _ := call(t, d, "GET", "/v1/sandboxes?"+q.Encode(), "", nil)
		name, _, _ := strings.Cut(q.Encode(), "=")
		if status != 400 || e.Code != "invalid_argument" || !strings.HasPrefix(e.Message, name+": ") {
			t.Errorf("?%s: %d %+v, want a 400 naming %s", q.Encode(), status, e, name)
		}
	}
	// A snapshots cursor is not a sandboxes one.
	sbCursor := ""
	{
		_, _, raw := call(t, d, "GET", "/v1/sandboxes?limit=1", "", nil)
		var l api.SandboxList
		json.Unmarshal(raw, &l)
		sbCursor = l.NextCursor
	}
	if status, e, _ := call(t, d, "GET", "/v1/snapshots?cursor="+url.QueryEscape(sbCursor), "", nil); sbCursor == "" || status != 400 || !strings.HasPrefix(e.Message, "cursor: ") {
		t.Errorf("a sandboxes cursor on /v1/snapshots: %q %d %+v", sbCursor, status, e)
	}

	// The CLI asks for every page: by pages of 2, ls lists them all once.
	out, errOut, err := pagingCLI(t, d, "--page-size", "2", "--json", "ls")
	var cl api.SandboxList
	if err != nil || json.Unmarshal([]byte(out), &cl) != nil {
		t.Fatalf("forkbox --page-size 2 --json ls: %v\n%s\n%s", err, out, errOut)
	}
	var cliIDs []string
	for _, sb := range cl.Sandboxes {
		cliIDs = append(cliIDs, sb.ID)
	}
	if !slices.Equal(cliIDs, live) || cl.NextCursor != "" {
		t.Errorf("forkbox --page-size 2 --json ls: %v, want %v", cliIDs, live)
	}
	out, errOut, err = pagingCLI(t, d, "--page-size", "2", "ls")
	if err != nil || !strings.Contains(errOut, "terminated sandboxes hidden; --all shows them") {
		t.Errorf("forkbox ls: %v\n%s\nstderr %q", err, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")[1:]
	cliIDs = nil
	for _, l := range lines {
		cliIDs = append(cliIDs, strings.Fields(l)[0])
	}
	if !slices.Equal(cliIDs, live) {
		t.Errorf("forkbox --page-size 2 ls: %v, want %v", cliIDs, live)
	}
	out, errOut, err = pagingCLI(t, d, "--page-size", "3", "ls", "--all")
	cliIDs = nil
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		cliIDs = append(cliIDs, strings.Fields(l)[0])
	}
	if err != nil || errOut != "" || !slices.Equal(cliIDs, newest) {
		t.Errorf("forkbox --page-size 3 ls --all: %v %v, want %v\nstderr %q", err, cliIDs, newest, errOut)
	}
	// The Go SDK by pages of 4 too.
	small := client.New("http://"+d.addr, client.WithPageLimit(4))
	if l, err := small.ListSandboxes(ctx, client.ListOptions{IncludeTerminated: true}); err != nil || len(l.Sandboxes) != len(newest) {
		t.Errorf("Go SDK by pages of 4: %d, %v; want %d", len(l.Sandboxes), err, len(newest))
	}

	// Snapshots: five of one sandbox, walked by pages of 2 (API and CLI).
	src := live[len(live)-1]
	var snaps []string
	for i := range 5 {
		sn, err := d.c.Checkpoint(ctx, src, api.CheckpointRequest{Name: fmt.Sprintf("p%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		snaps = append([]string{sn.ID}, snaps...)
	}
	if got, pages := walkAPI(t, d, "/v1/snapshots", nil, "snapshots", 2, nil); !slices.Equal(got, snaps) || pages != 3 {
		t.Errorf("snapshots by 2: %d pages %v, want %v", pages, got, snaps)
	}
	out, errOut, err = pagingCLI(t, d, "--page-size", "2", "snapshots", "--flat")
	cliIDs = nil
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		cliIDs = append(cliIDs, strings.Fields(l)[0])
	}
	if err != nil || !slices.Equal(cliIDs, snaps) {
		t.Errorf("forkbox --page-size 2 snapshots --flat: %v %v, want %v\n%s", err, cliIDs, snaps, errOut)
	}

	// Retention: terminated records older than --retain-terminated go at
	// the daemon's start, but not one a snapshot names.
	if _, err := d.c.DeleteSandbox(ctx, src); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	d.stop()
	d.args = append(d.args, "--retain-terminated", "1s")
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var left []string
	for {
		left, _ = walkAPI(t, d, "/v1/sandboxes", url.Values{"state": {"terminated"}}, "sandboxes", 100, nil)
		if slices.Equal(left, []string{src}) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !slices.Equal(left, []string{src}) {
		t.Errorf("terminated after a start with --retain-terminated 1s: %v, want only %s (its snapshots name it)", left, src)
	}
	for _, id := range ended {
		if status, _, _ := call(t, d, "GET", "/v1/sandboxes/"+id, "", nil); status != 404 {
			t.Errorf("pruned %s: GET %d, want 404", id, status)
		}
	}
	if got, _ := walkAPI(t, d, "/v1/sandboxes", nil, "sandboxes", 5, nil); len(got) != len(live)-1 {
		t.Errorf("live sandboxes after the prune: %v, want %d", got, len(live)-1)
	}
	if !strings.Contains(d.logTail(), "pruned terminated sandboxes' records") {
		t.Errorf("the prune was not logged:\n%s", d.logTail())
	}
}
