package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// e2bCall is a request to the daemon's E2B API: the control plane with
// X-API-Key, or a sandbox's data plane with its headers.
func e2bCall(t *testing.T, d *daemon, method, path string, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header, b.String()
}

// TestE2BSDK runs E2B's own JS SDKs (npm e2b and @e2b/code-interpreter,
// pinned in test/e2bcompat/package-lock.json), unchanged, against a
// daemon: the flow in test/e2bcompat/flow.mjs, configured only by E2B's
// environment variables, with a tenant's forkbox key.
func TestE2BSDK(t *testing.T) {
	needRoot(t)
	dir, err := filepath.Abs("../e2bcompat")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b")); err != nil {
		t.Fatalf("E2B's SDK is not installed: run `make setup` (scripts/setup.sh runs npm ci in test/e2bcompat): %v", err)
	}
	const admin = "e2b-admin-s3cret"
	d, err := startDaemon(filepath.Join(t.TempDir(), "e2b"), []string{"FORKBOX_API_KEY=" + admin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })
	var key struct {
		Secret string `json:"secret"`
	}
	adminCall(t, d, admin, "POST", "/v1/keys", map[string]string{"tenant": "e2bflow"}, http.StatusCreated, &key)
	t.Cleanup(func() { deleteTenantSandboxes(t, d, admin, "e2bflow") })
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	for _, script := range []struct {
		name     string
		minSteps int
	}{{"flow.mjs", 16}, {"snapshots.mjs", 4}, {"watch.mjs", 1}} {
		t.Run(script.name, func(t *testing.T) {
			runE2BScript(t, d, node, dir, script.name, key.Secret, script.minSteps)
		})
	}
}

// runE2BScript runs one of test/e2bcompat's scripts against d with E2B's
// environment variables and checks the steps it reports.
func runE2BScript(t *testing.T, d *daemon, node, dir, script, key string, minSteps int) {
	t.Helper()
	cmd := exec.Command(node, script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_URL=http://"+d.addr, "E2B_SANDBOX_URL=http://"+d.addr, "E2B_API_KEY="+key)
	out, err := cmd.CombinedOutput()
	steps := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var s struct {
			Step   string `json:"step"`
			OK     bool   `json:"ok"`
			Detail string `json:"detail"`
		}
		if json.Unmarshal(sc.Bytes(), &s) != nil || s.Step == "" {
			continue
		}
		steps++
		if s.OK {
			t.Logf("ok   %-28s %s", s.Step, s.Detail)
		} else {
			t.Errorf("FAIL %-28s %s", s.Step, s.Detail)
		}
	}
	if err != nil || steps < minSteps {
		t.Fatalf("%s: %v, %d steps\n%s\ndaemon log:\n%s", script, err, steps, out, d.logTail())
	}
}

// TestE2BWire replays what E2B's Python SDKs send (they cannot be
// installed here: no PyPI), which differs from the JS SDK's: the v1 paths,
// "secure" and an always-true allow_internet_access, nulls in /execute;
// and checks that two tenants cannot reach each other's sandboxes through
// the E2B API.
func TestE2BWire(t *testing.T) {
	needRoot(t)
	const admin = "e2b-wire-admin"
	d, err := startDaemon(filepath.Join(t.TempDir(), "e2bwire"), []string{"FORKBOX_API_KEY=" + admin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })
	keys := map[string]string{}
	for _, tn := range []string{"pya", "pyb"} {
		var k struct {
			Secret string `json:"secret"`
		}
		adminCall(t, d, admin, "POST", "/v1/keys", map[string]string{"tenant": tn}, http.StatusCreated, &k)
		keys[tn] = k.Secret
		t.Cleanup(func() { deleteTenantSandboxes(t, d, admin, tn) })
	}
	a := map[string]string{"X-API-KEY": keys["pya"]}
	// Python's create: v1 path, every field sent, 201 only.
	status, _, body := e2bCall(t, d, "POST", "/sandboxes",
		`{"templateID":"code-interpreter-v1","timeout":300,"secure":true,"allow_internet_access":true,"metadata":{},"envVars":{"FROM":"py"}}`, a)
	var sb map[string]any
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &sb) != nil {
		t.Fatalf("v1 create: %d %s", status, body)
	}
	for _, f := range []string{"sandboxID", "templateID", "clientID", "envdVersion", "envdAccessToken", "trafficAccessToken"} {
		if v, _ := sb[f].(string); v == "" {
			t.Errorf("create answer lacks %s: %s", f, body)
		}
	}
	id := sb["sandboxID"].(string)
	tok := sb["envdAccessToken"].(string)
	jup := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999", "E2B-Traffic-Access-Token": sb["trafficAccessToken"].(string), "X-Access-Token": tok}
	// Python's /execute: nulls for what it does not set.
	status, _, body = e2bCall(t, d, "POST", "/execute", `{"code":"import os\nprint(os.environ['FROM'])\n6*7","context_id":null,"language":null,"env_vars":null}`, jup)
	if status != 200 {
		t.Fatalf("execute: %d %s", status, body)
	}
	var sawStdout, sawResult, sawCount, sawEnd bool
	for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a line of /execute is not JSON: %q", l)
		}
		switch m["type"] {
		case "stdout":
			sawStdout = m["text"] == "py\n" && m["timestamp"] != nil
		case "result":
			sawResult = m["text"] == "42" && m["is_main_result"] == true
		case "number_of_executions":
			sawCount = m["execution_count"] == float64(1)
		case "end_of_execution":
			sawEnd = true
		}
	}
	if !sawStdout || !sawResult || !sawCount || !sawEnd {
		t.Fatalf("execute lines (stdout %v, result %v, count %v, end %v):\n%s", sawStdout, sawResult, sawCount, sawEnd, body)
	}
	// E2B's cells run in /home/user, in a context of their own (forkbox's
	// default context stays in /workspace), with their variables.
	status, _, body = e2bCall(t, d, "POST", "/execute", `{"code":"import os\nos.getcwd()","context_id":null,"language":null,"env_vars":null}`, jup)
	if status != 200 || !strings.Contains(body, `"text":"/home/user"`) || !strings.Contains(body, `"execution_count":2`) {
		t.Errorf("E2B's default cwd: %d %s", status, body)
	}
	// Data plane without or with a wrong token: 401, as for an unknown
	// sandbox.
	for _, h := range []map[string]string{
		{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999"},
		{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999", "X-Access-Token": "fbxp_wrong"},
		{"E2b-Sandbox-Id": "sbx_nosuchsandbox00000", "E2b-Sandbox-Port": "49999", "X-Access-Token": tok},
	} {
		if status, _, body := e2bCall(t, d, "POST", "/execute", `{"code":"1"}`, h); status != http.StatusUnauthorized {
			t.Errorf("execute with %v: %d %s", h, status, body)
		}
	}
	// Python's info: the fields its models require, state running.
	status, _, body = e2bCall(t, d, "GET", "/sandboxes/"+id, "", a)
	var info map[string]any
	if status != 200 || json.Unmarshal([]byte(body), &info) != nil || info["state"] != "running" {
		t.Fatalf("info: %d %s", status, body)
	}
	for _, f := range []string{"sandboxID", "templateID", "clientID", "envdVersion", "startedAt", "endAt", "state", "cpuCount", "memoryMB", "diskSizeMB"} {
		if _, ok := info[f]; !ok {
			t.Errorf("info lacks %s: %s", f, body)
		}
	}
	// The other tenant: not found on every control route, and the list is
	// empty; its data-plane calls without the token are refused.
	b := map[string]string{"X-API-KEY": keys["pyb"]}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/sandboxes/" + id, ""}, {"POST", "/sandboxes/" + id + "/connect", `{"timeout":300}`},
		{"POST", "/v2/sandboxes/" + id + "/connect", `{}`}, {"POST", "/sandboxes/" + id + "/pause", `{"memory":true}`},
		{"POST", "/sandboxes/" + id + "/timeout", `{"timeout":60}`}, {"DELETE", "/sandboxes/" + id, ""},
	} {
		if status, _, body := e2bCall(t, d, c.method, c.path, c.body, b); status != http.StatusNotFound || !strings.Contains(body, `"code":404`) {
			t.Errorf("tenant pyb %s %s: %d %s; want 404 in E2B's shape", c.method, c.path, status, body)
		}
	}
	if status, _, body := e2bCall(t, d, "GET", "/v2/sandboxes", "", b); status != 200 || strings.TrimSpace(body) != "[]" {
		t.Errorf("tenant pyb's list: %d %s", status, body)
	}
	// Python's pause (memory: true) and connect (v1, timeout 300): 204,
	// then 201 (resumed), then 200 (running).
	if status, _, body := e2bCall(t, d, "POST", "/sandboxes/"+id+"/pause", `{"memory":true}`, a); status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", status, body)
	}
	if status, _, body := e2bCall(t, d, "POST", "/sandboxes/"+id+"/pause", `{"memory":true}`, a); status != http.StatusConflict {
		t.Errorf("second pause: %d %s; want 409", status, body)
	}
	if status, _, body := e2bCall(t, d, "POST", "/sandboxes/"+id+"/connect", `{"timeout":300}`, a); status != http.StatusCreated || !strings.Contains(body, tok) {
		t.Fatalf("connect after pause: %d %s", status, body)
	}
	if status, _, body := e2bCall(t, d, "POST", "/sandboxes/"+id+"/connect", `{"timeout":300}`, a); status != http.StatusOK {
		t.Errorf("connect to a running sandbox: %d %s", status, body)
	}
	// The sandbox is the tenant's in forkbox's own API too.
	if status, _, body := rawRequest(t, d, "GET", "/v1/sandboxes/"+id, nil, map[string]string{"Authorization": "Bearer " + keys["pya"]}); status != 200 {
		t.Errorf("the E2B sandbox through forkbox's API: %d %s", status, body)
	}
	// A fork (and a restore) gets tokens of its own: the parent's token
	// does not open it.
	status, _, body = e2bCall(t, d, "POST", "/sandboxes/"+id+"/fork", `{"count":1}`, a)
	var forks []struct {
		Sandbox map[string]any `json:"sandbox"`
	}
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &forks) != nil || len(forks) != 1 || forks[0].Sandbox == nil {
		t.Fatalf("fork: %d %s", status, body)
	}
	fid, ftok := forks[0].Sandbox["sandboxID"].(string), forks[0].Sandbox["envdAccessToken"].(string)
	if ftok == "" || ftok == tok {
		t.Fatalf("the fork's token %q is its parent's %q", ftok, tok)
	}
	if status, _, body := e2bCall(t, d, "POST", "/execute", `{"code":"1"}`, map[string]string{"E2b-Sandbox-Id": fid, "E2b-Sandbox-Port": "49999", "X-Access-Token": tok}); status != http.StatusUnauthorized {
		t.Errorf("the parent's token on the fork: %d %s", status, body)
	}
	if status, _, body := e2bCall(t, d, "POST", "/execute", `{"code":"1 + 1"}`, map[string]string{"E2b-Sandbox-Id": fid, "E2b-Sandbox-Port": "49999", "X-Access-Token": ftok}); status != 200 || !strings.Contains(body, `"text":"2"`) {
		t.Errorf("the fork with its own token: %d %s", status, body)
	}
	// Kill: 204, then 404; the data plane then answers 502 ("gone").
	if status, _, body := e2bCall(t, d, "DELETE", "/sandboxes/"+id, "", a); status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", status, body)
	}
	if status, _, body := e2bCall(t, d, "DELETE", "/sandboxes/"+id, "", a); status != http.StatusNotFound || !strings.Contains(body, `"code":404`) {
		t.Errorf("second kill: %d %s", status, body)
	}
	if status, _, body := e2bCall(t, d, "POST", "/execute", `{"code":"1"}`, jup); status != http.StatusBadGateway {
		t.Errorf("execute in a killed sandbox: %d %s; want 502", status, body)
	}
	// A wrong key: 401 in E2B's shape.
	if status, _, body := e2bCall(t, d, "POST", "/sandboxes", `{"templateID":"base"}`, map[string]string{"X-API-KEY": "e2b_0123"}); status != http.StatusUnauthorized || !strings.Contains(body, `"code":401`) {
		t.Errorf("a wrong key: %d %s", status, body)
	}
}
