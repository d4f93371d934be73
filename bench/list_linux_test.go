package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/store"
)

const (
	listRecords    = 2000 // sandbox records in the daemon's store
	listTerminated = 1500 // of them terminated (as a busy daemon's are)
	listSuspended  = 300  // suspended; the rest "running"
	listLimit      = 100
	listSamples    = 300
	listWarmups    = 20
	listTargetMS   = 50 // target: a page of listLimit, p99
)

// BenchmarkListPage measures GET /v1/sandboxes?limit=100 through a real
// daemon's HTTP API with 2,000 sandbox records in its store (1,500
// terminated, 300 suspended, 200 running, written to its SQLite database
// directly: no processes behind them), 300 calls after 20 warm-ups each:
// the default list's first page (live sandboxes only), the first page with
// the terminated ones, and a page deep in the list (its cursor taken from a
// walk). One more row, for reference, walks all 2,000 records by pages of
// 1,000 (what one unpaged list cost before). Every timed answer is checked
// to hold a full page and a next cursor. The target is the acceptance of
// paged lists: a page of the requested size in under 50 ms, p99.
func BenchmarkListPage(b *testing.B) {
	bin := forkboxBinary(b)
	if !servesFlag(b, bin, "--retain-terminated") {
		skip(b, "the forkbox binary predates paged lists (no serve --retain-terminated)")
	}
	d := startDaemon(b, false)
	seedListRecords(b, filepath.Join(d.dir, "data", "forkbox.db"))
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}}
	get := func(ctx context.Context, q url.Values) (api.SandboxList, int, error) {
		var l api.SandboxList
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/v1/sandboxes?"+q.Encode(), nil)
		if err != nil {
			return l, 0, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return l, 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return l, 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return l, 0, fmt.Errorf("GET /v1/sandboxes?%s: %d %s", q.Encode(), resp.StatusCode, body)
		}
		return l, len(body), json.Unmarshal(body, &l)
	}

	// A cursor deep in the list: after page 10 of all the records.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	deep := url.Values{"include_terminated": {"true"}, "limit": {fmt.Sprint(listLimit)}}
	for range 10 {
		l, _, err := get(ctx, deep)
		if err != nil || l.NextCursor == "" {
			b.Fatalf("walking to page 11: %v (next %q)", err, l.NextCursor)
		}
		deep.Set("cursor", l.NextCursor)
	}

	tableHeader(fmt.Sprintf("GET /v1/sandboxes with %d records (%d terminated)", listRecords, listTerminated), "page", "n", "p50 ms", "p99 ms", "mean ms", "bytes",
		fmt.Sprintf("target p99 ≤ %d ms", listTargetMS))
	for _, c := range []struct {
		name, label string
		q           url.Values
	}{
		{"live", fmt.Sprintf("first page of %d, terminated hidden (the default)", listLimit), url.Values{"limit": {fmt.Sprint(listLimit)}}},
		{"all", fmt.Sprintf("first page of %d, include_terminated", listLimit), url.Values{"limit": {fmt.Sprint(listLimit)}, "include_terminated": {"true"}}},
		{"deep", fmt.Sprintf("page 11 of %d, include_terminated (a cursor)", listLimit), deep},
	} {
		b.Run(c.name, func(b *testing.B) {
			hideNsPerOp(b)
			var s samples
			size := 0
			for i := range listWarmups + listSamples {
				t := time.Now()
				l, n, err := get(ctx, c.q)
				took := time.Since(t)
				if err != nil {
					b.Fatal(err)
				}
				if len(l.Sandboxes) != listLimit || l.NextCursor == "" {
					b.Fatalf("%s: a page of %d (next %q), want a full page of %d", c.name, len(l.Sandboxes), l.NextCursor, listLimit)
				}
				if i >= listWarmups {
					s = append(s, took)
					size = n
				}
			}
			s.report(b, "")
			b.ReportMetric(s.percentile(99), "p99-ms")
			tableRow(c.label, fmt.Sprint(len(s)), f(s.p50()), f(s.percentile(99)), f(s.mean()), fmt.Sprint(size), verdict(s.percentile(99), listTargetMS))
		})
	}
	// Reference: every record, walked by pages of 1,000.
	b.Run("walk-all", func(b *testing.B) {
		hideNsPerOp(b)
		var s samples
		bytes := 0
		for i := range 3 + 20 {
			q := url.Values{"include_terminated": {"true"}, "limit": {"1000"}}
			t := time.Now()
			n, total := 0, 0
			for {
				l, size, err := get(ctx, q)
				if err != nil {
					b.Fatal(err)
				}
				n += len(l.Sandboxes)
				total += size
				if l.NextCursor == "" {
					break
				}
				q.Set("cursor", l.NextCursor)
			}
			took := time.Since(t)
			if n != listRecords {
				b.Fatalf("the walk saw %d records, want %d", n, listRecords)
			}
			if i >= 3 {
				s = append(s, took)
				bytes = total
			}
		}
		s.report(b, "")
		tableRow(fmt.Sprintf("reference: all %d records, by pages of 1,000", listRecords), fmt.Sprint(len(s)), f(s.p50()), f(s.percentile(99)), f(s.mean()), fmt.Sprint(bytes), "–")
	})
}

// seedListRecords writes the benchmark's sandbox records into the running
// daemon's SQLite database (the store takes turns with the daemon's own
// connection), one a millisecond apart, each with its creation event (and
// the terminated ones with their end).
func seedListRecords(b *testing.B, path string) {
	b.Helper()
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, path)
	if err != nil {
		b.Fatalf("open the daemon's store: %v", err)
	}
	defer st.Close()
	t0 := time.Now().Add(-listRecords * time.Millisecond)
	for i := range listRecords {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		sb := &store.Sandbox{ID: fmt.Sprintf("sbx_bench%015d", i), Name: fmt.Sprintf("bench-%d", i), State: api.StateRunning,
			Image: "python", Spec: store.Spec{CPUs: 1, MemoryMB: 1024, DiskMB: 2048, PIDsLimit: 512, TimeoutSecs: 300,
				Labels: map[string]string{"suite": "bench-list"}},
			CreatedAt: at, LastActiveAt: at}
		// Three in four terminated; of the others, three in five suspended.
		switch {
		case i%4 != 3:
			end := at.Add(time.Millisecond)
			sb.State, sb.StateReason, sb.TerminatedAt, sb.Name = api.StateTerminated, "deleted", &end, ""
		case (i/4)%5 < 3:
			sb.State = api.StateSuspended
		}
		if err := st.Create(ctx, sb); err != nil {
			b.Fatalf("seed %s: %v", sb.ID, err)
		}
	}
	n := map[api.SandboxState]int{}
	all, err := st.List(ctx, store.ListFilter{})
	if err != nil {
		b.Fatal(err)
	}
	for _, sb := range all {
		n[sb.State]++
	}
	b.Logf("seeded %d records: %v", len(all), n)
	if len(all) != listRecords || n[api.StateTerminated] != listTerminated || n[api.StateSuspended] != listSuspended {
		b.Fatalf("seeded %v, want %d records, %d terminated, %d suspended", n, listRecords, listTerminated, listSuspended)
	}
	// The records have no processes: at the end they are ended in the store
	// itself, so that the daemon's cleanup (a delete through the API of
	// every live sandbox) has none of them to go through.
	b.Cleanup(func() {
		st, err := store.OpenSQLite(ctx, path)
		if err != nil {
			b.Errorf("cleanup: open the daemon's store: %v", err)
			return
		}
		defer st.Close()
		for _, sb := range all {
			if sb.State == api.StateTerminated {
				continue
			}
			if _, err := st.Update(ctx, sb.ID, func(sb *store.Sandbox) error {
				now := time.Now()
				sb.State, sb.StateReason, sb.TerminatedAt = api.StateTerminated, "benchmark over", &now
				return nil
			}); err != nil {
				b.Errorf("cleanup: end %s: %v", sb.ID, err)
			}
		}
	})
}
