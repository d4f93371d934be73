package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/forkbox/forkbox/api"
)

// Checkpoint saves the state of a running sandbox (id or name) as a new
// snapshot; the sandbox keeps running. req.Type is api.SnapshotFilesystem
// (the default when empty: the writable layer only) or api.SnapshotMemory
// (also every process and its memory, so a restore is a warm start). A
// memory checkpoint can take seconds; the daemon finishes a checkpoint it
// has started even when ctx is cancelled.
//
// Errors: ErrNotFound for an unknown sandbox, ErrFailedPrecondition when the
// sandbox cannot be checkpointed (terminated, say), ErrUnavailable when the
// host cannot take memory snapshots, ErrResourceExhausted when there is no
// room for the snapshot.
func (c *Client) Checkpoint(ctx context.Context, sandbox string, req api.CheckpointRequest) (*api.Snapshot, error) {
	var sn api.Snapshot
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "/checkpoint"), nil, req, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// Fork takes a memory snapshot of a running sandbox and starts req.Count
// (1–16) new sandboxes from it, which then diverge from the source and from
// each other. req.Names, when set, names the branches and must have
// req.Count distinct entries. Fork is all or nothing: when a branch fails to
// start, the others are removed and the error is returned (the snapshot may
// remain; see ListSnapshots).
func (c *Client) Fork(ctx context.Context, sandbox string, req api.ForkRequest) (*api.ForkResult, error) {
	var res api.ForkResult
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "/fork"), nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ListSnapshots returns the snapshots of one sandbox (id or name), or every
// snapshot when sandbox is "", newest first: it follows the list's pages
// to the last (ListSnapshotsPage returns one).
func (c *Client) ListSnapshots(ctx context.Context, sandbox string) (*api.SnapshotList, error) {
	out := &api.SnapshotList{Snapshots: []api.Snapshot{}}
	err := c.walk(ctx, func(ctx context.Context, p Page) (string, error) {
		list, err := c.ListSnapshotsPage(ctx, sandbox, p)
		if err != nil {
			return "", err
		}
		out.Snapshots = append(out.Snapshots, list.Snapshots...)
		return list.NextCursor, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetSnapshot returns one snapshot by id (snap_…).
func (c *Client) GetSnapshot(ctx context.Context, id string) (*api.Snapshot, error) {
	var sn api.Snapshot
	if err := c.doJSON(ctx, http.MethodGet, snapshotPath(id), nil, nil, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// DeleteSnapshot deletes a snapshot and frees its space. Sandboxes restored
// from it are not affected.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, snapshotPath(id), nil, nil, nil)
}

// snapshotPath returns /v1/snapshots/{id} with the id escaped.
func snapshotPath(id string) string {
	return "/v1/snapshots/" + url.PathEscape(id)
}
