package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/chat/chattest"
	"github.com/forkbox/forkbox/internal/e2b"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sse"
)

// The random HTTP driver: every route of the daemon gets requests with
// random methods, path values, query strings, headers and bodies, aimed at
// real objects (running, suspended and terminated sandboxes, snapshots, a
// pool, a conversation, an upload, a code context) as well as at garbage.
// Whatever it sends, the daemon must answer: no 5xx (but a 503 for a feature
// that is off), no dropped connection, no answer slower than a bound, every
// error in the API's JSON error shape; and afterwards it must still be
// healthy, create and run a sandbox, delete everything and leak nothing.

const (
	rhRunTime        = 90 * time.Second // the random phase stops after this
	rhRequestTimeout = 60 * time.Second // an answer slower than this is a hang
	rhMaxRead        = 8 << 20          // bytes of an answer kept for checks (the rest is read and dropped)
	rhImagePrefix    = "fbxrnd-"        // every image the driver may register is named so
)

// rhRoute is one route of the daemon as the driver knows it.
type rhRoute struct {
	method  string // "" for a route that takes any method
	pattern string // as registered, without the method
	weight  int
	query   func(g *rhGen) string // a raw query string, or ""
	body    func(g *rhGen) rhBody
	// destructive routes delete what they name: they aim mostly at
	// throwaway objects, so that the real ones mostly survive.
	destructive bool
	// stream names the kind of SSE answer the route can give ("exec",
	// "code", "chat", "build"), which says which events end a stream and
	// which carry an error.
	stream string
}

func (r *rhRoute) key() string {
	if r.method == "" {
		return r.pattern
	}
	return r.method + " " + r.pattern
}

// rhRoutes is every route of the daemon. TestRandomHTTP fails when
// internal/httpapi/server.go or /v1/openapi.json has one that is not here.
func rhRoutes() []*rhRoute {
	return []*rhRoute{
		{method: "GET", pattern: "/healthz", weight: 2},
		{method: "GET", pattern: "/metrics", weight: 1},
		{method: "GET", pattern: "/v1/openapi.json", weight: 1},
		{method: "POST", pattern: "/v1/sandboxes", weight: 6, body: rhCreateSandboxBody},
		{method: "GET", pattern: "/v1/sandboxes", weight: 3, query: rhListQuery},
		{method: "GET", pattern: "/v1/sandboxes/{sandbox}", weight: 4},
		{method: "PATCH", pattern: "/v1/sandboxes/{sandbox}", weight: 2, body: rhUpdateSandboxBody},
		{method: "DELETE", pattern: "/v1/sandboxes/{sandbox}", weight: 2, destructive: true},
		{method: "GET", pattern: "/v1/sandboxes/{sandbox}/ports", weight: 1},
		{method: "GET", pattern: "/v1/sandboxes/{sandbox}/ports/{port}", weight: 1},
		{method: "PUT", pattern: "/v1/sandboxes/{sandbox}/ports/{port}", weight: 1, body: rhUpdatePortBody},
		{method: "DELETE", pattern: "/v1/sandboxes/{sandbox}/ports/{port}", weight: 1},
		{pattern: rhPortProxy, weight: 2, body: rhNoBody},
		{method: "POST", pattern: "/v1/sandboxes/{sandbox}/exec", weight: 9, body: rhExecBody, stream: "exec"},
		{method: "GET", pattern: "/v1/sandboxes/{sandbox}/files", weight: 4, query: rhFileQuery},
		{method: "PUT", pattern: "/v1/sandboxes/{sandbox}/files", weight: 4, query: rhFileQuery, body: rhFileBody},
		{method: "DELETE", pattern: "/v1/sandboxes/{sandbox}/files", weight: 2, query: rhFileQuery},
		{method: "GET", pattern: "/v1/sandboxes/{sandbox}/files/list", weight: 3, query: rhFileQuery},
		{method: "POST", pattern: "/v1/sandboxes/{sandbox}/code", weight: 9, body: rhCodeBody, stream: "code"},
		{method: "GET", pattern: "/v1/sandboxes/{sandbox}/cells", weight: 2},
		{method: "GET", pattern: "/v1/sandboxes/{sandbox}/notebook", weight: 1},
		{method: "POST", pattern: "/v1/sandboxes/{sandbox}/notebook", weight: 2, body: rhNotebookBody, stream: "notebook"},
		{method: "POST", pattern: "/v1/sandboxes/{sandbox}/checkpoint", weight: 3, body: rhCheckpointBody},
		{method: "POST", pattern: "/v1/sandboxes/{sandbox}/fork", weight: 2, body: rhForkBody},
		{method: "POST", pattern: "/v1/sandboxes/{sandbox}/suspend", weight: 3, body: rhNoBody},
		{method: "POST", pattern: "/v1/sandboxes/{sandbox}/resume", weight: 3, body: rhNoBody},
		{method: "POST", pattern: "/v1/sandboxes/{sandbox}/contexts", weight: 2, body: rhContextBody},
		{method: "GET", pattern: "/v1/sandboxes/{sandbox}/contexts", weight: 2},
		{method: "DELETE", pattern: "/v1/sandboxes/{sandbox}/contexts/{id}", weight: 1},
		{method: "POST", pattern: "/v1/sandboxes/{sandbox}/contexts/{id}/interrupt", weight: 2, body: rhNoBody},
		{method: "POST", pattern: "/v1/sandboxes/{sandbox}/contexts/{id}/restart", weight: 1, body: rhNoBody},
		{method: "POST", pattern: "/v1/pools", weight: 2, body: rhPoolBody},
		{method: "GET", pattern: "/v1/pools", weight: 1},
		{method: "DELETE", pattern: "/v1/pools/{name}", weight: 1, destructive: true},
		{method: "GET", pattern: "/v1/snapshots", weight: 2, query: rhSnapshotQuery},
		{method: "GET", pattern: "/v1/snapshots/{id}", weight: 2},
		{method: "DELETE", pattern: "/v1/snapshots/{id}", weight: 1, destructive: true},
		{method: "POST", pattern: "/v1/images", weight: 2, query: rhImageQuery, body: rhImageBody, stream: "build"},
		{method: "GET", pattern: "/v1/images", weight: 1},
		{method: "GET", pattern: "/v1/images/{name}", weight: 1},
		{method: "DELETE", pattern: "/v1/images/{name}", weight: 1, destructive: true},
		{method: "POST", pattern: "/v1/chat", weight: 3, body: rhChatBody, stream: "chat"},
		{method: "POST", pattern: "/v1/conversations", weight: 1, body: rhConversationBody},
		{method: "GET", pattern: "/v1/conversations", weight: 1},
		{method: "GET", pattern: "/v1/conversations/{id}", weight: 2},
		{method: "DELETE", pattern: "/v1/conversations/{id}", weight: 1, destructive: true},
		{method: "GET", pattern: "/v1/conversations/{id}/notebook", weight: 1},
		{method: "POST", pattern: "/v1/files", weight: 2, body: rhCSVUploadBody},
		{method: "POST", pattern: "/v1/keys", weight: 1, body: rhKeyBody},
		{method: "GET", pattern: "/v1/keys", weight: 1, query: rhTenantQuery},
		{method: "DELETE", pattern: "/v1/keys/{id}", weight: 1},
		{method: "GET", pattern: "/v1/tenants", weight: 1},
		{method: "GET", pattern: "/v1/tenants/{tenant}", weight: 1},
		{method: "PUT", pattern: "/v1/tenants/{tenant}", weight: 1, body: rhTenantBody},
		{method: "GET", pattern: "/v1/usage", weight: 1, query: rhTenantQuery},
		{method: "GET", pattern: "/v1/audit", weight: 1, query: rhAuditQuery},
		{method: "GET", pattern: "/v1/nodes", weight: 1},
		{method: "GET", pattern: "/v1/files/{id}", weight: 1},
		{pattern: "/mcp", weight: 3, body: rhMCPBody},
		{method: "GET", pattern: "/jupyter/api/kernelspecs", weight: 1},
		{method: "GET", pattern: "/jupyter/api/kernelspecs/{name}", weight: 1},
		{method: "GET", pattern: "/jupyter/kernelspecs/{name}/{file}", weight: 1},
		{method: "GET", pattern: "/jupyter/api/kernels", weight: 1},
		{method: "POST", pattern: "/jupyter/api/kernels", weight: 2, body: rhJupyterKernelBody},
		{method: "GET", pattern: "/jupyter/api/kernels/{id}", weight: 2},
		{method: "DELETE", pattern: "/jupyter/api/kernels/{id}", weight: 1, destructive: true},
		{method: "POST", pattern: "/jupyter/api/kernels/{id}/interrupt", weight: 1, body: rhNoBody},
		{method: "POST", pattern: "/jupyter/api/kernels/{id}/restart", weight: 1, body: rhNoBody},
		{method: "GET", pattern: "/jupyter/api/kernels/{id}/channels", weight: 1},
		{method: "GET", pattern: "/jupyter/api/sessions", weight: 1},
		{method: "POST", pattern: "/jupyter/api/sessions", weight: 1, body: rhJupyterSessionBody},
		{method: "GET", pattern: "/jupyter/api/sessions/{id}", weight: 1},
		{method: "PATCH", pattern: "/jupyter/api/sessions/{id}", weight: 1, body: rhJupyterSessionBody},
		{method: "DELETE", pattern: "/jupyter/api/sessions/{id}", weight: 1, destructive: true},
		{method: "GET", pattern: "/{$}", weight: 1},
		{method: "GET", pattern: "/ui/", weight: 1},
		{pattern: "/", weight: 2},
	}
}

// rhServerRoutes reads the route patterns that internal/httpapi/server.go
// registers in routes(), so that a route added there without being added
// to the driver fails the test.
func rhServerRoutes(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("../../internal/httpapi/server.go")
	if err != nil {
		t.Fatalf("reading the router: %v", err)
	}
	s := string(src)
	start := strings.Index(s, "func (s *Server) routes()")
	if start < 0 {
		t.Fatal("internal/httpapi/server.go has no func (s *Server) routes(): the driver cannot check that it covers every route")
	}
	body := s[start:]
	if end := strings.Index(body, "\n}\n"); end > 0 {
		body = body[:end]
	}
	re := regexp.MustCompile(`"((?:(?:GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS) )?/[^" ]*)"`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	if len(out) < 10 {
		t.Fatalf("found only %d route patterns in routes() of internal/httpapi/server.go: %v", len(out), out)
	}
	return out
}

// rhBody is a request body and its content type ("" sends none).
type rhBody struct {
	data    []byte
	ctype   string
	chunked bool // sent without a length
}

// rhGen draws the random parts of requests.
type rhGen struct {
	r  *rand.Rand
	st *rhState
}

func (g *rhGen) n(k int) int            { return g.r.IntN(k) }
func (g *rhGen) p(x float64) bool       { return g.r.Float64() < x }
func rhPick[T any](g *rhGen, xs ...T) T { return xs[g.r.IntN(len(xs))] }

func (g *rhGen) hex(n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[g.n(16)]
	}
	return string(b)
}

// garbage is a string that names nothing: odd characters, path tricks,
// lookalike ids, long and empty strings.
func (g *rhGen) garbage() string {
	switch g.n(34) {
	case 0:
		return ""
	case 1:
		return "sbx_nope"
	case 2:
		return "sbx_" + strings.Repeat("a", 20)
	case 3:
		return "snap_" + g.hex(20)
	case 4:
		return strings.Repeat("a", 300+g.n(5000))
	case 5:
		return "ünïcødé-名前"
	case 6:
		return "😀"
	case 7:
		return ".."
	case 8:
		return "."
	case 9:
		return "../.."
	case 10:
		return "a/b"
	case 11:
		return "a%2Fb"
	case 12:
		return "\x00"
	case 13:
		return "a\x00b"
	case 14:
		return " "
	case 15:
		return "-"
	case 16:
		return "_"
	case 17:
		return "default"
	case 18:
		return "NaN"
	case 19:
		return "-1"
	case 20:
		return "99999999999999999999999"
	case 21:
		return "<script>alert(1)</script>"
	case 22:
		return "' OR 1=1 --"
	case 23:
		return "%"
	case 24:
		return "conv_" + g.hex(20)
	case 25:
		return "rh-named/../rh-susp"
	case 26:
		return "\u202e\ufeff"
	case 27:
		return "\xff\xfe"
	case 28:
		return "ctx_" + g.hex(16)
	case 29:
		return "file_" + g.hex(20)
	case 30:
		return "\r\n"
	case 31:
		return "UPPER-Case"
	case 32:
		return strings.Repeat("é", 100)
	}
	return "rh-" + g.hex(6)
}

// weird is a JSON value of any type that a field may not expect: wrong
// types, out-of-range and huge numbers, NaN-like strings, long strings,
// NUL bytes, nesting.
func (g *rhGen) weird() any {
	switch g.n(26) {
	case 0:
		return -1
	case 1:
		return 0
	case 2:
		return int64(math.MaxInt64)
	case 3:
		return int64(math.MinInt64)
	case 4:
		return 1e308
	case 5:
		return -1e308
	case 6:
		return 0.5
	case 7:
		return json.RawMessage("1e999")
	case 8:
		return json.RawMessage("123456789012345678901234567890")
	case 9:
		return json.RawMessage("-0")
	case 10:
		return "NaN"
	case 11:
		return "Infinity"
	case 12:
		return ""
	case 13:
		return "\x00"
	case 14:
		return strings.Repeat("x", 1000+g.n(100000))
	case 15:
		return true
	case 16:
		return nil
	case 17:
		return []any{}
	case 18:
		return map[string]any{}
	case 19:
		return []any{1, "a", nil, []any{true}}
	case 20:
		return map[string]any{"a": map[string]any{"b": []any{map[string]any{}}}}
	case 21:
		return json.RawMessage(strings.Repeat("[", 100) + strings.Repeat("]", 100))
	case 22:
		return 1 << 53
	case 23:
		return g.garbage()
	case 24:
		return json.RawMessage(`"\ud800"`) // a lone surrogate
	}
	return 65536
}

// rhField is one field of a request type: its name (with a leading "!"
// when the request is refused without it) and a generator of plausible
// values.
type rhField struct {
	name string
	gen  func(g *rhGen) any
}

// jsonBody draws a body for a route that reads a JSON object of fields:
// mostly a plausible object (some fields left out, some given a wrong or
// extreme value, sometimes an unknown field), else deep nesting, random
// bytes, nothing, a multipart body, another JSON type, a cut or oversized
// object, or tokens that are not JSON. fix, when set, repairs the final
// object (a cell that loops gets a timeout, say) so that a valid request
// never asks for something unbounded.
func (g *rhGen) jsonBody(fields []rhField, fix func(g *rhGen, obj map[string]any)) rhBody {
	ctype := "application/json"
	switch x := g.n(100); {
	case x < 58:
		obj := map[string]any{}
		for _, f := range fields {
			name, required := strings.CutPrefix(f.name, "!")
			if g.p(0.55) || (required && g.p(0.95)) {
				obj[name] = f.gen(g)
			}
		}
		if len(fields) > 0 && g.p(0.2) {
			obj[strings.TrimPrefix(fields[g.n(len(fields))].name, "!")] = g.weird()
		}
		if g.p(0.08) {
			obj[rhPick(g, "extra", "memory_gb", "shell", "__proto__", "")] = g.weird()
		}
		if fix != nil {
			fix(g, obj)
		}
		b, err := json.Marshal(obj)
		if err != nil {
			b = []byte(fmt.Sprintf("%v", obj))
		}
		if g.p(0.05) { // the same object, cut short
			b = b[:g.n(len(b)+1)]
		}
		return rhBody{data: b, ctype: ctype}
	case x < 63:
		depth := 10000
		if g.p(0.5) {
			return rhBody{data: []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth)), ctype: ctype}
		}
		return rhBody{data: []byte(strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)), ctype: ctype}
	case x < 70:
		return rhBody{data: g.bytes(), ctype: rhPick(g, ctype, "application/octet-stream", "")}
	case x < 75:
		return rhBody{ctype: rhPick(g, ctype, "")}
	case x < 79:
		return g.multipartBody()
	case x < 84:
		return rhBody{data: []byte(rhPick(g, `[]`, `[{}]`, `"str"`, `123`, `null`, `true`, `{}`)), ctype: ctype}
	case x < 88:
		// Larger than the 1 MiB JSON bound.
		return rhBody{data: []byte(`{"` + fields0(fields) + `":"` + strings.Repeat("a", 1<<20+g.n(1<<20)) + `"}`), ctype: ctype}
	default:
		return rhBody{data: []byte(rhPick(g,
			`{"a":NaN}`, `{"a":Infinity}`, `{"a":-Infinity}`, `{"a":1e999}`, `{"a":01}`, `{'a':1}`,
			`{"a":1,"a":2}`, "\ufeff{}", `{} {}`, `{}garbage`, `{"a":"\x00"}`, `{"a":"\u0000"}`,
			`{"`+fields0(fields)+`":`, "\x00\x00\x00", `{"a":tru}`, `{"a":[1,2,}`)), ctype: ctype}
	}
}

func fields0(fields []rhField) string {
	if len(fields) == 0 {
		return "a"
	}
	return strings.TrimPrefix(fields[0].name, "!")
}

// bytes is a random binary body, now and then large.
func (g *rhGen) bytes() []byte {
	n := g.n(512)
	switch g.n(10) {
	case 0:
		n = 0
	case 1:
		n = 64<<10 + g.n(256<<10)
	case 2:
		n = 1<<20 + g.n(1<<20)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.r.Uint32())
	}
	return b
}

// multipartBody is a multipart/form-data body with parts the routes look
// for (file, recipe, context, conversation_id) and others; now and then its
// boundary is wrong or it is cut short.
func (g *rhGen) multipartBody() rhBody {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i, n := 0, 1+g.n(3); i < n; i++ {
		switch g.n(6) {
		case 0, 1:
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`,
				rhPick(g, "data.csv", "rh.csv", "x.txt", "", "../../evil.csv", "ünï.csv", strings.Repeat("a", 300)+".csv", "a\x00.csv")))
			w, _ := mw.CreatePart(h)
			w.Write(g.csv())
		case 2:
			w, _ := mw.CreateFormField("recipe")
			w.Write(g.recipeJSON())
		case 3:
			w, _ := mw.CreateFormField("context")
			w.Write(g.tarball())
		case 4:
			w, _ := mw.CreateFormField("conversation_id")
			w.Write([]byte(g.st.convRef(g, false)))
		default:
			w, _ := mw.CreateFormField(g.garbage())
			w.Write(g.bytes())
		}
	}
	mw.Close()
	ctype := mw.FormDataContentType()
	data := buf.Bytes()
	switch g.n(10) {
	case 0:
		ctype = "multipart/form-data; boundary=not-the-boundary"
	case 1:
		ctype = "multipart/form-data"
	case 2:
		data = data[:g.n(len(data)+1)]
	}
	return rhBody{data: data, ctype: ctype}
}

// csv is the content of an uploaded CSV: good, ragged, binary, empty, wide.
func (g *rhGen) csv() []byte {
	switch g.n(8) {
	case 0:
		return nil
	case 1:
		return []byte("a,b\n1\n2,3,4\n")
	case 2:
		return []byte("a,b\n1,\x00\n")
	case 3:
		return []byte("a,b\n\xff\xfe,1\n")
	case 4:
		return []byte(strings.Repeat("c,", 5000) + "c\n")
	case 5:
		return g.bytes()
	case 6:
		return []byte("\"unterminated,quote\n1,2\n")
	}
	var b strings.Builder
	b.WriteString("region,revenue\n")
	for i, n := 0, g.n(200); i < n; i++ {
		fmt.Fprintf(&b, "r%d,%d\n", i%4, g.n(1000))
	}
	return []byte(b.String())
}

// tarball is a build context: a small good tar, one with entries that climb
// out or link out, a gzip header on garbage, or random bytes.
func (g *rhGen) tarball() []byte {
	switch g.n(5) {
	case 0:
		return g.bytes()
	case 1:
		return append([]byte{0x1f, 0x8b, 8, 0}, g.bytes()...)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) {
		h.Size = int64(len(body))
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		tw.WriteHeader(h)
		tw.Write(body)
	}
	add(&tar.Header{Name: "f", Typeflag: tar.TypeReg}, []byte("hello\n"))
	if g.p(0.5) {
		add(&tar.Header{Name: rhPick(g, "../escape", "/abs", "a/../../b", "dir/"), Typeflag: tar.TypeReg}, []byte("x"))
	}
	if g.p(0.5) {
		tw.WriteHeader(&tar.Header{Name: "link", Typeflag: rhPick(g, byte(tar.TypeSymlink), byte(tar.TypeLink)),
			Linkname: rhPick(g, "/etc/shadow", "../../x", "f"), Mode: 0o777})
	}
	if g.p(0.2) {
		tw.WriteHeader(&tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666})
	}
	tw.Close()
	return buf.Bytes()
}

// Plausible values for fields.

func (g *rhGen) sandboxName() any {
	switch g.n(6) {
	case 0:
		return rhPick[any](g, "rh-named", "rh-susp")
	case 1:
		return g.garbage()
	}
	return "rh-" + g.hex(8)
}

func (g *rhGen) envMap() any {
	m := map[string]any{}
	if g.p(0.5) {
		return m
	}
	for i, n := 0, 1+g.n(2); i < n; i++ {
		if g.p(0.8) {
			m[rhPick(g, "A", "PATH", "HOME", "_X1", "LD_PRELOAD")] = rhPick[any](g, "v", "", "/tmp", strings.Repeat("v", 10000))
		} else {
			m[g.garbage()] = rhPick[any](g, "v", "a\x00b", g.weird())
		}
	}
	return m
}

func (g *rhGen) labels() any {
	m := map[string]any{}
	for i, n := 0, g.n(3); i < n; i++ {
		m[rhPick(g, "team", "forkbox.pool", "forkbox.pool.ready", "a:b", "", strings.Repeat("k", 64))] =
			rhPick[any](g, "x", "true", "", strings.Repeat("v", 256))
	}
	return m
}

func (g *rhGen) num(valid ...any) any {
	if g.p(0.85) {
		return valid[g.n(len(valid))]
	}
	return g.weird()
}

func (g *rhGen) str(valid ...string) any {
	if g.p(0.9) {
		return valid[g.n(len(valid))]
	}
	return g.garbage()
}

func rhCreateSandboxBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"name", func(g *rhGen) any { return g.sandboxName() }},
		{"image", func(g *rhGen) any { return g.str("python", "python", "host", "no-such-image", "") }},
		{"snapshot_id", func(g *rhGen) any { return g.st.snapshotRef(g, false) }},
		{"cpus", func(g *rhGen) any { return g.num(0.5, 1, 2, 0.1, 64, 0.05) }},
		{"memory_mb", func(g *rhGen) any { return g.num(256, 512, 64, 65536, 63) }},
		{"disk_mb", func(g *rhGen) any { return g.num(256, 1024, 64, 1<<20, 63) }},
		{"pids_limit", func(g *rhGen) any { return g.num(64, 256, 32768, 63, 16) }},
		{"timeout_secs", func(g *rhGen) any { return g.num(1, 5, 60, 600, 0, 7*24*3600+1) }},
		{"max_lifetime_secs", func(g *rhGen) any { return g.num(0, 2, 30, 3600, -1) }},
		{"allow_internet_access", func(g *rhGen) any { return g.num(true, false) }},
		{"network", func(g *rhGen) any { return rhNetwork(g) }},
		{"env", func(g *rhGen) any { return g.envMap() }},
		{"labels", func(g *rhGen) any { return g.labels() }},
		{"auto_resume", func(g *rhGen) any { return g.num(true, false) }},
		{"pool", func(g *rhGen) any { return g.st.poolRef(g, false) }},
	}, nil)
}

// rhNetwork is an egress policy, valid or not (never one that reaches a
// real host: the sandboxes of this test get only test-range and garbage
// destinations).
func rhNetwork(g *rhGen) any {
	entry := func() any {
		return rhPick(g, "198.51.100.7", "203.0.113.0/24", "10.0.0.0/8", "169.254.169.254", "*.fbx.test", "ok.fbx.test",
			"fd00::/8", "0.0.0.0/0", "999.1.1.1", "10.0.0.0/33", "-bad-.test", "", "*", g.weird())
	}
	switch g.n(5) {
	case 0:
		return map[string]any{}
	case 1:
		return map[string]any{"allow_out": []any{entry(), entry()}}
	case 2:
		return map[string]any{"deny_out": []any{entry()}, "allow_out": []any{entry()}}
	case 3:
		return map[string]any{"allow_out": entry()}
	}
	return g.garbage()
}

// rhPortProxy is the route that proxies into a sandbox's port.
const rhPortProxy = "/v1/sandboxes/{sandbox}/ports/{port}/{path...}"

func rhUpdatePortBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"public", func(g *rhGen) any { return g.num(true, false, 1, "yes") }},
	}, nil)
}

func rhUpdateSandboxBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"network", func(g *rhGen) any { return rhNetwork(g) }},
	}, nil)
}

// rhExecBody: commands that end on their own (or are given a short
// timeout), so that a valid request never runs unbounded.
func rhExecBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"!cmd", func(g *rhGen) any {
			return g.str("true", "echo", "sh", "sh", "python3", "ls", "cat", "false", "nonexistent-cmd", "/bin/sh", "../../bin/sh", "")
		}},
		{"args", func(g *rhGen) any {
			switch g.n(6) {
			case 0, 3, 4:
				return []any{"-c", rhPick(g, "echo hi", "exit 3", "echo err >&2; exit 1", "yes | head -c 200000",
					"printf '\\xff\\xfe\\xe2\\x82'", "sleep 0.2", "kill -9 -1", "ls -la /", "cat /proc/self/status",
					"sleep 300 >/dev/null 2>&1 &", "dd if=/dev/zero of=/workspace/big bs=1M count=8 2>/dev/null", "ulimit -a")}
			case 1:
				return []any{"/etc/hostname", "/workspace", "-la", "--", strings.Repeat("a", 1000)}
			case 2:
				return []any{g.weird(), "x"}
			}
			return []any{}
		}},
		{"env", func(g *rhGen) any { return g.envMap() }},
		{"cwd", func(g *rhGen) any {
			return g.str("/workspace", "/workspace", "/", "/tmp", "/nonexistent", "..", "/proc")
		}},
		{"stdin", func(g *rhGen) any { return g.str("", "hello\n", strings.Repeat("z", 100000)) }},
		{"timeout_secs", func(g *rhGen) any { return g.num(0.5, 5, 30, 0, -1, 1e-9) }},
	}, func(g *rhGen, obj map[string]any) {
		// cat and sh without arguments read stdin: give them its end.
		if _, ok := obj["stdin"]; !ok {
			obj["stdin"] = ""
		}
	})
}

// rhCodeBody: cells that end on their own; a cell that would not (a busy
// loop, a long sleep) always carries a short timeout_ms.
// rhCode is a cell's code: ordinary, failing, slow, huge or hostile (or,
// now and then, not a string: g.str's weird values).
func rhCode(g *rhGen) any {
	return g.str("1+1", "x = 5", "x", "print('a' * 100000)", "import time; time.sleep(0.3)",
		"raise ValueError('boom')", "def f(:", "import sys; sys.exit(3)", "import os; os.kill(os.getpid(), 9)",
		"import matplotlib.pyplot as plt; plt.plot([1, 3, 2]); plt.show()", "while True: pass",
		"import time; time.sleep(120)", "globals().get('rh', 0) + 1", "'\\x00'", "print('\\ud800'.encode('utf-8', 'surrogatepass'))",
		"import numpy as np; np.zeros((1000, 1000)).sum()", "input()", "")
}

func rhCodeBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"!code", func(g *rhGen) any { return rhCode(g) }},
		{"language", func(g *rhGen) any { return g.str("python", "python", "python", "python3", "r") }},
		{"context", func(g *rhGen) any { return g.st.contextRef(g) }},
		{"timeout_ms", func(g *rhGen) any { return g.num(500, 5000, 1, 0, -1) }},
		{"env", func(g *rhGen) any { return g.envMap() }},
	}, func(g *rhGen, obj map[string]any) {
		// A cell that does not end by itself gets a short timeout, whatever
		// else the body holds.
		code, _ := obj["code"].(string)
		if code == "while True: pass" || code == "import time; time.sleep(120)" || code == "input()" {
			obj["timeout_ms"] = 300 + g.n(700)
		}
	})
}

// rhNotebookBody is an uploaded notebook: a few cells of rhCodeBody's
// code (as a string or a list of lines), or a broken one.
func rhNotebookBody(g *rhGen) rhBody {
	switch g.n(8) {
	case 0:
		return g.jsonBody(nil, nil)
	case 1:
		return rhBody{data: g.bytes()}
	case 2:
		return rhBody{data: []byte(rhPick(g, `{"nbformat":3,"worksheets":[]}`, `{"nbformat":4,"cells":[{"cell_type":"code","source":7}]}`, `{"nbformat":4}`, `{"nbformat":"4"}`))}
	}
	var cells []map[string]any
	for range g.n(4) {
		code, ok := rhCode(g).(string)
		if !ok {
			code = "1"
		}
		if code == "while True: pass" || code == "import time; time.sleep(120)" || code == "input()" {
			code = "import time; time.sleep(0.2)"
		}
		var src any = code
		if g.p(0.5) {
			src = strings.SplitAfter(code, "\n")
		}
		cells = append(cells, map[string]any{"cell_type": rhPick(g, "code", "code", "markdown", "raw"), "source": src, "metadata": map[string]any{}})
	}
	b, _ := json.Marshal(map[string]any{"nbformat": 4, "nbformat_minor": g.num(0, 5, 5, 99), "metadata": map[string]any{}, "cells": cells})
	return rhBody{data: b, ctype: rhPick(g, "application/json", "application/x-ipynb+json", "")}
}

func rhCheckpointBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"type", func(g *rhGen) any { return g.str("filesystem", "memory", "Memory", "") }},
		{"name", func(g *rhGen) any { return g.str("rh", "", strings.Repeat("n", 129)) }},
	}, nil)
}

func rhForkBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"!count", func(g *rhGen) any { return g.num(1, 2, 1, 0, -1, 17) }},
		{"network", func(g *rhGen) any { return rhNetwork(g) }},
		{"names", func(g *rhGen) any {
			switch g.n(4) {
			case 0:
				return []any{"rh-" + g.hex(6)}
			case 1:
				return []any{"rh-a" + g.hex(4), "rh-b" + g.hex(4)}
			case 2:
				return []any{"dup", "dup"}
			}
			return []any{g.garbage()}
		}},
	}, nil)
}

// rhNoBody is for routes that read no body: mostly none, sometimes one.
func rhNoBody(g *rhGen) rhBody {
	if g.p(0.75) {
		return rhBody{}
	}
	return g.jsonBody(nil, nil)
}

func rhContextBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"language", func(g *rhGen) any { return g.str("python", "python3", "r", "nope") }},
		{"cwd", func(g *rhGen) any { return g.str("/workspace", "/tmp", "/nonexistent", "../..", "relative") }},
		{"env", func(g *rhGen) any { return g.envMap() }},
	}, nil)
}

func rhJupyterKernelBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"name", func(g *rhGen) any {
			return g.str("python3", "forkbox-python", "forkbox-no-such-image", "ruby", "forkbox-")
		}},
		{"path", func(g *rhGen) any { return g.str("a.ipynb", "", "../../x.ipynb") }},
		{"env", func(g *rhGen) any {
			return map[string]any{"KERNEL_FORKBOX_SANDBOX": g.st.sandboxRef(g, false), "KERNEL_FORKBOX_CONTEXT": g.str("default", "", "nope")}
		}},
	}, nil)
}

func rhJupyterSessionBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"path", func(g *rhGen) any { return g.str("rh-"+g.hex(4)+".ipynb", "a.ipynb", "") }},
		{"type", func(g *rhGen) any { return g.str("notebook", "console", "") }},
		{"name", func(g *rhGen) any { return g.str("n", "") }},
		{"kernel", func(g *rhGen) any {
			return map[string]any{"id": g.st.kernelRef(g, false), "name": g.str("python3", "nope", "")}
		}},
	}, nil)
}

func rhPoolBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"!name", func(g *rhGen) any { return g.str("rhp-"+g.hex(6), "rh-pool", "Bad Name") }},
		{"snapshot_id", func(g *rhGen) any { return g.st.snapshotRef(g, false) }},
		{"image", func(g *rhGen) any { return g.str("python", "no-such-image") }},
		{"!size", func(g *rhGen) any { return g.num(1, 2, 0, 33) }},
	}, func(g *rhGen, obj map[string]any) {
		if v, ok := obj["size"].(int); ok && v > 2 && v <= 32 {
			obj["size"] = 2 // a bigger pool is many restores at once, not a different code path
		}
	})
}

func rhChatBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"!question", func(g *rhGen) any {
			return g.str("What is 6*7?", "Summarize the data.", "", strings.Repeat("why ", 5000))
		}},
		{"csv", func(g *rhGen) any { return string(g.csv()) }},
		{"csv_name", func(g *rhGen) any { return g.str("data.csv", "x.txt", "../x.csv", "") }},
		{"file_ids", func(g *rhGen) any { return []any{g.st.uploadRef(g)} }},
		{"conversation_id", func(g *rhGen) any { return g.st.convRef(g, false) }},
		{"model", func(g *rhGen) any { return g.str("", "scripted", strings.Repeat("m", 1000)) }},
	}, func(g *rhGen, obj map[string]any) {
		// Mostly continue a conversation: a new one is a new sandbox.
		if _, ok := obj["conversation_id"]; !ok && g.p(0.7) {
			obj["conversation_id"] = g.st.convRef(g, false)
		}
	})
}

// rhQuotas: quotas, with negative, fractional and wrong-typed values.
func rhQuotas(g *rhGen) any {
	return map[string]any{
		"running_sandboxes": g.num(2, 0, -1, 1.5, "3"),
		"memory_mb":         g.num(1024, 0, -5),
		"cpus":              g.num(0.5, 2, -1),
		"snapshot_bytes":    g.num(1<<30, 0),
	}
}

func rhKeyBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"!tenant", func(g *rhGen) any { return rhPick(g, "acme", "default", "Bad Name", "", g.garbage()) }},
		{"role", func(g *rhGen) any { return g.str("user", "admin", "root") }},
		{"name", func(g *rhGen) any { return g.str("ci", strings.Repeat("n", 200)) }},
		{"expires_in", func(g *rhGen) any { return g.str("1h", "-1h", "0s", "forever") }},
		{"expires_at", func(g *rhGen) any { return g.str("2099-01-01T00:00:00Z", "2000-01-01T00:00:00Z", "tomorrow") }},
		{"quotas", rhQuotas},
	}, nil)
}

func rhTenantBody(g *rhGen) rhBody {
	return g.jsonBody([]rhField{
		{"name", func(g *rhGen) any { return g.str("acme", "other") }},
		{"quotas", rhQuotas},
	}, nil)
}

func rhTenantQuery(g *rhGen) string {
	if g.p(0.5) {
		return ""
	}
	return url.Values{"tenant": {rhPick(g, "default", "acme", "Bad Name", g.garbage())}}.Encode()
}

func rhAuditQuery(g *rhGen) string {
	q := url.Values{}
	if g.p(0.4) {
		q.Set("limit", rhPick(g, "1", "1000", "1001", "0", "-3", "x"))
	}
	if g.p(0.3) {
		q.Set("before", rhPick(g, "1", "0", "99999999999", "x"))
	}
	if g.p(0.3) {
		q.Set("tenant", rhPick(g, "default", "acme", g.garbage()))
	}
	return q.Encode()
}

func rhConversationBody(g *rhGen) rhBody {
	if g.p(0.3) {
		return rhBody{}
	}
	return g.jsonBody([]rhField{{"title", func(g *rhGen) any { return g.str("rh", "", strings.Repeat("t", 10000)) }}}, nil)
}

// rhCSVUploadBody: POST /v1/files takes multipart only, a "file" part and
// maybe a "conversation_id" part before it.
func rhCSVUploadBody(g *rhGen) rhBody {
	switch g.n(10) {
	case 0, 1:
		return g.multipartBody()
	case 2:
		return g.jsonBody(nil, nil)
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if g.p(0.5) {
		w, _ := mw.CreateFormField("conversation_id")
		w.Write([]byte(g.st.convRef(g, false)))
	}
	w, _ := mw.CreateFormFile("file", rhPick(g, "data.csv", "sales.csv", "x.txt", "../up.csv"))
	w.Write(g.csv())
	mw.Close()
	return rhBody{data: buf.Bytes(), ctype: mw.FormDataContentType()}
}

// rhFileBody is an upload into a sandbox: raw bytes or multipart.
func rhFileBody(g *rhGen) rhBody {
	switch g.n(6) {
	case 0:
		return g.multipartBody()
	case 1:
		return rhBody{data: g.bytes(), chunked: true}
	}
	return rhBody{data: g.bytes(), ctype: rhPick(g, "application/octet-stream", "", "text/plain")}
}

// recipeJSON is a recipe, valid or not. A valid one only builds on images
// that exist (never debian:, which would bootstrap for minutes) and only
// registers names starting with rhImagePrefix, because the images directory
// is shared with the other tests.
func (g *rhGen) recipeJSON() []byte {
	steps := []any{}
	for i, n := 0, g.n(4); i < n; i++ {
		switch g.n(8) {
		case 0:
			steps = append(steps, map[string]any{"env": g.envMap()})
		case 1:
			steps = append(steps, map[string]any{"workdir": g.str("/workspace/p", "relative", "/", "")})
		case 2:
			steps = append(steps, map[string]any{"user": g.str("user", "root", "0", "1000:1000", "nobody", "99999")})
		case 3:
			steps = append(steps, map[string]any{"copy": map[string]any{"src": g.str("f", "../x", "", "link"), "dest": g.str("/opt/f", "rel", "/")}})
		case 4:
			if g.p(0.3) { // a build sandbox: a few seconds
				steps = append(steps, map[string]any{"run": g.str("true", "exit 3", "echo hi > /x")})
			}
		case 5:
			steps = append(steps, map[string]any{})
		case 6:
			steps = append(steps, map[string]any{"env": map[string]any{"A": "b"}, "workdir": "/x"})
		default:
			steps = append(steps, g.weird())
		}
	}
	obj := map[string]any{
		"name":  rhImageName(g.str(rhImagePrefix+g.hex(6), "UPPER", "a b", "-x", strings.Repeat("a", 65))),
		"base":  g.str("python", "python", "host", "no-such-base", ""),
		"steps": steps,
	}
	if g.p(0.1) {
		obj["mirror"] = g.garbage()
	}
	if g.p(0.15) {
		obj[rhPick(g, "name", "base", "steps")] = g.weird()
	}
	if s, ok := obj["name"].(string); ok {
		obj["name"] = rhImageName(s)
	}
	if s, ok := obj["base"].(string); ok && strings.HasPrefix(s, "debian:") {
		obj["base"] = "python"
	}
	b, _ := json.Marshal(obj)
	return b
}

var rhImageNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// rhImageName keeps a name that the image store would accept inside the
// driver's own prefix, so that no random request can replace or remove an
// image that other tests use (python, host, theirs).
func rhImageName(v any) any {
	s, ok := v.(string)
	if !ok || !rhImageNameRE.MatchString(s) || strings.HasPrefix(s, rhImagePrefix) {
		return v
	}
	if n := rhImagePrefix + s; rhImageNameRE.MatchString(n) {
		return n
	}
	return rhImagePrefix + "x"
}

func rhImageBody(g *rhGen) rhBody {
	switch g.n(10) {
	case 0, 1, 2:
		return rhBody{data: g.recipeJSON(), ctype: "application/json"}
	case 3:
		return rhBody{data: g.recipeJSON(), ctype: rhPick(g, "application/yaml", "text/yaml", "application/x-yaml")}
	case 4:
		// YAML that expands without bound if the parser lets it.
		return rhBody{data: []byte("a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n" +
			"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n" +
			"g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\nname: [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"),
			ctype: "application/yaml"}
	case 5:
		return rhBody{data: []byte(strings.Repeat("- ", 10000) + "x\n"), ctype: "application/yaml"}
	case 6:
		return g.multipartBody()
	case 7:
		// An "image archive" to import (with ?name=): a tar of anything.
		return rhBody{data: g.tarball(), ctype: rhPick(g, "application/x-tar", "application/octet-stream", "application/vnd.oci.image.layout.v1+tar")}
	}
	return g.jsonBody([]rhField{{"name", func(g *rhGen) any { return rhImageName(g.garbage()) }}}, func(g *rhGen, obj map[string]any) {
		obj["name"] = rhImageName(obj["name"])
	})
}

// rhMCPBody is a JSON-RPC message for the MCP endpoint: initialize, list,
// or call a tool with plausible or broken arguments.
func rhMCPBody(g *rhGen) rhBody {
	if g.p(0.15) {
		return g.jsonBody(nil, nil)
	}
	msg := map[string]any{"jsonrpc": "2.0", "id": g.n(1000)}
	switch g.n(5) {
	case 0:
		msg["method"] = "initialize"
		msg["params"] = map[string]any{"protocolVersion": rhPick(g, "2025-06-18", "2025-03-26", "1999-01-01"),
			"capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "rh", "version": "1"}}
	case 1:
		msg["method"] = "tools/list"
	case 2:
		msg["method"] = rhPick(g, "ping", "notifications/initialized", "resources/list", "nope", "")
		if g.p(0.3) {
			delete(msg, "id")
		}
	default:
		sb := g.st.sandboxRef(g, false)
		tools := []struct {
			name string
			args map[string]any
		}{
			{"create_sandbox", map[string]any{"name": g.sandboxName(), "memory_mb": g.num(256, 63)}},
			{"list_sandboxes", map[string]any{"state": g.str("running", "suspended", "zombie")}},
			{"terminate_sandbox", map[string]any{"sandbox": g.st.sandboxRef(g, true)}},
			{"run_code", map[string]any{"sandbox": sb, "code": g.str("1+1", "print('hi')", "raise KeyError(1)"), "timeout_secs": g.num(5.0, -1.0)}},
			{"run_command", map[string]any{"sandbox": sb, "command": g.str("echo hi", "exit 4", "ls /"), "timeout_secs": g.num(5.0, 0.0)}},
			{"read_file", map[string]any{"sandbox": sb, "path": g.str("rh.txt", "/etc/hostname", "../../etc/shadow"), "max_bytes": g.num(10, -1, 0)}},
			{"write_file", map[string]any{"sandbox": sb, "path": g.str("mcp.txt", "/etc/x", ""), "content": g.str("hi", "!!notbase64"),
				"encoding": g.str("utf-8", "base64", "rot13"), "mode": g.str("0644", "0999", "x")}},
			{"checkpoint", map[string]any{"sandbox": sb, "type": g.str("filesystem", "memory", "x")}},
			{"fork", map[string]any{"sandbox": sb, "count": g.num(1, 0, 99)}},
			{"suspend", map[string]any{"sandbox": sb}},
			{"resume", map[string]any{"sandbox": sb}},
			{"list_snapshots", map[string]any{"sandbox": sb}},
			{"no_such_tool", map[string]any{}},
		}
		tool := tools[g.n(len(tools))]
		args := any(tool.args)
		if g.p(0.15) {
			args = g.weird()
		}
		msg["method"] = "tools/call"
		msg["params"] = map[string]any{"name": tool.name, "arguments": args}
	}
	var v any = msg
	if g.p(0.05) {
		v = []any{msg, msg}
	}
	b, _ := json.Marshal(v)
	return rhBody{data: b, ctype: "application/json"}
}

// Query strings.

func (g *rhGen) filePath() string {
	return rhPick(g, "/workspace/rh.txt", "rh.txt", "sub/dir/f.txt", "/workspace", "/workspace/", "/", "",
		"/etc/passwd", "/proc/self/environ", "/sys/kernel", "/dev/zero", "/dev/null", "/.forkbox/forkbox",
		"/.forkbox/run/agent.sock", "../../../etc/shadow", "/workspace/../../etc", "/tmp/x", "/workspace/"+strings.Repeat("n", 300),
		"/workspace/ünï", "/workspace/a\x00b", "/usr/bin/python3", "/workspace/big", "~/x", "/workspace/%2e%2e/x", g.garbage())
}

func rhFileQuery(g *rhGen) string {
	q := url.Values{}
	if g.p(0.9) {
		q.Set("path", g.filePath())
	}
	if g.p(0.3) {
		q.Set("recursive", rhPick(g, "true", "false", "1", "yes"))
	}
	if g.p(0.3) {
		q.Set("mode", rhPick(g, "0644", "755", "0999", "-1", "0x1ff", "77777777777"))
	}
	return q.Encode()
}

func rhListQuery(g *rhGen) string {
	q := url.Values{}
	if g.p(0.4) {
		q.Set("state", rhPick(g, "running", "suspended", "terminated", "error", "sleeping", ""))
	}
	if g.p(0.3) {
		q.Set("name", rhPick(g, "rh-named", "rh-susp", g.garbage()))
	}
	if g.p(0.3) {
		q.Add("label", rhPick(g, "forkbox.pool:rh-pool", "a:b", "nocolon", ":x", g.garbage()))
	}
	if g.p(0.2) {
		q.Set("include_terminated", rhPick(g, "true", "false", "1", g.garbage()))
	}
	rhPageQuery(g, q)
	return q.Encode()
}

// rhPageQuery adds a list's page to q, now and then: a limit in range or
// not, a cursor that is none of the daemon's.
func rhPageQuery(g *rhGen, q url.Values) {
	if g.p(0.3) {
		q.Set("limit", rhPick(g, "1", "2", "100", "1000", "0", "1001", g.garbage()))
	}
	if g.p(0.15) {
		q.Set("cursor", rhPick(g, "", "eyJ2IjoxfQ", g.garbage()))
	}
}

func rhSnapshotQuery(g *rhGen) string {
	q := url.Values{}
	if g.p(0.5) {
		q.Set("sandbox", g.st.sandboxRef(g, false))
	}
	rhPageQuery(g, q)
	return q.Encode()
}

func rhImageQuery(g *rhGen) string {
	if g.p(0.8) {
		return ""
	}
	name, _ := rhImageName(rhPick(g, rhImagePrefix+g.hex(6), g.garbage())).(string)
	return url.Values{"name": {name}}.Encode()
}

// rhState holds the real objects requests aim at: the fixtures (kept alive
// by a keeper) and whatever requests created since (extras, capped).
type rhState struct {
	mu     sync.Mutex
	fx     rhFixtures
	extras map[string][]string // kind → ids or names, oldest first
	seen   map[string]bool     // every sandbox id seen, for the leak checks
}

// rhFixtures are the objects made before the random phase.
type rhFixtures struct {
	named, plain, susp, term string // sandbox ids
	fsSnap, memSnap          string
	conv, convSandbox        string
	upload                   string
	ctx                      string
}

const (
	rhNamed = "rh-named"
	rhSusp  = "rh-susp"
	rhPool  = "rh-pool"
)

// add records an object that an answer named. Fixtures are not extras;
// only the newest extras of a kind are aimed at.
func (s *rhState) add(kind, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind == "sandbox" {
		s.seen[v] = true
	}
	fx := s.fx
	if slices.Contains([]string{fx.named, fx.plain, fx.susp, fx.term, fx.convSandbox, fx.fsSnap, fx.memSnap, fx.conv, fx.upload, fx.ctx}, v) ||
		slices.Contains(s.extras[kind], v) {
		return
	}
	s.extras[kind] = append(s.extras[kind], v)
	if len(s.extras[kind]) > 30 {
		s.extras[kind] = s.extras[kind][1:]
	}
}

// saw records a sandbox id for the leak checks.
func (s *rhState) saw(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[id] = true
}

func (s *rhState) drop(kind, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.extras[kind] = slices.DeleteFunc(s.extras[kind], func(x string) bool { return x == v })
}

func (s *rhState) list(kind string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.extras[kind])
}

func (s *rhState) fixtures() rhFixtures {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fx
}

// ref picks a value for a path segment or a field: mostly a real object
// (for a destructive route mostly a throwaway one), sometimes a near miss,
// else garbage.
func (s *rhState) ref(g *rhGen, destructive bool, real []string, extras []string) string {
	if destructive && g.p(0.8) {
		if len(extras) > 0 && g.p(0.7) {
			return rhPick(g, extras...)
		}
		return g.garbage()
	}
	switch x := g.n(100); {
	case x < 55 && len(real) > 0:
		return rhPick(g, real...)
	case x < 72 && len(extras) > 0:
		return rhPick(g, extras...)
	case x < 78 && len(real) > 0:
		v := rhPick(g, real...)
		return rhPick(g, strings.ToUpper(v), v+"x", v[:len(v)-1], " "+v, v+"/")
	}
	return g.garbage()
}

func (s *rhState) sandboxRef(g *rhGen, destructive bool) string {
	fx := s.fixtures()
	return s.ref(g, destructive, nonEmpty(fx.named, rhNamed, fx.plain, fx.susp, rhSusp, fx.term, fx.convSandbox), s.list("sandbox"))
}

func (s *rhState) snapshotRef(g *rhGen, destructive bool) string {
	fx := s.fixtures()
	return s.ref(g, destructive, nonEmpty(fx.fsSnap, fx.memSnap), s.list("snapshot"))
}

func (s *rhState) convRef(g *rhGen, destructive bool) string {
	fx := s.fixtures()
	return s.ref(g, destructive, nonEmpty(fx.conv), s.list("conversation"))
}

func (s *rhState) uploadRef(g *rhGen) string {
	fx := s.fixtures()
	return s.ref(g, false, nonEmpty(fx.upload), s.list("upload"))
}

func (s *rhState) contextRef(g *rhGen) string {
	fx := s.fixtures()
	if g.p(0.2) {
		return "default"
	}
	return s.ref(g, false, nonEmpty(fx.ctx), s.list("context"))
}

// kernelRef is a Jupyter kernel id: one the gateway gave, a well-formed
// one of no kernel, or garbage.
func (s *rhState) kernelRef(g *rhGen, destructive bool) string {
	if g.p(0.15) {
		return g.hex(8) + "-" + g.hex(4) + "-" + g.hex(4) + "-" + g.hex(4) + "-" + g.hex(12)
	}
	return s.ref(g, destructive, nil, s.list("kernel"))
}

func (s *rhState) poolRef(g *rhGen, destructive bool) string {
	return s.ref(g, destructive, []string{rhPool}, s.list("pool"))
}

// imageRef never names an image other tests use when it deletes: only the
// driver's own images or garbage.
func (s *rhState) imageRef(g *rhGen, destructive bool) string {
	if destructive {
		v, _ := rhImageName(s.ref(g, true, nil, s.list("image"))).(string)
		return v
	}
	return s.ref(g, false, []string{"python", "host"}, s.list("image"))
}

func nonEmpty(xs ...string) []string {
	return slices.DeleteFunc(xs, func(s string) bool { return s == "" })
}

// segment writes a path value: escaped as a client would (mostly), raw (a
// '/' adds a segment, '..' gets cleaned), or with every byte escaped.
func (g *rhGen) segment(v string) string {
	switch x := g.n(10); {
	case x < 8:
		return url.PathEscape(v)
	case x < 9 && !strings.ContainsAny(v, "%?# \x00\r\n\t\x7f"):
		return v
	}
	var b strings.Builder
	for _, c := range []byte(v) {
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// path fills in a route's pattern for a request with method.
func (g *rhGen) path(rt *rhRoute, method string) string {
	switch rt.pattern {
	case "/{$}":
		return "/"
	case "/ui/":
		return "/ui/" + g.segment(rhPick(g, "", "index.html", "app.js", "style.css", "nope.js", "../index.html", g.garbage()))
	case "/":
		return rhPick(g, "/v1/nope", "/v2/sandboxes", "/v1", "/v1/", "/healthz/x", "/.env", "/v1/sandboxes/",
			"/v1/sandboxes/"+g.segment(g.st.sandboxRef(g, false))+"/nope", "/v1/snapshots/a/b", "/"+g.segment(g.garbage()))
	}
	parts := strings.Split(rt.pattern, "/")
	for i, p := range parts {
		if !strings.HasPrefix(p, "{") {
			continue
		}
		var v string
		switch {
		case p == "{sandbox}":
			v = g.st.sandboxRef(g, rt.destructive && !strings.Contains(rt.pattern, "/files") && !strings.Contains(rt.pattern, "/contexts"))
		case p == "{port}":
			v = rhPick(g, "8000", "8000", "1", "65535", "0", "65536", "-1", "abc", g.garbage())
		case p == "{path...}":
			v = rhPick(g, "", "index.html", "a/b?x=1", "../../../v1/sandboxes", "..%2f..%2fv1", g.garbage())
		case strings.HasPrefix(rt.pattern, "/v1/snapshots"):
			v = g.st.snapshotRef(g, rt.destructive)
		case strings.HasPrefix(rt.pattern, "/v1/conversations"):
			v = g.st.convRef(g, rt.destructive)
		case strings.HasPrefix(rt.pattern, "/v1/files"):
			v = g.st.uploadRef(g)
		case strings.HasPrefix(rt.pattern, "/v1/pools"):
			v = g.st.poolRef(g, rt.destructive)
		case strings.HasPrefix(rt.pattern, "/v1/images"):
			v = g.st.imageRef(g, method != "GET" && method != "HEAD")
		case strings.Contains(rt.pattern, "/contexts/"):
			v = g.st.contextRef(g)
		case strings.HasPrefix(rt.pattern, "/jupyter/api/kernels/"):
			v = g.st.kernelRef(g, rt.destructive)
		case strings.HasPrefix(rt.pattern, "/jupyter/api/sessions/"):
			v = g.st.ref(g, rt.destructive, nil, g.st.list("session"))
		case strings.HasPrefix(rt.pattern, "/jupyter/") && p == "{name}":
			v = rhPick(g, "python3", "forkbox-python", "nope", g.garbage())
		case p == "{tenant}":
			v = rhPick(g, "default", "acme", "Bad Name", "-x", strings.Repeat("t", 40), g.garbage())
		case strings.HasPrefix(rt.pattern, "/v1/keys"):
			v = rhPick(g, "key_0123456789abcdef", "admin", "", g.garbage())
		default:
			v = g.garbage()
		}
		seg := g.segment(v)
		if strings.HasPrefix(rt.pattern, "/v1/images") && method != "GET" && method != "HEAD" {
			seg = url.PathEscape(v) // never raw: "a/.." must not turn into another image's name
		}
		parts[i] = seg
	}
	return strings.Join(parts, "/")
}

// rhRequest is one request as sent, kept to report and reproduce it.
type rhRequest struct {
	route  *rhRoute
	method string
	uri    string // path and query as sent
	header http.Header
	body   rhBody
}

func (r *rhRequest) String() string {
	var hs []string
	for _, k := range []string{"Content-Type", "Accept", "Transfer-Encoding", "Content-Encoding", "Authorization"} {
		if v := r.header.Get(k); v != "" {
			hs = append(hs, k+": "+v)
		}
	}
	if r.body.chunked {
		hs = append(hs, "Transfer-Encoding: chunked")
	}
	prefix := r.body.data
	if len(prefix) > 400 {
		prefix = prefix[:400]
	}
	return fmt.Sprintf("%s %s [%s] body (%d bytes) %q", r.method, r.uri, strings.Join(hs, "; "), len(r.body.data), prefix)
}

func (g *rhGen) request(rt *rhRoute, wrongMethod bool) *rhRequest {
	method := rt.method
	if method == "" {
		method = rhPick(g, "POST", "POST", "POST", "POST", "POST", "POST", "POST", "POST", "POST", "POST", "GET", "DELETE", "PUT")
	}
	if wrongMethod {
		method = rhPick(g, "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")
	}
	req := &rhRequest{route: rt, method: method, header: http.Header{}}
	uri := g.path(rt, method)
	q := ""
	if rt.query != nil {
		q = rt.query(g)
	}
	if g.p(0.1) {
		extra := rhPick(g, "x=1", "path=%2e%2e%2f", "state=running&state=error", "&&=&", "a=%ZZ", "q="+strings.Repeat("q", 3000), "%00=%00")
		if q != "" {
			q += "&"
		}
		q += extra
	}
	if q != "" {
		uri += "?" + q
	}
	req.uri = uri
	if rt.body != nil && (rt.method == "" || !wrongMethod || g.p(0.5)) {
		req.body = rt.body(g)
	} else if g.p(0.1) {
		req.body = g.jsonBody(nil, nil)
	}
	if req.body.ctype != "" {
		req.header.Set("Content-Type", req.body.ctype)
	}
	if g.p(0.12) {
		req.header.Set("Content-Type", rhPick(g, "text/plain", "application/xml", "multipart/form-data", "application/json; charset=utf-16",
			"!!!", "multipart/form-data; boundary=", "application/x-tar", "application/yaml"))
	}
	switch {
	case rt.pattern == "/mcp" && g.p(0.85):
		req.header.Set("Accept", "application/json, text/event-stream")
	case g.p(0.25):
		req.header.Set("Accept", "text/event-stream")
	case g.p(0.05):
		req.header.Set("Accept", rhPick(g, "application/json, text/event-stream", "*/*", "text/html", ""))
	}
	if g.p(0.03) {
		req.header.Set("Authorization", "Bearer "+g.hex(20))
	}
	if g.p(0.03) {
		req.header.Set("Content-Encoding", "gzip")
	}
	if g.p(0.02) {
		req.header.Set("X-Junk", strings.Repeat("j", 50000))
	}
	if g.p(0.02) {
		req.body.chunked = true
	}
	return req
}

// rhRun is the random phase: the daemon, the requests' outcome, failures.
type rhRun struct {
	d      *daemon
	st     *rhState
	routes map[string]*rhRoute // by key
	criuOK bool

	mu       sync.Mutex
	failures []string
	nfail    int
	perRoute map[string]map[int]int    // route key → status → count
	refusals map[string]map[string]int // route key → 4xx message (cut) → count
	sent     atomic.Int64
	dead     atomic.Bool
}

func (run *rhRun) fail(format string, args ...any) {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.nfail++
	if len(run.failures) < 40 {
		run.failures = append(run.failures, fmt.Sprintf(format, args...))
	}
}

func (run *rhRun) count(rt *rhRoute, status int) {
	run.mu.Lock()
	defer run.mu.Unlock()
	m := run.perRoute[rt.key()]
	if m == nil {
		m = map[int]int{}
		run.perRoute[rt.key()] = m
	}
	m[status]++
}

// unavailableOK says whether a 503 "unavailable" is the expected answer of
// a route on this daemon: only a feature that is off may answer it. Chat is
// configured (a scripted model), so only memory snapshots can be off, when
// this host has no usable CRIU.
func (run *rhRun) unavailableOK(rt *rhRoute) bool {
	if rt.pattern == rhPortProxy {
		return true // nothing listens on the port in the fixtures' sandboxes
	}
	if run.criuOK {
		return false
	}
	switch rt.pattern {
	case "/v1/sandboxes/{sandbox}/checkpoint", "/v1/sandboxes/{sandbox}/fork", "/v1/sandboxes/{sandbox}/suspend",
		"/v1/sandboxes/{sandbox}/resume", "/v1/sandboxes", "/v1/pools", "/mcp":
		return true
	}
	return false
}

// do sends one request and checks the answer.
func (run *rhRun) do(req *rhRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), rhRequestTimeout)
	defer cancel()
	var body io.Reader = bytes.NewReader(req.body.data)
	if req.body.chunked {
		body = io.MultiReader(bytes.NewReader(req.body.data)) // no length: chunked
	} else if len(req.body.data) == 0 {
		body = nil
	}
	hreq, err := http.NewRequestWithContext(ctx, req.method, "http://"+run.d.addr+req.uri, body)
	if err != nil {
		run.fail("the driver built a request that cannot be sent: %v\n  request: %s", err, req)
		return
	}
	hreq.Header = req.header.Clone()
	hreq.Close = true
	run.sent.Add(1)
	start := time.Now()
	resp, kept, werr, err := rhRoundTrip(ctx, run.d.addr, hreq)
	elapsed := time.Since(start)
	if resp == nil {
		run.count(req.route, 0)
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			run.fail("hang: no answer within %s\n  request: %s", rhRequestTimeout, req)
		} else {
			run.fail("dropped connection: no answer: %v (sending: %v)\n  request: %s", err, werr, req)
		}
		run.checkAlive()
		return
	}
	run.count(req.route, resp.StatusCode)
	if err != nil && run.cutBecauseGone(req, resp) {
		// A download whose sandbox was deleted or suspended by another
		// request while it streamed is cut on purpose: a client must not
		// take a truncated file for a whole one.
		return
	}
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			run.fail("hang: the answer (%d) did not end within %s\n  request: %s", resp.StatusCode, rhRequestTimeout, req)
		} else {
			run.fail("dropped connection in the answer (%d, %d bytes read): %v\n  request: %s", resp.StatusCode, len(kept), err, req)
		}
		run.checkAlive()
		return
	}
	run.check(req, resp, kept, elapsed)
}

// cutBecauseGone reports whether req was a file download (a 200 whose body
// streams from the sandbox) of a sandbox that is no longer running.
func (run *rhRun) cutBecauseGone(req *rhRequest, resp *http.Response) bool {
	if req.method != "GET" || req.route.pattern != "/v1/sandboxes/{sandbox}/files" || resp.StatusCode != 200 {
		return false
	}
	u, err := url.Parse(req.uri)
	if err != nil {
		return false
	}
	parts := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/v1/sandboxes/"), "/")
	ref, err := url.PathUnescape(parts[0])
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sb, err := run.d.c.GetSandbox(ctx, ref)
	return err == nil && sb.State != api.StateRunning
}

// rhRoundTrip sends hreq on a connection of its own and reads the answer
// while the request is still being written: a server may answer (a 413, a
// 404) without reading a large body and then close, and that answer is what
// counts. (Go's client gives up at the failed write instead.) It returns
// the answer with up to rhMaxRead bytes of its body (the rest is read and
// dropped), the error of sending if any, and the error of reading.
func rhRoundTrip(ctx context.Context, addr string, hreq *http.Request) (*http.Response, []byte, error, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	werrc := make(chan error, 1)
	go func() { werrc <- hreq.Write(conn) }()
	writeErr := func() error {
		select {
		case err := <-werrc:
			return err
		case <-time.After(time.Second):
			return errors.New("still sending")
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), hreq)
	if err != nil {
		return nil, nil, writeErr(), err
	}
	defer resp.Body.Close()
	var kept bytes.Buffer
	_, err = io.Copy(&kept, io.LimitReader(resp.Body, rhMaxRead))
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	return resp, kept.Bytes(), nil, err
}

func (run *rhRun) checkAlive() {
	select {
	case <-run.d.exited:
		if !run.dead.Swap(true) {
			run.fail("the daemon exited; log tail:\n%s", run.d.logTail())
		}
	default:
	}
}

func (run *rhRun) check(req *rhRequest, resp *http.Response, body []byte, elapsed time.Duration) {
	rt := req.route
	status := resp.StatusCode
	ctype := resp.Header.Get("Content-Type")
	show := func() string {
		b := body
		if len(b) > 600 {
			b = b[:600]
		}
		return fmt.Sprintf("%d (%s, %s) %s", status, ctype, elapsed.Round(time.Millisecond), b)
	}
	// Which handler answered: the UI, Prometheus and MCP speak their own
	// formats; everything else is the API.
	path := resp.Request.URL.Path
	plain := path == "/mcp" || ((req.method == "GET" || req.method == "HEAD") && (path == "/" || strings.HasPrefix(path, "/ui/") || path == "/metrics"))
	if status >= 500 {
		e, err := rhErrorBody(body)
		if status == http.StatusServiceUnavailable && run.unavailableOK(rt) && (err == nil && e.Code == "unavailable" || req.method == "HEAD") {
			return // (a HEAD answer has no body to show its code)
		}
		run.fail("status %d\n  request: %s\n  answer: %s", status, req, show())
		return
	}
	if req.method == "HEAD" || status < 200 || (status >= 300 && status < 400) || status == http.StatusNoContent {
		return
	}
	if status >= 400 {
		msg := req.method + " " + strings.TrimSpace(string(body))
		if e2b.IsControlPlane(resp.Request) {
			// E2B's routes (the catch-all's random paths may land on one)
			// answer in E2B's error shape, as its SDKs expect.
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Code != status || e.Message == "" {
				run.fail("E2B route's error answer not in E2B's shape {code, message}\n  request: %s\n  answer: %s", req, show())
				return
			}
			msg = "e2b: " + e.Message
		} else if !plain {
			e, err := rhErrorBody(body)
			if err != nil {
				run.fail("error answer not in the API's error shape: %v\n  request: %s\n  answer: %s", err, req, show())
				return
			}
			msg = e.Message
		}
		if len(msg) > 50 {
			msg = msg[:50]
		}
		run.mu.Lock()
		if run.refusals[rt.key()] == nil {
			run.refusals[rt.key()] = map[string]int{}
		}
		run.refusals[rt.key()][fmt.Sprintf("%d %s", status, msg)]++
		run.mu.Unlock()
		return
	}
	switch {
	case strings.HasPrefix(ctype, "text/event-stream"):
		if rt.pattern != "/mcp" {
			run.checkStream(req, body, show)
		}
		run.harvestStream(rt, body)
	case strings.HasPrefix(ctype, "application/json"):
		if !json.Valid(body) {
			run.fail("2xx answer that is not JSON\n  request: %s\n  answer: %s", req, show())
			return
		}
		if !plain && (rt.method == "" || req.method == rt.method) {
			run.harvest(rt, body)
		}
	}
}

// rhErrorBody decodes the API's error shape {"error":{"code","message"}}
// with a known code and a message.
func rhErrorBody(b []byte) (api.ErrorBody, error) {
	var e struct {
		Error *api.ErrorBody `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return api.ErrorBody{}, fmt.Errorf("not JSON: %v", err)
	}
	if e.Error == nil {
		return api.ErrorBody{}, errors.New(`no "error" object`)
	}
	if e.Error.Message == "" {
		return *e.Error, errors.New("empty message")
	}
	if errdefs.FromCode(e.Error.Code) == nil {
		return *e.Error, fmt.Errorf("unknown code %q", e.Error.Code)
	}
	return *e.Error, nil
}

// rhEvents parses the kept part of an SSE answer. A last event that the
// stream did not finish (no blank line after it) is not among them, so a
// stream cut inside its final event counts as cut.
func rhEvents(body []byte) []sse.Event {
	// The kept body is at most rhMaxRead bytes, so no line can be over
	// sse.MaxLine and reading bytes fails in no other way.
	evs, _ := sse.ReadAll(bytes.NewReader(body))
	return evs
}

// checkStream checks an SSE answer: it ends with the route's last event
// (a stream cut before it means the handler died), and a failure event
// carries an error body whose code is not a server error.
func (run *rhRun) checkStream(req *rhRequest, body []byte, show func() string) {
	rt := req.route
	if other := run.routes[req.method+" "+rt.pattern]; req.method != rt.method && other != nil {
		rt = other // another method: that route answered
	}
	final := map[string][]string{"exec": {"exit", "error"}, "code": {"done", "failure"}, "notebook": {"done", "failure"}, "chat": {"done", "error"}, "build": {"done", "error"}}[rt.stream]
	errEvent := map[string]string{"exec": "error", "code": "failure", "notebook": "failure", "chat": "error", "build": "error"}[rt.stream]
	if final == nil {
		run.fail("an SSE answer from a route that does not stream\n  request: %s\n  answer: %s", req, show())
		return
	}
	evs := rhEvents(body)
	if len(evs) == 0 || !slices.Contains(final, evs[len(evs)-1].Name) {
		run.fail("SSE stream cut before its last event (want one of %v)\n  request: %s\n  answer: %s", final, req, show())
		return
	}
	for _, ev := range evs {
		if ev.Name != errEvent {
			continue
		}
		var e api.ErrorBody
		if err := json.Unmarshal(ev.Data, &e); err != nil || e.Message == "" || errdefs.FromCode(e.Code) == nil {
			run.fail("SSE %s event is not an error body: %q\n  request: %s", ev.Name, ev.Data, req)
			continue
		}
		if st, _ := errdefs.HTTPStatus(errdefs.FromCode(e.Code)); st >= 500 && !(e.Code == "unavailable" && run.unavailableOK(rt)) {
			run.fail("SSE %s event with a server error %s: %s\n  request: %s", ev.Name, e.Code, e.Message, req)
		}
	}
}

var rhIDRE = regexp.MustCompile(`^(sbx|snap|conv|file|ctx)_[a-z0-9]{8,}$`)

// harvest adds the objects an answer names to the state, so that later
// requests aim at them too.
func (run *rhRun) harvest(rt *rhRoute, body []byte) {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return
	}
	kinds := map[string]string{"sbx": "sandbox", "snap": "snapshot", "conv": "conversation", "file": "upload", "ctx": "context"}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		case string:
			if m := rhIDRE.FindStringSubmatch(x); m != nil {
				run.st.add(kinds[m[1]], x)
			}
		}
	}
	walk(v)
	obj, _ := v.(map[string]any)
	switch rt.key() {
	case "POST /v1/pools":
		if n, ok := obj["name"].(string); ok && n != rhPool {
			run.st.add("pool", n)
		}
	case "POST /v1/images":
		if n, ok := obj["name"].(string); ok && strings.HasPrefix(n, rhImagePrefix) {
			run.st.add("image", n)
		}
	case "POST /jupyter/api/kernels":
		if id, ok := obj["id"].(string); ok {
			run.st.add("kernel", id)
		}
	case "POST /jupyter/api/sessions":
		if id, ok := obj["id"].(string); ok {
			run.st.add("session", id)
		}
		if k, ok := obj["kernel"].(map[string]any); ok {
			if id, ok := k["id"].(string); ok {
				run.st.add("kernel", id)
			}
		}
	}
}

func (run *rhRun) harvestStream(rt *rhRoute, body []byte) {
	for _, ev := range rhEvents(body) {
		if ev.Name == "done" && rt.stream == "build" {
			var e api.BuildEvent
			if json.Unmarshal(ev.Data, &e) == nil && e.Image != nil && strings.HasPrefix(e.Image.Name, rhImagePrefix) {
				run.st.add("image", e.Image.Name)
			}
			continue
		}
		run.harvest(&rhRoute{}, ev.Data)
	}
}

// rhModel is the scripted model of the chat: every other question runs a
// cell, then answers.
func rhModel(n int, req map[string]any) chattest.Turn {
	msgs, _ := req["messages"].([]any)
	if len(msgs) > 0 {
		if m, _ := msgs[len(msgs)-1].(map[string]any); m["role"] == "tool" {
			return chattest.Turn{Text: "The answer is 42."}
		}
	}
	if n%2 == 0 {
		return chattest.Turn{Text: "Let me compute.", Calls: []chattest.ToolCall{{ID: fmt.Sprintf("c%d", n), Name: "run_code", Args: chattest.RunCodeArgs("print(6*7)")}}}
	}
	return chattest.Turn{Text: "42."}
}

func rhEnvInt(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// TestRandomHTTP drives every route with random requests (bounded in count
// and time) and checks that the daemon answers each one properly and is
// healthy, usable and leak-free afterwards. FORKBOX_RANDOM_SEED repeats a
// run's choices (the order of concurrent requests may still differ),
// FORKBOX_RANDOM_REQUESTS bounds the count (default 1500),
// FORKBOX_RANDOM_WORKERS the concurrency (default 2).
func TestRandomHTTP(t *testing.T) {
	needRoot(t)
	seed := rhEnvInt(t, "FORKBOX_RANDOM_SEED", time.Now().UnixNano())
	total := rhEnvInt(t, "FORKBOX_RANDOM_REQUESTS", 1500)
	workers := int(rhEnvInt(t, "FORKBOX_RANDOM_WORKERS", 2))
	t.Logf("seed %d (FORKBOX_RANDOM_SEED=%d repeats it), %d requests, %d workers, at most %s", seed, seed, total, workers, rhRunTime)

	// Every route the router registers and the OpenAPI document lists is one
	// the driver exercises.
	routes := rhRoutes()
	known := map[string]*rhRoute{}
	for _, rt := range routes {
		known[rt.key()] = rt
		if rt.pattern == rhPortProxy { // any method; OpenAPI lists each, with {path}
			for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"} {
				known[m+" "+strings.Replace(rhPortProxy, "{path...}", "{path}", 1)] = rt
			}
		}
	}
	for _, p := range rhServerRoutes(t) {
		if known[p] == nil {
			t.Errorf("route %q of internal/httpapi/server.go is not in the random driver's table (rhRoutes): add it", p)
		}
	}

	model := chattest.NewOpenAI(t)
	model.SetNext(rhModel)
	d := startChatDaemon(t, "OPENAI_BASE_URL="+model.URL+"/v1", "OPENAI_API_KEY=test-key", "FORKBOX_MODEL=scripted")
	rhCheckOpenAPI(t, d, known)
	if t.Failed() {
		t.FailNow()
	}

	st := &rhState{extras: map[string][]string{}, seen: map[string]bool{}}
	run := &rhRun{d: d, st: st, routes: known, perRoute: map[string]map[int]int{}, refusals: map[string]map[string]int{}}
	setupStart := time.Now()
	run.criuOK = rhSetup(t, d, st)
	t.Logf("fixtures ready in %s (memory snapshots: %v): %+v", time.Since(setupStart).Round(time.Millisecond), run.criuOK, st.fixtures())
	if !run.criuOK {
		t.Logf("memory snapshots are off on this host: 503 unavailable is accepted from checkpoint, fork, suspend, resume, create, pools and mcp")
	}

	// The keeper brings fixtures back when random requests delete them and
	// deletes throwaway objects beyond a few, until the random phase ends.
	stopKeeper := make(chan struct{})
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopKeeper:
				return
			case <-tick.C:
				rhKeep(run)
			}
		}
	}()

	// The first requests go to each route once, with its own method; then
	// routes are drawn by weight, 8% of the time with another method.
	weights := 0
	for _, rt := range routes {
		weights += rt.weight
	}
	order := rand.New(rand.NewPCG(uint64(seed), 0)).Perm(len(routes))
	var next atomic.Int64
	start := time.Now()
	deadline := start.Add(rhRunTime)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			g := &rhGen{r: rand.New(rand.NewPCG(uint64(seed), uint64(w+1))), st: st}
			for {
				i := next.Add(1) - 1
				if i >= total || time.Now().After(deadline) || run.dead.Load() {
					return
				}
				var rt *rhRoute
				wrong := false
				if int(i) < len(routes) {
					rt = routes[order[i]]
				} else {
					x := g.n(weights)
					for _, r := range routes {
						if x -= r.weight; x < 0 {
							rt = r
							break
						}
					}
					wrong = g.p(0.08)
				}
				run.do(g.request(rt, wrong))
			}
		}(w)
	}
	wg.Wait()
	close(stopKeeper)
	<-keeperDone
	took := time.Since(start)
	t.Logf("%d requests in %s (%.1f/s)", run.sent.Load(), took.Round(time.Millisecond), float64(run.sent.Load())/took.Seconds())
	run.summary(t, routes)

	for _, f := range run.failures {
		t.Errorf("%s", f)
	}
	if run.nfail > len(run.failures) {
		t.Errorf("… and %d more failures", run.nfail-len(run.failures))
	}
	if run.nfail > 0 {
		t.Logf("seed %d; daemon log tail:\n%s", seed, d.logTail())
	}
	if run.dead.Load() {
		t.FailNow()
	}
	rhAfter(t, d, st)
}

// rhCheckOpenAPI fails when the OpenAPI document lists an operation the
// driver does not know.
func rhCheckOpenAPI(t *testing.T, d *daemon, known map[string]*rhRoute) {
	t.Helper()
	resp, err := http.Get("http://" + d.addr + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || len(doc.Paths) == 0 {
		t.Fatalf("openapi.json: %v (%d paths)", err, len(doc.Paths))
	}
	for path, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" || strings.HasPrefix(m, "x-") {
				continue
			}
			key := strings.ToUpper(m) + " " + path
			if known[key] == nil {
				t.Errorf("operation %s of /v1/openapi.json is not in the random driver's table (rhRoutes): add it", key)
			}
		}
	}
}

// rhSetup makes the fixtures: sandboxes named and not, one suspended, one
// terminated, a filesystem and a memory snapshot, a pool, a code context, a
// conversation and an upload. It says whether memory snapshots work here.
func rhSetup(t *testing.T, d *daemon, st *rhState) (criuOK bool) {
	t.Helper()
	ctx := ctxT(t)
	c := d.c
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("fixture %s: %v\ndaemon log:\n%s", what, err, d.logTail())
		}
	}
	hour := int64(3600)
	named, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: rhNamed, TimeoutSecs: &hour})
	must("named sandbox", err)
	plain, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutSecs: &hour})
	must("sandbox", err)
	susp, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: rhSusp, TimeoutSecs: &hour})
	must("sandbox to suspend", err)
	term, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	must("sandbox to terminate", err)
	_, err = c.DeleteSandbox(ctx, term.ID)
	must("terminate", err)
	_, err = c.RunCode(ctx, named.ID, api.RunCodeRequest{Code: "rh = 41"})
	must("code", err)
	_, err = c.RunCode(ctx, susp.ID, api.RunCodeRequest{Code: "rh = 1"})
	must("code", err)
	_, err = c.WriteFile(ctx, plain.ID, "/workspace/rh.txt", strings.NewReader("hello\n"), 0o644)
	must("file", err)
	fsSnap, err := c.Checkpoint(ctx, plain.ID, api.CheckpointRequest{Type: api.SnapshotFilesystem, Name: "rh-fs"})
	must("filesystem snapshot", err)
	fx := rhFixtures{named: named.ID, plain: plain.ID, susp: susp.ID, term: term.ID, fsSnap: fsSnap.ID}
	memSnap, err := c.Checkpoint(ctx, named.ID, api.CheckpointRequest{Type: api.SnapshotMemory, Name: "rh-mem"})
	var ae *client.APIError
	switch {
	case err == nil:
		criuOK = true
		fx.memSnap = memSnap.ID
		_, err = c.Suspend(ctx, susp.ID)
		must("suspend", err)
	case errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable && ae.Code == "unavailable":
		t.Logf("memory snapshots unavailable: %s", ae.Message)
	default:
		must("memory snapshot", err)
	}
	_, err = c.CreatePool(ctx, api.CreatePoolRequest{Name: rhPool, SnapshotID: fsSnap.ID, Size: 1})
	must("pool", err)
	cx, err := c.CreateContext(ctx, named.ID, api.CreateContextRequest{})
	must("context", err)
	fx.ctx = cx.ID
	conv, err := c.CreateConversation(ctx, api.CreateConversationRequest{Title: "rh"})
	must("conversation", err)
	fx.conv, fx.convSandbox = conv.ID, conv.Sandbox
	up, err := c.UploadFile(ctx, "rh.csv", strings.NewReader("region,revenue\nN,10\nS,7\n"), conv.ID)
	must("upload", err)
	fx.upload = up.ID
	st.mu.Lock()
	st.fx = fx
	for _, id := range []string{named.ID, plain.ID, susp.ID, term.ID, conv.Sandbox} {
		st.seen[id] = true
	}
	st.mu.Unlock()
	return criuOK
}

// rhKeep is one round of the keeper: fixtures that random requests
// deleted come back, the suspended one is suspended again, and throwaway
// objects beyond a few are deleted (oldest first). A server error on the
// way is a failure like any other.
func rhKeep(run *rhRun) {
	ctx, cancel := context.WithTimeout(context.Background(), rhRequestTimeout)
	defer cancel()
	c := run.d.c
	fx := run.st.fixtures()
	check := func(what string, err error) bool {
		var ae *client.APIError
		if err == nil {
			return true
		}
		if errors.As(err, &ae) {
			if ae.Status >= 500 && !(ae.Code == "unavailable" && !run.criuOK) {
				run.fail("keeper: %s: %d %s: %s", what, ae.Status, ae.Code, ae.Message)
			}
		} else if ctx.Err() == nil {
			run.fail("keeper: %s: %v", what, err)
		}
		return false
	}
	gone := func(id string) bool {
		sb, err := c.GetSandbox(ctx, id)
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			return true
		}
		return err == nil && sb.State.Ended()
	}
	hour := int64(3600)
	revive := func(id *string, name string) {
		if !gone(*id) {
			return
		}
		if name != "" {
			// A random request may have taken the name meanwhile.
			if sb, err := c.GetSandbox(ctx, name); err == nil && !sb.State.Ended() {
				*id = sb.ID
				return
			}
		}
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: name, TimeoutSecs: &hour})
		if check("recreate sandbox "+name, err) {
			*id = sb.ID
			run.st.saw(sb.ID)
		}
	}
	revive(&fx.named, rhNamed)
	revive(&fx.plain, "")
	revive(&fx.susp, rhSusp)
	if run.criuOK {
		if sb, err := c.GetSandbox(ctx, fx.susp); err == nil && sb.State == api.StateRunning {
			_, err := c.Suspend(ctx, fx.susp)
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
				check("suspend again", err)
			}
		}
	}
	if _, err := c.GetSnapshot(ctx, fx.fsSnap); err != nil {
		if sn, err := c.Checkpoint(ctx, fx.plain, api.CheckpointRequest{Type: api.SnapshotFilesystem}); check("filesystem snapshot again", err) {
			fx.fsSnap = sn.ID
		}
	}
	if run.criuOK {
		if _, err := c.GetSnapshot(ctx, fx.memSnap); err != nil {
			if sn, err := c.Checkpoint(ctx, fx.named, api.CheckpointRequest{Type: api.SnapshotMemory}); check("memory snapshot again", err) {
				fx.memSnap = sn.ID
			}
		}
	}
	if pools, err := c.ListPools(ctx); check("list pools", err) {
		found := false
		for _, p := range pools.Pools {
			found = found || p.Name == rhPool
		}
		if !found {
			_, err := c.CreatePool(ctx, api.CreatePoolRequest{Name: rhPool, SnapshotID: fx.fsSnap, Size: 1})
			check("pool again", err)
		}
		var extra []string
		for _, p := range pools.Pools {
			if p.Name != rhPool {
				extra = append(extra, p.Name)
			}
		}
		for _, p := range extra[:max(0, len(extra)-1)] { // the newest stays
			check("delete pool "+p, ignore404(c.DeletePool(ctx, p)))
			run.st.drop("pool", p)
		}
	}
	if ctxs, err := c.ListContexts(ctx, fx.named); err == nil {
		found := false
		for _, x := range ctxs.Contexts {
			found = found || x.ID == fx.ctx
		}
		if !found {
			if x, err := c.CreateContext(ctx, fx.named, api.CreateContextRequest{}); check("context again", err) {
				fx.ctx = x.ID
			}
		}
	}
	if _, err := c.GetConversation(ctx, fx.conv); err != nil {
		if conv, err := c.CreateConversation(ctx, api.CreateConversationRequest{Title: "rh"}); check("conversation again", err) {
			fx.conv, fx.convSandbox = conv.ID, conv.Sandbox
			run.st.saw(conv.Sandbox)
		}
	}
	run.st.mu.Lock()
	run.st.fx = fx
	for _, id := range []string{fx.named, fx.plain, fx.susp, fx.convSandbox} {
		run.st.seen[id] = true
	}
	run.st.mu.Unlock()

	// Throwaway sandboxes: at most 6 live ones besides the fixtures and the
	// pools' ready sandboxes.
	if list, err := c.ListSandboxes(ctx, client.ListOptions{}); check("list sandboxes", err) {
		var extra []api.Sandbox
		for _, sb := range list.Sandboxes {
			run.st.saw(sb.ID)
			if sb.State == api.StateTerminated || sb.ID == fx.named || sb.ID == fx.plain || sb.ID == fx.susp ||
				sb.ID == fx.convSandbox || sb.Labels["forkbox.pool.ready"] == "true" {
				continue
			}
			extra = append(extra, sb)
		}
		sort.Slice(extra, func(i, j int) bool { return extra[i].CreatedAt.Before(extra[j].CreatedAt) })
		for _, sb := range extra[:max(0, len(extra)-6)] {
			_, err := c.DeleteSandbox(ctx, sb.ID)
			check("delete sandbox "+sb.ID, ignore404(err))
			run.st.drop("sandbox", sb.ID)
		}
	}
	if list, err := c.ListSnapshots(ctx, ""); check("list snapshots", err) {
		var extra []api.Snapshot
		for _, sn := range list.Snapshots {
			if sn.ID != fx.fsSnap && sn.ID != fx.memSnap {
				extra = append(extra, sn)
			}
		}
		sort.Slice(extra, func(i, j int) bool { return extra[i].CreatedAt.Before(extra[j].CreatedAt) })
		for _, sn := range extra[:max(0, len(extra)-8)] {
			err := c.DeleteSnapshot(ctx, sn.ID)
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusConflict { // in use by a pool: fine
				check("delete snapshot "+sn.ID, ignore404(err))
			}
			run.st.drop("snapshot", sn.ID)
		}
	}
	if convs, err := c.ListConversations(ctx); check("list conversations", err) {
		var extra []string
		for _, cv := range convs { // newest first
			if cv.ID != fx.conv {
				extra = append(extra, cv.ID)
			}
		}
		for _, id := range extra[min(3, len(extra)):] {
			check("delete conversation "+id, ignore404(c.DeleteConversation(ctx, id)))
			run.st.drop("conversation", id)
		}
	}
	imgs := run.st.list("image")
	for _, name := range imgs[:max(0, len(imgs)-2)] {
		err := c.DeleteImage(ctx, name)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
			check("delete image "+name, ignore404(err))
		}
		run.st.drop("image", name)
	}
	if ctxs := run.st.list("context"); len(ctxs) > 20 {
		for _, id := range ctxs[:len(ctxs)-20] {
			run.st.drop("context", id)
		}
	}
}

func ignore404(err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil
	}
	return err
}

func (run *rhRun) summary(t *testing.T, routes []*rhRoute) {
	run.mu.Lock()
	defer run.mu.Unlock()
	var b strings.Builder
	for _, rt := range routes {
		m := run.perRoute[rt.key()]
		if len(m) == 0 {
			t.Errorf("route %s got no request", rt.key())
			continue
		}
		codes := make([]int, 0, len(m))
		n := 0
		for c, k := range m {
			codes = append(codes, c)
			n += k
		}
		sort.Ints(codes)
		fmt.Fprintf(&b, "  %-52s %4d:", rt.key(), n)
		for _, c := range codes {
			fmt.Fprintf(&b, " %d×%d", c, m[c])
		}
		b.WriteString("\n")
		// The commonest refusals, to see what the bodies get wrong.
		type kv struct {
			msg string
			n   int
		}
		var top []kv
		for msg, k := range run.refusals[rt.key()] {
			top = append(top, kv{msg, k})
		}
		sort.Slice(top, func(i, j int) bool { return top[i].n > top[j].n || top[i].n == top[j].n && top[i].msg < top[j].msg })
		for _, x := range top[:min(3, len(top))] {
			fmt.Fprintf(&b, "      %3d× %q\n", x.n, x.msg)
		}
	}
	t.Logf("answers per route (status×count; 0 is no answer):\n%s", b.String())
}

// rhAfter checks the daemon after the random phase: alive and healthy, it
// creates a sandbox that runs a command, every sandbox can be deleted, and
// nothing of any sandbox is left on the host; its log shows no panic and
// no server error that no answer showed (MCP's tools call the API
// in-process).
func rhAfter(t *testing.T, d *daemon, st *rhState) {
	ctx := ctxT(t)
	c := d.c
	select {
	case <-d.exited:
		t.Fatalf("the daemon exited during the run; log tail:\n%s", d.logTail())
	default:
	}
	if err := c.Health(ctx); err != nil {
		t.Fatalf("healthz after the run: %v", err)
	}
	// The run may have set the tenant's quotas as low as nothing at all
	// (PUT /v1/tenants/default): lift them, or the create below is
	// rightly refused.
	if _, err := c.SetTenantQuotas(ctx, "default", api.Quotas{}); err != nil {
		t.Fatalf("lift the default tenant's quotas after the run: %v", err)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create after the run: %v\n%s", err, d.logTail())
	}
	st.add("sandbox", sb.ID)
	if res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: "echo", Args: []string{"ok"}}); err != nil || res.Stdout != "ok\n" || res.ExitCode != 0 {
		t.Fatalf("exec after the run: %+v %v", res, err)
	}

	// Pools first (they refill), then conversations, the driver's images,
	// every live sandbox and every snapshot.
	if pools, err := c.ListPools(ctx); err != nil {
		t.Errorf("list pools: %v", err)
	} else {
		for _, p := range pools.Pools {
			if err := c.DeletePool(ctx, p.Name); err != nil {
				t.Errorf("delete pool %s: %v", p.Name, err)
			}
		}
	}
	if convs, err := c.ListConversations(ctx); err != nil {
		t.Errorf("list conversations: %v", err)
	} else {
		for _, cv := range convs {
			if err := ignore404(c.DeleteConversation(ctx, cv.ID)); err != nil {
				t.Errorf("delete conversation %s: %v", cv.ID, err)
			}
		}
	}
	if imgs, err := c.ListImages(ctx); err != nil {
		t.Errorf("list images: %v", err)
	} else {
		for _, img := range imgs {
			if strings.HasPrefix(img.Name, rhImagePrefix) {
				if err := ignore404(c.DeleteImage(ctx, img.Name)); err != nil {
					t.Errorf("delete image %s: %v", img.Name, err)
				}
			}
		}
	}
	all := map[string]bool{}
	for round := 0; round < 3; round++ {
		list, err := c.ListSandboxes(ctx, client.ListOptions{})
		if err != nil {
			t.Fatalf("list sandboxes: %v", err)
		}
		live := 0
		for _, sb := range list.Sandboxes {
			all[sb.ID] = true
			if sb.State == api.StateTerminated {
				continue
			}
			live++
			if _, err := c.DeleteSandbox(ctx, sb.ID); ignore404(err) != nil {
				t.Errorf("delete sandbox %s (%s, %s): %v", sb.ID, sb.Name, sb.State, err)
			}
		}
		if live == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	for _, state := range []api.SandboxState{api.StateTerminated, api.StateError} {
		if list, err := c.ListSandboxes(ctx, client.ListOptions{State: state}); err == nil {
			for _, sb := range list.Sandboxes {
				all[sb.ID] = true
			}
		}
	}
	if list, err := c.ListSnapshots(ctx, ""); err != nil {
		t.Errorf("list snapshots: %v", err)
	} else {
		for _, sn := range list.Snapshots {
			if err := ignore404(c.DeleteSnapshot(ctx, sn.ID)); err != nil {
				t.Errorf("delete snapshot %s: %v", sn.ID, err)
			}
		}
	}
	st.mu.Lock()
	for id := range st.seen {
		all[id] = true
	}
	for _, id := range st.extras["sandbox"] {
		all[id] = true
	}
	st.mu.Unlock()
	ids := make([]string, 0, len(all))
	for id := range all {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		assertNoLeaks(t, d, id)
	}
	t.Logf("%d sandboxes made in all, deleted, no leaks checked", len(ids))

	// The daemon's own account: a panic, or a server error that an
	// in-process call (MCP) swallowed.
	logText, _ := os.ReadFile(d.log.Name())
	var bad []string
	code5xx := regexp.MustCompile(`level=ERROR msg=http .* code=(5\d\d)`)
	for _, line := range strings.Split(string(logText), "\n") {
		low := strings.ToLower(line)
		if strings.Contains(low, "panic") {
			bad = append(bad, line)
			continue
		}
		if m := code5xx.FindStringSubmatch(line); m != nil && m[1] != "503" {
			bad = append(bad, line)
		}
	}
	for i, line := range bad {
		if i == 20 {
			t.Errorf("… and %d more such log lines", len(bad)-i)
			break
		}
		t.Errorf("daemon log: %s", line)
	}
	select {
	case <-d.exited:
		t.Fatalf("the daemon exited at the end; log tail:\n%s", d.logTail())
	default:
	}
}
