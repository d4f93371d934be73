package client

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strconv"

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

// ListOptions filters ListSandboxes. Zero fields do not filter, except
// that terminated sandboxes are left out unless State is terminated (them
// alone) or IncludeTerminated is set; a sandbox must carry every label in
// Labels.
type ListOptions struct {
	State  api.SandboxState
	Name   string
	Labels map[string]string
	// IncludeTerminated lists terminated sandboxes too (the daemon keeps
	// their records for serve --retain-terminated, a week by default).
	IncludeTerminated bool
}

func (opts ListOptions) query() url.Values {
	q := url.Values{}
	if opts.State != "" {
		q.Set("state", string(opts.State))
	}
	if opts.Name != "" {
		q.Set("name", opts.Name)
	}
	if opts.IncludeTerminated {
		q.Set("include_terminated", "true")
	}
	keys := make([]string, 0, len(opts.Labels))
	for k := range opts.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("label", k+":"+opts.Labels[k])
	}
	return q
}

// ListSandboxes returns every sandbox that matches opts, newest first: it
// follows the list's pages to the last (ListSandboxesPage returns one).
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) (*api.SandboxList, error) {
	out := &api.SandboxList{Sandboxes: []api.Sandbox{}}
	err := c.walk(ctx, func(ctx context.Context, p Page) (string, error) {
		list, err := c.ListSandboxesPage(ctx, opts, p)
		if err != nil {
			return "", err
		}
		out.Sandboxes = append(out.Sandboxes, list.Sandboxes...)
		return list.NextCursor, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetSandbox returns one sandbox by id or name.
func (c *Client) GetSandbox(ctx context.Context, sandbox string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, ""), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// UpdateSandbox changes a sandbox's settings (its egress policy): PATCH
// /v1/sandboxes/{sandbox}.
func (c *Client) UpdateSandbox(ctx context.Context, sandbox string, req api.UpdateSandboxRequest) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, http.MethodPatch, sandboxPath(sandbox, ""), nil, req, &sb); err != nil {
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

// Suspend saves a running sandbox (id or name) to disk with its memory and
// processes and frees its CPU and RAM; it returns the sandbox, suspended. It
// can take seconds, and the daemon finishes a suspend it has started even
// when ctx is cancelled. The sandbox keeps its id and name; Resume (or, when
// the sandbox has AutoResume, the next call that needs it) brings it back.
//
// Errors: ErrNotFound for an unknown sandbox, ErrFailedPrecondition when the
// sandbox is not running, ErrUnavailable when the host cannot take memory
// snapshots.
func (c *Client) Suspend(ctx context.Context, sandbox string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "/suspend"), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Resume restores a suspended sandbox (id or name) under the same id and
// name, with its files, processes and kernel variables, and returns it
// running.
//
// Errors: ErrNotFound for an unknown sandbox, ErrFailedPrecondition when the
// sandbox is not suspended, ErrUnavailable when the host cannot restore
// memory snapshots.
func (c *Client) Resume(ctx context.Context, sandbox string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "/resume"), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ListPorts lists the sandbox's ports: those a process in it listens on
// now (its Jupyter kernels' left out; a suspended sandbox is not resumed)
// and those with access settings. Tokens are not listed: Port gives one.
func (c *Client) ListPorts(ctx context.Context, sandbox string) (*api.PortList, error) {
	var l api.PortList
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, "/ports"), nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Port returns how to reach a server listening on port inside the sandbox:
// its proxy URL on the daemon and its access token (made on first request).
func (c *Client) Port(ctx context.Context, sandbox string, port int) (*api.Port, error) {
	return c.portCall(ctx, http.MethodGet, sandbox, port, nil)
}

// SetPortPublic lets anyone reach port of the sandbox (public true), or
// only holders of the API key or the port's token.
func (c *Client) SetPortPublic(ctx context.Context, sandbox string, port int, public bool) (*api.Port, error) {
	return c.portCall(ctx, http.MethodPut, sandbox, port, api.UpdatePortRequest{Public: public})
}

// RevokePort replaces the port's token (the old one stops working at once)
// and makes the port private.
func (c *Client) RevokePort(ctx context.Context, sandbox string, port int) (*api.Port, error) {
	return c.portCall(ctx, http.MethodDelete, sandbox, port, nil)
}

func (c *Client) portCall(ctx context.Context, method, sandbox string, port int, body any) (*api.Port, error) {
	var p api.Port
	if err := c.doJSON(ctx, method, sandboxPath(sandbox, "/ports/"+strconv.Itoa(port)), nil, body, &p); err != nil {
		return nil, err
	}
	return &p, nil
}
