package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/chat/chattest"
)

// adminCall is a JSON call with the daemon's own key; it fails the test on
// any status but want.
func adminCall(t *testing.T, d *daemon, key, method, path string, body any, want int, out any) {
	t.Helper()
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	status, _, resp := rawRequest(t, d, method, path, b, map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"})
	if status != want {
		t.Fatalf("%s %s: %d %s; want %d", method, path, status, resp, want)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(resp), out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, resp)
		}
	}
}

// TestTenants: two tenants with keys made by the admin key. Neither can
// list, read, exec in, snapshot, fork, pool from or delete the other's
// resources — 404 on every route, over REST, MCP and the chat API — names
// are per tenant, quotas answer 429 with their numbers, a revoked or expired
// key is refused at once, and the audit log shows who did what.
func TestTenants(t *testing.T) {
	needRoot(t)
	model := chattest.NewOpenAI(t)
	model.SetNext(func(int, map[string]any) chattest.Turn { return chattest.Turn{Text: "Done."} })
	const admin = "tenants-admin-s3cret"
	d := startChatDaemon(t, "FORKBOX_API_KEY="+admin, "OPENAI_BASE_URL="+model.URL+"/v1", "OPENAI_API_KEY=test-key", "FORKBOX_MODEL=scripted")
	ctx := ctxT(t)
	url := "http://" + d.addr
	mkKey := func(req api.CreateKeyRequest) api.Key {
		t.Helper()
		var k api.Key
		adminCall(t, d, admin, "POST", "/v1/keys", req, http.StatusCreated, &k)
		if !strings.HasPrefix(k.Secret, "fbk_") || k.Tenant != req.Tenant || k.ID == "" {
			t.Fatalf("key made: %+v", k)
		}
		return k
	}
	acmeKey := mkKey(api.CreateKeyRequest{Tenant: "acme", Name: "acme's ci"})
	globexKey := mkKey(api.CreateKeyRequest{Tenant: "globex", Quotas: &api.Quotas{RunningSandboxes: i64(1)}})
	acme := client.New(url, client.WithAPIKey(acmeKey.Secret))
	globex := client.New(url, client.WithAPIKey(globexKey.Secret))
	t.Cleanup(func() { deleteTenantSandboxes(t, d, admin, "acme", "globex") })
	var keys api.KeyList
	adminCall(t, d, admin, "GET", "/v1/keys", nil, 200, &keys)
	for _, k := range keys.Keys {
		if k.Secret != "" {
			t.Fatalf("a key listing shows a secret: %+v", k)
		}
	}

	// acme's resources: a named sandbox, a snapshot, a pool, an image, an
	// upload and a conversation.
	sb, err := acme.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := acme.Exec(ctx, sb.ID, api.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo acme > /workspace/owner"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("acme exec: %+v %v", r, err)
	}
	snap, err := acme.Checkpoint(ctx, sb.ID, api.CheckpointRequest{Type: api.SnapshotFilesystem, Name: "acme-snap"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acme.CreatePool(ctx, api.CreatePoolRequest{Name: "warm", Image: "python", Size: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.BuildImage(ctx, api.Recipe{Name: "acme-tools", Base: "python", Steps: []api.RecipeStep{{Env: map[string]string{"ACME": "1"}}}}, "", nil); err != nil {
		t.Fatal(err)
	}
	up, err := acme.UploadFile(ctx, "a.csv", strings.NewReader("x,y\n1,2\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	ans, err := acme.Chat(ctx, api.ChatRequest{Question: "What is in the file?", FileIDs: []string{up.ID}})
	if err != nil {
		t.Fatal(err)
	}
	conv := ans.ConversationID
	var acmeSandboxes api.SandboxList
	adminCall(t, d, acmeKey.Secret, "GET", "/v1/sandboxes", nil, 200, &acmeSandboxes)

	// globex: every route on acme's resources is 404, by id and by name.
	hdr := map[string]string{"Authorization": "Bearer " + globexKey.Secret, "Content-Type": "application/json"}
	type call struct{ method, path, body string }
	var calls []call
	for _, ref := range []string{sb.ID, "dev"} {
		s := "/v1/sandboxes/" + ref
		calls = append(calls,
			call{"GET", s, ""}, call{"PATCH", s, `{"network":{}}`}, call{"DELETE", s, ""},
			call{"POST", s + "/exec", `{"cmd":"cat","args":["/workspace/owner"]}`},
			call{"GET", s + "/files?path=/workspace/owner", ""}, call{"PUT", s + "/files?path=/workspace/owner", "globex"},
			call{"DELETE", s + "/files?path=/workspace/owner", ""}, call{"GET", s + "/files/list?path=/workspace", ""},
			call{"POST", s + "/code", `{"code":"1"}`}, call{"POST", s + "/checkpoint", `{"type":"filesystem"}`},
			call{"POST", s + "/fork", `{"count":1}`}, call{"POST", s + "/suspend", ""}, call{"POST", s + "/resume", ""},
			call{"GET", s + "/ports/8000", ""}, call{"PUT", s + "/ports/8000", `{"public":true}`}, call{"DELETE", s + "/ports/8000", ""},
			call{"GET", s + "/ports/8000/", ""},
			call{"POST", s + "/contexts", `{"language":"python"}`}, call{"GET", s + "/contexts", ""},
			call{"GET", s + "/cells", ""}, call{"GET", s + "/notebook", ""},
			call{"POST", s + "/notebook", `{"nbformat":4,"cells":[{"cell_type":"code","source":"1"}]}`})
	}
	calls = append(calls,
		call{"GET", "/v1/snapshots/" + snap.ID, ""}, call{"DELETE", "/v1/snapshots/" + snap.ID, ""},
		call{"POST", "/v1/sandboxes", `{"snapshot_id":"` + snap.ID + `"}`},
		call{"POST", "/v1/sandboxes", `{"pool":"warm"}`}, call{"DELETE", "/v1/pools/warm", ""},
		call{"GET", "/v1/images/acme-tools", ""}, call{"DELETE", "/v1/images/acme-tools", ""},
		call{"POST", "/v1/sandboxes", `{"image":"acme-tools"}`},
		call{"GET", "/v1/conversations/" + conv, ""}, call{"GET", "/v1/conversations/" + conv + "/notebook", ""},
		call{"DELETE", "/v1/conversations/" + conv, ""},
		call{"POST", "/v1/chat", `{"question":"and now?","conversation_id":"` + conv + `"}`},
		call{"POST", "/v1/chat", `{"question":"read it","file_ids":["` + up.ID + `"]}`},
		call{"GET", "/v1/files/" + up.ID, ""})
	for _, c := range calls {
		status, _, body := rawRequest(t, d, c.method, c.path, []byte(c.body), hdr)
		if status != http.StatusNotFound {
			t.Errorf("globex %s %s: %d %s; want 404", c.method, c.path, status, body)
		}
	}
	// Nor do globex's listings show them.
	for _, p := range []string{"/v1/sandboxes", "/v1/snapshots", "/v1/pools", "/v1/conversations", "/v1/images"} {
		status, _, body := rawRequest(t, d, "GET", p, nil, hdr)
		if status != 200 || strings.Contains(body, sb.ID) || strings.Contains(body, snap.ID) || strings.Contains(body, `"warm"`) ||
			strings.Contains(body, conv) || strings.Contains(body, "acme-tools") {
			t.Errorf("globex GET %s: %d %s", p, status, body)
		}
	}
	// The catalog's images are shared, read-only.
	if status, _, body := rawRequest(t, d, "DELETE", "/v1/images/python", nil, hdr); status != http.StatusForbidden {
		t.Errorf("globex deleting the shared python image: %d %s", status, body)
	}
	if _, err := globex.GetImage(ctx, "python"); err != nil {
		t.Errorf("globex reading the shared python image: %v", err)
	}

	// MCP: the same walls.
	gm, err := mcpHTTP(t, d, globexKey.Secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"run_code", map[string]any{"sandbox": sb.ID, "code": "open('/workspace/owner').read()"}},
		{"run_command", map[string]any{"sandbox": "dev", "command": "cat /workspace/owner"}},
		{"read_file", map[string]any{"sandbox": sb.ID, "path": "/workspace/owner"}},
		{"checkpoint", map[string]any{"sandbox": sb.ID}},
		{"fork", map[string]any{"sandbox": sb.ID, "count": 1}},
		{"terminate_sandbox", map[string]any{"sandbox": sb.ID}},
		{"list_snapshots", map[string]any{"sandbox": sb.ID}},
	} {
		res := mcpCall(t, gm, tc.tool, tc.args)
		if !res.IsError || !strings.Contains(mcpText(res), "not_found") {
			t.Errorf("globex MCP %s on acme's sandbox: error %v, %q", tc.tool, res.IsError, mcpText(res))
		}
	}
	var gl api.SandboxList
	mcpStructured(t, mcpOK(t, gm, "list_sandboxes", nil), &gl)
	if len(gl.Sandboxes) != 0 {
		t.Errorf("globex MCP list_sandboxes: %+v", gl.Sandboxes)
	}
	am, err := mcpHTTP(t, d, acmeKey.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if txt := mcpText(mcpOK(t, am, "run_command", map[string]any{"sandbox": "dev", "command": "cat /workspace/owner"})); !strings.Contains(txt, "acme") {
		t.Errorf("acme MCP on its own sandbox: %q", txt)
	}

	// acme's things are as they were.
	if r, err := acme.Exec(ctx, "dev", api.ExecRequest{Cmd: "cat", Args: []string{"/workspace/owner"}}); err != nil || strings.TrimSpace(r.Stdout) != "acme" {
		t.Fatalf("acme's sandbox after globex's tries: %+v %v", r, err)
	}
	if _, err := acme.GetSnapshot(ctx, snap.ID); err != nil {
		t.Fatalf("acme's snapshot: %v", err)
	}
	if _, err := acme.GetConversation(ctx, conv); err != nil {
		t.Fatalf("acme's conversation: %v", err)
	}

	// Names are per tenant; globex's quota of one running sandbox holds.
	gsb, err := globex.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "dev"})
	if err != nil {
		t.Fatalf("globex's own dev: %v", err)
	}
	if r, err := globex.Exec(ctx, "dev", api.ExecRequest{Cmd: "sh", Args: []string{"-c", "cat /workspace/owner 2>/dev/null || echo none"}}); err != nil || strings.TrimSpace(r.Stdout) != "none" {
		t.Fatalf("globex's dev resolves to: %+v %v", r, err)
	}
	status, _, body := rawRequest(t, d, "POST", "/v1/sandboxes", []byte(`{}`), hdr)
	var qe api.Error
	json.Unmarshal([]byte(body), &qe)
	if status != http.StatusTooManyRequests || qe.Error.Quota == nil || qe.Error.Quota.Quota != api.QuotaRunningSandboxes ||
		qe.Error.Quota.Use != 1 || qe.Error.Quota.Limit != 1 || qe.Error.Quota.Requested != 1 {
		t.Fatalf("globex's second sandbox: %d %s; want 429 naming running_sandboxes 1/1", status, body)
	}
	var fr api.ForkResult
	if status, _, body := rawRequest(t, d, "POST", "/v1/sandboxes/"+gsb.ID+"/fork", []byte(`{"count":2}`), hdr); status != http.StatusTooManyRequests ||
		json.Unmarshal([]byte(body), &fr) != nil {
		t.Fatalf("globex forking past its quota: %d %s", status, body)
	}
	// Both tenants have a "dev" serving its /workspace on port 8000: a
	// port token reaches its own tenant's dev, never the other one.
	serve := func(c *client.Client) {
		t.Helper()
		r, err := c.Exec(ctx, "dev", api.ExecRequest{Cmd: "sh", Args: []string{"-c",
			"cd /workspace && nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & " +
				"for i in $(seq 100); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8000), 1)\" 2>/dev/null && exit 0; sleep 0.1; done; exit 1"}})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("start a server in dev: %+v %v", r, err)
		}
	}
	serve(acme)
	serve(globex)
	gp, err := globex.Port(ctx, "dev", 8000)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		status, _, body := rawRequest(t, d, "GET", "/v1/sandboxes/dev/ports/8000/owner", nil, map[string]string{"X-Forkbox-Token": gp.Token})
		if status != http.StatusNotFound || strings.Contains(body, "acme") {
			t.Fatalf("globex's port token on dev/owner: %d %q; want globex's server's 404", status, body)
		}
	}
	// An admin acts within a tenant; a user key cannot.
	if status, _, body := rawRequest(t, d, "GET", "/v1/sandboxes/dev", nil, map[string]string{"Authorization": "Bearer " + admin, "X-Forkbox-Tenant": "acme"}); status != 200 || !strings.Contains(body, sb.ID) {
		t.Errorf("admin acting within acme: %d %s", status, body)
	}
	if status, _, body := rawRequest(t, d, "GET", "/v1/sandboxes/dev", nil, map[string]string{"Authorization": "Bearer " + globexKey.Secret, "X-Forkbox-Tenant": "acme"}); status != http.StatusForbidden {
		t.Errorf("globex acting within acme: %d %s", status, body)
	}

	var usage api.TenantUsage
	adminCall(t, d, globexKey.Secret, "GET", "/v1/usage", nil, 200, &usage)
	if usage.Tenant != "globex" || usage.RunningSandboxes != 1 || usage.Quotas.RunningSandboxes == nil || *usage.Quotas.RunningSandboxes != 1 {
		t.Fatalf("globex usage: %+v", usage)
	}
	_, _, metrics := rawRequest(t, d, "GET", "/metrics", nil, map[string]string{"Authorization": "Bearer " + admin})
	for _, want := range []string{`forkbox_tenant_usage{quota="running_sandboxes",tenant="globex"} 1`, `forkbox_tenant_quota{quota="running_sandboxes",tenant="globex"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// A user key is not an admin.
	for _, c := range []call{{"GET", "/v1/audit", ""}, {"GET", "/metrics", ""}, {"GET", "/v1/keys", ""}, {"POST", "/v1/keys", `{"tenant":"globex","role":"admin"}`},
		{"PUT", "/v1/tenants/globex", `{"quotas":{}}`}, {"GET", "/v1/usage?tenant=acme", ""}} {
		if status, _, body := rawRequest(t, d, c.method, c.path, []byte(c.body), hdr); status != http.StatusForbidden {
			t.Errorf("globex %s %s: %d %s; want 403", c.method, c.path, status, body)
		}
	}

	// The audit log: acme's create, globex's refused delete, acme's MCP call.
	var audit api.AuditList
	adminCall(t, d, admin, "GET", "/v1/audit?limit=1000", nil, 200, &audit)
	has := func(pred func(e api.AuditEntry) bool) bool {
		for _, e := range audit.Entries {
			if pred(e) {
				return true
			}
		}
		return false
	}
	if !has(func(e api.AuditEntry) bool {
		return e.KeyID == acmeKey.ID && e.Tenant == "acme" && e.Action == "POST /v1/sandboxes" && e.Status == 201 && e.Outcome == "ok"
	}) {
		t.Errorf("audit lacks acme's create: %+v", audit.Entries)
	}
	if !has(func(e api.AuditEntry) bool {
		return e.KeyID == globexKey.ID && e.Action == "DELETE /v1/sandboxes/{sandbox}" && e.Resource == sb.ID && e.Status == 404 && e.Outcome == "not_found"
	}) {
		t.Errorf("audit lacks globex's refused delete")
	}
	if !has(func(e api.AuditEntry) bool {
		return e.KeyID == acmeKey.ID && e.Via == "mcp" && e.Action == "POST /v1/sandboxes/{sandbox}/exec" && e.Resource == "dev"
	}) {
		t.Errorf("audit lacks acme's MCP exec")
	}

	// A revoked key is refused from the next call on; an expired one too.
	adminCall(t, d, admin, "DELETE", "/v1/keys/"+globexKey.ID, nil, 200, nil)
	if status, _, body := rawRequest(t, d, "GET", "/v1/sandboxes", nil, hdr); status != http.StatusUnauthorized || !strings.Contains(body, "revoked") {
		t.Fatalf("revoked key: %d %s", status, body)
	}
	if _, err := mcpHTTP(t, d, globexKey.Secret); err == nil {
		t.Fatal("a revoked key opened an MCP session")
	}
	short := mkKey(api.CreateKeyRequest{Tenant: "acme", ExpiresIn: "2s"})
	sc := client.New(url, client.WithAPIKey(short.Secret))
	if _, err := sc.ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("a fresh short-lived key: %v", err)
	}
	time.Sleep(time.Until(*short.ExpiresAt) + 100*time.Millisecond)
	if _, err := sc.ListSandboxes(ctx, client.ListOptions{}); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("an expired key: %v", err)
	}

	// The daemon and acme's sandbox still work; the admin key sees every
	// tenant's usage.
	if r, err := acme.Exec(ctx, sb.ID, api.ExecRequest{Cmd: "true"}); err != nil || r.ExitCode != 0 {
		t.Fatalf("acme after all that: %+v %v", r, err)
	}
	var tenants api.TenantList
	adminCall(t, d, admin, "GET", "/v1/tenants", nil, 200, &tenants)
	seen := map[string]bool{}
	for _, tn := range tenants.Tenants {
		seen[tn.Name] = tn.Usage != nil
	}
	if !seen["acme"] || !seen["globex"] || !seen["default"] {
		t.Fatalf("tenants: %+v", tenants)
	}
	acme.DeletePool(context.Background(), "warm")
	// The image store is shared by the test daemons: leave no image behind.
	if err := acme.DeleteImage(context.Background(), "acme-tools"); err != nil {
		t.Errorf("delete acme's image: %v", err)
	}
}

// deleteTenantSandboxes deletes the tenants' sandboxes, the admin acting
// within each (the daemon's own cleanup, deleteAll, sees the default
// tenant only).
func deleteTenantSandboxes(t *testing.T, d *daemon, admin string, tenants ...string) {
	for _, tn := range tenants {
		as := map[string]string{"Authorization": "Bearer " + admin, "X-Forkbox-Tenant": tn}
		var list api.SandboxList
		if _, _, body := rawRequest(t, d, "GET", "/v1/sandboxes", nil, as); json.Unmarshal([]byte(body), &list) == nil {
			for _, s := range list.Sandboxes {
				rawRequest(t, d, "DELETE", "/v1/sandboxes/"+s.ID, nil, as)
			}
		}
	}
}
