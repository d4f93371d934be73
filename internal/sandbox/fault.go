package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/forkbox/forkbox/internal/fault"
)

// Test hooks at named points of the lifecycle operations. They do nothing
// unless the daemon's environment turns them on, which only tests do:
//
//   - FORKBOX_FAULT=<point> makes the daemon die there, as kill -9 would
//     (crash recovery tests); FORKBOX_FAULT=<point>=panic panics there
//     instead (tests that a panic mid-operation releases every lock,
//     reservation and temp dir and answers 500). Several points may be
//     given, separated by commas.
//   - FORKBOX_HOLD_DIR=<dir> holds an operation at a point for as long as
//     the file <dir>/<point> or <dir>/<point>@<sandbox id or name> exists,
//     so a test can look at a sandbox in a transient state (creating,
//     suspending, resuming, a checkpoint in progress). While held, the
//     operation writes <dir>/<point>@<sandbox id>.reached. A hold ends early
//     when the operation's context ends (a delete cancels it).
//
// Points: create:recorded, create:started, suspend:recorded, suspend:imaged,
// suspend:freed, resume:recorded, resume:restored, checkpoint:locked,
// checkpoint:frozen, checkpoint:captured, fork:snapshotted, fork:branched,
// delete:locked.

// faultPoint applies FORKBOX_FAULT at name (see package fault, which
// internal/snapshot shares).
func faultPoint(name string) { fault.Point(name) }

// hookPoint is faultPoint plus the hold of FORKBOX_HOLD_DIR for one sandbox
// (id and, when it has one, name). It returns the context's cause when the
// operation was cancelled while held.
func hookPoint(ctx context.Context, name, id, sbName string) error {
	faultPoint(name)
	dir := os.Getenv("FORKBOX_HOLD_DIR")
	if dir == "" {
		return nil
	}
	files := []string{filepath.Join(dir, name), filepath.Join(dir, name+"@"+id)}
	if sbName != "" {
		files = append(files, filepath.Join(dir, name+"@"+sbName))
	}
	held := func() bool {
		for _, f := range files {
			if _, err := os.Stat(f); err == nil {
				return true
			}
		}
		return false
	}
	if !held() {
		return nil
	}
	reached := filepath.Join(dir, name+"@"+id+".reached")
	os.WriteFile(reached, nil, 0o600)
	defer os.Remove(reached)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for held() {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
	return nil
}
