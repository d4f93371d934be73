package web

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, hdr map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func TestHandlerServesIndexAndAssets(t *testing.T) {
	h := Handler()
	cases := []struct {
		path, ctype string
	}{
		{"/", "text/html; charset=utf-8"},
		{"/ui/app.js", "text/javascript; charset=utf-8"},
		{"/ui/api.js", "text/javascript; charset=utf-8"},
		{"/ui/graph.js", "text/javascript; charset=utf-8"},
		{"/ui/markdown.js", "text/javascript; charset=utf-8"},
		{"/ui/app.css", "text/css; charset=utf-8"},
		{"/ui/favicon.svg", "image/svg+xml"},
	}
	for _, c := range cases {
		res := get(t, h, "GET", c.path, nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", c.path, res.StatusCode)
		}
		if got := res.Header.Get("Content-Type"); got != c.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", c.path, got, c.ctype)
		}
		if res.Header.Get("ETag") == "" || res.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: ETag %q Cache-Control %q", c.path, res.Header.Get("ETag"), res.Header.Get("Cache-Control"))
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", c.path)
		}
	}
	res := get(t, h, "GET", "/", nil)
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("index CSP = %q", csp)
	}
}

func TestHandlerRevalidatesWithETag(t *testing.T) {
	h := Handler()
	first := get(t, h, "GET", "/ui/app.js", nil)
	etag := first.Header.Get("ETag")
	res := get(t, h, "GET", "/ui/app.js", map[string]string{"If-None-Match": etag})
	if res.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match %s: %d, want 304", etag, res.StatusCode)
	}
	other := get(t, h, "GET", "/ui/app.css", nil).Header.Get("ETag")
	if other == etag {
		t.Fatal("two files share an ETag")
	}
	head := get(t, h, "HEAD", "/", nil)
	if head.StatusCode != http.StatusOK {
		t.Fatalf("HEAD /: %d", head.StatusCode)
	}
}

func TestHandlerRefusesUnknownAndOtherMethods(t *testing.T) {
	h := Handler()
	for _, p := range []string{"/ui/nope.js", "/ui/../embed.go", "/ui/static/app.js", "/other"} {
		if res := get(t, h, "GET", p, nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, res.StatusCode)
		}
	}
	if res := get(t, h, "POST", "/", nil); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", res.StatusCode)
	}
}

// Every asset index.html and the modules reference is embedded, so a typo
// cannot ship a UI that fails to load.
func TestReferencedAssetsExist(t *testing.T) {
	h := Handler()
	body, _ := io.ReadAll(get(t, h, "GET", "/", nil).Body)
	refs := regexp.MustCompile(`(?:src|href)="(/ui/[^"]+)"`).FindAllStringSubmatch(string(body), -1)
	modules := jsModules(t)
	imports := regexp.MustCompile(`(?m)^(?:import|export)\b[^;]*?\bfrom '\./([^']+)'|\bimport\('\./([^']+)'\)`)
	for _, m := range modules {
		js, _ := io.ReadAll(get(t, h, "GET", "/ui/"+m, nil).Body)
		for _, r := range imports.FindAllStringSubmatch(string(js), -1) {
			refs = append(refs, []string{"", "/ui/" + r[1] + r[2]})
		}
	}
	if len(refs) < 30 {
		t.Fatalf("found only %d references", len(refs))
	}
	for _, r := range refs {
		if res := get(t, h, "GET", r[1], nil); res.StatusCode != http.StatusOK {
			t.Errorf("%s is referenced but GET answers %d", r[1], res.StatusCode)
		}
	}
}

// jsModules lists the UI's JavaScript modules (every .js file it embeds).
func jsModules(t *testing.T) []string {
	t.Helper()
	root, err := fs.Sub(static, "static")
	if err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(root, "*.js")
	if err != nil || len(names) < 10 {
		t.Fatalf("the UI's modules: %v %v", names, err)
	}
	return names
}

// Every module is served as JavaScript (a browser refuses to run a module
// of another type), and index.html preloads every module app.js imports,
// so that the browser fetches them at once instead of import by import.
func TestModulesAreServedAndPreloaded(t *testing.T) {
	h := Handler()
	body, _ := io.ReadAll(get(t, h, "GET", "/", nil).Body)
	index := string(body)
	if !strings.Contains(index, `<script type="module" src="/ui/app.js"></script>`) {
		t.Error("index.html does not load app.js as a module")
	}
	for _, m := range jsModules(t) {
		res := get(t, h, "GET", "/ui/"+m, nil)
		if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusOK || ct != "text/javascript; charset=utf-8" {
			t.Errorf("GET /ui/%s: %d %q", m, res.StatusCode, ct)
		}
		if m != "app.js" && !strings.Contains(index, `<link rel="modulepreload" href="/ui/`+m+`">`) {
			t.Errorf("index.html does not preload %s", m)
		}
	}
}

func TestPublic(t *testing.T) {
	for _, c := range []struct {
		method, path string
		want         bool
	}{
		{"GET", "/", true},
		{"HEAD", "/", true},
		{"GET", "/ui/app.js", true},
		{"POST", "/", false},
		{"GET", "/v1/sandboxes", false},
		{"GET", "/metrics", false},
		{"GET", "/uix", false},
	} {
		if got := Public(httptest.NewRequest(c.method, c.path, nil)); got != c.want {
			t.Errorf("Public(%s %s) = %v, want %v", c.method, c.path, got, c.want)
		}
	}
}
