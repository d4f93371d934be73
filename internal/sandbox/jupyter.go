package sandbox

import (
	"context"
	"encoding/json"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// The Jupyter gateway (internal/jupyter) relays a notebook's messages to a
// context's kernel and the kernel's messages back. Sending is an ordinary
// call: it resumes a suspended sandbox and counts as activity. Receiving is
// a poll of the agent's per-context message log that must not keep the
// sandbox awake or in place: a notebook left open would otherwise hold off
// the idle suspend forever and every checkpoint for up to a poll's wait. So a
// poll never resumes, is neither a call in flight nor activity, and an
// exclusive operation (memory checkpoint, suspend, fork) cancels the polls
// under way and keeps new ones from waiting until it is done; the gateway
// then simply polls again from the same cursor (the log is in the agent,
// so it is part of what a checkpoint or suspend saves).

// JupyterMessage is one Jupyter protocol message between a notebook and a
// context's kernel: its channel (shell, iopub, control or stdin), its JSON
// parts as they are and its binary buffers. Seq numbers a received one: 1,
// 2, … per context. Its fields are the agent's (wire.JupyterMessage), so
// the one converts to the other.
type JupyterMessage struct {
	Seq      int64
	Channel  string
	Header   json.RawMessage
	Parent   json.RawMessage
	Metadata json.RawMessage
	Content  json.RawMessage
	Buffers  [][]byte
}

// JupyterRecvAnswer answers JupyterRecv: the messages after the cursor,
// the seq of the newest message the context holds (Head; 0: none yet) and
// how many after the cursor were evicted before this receive (Dropped).
type JupyterRecvAnswer struct {
	Head     int64
	Dropped  int64
	Messages []JupyterMessage
}

// maxPollWait bounds one poll's wait in the agent.
const maxPollWait = 30 * time.Second

// JupyterSend sends a notebook's message to a context's kernel (contextRef
// "default": the language's default context), starting the kernel if it
// has none and resuming a suspended sandbox.
func (m *Manager) JupyterSend(ctx context.Context, ref, contextRef, language string, msg *JupyterMessage) error {
	if err := checkContextRef(contextRef, language); err != nil {
		return err
	}
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return err
	}
	defer release()
	if err := l.agent.JupyterSend(ctx, contextRef, language, (*wire.JupyterMessage)(msg)); err != nil {
		return m.agentErr(l, err)
	}
	return nil
}

// JupyterRecv returns the context's kernel messages after the cursor,
// waiting up to wait for one. It fails with a FailedPrecondition error when
// the sandbox is not running here (suspended: the next JupyterSend resumes
// it). A poll cut short by an exclusive operation answers no messages and
// the cursor unchanged.
func (m *Manager) JupyterRecv(ctx context.Context, ref, contextRef, language string, after int64, wait time.Duration) (*JupyterRecvAnswer, error) {
	if err := checkContextRef(contextRef, language); err != nil {
		return nil, err
	}
	wait = min(max(wait, 0), maxPollWait)
	l := m.findLiveFor(ctx, ref)
	if l == nil {
		sb, err := m.lookup(ctx, ref)
		if err != nil {
			return nil, err
		}
		if hiddenMember(sb) {
			return nil, errdefs.NotFound("sandbox %q not found", ref)
		}
		if m.elsewhere(sb) {
			return nil, errElsewhere(sb)
		}
		return nil, notRunning(sb)
	}
	pctx, done, held := l.startPoll(ctx)
	defer done()
	if held {
		wait = 0
	}
	nothing := &JupyterRecvAnswer{Head: after, Messages: []JupyterMessage{}}
	unlock, err := l.gate.acquire(pctx, l.id, "", false, m.lockWait)
	if err != nil {
		if ctx.Err() == nil && pctx.Err() != nil {
			return nothing, nil
		}
		return nil, err
	}
	defer unlock()
	if !m.current(l) {
		return nil, errdefs.FailedPrecondition("sandbox %s stopped running", l.id)
	}
	ans, err := l.agent.JupyterRecv(pctx, contextRef, language, after, wait)
	if err != nil {
		if ctx.Err() == nil && pctx.Err() != nil {
			return nothing, nil
		}
		return nil, m.agentErr(l, err)
	}
	out := &JupyterRecvAnswer{Head: ans.Head, Dropped: ans.Dropped, Messages: make([]JupyterMessage, len(ans.Messages))}
	for i, msg := range ans.Messages {
		out.Messages[i] = JupyterMessage(msg)
	}
	return out, nil
}

// startPoll registers a poll; done unregisters it. held: an exclusive
// operation is waiting or running, so the poll must not wait in the agent.
func (l *live) startPoll(ctx context.Context) (pctx context.Context, done func(), held bool) {
	pctx, cancel := context.WithCancel(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.polls == nil {
		l.polls = map[int]context.CancelFunc{}
	}
	l.pollSeq++
	n := l.pollSeq
	l.polls[n] = cancel
	return pctx, func() {
		l.mu.Lock()
		delete(l.polls, n)
		l.mu.Unlock()
		cancel()
	}, l.holdPolls > 0
}

// holdPollsOff cancels the polls in flight and keeps new ones short until
// the returned func is called.
func (l *live) holdPollsOff() func() {
	l.mu.Lock()
	l.holdPolls++
	for _, cancel := range l.polls {
		cancel()
	}
	l.mu.Unlock()
	var once bool
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if !once {
			once = true
			l.holdPolls--
		}
	}
}

// checkContextRef checks a context reference and language from a request.
func checkContextRef(contextRef, language string) error {
	if contextRef != "default" && !contextIDRE.MatchString(contextRef) {
		return errdefs.InvalidArgument("context: %q is not a context id", contextRef)
	}
	if language != "" && !languageRE.MatchString(language) {
		return errdefs.InvalidArgument("language: %q is not a language or kernel name", language)
	}
	return nil
}

// CreateContextWithID is CreateContext with a context id the caller chose
// (ctx_ and 8 hex digits), for callers that name contexts by a scheme of
// their own (the Jupyter gateway's kernel ids).
func (m *Manager) CreateContextWithID(ctx context.Context, ref, id string, req *api.CreateContextRequest) (*api.Context, error) {
	return m.createContext(ctx, ref, id, req)
}
