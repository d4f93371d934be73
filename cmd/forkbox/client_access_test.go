package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// fakeAccess speaks the key, tenant, usage and audit routes from memory. The
// API key "user" is a user key of tenant acme; any other key is an admin key.
type fakeAccess struct {
	mu      sync.Mutex
	keys    []api.Key
	tenants map[string]*api.Tenant
	audit   []api.AuditEntry // newest first
	// last is the last request: "METHOD PATH?QUERY" and its body.
	last, lastBody string
}

func newFakeAccess(t *testing.T) (*fakeAccess, string) {
	d := &fakeAccess{tenants: map[string]*api.Tenant{}}
	mux := http.NewServeMux()
	admin := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "Bearer user" {
				replyErr(w, errdefs.PermissionDenied("%s needs an admin key", r.URL.Path))
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("POST /v1/keys", admin(d.createKey))
	mux.HandleFunc("GET /v1/keys", admin(d.listKeys))
	mux.HandleFunc("DELETE /v1/keys/{id}", admin(d.revokeKey))
	mux.HandleFunc("GET /v1/tenants", admin(d.listTenants))
	mux.HandleFunc("GET /v1/tenants/{tenant}", admin(d.getTenant))
	mux.HandleFunc("PUT /v1/tenants/{tenant}", admin(d.setTenant))
	mux.HandleFunc("GET /v1/usage", d.usage)
	mux.HandleFunc("GET /v1/audit", admin(d.listAudit))
	mux.HandleFunc("POST /v1/sandboxes", d.overQuota)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d.mu.Lock()
		d.last, d.lastBody = r.Method+" "+r.URL.EscapedPath(), string(body)
		if r.URL.RawQuery != "" {
			d.last += "?" + r.URL.RawQuery
		}
		d.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return d, srv.URL
}

// forget clears the last request, so that a command that sends nothing shows.
func (d *fakeAccess) forget() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last, d.lastBody = "", ""
}

// request returns the last request and its body.
func (d *fakeAccess) request() (string, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last, d.lastBody
}

func (d *fakeAccess) tenant(name string) *api.Tenant {
	t := d.tenants[name]
	if t == nil {
		t = &api.Tenant{Name: name}
		d.tenants[name] = t
	}
	return t
}

func (d *fakeAccess) createKey(w http.ResponseWriter, r *http.Request) {
	var req api.CreateKeyRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		replyErr(w, errdefs.InvalidArgument("body: %v", err))
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now().Add(-3 * time.Hour)
	k := api.Key{ID: fmt.Sprintf("key_%d", len(d.keys)+1), Tenant: req.Tenant, Role: req.Role, Name: req.Name,
		CreatedAt: now, ExpiresAt: req.ExpiresAt}
	if k.Role == "" {
		k.Role = api.RoleUser
	}
	if req.ExpiresIn != "" {
		dur, err := time.ParseDuration(req.ExpiresIn)
		if err != nil {
			replyErr(w, errdefs.InvalidArgument("expires_in: %v", err))
			return
		}
		at := now.Add(dur)
		k.ExpiresAt = &at
	}
	t := d.tenant(req.Tenant)
	if req.Quotas != nil {
		t.Quotas = *req.Quotas
	}
	d.keys = append(d.keys, k)
	k.Secret = "fbk_secret_" + strconv.Itoa(len(d.keys))
	reply(w, 201, k)
}

func (d *fakeAccess) listKeys(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	list := api.KeyList{Keys: []api.Key{}}
	for _, k := range d.keys {
		if tn := r.URL.Query().Get("tenant"); tn == "" || k.Tenant == tn {
			list.Keys = append(list.Keys, k)
		}
	}
	reply(w, 200, list)
}

func (d *fakeAccess) revokeKey(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.keys {
		if k := &d.keys[i]; k.ID == r.PathValue("id") {
			now := time.Now()
			k.RevokedAt = &now
			reply(w, 200, k)
			return
		}
	}
	replyErr(w, errdefs.NotFound("key %q not found", r.PathValue("id")))
}

// withUsage returns the tenant with a usage that is the same for everyone.
func withUsage(t api.Tenant) api.Tenant {
	t.Usage = &api.TenantUsage{Tenant: t.Name, RunningSandboxes: 1, MemoryMB: 1024, CPUs: 1.5, SuspendedSandboxes: 2,
		SnapshotBytes: 3 << 30, ImageBytes: 0, Quotas: t.Quotas}
	return t
}

func (d *fakeAccess) listTenants(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	list := api.TenantList{Tenants: []api.Tenant{}}
	for _, name := range []string{"acme", "beta"} {
		if t := d.tenants[name]; t != nil {
			list.Tenants = append(list.Tenants, withUsage(*t))
		}
	}
	reply(w, 200, list)
}

func (d *fakeAccess) getTenant(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tenants[r.PathValue("tenant")]
	if t == nil {
		replyErr(w, errdefs.NotFound("tenant %q not found", r.PathValue("tenant")))
		return
	}
	reply(w, 200, withUsage(*t))
}

func (d *fakeAccess) setTenant(w http.ResponseWriter, r *http.Request) {
	var body api.Tenant
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		replyErr(w, errdefs.InvalidArgument("body: %v", err))
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tenant(r.PathValue("tenant"))
	t.Quotas = body.Quotas
	reply(w, 200, withUsage(*t))
}

func (d *fakeAccess) usage(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("tenant")
	if name == "" {
		name = "acme"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	reply(w, 200, withUsage(*d.tenant(name)).Usage)
}

func (d *fakeAccess) listAudit(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := r.URL.Query()
	limit, before := 100, int64(0)
	if s := q.Get("limit"); s != "" {
		limit, _ = strconv.Atoi(s)
	}
	if s := q.Get("before"); s != "" {
		before, _ = strconv.ParseInt(s, 10, 64)
	}
	list := api.AuditList{Entries: []api.AuditEntry{}}
	for _, e := range d.audit {
		if (before == 0 || e.ID < before) && len(list.Entries) < limit {
			list.Entries = append(list.Entries, e)
		}
	}
	reply(w, 200, list)
}

// overQuota answers every create with a 429 for the quota the body's image
// names ("snapshot" for snapshot_bytes, else running_sandboxes).
func (d *fakeAccess) overQuota(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	json.NewDecoder(r.Body).Decode(&req)
	q := &api.QuotaExceeded{Quota: api.QuotaRunningSandboxes, Use: 2, Requested: 1, Limit: 2}
	if req.Image == "snapshot" {
		q = &api.QuotaExceeded{Quota: api.QuotaSnapshotBytes, Use: 1 << 30, Requested: 512 << 20, Limit: 1 << 30}
	}
	reply(w, 429, api.Error{Error: api.ErrorBody{Code: "resource_exhausted", Message: "tenant acme is over its quota", Quota: q}})
}

func TestCLIKeyCreate(t *testing.T) {
	d, url := newFakeAccess(t)

	out, errOut, err := cli(t, url, "", "key", "create", "--tenant", "acme", "--name", "ci")
	if err != nil || errOut != "" || out != "key key_1 for tenant acme (user)\nsecret: fbk_secret_1\nstore it now: it is not shown again\n" {
		t.Errorf("key create: out=%q err=%q %v", out, errOut, err)
	}
	if req, body := d.request(); req != "POST /v1/keys" || body != `{"tenant":"acme","role":"user","name":"ci"}` {
		t.Errorf("key create sent %s %s", req, body)
	}

	// Flags to the request body: --expires as a duration, days or a time,
	// and the quota flags given (and only those).
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenant", "acme", "--expires", "720h", "--max-running", "2", "--max-cpus", "1.5"},
			`{"tenant":"acme","role":"user","expires_in":"720h","quotas":{"running_sandboxes":2,"cpus":1.5}}`},
		{[]string{"--tenant", "acme", "--expires", "30d", "--role", "admin"},
			`{"tenant":"acme","role":"admin","expires_in":"720h"}`},
		{[]string{"--tenant", "beta", "--expires", "2027-01-01T00:00:00Z", "--max-memory-mb", "4096", "--max-suspended", "0",
			"--max-snapshot-bytes", "20G", "--max-image-bytes", "1073741824"},
			`{"tenant":"beta","role":"user","expires_at":"2027-01-01T00:00:00Z","quotas":{"memory_mb":4096,"suspended_sandboxes":0,"snapshot_bytes":21474836480,"image_bytes":1073741824}}`},
		{[]string{"--tenant", "beta", "--expires", "2027-06-30", "--max-snapshot-bytes", "1.5GiB", "--max-running", "-1"},
			`{"tenant":"beta","role":"user","expires_at":"2027-06-30T00:00:00Z","quotas":{"snapshot_bytes":1610612736}}`},
		{[]string{"--tenant", "beta", "--expires", "2027-06-30T12:00:00+02:00"},
			`{"tenant":"beta","role":"user","expires_at":"2027-06-30T12:00:00+02:00"}`},
	} {
		if _, _, err := cli(t, url, "", append([]string{"key", "create"}, c.args...)...); err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if _, body := d.request(); body != c.want {
			t.Errorf("%q sent %s\nwant %s", c.args, body, c.want)
		}
	}
	// The quotas of the last create with quota flags are beta's.
	d.mu.Lock()
	if q := d.tenants["beta"].Quotas; q.SnapshotBytes == nil || *q.SnapshotBytes != 1610612736 || q.MemoryMB != nil || q.RunningSandboxes != nil {
		t.Errorf("beta's quotas = %+v", q)
	}
	d.mu.Unlock()

	out, _, err = cli(t, url, "", "key", "create", "--tenant", "acme", "--expires", "24h")
	lines := strings.Split(out, "\n")
	if err != nil || len(lines) != 5 || lines[0] != "key key_7 for tenant acme (user)" || !strings.HasPrefix(lines[1], "expires: ") ||
		lines[2] != "secret: fbk_secret_7" || lines[3] != "store it now: it is not shown again" {
		t.Errorf("key create --expires: %v\n%s", err, out)
	} else if at, err := time.Parse(time.RFC3339, strings.TrimPrefix(lines[1], "expires: ")); err != nil || time.Until(at) > 21*time.Hour || time.Until(at) < 20*time.Hour {
		t.Errorf("expires line %q: %v", lines[1], err) // made 3h ago, for 24h
	}

	out, _, err = cli(t, url, "", "--json", "key", "create", "--tenant", "acme", "--role", "admin")
	var k api.Key
	if err != nil || json.Unmarshal([]byte(out), &k) != nil || k.ID != "key_8" || k.Secret != "fbk_secret_8" || k.Role != api.RoleAdmin || k.Tenant != "acme" {
		t.Errorf("key create --json: %v\n%s", err, out)
	}

	d.forget()
	for _, c := range []struct {
		args []string
		kind error
		want string
	}{
		{[]string{"key", "create"}, nil, "key create: give the key's --tenant"},
		{[]string{"key", "create", "--tenant", "acme", "--role", "root"}, nil, `key create: --role "root": want user or admin`},
		{[]string{"key", "create", "--tenant", "acme", "--expires", "soon"}, nil,
			`key create: --expires "soon": want a duration (720h, 30d) or a time (2027-01-01T00:00:00Z, 2027-01-01)`},
		{[]string{"key", "create", "--tenant", "acme", "--expires", "-1h"}, nil, `key create: --expires "-1h": want a positive duration`},
		{[]string{"key", "create", "--tenant", "acme", "--expires", "0d"}, nil, `key create: --expires "0d": want a positive number of days, like 30d`},
		{[]string{"key", "create", "--tenant", "acme", "--max-running", "-2"}, nil, "key create: --max-running -2: want 0 or more, or -1 for unlimited"},
		{[]string{"key", "create", "--tenant", "acme", "--max-cpus", "-0.5"}, nil, "key create: --max-cpus -0.5: want 0 or more, or -1 for unlimited"},
		{[]string{"key", "create", "--tenant", "acme", "--max-image-bytes", "10X"}, nil,
			`invalid argument "10X" for "--max-image-bytes" flag: want bytes, or a size with a unit: 512M, 20G, 1.5T`},
		{[]string{"key", "create", "--tenant", "acme", "extra"}, nil, `unknown command "extra" for "forkbox key create"`},
		{[]string{"--api-key", "user", "key", "create", "--tenant", "acme"}, errdefs.ErrPermissionDenied, "/v1/keys needs an admin key"},
	} {
		_, _, err := cli(t, url, "", c.args...)
		if err == nil || err.Error() != c.want || (c.kind != nil && !errors.Is(err, c.kind)) || exitCode(err) != 1 {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
	if req, _ := d.request(); req != "POST /v1/keys" { // only the user key's call got through
		t.Errorf("bad flags sent %q", req)
	}
}

func TestCLIKeyLsRevoke(t *testing.T) {
	d, url := newFakeAccess(t)
	cli(t, url, "", "key", "create", "--tenant", "acme", "--name", "ci", "--expires", "720h")
	cli(t, url, "", "key", "create", "--tenant", "acme", "--role", "admin")
	cli(t, url, "", "key", "create", "--tenant", "beta", "--expires", "2h")

	out, errOut, err := cli(t, url, "", "key", "revoke", "key_2")
	if err != nil || out != "key_2 revoked\n" || errOut != "" {
		t.Errorf("key revoke: out=%q err=%q %v", out, errOut, err)
	}
	if req, body := d.request(); req != "DELETE /v1/keys/key_2" || body != "" {
		t.Errorf("key revoke sent %s %q", req, body)
	}

	// key_3 was made 3h ago for 2h: expired an hour ago.
	out, _, err = cli(t, url, "", "key", "ls")
	want := "ID TENANT ROLE NAME CREATED EXPIRES STATUS\n" +
		"key_1 acme user ci 3h ago in 29d active\n" +
		"key_2 acme admin - 3h ago never revoked\n" +
		"key_3 beta user - 3h ago 59m ago expired"
	if got := fields(out); err != nil || (got != want && got != strings.Replace(want, "59m ago", "1h ago", 1)) {
		t.Errorf("key ls: %v\n%s\nwant\n%s", err, got, want)
	}
	if req, _ := d.request(); req != "GET /v1/keys" {
		t.Errorf("key ls sent %s", req)
	}
	out, _, err = cli(t, url, "", "key", "list", "--tenant", "beta")
	if err != nil || !strings.HasPrefix(fields(out), "ID TENANT ROLE NAME CREATED EXPIRES STATUS\nkey_3 beta user - 3h ago ") ||
		strings.Count(out, "\n") != 2 {
		t.Errorf("key ls --tenant: %v\n%s", err, out)
	}
	if req, _ := d.request(); req != "GET /v1/keys?tenant=beta" {
		t.Errorf("key ls --tenant sent %s", req)
	}
	out, _, err = cli(t, url, "", "--json", "key", "ls", "--tenant", "acme")
	var list api.KeyList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Keys) != 2 || list.Keys[1].RevokedAt == nil ||
		list.Keys[0].Secret != "" || strings.Contains(out, "secret") {
		t.Errorf("key ls --json: %v\n%s", err, out)
	}
	if out, _, err := cli(t, url, "", "--json", "key", "ls", "--tenant", "nobody"); err != nil || strings.Join(strings.Fields(out), " ") != `{ "keys": [] }` {
		t.Errorf("key ls --json of none: %v %q", err, out)
	}

	out, _, err = cli(t, url, "", "--json", "key", "revoke", "key_1")
	var k api.Key
	if err != nil || json.Unmarshal([]byte(out), &k) != nil || k.ID != "key_1" || k.RevokedAt == nil {
		t.Errorf("key revoke --json: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		kind error
		want string
	}{
		{[]string{"key", "revoke", "nope"}, errdefs.ErrNotFound, `key "nope" not found`},
		{[]string{"key", "revoke"}, nil, "key revoke: name the key: forkbox key revoke ID (see forkbox key ls)"},
		{[]string{"--api-key", "user", "key", "ls"}, errdefs.ErrPermissionDenied, "/v1/keys needs an admin key"},
		{[]string{"key", "frob"}, nil, `unknown command "frob" for "forkbox key"`},
	} {
		_, _, err := cli(t, url, "", c.args...)
		if err == nil || err.Error() != c.want || (c.kind != nil && !errors.Is(err, c.kind)) {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
}

func TestCLITenants(t *testing.T) {
	d, url := newFakeAccess(t)
	cli(t, url, "", "key", "create", "--tenant", "acme", "--max-running", "2", "--max-memory-mb", "4096",
		"--max-cpus", "4", "--max-snapshot-bytes", "10G")
	cli(t, url, "", "key", "create", "--tenant", "beta")

	out, _, err := cli(t, url, "", "tenant", "ls")
	want := "NAME RUNNING MEMORY CPUS SUSPENDED SNAPSHOTS IMAGES\n" +
		"acme 1/2 1 GiB/4 GiB 1.5/4 2/- 3.0 GiB/10.0 GiB 0 B/-\n" +
		"beta 1/- 1 GiB/- 1.5/- 2/- 3.0 GiB/- 0 B/-"
	if err != nil || fields(out) != want {
		t.Errorf("tenant ls: %v\n%s\nwant\n%s", err, fields(out), want)
	}
	out, _, err = cli(t, url, "", "tenant", "show", "acme")
	want = "tenant acme\nNAME USE LIMIT\nrunning_sandboxes 1 2\nmemory_mb 1 GiB 4 GiB\ncpus 1.5 4\n" +
		"suspended_sandboxes 2 unlimited\nsnapshot_bytes 3.0 GiB 10.0 GiB\nimage_bytes 0 B unlimited"
	if err != nil || fields(out) != want {
		t.Errorf("tenant show: %v\n%s\nwant\n%s", err, fields(out), want)
	}

	// set changes the quotas given, -1 clears one, and the rest are kept.
	out, _, err = cli(t, url, "", "tenant", "set", "acme", "--max-memory-mb", "-1", "--max-cpus", "-1", "--max-running", "3",
		"--max-image-bytes", "512M")
	if req, body := d.request(); req != "PUT /v1/tenants/acme" ||
		body != `{"quotas":{"running_sandboxes":3,"snapshot_bytes":10737418240,"image_bytes":536870912}}` {
		t.Errorf("tenant set sent %s %s", req, body)
	}
	want = "tenant acme\nNAME USE LIMIT\nrunning_sandboxes 1 3\nmemory_mb 1 GiB unlimited\ncpus 1.5 unlimited\n" +
		"suspended_sandboxes 2 unlimited\nsnapshot_bytes 3.0 GiB 10.0 GiB\nimage_bytes 0 B 512.0 MiB"
	if err != nil || fields(out) != want {
		t.Errorf("tenant set: %v\n%s\nwant\n%s", err, fields(out), want)
	}
	out, _, err = cli(t, url, "", "--json", "tenant", "set", "acme", "--max-snapshot-bytes", "-1", "--max-suspended", "0")
	var tn api.Tenant
	if err != nil || json.Unmarshal([]byte(out), &tn) != nil || tn.Name != "acme" || tn.Quotas.SnapshotBytes != nil ||
		tn.Quotas.SuspendedSandboxes == nil || *tn.Quotas.SuspendedSandboxes != 0 || *tn.Quotas.RunningSandboxes != 3 || tn.Usage == nil {
		t.Errorf("tenant set --json: %v\n%s", err, out)
	}
	if _, body := d.request(); body != `{"quotas":{"running_sandboxes":3,"suspended_sandboxes":0,"image_bytes":536870912}}` {
		t.Errorf("tenant set sent %s", body)
	}
	// A tenant with nothing yet: only the quotas given.
	if _, _, err := cli(t, url, "", "tenant", "set", "gamma", "--max-running", "1"); err != nil {
		t.Errorf("tenant set of a new tenant: %v", err)
	}
	if req, body := d.request(); req != "PUT /v1/tenants/gamma" || body != `{"quotas":{"running_sandboxes":1}}` {
		t.Errorf("tenant set of a new tenant sent %s %s", req, body)
	}

	out, _, err = cli(t, url, "", "--json", "tenant", "ls")
	var list api.TenantList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Tenants) != 2 || list.Tenants[0].Usage.SnapshotBytes != 3<<30 {
		t.Errorf("tenant ls --json: %v\n%s", err, out)
	}

	for _, c := range []struct {
		args []string
		kind error
		want string
	}{
		{[]string{"tenant", "set", "acme"}, nil, "tenant set: give the quotas to change: " + quotaFlagList + " (-1: unlimited)"},
		{[]string{"tenant", "set", "acme", "--max-suspended", "-3"}, nil, "tenant set: --max-suspended -3: want 0 or more, or -1 for unlimited"},
		{[]string{"tenant", "set", "--max-running", "1"}, nil, "tenant set: name the tenant: forkbox tenant set TENANT --max-running N ..."},
		{[]string{"tenant", "show", "nope"}, errdefs.ErrNotFound, `tenant "nope" not found`},
		{[]string{"tenant", "show"}, nil, "tenant show: name the tenant: forkbox tenant show TENANT"},
		{[]string{"--api-key", "user", "tenant", "ls"}, errdefs.ErrPermissionDenied, "/v1/tenants needs an admin key"},
		{[]string{"--api-key", "user", "tenant", "set", "acme", "--max-running", "9"}, errdefs.ErrPermissionDenied,
			"reading the quotas of acme: /v1/tenants/acme needs an admin key"},
	} {
		_, _, err := cli(t, url, "", c.args...)
		if err == nil || err.Error() != c.want || (c.kind != nil && !errors.Is(err, c.kind)) {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}

	// usage: the caller's tenant, or another one.
	out, _, err = cli(t, url, "", "--api-key", "user", "usage")
	want = "tenant acme\nNAME USE LIMIT\nrunning_sandboxes 1 3\nmemory_mb 1 GiB unlimited\ncpus 1.5 unlimited\n" +
		"suspended_sandboxes 2 0\nsnapshot_bytes 3.0 GiB unlimited\nimage_bytes 0 B 512.0 MiB"
	if req, _ := d.request(); err != nil || fields(out) != want || req != "GET /v1/usage" {
		t.Errorf("usage: %v (%s)\n%s\nwant\n%s", err, req, fields(out), want)
	}
	out, _, err = cli(t, url, "", "--json", "usage", "--tenant", "beta")
	var u api.TenantUsage
	if req, _ := d.request(); err != nil || json.Unmarshal([]byte(out), &u) != nil || u.Tenant != "beta" || u.CPUs != 1.5 || req != "GET /v1/usage?tenant=beta" {
		t.Errorf("usage --tenant --json: %v (%s)\n%s", err, req, out)
	}
}

func TestCLIAudit(t *testing.T) {
	d, url := newFakeAccess(t)
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	d.mu.Lock()
	for i := 9; i >= 1; i-- {
		d.audit = append(d.audit, api.AuditEntry{ID: int64(i), At: at.Add(time.Duration(i) * time.Minute), KeyID: "key_1", Tenant: "acme",
			Action: "POST /v1/sandboxes", Status: 201, Outcome: "ok"})
	}
	d.audit[1] = api.AuditEntry{ID: 8, At: at, KeyID: "", Tenant: "default", Action: "DELETE /v1/sandboxes/{sandbox}",
		Resource: "my box", Status: 404, Outcome: "not_found", Via: "mcp"}
	d.mu.Unlock()
	stamp := func(m int) string {
		return at.Add(time.Duration(m) * time.Minute).Local().Format("2006-01-02 15:04:05")
	}

	out, errOut, err := cli(t, url, "", "audit", "--tenant", "acme", "--key", "key_1", "--resource", "my box", "--limit", "3", "--before", "10")
	if req, _ := d.request(); req != "GET /v1/audit?before=10&key_id=key_1&limit=3&resource=my+box&tenant=acme" {
		t.Errorf("audit sent %s", req)
	}
	want := "TIME KEY TENANT ACTION RESOURCE STATUS OUTCOME\n" +
		stamp(9) + " key_1 acme POST /v1/sandboxes - 201 ok\n" +
		stamp(0) + " - default DELETE /v1/sandboxes/{sandbox} (mcp) my box 404 not_found\n" +
		stamp(7) + " key_1 acme POST /v1/sandboxes - 201 ok"
	if err != nil || fields(out) != want || errOut != "older entries: --before 7\n" {
		t.Errorf("audit: %v\n%s\nwant\n%s\nstderr %q", err, fields(out), want, errOut)
	}
	// The next page, from --before; a page that is not full has no hint.
	out, errOut, err = cli(t, url, "", "audit", "--before", "3", "-n", "5")
	if req, _ := d.request(); req != "GET /v1/audit?before=3&limit=5" || err != nil || errOut != "" ||
		fields(out) != "TIME KEY TENANT ACTION RESOURCE STATUS OUTCOME\n"+stamp(2)+" key_1 acme POST /v1/sandboxes - 201 ok\n"+stamp(1)+" key_1 acme POST /v1/sandboxes - 201 ok" {
		t.Errorf("audit --before: %s %v %q\n%s", req, err, errOut, out)
	}
	out, errOut, err = cli(t, url, "", "--json", "audit")
	var list api.AuditList
	if req, _ := d.request(); req != "GET /v1/audit" || err != nil || errOut != "" || json.Unmarshal([]byte(out), &list) != nil ||
		len(list.Entries) != 9 || list.Entries[1].Via != "mcp" || list.Entries[1].Resource != "my box" {
		t.Errorf("audit --json: %s %v %q\n%s", req, err, errOut, out)
	}

	d.forget()
	if _, _, err := cli(t, url, "", "audit", "--limit", "5000"); err == nil || err.Error() != "audit: --limit 5000: want 1 to 1000" {
		t.Errorf("audit --limit 5000: %v", err)
	}
	if req, _ := d.request(); req != "" {
		t.Errorf("a bad --limit sent %s", req)
	}
	if _, _, err := cli(t, url, "", "--api-key", "user", "audit"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("audit with a user key: %v", err)
	}
}

func TestCLIQuotaError(t *testing.T) {
	_, url := newFakeAccess(t)
	for _, c := range []struct{ image, want string }{
		{"", "quota running_sandboxes exceeded: use 2 + 1 > limit 2"},
		{"snapshot", "quota snapshot_bytes exceeded: use 1.0 GiB + 512.0 MiB > limit 1.0 GiB"},
	} {
		_, _, err := cli(t, url, "", "create", "--image", c.image)
		if err == nil || err.Error() != c.want || !errors.Is(err, errdefs.ErrResourceExhausted) || exitCode(err) != 1 {
			t.Errorf("create over quota (%q): %v, want %q", c.image, err, c.want)
		}
	}
	// Without quota details, a 429 is the daemon's message.
	if err := explain(fmt.Errorf("wrapped: %w", errdefs.ResourceExhausted("not enough memory on the host"))); err.Error() != "wrapped: not enough memory on the host" {
		t.Errorf("host limit: %v", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "-1": -1, "1024": 1024, "1K": 1 << 10, "512M": 512 << 20, "20G": 20 << 30,
		"1.5GiB": 3 << 29, "2TB": 2 << 40, "4MB": 4 << 20} {
		var f sizeFlag
		if err := f.Set(in); err != nil || f.n != want {
			t.Errorf("%q: %d, %v; want %d", in, f.n, err, want)
		}
	}
	for _, in := range []string{"", "G", "1X", "-1G", "1e30G", "10b", "1.5"} {
		var f sizeFlag
		if err := f.Set(in); err == nil {
			t.Errorf("%q: no error (%d)", in, f.n)
		}
	}
}
