package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// The files API through the daemon's client, against a stand-in root.

// makeTree creates what spec describes under root: "dir/" a directory,
// "->target" a symlink, "|" a FIFO, anything else a file with that content.
func makeTree(t *testing.T, root string, spec map[string]string) {
	t.Helper()
	for name, what := range spec {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasSuffix(name, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.HasPrefix(what, "->"):
			err = os.Symlink(what[2:], p)
		case what == "|":
			err = syscall.Mkfifo(p, 0o644)
		default:
			err = os.WriteFile(p, []byte(what), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func readAll(t *testing.T, c *testAgent, p string) (string, error) {
	t.Helper()
	rc, size, err := c.ReadFile(context.Background(), p)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err == nil && int64(len(b)) != size {
		t.Errorf("read %s: %d bytes, announced %d", p, len(b), size)
	}
	return string(b), err
}

// tempLeft lists the upload temp files left in dir.
func tempLeft(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		if tempFileRE.MatchString(e.Name()) {
			left = append(left, e.Name())
		}
	}
	return left
}

// TestFilesRoundTrip: write (parents made, mode kept, replaced in one
// rename), read, list and remove.
func TestFilesRoundTrip(t *testing.T) {
	c, root := startAgent(t)
	ctx := context.Background()
	ws := filepath.Join(root, "workspace")

	p, n, err := c.WriteFile(ctx, "a/b.txt", 0, strings.NewReader("hello"))
	if err != nil || p != "/workspace/a/b.txt" || n != 5 {
		t.Fatalf("write: %q, %d, %v", p, n, err)
	}
	if got, err := readAll(t, c, "/workspace/a/b.txt"); err != nil || got != "hello" {
		t.Errorf("read back %q, %v", got, err)
	}
	st, err := os.Stat(filepath.Join(ws, "a", "b.txt"))
	if err != nil || st.Mode() != 0o644 {
		t.Errorf("new file: %v, %v; want mode 0644", st.Mode(), err)
	}
	old, _ := os.Stat(filepath.Join(ws, "a", "b.txt"))
	// A replacement, its mode as asked: the permission bits only.
	for mode, want := range map[uint32]os.FileMode{0o600: 0o600, 0o4755: 0o755, 0o777: 0o777} {
		if _, _, err := c.WriteFile(ctx, "/workspace/a/b.txt", mode, strings.NewReader("again")); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(filepath.Join(ws, "a", "b.txt")); err != nil || st.Mode() != want {
			t.Errorf("mode %o: got %v, %v; want %v", mode, st.Mode(), err, want)
		}
	}
	if now, _ := os.Stat(filepath.Join(ws, "a", "b.txt")); os.SameFile(old, now) {
		t.Error("the file was rewritten in place, not replaced")
	}
	if left := tempLeft(t, filepath.Join(ws, "a")); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
	// Empty and large files.
	if _, n, err := c.WriteFile(ctx, "empty", 0, strings.NewReader("")); err != nil || n != 0 {
		t.Errorf("empty write: %d, %v", n, err)
	}
	if got, err := readAll(t, c, "empty"); err != nil || got != "" {
		t.Errorf("empty read: %q, %v", got, err)
	}
	big := make([]byte, 8<<20)
	rand.Read(big)
	if _, n, err := c.WriteFile(ctx, "big.bin", 0, bytes.NewReader(big)); err != nil || n != int64(len(big)) {
		t.Fatalf("large write: %d, %v", n, err)
	}
	if got, err := readAll(t, c, "big.bin"); err != nil || got != string(big) {
		t.Errorf("large read: %d bytes, %v", len(got), err)
	}

	// A listing: the workdir by default, sorted, each entry's kind.
	makeTree(t, ws, map[string]string{"sub/": "", "link": "->a/b.txt", "fifo": "|"})
	dir, entries, err := c.ListFiles(ctx, "")
	if err != nil || dir != "/workspace" {
		t.Fatalf("list: %q, %v", dir, err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name+":"+e.Type)
		if e.Path != "/workspace/"+e.Name || time.Since(e.ModTime) > time.Hour {
			t.Errorf("entry %+v", e)
		}
		if e.Name == "big.bin" && (e.Size != int64(len(big)) || e.Mode != "0644") {
			t.Errorf("entry %+v", e)
		}
	}
	if want := "a:dir big.bin:file empty:file fifo:other link:symlink sub:dir"; strings.Join(got, " ") != want {
		t.Errorf("entries %v, want %s", got, want)
	}
	if _, entries, err := c.ListFiles(ctx, "/workspace/sub"); err != nil || entries == nil || len(entries) != 0 {
		t.Errorf("an empty directory: %v, %v", entries, err)
	}

	// Removal: a file, a FIFO (never opened), an empty directory, a tree
	// only when recursive.
	for _, p := range []string{"empty", "fifo", "sub"} {
		if err := c.RemoveFile(ctx, p, false); err != nil {
			t.Errorf("remove %s: %v", p, err)
		}
	}
	wantKind(t, "remove a tree", c.RemoveFile(ctx, "a", false), errdefs.ErrFailedPrecondition)
	if err := c.RemoveFile(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	wantKind(t, "remove what is gone", c.RemoveFile(ctx, "a", true), errdefs.ErrNotFound)
	_, entries, _ = c.ListFiles(ctx, "")
	if len(entries) != 2 {
		t.Errorf("left: %+v", entries)
	}
}

// TestFilesHostilePaths: no path leads out of the root, into /proc, /sys,
// /dev or /.forkbox, or through a symlink that leaves; nothing outside is
// read, written, listed or removed; a FIFO never blocks.
func TestFilesHostilePaths(t *testing.T) {
	c, root := startAgent(t)
	ctx := context.Background()
	outside := t.TempDir()
	makeTree(t, outside, map[string]string{"secret": "outside", "dir/keep": "keep"})
	makeTree(t, root, map[string]string{
		"workspace/file.txt": "x",
		"workspace/fifo":     "|",
		"workspace/out":      "->" + outside,
		"workspace/abs":      "->/workspace",
		"workspace/climb":    "->../../../../../../../../" + strings.TrimPrefix(outside, "/"),
		"workspace/magic":    "->/proc/self/root",
		"workspace/zero":     "->/dev/zero",
		"workspace/in-link":  "->file.txt",
		"workspace/t/out":    "->" + filepath.Join(outside, "dir"),
	})
	hostile := []string{
		"../etc/passwd", "/workspace/../../etc/passwd", "a/../../b", "/proc/self/environ", "/proc", "/sys/kernel/notes",
		"/dev/null", "/.forkbox/run/agent.sock", "/.forkbox", "a\x00b",
		"/workspace/out/secret", "/workspace/abs/file.txt", "/workspace/climb/secret", "/workspace/magic" + outside + "/secret",
	}
	quick := func(what string, f func() error, kind error) {
		t.Helper()
		start := time.Now()
		wantKind(t, what, f(), kind)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %s", what, d)
		}
	}
	for _, p := range hostile {
		quick("read "+p, func() error { _, err := readAll(t, c, p); return err }, errdefs.ErrInvalidArgument)
		quick("list "+p, func() error { _, _, err := c.ListFiles(ctx, p); return err }, errdefs.ErrInvalidArgument)
		quick("write "+p, func() error { _, _, err := c.WriteFile(ctx, p, 0, strings.NewReader("pwned")); return err }, errdefs.ErrInvalidArgument)
		quick("remove "+p, func() error { return c.RemoveFile(ctx, p, true) }, errdefs.ErrInvalidArgument)
	}
	for what, err := range map[string]error{
		"read a FIFO":    func() error { _, err := readAll(t, c, "/workspace/fifo"); return err }(),
		"list a FIFO":    func() error { _, _, err := c.ListFiles(ctx, "/workspace/fifo"); return err }(),
		"replace a FIFO": func() error { _, _, err := c.WriteFile(ctx, "/workspace/fifo", 0, strings.NewReader("x")); return err }(),
		"replace a symlink": func() error {
			_, _, err := c.WriteFile(ctx, "/workspace/in-link", 0, strings.NewReader("x"))
			return err
		}(),
		"replace a directory": func() error { _, _, err := c.WriteFile(ctx, "/workspace/t", 0, strings.NewReader("x")); return err }(),
		"write below a file": func() error {
			_, _, err := c.WriteFile(ctx, "/workspace/file.txt/x", 0, strings.NewReader("x"))
			return err
		}(),
		"write to /":              func() error { _, _, err := c.WriteFile(ctx, "/", 0, strings.NewReader("x")); return err }(),
		"read a link out":         func() error { _, err := readAll(t, c, "/workspace/zero"); return err }(),
		"replace a link out":      func() error { _, _, err := c.WriteFile(ctx, "/workspace/zero", 0, strings.NewReader("x")); return err }(),
		"read a directory":        func() error { _, err := readAll(t, c, "/workspace/t"); return err }(),
		"list a file":             func() error { _, _, err := c.ListFiles(ctx, "/workspace/file.txt"); return err }(),
		"remove /":                c.RemoveFile(ctx, "/", true),
		"no path":                 c.RemoveFile(ctx, "", false),
		"a mode that is not one":  c.send(ctx, http.MethodPut, "/files?path=/workspace/m&mode=9", "x"),
		"a mode beyond the modes": c.send(ctx, http.MethodPut, "/files?path=/workspace/m&mode=17777", "x"),
	} {
		wantKind(t, what, err, errdefs.ErrInvalidArgument)
	}
	// What stays inside works, through an in-root symlink too.
	if got, err := readAll(t, c, "/workspace/in-link"); err != nil || got != "x" {
		t.Errorf("read through an in-root link: %q, %v", got, err)
	}
	// Removing a tree unlinks the symlinks in it, never what they lead to;
	// a symlink itself can be removed.
	if err := c.RemoveFile(ctx, "/workspace/t", true); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveFile(ctx, "/workspace/out", false); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "dir", "keep")); err != nil || string(b) != "keep" {
		t.Errorf("outside, after removing links to it: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "outside" {
		t.Errorf("outside: %q, %v", b, err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 2 {
		t.Errorf("outside holds %v", entries)
	}
	if _, err := os.Stat(filepath.Join(root, "workspace", "fifo")); err != nil {
		t.Errorf("the FIFO: %v", err)
	}
}

// TestFilesCutUpload: an upload that breaks off leaves the old file as it
// was and no temp file; a download the client drops leaves the agent
// serving.
func TestFilesCutUpload(t *testing.T) {
	c, root := startAgent(t)
	ctx := context.Background()
	makeTree(t, root, map[string]string{"workspace/f": "old"})
	_, _, err := c.WriteFile(ctx, "f", 0, io.MultiReader(bytes.NewReader(make([]byte, 1<<20)), errReader{}))
	if err == nil {
		t.Fatal("a broken upload succeeded")
	}
	waitFor(t, "the temp file's removal", func() bool { return len(tempLeft(t, filepath.Join(root, "workspace"))) == 0 })
	if b, _ := os.ReadFile(filepath.Join(root, "workspace", "f")); string(b) != "old" {
		t.Errorf("after a broken upload: %.20q", b)
	}

	if _, _, err := c.WriteFile(ctx, "big", 0, bytes.NewReader(make([]byte, 16<<20))); err != nil {
		t.Fatal(err)
	}
	rc, _, err := c.ReadFile(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	rc.Read(make([]byte, 1024))
	rc.Close()
	if got, err := readAll(t, c, "f"); err != nil || got != "old" {
		t.Errorf("a read after a dropped one: %q, %v", got, err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("the upload broke off") }

// userServer is a test server whose sandbox user holds no privilege: the
// current user when it is not root; as root, nobody (65534), with a root
// directory others may enter, so that the agent's switch to the user's
// identity is what is tested.
func userServer(t *testing.T) (*server, string) {
	t.Helper()
	s, root := testServer(t)
	if os.Geteuid() != 0 {
		return s, root
	}
	if err := os.Chmod(filepath.Dir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	s.cfg.UID, s.cfg.GID = 65534, 65534
	return s, root
}

// TestFilesAsTheUser: file work has the user's rights, no more, and what
// it makes is the user's.
func TestFilesAsTheUser(t *testing.T) {
	s, root := userServer(t)
	c := serveTestAgent(t, s)
	ctx := context.Background()
	ws := filepath.Join(root, "workspace")
	makeTree(t, root, map[string]string{"workspace/ro/f": "ro", "workspace/closed": "secret"})
	for _, p := range []string{ws, filepath.Join(ws, "ro"), filepath.Join(ws, "ro", "f"), filepath.Join(ws, "closed")} {
		if err := os.Lchown(p, s.cfg.UID, s.cfg.GID); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(filepath.Join(ws, "closed"), 0))
	must(os.Chmod(filepath.Join(ws, "ro"), 0o555))
	t.Cleanup(func() { os.Chmod(filepath.Join(ws, "ro"), 0o755) }) // for TempDir's removal

	_, err := readAll(t, c, "closed")
	wantKind(t, "read a file of mode 0", err, errdefs.ErrPermissionDenied)
	_, _, err = c.WriteFile(ctx, "ro/new", 0, strings.NewReader("x"))
	wantKind(t, "write in a read-only directory", err, errdefs.ErrPermissionDenied)
	_, _, err = c.WriteFile(ctx, "ro/f", 0, strings.NewReader("x"))
	wantKind(t, "replace in a read-only directory", err, errdefs.ErrPermissionDenied)
	wantKind(t, "remove in a read-only directory", c.RemoveFile(ctx, "ro/f", false), errdefs.ErrPermissionDenied)
	_, _, err = c.WriteFile(ctx, "ro/sub/new", 0, strings.NewReader("x"))
	wantKind(t, "make a directory in a read-only one", err, errdefs.ErrPermissionDenied)
	if left := tempLeft(t, filepath.Join(ws, "ro")); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
	if _, _, err := c.WriteFile(ctx, "mine/new", 0, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"mine", "mine/new"} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(ws, p), &st); err != nil || int(st.Uid) != s.cfg.UID || int(st.Gid) != s.cfg.GID {
			t.Errorf("%s: uid %d gid %d, %v; want the user's", p, st.Uid, st.Gid, err)
		}
	}
	if os.Geteuid() != 0 {
		return
	}
	// Root's files and another user's file in a sticky directory (like
	// /tmp) are not the user's to read or replace.
	makeTree(t, root, map[string]string{"workspace/roots": "root's", "workspace/sticky/theirs": "theirs"})
	must(os.Chmod(filepath.Join(ws, "roots"), 0o600))
	must(os.Chmod(filepath.Join(ws, "sticky"), 0o777|os.ModeSticky))
	must(os.Chown(filepath.Join(ws, "sticky", "theirs"), 4242, 4242))
	_, err = readAll(t, c, "roots")
	wantKind(t, "read root's 0600 file", err, errdefs.ErrPermissionDenied)
	_, _, err = c.WriteFile(ctx, "sticky/theirs", 0, strings.NewReader("mine"))
	wantKind(t, "replace another's file in a sticky directory", err, errdefs.ErrPermissionDenied)
	if b, _ := os.ReadFile(filepath.Join(ws, "sticky", "theirs")); string(b) != "theirs" {
		t.Errorf("their file holds %q", b)
	}
}

// TestFilesQueryEncoding: a path is the agent's whatever it holds (spaces,
// '%', '?', '#', '&', unicode).
func TestFilesQueryEncoding(t *testing.T) {
	c, root := startAgent(t)
	ctx := context.Background()
	name := "a b%20?x=1#&ü.txt"
	if p, _, err := c.WriteFile(ctx, name, 0, strings.NewReader("odd")); err != nil || p != "/workspace/"+name {
		t.Fatalf("write %q: %q, %v", name, p, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "workspace", name)); err != nil || string(b) != "odd" {
		t.Errorf("on disk: %q, %v", b, err)
	}
	if err := c.send(ctx, http.MethodGet, "/files?path="+url.QueryEscape("/workspace/"+name), ""); err != nil {
		t.Errorf("raw read: %v", err)
	}
}

// TestPathErrKinds: each errno of file work is the API error a client can
// act on; an unknown one stays internal, with the path.
func TestPathErrKinds(t *testing.T) {
	for errno, kind := range map[syscall.Errno]error{
		syscall.ENOENT: errdefs.ErrNotFound, syscall.EACCES: errdefs.ErrPermissionDenied, syscall.EPERM: errdefs.ErrPermissionDenied,
		syscall.EROFS: errdefs.ErrPermissionDenied, syscall.EISDIR: errdefs.ErrInvalidArgument, syscall.ENOTDIR: errdefs.ErrInvalidArgument,
		syscall.ENOTEMPTY: errdefs.ErrFailedPrecondition, syscall.EEXIST: errdefs.ErrFailedPrecondition, syscall.EBUSY: errdefs.ErrFailedPrecondition,
		syscall.ENOSPC: errdefs.ErrResourceExhausted, syscall.EDQUOT: errdefs.ErrResourceExhausted, syscall.ENAMETOOLONG: errdefs.ErrInvalidArgument,
		syscall.EXDEV: errdefs.ErrInvalidArgument, syscall.ELOOP: errdefs.ErrInvalidArgument,
	} {
		err := pathErr("/workspace/x", &os.PathError{Op: "open", Path: "x", Err: errno})
		if !errors.Is(err, kind) || !strings.Contains(err.Error(), "/workspace/x") {
			t.Errorf("%v: %v, want %v naming the path", errno, err, kind)
		}
	}
	err := pathErr("/workspace/x", syscall.EIO)
	if status, _ := errdefs.HTTPStatus(err); status != http.StatusInternalServerError || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "/workspace/x") {
		t.Errorf("EIO: %v (status %d)", err, status)
	}
}
