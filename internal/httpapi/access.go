package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/batch"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/jupyter"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// Access: who a request is, what it may do, and the audit log of what it
// did. The daemon's own key (Config.APIKey) is an admin key of the default
// tenant; the keys it makes (POST /v1/keys) are kept hashed in the store and
// belong to a tenant. authenticate puts the caller's tenant.Principal in the
// request's context, and from there the store scopes every lookup to its
// tenant: another tenant's resource is "not found", the same answer as one
// that does not exist. With no key configured the daemon is single-user
// (loopback only, see daemon.Config.Validate): every caller is the default
// tenant's admin, and tenant keys cannot be made.

// actAsHeader lets an admin key act within another tenant (an operator
// cleaning up, or looking into a tenant's sandbox): the calls are that
// tenant's, and the audit log names the admin's key.
const actAsHeader = "X-Forkbox-Tenant"

// keyPrefix starts every key the daemon makes, so that a leaked one is easy
// to recognise (secret scanners, logs).
const keyPrefix = "fbk_"

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func hashKey(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// authenticate returns the principal of r's bearer key. No key configured:
// the default tenant's admin. A wrong, revoked or expired key: an
// unauthenticated error saying which (a revoked key's holder learns nothing
// it did not know).
func (s *Server) authenticate(r *http.Request) (tenant.Principal, error) {
	p, err := s.keyPrincipal(r)
	if err != nil {
		return p, err
	}
	if as := r.Header.Get(actAsHeader); as != "" {
		if !p.Admin {
			return tenant.Principal{}, errdefs.PermissionDenied("%s: only an admin key acts within another tenant", actAsHeader)
		}
		if !tenant.ValidName.MatchString(as) {
			return tenant.Principal{}, errdefs.InvalidArgument("%s: %q is not a tenant name", actAsHeader, as)
		}
		p.Tenant = as
	}
	return p, nil
}

// keyPrincipal is the principal of r's key itself.
func (s *Server) keyPrincipal(r *http.Request) (tenant.Principal, error) {
	if s.cfg.APIKey == "" {
		return tenant.Principal{Tenant: tenant.Default, Admin: true}, nil
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok && strings.HasPrefix(r.URL.Path, jupyter.Prefix+"/") {
		// Jupyter's clients (a notebook server's GatewayClient.auth_token)
		// send the key as a token.
		got, ok = strings.CutPrefix(r.Header.Get("Authorization"), "token ")
	}
	if !ok || got == "" {
		return tenant.Principal{}, errdefs.Unauthenticated("missing API key: send Authorization: Bearer <key>")
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) == 1 {
		return tenant.Principal{KeyID: "admin", Tenant: tenant.Default, Admin: true}, nil
	}
	if s.cfg.Access == nil || !strings.HasPrefix(got, keyPrefix) {
		return tenant.Principal{}, errdefs.Unauthenticated("wrong API key")
	}
	// The store is looked up by the secret's hash: no comparison of
	// secrets happens here, so there is no timing to measure.
	k, err := s.cfg.Access.KeyByHash(r.Context(), hashKey(got))
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return tenant.Principal{}, errdefs.Unauthenticated("wrong API key")
	case err != nil:
		return tenant.Principal{}, err
	case k.RevokedAt != nil:
		return tenant.Principal{}, errdefs.Unauthenticated("API key %s was revoked", k.ID)
	case k.ExpiresAt != nil && !time.Now().Before(*k.ExpiresAt):
		return tenant.Principal{}, errdefs.Unauthenticated("API key %s expired at %s", k.ID, k.ExpiresAt.Format(time.RFC3339))
	}
	return tenant.Principal{KeyID: k.ID, Tenant: k.Tenant, Admin: k.Role == api.RoleAdmin}, nil
}

// requireAdmin refuses a non-admin caller.
func requireAdmin(ctx context.Context) (tenant.Principal, error) {
	p, ok := tenant.From(ctx)
	if !ok || !p.Admin {
		return p, errdefs.PermissionDenied("this call needs an admin key")
	}
	return p, nil
}

// adminStore is the access store, for an admin caller only.
func (s *Server) adminStore(r *http.Request) (store.AccessStore, error) {
	if _, err := requireAdmin(r.Context()); err != nil {
		return nil, err
	}
	if s.cfg.Access == nil {
		return nil, errdefs.Unavailable("this daemon keeps no keys")
	}
	return s.cfg.Access, nil
}

func keyView(k *store.Key) api.Key {
	return api.Key{ID: k.ID, Tenant: k.Tenant, Role: k.Role, Name: k.Name, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt}
}

// createKey is POST /v1/keys.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	as, err := s.adminStore(r)
	if err != nil {
		return err
	}
	if s.cfg.APIKey == "" {
		return errdefs.FailedPrecondition("tenant keys need the daemon's own key: start it with FORKBOX_API_KEY set (without one, anyone who reaches it is admin)")
	}
	var req api.CreateKeyRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	if !tenant.ValidName.MatchString(req.Tenant) {
		return errdefs.InvalidArgument("tenant: %q must be 1-32 lowercase letters, digits or '-', starting with a letter or digit", req.Tenant)
	}
	if req.Role == "" {
		req.Role = api.RoleUser
	}
	if !req.Role.Valid() {
		return errdefs.InvalidArgument("role: %q is not %q or %q", req.Role, api.RoleUser, api.RoleAdmin)
	}
	if len(req.Name) > 128 {
		return errdefs.InvalidArgument("name: at most 128 characters")
	}
	now := time.Now().UTC()
	expires := req.ExpiresAt
	if req.ExpiresIn != "" {
		if expires != nil {
			return errdefs.InvalidArgument("expires_at, expires_in: give at most one")
		}
		d, err := time.ParseDuration(req.ExpiresIn)
		if err != nil || d <= 0 {
			return errdefs.InvalidArgument("expires_in: %q is not a positive duration such as \"720h\"", req.ExpiresIn)
		}
		t := now.Add(d)
		expires = &t
	}
	if expires != nil && !expires.After(now) {
		return errdefs.InvalidArgument("expires_at: %s is not in the future", expires.Format(time.RFC3339))
	}
	if req.Quotas != nil {
		if err := checkQuotas(*req.Quotas); err != nil {
			return err
		}
	}
	var raw [32]byte
	rand.Read(raw[:])
	var idb [8]byte
	rand.Read(idb[:])
	secret := keyPrefix + strings.ToLower(b32.EncodeToString(raw[:]))
	k := &store.Key{ID: "key_" + hex.EncodeToString(idb[:]), Hash: hashKey(secret), Tenant: req.Tenant, Role: req.Role,
		Name: req.Name, CreatedAt: now, ExpiresAt: expires}
	if req.Quotas != nil {
		if err := as.SetQuotas(r.Context(), req.Tenant, *req.Quotas); err != nil {
			return err
		}
	}
	if err := as.CreateKey(r.Context(), k); err != nil {
		return err
	}
	v := keyView(k)
	v.Secret = secret
	setResource(r, k.ID)
	writeJSON(w, http.StatusCreated, v)
	return nil
}

// listKeys is GET /v1/keys.
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	as, err := s.adminStore(r)
	if err != nil {
		return err
	}
	keys, err := as.ListKeys(r.Context(), r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	out := api.KeyList{Keys: make([]api.Key, 0, len(keys))}
	for _, k := range keys {
		out.Keys = append(out.Keys, keyView(k))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// revokeKey is DELETE /v1/keys/{id}: the key is refused from the next
// request on.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	as, err := s.adminStore(r)
	if err != nil {
		return err
	}
	k, err := as.RevokeKey(r.Context(), r.PathValue("id"), time.Now().UTC())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, keyView(k))
	return nil
}

func checkQuotas(q api.Quotas) error {
	for _, c := range []struct {
		name api.QuotaName
		v    *int64
	}{{api.QuotaRunningSandboxes, q.RunningSandboxes}, {api.QuotaMemoryMB, q.MemoryMB}, {api.QuotaSuspendedSandboxes, q.SuspendedSandboxes},
		{api.QuotaSnapshotBytes, q.SnapshotBytes}, {api.QuotaImageBytes, q.ImageBytes}} {
		if c.v != nil && *c.v < 0 {
			return errdefs.InvalidArgument("quotas.%s: %d is negative (leave it out for no limit)", c.name, *c.v)
		}
	}
	if q.CPUs != nil && !(*q.CPUs >= 0) {
		return errdefs.InvalidArgument("quotas.cpus: %v is negative (leave it out for no limit)", *q.CPUs)
	}
	return nil
}

func (s *Server) tenantView(ctx context.Context, name string) (api.Tenant, error) {
	u, err := s.mgr.Usage(ctx, name)
	if err != nil {
		return api.Tenant{}, err
	}
	return api.Tenant{Name: name, Quotas: u.Quotas, Usage: u}, nil
}

// listTenants is GET /v1/tenants.
func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) error {
	as, err := s.adminStore(r)
	if err != nil {
		return err
	}
	names, err := as.Tenants(r.Context())
	if err != nil {
		return err
	}
	if !slices.Contains(names, tenant.Default) {
		names = append([]string{tenant.Default}, names...)
	}
	out := api.TenantList{Tenants: []api.Tenant{}}
	for _, n := range names {
		t, err := s.tenantView(r.Context(), n)
		if err != nil {
			return err
		}
		out.Tenants = append(out.Tenants, t)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func tenantParam(r *http.Request) (string, error) {
	name := r.PathValue("tenant")
	if !tenant.ValidName.MatchString(name) {
		return "", errdefs.InvalidArgument("tenant: %q is not a tenant name", name)
	}
	return name, nil
}

// getTenant is GET /v1/tenants/{tenant}.
func (s *Server) getTenant(w http.ResponseWriter, r *http.Request) error {
	if _, err := requireAdmin(r.Context()); err != nil {
		return err
	}
	name, err := tenantParam(r)
	if err != nil {
		return err
	}
	return s.writeTenant(w, r, name)
}

// writeTenant answers with tenant name's settings and usage.
func (s *Server) writeTenant(w http.ResponseWriter, r *http.Request, name string) error {
	t, err := s.tenantView(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

// setTenant is PUT /v1/tenants/{tenant}: its quotas, replaced whole.
func (s *Server) setTenant(w http.ResponseWriter, r *http.Request) error {
	as, err := s.adminStore(r)
	if err != nil {
		return err
	}
	name, err := tenantParam(r)
	if err != nil {
		return err
	}
	var req api.Tenant
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.Name != "" && req.Name != name {
		return errdefs.InvalidArgument("name: %q differs from the path's tenant %q", req.Name, name)
	}
	if req.Usage != nil {
		return errdefs.InvalidArgument("usage: measured by the daemon, not set")
	}
	if err := checkQuotas(req.Quotas); err != nil {
		return err
	}
	if err := as.SetQuotas(r.Context(), name, req.Quotas); err != nil {
		return err
	}
	return s.writeTenant(w, r, name)
}

// usage is GET /v1/usage: the caller's tenant's (an admin may ask for
// another's with ?tenant=).
func (s *Server) usage(w http.ResponseWriter, r *http.Request) error {
	p, _ := tenant.From(r.Context())
	name := p.Tenant
	if q := r.URL.Query().Get("tenant"); q != "" && q != name {
		if !p.Admin {
			return errdefs.PermissionDenied("tenant: only an admin key reads another tenant's usage")
		}
		if !tenant.ValidName.MatchString(q) {
			return errdefs.InvalidArgument("tenant: %q is not a tenant name", q)
		}
		name = q
	}
	u, err := s.mgr.Usage(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, u)
	return nil
}

// listAudit is GET /v1/audit.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	as, err := s.adminStore(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	page, err := pageParams(q)
	if err != nil {
		return err
	}
	f := store.AuditFilter{Tenant: q.Get("tenant"), KeyID: q.Get("key_id"), Resource: q.Get("resource")}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return errdefs.InvalidArgument("before: %q is not an entry id", v)
		}
		f.Before = n
	}
	s.audit.flush() // what was just done is in the answer
	entries, next, err := as.ListAuditPage(r.Context(), f, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.AuditList{Entries: entries, NextCursor: next})
	return nil
}

// The audit log: every call that may change something (any method but GET,
// HEAD and OPTIONS; a port's proxied traffic is the app's, not the API's)
// is recorded with its caller, route, resource and outcome. Entries are
// written in batches by one goroutine (an fsync'd write per exec would
// slow every call down); a crash loses at most the last batch interval's.

// auditRetention is how long entries are kept.
const auditRetention = 90 * 24 * time.Hour

// auditLog batches entries into the store (internal/batch); nil when the
// daemon has no access store.
type auditLog struct {
	w      *batch.Writer[api.AuditEntry]
	pruned time.Time
}

func newAuditLog(st store.AccessStore, log interface{ Warn(string, ...any) }) *auditLog {
	if st == nil {
		return nil
	}
	a := &auditLog{}
	a.w = batch.New(batch.Config[api.AuditEntry]{
		Write:   st.AppendAudit,
		OnError: func(n int, err error) { log.Warn("write audit log", "entries", n, "err", err) },
		Tick: func() {
			if time.Since(a.pruned) > time.Hour {
				a.pruned = time.Now()
				if _, err := st.PruneAudit(context.Background(), time.Now().Add(-auditRetention)); err != nil {
					log.Warn("prune audit log", "err", err)
				}
			}
		},
	})
	return a
}

func (a *auditLog) add(e api.AuditEntry) {
	if a != nil {
		a.w.Add(e)
	}
}

// flush stores what is buffered.
func (a *auditLog) flush() {
	if a != nil {
		a.w.Flush()
	}
}

func (a *auditLog) close() {
	if a != nil {
		a.w.Close()
	}
}

// audited says whether a call of method on route goes in the audit log.
func audited(method, route string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	// /mcp's tools are recorded as the calls they make (via "mcp").
	return !strings.Contains(route, "/ports/{port}/") && !strings.Contains(route, "ports-domain") && route != "/mcp"
}

// resourceKey holds the resource a handler names for the audit log when
// the path does not (a key just made).
type resourceKey struct{}

type resourceBox struct{ v string }

func setResource(r *http.Request, v string) {
	if b, ok := r.Context().Value(resourceKey{}).(*resourceBox); ok {
		b.v = v
	}
}

// resourceOf is the resource r's path names.
func resourceOf(r *http.Request) string {
	for _, k := range []string{"sandbox", "id", "name", "tenant"} {
		if v := r.PathValue(k); v != "" {
			return v
		}
	}
	return ""
}

// serveE2BControl serves E2B's control plane (internal/e2b) with forkbox's
// keys: E2B's SDKs send theirs as X-API-Key. A sandbox made there is the
// key's tenant's, as any other; the calls are audited as "E2B <method>
// <path>".
func (s *Server) serveE2BControl(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") == "" {
		if k := r.Header.Get("X-API-Key"); k != "" {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+k)
		}
	}
	p, err := s.authenticate(r)
	if err != nil {
		status := errStatus(err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"code": status, "message": err.Error() + " (E2B clients: E2B_API_KEY holds a forkbox key)"})
		s.requests.WithLabelValues("e2b-control", strconv.Itoa(status)).Inc()
		return
	}
	if p.Via == "" {
		p.Via = "e2b"
	}
	r = r.WithContext(tenant.With(r.Context(), p))
	sw := &statusWriter{ResponseWriter: w}
	if s.cfg.Cluster != nil {
		if handled, err := s.cfg.Cluster.Route(sw, r); err != nil || handled {
			if err != nil {
				sw.Header().Set("Content-Type", "application/json")
				sw.WriteHeader(errStatus(err))
				json.NewEncoder(sw).Encode(map[string]any{"code": errStatus(err), "message": err.Error()})
			}
			s.requests.WithLabelValues("e2b-control", "forwarded").Inc()
			return // recorded by the node that served it
		}
	}
	s.e2b.ServeControl(sw, r)
	code := sw.code
	if code == 0 {
		code = http.StatusOK
	}
	s.requests.WithLabelValues("e2b-control", strconv.Itoa(code)).Inc()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.record(r, "E2B "+r.Method+" "+r.URL.Path, "", code, nil)
	}
}
