package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the python image has files owned by uid 1000 (run as root, as `make test` does)")
	}
}

func TestEnsureHostPython(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.EnsureHostPython(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(s.Dir(), HostImage, "rootfs")
	if img.Name != HostImage || img.RootFS != root || img.WorkDir != "/workspace" ||
		img.UID != 1000 || img.GID != 1000 || img.SizeBytes <= 0 || img.Recipe != hostPythonRecipe {
		t.Errorf("image = %+v", img)
	}
	if !hasBind(img, "/usr", "/usr") {
		t.Errorf("binds %+v lack a read-only /usr", img.Binds)
	}
	for _, kv := range []string{"HOME=/home/user", "LANG=C.UTF-8", "MPLBACKEND=Agg", "PYTHONUNBUFFERED=1"} {
		if !contains(img.Env, kv) {
			t.Errorf("env %v lacks %s", img.Env, kv)
		}
	}

	t.Run("layout", func(t *testing.T) {
		for _, name := range []string{"bin", "sbin", "lib", "lib64"} {
			host, err := os.Readlink("/" + name)
			if err != nil {
				continue // not a merged-/usr link on this host
			}
			if got, err := os.Readlink(filepath.Join(root, name)); err != nil || got != host {
				t.Errorf("%s -> %q (%v), want -> %q as on the host", name, got, err, host)
			}
		}
		for path, want := range map[string]struct {
			mode     fs.FileMode
			uid, gid uint32
		}{
			"usr":       {0o755, 0, 0},
			"tmp":       {0o777 | fs.ModeSticky, 0, 0},
			"root":      {0o700, 0, 0},
			"proc":      {0o755, 0, 0},
			"sys":       {0o755, 0, 0},
			"dev":       {0o755, 0, 0},
			"run":       {0o755, 0, 0},
			".forkbox":  {0o755, 0, 0},
			"workspace": {0o755, 1000, 1000},
			"home/user": {0o755, 1000, 1000},
		} {
			fi, err := os.Lstat(filepath.Join(root, path))
			if err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			st := fi.Sys().(*syscall.Stat_t)
			if !fi.IsDir() || fi.Mode()&(fs.ModePerm|fs.ModeSticky) != want.mode || st.Uid != want.uid || st.Gid != want.gid {
				t.Errorf("%s: %v %d:%d, want dir %v %d:%d", path, fi.Mode(), st.Uid, st.Gid, want.mode, want.uid, want.gid)
			}
		}
		if entries, _ := os.ReadDir(filepath.Join(root, "usr")); len(entries) != 0 {
			t.Errorf("usr is not empty: %d entries", len(entries))
		}
	})

	t.Run("etc", func(t *testing.T) {
		etc := filepath.Join(root, "etc")
		passwd, err := os.ReadFile(filepath.Join(etc, "passwd"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{"root:x:0:0:", "user:x:1000:1000::/home/user:/bin/bash", "nobody:x:65534:"} {
			if !strings.Contains(string(passwd), line) {
				t.Errorf("passwd lacks %q:\n%s", line, passwd)
			}
		}
		if group, _ := os.ReadFile(filepath.Join(etc, "group")); !strings.Contains(string(group), "user:x:1000:") {
			t.Errorf("group lacks user:\n%s", group)
		}
		if hosts, _ := os.ReadFile(filepath.Join(etc, "hosts")); !strings.Contains(string(hosts), "127.0.0.1\tlocalhost") {
			t.Errorf("hosts:\n%s", hosts)
		}
		for _, secret := range []string{"shadow", "gshadow", "sudoers", "ssh", "ssl/private", "machine-id", "hostname"} {
			if _, err := os.Lstat(filepath.Join(etc, secret)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("etc/%s copied from the host (%v)", secret, err)
			}
		}
		for _, name := range []string{"ld.so.cache", "alternatives", "ssl/certs", "nsswitch.conf"} {
			if _, err := os.Lstat(filepath.Join(etc, name)); err != nil {
				t.Errorf("etc/%s: %v", name, err)
			}
		}
		// Symlinks stay symlinks (the alternatives system depends on it).
		if host, err := os.Readlink("/etc/os-release"); err == nil {
			if got, err := os.Readlink(filepath.Join(etc, "os-release")); err != nil || got != host {
				t.Errorf("os-release -> %q (%v), want -> %q", got, err, host)
			}
		}
	})

	t.Run("readable", func(t *testing.T) {
		// Everything but /root is readable (and directories searchable)
		// by the sandbox user, who owns neither.
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if rel == "root" {
				return fs.SkipDir
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			switch {
			case fi.IsDir() && fi.Mode()&0o005 != 0o005:
				t.Errorf("%s: %v, not searchable by others", rel, fi.Mode())
			case fi.Mode().IsRegular() && fi.Mode()&0o004 == 0:
				t.Errorf("%s: %v, not readable by others", rel, fi.Mode())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("second call is a no-op", func(t *testing.T) {
		start := time.Now()
		again, err := s.EnsureHostPython(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("second EnsureHostPython took %v", d)
		}
		if !again.CreatedAt.Equal(img.CreatedAt) {
			t.Errorf("rebuilt: CreatedAt %v, was %v", again.CreatedAt, img.CreatedAt)
		}
	})

	t.Run("get and list", func(t *testing.T) {
		got, err := s.Get(ctx, HostImage)
		if err != nil || !got.CreatedAt.Equal(img.CreatedAt) || got.SizeBytes != img.SizeBytes {
			t.Fatalf("Get = %+v, %v", got, err)
		}
		list, err := s.List(ctx)
		if err != nil || len(list) != 1 || list[0].Name != HostImage {
			t.Fatalf("List = %v, %v", list, err)
		}
	})

	t.Run("runs python as the sandbox user", func(t *testing.T) {
		runInImage(t, img, `
import os, pwd, ssl, sys
import pandas as pd, matplotlib.pyplot as plt
plt.plot([1, 2, 3]); plt.savefig("/workspace/fig.png")
ssl.create_default_context()
print(os.getuid(), pwd.getpwuid(os.getuid()).pw_name, os.getcwd(), os.listdir("/usr/local"))
`, "1000 user /workspace []")
	})

	t.Run("older recipe is rebuilt", func(t *testing.T) {
		old := *img
		old.Recipe = "host-python/0"
		if err := writeMeta(filepath.Join(s.Dir(), HostImage), &old); err != nil {
			t.Fatal(err)
		}
		marker := filepath.Join(root, "stale")
		if err := os.WriteFile(marker, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		rebuilt, err := s.EnsureHostPython(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rebuilt.Recipe != hostPythonRecipe || rebuilt.CreatedAt.Equal(img.CreatedAt) {
			t.Errorf("not rebuilt: %+v", rebuilt)
		}
		if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("old rootfs still in place (%v)", err)
		}
		entries, _ := os.ReadDir(s.Dir())
		if len(entries) != 1 {
			t.Errorf("store holds %d entries after a rebuild, want only python", len(entries))
		}
	})
}

// runInImage runs script with the image's python in a private mount
// namespace: the image's binds mounted over its rootfs, then chroot, then the
// image's user, workdir and environment. It checks the last output line.
func runInImage(t *testing.T, img *Image, script, want string) {
	t.Helper()
	var sh strings.Builder
	sh.WriteString("set -e\n")
	for _, b := range img.Binds {
		target := shQuote(filepath.Join(img.RootFS, b.Target))
		fmt.Fprintf(&sh, "mount --bind %s %s\n", shQuote(b.Source), target)
		if b.ReadOnly {
			fmt.Fprintf(&sh, "mount -o remount,bind,ro %s\n", target)
		}
	}
	inner := "cd " + shQuote(img.WorkDir) + " && exec /usr/bin/python3 -c " + shQuote(script)
	fmt.Fprintf(&sh, "exec chroot --userspec=%d:%d %s /usr/bin/env -i", img.UID, img.GID, shQuote(img.RootFS))
	for _, kv := range img.Env {
		sh.WriteString(" " + shQuote(kv))
	}
	sh.WriteString(" /bin/sh -c " + shQuote(inner) + "\n")
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", sh.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if got := lines[len(lines)-1]; got != want {
		t.Errorf("got %q, want %q; output:\n%s", got, want, out)
	}
}

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func TestCopyEtcDenylist(t *testing.T) {
	requireRoot(t)
	host := t.TempDir()
	for path, content := range map[string]string{
		"shadow":              "root:secret",
		"passwd":              "host:x:1:1::/:/bin/sh",
		"python3/x.py":        "ok",
		"ssl/certs/ca.pem":    "cert",
		"ssl/private/key.pem": "key",
		"resolv.conf":         "nameserver 192.0.2.1\n",
		"hostname":            "host",
	} {
		p := filepath.Join(host, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "etc")
	if err := mkdirMode(dst, 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := copyEtc(context.Background(), host, dst); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"shadow", "ssl/private", "hostname"} {
		if _, err := os.Lstat(filepath.Join(dst, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s copied (%v)", gone, err)
		}
	}
	for path, want := range map[string]string{
		"python3/x.py":     "ok",
		"ssl/certs/ca.pem": "cert",
		"resolv.conf":      "nameserver 192.0.2.1\n",
		"passwd":           etcPasswd,
	} {
		got, err := os.ReadFile(filepath.Join(dst, path))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
		// A host file readable only by root becomes readable by the user.
		if fi, err := os.Stat(filepath.Join(dst, path)); err == nil && fi.Mode().Perm()&0o004 == 0 {
			t.Errorf("%s: mode %v", path, fi.Mode())
		}
	}
}

func hasBind(img *Image, source, target string) bool {
	for _, b := range img.Binds {
		if b.Source == source && b.Target == target && b.ReadOnly {
			return true
		}
	}
	return false
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
