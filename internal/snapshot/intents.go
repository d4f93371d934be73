package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/forkbox/forkbox/internal/durable"
)

// Intents are durable marks of an operation on a snapshot that spans more
// than the snapshot itself and must be finished or undone after a crash:
// a fork's snapshot, say, is only worth keeping once every branch
// restored from it runs. The operation marks the snapshot's id before it
// starts and clears the mark once it answered; the next start finds the
// marks a crash left and undoes those operations. Marks live beside the
// snapshots (<dir>/.intents/<kind>/<id>, an empty file, synced), so they
// belong to the node whose data dir this is.

// intentsDir is where marks of kind live.
func (s *Store) intentsDir(kind string) string { return filepath.Join(s.dir, ".intents", kind) }

// MarkIntent records, durably, that an operation of kind on snapshot id
// is under way.
func (s *Store) MarkIntent(kind, id string) error {
	if !validID(id) || !validID(kind) {
		return fmt.Errorf("mark intent %s/%s: bad name", kind, id)
	}
	dir := s.intentsDir(kind)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, id), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return durable.SyncDir(dir)
}

// ClearIntent removes the mark of kind on id (none is not an error).
func (s *Store) ClearIntent(kind, id string) error {
	err := os.Remove(filepath.Join(s.intentsDir(kind), id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Intents lists the ids marked with kind.
func (s *Store) Intents(kind string) ([]string, error) {
	ents, err := os.ReadDir(s.intentsDir(kind))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if e.Type().IsRegular() && validID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}
