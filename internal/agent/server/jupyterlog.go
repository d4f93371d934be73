package server

import (
	"context"
	"encoding/base64"
	"sort"
	"sync"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
)

// A context's Jupyter message log is what a Jupyter client attached to the
// context (a notebook, through the daemon's kernel gateway) reads: the
// messages the context's kernels sent, numbered 1, 2, … per context, read
// by polling with a cursor (GET /contexts/{id}/jupyter/recv). Polling keeps
// the daemon from holding a connection into the sandbox, which a checkpoint
// must not see, and the numbers let a client that reconnects pick up where
// it left off, or learn what it missed.
//
// The log is made on the context's first Jupyter call, so contexts no
// client attaches to keep nothing, and it belongs to the context rather
// than to a kernel: it outlives a kernel's death and goes on with the next
// kernel. What it holds is bounded (the kernel runs code the sandbox's user
// or a model wrote, and may send without end): the oldest messages go
// first, and a message larger than the whole log is counted but never held.

const (
	// jupyterLogMessages and jupyterLogBytes bound one context's log.
	jupyterLogMessages = 4096
	jupyterLogBytes    = 32 << 20
	// jupyterAnswerBytes bounds the messages of one receive's answer; an
	// answer holds one message at least, whatever its size, when any is
	// there to give.
	jupyterAnswerBytes = 8 << 20
	// messageOverhead is about what a message adds to an answer besides
	// its parts: keys, seq, channel.
	messageOverhead = 96
)

// jupyterLog is one context's log. Its methods are safe for concurrent use.
type jupyterLog struct {
	maxMsgs   int
	maxBytes  int64
	maxAnswer int64

	mu      sync.Mutex
	msgs    []logEntry // oldest first; seq rises, with gaps where a message was too large to keep
	bytes   int64      // sum of msgs' sizes
	head    int64      // seq of the newest message, held or not
	closed  bool       // the context is gone: waits end at once
	changed chan struct{}
	waiters int // reads waiting now
}

type logEntry struct {
	msg  wire.JupyterMessage
	size int64
}

func newJupyterLog() *jupyterLog {
	return &jupyterLog{maxMsgs: jupyterLogMessages, maxBytes: jupyterLogBytes, maxAnswer: jupyterAnswerBytes}
}

// messageSize is about what m takes in an answer: its JSON parts as they
// are, its buffers in base64, and the rest.
func messageSize(m *wire.JupyterMessage) int64 {
	n := int64(messageOverhead + len(m.Channel) + len(m.Header) + len(m.Parent) + len(m.Metadata) + len(m.Content))
	for _, b := range m.Buffers {
		n += int64(base64.StdEncoding.EncodedLen(len(b)) + 3)
	}
	return n
}

// add numbers m and keeps it, evicting the oldest messages to make room. m
// is kept as it is, its parts shared, never changed afterwards.
func (l *jupyterLog) add(m wire.JupyterMessage) {
	size := messageSize(&m)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.head++
	m.Seq = l.head
	if size <= l.maxBytes {
		for len(l.msgs) > 0 && (len(l.msgs) >= l.maxMsgs || l.bytes+size > l.maxBytes) {
			l.bytes -= l.msgs[0].size
			l.msgs[0] = logEntry{} // what the array still holds must not keep the message
			l.msgs = l.msgs[1:]
		}
		l.msgs = append(l.msgs, logEntry{msg: m, size: size})
		l.bytes += size
	}
	l.wake()
}

// close ends the waits on the log and keeps anything more from it.
func (l *jupyterLog) close() {
	l.mu.Lock()
	l.closed = true
	l.wake()
	l.mu.Unlock()
}

// wake tells the waiters that something changed; l.mu is held.
func (l *jupyterLog) wake() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// read answers a receive: the messages with seq > after, waiting up to wait
// for one when there is none yet, or until ctx ends or the log closes.
// after = -1 asks for the head alone, at once. A cursor past the head (of
// an earlier log, say) is answered at once: its Head is below the cursor.
func (l *jupyterLog) read(ctx context.Context, after int64, wait time.Duration) *wire.JupyterRecvAnswer {
	var expired <-chan time.Time
	if wait > 0 && after >= 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	for {
		l.mu.Lock()
		if after < 0 || after != l.head || l.closed || wait <= 0 {
			ans := l.collect(after)
			l.mu.Unlock()
			return ans
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		changed := l.changed
		l.waiters++
		l.mu.Unlock()
		select {
		case <-changed:
		case <-expired:
			wait = 0
		case <-ctx.Done():
			wait = 0
		}
		l.mu.Lock()
		l.waiters--
		l.mu.Unlock()
	}
}

// collect builds the answer for a cursor; l.mu is held. An answer covers
// the seqs after the cursor up to its last message, or up to Head when it
// has none: Dropped counts those it lacks, and the caller's next cursor is
// the last message's seq, or Head.
func (l *jupyterLog) collect(after int64) *wire.JupyterRecvAnswer {
	ans := &wire.JupyterRecvAnswer{Head: l.head, Messages: []wire.JupyterMessage{}}
	if after < 0 || after >= l.head {
		return ans
	}
	i := sort.Search(len(l.msgs), func(i int) bool { return l.msgs[i].msg.Seq > after })
	var total int64
	for _, e := range l.msgs[i:] {
		if len(ans.Messages) > 0 && total+e.size > l.maxAnswer {
			break
		}
		ans.Messages = append(ans.Messages, e.msg)
		total += e.size
	}
	through := l.head
	if n := len(ans.Messages); n > 0 {
		through = ans.Messages[n-1].Seq
	}
	ans.Dropped = through - after - int64(len(ans.Messages))
	return ans
}
