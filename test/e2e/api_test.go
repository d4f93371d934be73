package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

// call makes a raw HTTP request to d and decodes the error body if any.
func call(t *testing.T, d *daemon, method, path, body string, hdr map[string]string) (int, api.ErrorBody, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e api.Error
	json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Error, raw
}

// countSandboxes counts d's sandboxes, terminated ones included (a refused
// create must leave no record in any state).
func countSandboxes(t *testing.T, d *daemon) int {
	t.Helper()
	list, err := d.c.ListSandboxes(ctxT(t), client.ListOptions{IncludeTerminated: true})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Sandboxes)
}

func TestAPIBadInput(t *testing.T) {
	needRoot(t)
	before := countSandboxes(t, shared)
	huge := `{"name":"` + strings.Repeat("a", 2<<20) + `"}`
	cases := []struct {
		name, method, path, body string
		status                   int
		code, mention            string
	}{
		{"unknown sandbox get", "GET", "/v1/sandboxes/sbx_nope", "", 404, "not_found", "sbx_nope"},
		{"unknown sandbox by name", "GET", "/v1/sandboxes/no-such-name", "", 404, "not_found", "no-such-name"},
		{"unknown sandbox delete", "DELETE", "/v1/sandboxes/sbx_nope", "", 404, "not_found", "sbx_nope"},
		{"unknown sandbox exec", "POST", "/v1/sandboxes/sbx_nope/exec", `{"cmd":"true"}`, 404, "not_found", "sbx_nope"},
		{"unknown sandbox files", "GET", "/v1/sandboxes/sbx_nope/files?path=x", "", 404, "not_found", "sbx_nope"},
		{"malformed json", "POST", "/v1/sandboxes", `{"name": `, 400, "invalid_argument", "malformed JSON"},
		{"not an object", "POST", "/v1/sandboxes", `[1,2]`, 400, "invalid_argument", ""},
		{"trailing garbage", "POST", "/v1/sandboxes", `{} {}`, 400, "invalid_argument", "after the object"},
		{"unknown field", "POST", "/v1/sandboxes", `{"memory_gb": 4}`, 400, "invalid_argument", "memory_gb"},
		{"wrong type", "POST", "/v1/sandboxes", `{"cpus": "two"}`, 400, "invalid_argument", "cpus"},
		{"memory too small", "POST", "/v1/sandboxes", `{"memory_mb": 1}`, 400, "invalid_argument", "memory_mb"},
		{"memory too large", "POST", "/v1/sandboxes", `{"memory_mb": 10000000}`, 400, "invalid_argument", "memory_mb"},
		{"cpus out of range", "POST", "/v1/sandboxes", `{"cpus": 0}`, 400, "invalid_argument", "cpus"},
		{"disk out of range", "POST", "/v1/sandboxes", `{"disk_mb": 1}`, 400, "invalid_argument", "disk_mb"},
		{"pids out of range", "POST", "/v1/sandboxes", `{"pids_limit": 2}`, 400, "invalid_argument", "pids_limit"},
		{"timeout out of range", "POST", "/v1/sandboxes", `{"timeout_secs": 0}`, 400, "invalid_argument", "timeout_secs"},
		{"bad name", "POST", "/v1/sandboxes", `{"name": "Has Spaces!"}`, 400, "invalid_argument", "name"},
		{"bad env key", "POST", "/v1/sandboxes", `{"env": {"1BAD": "x"}}`, 400, "invalid_argument", "env"},
		{"unknown image", "POST", "/v1/sandboxes", `{"image": "no-such-image"}`, 404, "not_found", "no-such-image"},
		{"unknown snapshot", "POST", "/v1/sandboxes", `{"snapshot_id": "snap_nope"}`, 404, "not_found", "snap_nope"},
		{"oversized body", "POST", "/v1/sandboxes", huge, 413, "too_large", ""},
		{"bad state filter", "GET", "/v1/sandboxes?state=sleeping", "", 400, "invalid_argument", "state"},
		{"unknown route", "GET", "/v1/nope", "", 404, "not_found", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, e, raw := call(t, shared, c.method, c.path, c.body, map[string]string{"Content-Type": "application/json"})
			if status != c.status || e.Code != c.code || !strings.Contains(e.Message, c.mention) {
				t.Fatalf("%s %s: %d %s; want %d %s mentioning %q", c.method, c.path, status, raw, c.status, c.code, c.mention)
			}
		})
	}
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	for _, c := range []struct{ name, body, mention string }{
		{"exec without cmd", `{}`, "cmd"},
		{"exec unknown field", `{"cmd":"true","shell":true}`, "shell"},
		{"exec bad timeout", `{"cmd":"true","timeout_secs":-1}`, "timeout_secs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, e, raw := call(t, shared, "POST", "/v1/sandboxes/"+sb.ID+"/exec", c.body, nil)
			if status != 400 || e.Code != "invalid_argument" || !strings.Contains(e.Message, c.mention) {
				t.Fatalf("%s: %d %s", c.name, status, raw)
			}
		})
	}
	if status, _, raw := call(t, shared, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=x&mode=999", "x", nil); status != 400 {
		t.Fatalf("bad file mode: %d %s", status, raw)
	}
	// Nothing was created by any refused call.
	if after := countSandboxes(t, shared); after != before+1 {
		t.Fatalf("refused calls created sandboxes: %d before, %d after (1 created on purpose)", before, after)
	}
}

func TestAPIKeyRequired(t *testing.T) {
	needRoot(t)
	d, err := startDaemon(filepath.Join(t.TempDir(), "keyed"), []string{"FORKBOX_API_KEY=s3cret-key"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })
	for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-key"}, {"Authorization": "Basic s3cret-key"}} {
		for _, path := range []string{"/v1/sandboxes", "/metrics", "/v1/openapi.json"} {
			status, e, raw := call(t, d, "GET", path, "", hdr)
			if status != 401 || e.Code != "unauthenticated" {
				t.Fatalf("GET %s with %v: %d %s, want 401", path, hdr, status, raw)
			}
		}
		status, _, _ := call(t, d, "POST", "/v1/sandboxes", "{}", hdr)
		if status != 401 {
			t.Fatalf("create with %v: %d, want 401", hdr, status)
		}
	}
	// Health stays open; the right key works.
	if status, _, _ := call(t, d, "GET", "/healthz", "", nil); status != 200 {
		t.Fatalf("healthz without key: %d", status)
	}
	if status, _, raw := call(t, d, "GET", "/v1/sandboxes", "", map[string]string{"Authorization": "Bearer s3cret-key"}); status != 200 || !bytes.Contains(raw, []byte(`"sandboxes"`)) {
		t.Fatalf("with the key: %d %s", status, raw)
	}
	if n := countSandboxes(t, d); n != 0 {
		t.Fatalf("refused creates made %d sandboxes", n)
	}
}

func TestRefusesNonLoopbackWithoutKey(t *testing.T) {
	needRoot(t)
	out, err := runCLI(t, "", "serve", "--listen", "0.0.0.0:0", "--data-dir", t.TempDir())
	if err == nil || !strings.Contains(out, "FORKBOX_API_KEY") {
		t.Fatalf("serve on 0.0.0.0 without a key: err %v, output %q", err, out)
	}
}

func TestHealthMetricsOpenAPI(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	run(t, shared, sb.ID, "true")
	status, _, raw := call(t, shared, "GET", "/metrics", "", nil)
	if status != 200 {
		t.Fatalf("metrics: %d", status)
	}
	for _, want := range []string{"forkbox_sandboxes_running", "forkbox_sandbox_create_seconds_bucket", "forkbox_exec_seconds_count",
		`forkbox_sandbox_memory_bytes{name="",sandbox="` + sb.ID + `"}`, "forkbox_http_requests_total"} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
	status, _, raw = call(t, shared, "GET", "/v1/openapi.json", "", nil)
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if status != 200 || json.Unmarshal(raw, &doc) != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi: %d", status)
	}
	for path, methods := range map[string][]string{
		"/v1/sandboxes":                      {"get", "post"},
		"/v1/sandboxes/{sandbox}":            {"get", "delete"},
		"/v1/sandboxes/{sandbox}/exec":       {"post"},
		"/v1/sandboxes/{sandbox}/files":      {"get", "put", "delete"},
		"/v1/sandboxes/{sandbox}/files/list": {"get"},
		"/healthz":                           {"get"},
	} {
		for _, m := range methods {
			if _, ok := doc.Paths[path][m]; !ok {
				t.Errorf("openapi lacks %s %s", m, path)
			}
		}
	}
}
