package client

import (
	"context"
	"net/http"
	"net/url"
	"sort"

	"github.com/forkbox/forkbox/api"
)

// CreateSandbox starts a sandbox and returns it once it is running.
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, http.MethodPost, "/v1/sandboxes", nil, req, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ListOptions filters ListSandboxes. Zero fields do not filter; a sandbox
// must carry every label in Labels.
type ListOptions struct {
	State  string
	Name   string
	Labels map[string]string
}

// ListSandboxes returns the sandboxes that match opts.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) (*api.SandboxList, error) {
	q := url.Values{}
	if opts.State != "" {
		q.Set("state", opts.State)
	}
	if opts.Name != "" {
		q.Set("name", opts.Name)
	}
	keys := make([]string, 0, len(opts.Labels))
	for k := range opts.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("label", k+":"+opts.Labels[k])
	}
	var list api.SandboxList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/sandboxes", q, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// GetSandbox returns one sandbox by id or name.
func (c *Client) GetSandbox(ctx context.Context, sandbox string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, ""), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// DeleteSandbox terminates a sandbox and frees everything it holds. It
// returns the sandbox in its final (terminated) state.
func (c *Client) DeleteSandbox(ctx context.Context, sandbox string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, http.MethodDelete, sandboxPath(sandbox, ""), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}
