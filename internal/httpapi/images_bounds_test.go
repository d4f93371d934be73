package httpapi

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
)

// An image archive (and a build context) is bounded as sent, before the
// handler decompresses it; on the old main an import's upload had no bound
// at all. What it expands to is the image store's to bound.
func TestImageArchiveBoundAsSent(t *testing.T) {
	env := newImageServer(t, Config{MaxImageArchiveBytes: 1 << 10}, true)
	over := strings.Repeat("x", 2<<10)
	for _, sse := range []bool{false, true} {
		// With a Content-Length: refused before reading; streamed: once
		// the bound is passed (the fake importer reads it all).
		for name, body := range map[string]io.Reader{
			"sized":    strings.NewReader(over),
			"streamed": io.MultiReader(strings.NewReader(over)),
		} {
			a := env.do(t, "POST", "/v1/images?name=big", "application/x-tar", sse, body)
			var msg, code string
			if sse && a.status == 200 {
				events, _ := a.events(t)
				last := events[len(events)-1]
				msg, code = last.err.Message, last.err.Code
			} else {
				e := a.errBody(t)
				msg, code = e.Message, e.Code
				if a.status != 413 {
					t.Errorf("%s, sse=%v: status %d", name, sse, a.status)
				}
			}
			if code != "too_large" || msg != "image archive: more than 1024 bytes as sent, the limit of this daemon (--max-image-archive-mb)" {
				t.Errorf("%s, sse=%v: %s %q", name, sse, code, msg)
			}
		}
	}
	// A gzipped archive under the bound as sent passes, whatever it
	// expands to.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(make([]byte, 64<<10))
	zw.Close()
	if a := env.do(t, "POST", "/v1/images?name=small", "application/x-tar", false, &gz); a.status != 201 {
		t.Fatalf("gzipped archive under the bound: %d %s", a.status, a.body)
	}

	// A build context is bounded by the smaller of the upload and archive
	// limits, and the message names the flag of the archive one.
	recipe := "name: app\nbase: debian:bookworm\nsteps:\n  - copy: {src: big, dest: /opt/big}\n"
	ct, body := multipartBody(t, "recipe", recipe, "context", tarOf(t, map[string]string{"big": over}, false))
	a := env.do(t, "POST", "/v1/images", ct, false, body)
	if e := a.errBody(t); a.status != 413 || !strings.Contains(e.Message, "larger than the limit of 1024 bytes (--max-image-archive-mb)") {
		t.Errorf("build context over the archive bound: %d %+v", a.status, e)
	}
}
