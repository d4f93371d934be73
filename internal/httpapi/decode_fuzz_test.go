package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/analyst"
	"github.com/forkbox/forkbox/internal/build"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/sandbox/sandboxtest"
	"github.com/forkbox/forkbox/internal/store"
)

// Request bodies, query strings and uploads come from API clients, which
// may be anything: a model's output, a broken script, an attacker with a
// key. These targets drive the real decoding and the real handlers; every
// answer must be a success or a 4xx that names the problem, never a panic
// or a 500.

// fuzzRequestTypes are the body types the handlers decode with decodeJSON
// or decodeJSONLimit. TestFuzzDecodeJSONCoversEveryRequestType keeps the
// list complete.
var fuzzRequestTypes = []struct {
	name string
	new  func() any
}{
	{"CreateSandboxRequest", func() any { return new(api.CreateSandboxRequest) }},
	{"UpdateSandboxRequest", func() any { return new(api.UpdateSandboxRequest) }},
	{"UpdatePortRequest", func() any { return new(api.UpdatePortRequest) }},
	{"ExecRequest", func() any { return new(api.ExecRequest) }},
	{"RunCodeRequest", func() any { return new(api.RunCodeRequest) }},
	{"CreateContextRequest", func() any { return new(api.CreateContextRequest) }},
	{"CheckpointRequest", func() any { return new(api.CheckpointRequest) }},
	{"ForkRequest", func() any { return new(api.ForkRequest) }},
	{"CreatePoolRequest", func() any { return new(api.CreatePoolRequest) }},
	{"CreateKeyRequest", func() any { return new(api.CreateKeyRequest) }},
	{"Tenant", func() any { return new(api.Tenant) }},
	{"ChatRequest", func() any { return new(api.ChatRequest) }},
	{"CreateConversationRequest", func() any { return new(api.CreateConversationRequest) }},
}

// TestFuzzDecodeJSONCoversEveryRequestType reads the package's handlers and
// fails when one decodes a type FuzzDecodeJSON does not, so that a new
// request type is fuzzed from the day it is added.
func TestFuzzDecodeJSONCoversEveryRequestType(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	decoded := map[string]bool{}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || fn.Name.Name == "decodeJSON" || fn.Name.Name == "decodeJSONLimit" {
				continue // the decoder itself passes on what it was given
			}
			// The api types of the function's variables.
			types := map[string]string{}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec:
					if sel, ok := n.Type.(*ast.SelectorExpr); ok {
						for _, id := range n.Names {
							types[id.Name] = sel.Sel.Name
						}
					}
				case *ast.AssignStmt:
					for i, rhs := range n.Rhs {
						if cl, ok := rhs.(*ast.CompositeLit); ok && i < len(n.Lhs) {
							if sel, ok := cl.Type.(*ast.SelectorExpr); ok {
								if id, ok := n.Lhs[i].(*ast.Ident); ok {
									types[id.Name] = sel.Sel.Name
								}
							}
						}
					}
				}
				return true
			})
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "decodeJSON" && sel.Sel.Name != "decodeJSONLimit") || len(call.Args) < 3 {
					return true
				}
				typ := ""
				if u, ok := call.Args[2].(*ast.UnaryExpr); ok && u.Op == token.AND {
					if id, ok := u.X.(*ast.Ident); ok {
						typ = types[id.Name]
					}
				}
				if typ == "" {
					t.Errorf("%s: cannot tell what %s decodes into; decode into &v with v declared as an api type, or extend this test", fset.Position(call.Pos()), sel.Sel.Name)
					return true
				}
				decoded[typ] = true
				return true
			})
		}
	}
	var known []string
	for _, rt := range fuzzRequestTypes {
		known = append(known, rt.name)
		if !decoded[rt.name] {
			t.Errorf("fuzzRequestTypes lists %s, which no handler decodes any more", rt.name)
		}
	}
	for typ := range decoded {
		if !slices.Contains(known, typ) {
			t.Errorf("a handler decodes api.%s, which FuzzDecodeJSON does not fuzz: add it to fuzzRequestTypes", typ)
		}
	}
	if len(decoded) == 0 {
		t.Fatal("found no decodeJSON call at all")
	}
}

// FuzzDecodeJSON runs any body through the strict JSON decoder, as one of
// the request types, under a small body limit. It checks: no panic; an
// error is a 400, or a 413 only for a body over the limit; a body that
// decodes is one JSON value within the limit; and the decoded value, encoded
// and decoded again, encodes to the same bytes.
func FuzzDecodeJSON(f *testing.F) {
	for i, body := range []string{
		`{"name":"demo","image":"python","cpus":0.5,"memory_mb":512,"env":{"A":"1"},"labels":{"team":"ml"},"auto_resume":false}`,
		`{"cmd":"python3","args":["-c","print(1)"],"env":{"A":"1"},"cwd":"/workspace","stdin":"x","timeout_secs":1.5}`,
		`{"code":"1+1","language":"python","context":"default","timeout_ms":100,"env":{"K":"V"}}`,
		`{"language":"r","cwd":"/tmp","env":{}}`,
		`{"type":"memory","name":"before"}`,
		`{"count":2,"names":["a","b"]}`,
		`{"name":"warm","image":"python","size":3}`,
		`{"question":"sum?","csv":"a,b\n1,2\n","csv_name":"x.csv","file_ids":["file_1"],"conversation_id":"c","model":"m"}`,
		`{"title":"t"}`,
	} {
		f.Add(uint8(i), []byte(body))
	}
	for _, body := range []string{
		``, ` `, `null`, `{}`, `[]`, `{"cmd":1}`, `{"unknown":true}`, `{"cmd":"a"} {"cmd":"b"}`, `{"cmd":"a"}x`, `{"cpus":1e400}`,
		`{"count":1.5}`, `{"memory_mb":-9223372036854775809}`, `{"env":{"A":null}}`, `{"NAME":"case"}`, `{"cmd":"\ud800"}`,
		`{"cmd":"a"` + strings.Repeat(" ", 300) + `}`, `{"args":[` + strings.Repeat(`"x",`, 100) + `"y"]}`, "\xef\xbb\xbf{}", `{"name":"a","name":"b"}`,
	} {
		f.Add(uint8(len(body)), []byte(body))
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		rt := fuzzRequestTypes[int(which&0x0f)%len(fuzzRequestTypes)]
		limit := int64(256) << (which >> 4 & 3) // 256 B to 2 KiB
		s := &Server{cfg: Config{MaxJSONBytes: limit}}
		v := rt.new()
		err := decodeBody(s, body, v)
		if err != nil {
			switch status(err) {
			case http.StatusBadRequest:
			case http.StatusRequestEntityTooLarge:
				if int64(len(body)) <= limit {
					t.Fatalf("%s %q: %v: too large at %d of %d bytes", rt.name, body, err, len(body), limit)
				}
			default:
				t.Fatalf("%s %q: %v: a %d", rt.name, body, err, status(err))
			}
			if err.Error() == "" {
				t.Fatalf("%s %q: an error without a message", rt.name, body)
			}
			return
		}
		if !json.Valid(body) || int64(len(body)) > limit {
			t.Fatalf("%s: accepted %q (%d bytes, limit %d), which is not one JSON value within the limit", rt.name, body, len(body), limit)
		}
		b1, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s %q decoded to %+v, which does not encode: %v", rt.name, body, v, err)
		}
		v2 := rt.new()
		if err := decodeBody(&Server{cfg: Config{MaxJSONBytes: 1 << 20}}, b1, v2); err != nil {
			t.Fatalf("%s %q decoded to %+v, whose encoding %s is refused: %v", rt.name, body, v, b1, err)
		}
		if b2, _ := json.Marshal(v2); !bytes.Equal(b1, b2) {
			t.Fatalf("%s %q: encodes to %s, which decodes to %s", rt.name, body, b1, b2)
		}
	})
}

// decodeBody decodes body into v through decodeJSON, as a handler does.
func decodeBody(s *Server, body []byte, v any) error {
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	return s.decodeJSON(httptest.NewRecorder(), r, v)
}

func status(err error) int {
	s, _ := errdefs.HTTPStatus(err)
	return s
}

// fuzzRuntime is a runtime that creates nothing; the fuzz servers only
// hold sandboxes written straight into their store.
type fuzzImages struct{}

func (fuzzImages) Get(_ context.Context, name string) (*image.Image, error) {
	return nil, errdefs.NotFound("image %q not found", name)
}

// fuzzBuilder builds and imports as the real builder does as far as the
// request's bytes go: it validates the recipe, extracts the build context
// with image.ExtractTar and imports an archive with a real image store.
type fuzzBuilder struct {
	dir    string       // scratch space for build contexts
	images *image.Store // nil: imports are refused (not root)
	last   *api.Recipe
}

func (b *fuzzBuilder) Build(ctx context.Context, r *api.Recipe, buildContext io.Reader, _ func(*image.Image) error, emit func(api.BuildEvent)) (*image.Image, error) {
	if err := build.Validate(r); err != nil {
		return nil, err
	}
	b.last = r
	if buildContext != nil {
		dir, err := os.MkdirTemp(b.dir, "context-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if err := image.ExtractTar(ctx, buildContext, dir, image.ExtractOptions{}); err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
	}
	emit(api.BuildEvent{Type: api.BuildEventStep, Kind: "base", Detail: r.Base})
	return &image.Image{Name: r.Name, ID: "sha256:" + r.Name, Base: r.Base, CreatedAt: time.Unix(0, 0)}, nil
}

func (b *fuzzBuilder) Import(ctx context.Context, name string, archive io.Reader, replace func(*image.Image) error, emit func(api.BuildEvent)) (*image.Image, error) {
	if b.images == nil {
		return nil, errdefs.Unavailable("imports need root in the fuzz tests")
	}
	return b.images.Import(ctx, name, archive, replace, nil)
}

// fuzzServer is a real Server over a real Manager and SQLite store, with
// fakes below the Manager.
type fuzzServer struct {
	s       *Server
	st      *store.SQLite
	builder *fuzzBuilder
}

func newFuzzServer(f *testing.F, cfg Config) *fuzzServer {
	f.Helper()
	ctx := context.Background()
	dir := f.TempDir()
	st, err := store.OpenSQLite(ctx, filepath.Join(dir, "forkbox.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mgr := sandbox.New(st, sandboxtest.NoRuntime{}, fuzzImages{}, nil, sandbox.DefaultDefaults, quiet)
	b := &fuzzBuilder{dir: dir}
	if os.Geteuid() == 0 {
		if b.images, err = image.Open(filepath.Join(dir, "images")); err != nil {
			f.Fatal(err)
		}
	}
	mgr.SetImageBuilder(b)
	cfg.Logger = quiet
	s, err := New(cfg, mgr)
	if err != nil {
		f.Fatal(err)
	}
	return &fuzzServer{s: s, st: st, builder: b}
}

// do serves one request through the whole API handler.
func (fs *fuzzServer) do(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	fs.s.Handler().ServeHTTP(w, r)
	return w
}

// errorCode returns the API error code of an error answer, failing when
// the answer is not an API error.
func errorCode(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("a %d answer that is not an API error: %q (%v)", w.Code, w.Body.Bytes(), err)
	}
	return e.Error.Code
}

// The sandboxes FuzzListSandboxes lists.
var fuzzSandboxes = []*store.Sandbox{
	{ID: "sbx_a", Name: "alpha", State: api.StateRunning, Spec: store.Spec{Labels: map[string]string{"team": "ml", "env": "prod"}}},
	{ID: "sbx_b", State: api.StateTerminated, Spec: store.Spec{Labels: map[string]string{"team": "ml"}}},
	{ID: "sbx_c", Name: "gamma", State: api.StateError, Spec: store.Spec{Labels: map[string]string{"url": "http://x:1/", "": "empty key"}}},
	{ID: "sbx_d", Name: "delta", State: api.StateSuspended, Spec: store.Spec{Labels: map[string]string{"team": "data", "a b": "c%d"}}},
	{ID: "sbx_e", Name: "epsilon", State: api.StateLost, Node: "b"},
}

// TestListStatesAreTheAPIs holds GET /v1/sandboxes' state filter, as
// openapi.json describes it, to api.SandboxStates: every state can be
// asked for (a lost sandbox too), in the same order.
func TestListStatesAreTheAPIs(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	var get struct {
		Parameters []struct {
			Name   string `json:"name"`
			Schema struct {
				Enum []api.SandboxState `json:"enum"`
			} `json:"schema"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(openapiJSON, &doc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(doc.Paths["/v1/sandboxes"]["get"], &get); err != nil {
		t.Fatalf("GET /v1/sandboxes in openapi.json: %v", err)
	}
	for _, p := range get.Parameters {
		if p.Name == "state" {
			if !slices.Equal(p.Schema.Enum, api.SandboxStates) {
				t.Fatalf("openapi.json's state filter is %v; api.SandboxStates are %v (internal/apigen/openapi.in.json)", p.Schema.Enum, api.SandboxStates)
			}
			return
		}
	}
	t.Fatal("GET /v1/sandboxes has no state parameter in openapi.json")
}

// FuzzListSandboxes lists with any query string. It checks: the answer is
// 200 or 400; it is 400 exactly for an unknown state, a label that is not
// key:value with a key, a limit that is not a number from 1 to 1000, an
// include_terminated that is not a boolean or a cursor that does not
// decode; a 200 lists exactly the sandboxes that match every filter (the
// terminated ones only when asked for by state or include_terminated), as
// an array (never null), in order (newest first, then the greater id),
// after the cursor, cut at the limit with a next cursor exactly when more
// follow.
func FuzzListSandboxes(f *testing.F) {
	for _, q := range []string{"", "state=running", "state=bogus", "label=team:ml", "label=team:ml&label=env:prod", "label=team", "label=:x",
		"label=url:http://x:1/", "name=alpha&state=running", "state=lost", "label=a+b:c%25d", "label=%zz", "state=", "label=team:ml&label=team:data", "name=%00", ";;&&==",
		"include_terminated=true", "include_terminated=1", "include_terminated=yes", "state=terminated", "limit=2", "limit=0", "limit=1001", "limit=+3", "limit=",
		"limit=2&cursor=" + store.Cursor{Kind: store.CursorSandboxes, T: time.Unix(1700000000, 0).UnixNano(), ID: "sbx_d"}.Encode(),
		"cursor=" + store.Cursor{Kind: store.CursorSnapshots, T: 1, ID: "x"}.Encode(), "cursor=%%%", "cursor=", "include_terminated=true&limit=1&cursor=" +
			store.Cursor{Kind: store.CursorSandboxes, T: time.Unix(1700000000, 0).UnixNano(), ID: "sbx_c"}.Encode()} {
		f.Add(q)
	}
	fs := newFuzzServer(f, Config{})
	created := time.Unix(1700000000, 0)
	for _, sb := range fuzzSandboxes {
		sb.CreatedAt, sb.LastActiveAt = created, created
		if err := fs.st.Create(context.Background(), sb); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/sandboxes", nil)
		r.URL.RawQuery = rawQuery
		w := fs.do(r)

		q := r.URL.Query()
		state, name, labels, bad := api.SandboxState(q.Get("state")), q.Get("name"), map[string]string{}, false
		if state != "" && !slices.Contains([]api.SandboxState{api.StateCreating, api.StateRunning, api.StateSuspending, api.StateSuspended, api.StateResuming, api.StateTerminated, api.StateError, api.StateLost}, state) {
			bad = true
		}
		for _, l := range q["label"] {
			k, v, ok := strings.Cut(l, ":")
			if !ok || k == "" {
				bad = true
			}
			labels[k] = v
		}
		limit := 100
		if v, ok := q["limit"]; ok {
			n, err := strconv.Atoi(v[0])
			if err != nil || n < 1 || n > 1000 {
				bad = true
			}
			limit = n
		}
		all := false
		if v, ok := q["include_terminated"]; ok {
			b, err := strconv.ParseBool(v[0])
			if err != nil {
				bad = true
			}
			all = b
		}
		var cursor *store.Cursor
		if v := q.Get("cursor"); v != "" {
			c, err := store.DecodeCursor(v, store.CursorSandboxes, false)
			if err != nil {
				bad = true
			}
			cursor = &c
		}
		if bad {
			if w.Code != http.StatusBadRequest || errorCode(t, w) != "invalid_argument" {
				t.Fatalf("?%s: %d %s, want 400", rawQuery, w.Code, w.Body.Bytes())
			}
			return
		}
		if w.Code != http.StatusOK {
			t.Fatalf("?%s: %d %s, want 200", rawQuery, w.Code, w.Body.Bytes())
		}
		var list struct {
			Sandboxes  *[]api.Sandbox `json:"sandboxes"`
			NextCursor string         `json:"next_cursor"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || list.Sandboxes == nil {
			t.Fatalf("?%s: answer %s: %v", rawQuery, w.Body.Bytes(), err)
		}
		var got, want []string
		for _, sb := range *list.Sandboxes {
			got = append(got, sb.ID)
		}
		for i := len(fuzzSandboxes) - 1; i >= 0; i-- { // the greater id first
			sb := fuzzSandboxes[i]
			ok := (state == "" || sb.State == state) && (name == "" || sb.Name == name)
			if state == "" && !all && sb.State == api.StateTerminated {
				ok = false
			}
			for k, v := range labels {
				if hv, has := sb.Spec.Labels[k]; !has || hv != v {
					ok = false
				}
			}
			if c := cursor; c != nil && (created.UnixNano() > c.T || (created.UnixNano() == c.T && sb.ID >= c.ID)) {
				ok = false // not after the cursor
			}
			if ok {
				want = append(want, sb.ID)
			}
		}
		more := len(want) > limit
		if more {
			want = want[:limit]
		}
		if !slices.Equal(got, want) || more != (list.NextCursor != "") {
			t.Fatalf("?%s listed %v (next %q), want %v (more: %v)", rawQuery, got, list.NextCursor, want, more)
		}
	})
}

// validMode reports whether m is what the files API takes as a mode: octal
// digits only, at most 0777.
func validMode(m string) bool {
	if m == "" || strings.Trim(m, "01234567") != "" {
		return false
	}
	m = strings.TrimLeft(m, "0")
	if m == "" {
		return true
	}
	v, err := strconv.ParseUint(m, 8, 64)
	return err == nil && len(m) <= 3 && v <= 0o777
}

// FuzzFileRequests calls the file endpoints of a sandbox that does not
// exist with any query, content type and body. Their own parsing (mode,
// recursive, the multipart upload) runs before the sandbox is looked up,
// so the answer tells whether it accepted the request: a 404 means it did,
// a 400 or 413 names what it refused. Nothing else may come back.
func FuzzFileRequests(f *testing.F) {
	mp := func(parts ...string) []byte {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		mw.SetBoundary("BOUNDARY")
		for i := 0; i+1 < len(parts); i += 2 {
			var w io.Writer
			if strings.HasSuffix(parts[i], ".csv") || strings.Contains(parts[i], ".") {
				w, _ = mw.CreateFormFile("file", parts[i])
			} else {
				w, _ = mw.CreateFormField(parts[i])
			}
			w.Write([]byte(parts[i+1]))
		}
		mw.Close()
		return b.Bytes()
	}
	const mpType = "multipart/form-data; boundary=BOUNDARY"
	for _, s := range []struct {
		op    uint8
		query string
		ctype string
		body  []byte
	}{
		{0, "path=/workspace/a.txt&mode=0644", "application/octet-stream", []byte("hello")},
		{0, "path=a&mode=0o644", "", []byte("x")},
		{0, "path=a&mode=1777", "", nil},
		{0, "path=a&mode=-1", "", nil},
		{0, "path=a&mode=%2B644", "", nil},
		{0, "path=a&mode=00000000000000000000000755", "", nil},
		{0, "path=dir/&mode=0600", mpType, mp("note", "x", "a.txt", "content")},
		{0, "path=dir/", mpType, mp("note", "x")},
		{0, "path=dir/", mpType, []byte("--BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"../../etc/x\"\r\n\r\ntrunc")},
		{0, "path=x", "multipart/form-data", []byte("--\r\n")},
		{0, "path=x", "multipart/form-data; boundary=\"\"", []byte("----\r\n")},
		{0, "path=x", mpType, bytes.Repeat([]byte("a"), 5000)},
		{1, "path=a&recursive=true", "", nil},
		{1, "path=a&recursive=yes", "", nil},
		{1, "path=a&recursive=", "", nil},
		{1, "recursive=T&recursive=bogus", "", nil},
		{2, "path=/etc/passwd", "", nil},
		{3, "path=%2F", "", nil},
	} {
		f.Add(s.op, s.query, s.ctype, s.body)
	}
	fs := newFuzzServer(f, Config{MaxUploadBytes: 4096})
	f.Fuzz(func(t *testing.T, op uint8, rawQuery, ctype string, body []byte) {
		methods := []string{http.MethodPut, http.MethodDelete, http.MethodGet, http.MethodGet}
		target := "/v1/sandboxes/sbx_missing/files"
		if op%4 == 3 {
			target += "/list"
		}
		r := httptest.NewRequest(methods[op%4], target, bytes.NewReader(body))
		r.URL.RawQuery = rawQuery
		if ctype != "" {
			r.Header.Set("Content-Type", ctype)
		}
		w := fs.do(r)
		q := r.URL.Query()

		want := http.StatusNotFound // accepted, then the sandbox is missing
		multipartBody := false
		switch op % 4 {
		case 0:
			mt, _, _ := mime.ParseMediaType(ctype)
			switch {
			case q.Get("mode") != "" && !validMode(q.Get("mode")):
				want = http.StatusBadRequest
			case len(body) > 4096:
				want = http.StatusRequestEntityTooLarge
			case mt == "multipart/form-data":
				multipartBody = true
			}
		case 1:
			if rec := q.Get("recursive"); rec != "" && !slices.Contains([]string{"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}, rec) {
				want = http.StatusBadRequest
			}
		}
		switch {
		case multipartBody && (w.Code == http.StatusBadRequest || w.Code == http.StatusNotFound):
		case w.Code != want:
			t.Fatalf("%s ?%s (%q, %d bytes): %d %s, want %d", r.Method, rawQuery, ctype, len(body), w.Code, w.Body.Bytes(), want)
		}
		if code := errorCode(t, w); w.Code == http.StatusNotFound && code != "not_found" {
			t.Fatalf("%s ?%s: 404 with code %s", r.Method, rawQuery, code)
		}
	})
}

// FuzzFirstFilePart reads any multipart body as a file upload. It checks:
// no panic; every error is invalid_argument; the part it returns is the
// "file" part or one with a file name, and reading it to its end ends.
func FuzzFirstFilePart(f *testing.F) {
	f.Add("b", []byte("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhello\r\n--b--\r\n"))
	f.Add("b", []byte("--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--b\r\nContent-Disposition: form-data; name=\"y\"; filename=\"n\"\r\n\r\n2\r\n--b--\r\n"))
	f.Add("b", []byte("--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--b--\r\n"))
	f.Add("b", []byte("--b\r\nContent-Disposition: form-data; name=\"file\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n=4"))
	f.Add("", []byte("----\r\n\r\n"))
	f.Add("b", []byte("--b\r\nContent-Disposition: form-data; filename*=UTF-8''%e2%9c%93\r\n\r\nx\r\n--b--"))
	f.Add("b", []byte("no parts here"))
	f.Fuzz(func(t *testing.T, boundary string, body []byte) {
		p, err := firstFilePart(multipart.NewReader(bytes.NewReader(body), boundary))
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("firstFilePart(%q, %q) = %v: a %d", boundary, body, err, status(err))
			}
			return
		}
		if p.FormName() != "file" && p.FileName() == "" {
			t.Fatalf("firstFilePart(%q, %q) returned the part %q without a file name", boundary, body, p.FormName())
		}
		if n, _ := io.Copy(io.Discard, p); n > int64(len(body)) {
			t.Fatalf("firstFilePart(%q, %q): the part read %d bytes from a body of %d", boundary, body, n, len(body))
		}
	})
}

// FuzzCreateImage posts any body to POST /v1/images, with any content type
// and query: a recipe (JSON or YAML), a multipart build with its context, or
// an archive to import. It checks that the answer is 201 or an API error of
// 400 or 413, never a panic or a 500, and that a build that went through
// was handed the recipe the body holds.
func FuzzCreateImage(f *testing.F) {
	tarOf := func(name, body string) []byte {
		var b bytes.Buffer
		tw := tarWriter(&b)
		tw(name, body)
		return b.Bytes()
	}
	mp := func(parts ...string) []byte {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		mw.SetBoundary("B")
		for i := 0; i+1 < len(parts); i += 2 {
			w, _ := mw.CreateFormField(parts[i])
			w.Write([]byte(parts[i+1]))
		}
		mw.Close()
		return b.Bytes()
	}
	recipe := `{"name":"demo","base":"python","steps":[{"copy":{"src":"lib","dest":"/opt/lib"}}]}`
	const mpType = "multipart/form-data; boundary=B"
	for _, s := range []struct {
		ctype, query string
		body         []byte
	}{
		{"application/json", "", []byte(recipe)},
		{"application/yaml", "", []byte("name: demo\nbase: python\nsteps:\n  - run: echo hi\n")},
		{"text/yaml; charset=utf-8", "name=x", []byte("name: demo\nbase: python\n")},
		{"application/json", "", []byte(`{"name":"demo"}`)},
		{mpType, "", mp("recipe", recipe, "context", string(tarOf("lib/a.py", "print(1)\n")))},
		{mpType, "", mp("context", string(tarOf("lib/a.py", "x")), "recipe", recipe)},
		{mpType, "", mp("recipe", recipe, "recipe", recipe)},
		{mpType, "", mp("recipe", recipe, "other", "x")},
		{mpType, "", mp("context", "not a tar")},
		{mpType, "", mp("recipe", recipe, "context", "\x1f\x8bnot gzip")},
		{mpType, "", []byte("--B\r\nContent-Disposition: form-data; name=\"recipe\"\r\n\r\n" + recipe + "\r\n--B\r\nContent-Disposition: form-data; name=\"context\"\r\n\r\n" + string(tarOf("lib/a", "x"))[:700])},
		{mpType, "", []byte("--B\r\nContent-Disposition: form-data; name=\"context\"\r\n\r\n" + strings.Repeat("z", 9000))},
		{"multipart/form-data", "", []byte("--\r\n")},
		{"application/x-tar", "name=imported", tarOf("manifest.json", "[]")},
		{"application/x-tar", "", tarOf("a", "b")},
		{"application/octet-stream", "name=BAD NAME", []byte("x")},
		{"application/vnd.oci.image.layout.v1+tar", "name=x", []byte("\x1f\x8b\x08\x00junk")},
		{"text/plain", "", []byte("x")},
		{"", "", []byte("x")},
		{"application/json; charset", "", []byte("{}")},
	} {
		f.Add(s.ctype, s.query, s.body)
	}
	fs := newFuzzServer(f, Config{MaxUploadBytes: 8 << 10})
	f.Fuzz(func(t *testing.T, ctype, rawQuery string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/v1/images", bytes.NewReader(body))
		r.URL.RawQuery = rawQuery
		if ctype != "" {
			r.Header.Set("Content-Type", ctype)
		}
		mt, _, _ := mime.ParseMediaType(ctype)
		if fs.builder.images == nil && slices.Contains(archiveTypes, mt) {
			t.Skip("imports need root")
		}
		fs.builder.last = nil
		w := fs.do(r)
		switch w.Code {
		case http.StatusCreated:
			var img api.Image
			if err := json.Unmarshal(w.Body.Bytes(), &img); err != nil || img.Name == "" {
				t.Fatalf("201 answer %q: %v", w.Body.Bytes(), err)
			}
			if slices.Contains(recipeTypes, mt) {
				want, err := build.ParseRecipe(body)
				if err != nil || fs.builder.last == nil || fs.builder.last.Name != want.Name || len(fs.builder.last.Steps) != len(want.Steps) {
					t.Fatalf("built %+v from the body %q (%v)", fs.builder.last, body, err)
				}
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			errorCode(t, w)
		default:
			t.Fatalf("POST /v1/images %q ?%s (%d bytes %q): %d %s", ctype, rawQuery, len(body), body[:min(len(body), 512)], w.Code, w.Body.Bytes())
		}
	})
}

// tarWriter returns a function that appends a file to the tar stream in b
// (without the end-of-archive marker, which tar readers do not need).
func tarWriter(b *bytes.Buffer) func(name, body string) {
	return func(name, body string) {
		hdr := make([]byte, 512)
		copy(hdr, name)
		copy(hdr[100:], "0000644\x00")
		copy(hdr[108:], "0000000\x00")
		copy(hdr[116:], "0000000\x00")
		copy(hdr[124:], fmt.Sprintf("%011o\x00", len(body)))
		copy(hdr[136:], "00000000000\x00")
		hdr[156] = '0'
		copy(hdr[257:], "ustar\x0000")
		copy(hdr[148:], "        ")
		sum := 0
		for _, c := range hdr {
			sum += int(c)
		}
		copy(hdr[148:], fmt.Sprintf("%06o\x00 ", sum))
		b.Write(hdr)
		b.WriteString(body)
		b.Write(make([]byte, (512-len(body)%512)%512))
	}
}

// FuzzUploadFile posts any multipart body to POST /v1/files (the chat's CSV
// uploads). It checks that the answer is 201 with the file, or an API error
// of 400, 404 (an unknown conversation) or 413, never a panic or a 500.
func FuzzUploadFile(f *testing.F) {
	const mpType = "multipart/form-data; boundary=B"
	part := func(name, filename, body string) string {
		cd := `form-data; name="` + name + `"`
		if filename != "" {
			cd += `; filename="` + filename + `"`
		}
		return "--B\r\nContent-Disposition: " + cd + "\r\n\r\n" + body + "\r\n"
	}
	for _, s := range []struct{ ctype, body string }{
		{mpType, part("file", "data.csv", "a,b\n1,2\n") + "--B--\r\n"},
		{mpType, part("conversation_id", "", "conv_missing") + part("file", "data.csv", "a,b\n1,2\n") + "--B--\r\n"},
		{mpType, part("file", "data.txt", "a,b\n") + "--B--\r\n"},
		{mpType, part("file", "", "a,b\n") + "--B--\r\n"},
		{mpType, part("file", "x.csv", "\x00\x01") + "--B--\r\n"},
		{mpType, part("file", "x.csv", "a,\"b\n1,2") + "--B--\r\n"},
		{mpType, part("other", "", "x") + "--B--\r\n"},
		{mpType, part("file", "big.csv", "a\n"+strings.Repeat("1\n", 3000)) + "--B--\r\n"},
		{"multipart/form-data", "--\r\n"},
		{"text/csv", "a,b\n"},
	} {
		f.Add(s.ctype, []byte(s.body))
	}
	fs := newFuzzServer(f, Config{})
	svc, err := analyst.New(fs.st, fs.s.mgr, analyst.Config{UploadsDir: filepath.Join(f.TempDir(), "uploads"), MaxUploadBytes: 4096,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	fs.s.cfg.Chat = svc
	f.Fuzz(func(t *testing.T, ctype string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/v1/files", bytes.NewReader(body))
		r.Header.Set("Content-Type", ctype)
		w := fs.do(r)
		switch w.Code {
		case http.StatusCreated:
			var up api.UploadedFile
			if err := json.Unmarshal(w.Body.Bytes(), &up); err != nil || up.ID == "" || up.SizeBytes > 4096 {
				t.Fatalf("201 answer %q: %v", w.Body.Bytes(), err)
			}
		case http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge:
			errorCode(t, w)
		default:
			t.Fatalf("POST /v1/files %q %q: %d %s", ctype, body, w.Code, w.Body.Bytes())
		}
	})
}
