package runtime

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/client"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/netsetup"
	"github.com/forkbox/forkbox/internal/userns"
)

// testRuntime needs root and a static forkbox binary (FORKBOX_BIN, else one
// is built).
func testRuntime(t *testing.T) (*Runtime, *image.Image) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("runtime tests need root (namespaces, cgroups, mounts)")
	}
	bin := os.Getenv("FORKBOX_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "forkbox")
		cmd := exec.Command("go", "build", "-o", bin, "../../cmd/forkbox")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build forkbox: %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	images, err := image.Open(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.EnsureHostPython(context.Background())
	if err != nil {
		t.Skipf("python image unavailable (run make setup): %v", err)
	}
	nm, err := netsetup.New(context.Background(), netsetup.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := userns.New(userns.DefaultFirst, userns.DefaultCount, userns.DefaultClaimDir, dir)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(Config{Dir: filepath.Join(dir, "sandboxes"), CacheDir: filepath.Join(dir, "cache"),
		CgroupParent: "forkbox-test", Binary: bin, Net: nm, IDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(); rt.ReleaseMounts() })
	return rt, img
}

func hostLeaks(t *testing.T, rt *Runtime, id string) []string {
	t.Helper()
	var out []string
	f, _ := os.Open("/proc/self/mountinfo")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), id) {
			out = append(out, "mount "+sc.Text())
		}
	}
	f.Close()
	for _, p := range newCgroups("forkbox-test", id).paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, "cgroup "+p)
		}
	}
	if _, err := os.Stat(rt.Dir(id)); err == nil {
		out = append(out, "dir "+rt.Dir(id))
	}
	if links, err := rt.cfg.Net.Links(); err == nil {
		for name, lid := range links {
			if lid == id {
				out = append(out, "link "+name)
			}
		}
	}
	return out
}

func spec(id string, img *image.Image) Spec {
	return Spec{ID: id, Hostname: id, Image: img, Limits: Limits{CPUs: 1, MemoryMB: 256, PIDs: 128}, DiskMB: 128, AllowInternet: true}
}

func TestCreateExecDestroyLeavesNothing(t *testing.T) {
	rt, img := testRuntime(t)
	ctx := context.Background()
	id := "sbx_rttest" + time.Now().Format("150405")
	info, err := rt.Create(ctx, spec(id, img))
	if err != nil {
		t.Fatal(err)
	}
	st, err := client.New(SocketPath(info)).Exec(ctx, &wire.ExecRequest{Cmd: "sh", Args: []string{"-c", "id -u; hostname; ip -o -4 addr show eth0 | wc -l"}}, nil)
	if err != nil || st.Code != 0 {
		t.Fatalf("exec: %+v %v", st, err)
	}
	if info.Link == nil {
		t.Fatal("no network link recorded for a sandbox with internet access")
	}
	if err := rt.Destroy(ctx, id, info); err != nil {
		t.Fatal(err)
	}
	if l := hostLeaks(t, rt, id); len(l) > 0 {
		t.Fatalf("left behind: %v", l)
	}
	// Destroy is idempotent.
	if err := rt.Destroy(ctx, id, info); err != nil {
		t.Fatalf("second destroy: %v", err)
	}
}

// TestCreateFailureUnwinds makes the sandbox's init fail after every host
// step (disk, overlay, cgroups, process, network) is done, and checks that
// the unwinding left nothing behind.
func TestCreateFailureUnwinds(t *testing.T) {
	rt, img := testRuntime(t)
	ctx := context.Background()
	broken := *img
	broken.Binds = append(append([]image.Bind(nil), img.Binds...), image.Bind{Source: "/nonexistent-forkbox-test", Target: "/mnt/x", ReadOnly: true})
	id := "sbx_rtfail" + time.Now().Format("150405")
	if _, err := rt.Create(ctx, spec(id, &broken)); err == nil || !strings.Contains(err.Error(), "nonexistent-forkbox-test") {
		t.Fatalf("create with a missing bind source: %v, want an error naming it", err)
	}
	if l := hostLeaks(t, rt, id); len(l) > 0 {
		t.Fatalf("failed create left behind: %v", l)
	}
	// A failure before any process exists unwinds too.
	missing := *img
	missing.LowerDirs = []string{"/nonexistent-rootfs"}
	id2 := id + "b"
	if _, err := rt.Create(ctx, spec(id2, &missing)); err == nil {
		t.Fatal("create with a missing rootfs succeeded")
	}
	if l := hostLeaks(t, rt, id2); len(l) > 0 {
		t.Fatalf("failed create left behind: %v", l)
	}
}

func TestCopySparseKeepsHoles(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, _ := os.Create(src)
	f.Truncate(64 << 20)
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("tail"), 40<<20)
	f.Close()
	dst := filepath.Join(dir, "dst")
	if err := copySparse(src, dst); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile(dst)
	if string(a) != string(b) {
		t.Fatal("copy differs")
	}
	var st1 = mustStat(t, dst)
	if st1 > 1<<20 {
		t.Fatalf("copy allocated %d bytes for 8 bytes of data", st1)
	}
}

func mustStat(t *testing.T, p string) int64 {
	t.Helper()
	out, err := exec.Command("du", "-B1", p).Output()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range strings.Fields(string(out))[0] {
		n = n*10 + int64(c-'0')
	}
	return n
}

func TestMergeEnvOverrides(t *testing.T) {
	got := wire.MergeEnv([]string{"A=1", "B=2"}, []string{"B=3", "C=4"})
	if strings.Join(got, ",") != "A=1,B=3,C=4" {
		t.Fatalf("MergeEnv = %v", got)
	}
}

func TestOverlayOptions(t *testing.T) {
	opts, err := overlayOptions([]string{"/l/top", "/l/bottom"}, "/d/disk")
	if err != nil || opts != "lowerdir=/l/top:/l/bottom,upperdir=/d/disk/upper,workdir=/d/disk/work" {
		t.Fatalf("%q %v", opts, err)
	}
	if _, err := overlayOptions(nil, "/d"); err == nil {
		t.Fatal("no lower dirs accepted")
	}
	if _, err := overlayOptions([]string{"/l/a:b"}, "/d"); err == nil || !strings.Contains(err.Error(), "':'") {
		t.Fatalf("colon in a lower dir: %v", err)
	}
	many := make([]string, 80)
	for i := range many {
		many[i] = "/var/lib/forkbox/images/.layers/" + strings.Repeat("ab", 32) + "/fs"
	}
	if _, err := overlayOptions(many, "/d"); err == nil || !strings.Contains(err.Error(), "too many layers") {
		t.Fatalf("80 layers: %v", err)
	}
}
