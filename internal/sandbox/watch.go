package sandbox

import (
	"context"

	"github.com/forkbox/forkbox/internal/agent/wire"
)

// WatchDir streams the changes in directory path of sandbox ref (below it
// too when recursive) to onEvent until ctx ends. The sandbox counts as in
// use meanwhile, as during any call.
func (m *Manager) WatchDir(ctx context.Context, ref, path string, recursive bool, onEvent func(wire.WatchEvent)) error {
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return err
	}
	defer release()
	if err := l.agent.Watch(ctx, path, recursive, onEvent); err != nil {
		return m.agentErr(l, err)
	}
	return nil
}
