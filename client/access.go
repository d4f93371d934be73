package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/forkbox/forkbox/api"
)

// Tenants, API keys, quotas and the audit log. Every resource belongs to the
// tenant of the key that made it, and another tenant's resources answer
// ErrNotFound. The calls below that manage keys and tenants or read the audit
// log need an admin key: with a user key they fail with ErrPermissionDenied
// (and with a wrong or revoked key, like every call, ErrUnauthenticated).
//
// A call that would take a tenant past one of its quotas fails with
// ErrResourceExhausted (HTTP 429), and its *APIError carries the numbers in
// Quota:
//
//	var ae *client.APIError
//	if errors.As(err, &ae) && ae.Quota != nil {
//		fmt.Printf("quota %s: %v in use, limit %v\n", ae.Quota.Quota, ae.Quota.Use, ae.Quota.Limit)
//	}

// CreateKey makes an API key for req.Tenant (admin only) and returns it with
// its Secret set: the only time the secret is shown, since the daemon keeps
// only its hash. req.Quotas, when set, become the tenant's quotas as a whole
// (as SetTenantQuotas would set them).
//
// Errors: ErrInvalidArgument for a bad tenant name, role or quota, for an
// ExpiresAt not in the future or for both ExpiresAt and ExpiresIn,
// ErrPermissionDenied for a user key, ErrFailedPrecondition when the daemon
// runs without its own API key (it makes no tenant keys then).
func (c *Client) CreateKey(ctx context.Context, req api.CreateKeyRequest) (*api.Key, error) {
	var k api.Key
	if err := c.doJSON(ctx, http.MethodPost, "/v1/keys", nil, req, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// ListKeys returns the API keys (admin only), revoked and expired ones
// included, without their secrets: those of tenant, or of every tenant when
// tenant is "".
//
// Errors: ErrPermissionDenied for a user key.
func (c *Client) ListKeys(ctx context.Context, tenant string) (*api.KeyList, error) {
	q := url.Values{}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	var list api.KeyList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/keys", q, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// RevokeKey revokes the API key id (admin only): it stops working at once.
// It returns the key with RevokedAt set.
//
// Errors: ErrNotFound for an unknown key, ErrPermissionDenied for a user key.
func (c *Client) RevokeKey(ctx context.Context, id string) (*api.Key, error) {
	var k api.Key
	if err := c.doJSON(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), nil, nil, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// ListTenants returns every tenant with its quotas and usage (admin only).
//
// Errors: ErrPermissionDenied for a user key.
func (c *Client) ListTenants(ctx context.Context) (*api.TenantList, error) {
	var list api.TenantList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/tenants", nil, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// GetTenant returns one tenant with its quotas and usage (admin only). A
// tenant that holds nothing and has no quotas answers zeros.
//
// Errors: ErrInvalidArgument for a malformed tenant name,
// ErrPermissionDenied for a user key.
func (c *Client) GetTenant(ctx context.Context, name string) (*api.Tenant, error) {
	var t api.Tenant
	if err := c.doJSON(ctx, http.MethodGet, tenantPath(name), nil, nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// SetTenantQuotas replaces the quotas of tenant name (admin only) with q as
// a whole: a nil field of q is unlimited. To change one quota, read the
// others with GetTenant first. It returns the tenant.
//
// Errors: ErrInvalidArgument for a malformed tenant name or a negative
// quota, ErrPermissionDenied for a user key.
func (c *Client) SetTenantQuotas(ctx context.Context, name string, q api.Quotas) (*api.Tenant, error) {
	body := struct {
		Quotas api.Quotas `json:"quotas"`
	}{q}
	var t api.Tenant
	if err := c.doJSON(ctx, http.MethodPut, tenantPath(name), nil, body, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Usage returns what a tenant holds now against its quotas: the caller's
// own tenant when tenant is "". Only an admin key may name another tenant.
//
// Errors: ErrPermissionDenied when a user key names another tenant,
// ErrInvalidArgument for a malformed tenant name.
func (c *Client) Usage(ctx context.Context, tenant string) (*api.TenantUsage, error) {
	q := url.Values{}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	var u api.TenantUsage
	if err := c.doJSON(ctx, http.MethodGet, "/v1/usage", q, nil, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// AuditOptions filters and pages Audit. Zero fields do not filter.
type AuditOptions struct {
	Tenant string
	// KeyID is a key's id ("admin" for the daemon's own key).
	KeyID string
	// Resource is a sandbox id or name, a snapshot id, ... as the calls
	// named it.
	Resource string
	// Limit bounds the entries returned: 0 means the daemon's default
	// (100); at most 1000.
	Limit int
	// Before, when non-zero, returns only entries with an ID below it.
	Before int64
	// Cursor is the NextCursor of the page before ("" for the first page).
	Cursor string
}

// Audit returns one page of the audit log's entries that match opts,
// newest first (admin only), and in its NextCursor the cursor of the next
// page ("" on the last): pass it as opts.Cursor to get that page.
//
// Errors: ErrInvalidArgument for a Limit out of 0–1000, a negative Before
// or a cursor the daemon did not make for this list, ErrPermissionDenied
// for a user key.
func (c *Client) Audit(ctx context.Context, opts AuditOptions) (*api.AuditList, error) {
	q := url.Values{}
	if opts.Tenant != "" {
		q.Set("tenant", opts.Tenant)
	}
	if opts.KeyID != "" {
		q.Set("key_id", opts.KeyID)
	}
	if opts.Resource != "" {
		q.Set("resource", opts.Resource)
	}
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Before != 0 {
		q.Set("before", strconv.FormatInt(opts.Before, 10))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	var list api.AuditList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/audit", q, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// tenantPath returns /v1/tenants/{tenant} with the name escaped.
func tenantPath(name string) string { return "/v1/tenants/" + url.PathEscape(name) }
