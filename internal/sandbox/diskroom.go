package sandbox

import (
	"github.com/forkbox/forkbox/internal/diskspace"
)

// A snapshot of a running sandbox (checkpoint, suspend, fork) is refused
// with 507 insufficient_storage before the sandbox is paused when its
// estimated size does not fit in the snapshot store's free space, and a
// full disk met while it is written is the same 507 with the numbers as of
// then (docs/OPERATIONS.md, "A full disk"). What was written is removed
// and the sandbox keeps running, as after any failed snapshot.

// snapshotSizer estimates the bytes a snapshot of a running sandbox writes
// (runtime.Runtime.SnapshotNeed). A Snapshotter without it skips the
// check up front.
type snapshotSizer interface {
	SnapshotNeed(id string, memory bool) int64
}

// snapshotNeed is the estimate for sandbox id (0: unknown).
func (m *Manager) snapshotNeed(id string, memory bool) int64 {
	if sz, ok := m.snapper.(snapshotSizer); ok {
		return sz.SnapshotNeed(id, memory)
	}
	return 0
}

// snapshotWhat names a snapshot of sandbox id in the answers.
func snapshotWhat(id string, memory, suspend bool) string {
	switch {
	case suspend:
		return "the suspend image (a memory snapshot) of sandbox " + id
	case memory:
		return "a memory snapshot of sandbox " + id
	}
	return "a filesystem snapshot of sandbox " + id
}

// checkSnapshotRoom refuses (507) a snapshot of running sandbox id that
// would not fit, before anything pauses it.
func (m *Manager) checkSnapshotRoom(id string, memory, suspend bool) error {
	return m.snaps.CheckRoom(snapshotWhat(id, memory, suspend), m.snapshotNeed(id, memory))
}

// snapshotSpaceErr maps a full disk met while a snapshot of sandbox id was
// written (and not yet mapped by the layer that met it) to 507; any other
// error is returned as it is.
func (m *Manager) snapshotSpaceErr(err error, id string, memory, suspend bool) error {
	if !diskspace.IsFull(err) {
		return err
	}
	return diskspace.Map(err, m.snaps.Dir(), snapshotWhat(id, memory, suspend), m.snapshotNeed(id, memory))
}
