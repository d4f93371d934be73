package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/forkbox/forkbox/api"
)

// CreatePool creates a warm pool: the daemon keeps req.Size (1–32) sandboxes
// ready, restored from req.SnapshotID (a golden snapshot) or started from
// req.Image (exactly one of the two), and CreateSandbox with Pool set hands
// one out at once. The returned pool's Ready counts the sandboxes ready so
// far.
//
// Errors: ErrInvalidArgument for a bad name or size or for both or neither
// of SnapshotID and Image, ErrNotFound for an unknown snapshot or image,
// ErrConflict when a pool of that name exists.
func (c *Client) CreatePool(ctx context.Context, req api.CreatePoolRequest) (*api.Pool, error) {
	var p api.Pool
	if err := c.doJSON(ctx, http.MethodPost, "/v1/pools", nil, req, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ListPools returns the warm pools.
func (c *Client) ListPools(ctx context.Context) (*api.PoolList, error) {
	var list api.PoolList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/pools", nil, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// ListPoolsWithMembers is ListPools with each pool's members: the
// sandboxes it keeps ready on the node that answers (their ids work with
// DeleteSandbox). For an admin key it also lists the daemon's default pool
// (_default), whose members no other call shows.
func (c *Client) ListPoolsWithMembers(ctx context.Context) (*api.PoolList, error) {
	var list api.PoolList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/pools", url.Values{"members": {"true"}}, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// DeletePool removes a warm pool and terminates its ready sandboxes.
// Sandboxes already handed out are not affected.
func (c *Client) DeletePool(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/pools/"+url.PathEscape(name), nil, nil, nil)
}
