// Package web holds forkbox's web UI: plain HTML, CSS and JavaScript modules
// with no build step, embedded in the binary and served by the daemon
// (index.html at "/", everything else under "/ui/").
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// asset is one embedded file, read once with its content type and ETag.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// contentTypes names the types of the UI's files, so that serving does not
// depend on the host's mime.types (a .js served as text/plain is refused as
// a module).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".mjs":  "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
	".ico":  "image/x-icon",
	".json": "application/json",
	".txt":  "text/plain; charset=utf-8",
}

// csp allows the UI's own scripts, styles and API calls, and images from
// data: URLs (the charts); nothing else.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func load() (map[string]*asset, error) {
	root, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	assets := map[string]*asset{}
	err = fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(root, p)
		if err != nil {
			return err
		}
		ext := path.Ext(p)
		ct := contentTypes[ext]
		if ct == "" {
			ct = mime.TypeByExtension(ext)
		}
		if ct == "" {
			ct = http.DetectContentType(body)
		}
		sum := sha256.Sum256(body)
		assets[p] = &asset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	return assets, err
}

// Public reports whether r asks for one of the UI's files (GET or HEAD of
// "/" or "/ui/…"). They are static and hold no secrets, and a browser loads
// them before it can send an API key, so a daemon with an API key serves them
// without one; the UI then asks for the key and sends it with its API calls.
func Public(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	return r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/ui/")
}

// Handler serves the UI: GET / is index.html, GET /ui/<file> the other
// files. Every answer carries a strong ETag (a hash of the file) and
// Cache-Control: no-cache, so browsers revalidate cheaply (304) and never
// run a stale script after the daemon is upgraded.
func Handler() http.Handler {
	assets, err := load()
	if err != nil {
		panic("web: reading the embedded UI: " + err.Error()) // a build defect
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var name string
		switch {
		case r.URL.Path == "/" || r.URL.Path == "/index.html" || r.URL.Path == "/ui" || r.URL.Path == "/ui/":
			name = "index.html"
		case strings.HasPrefix(r.URL.Path, "/ui/"):
			name = strings.TrimPrefix(r.URL.Path, "/ui/")
		}
		a := assets[name]
		if a == nil || strings.Contains(name, "..") {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("ETag", a.etag)
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if name == "index.html" {
			h.Set("Content-Security-Policy", csp)
			h.Set("X-Frame-Options", "DENY")
		}
		// ServeContent answers If-None-Match with 304 from the ETag and
		// handles HEAD and Range.
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}
