package web

import (
	"io"
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
	js, _ := io.ReadAll(get(t, h, "GET", "/ui/app.js", nil).Body)
	for _, m := range regexp.MustCompile(`from '\./([^']+)'`).FindAllStringSubmatch(string(js), -1) {
		refs = append(refs, []string{"", "/ui/" + m[1]})
	}
	if len(refs) < 5 {
		t.Fatalf("found only %d references", len(refs))
	}
	for _, r := range refs {
		if res := get(t, h, "GET", r[1], nil); res.StatusCode != http.StatusOK {
			t.Errorf("%s is referenced but GET answers %d", r[1], res.StatusCode)
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
