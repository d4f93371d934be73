package sandbox

import (
	"context"

	"github.com/forkbox/forkbox/internal/agent/wire"
)

// WatchEvent is one event of a directory watch: Started first, once the
// watch is in place, then changes (Name relative to the watched directory;
// Op one of create, write, remove, rename, chmod), and Keepalive when
// nothing happened for a while. Its fields are the agent's
// (wire.WatchEvent), so the one converts to the other.
type WatchEvent struct {
	Started, Keepalive bool
	Name, Op           string
}

// WatchDir streams the changes in directory path of sandbox ref (below it
// too when recursive) to onEvent until ctx ends. The sandbox counts as in
// use meanwhile, as during any call.
func (m *Manager) WatchDir(ctx context.Context, ref, path string, recursive bool, onEvent func(WatchEvent)) error {
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return err
	}
	defer release()
	err = l.agent.Watch(ctx, path, recursive, func(ev wire.WatchEvent) { onEvent(WatchEvent(ev)) })
	if err != nil {
		return m.agentErr(l, err)
	}
	return nil
}
