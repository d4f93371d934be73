package sandbox

import (
	"context"
	"fmt"
	"regexp"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// Running commands started with an ExecOptions.ID are reached by it: their
// stdin written and closed, their process group signalled, their terminal
// resized (ExecOptions.PTY).

var execIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// execSignals are the signals ExecSignal sends.
var execSignals = map[string]bool{"SIGTERM": true, "SIGKILL": true, "SIGINT": true, "SIGHUP": true}

// ExecInput writes data (at most 1 MiB) to the stdin of the running command
// id of a sandbox (started with KeepStdin) and, if closeStdin, closes it
// after. An unknown id (or one that ended) is not found.
func (m *Manager) ExecInput(ctx context.Context, ref, id string, data []byte, closeStdin bool) error {
	if !execIDRE.MatchString(id) {
		return errdefs.InvalidArgument("exec id %q: want 1 to 64 of A-Z a-z 0-9 _ -", id)
	}
	if len(data) > wire.MaxExecInput {
		return errdefs.TooLarge("input: %d bytes; at most %d at once", len(data), wire.MaxExecInput)
	}
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return err
	}
	defer release()
	if err := l.agent.ExecInput(ctx, id, data, closeStdin); err != nil {
		return fmt.Errorf("input to command %s: %w", id, m.agentErr(l, err))
	}
	return nil
}

// ExecSignal sends signal ("SIGTERM", "SIGKILL", "SIGINT" or "SIGHUP") to
// the process group of the running command id of a sandbox. An unknown id
// (or one that ended) is not found.
func (m *Manager) ExecSignal(ctx context.Context, ref, id, signal string) error {
	if !execIDRE.MatchString(id) {
		return errdefs.InvalidArgument("exec id %q: want 1 to 64 of A-Z a-z 0-9 _ -", id)
	}
	if !execSignals[signal] {
		return errdefs.InvalidArgument("signal %q: want SIGTERM, SIGKILL, SIGINT or SIGHUP", signal)
	}
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return err
	}
	defer release()
	if err := l.agent.ExecSignal(ctx, id, signal); err != nil {
		return fmt.Errorf("signal command %s: %w", id, m.agentErr(l, err))
	}
	return nil
}

// ExecResize sets the terminal size (1 to 1000 columns and rows) of the
// running command id of a sandbox, started with ExecOptions.PTY. An
// unknown id (or one that ended) is not found.
func (m *Manager) ExecResize(ctx context.Context, ref, id string, size PTYSize) error {
	if !execIDRE.MatchString(id) {
		return errdefs.InvalidArgument("exec id %q: want 1 to 64 of A-Z a-z 0-9 _ -", id)
	}
	sz := wire.PTYSize{Cols: size.Cols, Rows: size.Rows}
	if err := sz.Check(); err != nil {
		return err
	}
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return err
	}
	defer release()
	if err := l.agent.ExecResize(ctx, id, sz); err != nil {
		return fmt.Errorf("resize the terminal of command %s: %w", id, m.agentErr(l, err))
	}
	return nil
}
