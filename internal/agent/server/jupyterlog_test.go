package server

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
)

func logMsg(content string) wire.JupyterMessage {
	return wire.JupyterMessage{Channel: "iopub", Header: json.RawMessage(`{}`), Parent: json.RawMessage(`{}`),
		Metadata: json.RawMessage(`{}`), Content: json.RawMessage(content)}
}

func seqs(ans *wire.JupyterRecvAnswer) []int64 {
	out := []int64{}
	for _, m := range ans.Messages {
		out = append(out, m.Seq)
	}
	return out
}

// wantAnswer checks an answer's head, dropped count and message seqs.
func wantAnswer(t *testing.T, ans *wire.JupyterRecvAnswer, head, dropped int64, want ...int64) {
	t.Helper()
	if want == nil {
		want = []int64{}
	}
	if ans.Head != head || ans.Dropped != dropped || !reflect.DeepEqual(seqs(ans), want) {
		t.Errorf("answer head %d dropped %d seqs %v; want head %d dropped %d seqs %v", ans.Head, ans.Dropped, seqs(ans), head, dropped, want)
	}
}

// waiting blocks until n reads wait on l.
func waiting(t *testing.T, l *jupyterLog, n int) {
	t.Helper()
	for range 30000 {
		l.mu.Lock()
		w := l.waiters
		l.mu.Unlock()
		if w == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d reads never waited", n)
}

// readAsync runs read in the background.
func readAsync(ctx context.Context, l *jupyterLog, after int64, wait time.Duration) <-chan *wire.JupyterRecvAnswer {
	ch := make(chan *wire.JupyterRecvAnswer, 1)
	go func() { ch <- l.read(ctx, after, wait) }()
	return ch
}

func answered(t *testing.T, ch <-chan *wire.JupyterRecvAnswer) *wire.JupyterRecvAnswer {
	t.Helper()
	select {
	case ans := <-ch:
		return ans
	case <-time.After(30 * time.Second):
		t.Fatal("the read did not return")
		return nil
	}
}

func TestJupyterLogSeqAndCursor(t *testing.T) {
	l := newJupyterLog()
	ctx := context.Background()
	wantAnswer(t, l.read(ctx, 0, 0), 0, 0)
	wantAnswer(t, l.read(ctx, -1, time.Hour), 0, 0)
	for range 3 {
		l.add(logMsg(`{"n":1}`))
	}
	ans := l.read(ctx, 0, time.Hour)
	wantAnswer(t, ans, 3, 0, 1, 2, 3)
	if string(ans.Messages[0].Content) != `{"n":1}` || ans.Messages[0].Channel != "iopub" {
		t.Errorf("message %+v", ans.Messages[0])
	}
	wantAnswer(t, l.read(ctx, 2, time.Hour), 3, 0, 3)
	// after = -1: the head alone, at once.
	wantAnswer(t, l.read(ctx, -1, time.Hour), 3, 0)
	// A cursor past the head (an earlier log's) answers at once.
	wantAnswer(t, l.read(ctx, 7, time.Hour), 3, 0)
	// At the head with no wait: nothing, at once.
	wantAnswer(t, l.read(ctx, 3, 0), 3, 0)
}

func TestJupyterLogEvictsByCount(t *testing.T) {
	l := newJupyterLog()
	l.maxMsgs = 4
	for range 10 {
		l.add(logMsg(`{}`))
	}
	ctx := context.Background()
	wantAnswer(t, l.read(ctx, 0, 0), 10, 6, 7, 8, 9, 10)
	wantAnswer(t, l.read(ctx, 5, 0), 10, 1, 7, 8, 9, 10)
	wantAnswer(t, l.read(ctx, 8, 0), 10, 0, 9, 10)
	if len(l.msgs) != 4 || l.bytes != 4*messageSize(&l.msgs[0].msg) {
		t.Errorf("holds %d messages, %d bytes", len(l.msgs), l.bytes)
	}
}

func TestJupyterLogEvictsByBytes(t *testing.T) {
	l := newJupyterLog()
	m := logMsg(`{"text":"0123456789"}`)
	m.Buffers = [][]byte{[]byte("abc")}
	size := messageSize(&m)
	l.maxBytes = 3*size + size/2
	for range 5 {
		l.add(m)
	}
	wantAnswer(t, l.read(context.Background(), 0, 0), 5, 2, 3, 4, 5)
	if l.bytes != 3*size {
		t.Errorf("bytes %d, want %d", l.bytes, 3*size)
	}
}

func TestJupyterLogDropsOversized(t *testing.T) {
	l := newJupyterLog()
	l.maxBytes = 1000
	ctx := context.Background()
	l.add(logMsg(`{}`))
	l.add(logMsg(`{"big":"` + string(bytes.Repeat([]byte("x"), 2000)) + `"}`))
	l.add(logMsg(`{}`))
	// The oversized message evicted nothing and is not held.
	wantAnswer(t, l.read(ctx, 0, 0), 3, 1, 1, 3)
	wantAnswer(t, l.read(ctx, 1, 0), 3, 1, 3)
	wantAnswer(t, l.read(ctx, 2, 0), 3, 0, 3)
	l.add(logMsg(`{"big":"` + string(bytes.Repeat([]byte("x"), 2000)) + `"}`))
	// The caller goes on from the last seq it got: the dropped one counts once.
	wantAnswer(t, l.read(ctx, 3, time.Hour), 4, 1)
	wantAnswer(t, l.read(ctx, 4, 0), 4, 0)
}

func TestJupyterLogAnswerCap(t *testing.T) {
	l := newJupyterLog()
	mib := `{"x":"` + string(bytes.Repeat([]byte("x"), 1<<20)) + `"}`
	for range 20 {
		l.add(logMsg(mib))
	}
	ctx := context.Background()
	var after int64
	got := 0
	for got < 20 {
		ans := l.read(ctx, after, 0)
		if len(ans.Messages) == 0 || ans.Dropped != 0 {
			t.Fatalf("after %d: %d messages, dropped %d", after, len(ans.Messages), ans.Dropped)
		}
		var total int64
		for _, m := range ans.Messages {
			total += messageSize(&m)
		}
		if total > jupyterAnswerBytes || (got+len(ans.Messages) < 20 && total+messageSize(&ans.Messages[0]) <= jupyterAnswerBytes) {
			t.Fatalf("an answer of %d messages, %d bytes", len(ans.Messages), total)
		}
		got += len(ans.Messages)
		after = ans.Messages[len(ans.Messages)-1].Seq
	}
	// A message larger than the cap (but not than the log) comes alone.
	huge := `{"x":"` + string(bytes.Repeat([]byte("x"), 9<<20)) + `"}`
	l.add(logMsg(huge))
	l.add(logMsg(`{}`))
	wantAnswer(t, l.read(ctx, 20, 0), 22, 0, 21)
	wantAnswer(t, l.read(ctx, 21, 0), 22, 0, 22)
}

func TestJupyterLogWaitWakesOnAdd(t *testing.T) {
	l := newJupyterLog()
	ch := readAsync(context.Background(), l, 0, time.Hour)
	waiting(t, l, 1)
	l.add(logMsg(`{}`))
	wantAnswer(t, answered(t, ch), 1, 0, 1)

	ch = readAsync(context.Background(), l, 1, time.Hour)
	waiting(t, l, 1)
	l.add(logMsg(`{}`))
	l.add(logMsg(`{}`))
	ans := answered(t, ch)
	if ans.Head < 2 || len(ans.Messages) == 0 || ans.Messages[0].Seq != 2 {
		t.Errorf("answer %+v", ans)
	}
}

func TestJupyterLogWaitEnds(t *testing.T) {
	l := newJupyterLog()
	l.add(logMsg(`{}`))
	ctx, cancel := context.WithCancel(context.Background())
	ch := readAsync(ctx, l, 1, time.Hour)
	waiting(t, l, 1)
	cancel()
	wantAnswer(t, answered(t, ch), 1, 0)

	// Its timeout.
	wantAnswer(t, l.read(context.Background(), 1, time.Millisecond), 1, 0)

	// The context's deletion.
	ch = readAsync(context.Background(), l, 1, time.Hour)
	waiting(t, l, 1)
	l.close()
	wantAnswer(t, answered(t, ch), 1, 0)
	l.add(logMsg(`{}`))
	wantAnswer(t, l.read(context.Background(), 1, time.Hour), 1, 0)
}
