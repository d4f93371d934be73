package build

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/lazyre"
)

var validSuite = lazyre.New(`^[a-z][a-z0-9-]{1,31}$`)

// defaultMirror is used when the host's apt configuration names none.
const defaultMirror = "http://deb.debian.org/debian"

var timeNow = func() time.Time { return time.Now().UTC() }

// debianBase bootstraps (or finds in the cache) a minimal Debian suite with
// debootstrap --variant=minbase from mirror, the host's mirror by default.
func (b *Builder) debianBase(ctx context.Context, suite, mirror string, total int, emit func(api.BuildEvent)) (*state, error) {
	if !validSuite.MatchString(suite) {
		return nil, errdefs.InvalidArgument("base debian:%s: not a Debian suite name (like bookworm)", suite)
	}
	if mirror == "" {
		mirror = b.hostMirror()
	}
	if !strings.HasPrefix(mirror, "http://") && !strings.HasPrefix(mirror, "https://") {
		return nil, errdefs.InvalidArgument("mirror %q: want an http:// or https:// URL", mirror)
	}
	arch := debianArch()
	id := image.ChainID("", fmt.Sprintf("debootstrap:%s:minbase:%s:%s", suite, arch, mirror))
	ev := api.BuildEvent{Type: api.BuildEventStep, Step: 0, Total: total, Kind: "base",
		Detail: "debian:" + suite + " (debootstrap minbase from " + mirror + ")", Cached: b.images.HasLayer(id)}
	emit(ev)
	if !ev.Cached {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			return nil, errdefs.Unavailable("base debian:%s needs debootstrap on the host: install it with `make setup` (apt-get install debootstrap)", suite)
		}
		l := &image.Layer{ID: id, CreatedBy: "debootstrap --variant=minbase " + suite + " " + mirror}
		err := b.images.CommitLayer(ctx, l, func(dir string) error {
			return debootstrap(ctx, suite, arch, mirror, dir, func(line string) {
				emit(api.BuildEvent{Type: api.BuildEventLog, Step: 0, Total: total, Line: line})
			})
		})
		if err != nil {
			return nil, err
		}
	}
	return &state{chain: id, parent: id, img: image.Image{
		Layers: []string{id}, Env: append([]string(nil), baseEnv...), WorkDir: "/", UID: 1000, GID: 1000,
	}}, nil
}

// debootstrap bootstraps suite into dir. It runs in a mount namespace of its
// own so that the /proc and /sys it mounts in the target never show on the
// host, and leaves out what belongs to the host it ran on (hostname,
// resolv.conf) and apt's caches.
func debootstrap(ctx context.Context, suite, arch, mirror, dir string, logLine func(string)) error {
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private",
		"debootstrap", "--variant=minbase", "--arch="+arch, suite, dir, mirror)
	cmd.Env = append(os.Environ(), "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive")
	// debootstrap starts wget, dpkg and chroots that outlive a killed
	// parent: run it as a process group and end the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	out := newTail(32 << 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		streamLines(pr, func(line string) {
			out.Write([]byte(line + "\n"))
			logLine(line)
		})
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		text := out.String()
		if diskspace.InOutput(text) {
			return diskspace.Full(dir, "the debootstrap of debian:"+suite, 0, false, fmt.Errorf("debootstrap %s: %v: %s", suite, err, lastLines(text, 10)))
		}
		if strings.Contains(text, "No such script") || strings.Contains(text, "Failed getting release file") {
			return errdefs.NotFound("base debian:%s: no such suite at %s: %s", suite, mirror, lastLines(text, 3))
		}
		return fmt.Errorf("debootstrap %s: %v: %s", suite, err, lastLines(text, 10))
	}
	for _, p := range []string{"etc/hostname", "etc/resolv.conf"} {
		if err := os.Remove(filepath.Join(dir, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	for _, glob := range []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*"} {
		matches, _ := filepath.Glob(filepath.Join(dir, glob))
		for _, m := range matches {
			if err := os.Remove(m); err != nil {
				return err
			}
		}
	}
	return os.WriteFile(filepath.Join(dir, "etc/hosts"), []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"), 0o644)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// debianArch is Debian's name of this machine's architecture.
func debianArch() string {
	switch goruntime.GOARCH {
	case "386":
		return "i386"
	case "arm":
		return "armhf"
	}
	return goruntime.GOARCH // amd64, arm64, ppc64le, s390x, riscv64 are the same
}

// hostMirror returns the Debian mirror the host's apt uses (the first
// non-security URI of /etc/apt/sources.list or sources.list.d), else
// deb.debian.org.
func (b *Builder) hostMirror() string {
	b.mirrorOnce.Do(func() {
		b.mirror = b.cfg.Mirror
		if b.mirror == "" {
			b.mirror = findMirror("/etc/apt")
		}
	})
	return b.mirror
}

func findMirror(aptDir string) string {
	files := []string{filepath.Join(aptDir, "sources.list")}
	more, _ := filepath.Glob(filepath.Join(aptDir, "sources.list.d", "*"))
	files = append(files, more...)
	for _, f := range files {
		if u := mirrorIn(f); u != "" {
			return u
		}
	}
	return defaultMirror
}

// mirrorIn reads one apt sources file, one-line ("deb URI suite ...") or
// deb822 ("URIs: ..."), and returns its first Debian archive URI.
func mirrorIn(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		var uris []string
		switch {
		case strings.HasPrefix(line, "deb "):
			fields := strings.Fields(line)[1:]
			if len(fields) > 0 && strings.HasPrefix(fields[0], "[") {
				for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
					fields = fields[1:]
				}
				if len(fields) > 0 {
					fields = fields[1:]
				}
			}
			if len(fields) > 0 {
				uris = fields[:1]
			}
		case strings.HasPrefix(strings.ToLower(line), "uris:"):
			uris = strings.Fields(line[len("uris:"):])
		}
		for _, u := range uris {
			u = strings.TrimRight(u, "/")
			if (strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")) && strings.HasSuffix(u, "/debian") {
				return u
			}
		}
	}
	return ""
}
