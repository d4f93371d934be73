package httpapi

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/sandbox/sandboxtest"
	sseread "github.com/forkbox/forkbox/internal/sse" // httpapi has its own sse, the writer
	"github.com/forkbox/forkbox/internal/store"
)

// The image tests run the real handlers over a real Manager (and its SQLite
// store) whose image store and builder are fakes.

// fakeImages is an image store in memory.
type fakeImages struct {
	mu   sync.Mutex
	imgs map[string]*image.Image
}

func (f *fakeImages) Get(_ context.Context, name string) (*image.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	img, ok := f.imgs[name]
	if !ok {
		return nil, errdefs.NotFound("image %q not found", name)
	}
	c := *img
	return &c, nil
}

func (f *fakeImages) List(context.Context) ([]*image.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*image.Image
	for _, img := range f.imgs {
		c := *img
		out = append(out, &c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *fakeImages) Remove(_ context.Context, name string, inUse func(*image.Image) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	img, ok := f.imgs[name]
	if !ok {
		return errdefs.NotFound("image %q not found", name)
	}
	if err := inUse(img); err != nil {
		return err
	}
	delete(f.imgs, name)
	return nil
}

func (f *fakeImages) put(img *image.Image, replace func(*image.Image) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.imgs[img.Name]; ok {
		if err := replace(old); err != nil {
			return err
		}
	}
	f.imgs[img.Name] = img
	return nil
}

// fakeBuilder builds by recipe name: "bad-early" fails before any event,
// "bad-step" fails after a step's output, "silent" waits for release (or
// the request's end) before its first event, anything else succeeds. It
// reads the build context (a tar) and the import archive whole.
type fakeBuilder struct {
	images  *fakeImages
	release chan struct{}

	mu       sync.Mutex
	recipe   *api.Recipe
	entries  map[string]string // of the last build context; nil: none
	imported string            // name and archive of the last import
	ctxErr   error             // the build's context's error when it returned
}

func readTarEntries(r io.Reader) (map[string]string, error) {
	entries := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries, nil
		}
		if err != nil {
			return nil, err
		}
		b, _ := io.ReadAll(tr)
		entries[h.Name] = string(b)
	}
}

func (b *fakeBuilder) Build(ctx context.Context, r *api.Recipe, buildContext io.Reader, replace func(*image.Image) error, emit func(api.BuildEvent)) (*image.Image, error) {
	if r.Name == "bad-early" { // before reading the context
		return nil, errdefs.NotFound("base image %q not found", r.Base)
	}
	var entries map[string]string
	if buildContext != nil {
		var err error
		if entries, err = readTarEntries(buildContext); err != nil {
			return nil, errdefs.InvalidArgument("build context: %v", err)
		}
	}
	b.mu.Lock()
	b.recipe, b.entries = r, entries
	b.mu.Unlock()
	total := len(r.Steps)
	switch r.Name {
	case "silent":
		select {
		case <-b.release:
		case <-ctx.Done():
			b.mu.Lock()
			b.ctxErr = ctx.Err()
			b.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	emit(api.BuildEvent{Type: api.BuildEventStep, Step: 0, Total: total, Kind: "base", Detail: r.Base, Cached: true})
	for i, st := range r.Steps {
		emit(api.BuildEvent{Type: api.BuildEventStep, Step: i + 1, Total: total, Kind: "run", Detail: st.Run})
		emit(api.BuildEvent{Type: api.BuildEventLog, Step: i + 1, Total: total, Line: "output of " + st.Run})
	}
	if r.Name == "bad-step" {
		return nil, errdefs.InvalidArgument("step %d/%d (run): exit status 2:\noutput of %s", total, total, r.Steps[total-1].Run)
	}
	emit(api.BuildEvent{Type: api.BuildEventDone}) // the handler sends its own
	img := &image.Image{Name: r.Name, ID: "sha256:" + r.Name, Base: r.Base, Layers: []string{"sha256:l1"}, Env: []string{"A=1"},
		WorkDir: "/workspace", UID: 1000, GID: 1000, SizeBytes: 4096, CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := b.images.put(img, replace); err != nil {
		return nil, err
	}
	return img, nil
}

func (b *fakeBuilder) Import(ctx context.Context, name string, archive io.Reader, replace func(*image.Image) error, emit func(api.BuildEvent)) (*image.Image, error) {
	if name == "refused" { // without reading the archive
		return nil, errdefs.InvalidArgument("not an image archive")
	}
	// Report before reading: the body must still be there afterwards.
	emit(api.BuildEvent{Type: api.BuildEventStep, Kind: "import", Detail: name})
	data, err := io.ReadAll(archive)
	if err != nil {
		return nil, errdefs.InvalidArgument("reading the archive: %v", err)
	}
	emit(api.BuildEvent{Type: api.BuildEventLog, Line: fmt.Sprintf("read %d bytes", len(data))})
	b.mu.Lock()
	b.imported = name + ":" + string(data[:min(len(data), 16)])
	b.mu.Unlock()
	img := &image.Image{Name: name, ID: "sha256:" + name, Base: "oci", Layers: []string{"sha256:o1"}, SizeBytes: int64(len(data))}
	if err := b.images.put(img, replace); err != nil {
		return nil, err
	}
	return img, nil
}

type imageEnv struct {
	url     string
	images  *fakeImages
	builder *fakeBuilder
	store   *store.SQLite
}

func newImageServer(t *testing.T, cfg Config, withBuilder bool) *imageEnv {
	t.Helper()
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "forkbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	images := &fakeImages{imgs: map[string]*image.Image{
		"host": {Name: "host", ID: "sha256:host", Base: "host", CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
	}}
	mgr := sandbox.New(st, sandboxtest.NoRuntime{}, images, nil, sandbox.DefaultDefaults, nil)
	env := &imageEnv{images: images, store: st}
	if withBuilder {
		env.builder = &fakeBuilder{images: images, release: make(chan struct{})}
		mgr.SetImageBuilder(env.builder)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(cfg, mgr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(s.Handler())
	var serverLog lockedBuffer
	srv.Config.ErrorLog = log.New(&serverLog, "", 0)
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		if strings.Contains(serverLog.String(), "panic") {
			t.Errorf("the HTTP server panicked:\n%s", serverLog.String())
		}
	})
	env.url = srv.URL
	return env
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type answer struct {
	status int
	ctype  string
	body   []byte
}

func (a answer) errBody(t *testing.T) api.ErrorBody {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(a.body, &e); err != nil {
		t.Fatalf("error answer %d %q: %v", a.status, a.body, err)
	}
	return e.Error
}

// sseEvent is one event of a build stream, with its data decoded.
type sseEvent struct {
	name string
	ev   api.BuildEvent
	err  api.ErrorBody
}

func (a answer) events(t *testing.T) (events []sseEvent, comments int) {
	t.Helper()
	if !strings.HasPrefix(a.ctype, "text/event-stream") {
		t.Fatalf("answer %d %s %q is not an event stream", a.status, a.ctype, a.body)
	}
	evs, err := sseread.ReadAll(bytes.NewReader(a.body))
	if err != nil {
		t.Fatalf("reading the event stream: %v", err)
	}
	for _, ev := range evs {
		e := sseEvent{name: ev.Name}
		var err error
		if ev.Name == string(api.BuildEventError) {
			err = json.Unmarshal(ev.Data, &e.err)
		} else {
			err = json.Unmarshal(ev.Data, &e.ev)
		}
		if err != nil {
			t.Fatalf("event %s data %q: %v", ev.Name, ev.Data, err)
		}
		events = append(events, e)
	}
	// The reader skips comments (the stream's keepalives): count them here.
	for _, line := range strings.Split(string(a.body), "\n") {
		if strings.HasPrefix(line, ":") {
			comments++
		}
	}
	return events, comments
}

func (env *imageEnv) do(t *testing.T, method, path, ctype string, sse bool, body io.Reader) answer {
	t.Helper()
	req, err := http.NewRequest(method, env.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if sse {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), b}
}

const yamlRecipe = `name: py
base: debian:bookworm
steps:
  - run: apt-get install -y python3
  - run: pip install numpy
`

func TestBuildImageRecipeBodies(t *testing.T) {
	env := newImageServer(t, Config{}, true)

	// JSON, no SSE: 201 with the image.
	a := env.do(t, "POST", "/v1/images", "application/json", false,
		strings.NewReader(`{"name":"py","base":"debian:bookworm","steps":[{"run":"true"}]}`))
	if a.status != 201 {
		t.Fatalf("JSON build: %d %s", a.status, a.body)
	}
	var img api.Image
	if err := json.Unmarshal(a.body, &img); err != nil || img.Name != "py" || img.ID != "sha256:py" || img.WorkDir != "/workspace" {
		t.Fatalf("image %s: %v", a.body, err)
	}
	if env.builder.entries != nil {
		t.Errorf("a JSON build got a build context")
	}

	// YAML, every accepted type, with SSE.
	for _, ct := range []string{"application/yaml", "text/yaml", "application/x-yaml; charset=utf-8"} {
		a := env.do(t, "POST", "/v1/images", ct, true, strings.NewReader(yamlRecipe))
		if a.status != 200 {
			t.Fatalf("%s: %d %s", ct, a.status, a.body)
		}
		events, _ := a.events(t)
		var got []string
		for _, e := range events {
			got = append(got, fmt.Sprintf("%s %s %d/%d %s%s", e.name, e.ev.Type, e.ev.Step, e.ev.Total, e.ev.Kind, e.ev.Line))
		}
		want := []string{
			"step step 0/2 base", "step step 1/2 run", "log log 1/2 output of apt-get install -y python3",
			"step step 2/2 run", "log log 2/2 output of pip install numpy", "done done 0/0 ",
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: events\n%s\nwant\n%s", ct, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if last := events[len(events)-1]; last.ev.Image == nil || last.ev.Image.Name != "py" || len(last.ev.Image.Layers) != 1 {
			t.Errorf("%s: done event %+v", ct, last.ev)
		}
		if !events[0].ev.Cached || events[1].ev.Detail != "apt-get install -y python3" {
			t.Errorf("%s: step events lost fields: %+v", ct, events[:2])
		}
	}
}

func TestBuildImageRefusals(t *testing.T) {
	env := newImageServer(t, Config{}, true)
	for _, tt := range []struct {
		name, ctype, path, body string
		status                  int
		code, msg               string
	}{
		{"no content type", "", "/v1/images", yamlRecipe, 400, "invalid_argument", "no Content-Type; send a recipe as application/json"},
		{"unknown type", "text/plain", "/v1/images", yamlRecipe, 400, "invalid_argument", `Content-Type "text/plain" is not accepted`},
		{"lists the types", "image/png", "/v1/images", "", 400, "invalid_argument", "application/vnd.oci.image.layout.v1+tar with ?name=NAME"},
		{"bad recipe", "application/yaml", "/v1/images", "name: x\nsteps: [{run: a, env: {A: b}}]\n", 400, "invalid_argument", "recipe step 1"},
		{"no base", "application/json", "/v1/images", `{"name":"x"}`, 400, "invalid_argument", "base is required"},
		{"unknown field", "application/json", "/v1/images", `{"name":"x","base":"y","bogus":1}`, 400, "invalid_argument", "bogus"},
		{"empty", "application/json", "/v1/images", ``, 400, "invalid_argument", "recipe is empty"},
		{"name on a build", "application/yaml", "/v1/images?name=other", yamlRecipe, 400, "invalid_argument", "a build takes its name from the recipe"},
		{"import without name", "application/x-tar", "/v1/images", "tar", 400, "invalid_argument", "?name=NAME"},
		{"builder refuses before any event", "application/json", "/v1/images", `{"name":"bad-early","base":"nope"}`, 404, "not_found", `base image "nope" not found`},
		{"too large", "application/yaml", "/v1/images", "name: x\nbase: y\n#" + strings.Repeat("x", maxRecipeBytes), 413, "too_large", "recipe is larger than 1048576 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// With SSE too: a call refused before any event is a plain answer.
			for _, sse := range []bool{false, true} {
				a := env.do(t, "POST", tt.path, tt.ctype, sse, strings.NewReader(tt.body))
				if a.status != tt.status || !strings.HasPrefix(a.ctype, "application/json") {
					t.Fatalf("sse=%v: %d %s %s, want %d", sse, a.status, a.ctype, a.body, tt.status)
				}
				if e := a.errBody(t); e.Code != tt.code || !strings.Contains(e.Message, tt.msg) {
					t.Errorf("sse=%v: %+v, want %s containing %q", sse, e, tt.code, tt.msg)
				}
			}
		})
	}
}

func TestBuildImageFailingStep(t *testing.T) {
	env := newImageServer(t, Config{}, true)
	recipe := `{"name":"bad-step","base":"debian:bookworm","steps":[{"run":"make"}]}`
	a := env.do(t, "POST", "/v1/images", "application/json", false, strings.NewReader(recipe))
	if a.status != 400 || !strings.Contains(a.errBody(t).Message, "exit status 2:\noutput of make") {
		t.Errorf("without SSE: %d %s", a.status, a.body)
	}
	a = env.do(t, "POST", "/v1/images", "application/json", true, strings.NewReader(recipe))
	events, _ := a.events(t)
	last := events[len(events)-1]
	if a.status != 200 || len(events) != 4 || last.name != "error" || last.err.Code != "invalid_argument" ||
		last.err.Message != "step 1/1 (run): exit status 2:\noutput of make" {
		t.Errorf("with SSE: %d, %d events, last %+v", a.status, len(events), last)
	}
}

func TestBuildImageReplaceInUse(t *testing.T) {
	env := newImageServer(t, Config{}, true)
	body := `{"name":"py","base":"debian:bookworm"}`
	if a := env.do(t, "POST", "/v1/images", "application/json", false, strings.NewReader(body)); a.status != 201 {
		t.Fatalf("first build: %d %s", a.status, a.body)
	}
	now := time.Now()
	if err := env.store.Create(context.Background(), &store.Sandbox{ID: "sbx_1", Name: "work", State: api.StateRunning, Image: "py",
		CreatedAt: now, LastActiveAt: now}); err != nil {
		t.Fatal(err)
	}
	a := env.do(t, "POST", "/v1/images", "application/json", false, strings.NewReader(body))
	if e := a.errBody(t); a.status != 409 || e.Code != "conflict" || !strings.Contains(e.Message, "sbx_1 (work)") {
		t.Errorf("rebuild of an image in use: %d %+v", a.status, e)
	}
	a = env.do(t, "DELETE", "/v1/images/py", "", false, nil)
	if e := a.errBody(t); a.status != 409 || !strings.Contains(e.Message, `cannot delete image "py": in use by sandbox sbx_1 (work)`) {
		t.Errorf("delete of an image in use: %d %+v", a.status, e)
	}
}

// multipartBody builds a multipart build request body from parts given as
// name, content pairs.
func multipartBody(t *testing.T, parts ...string) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i := 0; i < len(parts); i += 2 {
		var (
			w   io.Writer
			err error
		)
		if parts[i] == "context" {
			w, err = mw.CreateFormFile("context", "context.tar")
		} else {
			w, err = mw.CreateFormField(parts[i])
		}
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, parts[i+1])
	}
	mw.Close()
	return mw.FormDataContentType(), &buf
}

func tarOf(t *testing.T, files map[string]string, gz bool) string {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg})
		io.WriteString(tw, files[n])
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.String()
}

func TestBuildImageMultipart(t *testing.T) {
	env := newImageServer(t, Config{MaxUploadBytes: 64 << 10}, true)
	files := map[string]string{"app/main.py": "print(1)", "requirements.txt": "numpy\n"}
	recipe := "name: app\nbase: debian:bookworm\nsteps:\n  - copy: {src: app, dest: /opt/app}\n"
	for _, tt := range []struct {
		name  string
		parts []string
	}{
		{"recipe then context", []string{"recipe", recipe, "context", tarOf(t, files, false)}},
		{"context then recipe", []string{"context", tarOf(t, files, false), "recipe", recipe}},
		{"gzipped context", []string{"recipe", recipe, "context", tarOf(t, files, true)}},
	} {
		ct, body := multipartBody(t, tt.parts...)
		a := env.do(t, "POST", "/v1/images", ct, true, body)
		events, _ := a.events(t)
		if a.status != 200 || events[len(events)-1].name != "done" {
			t.Fatalf("%s: %d %s", tt.name, a.status, a.body)
		}
		if !reflect.DeepEqual(env.builder.entries, files) || env.builder.recipe.Steps[0].Copy.Dest != "/opt/app" {
			t.Errorf("%s: builder got %v, recipe %+v", tt.name, env.builder.entries, env.builder.recipe)
		}
	}

	// A recipe alone, JSON this time.
	ct, body := multipartBody(t, "recipe", `{"name":"py","base":"debian:bookworm"}`)
	if a := env.do(t, "POST", "/v1/images", ct, false, body); a.status != 201 || env.builder.entries != nil {
		t.Errorf("recipe alone: %d %s (context %v)", a.status, a.body, env.builder.entries)
	}

	for _, tt := range []struct {
		name   string
		parts  []string
		status int
		msg    string
	}{
		{"no recipe", []string{"context", tarOf(t, files, false)}, 400, "no recipe part"},
		{"unknown part", []string{"recipe", recipe, "file", "x"}, 400, `unknown part "file"`},
		{"two recipes", []string{"recipe", recipe, "recipe", recipe}, 400, "more than one recipe"},
		{"bad recipe", []string{"recipe", "name: [", "context", tarOf(t, files, false)}, 400, "recipe"},
		{"context too large", []string{"recipe", recipe, "context", tarOf(t, map[string]string{"big": strings.Repeat("x", 64<<10)}, false)}, 413, "build context is larger than the limit of 65536 bytes"},
		{"context too large, first", []string{"context", strings.Repeat("x", 64<<10+1), "recipe", recipe}, 413, "build context is larger than the limit of 65536 bytes"},
		{"body too large", []string{"recipe", recipe, "context", strings.Repeat("x", 2<<20)}, 413, "larger than"},
		{"not gzip after all", []string{"recipe", recipe, "context", "\x1f\x8bnot gzip"}, 400, "gzipped"},
	} {
		ct, body := multipartBody(t, tt.parts...)
		a := env.do(t, "POST", "/v1/images", ct, true, body)
		if e := a.errBody(t); a.status != tt.status || !strings.Contains(e.Message, tt.msg) {
			t.Errorf("%s: %d %+v, want %d with %q", tt.name, a.status, e, tt.status, tt.msg)
		}
	}
	a := env.do(t, "POST", "/v1/images", "multipart/form-data", false, strings.NewReader("x"))
	if a.status != 400 || !strings.Contains(a.errBody(t).Message, "boundary") {
		t.Errorf("no boundary: %d %s", a.status, a.body)
	}
}

func TestImportImage(t *testing.T) {
	env := newImageServer(t, Config{}, true)
	// Without full duplex, the server would swallow what is left of a
	// body under 256 KiB at the first event, and the importer would read a
	// truncated archive.
	archive := "docker-save-tar:" + strings.Repeat("L", 200<<10)
	for _, ct := range []string{"application/x-tar", "application/octet-stream", "application/vnd.oci.image.layout.v1+tar"} {
		a := env.do(t, "POST", "/v1/images?name=py312", ct, true, strings.NewReader(archive))
		events, _ := a.events(t)
		if a.status != 200 || len(events) != 3 {
			t.Fatalf("%s: %d, %d events: %s", ct, a.status, len(events), a.body[:min(len(a.body), 500)])
		}
		if events[0].ev.Kind != "import" || events[1].ev.Line != fmt.Sprintf("read %d bytes", len(archive)) ||
			events[2].ev.Image == nil || events[2].ev.Image.Base != "oci" {
			t.Errorf("%s: events %+v", ct, events)
		}
		if env.builder.imported != "py312:docker-save-tar:" {
			t.Errorf("%s: imported %q", ct, env.builder.imported)
		}
	}
	// A gzipped archive arrives decompressed; no SSE: 201.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, "oci-layout-tar")
	zw.Close()
	a := env.do(t, "POST", "/v1/images?name=gz", "application/x-tar", false, &gz)
	var img api.Image
	if json.Unmarshal(a.body, &img); a.status != 201 || img.Name != "gz" || env.builder.imported != "gz:oci-layout-tar" {
		t.Errorf("gzipped import: %d %s, imported %q", a.status, a.body, env.builder.imported)
	}
}

// Streamed bodies that the builder or importer leaves unread: the answer
// arrives, and the connection serves the next request (net/http's
// full-duplex mode must not trip over the rest of the body).
func TestImageBodiesLeftUnread(t *testing.T) {
	env := newImageServer(t, Config{}, true)
	recipe := `{"name":"bad-early","base":"nope","steps":[{"copy":{"src":"a","dest":"/a"}}]}`
	for _, size := range []int{100, 100 << 10, 1 << 20} {
		for _, sse := range []bool{false, true} {
			ct, body := multipartBody(t, "recipe", recipe, "context", tarOf(t, map[string]string{"a": strings.Repeat("x", size)}, false))
			if a := env.do(t, "POST", "/v1/images", ct, sse, body); a.status != 404 {
				t.Errorf("build, %d bytes, sse=%v: %d %s", size, sse, a.status, a.body)
			}
			if a := env.do(t, "POST", "/v1/images?name=refused", "application/x-tar", sse, strings.NewReader(strings.Repeat("x", size))); a.status != 400 {
				t.Errorf("import, %d bytes, sse=%v: %d %s", size, sse, a.status, a.body)
			}
			if a := env.do(t, "GET", "/v1/images", "", false, nil); a.status != 200 {
				t.Errorf("next request: %d %s", a.status, a.body)
			}
		}
	}
}

func TestImageListGetDelete(t *testing.T) {
	env := newImageServer(t, Config{}, true)
	env.images.imgs["py"] = &image.Image{Name: "py", ID: "sha256:py", Base: "debian:bookworm", Layers: []string{"a", "b"}, SizeBytes: 10}

	a := env.do(t, "GET", "/v1/images", "", false, nil)
	var list api.ImageList
	if err := json.Unmarshal(a.body, &list); err != nil || a.status != 200 || len(list.Images) != 2 ||
		list.Images[0].Name != "host" || list.Images[1].Name != "py" || len(list.Images[1].Layers) != 2 {
		t.Fatalf("list: %d %s", a.status, a.body)
	}
	// Empty lists are lists, not null.
	if !bytes.Contains(a.body, []byte(`"layers": []`)) || !bytes.Contains(a.body, []byte(`"env": []`)) {
		t.Errorf("host image's empty fields: %s", a.body)
	}
	a = env.do(t, "GET", "/v1/images/py", "", false, nil)
	var img api.Image
	if err := json.Unmarshal(a.body, &img); err != nil || a.status != 200 || img.ID != "sha256:py" {
		t.Errorf("get: %d %s", a.status, a.body)
	}
	if a = env.do(t, "GET", "/v1/images/nope", "", false, nil); a.status != 404 || a.errBody(t).Code != "not_found" {
		t.Errorf("get unknown: %d %s", a.status, a.body)
	}
	if a = env.do(t, "DELETE", "/v1/images/py", "", false, nil); a.status != 204 || len(a.body) != 0 {
		t.Errorf("delete: %d %s", a.status, a.body)
	}
	if a = env.do(t, "DELETE", "/v1/images/py", "", false, nil); a.status != 404 {
		t.Errorf("delete again: %d %s", a.status, a.body)
	}
	if _, ok := env.images.imgs["py"]; ok {
		t.Errorf("py still there")
	}
}

func TestImagesWithoutBuilder(t *testing.T) {
	env := newImageServer(t, Config{}, false)
	a := env.do(t, "POST", "/v1/images", "application/yaml", true, strings.NewReader(yamlRecipe))
	if e := a.errBody(t); a.status != 503 || e.Code != "unavailable" {
		t.Errorf("build without a builder: %d %+v", a.status, e)
	}
	a = env.do(t, "POST", "/v1/images?name=x", "application/x-tar", false, strings.NewReader("tar"))
	if a.status != 503 {
		t.Errorf("import without a builder: %d %s", a.status, a.body)
	}
	if a = env.do(t, "GET", "/v1/images", "", false, nil); a.status != 200 {
		t.Errorf("list without a builder: %d %s", a.status, a.body)
	}
}

func TestBuildImageKeepAlive(t *testing.T) {
	defer func(d time.Duration) { keepAliveInterval = d }(keepAliveInterval)
	keepAliveInterval = 10 * time.Millisecond
	env := newImageServer(t, Config{}, true)
	go func() {
		time.Sleep(100 * time.Millisecond)
		close(env.builder.release)
	}()
	a := env.do(t, "POST", "/v1/images", "application/json", true, strings.NewReader(`{"name":"silent","base":"debian:bookworm"}`))
	events, comments := a.events(t)
	if a.status != 200 || comments < 2 || events[len(events)-1].name != "done" {
		t.Errorf("silent build: %d, %d comments, events %+v", a.status, comments, events)
	}
	if !strings.HasPrefix(string(a.body), ": keepalive\n\n") {
		t.Errorf("stream does not start with a keep-alive: %q", a.body[:min(len(a.body), 80)])
	}
}

func TestBuildImageClientGone(t *testing.T) {
	env := newImageServer(t, Config{}, true)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", env.url+"/v1/images", strings.NewReader(`{"name":"silent","base":"debian:bookworm"}`))
	req.Header.Set("Content-Type", "application/json")
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("no error")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		env.builder.mu.Lock()
		err := env.builder.ctxErr
		env.builder.mu.Unlock()
		if errors.Is(err, context.Canceled) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build's context did not end with the request: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The Go client against the real handlers: a build with a context directory
// streamed as multipart, and an import.
func TestImagesThroughClient(t *testing.T) {
	env := newImageServer(t, Config{}, true)
	c := client.New(env.url)
	ctx := context.Background()

	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "app"), 0o755)
	os.WriteFile(filepath.Join(dir, "app", "main.py"), []byte("print(1)"), 0o644)
	var steps []api.BuildEventType
	img, err := c.BuildImage(ctx, api.Recipe{Name: "app", Base: "debian:bookworm", Steps: []api.RecipeStep{
		{Run: "true"}, {Copy: &api.CopyStep{Src: "app", Dest: "/opt/app"}},
	}}, dir, func(ev api.BuildEvent) { steps = append(steps, ev.Type) })
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != "app" || !reflect.DeepEqual(env.builder.entries, map[string]string{"app/": "", "app/main.py": "print(1)"}) {
		t.Errorf("image %+v, context %v", img, env.builder.entries)
	}
	if want := []api.BuildEventType{"step", "step", "log", "step", "log", "done"}; !reflect.DeepEqual(steps, want) {
		t.Errorf("events %q, want %q", steps, want)
	}

	_, err = c.BuildImageYAML(ctx, []byte("name: bad-step\nbase: debian:bookworm\nsteps:\n  - run: make\n"), "", nil)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "output of make") {
		t.Errorf("failing step through the client: %v", err)
	}
	if _, err := c.BuildImageYAML(ctx, []byte("base: x\n"), dir, nil); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("refused build: %v", err)
	}

	img, err = c.ImportImage(ctx, "py312", strings.NewReader("docker-save-tar"), nil)
	if err != nil || img.Base != "oci" || env.builder.imported != "py312:docker-save-tar" {
		t.Errorf("import: %+v %v (%q)", img, err, env.builder.imported)
	}
	list, err := c.ListImages(ctx)
	if err != nil || len(list) != 3 {
		t.Errorf("list: %+v %v", list, err)
	}
	if err := c.DeleteImage(ctx, "py312"); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := c.GetImage(ctx, "py312"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get deleted: %v", err)
	}
}
