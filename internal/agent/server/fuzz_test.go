//go:build linux

package server

import (
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// FuzzCleanPath checks the agent's check of file paths, which come from API
// clients: an accepted path is absolute, clean, under the working directory
// when relative, and outside the trees the files API never serves; a path
// with a ".." element or a NUL byte is refused; every refusal is
// invalid_argument.
func FuzzCleanPath(f *testing.F) {
	for _, p := range []string{"a.txt", "/workspace/a", "../etc/passwd", "a/../b", "/proc/self/environ", "/procfs", "/.forkbox/run/agent.sock",
		"/.forkbox", "//dev//null", "/sys/", "./x/./", "", "\x00", "/a/..", "...", "/", "dev", "/tmp/.."} {
		f.Add(p)
	}
	s := &server{cfg: wire.Config{WorkDir: "/workspace"}}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := s.cleanPath(p)
		hasDotDot := false
		for _, el := range strings.Split(p, "/") {
			hasDotDot = hasDotDot || el == ".."
		}
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("cleanPath(%q) = %v, not invalid_argument", p, err)
			}
			return
		}
		if p == "" || hasDotDot || strings.ContainsRune(p, 0) {
			t.Fatalf("cleanPath(%q) accepted it as %q", p, got)
		}
		if !path.IsAbs(got) || got != path.Clean(got) {
			t.Fatalf("cleanPath(%q) = %q: not absolute and clean", p, got)
		}
		if !strings.HasPrefix(p, "/") && got != "/workspace" && !strings.HasPrefix(got, "/workspace/") {
			t.Fatalf("cleanPath(%q) = %q: a relative path left the working directory", p, got)
		}
		for _, tree := range forbidden {
			if got == tree || strings.HasPrefix(got, tree+"/") {
				t.Fatalf("cleanPath(%q) = %q, inside %s", p, got, tree)
			}
		}
	})
}
