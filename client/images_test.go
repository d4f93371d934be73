package client

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// TestOpenAPIImages pins the image endpoints, their content types, statuses
// and build events to the document.
func TestOpenAPIImages(t *testing.T) {
	raw, _ := loadOpenAPI(t)
	esc := func(p string) string { return strings.ReplaceAll(p, "/", "~1") }
	for op, codes := range map[string][]string{
		"POST /v1/images":          {"200", "201", "400", "404", "409", "413", "503"},
		"GET /v1/images":           {"200"},
		"GET /v1/images/{name}":    {"200", "404"},
		"DELETE /v1/images/{name}": {"204", "404", "409"},
	} {
		method, path, _ := strings.Cut(op, " ")
		for _, code := range codes {
			if resolve(raw, "#/paths/"+esc(path)+"/"+strings.ToLower(method)+"/responses/"+code) == nil {
				t.Errorf("%s: no %s answer", op, code)
			}
		}
	}
	content, _ := resolve(raw, "#/paths/~1v1~1images/post/requestBody/content").(map[string]any)
	var types []string
	for mt := range content {
		types = append(types, mt)
	}
	want := []string{"application/json", "application/octet-stream", "application/vnd.oci.image.layout.v1+tar", "application/x-tar",
		"application/x-yaml", "application/yaml", "multipart/form-data", "text/yaml"}
	if !sameSet(types, want) {
		t.Errorf("POST /v1/images content types = %q, want %q", types, want)
	}
	for _, mt := range []string{"application/json", "application/yaml", "text/yaml", "application/x-yaml"} {
		if got := resolve(raw, "#/paths/~1v1~1images/post/requestBody/content/"+esc(mt)+"/schema/$ref"); got != "#/components/schemas/Recipe" {
			t.Errorf("%s body schema = %v, want Recipe", mt, got)
		}
	}
	events, _ := resolve(raw, "#/paths/~1v1~1images/post/responses/200/content/text~1event-stream/x-sse-events").(map[string]any)
	got := map[string]string{}
	for name, v := range events {
		ref, _ := v.(map[string]any)["$ref"].(string)
		got[name] = strings.TrimPrefix(ref, "#/components/schemas/")
	}
	wantEvents := map[string]string{string(api.BuildEventStep): "BuildEvent", string(api.BuildEventLog): "BuildEvent", string(api.BuildEventDone): "BuildEvent", string(api.BuildEventError): "ErrorBody"}
	if !reflect.DeepEqual(got, wantEvents) {
		t.Errorf("POST /v1/images x-sse-events = %v, want %v", got, wantEvents)
	}
	if got := resolve(raw, "#/components/schemas/BuildEvent/properties/type/enum"); !reflect.DeepEqual(got,
		enum(api.BuildEventStep, api.BuildEventLog, api.BuildEventDone, api.BuildEventError)) {
		t.Errorf("BuildEvent.type enum = %v", got)
	}
	for _, ref := range []string{"/v1/images/post/responses/201", "/v1/images/get/responses/200", "/v1/images/{name}/get/responses/200"} {
		path, rest, _ := strings.Cut(ref, "/get/")
		method := "get"
		if rest == "" {
			path, rest, _ = strings.Cut(ref, "/post/")
			method = "post"
		}
		full := "#/paths/" + esc(path) + "/" + method + "/" + rest + "/content/application~1json/schema/$ref"
		if got := resolve(raw, full); got != "#/components/schemas/Image" && got != "#/components/schemas/ImageList" {
			t.Errorf("%s: schema %v", ref, got)
		}
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, s := range a {
		m[s] = true
	}
	for _, s := range b {
		if !m[s] {
			return false
		}
	}
	return true
}

var testImage = api.Image{Name: "py", ID: "sha256:abc", Base: "debian:bookworm", Layers: []string{"sha256:l1", "sha256:l2"},
	Env: []string{"PATH=/usr/bin"}, WorkDir: "/workspace", UID: 1000, GID: 1000, SizeBytes: 400 << 20,
	CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}

// sseWriter writes the daemon's event stream in tests.
type sseWriter struct {
	w http.ResponseWriter
}

func startSSE(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	return &sseWriter{w}
}

func (s *sseWriter) event(name string, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, b)
	s.w.(http.Flusher).Flush()
}

func (s *sseWriter) raw(text string) {
	io.WriteString(s.w, text)
	s.w.(http.Flusher).Flush()
}

// buildEvents is a short successful build log.
func buildEvents(s *sseWriter) {
	s.event("step", api.BuildEvent{Type: "step", Step: 0, Total: 2, Kind: "base", Detail: "debian:bookworm", Cached: true})
	s.event("step", api.BuildEvent{Type: "step", Step: 1, Total: 2, Kind: "run", Detail: "apt-get install -y python3"})
	s.raw(": keepalive\n\n")
	s.event("log", api.BuildEvent{Type: "log", Step: 1, Total: 2, Line: "Setting up python3"})
	s.event("step", api.BuildEvent{Type: "step", Step: 2, Total: 2, Kind: "env", Detail: "A=1"})
	img := testImage
	s.event("done", api.BuildEvent{Type: "done", Image: &img})
}

func TestBuildImageJSON(t *testing.T) {
	var got struct {
		ct, accept string
		body       map[string]any
	}
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/images" {
			writeErr(w, errdefs.NotFound("no route"))
			return
		}
		got.ct, got.accept = r.Header.Get("Content-Type"), r.Header.Get("Accept")
		json.NewDecoder(r.Body).Decode(&got.body)
		buildEvents(startSSE(w))
	})
	var events []api.BuildEvent
	img, err := c.BuildImage(context.Background(), api.Recipe{Name: "py", Base: "debian:bookworm"}, "", func(ev api.BuildEvent) {
		events = append(events, ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*img, testImage) {
		t.Errorf("image = %+v, want %+v", *img, testImage)
	}
	if got.ct != "application/json" || got.accept != "text/event-stream" {
		t.Errorf("Content-Type %q, Accept %q", got.ct, got.accept)
	}
	if steps, ok := got.body["steps"].([]any); !ok || len(steps) != 0 {
		t.Errorf("steps sent as %v, want []", got.body["steps"])
	}
	var kinds []string
	for _, ev := range events {
		kinds = append(kinds, string(ev.Type)+":"+ev.Kind+ev.Line)
	}
	want := []string{"step:base", "step:run", "log:Setting up python3", "step:env", "done:"}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("events %q, want %q", kinds, want)
	}
	if !events[0].Cached || events[1].Detail != "apt-get install -y python3" || events[4].Image == nil {
		t.Errorf("events lost fields: %+v", events)
	}
	// onEvent may be nil.
	if _, err := c.BuildImage(context.Background(), api.Recipe{Name: "py", Base: "debian:bookworm"}, "", nil); err != nil {
		t.Fatal(err)
	}
}

// readBuildUpload reads a multipart build the way the daemon does: the
// recipe part and the context tar's entries.
func readBuildUpload(t *testing.T, r *http.Request) (recipe, recipeType string, entries map[string]string) {
	t.Helper()
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		t.Errorf("Content-Type = %q", r.Header.Get("Content-Type"))
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Errorf("NextPart: %v", err)
			return
		}
		switch p.FormName() {
		case "recipe":
			b, _ := io.ReadAll(p)
			recipe, recipeType = string(b), p.Header.Get("Content-Type")
		case "context":
			entries = map[string]string{}
			tr := tar.NewReader(p)
			for {
				h, err := tr.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Errorf("context tar: %v", err)
					return
				}
				b, _ := io.ReadAll(tr)
				switch h.Typeflag {
				case tar.TypeDir:
					entries[h.Name] = "dir"
				case tar.TypeSymlink:
					entries[h.Name] = "-> " + h.Linkname
				default:
					entries[h.Name] = fmt.Sprintf("%s %o", b, h.Mode&0o777)
				}
				if h.Uid != 0 || h.Uname != "" {
					t.Errorf("%s: owner %d %q sent", h.Name, h.Uid, h.Uname)
				}
			}
		default:
			t.Errorf("unexpected part %q", p.FormName())
		}
	}
}

func makeContextDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "app", "pkg"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "app", "main.py"), []byte("print(1)"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "app", "pkg", "run.sh"), []byte("#!/bin/sh"), 0o755))
	must(os.Symlink("main.py", filepath.Join(dir, "app", "link.py")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644)) // skipped
	return dir
}

func TestBuildImageWithContext(t *testing.T) {
	dir := makeContextDir(t)
	var (
		recipe, recipeType string
		entries            map[string]string
	)
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		recipe, recipeType, entries = readBuildUpload(t, r)
		buildEvents(startSSE(w))
	})
	r := api.Recipe{Name: "py", Base: "python", Steps: []api.RecipeStep{{Copy: &api.CopyStep{Src: "app", Dest: "/opt/app"}}}}
	img, err := c.BuildImage(context.Background(), r, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != "py" {
		t.Errorf("image %+v", img)
	}
	var sent api.Recipe
	if err := json.Unmarshal([]byte(recipe), &sent); err != nil || !reflect.DeepEqual(sent, r) || recipeType != "application/json" {
		t.Errorf("recipe part %q (%s): %v", recipe, recipeType, err)
	}
	want := map[string]string{
		"app/": "dir", "app/main.py": "print(1) 644", "app/link.py": "-> main.py",
		"app/pkg/": "dir", "app/pkg/run.sh": "#!/bin/sh 755",
	}
	if !reflect.DeepEqual(entries, want) {
		t.Errorf("context entries %v, want %v", entries, want)
	}

	// YAML goes as written.
	yaml := "name: py\nbase: python\nsteps:\n  - copy: {src: app, dest: /opt/app}\n"
	if _, err := c.BuildImageYAML(context.Background(), []byte(yaml), dir, nil); err != nil {
		t.Fatal(err)
	}
	if recipe != yaml || recipeType != "application/yaml" || len(entries) != 5 {
		t.Errorf("YAML recipe part %q (%s), %d entries", recipe, recipeType, len(entries))
	}
	// Without a context there is no context part.
	if _, err := c.BuildImageYAML(context.Background(), []byte("name: x\nbase: python\n"), "", nil); err != nil {
		t.Fatal(err)
	}
	if recipe != "name: x\nbase: python\n" || entries != nil {
		t.Errorf("recipe %q, entries %v", recipe, entries)
	}

	if _, err := c.BuildImage(context.Background(), r, filepath.Join(dir, "nope"), nil); err == nil || !strings.Contains(err.Error(), "build context") {
		t.Errorf("missing context dir: %v", err)
	}
	if _, err := c.BuildImage(context.Background(), r, filepath.Join(dir, "app", "main.py"), nil); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file as context dir: %v", err)
	}
}

func TestBuildImageErrors(t *testing.T) {
	var mode string
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch mode {
		case "refused":
			writeErr(w, errdefs.Conflict(`cannot replace image "py": in use by sandbox sbx_1`))
		case "step fails":
			s := startSSE(w)
			s.event("step", api.BuildEvent{Type: "step", Step: 1, Total: 1, Kind: "run", Detail: "false"})
			s.event("error", api.ErrorBody{Code: "invalid_argument", Message: "step 1/1 (run): exit status 1"})
		case "cut":
			s := startSSE(w)
			s.event("step", api.BuildEvent{Type: "step", Step: 1, Total: 1, Kind: "run", Detail: "sleep 1"})
		case "no sse":
			writeJSON(w, 201, testImage)
		case "done without image":
			startSSE(w).event("done", api.BuildEvent{Type: "done"})
		}
	})
	ctx := context.Background()
	r := api.Recipe{Name: "py", Base: "debian:bookworm"}

	mode = "refused"
	_, err := c.BuildImage(ctx, r, "", nil)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 409 || !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("refused: %v", err)
	}

	mode = "step fails"
	var events int
	_, err = c.BuildImage(ctx, r, "", func(api.BuildEvent) { events++ })
	if !errors.As(err, &ae) || ae.Status != 400 || !errors.Is(err, ErrInvalidArgument) || err.Error() != "step 1/1 (run): exit status 1" || events != 1 {
		t.Errorf("step fails: %v (%d events)", err, events)
	}

	mode = "cut"
	if _, err = c.BuildImage(ctx, r, "", nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut stream: %v", err)
	}

	mode = "no sse"
	if img, err := c.BuildImage(ctx, r, "", nil); err != nil || img.ID != testImage.ID {
		t.Errorf("JSON answer: %+v, %v", img, err)
	}

	mode = "done without image"
	if _, err = c.BuildImage(ctx, r, "", nil); err == nil {
		t.Errorf("done without image: no error")
	}
}

// A daemon that refuses a build before reading its (large) context gets the
// refusal to the caller, and the context's writer stops.
func TestBuildImageRefusedEarly(t *testing.T) {
	dir := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB: more than the pipes hold
	if err := os.WriteFile(filepath.Join(dir, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, errdefs.InvalidArgument("recipe: name is required"))
	})
	done := make(chan error, 1)
	go func() {
		_, err := c.BuildImageYAML(context.Background(), []byte("base: python\n"), dir, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "name is required") {
			t.Errorf("err = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("BuildImageYAML hangs after an early refusal")
	}
}

func TestBuildImageCancel(t *testing.T) {
	started := make(chan struct{})
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		s := startSSE(w)
		s.event("step", api.BuildEvent{Type: "step", Step: 1, Total: 1, Kind: "run", Detail: "sleep 600"})
		close(started)
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	if _, err := c.BuildImage(ctx, api.Recipe{Name: "py", Base: "python"}, "", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestImportImage(t *testing.T) {
	var (
		mu   sync.Mutex
		got  []string
		body []byte
	)
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, fmt.Sprintf("%s %s?%s %s %s %d", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), r.Header.Get("Accept"), r.ContentLength))
		body = b
		mu.Unlock()
		if r.URL.Query().Get("name") == "bad name" {
			writeErr(w, errdefs.InvalidArgument("image name %q is invalid", "bad name"))
			return
		}
		s := startSSE(w)
		s.event("step", api.BuildEvent{Type: "step", Kind: "import", Detail: "py"})
		s.event("log", api.BuildEvent{Type: "log", Line: "layer 1/2: 12.0 MiB"})
		img := testImage
		img.Base = "oci"
		s.event("done", api.BuildEvent{Type: "done", Image: &img})
	})
	var lines []string
	img, err := c.ImportImage(context.Background(), "py", bytes.NewReader([]byte("tar bytes")), func(ev api.BuildEvent) {
		if ev.Type == api.BuildEventLog {
			lines = append(lines, ev.Line)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if img.Base != "oci" || !reflect.DeepEqual(lines, []string{"layer 1/2: 12.0 MiB"}) {
		t.Errorf("image %+v, lines %q", img, lines)
	}
	if want := "POST /v1/images?name=py application/x-tar text/event-stream 9"; len(got) != 1 || got[0] != want || string(body) != "tar bytes" {
		t.Errorf("request %q (body %q), want %q", got, body, want)
	}
	// A reader of unknown length goes chunked.
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte("streamed")); pw.Close() }()
	if _, err := c.ImportImage(context.Background(), "py", pr, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got[1], " -1") || string(body) != "streamed" {
		t.Errorf("streamed import: %q body %q", got[1], body)
	}
	if _, err := c.ImportImage(context.Background(), "bad name", strings.NewReader("x"), nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad name: %v", err)
	}
	if !strings.Contains(got[2], "name=bad+name") {
		t.Errorf("name not escaped: %q", got[2])
	}
}

func TestImageCalls(t *testing.T) {
	var seen []string
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.EscapedPath()
		seen = append(seen, key)
		switch key {
		case "GET /v1/images":
			writeJSON(w, 200, api.ImageList{Images: []api.Image{testImage}})
		case "GET /v1/images/py":
			writeJSON(w, 200, testImage)
		case "DELETE /v1/images/py":
			w.WriteHeader(204)
		case "DELETE /v1/images/busy":
			writeErr(w, errdefs.Conflict(`cannot delete image "busy": in use by sandbox sbx_1`))
		default:
			writeErr(w, errdefs.NotFound("image %q not found", strings.TrimPrefix(r.URL.Path, "/v1/images/")))
		}
	})
	ctx := context.Background()
	list, err := c.ListImages(ctx)
	if err != nil || len(list) != 1 || !reflect.DeepEqual(list[0], testImage) {
		t.Fatalf("ListImages = %+v, %v", list, err)
	}
	img, err := c.GetImage(ctx, "py")
	if err != nil || img.ID != testImage.ID {
		t.Fatalf("GetImage = %+v, %v", img, err)
	}
	if _, err := c.GetImage(ctx, "a/b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetImage(a/b): %v", err)
	}
	if err := c.DeleteImage(ctx, "py"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteImage(ctx, "busy"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "sbx_1") {
		t.Errorf("DeleteImage(busy): %v", err)
	}
	want := []string{"GET /v1/images", "GET /v1/images/py", "GET /v1/images/a%2Fb", "DELETE /v1/images/py", "DELETE /v1/images/busy"}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("requests %q, want %q", seen, want)
	}
}

func TestTarDir(t *testing.T) {
	dir := makeContextDir(t)
	var a, b bytes.Buffer
	if err := TarDir(&a, dir); err != nil {
		t.Fatal(err)
	}
	// A symbolic link to the directory is the directory.
	link := filepath.Join(t.TempDir(), "ctx")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := TarDir(&b, link); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("the same tree gave different tars")
	}
	var names []string
	tr := tar.NewReader(&a)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	want := []string{"app/", "app/link.py", "app/main.py", "app/pkg/", "app/pkg/run.sh"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
	if err := TarDir(io.Discard, filepath.Join(dir, "nope")); err == nil {
		t.Errorf("missing dir: no error")
	}
}
