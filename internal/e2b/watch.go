package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path"
	"sync"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/forkbox/forkbox/internal/e2b/envdpb/filesystem"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sandbox"
)

// Directory watches: envd's WatchDir stream, and its polled form
// (CreateWatcher, GetWatcherEvents, RemoveWatcher) which the synchronous
// Python SDK uses. The sandbox's agent watches with inotify as the
// sandbox user (internal/agent/server/watch_linux.go).

// watchBackend is what watching needs of forkbox; *sandbox.Manager has it.
type watchBackend interface {
	WatchDir(ctx context.Context, ref, path string, recursive bool, onEvent func(sandbox.WatchEvent)) error
}

const (
	// maxWatchers bounds the polled watchers of one sandbox, and
	// maxWatcherEvents the events one keeps until polled.
	maxWatchers      = 16
	maxWatcherEvents = 4096
	// watcherIdle drops a polled watcher nobody asked for this long.
	watcherIdle = 10 * time.Minute
)

var eventTypes = map[string]fspb.EventType{
	"create": fspb.EventType_EVENT_TYPE_CREATE, "write": fspb.EventType_EVENT_TYPE_WRITE,
	"remove": fspb.EventType_EVENT_TYPE_REMOVE, "rename": fspb.EventType_EVENT_TYPE_RENAME,
	"chmod": fspb.EventType_EVENT_TYPE_CHMOD,
}

// fsEvent is an agent's change as envd's event; the entry is added when
// asked for and the path still exists.
func (e *envd) fsEvent(ctx context.Context, root string, ev sandbox.WatchEvent, withEntry bool) *fspb.FilesystemEvent {
	out := &fspb.FilesystemEvent{Name: ev.Name, Type: eventTypes[ev.Op]}
	if withEntry && ev.Op != "remove" {
		if entry, err := e.stat(ctx, path.Join(root, ev.Name)); err == nil {
			out.Entry = entry
		}
	}
	return out
}

func (e *envd) watcher() (watchBackend, error) {
	wb, ok := e.b.(watchBackend)
	if !ok {
		return nil, unimplemented("this daemon does not watch directories")
	}
	return wb, nil
}

// watchDir serves WatchDir: start, then the changes, and keepalives, until
// the client goes away.
func (e *envd) watchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	wb, err := e.watcher()
	if err != nil {
		return err
	}
	root, err := resolvePath(req.Msg.GetPath())
	if err != nil {
		return e.rpcErr(ctx, err)
	}
	var sendErr error
	err = wb.WatchDir(ctx, sandboxID(ctx), root, req.Msg.GetRecursive(), func(ev sandbox.WatchEvent) {
		if sendErr != nil {
			return
		}
		var resp *fspb.WatchDirResponse
		switch {
		case ev.Started:
			resp = &fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}
		case ev.Keepalive:
			resp = &fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}}
		default:
			resp = &fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: e.fsEvent(ctx, root, ev, req.Msg.GetIncludeEntry())}}
		}
		sendErr = stream.Send(resp)
	})
	if err != nil {
		return e.rpcErr(ctx, err)
	}
	return nil
}

// polledWatcher is a watch whose events wait to be polled.
type polledWatcher struct {
	sandbox string
	cancel  context.CancelFunc
	mu      sync.Mutex
	events  []*fspb.FilesystemEvent
	dropped bool // events were lost to the bound
	err     error
	polled  time.Time
}

type watcherTable struct {
	mu   sync.Mutex
	byID map[string]*polledWatcher
}

// expire drops watchers nobody polled for watcherIdle; the caller holds
// t.mu.
func (t *watcherTable) expire(now time.Time) {
	for id, w := range t.byID {
		w.mu.Lock()
		idle := now.Sub(w.polled) > watcherIdle
		w.mu.Unlock()
		if idle {
			w.cancel()
			delete(t.byID, id)
		}
	}
}

func (e *envd) createWatcher(ctx context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	wb, err := e.watcher()
	if err != nil {
		return nil, err
	}
	root, err := resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	id := sandboxID(ctx)
	t := &e.watchers
	t.mu.Lock()
	if t.byID == nil {
		t.byID = map[string]*polledWatcher{}
	}
	t.expire(time.Now())
	n := 0
	for _, w := range t.byID {
		if w.sandbox == id {
			n++
		}
	}
	t.mu.Unlock()
	if n >= maxWatchers {
		return nil, e.rpcErr(ctx, errdefs.ResourceExhausted("%d watchers of this sandbox run already: remove one", maxWatchers))
	}
	// The watch outlives this request (the tenant stays in its context).
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &polledWatcher{sandbox: id, cancel: cancel, polled: time.Now()}
	started := make(chan error, 1)
	go func() {
		var once sync.Once
		err := wb.WatchDir(wctx, id, root, req.Msg.GetRecursive(), func(ev sandbox.WatchEvent) {
			if ev.Started {
				once.Do(func() { started <- nil })
				return
			}
			if ev.Keepalive {
				return
			}
			fe := e.fsEvent(wctx, root, ev, req.Msg.GetIncludeEntry())
			w.mu.Lock()
			if len(w.events) < maxWatcherEvents {
				w.events = append(w.events, fe)
			} else {
				w.dropped = true
			}
			w.mu.Unlock()
		})
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
		once.Do(func() {
			if err == nil {
				err = errdefs.Unavailable("the watch ended before it started")
			}
			started <- err
		})
	}()
	select {
	case err := <-started:
		if err != nil {
			cancel()
			return nil, e.rpcErr(ctx, err)
		}
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	var b [12]byte
	rand.Read(b[:])
	wid := hex.EncodeToString(b[:])
	t.mu.Lock()
	t.byID[wid] = w
	t.mu.Unlock()
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: wid}), nil
}

func (e *envd) polled(ctx context.Context, wid string) (*polledWatcher, error) {
	t := &e.watchers
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.byID[wid]
	if w == nil || w.sandbox != sandboxID(ctx) {
		return nil, connect.NewError(connect.CodeNotFound, errdefs.NotFound("watcher %q not found", wid))
	}
	return w, nil
}

func (e *envd) getWatcherEvents(ctx context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	w, err := e.polled(ctx, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	events, werr, dropped := w.events, w.err, w.dropped
	w.events, w.dropped, w.polled = nil, false, time.Now()
	w.mu.Unlock()
	if dropped {
		return nil, connect.NewError(connect.CodeResourceExhausted, errdefs.ResourceExhausted("watcher %s: more than %d events between polls; some were lost", req.Msg.GetWatcherId(), maxWatcherEvents))
	}
	if len(events) == 0 && werr != nil {
		return nil, e.rpcErr(ctx, werr)
	}
	if events == nil {
		events = []*fspb.FilesystemEvent{}
	}
	return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: events}), nil
}

func (e *envd) removeWatcher(ctx context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	w, err := e.polled(ctx, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	w.cancel()
	e.watchers.mu.Lock()
	delete(e.watchers.byID, req.Msg.GetWatcherId())
	e.watchers.mu.Unlock()
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}
