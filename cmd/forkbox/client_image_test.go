package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/build"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// fakeImageDaemon speaks the image endpoints' wire format from memory: a
// build "runs" each step (a run step whose command contains "fail" fails),
// a layer is cached when an earlier build made the same step.
type fakeImageDaemon struct {
	mu       sync.Mutex
	images   map[string]api.Image
	cached   map[string]bool
	inUse    map[string]bool
	recipe   *api.Recipe       // of the last build
	context  map[string]string // tar entries of the last build context
	imported string            // name:content of the last import
	ctype    string            // Content-Type of the last import
}

func newFakeImageDaemon(t *testing.T) (*fakeImageDaemon, string) {
	d := &fakeImageDaemon{images: map[string]api.Image{
		"host": {Name: "host", ID: "sha256:0123456789abcdef0123", Base: "host", Layers: []string{}, CreatedAt: time.Now().Add(-50 * time.Hour)},
	}, cached: map[string]bool{}, inUse: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/images", d.create)
	mux.HandleFunc("GET /v1/images", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		list := api.ImageList{Images: []api.Image{}}
		for _, img := range d.images {
			list.Images = append(list.Images, img)
		}
		sort.Slice(list.Images, func(i, j int) bool { return list.Images[i].Name < list.Images[j].Name })
		reply(w, 200, list)
	})
	mux.HandleFunc("GET /v1/images/{name}", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		img, ok := d.images[r.PathValue("name")]
		if !ok {
			replyErr(w, errdefs.NotFound("image %q not found", r.PathValue("name")))
			return
		}
		reply(w, 200, img)
	})
	mux.HandleFunc("DELETE /v1/images/{name}", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		name := r.PathValue("name")
		switch _, ok := d.images[name]; {
		case !ok:
			replyErr(w, errdefs.NotFound("image %q not found", name))
		case d.inUse[name]:
			replyErr(w, errdefs.Conflict("cannot delete image %q: in use by sandbox sbx_1", name))
		default:
			delete(d.images, name)
			w.WriteHeader(204)
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return d, srv.URL
}

type fakeStream struct{ w http.ResponseWriter }

func (s fakeStream) send(event string, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b)
	s.w.(http.Flusher).Flush()
}

func (d *fakeImageDaemon) create(w http.ResponseWriter, r *http.Request) {
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var (
		recipe  []byte
		entries map[string]string
	)
	switch mt {
	case "application/json", "application/yaml":
		recipe, _ = io.ReadAll(r.Body)
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			if p.FormName() == "recipe" {
				recipe, _ = io.ReadAll(p)
				continue
			}
			entries = map[string]string{}
			tr := tar.NewReader(p)
			for {
				h, err := tr.Next()
				if err != nil {
					break
				}
				b, _ := io.ReadAll(tr)
				entries[h.Name] = string(b)
			}
		}
	case "application/x-tar":
		d.importImage(w, r)
		return
	default:
		replyErr(w, errdefs.InvalidArgument("Content-Type %q is not accepted", mt))
		return
	}
	rec, err := build.ParseRecipe(recipe)
	if err != nil {
		replyErr(w, err)
		return
	}
	d.mu.Lock()
	d.recipe, d.context = rec, entries
	if d.inUse[rec.Name] {
		d.mu.Unlock()
		replyErr(w, errdefs.Conflict("cannot replace image %q: in use by sandbox sbx_1", rec.Name))
		return
	}
	d.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	s := fakeStream{w}
	total := len(rec.Steps)
	s.send("step", api.BuildEvent{Type: "step", Step: 0, Total: total, Kind: "base", Detail: rec.Base, Cached: true})
	chain := rec.Base
	var layers []string
	for i, st := range rec.Steps {
		kind, detail := "run", st.Run
		switch {
		case st.Env != nil:
			kind, detail = "env", fmt.Sprint(st.Env)
		case st.Copy != nil:
			kind, detail = "copy", st.Copy.Src+" → "+st.Copy.Dest
			if _, ok := entries[st.Copy.Src]; !ok {
				s.send("error", api.ErrorBody{Code: "invalid_argument", Message: fmt.Sprintf("step %d/%d (copy): %s is not in the build context", i+1, total, st.Copy.Src)})
				return
			}
		}
		chain += "|" + kind + detail
		d.mu.Lock()
		cached := d.cached[chain]
		d.cached[chain] = true
		d.mu.Unlock()
		s.send("step", api.BuildEvent{Type: "step", Step: i + 1, Total: total, Kind: kind, Detail: detail, Cached: cached})
		if kind == "run" && !cached {
			if strings.Contains(st.Run, "slow") {
				time.Sleep(60 * time.Millisecond)
			}
			s.send("log", api.BuildEvent{Type: "log", Step: i + 1, Total: total, Line: "running " + st.Run + "\n"})
			if strings.Contains(st.Run, "fail") {
				d.mu.Lock()
				delete(d.cached, chain)
				d.mu.Unlock()
				s.send("error", api.ErrorBody{Code: "invalid_argument",
					Message: fmt.Sprintf("step %d/%d (run) failed: exit status 1:\nrunning %s", i+1, total, st.Run)})
				return
			}
		}
		if kind != "env" {
			layers = append(layers, fmt.Sprintf("sha256:layer%d", i+1))
		}
	}
	img := api.Image{Name: rec.Name, ID: "sha256:aaaabbbbccccddddeeee", Base: rec.Base, Layers: layers, Env: []string{},
		WorkDir: "/workspace", UID: 1000, GID: 1000, SizeBytes: 3 << 20, CreatedAt: time.Now()}
	d.mu.Lock()
	d.images[img.Name] = img
	d.mu.Unlock()
	s.send("done", api.BuildEvent{Type: "done", Image: &img})
}

func (d *fakeImageDaemon) importImage(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	b, _ := io.ReadAll(r.Body)
	d.mu.Lock()
	d.imported, d.ctype = name+":"+string(b), r.Header.Get("Content-Type")
	d.mu.Unlock()
	if name == "" {
		replyErr(w, errdefs.InvalidArgument("name: an import needs the image's name"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	s := fakeStream{w}
	s.send("step", api.BuildEvent{Type: "step", Kind: "import", Detail: name})
	s.send("log", api.BuildEvent{Type: "log", Line: fmt.Sprintf("read %d bytes", len(b))})
	img := api.Image{Name: name, ID: "sha256:99998888777766665555", Base: "oci", Layers: []string{"sha256:o1"}, Env: []string{},
		SizeBytes: int64(len(b)), CreatedAt: time.Now()}
	d.mu.Lock()
	d.images[name] = img
	d.mu.Unlock()
	s.send("done", api.BuildEvent{Type: "done", Image: &img})
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCLIImageBuild(t *testing.T) {
	d, url := newFakeImageDaemon(t)
	dir := t.TempDir()
	recipe := filepath.Join(dir, "py.yaml")
	writeFile(t, recipe, `name: py
base: debian:bookworm
steps:
  - run: |
      apt-get update &&
      apt-get install -y python3
  - env: {A: "1"}
  - copy: {src: requirements.txt, dest: /tmp/requirements.txt}
  - run: pip install -r /tmp/requirements.txt
`)
	writeFile(t, filepath.Join(dir, "requirements.txt"), "numpy\n")

	out, errOut, err := cli(t, url, "", "image", "build", "-f", recipe)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, errOut)
	}
	if out != "py\n" {
		t.Errorf("stdout %q, want the image's name", out)
	}
	want := `Base: debian:bookworm  CACHED
Step 1/4 run: apt-get update && …
    running apt-get update &&
    apt-get install -y python3
Step 2/4 env: map[A:1]
Step 3/4 copy: requirements.txt → /tmp/requirements.txt
Step 4/4 run: pip install -r /tmp/requirements.txt
    running pip install -r /tmp/requirements.txt
Built py (sha256:aaaabbbbcccc, 3 layers, 3.0 MiB) in 0.`
	if !strings.HasPrefix(errOut, want) {
		t.Errorf("progress:\n%s\nwant\n%s", errOut, want)
	}
	// The context defaulted to the recipe's directory, because of the copy step.
	if d.context["requirements.txt"] != "numpy\n" || d.context["py.yaml"] == "" {
		t.Errorf("build context %v", d.context)
	}

	// Again: the steps come from the cache; --name wins over the recipe's.
	_, errOut, err = cli(t, url, "", "image", "build", "-f", recipe, "--name", "py2")
	if err != nil || d.recipe.Name != "py2" {
		t.Fatalf("rebuild: %v (recipe %+v)\n%s", err, d.recipe, errOut)
	}
	if !strings.Contains(errOut, "Step 4/4 run: pip install -r /tmp/requirements.txt  CACHED\n") || strings.Contains(errOut, "    running") {
		t.Errorf("cached rebuild:\n%s", errOut)
	}

	// --json: the image only, no progress.
	out, errOut, err = cli(t, url, "", "--json", "image", "build", "-f", recipe)
	var img api.Image
	if err != nil || errOut != "" || json.Unmarshal([]byte(out), &img) != nil || img.Name != "py" || len(img.Layers) != 3 {
		t.Errorf("--json: %v out=%q err=%q", err, out, errOut)
	}

	// No copy steps: no context is sent.
	plain := filepath.Join(dir, "plain.json")
	writeFile(t, plain, `{"name": "plain", "base": "py", "steps": [{"run": "true"}]}`)
	if _, errOut, err := cli(t, url, "", "image", "build", "-f", plain); err != nil || d.context != nil {
		t.Errorf("plain: %v, context %v\n%s", err, d.context, errOut)
	}
	// An explicit --context is sent.
	ctxDir := filepath.Join(dir, "ctx")
	writeFile(t, filepath.Join(ctxDir, "a.txt"), "A")
	if _, _, err := cli(t, url, "", "image", "build", "-f", plain, "--context", ctxDir); err != nil || d.context["a.txt"] != "A" {
		t.Errorf("--context: %v, context %v", err, d.context)
	}
	// From standard input, with a name given only by --name.
	if out, _, err := cli(t, url, "base: py\nsteps: [{run: 'true'}]\n", "image", "build", "-f", "-", "--name", "stdin"); err != nil || out != "stdin\n" {
		t.Errorf("stdin: %v %q", err, out)
	}
	if _, _, err := cli(t, url, "name: x\nbase: py\nsteps: [{copy: {src: a, dest: /a}}]\n", "image", "build", "-f", "-"); err == nil ||
		!strings.Contains(err.Error(), "--context") {
		t.Errorf("stdin with copy steps and no context: %v", err)
	}
}

func TestCLIImageBuildErrors(t *testing.T) {
	d, url := newFakeImageDaemon(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "name: bad\nbase: debian:bookworm\nsteps:\n  - run: echo ok\n  - run: make fail\n")

	out, errOut, err := cli(t, url, "", "image", "build", "-f", bad)
	if err == nil || exitCode(err) != 1 || out != "" {
		t.Fatalf("failing build: %v out=%q", err, out)
	}
	if err.Error() != "step 2/2 (run) failed: exit status 1:\nrunning make fail" {
		t.Errorf("error %q", err)
	}
	if !strings.HasSuffix(errOut, "Step 2/2 run: make fail\n    running make fail\n") {
		t.Errorf("progress before the failure:\n%s", errOut)
	}

	for _, tt := range []struct {
		args []string
		file string
		want string
	}{
		{[]string{"image", "build"}, "", "give the recipe with -f FILE"},
		{[]string{"image", "build", "x.yaml"}, "", `unexpected argument "x.yaml"`},
		{[]string{"image", "build", "-f", filepath.Join(dir, "nope.yaml")}, "", "no such file"},
		{[]string{"image", "build", "-f", filepath.Join(dir, "r.yaml")}, "name: x\nsteps: []\n", "r.yaml: recipe: base is required"},
		{[]string{"image", "build", "-f", filepath.Join(dir, "r.yaml")}, "base: x\n", "r.yaml: recipe: name is required"},
		{[]string{"image", "build", "-f", filepath.Join(dir, "r.yaml")}, "name: x\nbase: py\nsteps: [{copy: {src: ../a, dest: /a}}]\n", "escapes the build context"},
	} {
		if tt.file != "" {
			writeFile(t, filepath.Join(dir, "r.yaml"), tt.file)
		}
		if _, _, err := cli(t, url, "", tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.args, err, tt.want)
		}
	}

	// A refusal of the daemon.
	d.inUse["busy"] = true
	writeFile(t, filepath.Join(dir, "busy.yaml"), "name: busy\nbase: py\n")
	if _, _, err := cli(t, url, "", "image", "build", "-f", filepath.Join(dir, "busy.yaml")); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("in use: %v", err)
	}
}

func TestCLIImageBuildProgress(t *testing.T) {
	_, url := newFakeImageDaemon(t)
	dir := t.TempDir()
	recipe := filepath.Join(dir, "r.yaml")
	writeFile(t, recipe, "name: py\nbase: debian:bookworm\nsteps:\n  - run: make slow\n")
	fakeTerminal(t, 200)
	_, errOut, err := cli(t, url, "", "image", "build", "-f", recipe)
	if err != nil {
		t.Fatal(err)
	}
	// While the step is silent, a progress line counts its time; it is
	// erased before the step's output is written.
	if !strings.Contains(errOut, "Step 1/1 run: make slow\n\r\x1b[K| Step 1/1 (run)... 0.") ||
		!strings.Contains(errOut, "s\r\x1b[K    running make slow\n") ||
		// The end erases a progress line if one is showing; when the step's
		// output came last (a slow machine), there is none to erase.
		!(strings.Contains(errOut, "\r\x1b[KBuilt py (") || strings.Contains(errOut, "running make slow\nBuilt py (")) {
		t.Errorf("progress on a terminal: %q", errOut)
	}
	// Not with --json.
	if _, errOut, err := cli(t, url, "", "--json", "image", "build", "-f", recipe); err != nil || errOut != "" {
		t.Errorf("--json on a terminal: %v %q", err, errOut)
	}
}

func TestCLIImageImport(t *testing.T) {
	d, url := newFakeImageDaemon(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "python.tar")
	writeFile(t, file, "docker-save-bytes")

	out, errOut, err := cli(t, url, "", "image", "import", file, "--name", "python312")
	if err != nil || out != "python312\n" || d.imported != "python312:docker-save-bytes" || d.ctype != "application/x-tar" {
		t.Fatalf("import file: %v out=%q imported=%q\n%s", err, out, d.imported, errOut)
	}
	if want := "Import: python312\n    read 17 bytes\nImported python312 (sha256:999988887777, 1 layer, 17 B) in "; !strings.HasPrefix(errOut, want) {
		t.Errorf("progress:\n%s\nwant\n%s", errOut, want)
	}

	// Standard input.
	if out, _, err := cli(t, url, "piped-bytes", "image", "import", "-", "--name", "piped"); err != nil || out != "piped\n" || d.imported != "piped:piped-bytes" {
		t.Errorf("stdin: %v %q %q", err, out, d.imported)
	}

	// An OCI layout directory goes as a tar.
	layout := filepath.Join(dir, "py312")
	writeFile(t, filepath.Join(layout, "oci-layout"), `{"imageLayoutVersion": "1.0.0"}`)
	writeFile(t, filepath.Join(layout, "index.json"), `{}`)
	writeFile(t, filepath.Join(layout, "blobs", "sha256", "abc"), "blob")
	out, _, err = cli(t, url, "", "--json", "image", "import", layout, "--name", "oci")
	var img api.Image
	if err != nil || json.Unmarshal([]byte(out), &img) != nil || img.Name != "oci" {
		t.Fatalf("import dir: %v %q", err, out)
	}
	name, data, _ := strings.Cut(d.imported, ":")
	var names []string
	tr := tar.NewReader(strings.NewReader(data))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if want := "blobs/ blobs/sha256/ blobs/sha256/abc index.json oci-layout"; name != "oci" || strings.Join(names, " ") != want {
		t.Errorf("import dir sent %s %q, want %q", name, names, want)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"image", "import", file}, "give the image's --name"},
		{[]string{"image", "import", "--name", "x"}, "name the FILE, DIR or -"},
		{[]string{"image", "import", filepath.Join(dir, "nope.tar"), "--name", "x"}, "no such file"},
		{[]string{"image", "import", t.TempDir(), "--name", "x"}, "is not an OCI image layout"},
	} {
		if _, _, err := cli(t, url, "", tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestCLIImageLsInspectRm(t *testing.T) {
	d, url := newFakeImageDaemon(t)
	d.images["py"] = api.Image{Name: "py", ID: "sha256:aaaabbbbccccdddd", Base: "debian:bookworm", Layers: []string{"a", "b", "c"},
		Env: []string{}, SizeBytes: 412 << 20, CreatedAt: time.Now().Add(-3 * time.Minute)}

	out, _, err := cli(t, url, "", "image", "ls")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAME BASE LAYERS SIZE CREATED" ||
		strings.Join(strings.Fields(lines[1]), " ") != "host host 0 0 B 2d ago" ||
		strings.Join(strings.Fields(lines[2]), " ") != "py debian:bookworm 3 412.0 MiB 3m ago" {
		t.Errorf("ls:\n%s", out)
	}
	out, _, err = cli(t, url, "", "--json", "image", "ls")
	var list api.ImageList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Images) != 2 {
		t.Errorf("ls --json: %v %q", err, out)
	}

	out, _, err = cli(t, url, "", "image", "inspect", "py")
	var img api.Image
	if err != nil || json.Unmarshal([]byte(out), &img) != nil || img.ID != "sha256:aaaabbbbccccdddd" {
		t.Errorf("inspect: %v %q", err, out)
	}
	if _, _, err := cli(t, url, "", "image", "inspect", "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("inspect unknown: %v", err)
	}

	d.inUse["host"] = true
	out, errOut, err := cli(t, url, "", "image", "rm", "py", "host", "nope")
	if err == nil || err.Error() != "2 of 3 images not removed" || out != "py\n" ||
		!strings.Contains(errOut, `forkbox: cannot delete image "host": in use by sandbox sbx_1`) ||
		!strings.Contains(errOut, `forkbox: image "nope" not found; forkbox image ls lists the images`) {
		t.Errorf("rm: %v out=%q err=%q", err, out, errOut)
	}
	if _, ok := d.images["py"]; ok {
		t.Errorf("py not removed")
	}
	if _, _, err := cli(t, url, "", "image", "rm"); err == nil {
		t.Errorf("rm without names: no error")
	}
	// An unknown subcommand is an error.
	if _, _, err := cli(t, url, "", "image", "frobnicate"); err == nil {
		t.Errorf("unknown subcommand: no error")
	}
}

func TestStepLine(t *testing.T) {
	for _, tt := range []struct {
		ev   api.BuildEvent
		want string
	}{
		{api.BuildEvent{Step: 2, Total: 5, Kind: "run", Detail: "pip install numpy"}, "Step 2/5 run: pip install numpy"},
		{api.BuildEvent{Step: 2, Total: 5, Kind: "run", Detail: "pip install numpy", Cached: true}, "Step 2/5 run: pip install numpy  CACHED"},
		{api.BuildEvent{Step: 1, Total: 1, Kind: "run", Detail: "set -e\napt-get update"}, "Step 1/1 run: set -e …"},
		{api.BuildEvent{Step: 1, Total: 1, Kind: "run", Detail: strings.Repeat("x", 150)}, "Step 1/1 run: " + strings.Repeat("x", 100) + " …"},
		{api.BuildEvent{Step: 0, Total: 3, Kind: "base", Detail: "debian:bookworm"}, "Base: debian:bookworm"},
		{api.BuildEvent{Kind: "import", Detail: "py"}, "Import: py"},
		{api.BuildEvent{Step: 3, Kind: "layer", Detail: "sha256:1"}, "Step 3 layer: sha256:1"},
	} {
		if got := stepLine(tt.ev); got != tt.want {
			t.Errorf("stepLine(%+v) = %q, want %q", tt.ev, got, tt.want)
		}
	}
	if got := shortID("sha256:0123456789abcdef"); got != "sha256:0123456789ab" {
		t.Errorf("shortID = %q", got)
	}
}
