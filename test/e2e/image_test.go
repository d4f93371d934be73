package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// buildImage builds r on d and removes the image when the test ends (after
// the sandboxes made from it, which register their cleanups later).
func buildImage(t *testing.T, d *daemon, r api.Recipe, contextDir string) (*api.Image, []api.BuildEvent) {
	t.Helper()
	var events []api.BuildEvent
	img, err := d.c.BuildImage(ctxT(t), r, contextDir, func(ev api.BuildEvent) { events = append(events, ev) })
	if err != nil {
		t.Fatalf("build %s: %v", r.Name, err)
	}
	t.Cleanup(func() { d.c.DeleteImage(ctxT(t), img.Name) })
	return img, events
}

// recipeNonce makes this run's recipe layers new: the store keeps
// unreferenced layers for an hour, and the first build must really run.
var recipeNonce = fmt.Sprint(time.Now().UnixNano())

// moduleRecipe is a recipe on the default image: a module written into
// site-packages by a run step, an env var and a working directory that no
// one created.
func moduleRecipe(name string) api.Recipe {
	return api.Recipe{Name: name, Base: "python", Steps: []api.RecipeStep{
		{Run: "printf 'ANSWER = 42\\n' > /usr/lib/python3/dist-packages/fbmod.py && echo wrote fbmod " + recipeNonce},
		{Env: map[string]string{"FB_GREETING": "hello from the recipe"}},
		{Workdir: "/srv/app"},
	}}
}

// TestImageRecipe: an image built on python with a run, env and workdir
// step; sandboxes from it import the module, see the env and the cwd (in
// commands and in code); a rebuild comes from the cache.
func TestImageRecipe(t *testing.T) {
	needRoot(t)
	name := "e2e-recipe"
	img, events := buildImage(t, shared, moduleRecipe(name), "")
	if img.Name != name || img.Base != "python" || len(img.Layers) < 2 || img.WorkDir != "/srv/app" {
		t.Fatalf("image: %+v", img)
	}
	var sawOutput bool
	for _, ev := range events {
		if ev.Type == api.BuildEventLog && strings.Contains(ev.Line, "wrote fbmod") {
			sawOutput = true
		}
	}
	if !sawOutput {
		t.Fatalf("the build log lacks the run step's output: %+v", events)
	}

	sb := newSandbox(t, shared, api.CreateSandboxRequest{Image: name})
	if sb.Image != name {
		t.Fatalf("sandbox image = %q", sb.Image)
	}
	res := sh(t, shared, sb.ID, `echo "$FB_GREETING"; pwd; id -u; python3 -c 'import fbmod; print(fbmod.ANSWER)'`)
	if want := "hello from the recipe\n/srv/app\n1000\n42\n"; res.Stdout != want {
		t.Fatalf("in the sandbox: %q (stderr %q), want %q", res.Stdout, res.Stderr, want)
	}
	ex := runCode(t, shared, sb.ID, py("import fbmod, os\nprint(fbmod.ANSWER, os.getcwd(), os.environ['FB_GREETING'])"))
	noError(t, ex)
	if got := strings.Join(ex.Logs.Stdout, ""); got != "42 /srv/app hello from the recipe\n" {
		t.Fatalf("in code: %q", got)
	}

	// Rebuild: every layer from the cache, the log says so, same image.
	start := time.Now()
	again, events := buildImage(t, shared, moduleRecipe(name), "")
	took := time.Since(start)
	t.Logf("cached rebuild took %s", took)
	runSteps := 0
	for _, ev := range events {
		if ev.Type == api.BuildEventStep && ev.Kind == "run" {
			runSteps++
			if !ev.Cached {
				t.Fatalf("rebuild ran step %d again: %+v", ev.Step, ev)
			}
		}
	}
	if runSteps != 1 || again.ID != img.ID {
		t.Fatalf("rebuild: %d run steps, id %s vs %s", runSteps, again.ID, img.ID)
	}
	var list api.ImageList
	getJSON(t, shared, "/v1/images", &list)
	found := false
	for _, i := range list.Images {
		found = found || i.Name == name
	}
	if !found {
		t.Fatalf("%s not listed: %+v", name, list)
	}
}

// TestImageCopyStep: copy brings a directory of the build context into the
// image; a source escaping the context is refused before anything runs.
func TestImageCopyStep(t *testing.T) {
	needRoot(t)
	ctxDir := t.TempDir()
	pkg := filepath.Join(ctxDir, "src", "fbcopy")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "__init__.py"), []byte("WHERE = 'copied'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := api.Recipe{Name: "e2e-copy", Base: "python", Steps: []api.RecipeStep{
		{Copy: &api.CopyStep{Src: "src/fbcopy", Dest: "/usr/lib/python3/dist-packages/fbcopy"}},
	}}
	buildImage(t, shared, r, ctxDir)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{Image: "e2e-copy"})
	if res := sh(t, shared, sb.ID, `python3 -c 'import fbcopy; print(fbcopy.WHERE)'`); res.Stdout != "copied\n" {
		t.Fatalf("copied module: %q %q", res.Stdout, res.Stderr)
	}

	r.Name = "e2e-copy-escape"
	r.Steps[0].Copy.Src = "../../etc/passwd"
	_, err := shared.c.BuildImage(ctxT(t), r, ctxDir, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "escapes the build context") {
		t.Fatalf("escaping copy: %v", err)
	}
}

// TestImageFailingStep: a step that exits 3 fails the build with its output,
// and no image is registered.
func TestImageFailingStep(t *testing.T) {
	needRoot(t)
	r := api.Recipe{Name: "e2e-fails", Base: "python", Steps: []api.RecipeStep{
		{Run: "echo about to fail; echo on stderr >&2; exit 3"},
	}}
	_, err := shared.c.BuildImage(ctxT(t), r, "", nil)
	if err == nil {
		t.Fatal("a failing step built an image")
	}
	for _, want := range []string{"exit code 3", "about to fail", "on stderr", "step 1/1"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("build error lacks %q: %v", want, err)
		}
	}
	if _, err := shared.c.GetImage(ctxT(t), "e2e-fails"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("failed build registered an image: %v", err)
	}
}

// TestImageBadInput: unknown base 404, unknown step kind 400 naming it,
// deleting an image in use 409 naming the user.
func TestImageBadInput(t *testing.T) {
	needRoot(t)
	_, err := shared.c.BuildImage(ctxT(t), api.Recipe{Name: "e2e-nobase", Base: "no-such-image", Steps: []api.RecipeStep{{Run: "true"}}}, "", nil)
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "no-such-image") {
		t.Fatalf("unknown base: %v", err)
	}
	resp, err := http.Post("http://"+shared.addr+"/v1/images", "application/json",
		strings.NewReader(`{"name":"e2e-kind","base":"python","steps":[{"frobnicate":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(raw), "frobnicate") {
		t.Fatalf("unknown step kind: %d %s", resp.StatusCode, raw)
	}
	resp, err = http.Post("http://"+shared.addr+"/v1/images", "application/yaml",
		strings.NewReader("name: e2e-kind\nbase: python\nsteps:\n  - frobnicate: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(raw), "frobnicate") {
		t.Fatalf("unknown step kind (YAML): %d %s", resp.StatusCode, raw)
	}

	img, _ := buildImage(t, shared, moduleRecipe("e2e-inuse"), "")
	sb := newSandbox(t, shared, api.CreateSandboxRequest{Image: img.Name})
	err = shared.c.DeleteImage(ctxT(t), img.Name)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), sb.ID) {
		t.Fatalf("delete in use: %v", err)
	}
	if _, err := shared.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := shared.c.DeleteImage(ctxT(t), img.Name); err != nil {
		t.Fatalf("delete after the sandbox went: %v", err)
	}
}

// TestImageSnapshotsAndForks: memory snapshots and forks of a sandbox on a
// built image work as on the default one; the snapshot records the image,
// which then cannot be deleted.
func TestImageSnapshotsAndForks(t *testing.T) {
	needRoot(t)
	img, _ := buildImage(t, shared, moduleRecipe("e2e-snap"), "")
	sb := newSandbox(t, shared, api.CreateSandboxRequest{Image: img.Name, MemoryMB: i64(512)})
	noError(t, runCode(t, shared, sb.ID, py("import fbmod\nx = fbmod.ANSWER - 1")))
	status, sn, raw := checkpoint(t, shared, sb.ID, api.CheckpointRequest{Type: "memory"})
	if status != 201 || sn.Image != img.Name {
		t.Fatalf("checkpoint: %d %s", status, raw)
	}
	t.Cleanup(func() { shared.c.DeleteSnapshot(ctxT(t), sn.ID) })
	restored := newSandbox(t, shared, api.CreateSandboxRequest{SnapshotID: sn.ID})
	if got := mainResult(t, runCode(t, shared, restored.ID, py("x + 1"))); got != "42" {
		t.Fatalf("restored x + 1 = %s", got)
	}
	if res := sh(t, shared, restored.ID, `pwd; echo "$FB_GREETING"`); res.Stdout != "/srv/app\nhello from the recipe\n" {
		t.Fatalf("restored sandbox: %q", res.Stdout)
	}
	status, raw = postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/fork", api.ForkRequest{Count: 2})
	if status != 201 {
		t.Fatalf("fork: %d %s", status, raw)
	}
	var fr api.ForkResult
	json.Unmarshal(raw, &fr)
	t.Cleanup(func() { shared.c.DeleteSnapshot(ctxT(t), fr.Snapshot.ID) })
	for i, b := range fr.Sandboxes {
		id := b.ID
		t.Cleanup(func() { shared.c.DeleteSandbox(ctxT(t), id) })
		if b.Image != img.Name {
			t.Fatalf("fork %d image = %q", i, b.Image)
		}
		if got := mainResult(t, runCode(t, shared, id, py(fmt.Sprintf("x += %d\nx", i+1)))); got != fmt.Sprint(41+i+1) {
			t.Fatalf("fork %d: x = %s", i, got)
		}
	}
	// Only the snapshots use it now.
	for _, id := range append([]string{sb.ID, restored.ID}, fr.Sandboxes[0].ID, fr.Sandboxes[1].ID) {
		shared.c.DeleteSandbox(ctxT(t), id)
	}
	err := shared.c.DeleteImage(ctxT(t), img.Name)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), sn.ID) {
		t.Fatalf("delete an image a snapshot uses: %v", err)
	}
}

// tarLayer makes an uncompressed layer tar from name → content entries; a
// content of "" with a trailing "/" in the name is a directory.
func tarLayer(t *testing.T, entries [][2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e[0], Mode: 0o644, Size: int64(len(e[1])), Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)}
		if strings.HasSuffix(e[0], "/") {
			hdr = &tar.Header{Name: e[0], Mode: 0o755, Typeflag: tar.TypeDir, ModTime: hdr.ModTime}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestImageOCIImport: an image archive made here (docker save format, two
// layers, the second deleting a file of the first) imports; a sandbox from
// it sees the second layer's files and not the deleted one.
func TestImageOCIImport(t *testing.T) {
	needRoot(t)
	l1 := tarLayer(t, [][2]string{
		{"data/", ""}, {"data/keep.txt", "from layer 1\n"}, {"data/gone.txt", "deleted by layer 2\n"},
		{"etc/", ""}, {"etc/layer1", "1\n"},
	})
	l2 := tarLayer(t, [][2]string{
		{"data/", ""}, {"data/new.txt", "from layer 2\n"}, {"data/.wh.gone.txt", ""},
	})
	var layers []v1.Layer
	for _, b := range [][]byte{l1, l2} {
		b := b
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("example.test/forkbox/e2e:latest")
	if err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if err := tarball.Write(tag, img, &archive); err != nil {
		t.Fatal(err)
	}
	got, err := shared.c.ImportImage(ctxT(t), "e2e-oci", &archive, nil)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	t.Cleanup(func() { shared.c.DeleteImage(ctxT(t), "e2e-oci") })
	if len(got.Layers) != 2 || got.Base != "oci" {
		t.Fatalf("imported image: %+v", got)
	}
	sb := newSandbox(t, shared, api.CreateSandboxRequest{Image: "e2e-oci"})
	for path, want := range map[string]string{"/data/keep.txt": "from layer 1\n", "/data/new.txt": "from layer 2\n", "/etc/layer1": "1\n"} {
		b, err := shared.c.ReadFile(ctxT(t), sb.ID, path)
		if err != nil || string(b) != want {
			t.Fatalf("read %s: %q %v", path, b, err)
		}
	}
	if _, err := shared.c.ReadFile(ctxT(t), sb.ID, "/data/gone.txt"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the deleted file is visible: %v", err)
	}
	list, err := shared.c.ListFiles(ctxT(t), sb.ID, "/data")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range list.Entries {
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "keep.txt,new.txt" {
		t.Fatalf("/data holds %v", names)
	}

	// Garbage is refused with a clear message.
	if _, err := shared.c.ImportImage(ctxT(t), "e2e-garbage", strings.NewReader("not an image archive"), nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("garbage import: %v", err)
	}
}

// getJSON GETs path from d and decodes the 200 answer into v.
func getJSON(t *testing.T, d *daemon, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + d.addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, raw)
	}
}
