package image

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// hostPythonRecipe versions the host-derived python image. Bump it whenever
// the skeleton, the /etc allowlist, the binds or the defaults change: stores
// holding an older version rebuild the image on the next EnsureHostPython.
const hostPythonRecipe = "host-python/4"

// hostPython is what the python image promises: this interpreter, able to
// import these modules (scripts/setup.sh installs them).
const (
	hostPython        = "/usr/bin/python3"
	hostPythonImports = "import ipykernel, pandas, numpy, matplotlib, scipy, seaborn, sklearn"
)

// The sandbox user of the python image.
const (
	userUID  = 1000
	userGID  = 1000
	userHome = "/home/user"
	workDir  = "/workspace"
)

// hostPythonEnv are the python image's default environment variables.
var hostPythonEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=" + userHome,
	"USER=user",
	"SHELL=/bin/bash",
	"LANG=C.UTF-8",
	"MPLBACKEND=Agg",
	"PYTHONUNBUFFERED=1",
}

// etcAllow lists the host /etc entries (globs, relative to /etc) that the
// python image copies: what the Debian userland under the host's /usr reads
// at run time (alternatives symlinks, the dynamic linker's cache, Python,
// matplotlib, fonts, CA certificates, name service and locale basics).
// Symlinks are copied as symlinks. Anything not listed stays on the host;
// etcDeny is checked as well, so a glob can never bring in a secret.
var etcAllow = []string{
	"alternatives",
	"python3*",
	"matplotlibrc",
	"R", // the R kernel's Renviron and Rprofile
	"fonts",
	"ssl/certs",
	"ssl/openssl.cnf",
	"ca-certificates.conf",
	"ld.so.cache",
	"ld.so.conf",
	"ld.so.conf.d",
	"nsswitch.conf",
	"localtime",
	"timezone",
	"mime.types",
	"gai.conf",
	"host.conf",
	"protocols",
	"services",
	"networks",
	"ethertypes",
	"debian_version",
	"os-release",
	"lsb-release",
	"profile",
	"bash.bashrc",
	"environment",
	"login.defs",
	"shells",
	"inputrc",
	"locale.alias",
	"mailcap",
}

// etcDeny names host /etc entries that never enter an image, whatever the
// allowlist says. passwd, group and hosts are generated instead.
var etcDeny = map[string]bool{
	"passwd": true, "passwd-": true, "group": true, "group-": true,
	"shadow": true, "shadow-": true, "gshadow": true, "gshadow-": true,
	"sudoers": true, "sudoers.d": true, "ssh": true, "ssl/private": true,
	"machine-id": true, "hostname": true, "hosts": true, "resolv.conf": true,
	"subuid": true, "subgid": true, "security/opasswd": true,
}

// Generated /etc files of the python image. resolv.conf is the host's
// content (not a symlink to it), so a sandbox with network access resolves
// names the way the host does.
const (
	etcPasswd = "root:x:0:0:root:/root:/bin/bash\n" +
		"user:x:1000:1000::/home/user:/bin/bash\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	etcGroup = "root:x:0:\n" +
		"user:x:1000:\n" +
		"nogroup:x:65534:\n"
	etcHosts = "127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n"
)

// EnsureHostPython returns the "python" image, building it first if it is
// missing or was built by an older recipe version; otherwise it only reads
// image.json. The image is derived from the host: the host's /usr (with its
// python3 and data-science packages) is bind-mounted read-only over an
// empty /usr in a small skeleton root with its own /etc. Building checks
// that the host has what the image promises and fails with an error that
// says how to install it (make setup) when it does not.
func (s *Store) EnsureHostPython(ctx context.Context) (*Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	img, err := s.Get(ctx, HostImage)
	if err == nil && img.Recipe == hostPythonRecipe && img.RootFS == filepath.Join(s.dir, HostImage, "rootfs") {
		return img, nil
	}
	// Missing, older, moved or unreadable: (re)build. The image is derived
	// from the host, so rebuilding loses nothing.
	if err := checkPython(ctx, hostPython, hostPythonImports); err != nil {
		return nil, err
	}
	return s.buildHostPython(ctx)
}

// checkPython verifies that the host's python (hostPython) runs imports (the
// stack the python image promises). It takes a few seconds, so it runs only
// on builds.
func checkPython(ctx context.Context, python, imports string) error {
	const fix = "install the host packages with `make setup` (scripts/setup.sh, as root)"
	if _, err := os.Stat(python); err != nil {
		return errdefs.Unavailable("python image: the host has no %s (%v); %s", python, err, fix)
	}
	cmd := exec.CommandContext(ctx, python, "-c", imports)
	cmd.Env = pythonCheckEnv()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return errdefs.Unavailable("python image: host %s cannot %q: %s; %s",
			python, imports, lastLine(out, err), fix)
	}
	return nil
}

// pythonCheckEnv is the daemon's environment without the variables that
// would make the host's python3 import something other than what a sandbox
// gets (PYTHONPATH, PYTHONHOME, ...).
func pythonCheckEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHON") {
			env = append(env, kv)
		}
	}
	return append(env, "MPLBACKEND=Agg")
}

// lastLine returns the last non-empty line of a command's output, which for
// Python is the exception ("ModuleNotFoundError: No module named 'seaborn'").
func lastLine(out []byte, err error) string {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if l := strings.TrimSpace(string(lines[len(lines)-1])); l != "" {
		return l
	}
	return err.Error()
}
