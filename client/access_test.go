package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// accessCall is one request as the test server saw it.
type accessCall struct {
	method, path, query, body, contentType string
}

func TestAccessCalls(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	expires := created.Add(720 * time.Hour)
	revoked := created.Add(time.Hour)
	key := api.Key{ID: "key_1", Tenant: "acme", Role: api.RoleUser, Name: "ci", CreatedAt: created, ExpiresAt: &expires}
	usage := api.TenantUsage{Tenant: "acme", RunningSandboxes: 1, MemoryMB: 1024, CPUs: 1.5, SuspendedSandboxes: 2,
		SnapshotBytes: 4096, ImageBytes: 8192, Quotas: api.Quotas{RunningSandboxes: ptr[int64](2), CPUs: ptr(4.0)}}
	var (
		mu   sync.Mutex
		last accessCall
	)
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		last = accessCall{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, string(body), r.Header.Get("Content-Type")}
		mu.Unlock()
		switch r.Method + " " + r.URL.EscapedPath() {
		case "POST /v1/keys":
			k := key
			k.Secret = "fbk_secret"
			writeJSON(w, 201, k)
		case "GET /v1/keys":
			k := key
			k.RevokedAt = &revoked
			writeJSON(w, 200, api.KeyList{Keys: []api.Key{key, k}})
		case "DELETE /v1/keys/key_1":
			k := key
			k.RevokedAt = &revoked
			writeJSON(w, 200, k)
		case "GET /v1/tenants":
			writeJSON(w, 200, api.TenantList{Tenants: []api.Tenant{{Name: "acme", Quotas: usage.Quotas, Usage: &usage}}})
		case "GET /v1/tenants/acme", "PUT /v1/tenants/acme":
			writeJSON(w, 200, api.Tenant{Name: "acme", Quotas: usage.Quotas, Usage: &usage})
		case "GET /v1/usage":
			writeJSON(w, 200, usage)
		case "GET /v1/audit":
			writeJSON(w, 200, api.AuditList{Entries: []api.AuditEntry{
				{ID: 7, At: created, KeyID: "key_1", Tenant: "acme", Action: "POST /v1/sandboxes", Status: 201, Outcome: "ok", RequestID: "req_1"},
				{ID: 6, At: created, KeyID: "key_1", Tenant: "acme", Action: "DELETE /v1/sandboxes/{sandbox}", Resource: "box", Status: 404, Outcome: "not_found", Via: "mcp"},
			}})
		default:
			writeErr(w, errdefs.NotFound("no route %s %s", r.Method, r.URL.EscapedPath()))
		}
	})
	ctx := context.Background()
	check := func(what string, want accessCall) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if last != want {
			t.Errorf("%s sent %+v\nwant %+v", what, last, want)
		}
	}

	in := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	k, err := c.CreateKey(ctx, api.CreateKeyRequest{Tenant: "acme", Role: api.RoleAdmin, Name: "ci", ExpiresAt: &in,
		Quotas: &api.Quotas{RunningSandboxes: ptr[int64](2), CPUs: ptr(1.5)}})
	if err != nil || k.Secret != "fbk_secret" || k.ID != "key_1" || !k.ExpiresAt.Equal(expires) || k.RevokedAt != nil {
		t.Fatalf("CreateKey = %+v, %v", k, err)
	}
	check("CreateKey", accessCall{"POST", "/v1/keys", "",
		`{"tenant":"acme","role":"admin","name":"ci","expires_at":"2027-01-01T00:00:00Z","quotas":{"running_sandboxes":2,"cpus":1.5}}`,
		"application/json"})
	if _, err := c.CreateKey(ctx, api.CreateKeyRequest{Tenant: "acme", ExpiresIn: "720h"}); err != nil {
		t.Fatal(err)
	}
	check("CreateKey with expires_in", accessCall{"POST", "/v1/keys", "", `{"tenant":"acme","expires_in":"720h"}`, "application/json"})

	list, err := c.ListKeys(ctx, "")
	if err != nil || len(list.Keys) != 2 || list.Keys[0].RevokedAt != nil || !list.Keys[1].RevokedAt.Equal(revoked) || list.Keys[1].Secret != "" {
		t.Fatalf("ListKeys = %+v, %v", list, err)
	}
	check("ListKeys", accessCall{"GET", "/v1/keys", "", "", ""})
	if _, err := c.ListKeys(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	check("ListKeys(acme)", accessCall{"GET", "/v1/keys", "tenant=acme", "", ""})

	k, err = c.RevokeKey(ctx, "key_1")
	if err != nil || k.RevokedAt == nil || !k.RevokedAt.Equal(revoked) {
		t.Fatalf("RevokeKey = %+v, %v", k, err)
	}
	check("RevokeKey", accessCall{"DELETE", "/v1/keys/key_1", "", "", ""})
	if _, err := c.RevokeKey(ctx, "a/b"); !errors.Is(err, ErrNotFound) || err.Error() != "no route DELETE /v1/keys/a%2Fb" {
		t.Errorf("RevokeKey(a/b): %v", err)
	}

	tl, err := c.ListTenants(ctx)
	if err != nil || len(tl.Tenants) != 1 || tl.Tenants[0].Usage == nil || !reflect.DeepEqual(*tl.Tenants[0].Usage, usage) {
		t.Fatalf("ListTenants = %+v, %v", tl, err)
	}
	check("ListTenants", accessCall{"GET", "/v1/tenants", "", "", ""})

	tn, err := c.GetTenant(ctx, "acme")
	if err != nil || tn.Name != "acme" || *tn.Quotas.RunningSandboxes != 2 || *tn.Quotas.CPUs != 4 || tn.Quotas.MemoryMB != nil ||
		tn.Usage == nil || tn.Usage.SnapshotBytes != 4096 {
		t.Fatalf("GetTenant = %+v, %v", tn, err)
	}
	check("GetTenant", accessCall{"GET", "/v1/tenants/acme", "", "", ""})

	tn, err = c.SetTenantQuotas(ctx, "acme", api.Quotas{MemoryMB: ptr[int64](4096), ImageBytes: ptr[int64](0)})
	if err != nil || tn.Name != "acme" {
		t.Fatalf("SetTenantQuotas = %+v, %v", tn, err)
	}
	check("SetTenantQuotas", accessCall{"PUT", "/v1/tenants/acme", "", `{"quotas":{"memory_mb":4096,"image_bytes":0}}`, "application/json"})
	if _, err := c.SetTenantQuotas(ctx, "acme", api.Quotas{}); err != nil {
		t.Fatal(err)
	}
	check("SetTenantQuotas(unlimited)", accessCall{"PUT", "/v1/tenants/acme", "", `{"quotas":{}}`, "application/json"})

	u, err := c.Usage(ctx, "")
	if err != nil || !reflect.DeepEqual(*u, usage) {
		t.Fatalf("Usage = %+v, %v", u, err)
	}
	check("Usage", accessCall{"GET", "/v1/usage", "", "", ""})
	if _, err := c.Usage(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	check("Usage(acme)", accessCall{"GET", "/v1/usage", "tenant=acme", "", ""})

	al, err := c.Audit(ctx, AuditOptions{})
	if err != nil || len(al.Entries) != 2 || al.Entries[0].ID != 7 || al.Entries[0].RequestID != "req_1" ||
		al.Entries[1].Resource != "box" || al.Entries[1].Via != "mcp" || al.Entries[1].Status != 404 || !al.Entries[1].At.Equal(created) {
		t.Fatalf("Audit = %+v, %v", al, err)
	}
	check("Audit", accessCall{"GET", "/v1/audit", "", "", ""})
	if _, err := c.Audit(ctx, AuditOptions{Tenant: "acme", KeyID: "key_1", Resource: "my box", Limit: 50, Before: 7}); err != nil {
		t.Fatal(err)
	}
	check("Audit(filtered)", accessCall{"GET", "/v1/audit", "before=7&key_id=key_1&limit=50&resource=my+box&tenant=acme", "", ""})
}

func TestAccessErrors(t *testing.T) {
	quota := &api.QuotaExceeded{Quota: api.QuotaRunningSandboxes, Use: 2, Requested: 1, Limit: 2}
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/keys":
			writeErr(w, errdefs.PermissionDenied("this needs an admin key"))
		case "/v1/sandboxes":
			writeJSON(w, 429, api.Error{Error: api.ErrorBody{Code: "resource_exhausted", Message: "tenant acme: running_sandboxes quota exceeded",
				RequestID: "req_9", Quota: quota}})
		case "/v1/usage":
			writeErr(w, errdefs.ResourceExhausted("not enough memory on the host"))
		}
	})
	ctx := context.Background()

	_, err := c.ListKeys(ctx, "")
	var ae *APIError
	if !errors.Is(err, ErrPermissionDenied) || !errors.As(err, &ae) || ae.Status != 403 || ae.Quota != nil || err.Error() != "this needs an admin key" {
		t.Errorf("ListKeys with a user key: %v (%+v)", err, ae)
	}

	_, err = c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	ae = nil
	if !errors.Is(err, ErrResourceExhausted) || !errors.As(err, &ae) || ae.Status != 429 ||
		ae.Quota == nil || !reflect.DeepEqual(*ae.Quota, *quota) || err.Error() != "tenant acme: running_sandboxes quota exceeded" {
		t.Errorf("over quota: %v (%+v)", err, ae)
	}

	// A host limit is a 429 without quota details.
	_, err = c.Usage(ctx, "")
	ae = nil
	if !errors.Is(err, ErrResourceExhausted) || !errors.As(err, &ae) || ae.Quota != nil {
		t.Errorf("host limit: %v (%+v)", err, ae)
	}
}

// A quota error can also end an exec or code stream (as its error event).
func TestStreamQuotaError(t *testing.T) {
	data := []byte(`{"code":"resource_exhausted","message":"over quota","quota":{"quota":"memory_mb","use":1024,"requested":512,"limit":1024}}`)
	err := failureError(data)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 429 || ae.Quota == nil || ae.Quota.Quota != api.QuotaMemoryMB ||
		ae.Quota.Use != 1024 || ae.Quota.Requested != 512 || ae.Quota.Limit != 1024 {
		t.Errorf("failureError = %v (%+v)", err, ae)
	}
}
