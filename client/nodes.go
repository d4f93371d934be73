package client

import (
	"context"
	"net/http"

	"github.com/forkbox/forkbox/api"
)

// Nodes lists the nodes of the daemon's cluster (none for a single daemon).
func (c *Client) Nodes(ctx context.Context) (*api.NodeList, error) {
	var list api.NodeList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/nodes", nil, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}
