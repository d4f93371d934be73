package criu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/textcut"
)

const (
	// EnvPath names the environment variable that overrides where CRIU is.
	EnvPath = "FORKBOX_CRIU"
	// DefaultPath is where scripts/build-criu.sh (make setup) installs CRIU.
	DefaultPath = "/opt/forkbox/criu/sbin/criu"
	// MinVersion is the oldest CRIU that works here: older ones fail on
	// kernels >= 6.13, whose vDSO layout they do not know.
	MinVersion = "4.2"
)

// Optional kernel features, probed with `criu check --feature NAME` and
// reported in Host.Features. forkbox works without them and uses them when
// they are there.
const (
	// FeatureLazyPages: userfaultfd for non-cooperative processes, which
	// `criu restore --lazy-pages` needs.
	FeatureLazyPages = "uffd-noncoop"
	// FeatureNetworkLockNftables: locking the network with nftables
	// (`--network-lock nftables`) instead of iptables, which many hosts
	// (ours among them) lack.
	FeatureNetworkLockNftables = "network_lock_nftables"
	// FeatureDirtyTracking: soft-dirty page tracking, which pre-dumps
	// (incremental memory snapshots) need.
	FeatureDirtyTracking = "mem_dirty_track"
)

// requiredFeatures are the kernel features that dumping a whole sandbox (a
// process tree in its own mount, PID, network and cgroup namespaces) needs on
// top of what plain `criu check` tests: without them Check reports the host
// unusable.
var requiredFeatures = []string{
	"mnt_id",   // mount ids of open files, to map them into the sandbox's mounts
	"ns_pid",   // NSpid in /proc/PID/status: pids inside a nested PID namespace
	"cgroupns", // sandboxes have their own cgroup namespace
}

var optionalFeatures = []string{FeatureLazyPages, FeatureNetworkLockNftables, FeatureDirtyTracking}

// The warning `criu check` prints when hardware breakpoints do not fire, and
// the environment that makes CRIU skip them (FI_NO_BREAKPOINTS).
const (
	breakpointWarning = "Hardware breakpoints don't seem to work"
	noBreakpointsEnv  = "CRIU_FAULT=130"
)

// versionTimeout bounds `criu --version` in Find, which takes no context.
const versionTimeout = 10 * time.Second

// Host describes the CRIU that forkbox uses on this machine and what it can
// do here. Check builds it; it is read-only afterwards.
type Host struct {
	// Path is the criu binary; Version what it reports ("4.2.1").
	Path, Version string
	// Env is added to the environment of every CRIU run (see Command), for
	// example CRIU_FAULT=130 where hardware breakpoints do not work; nil when
	// nothing is needed.
	Env []string
	// Warnings are the warnings `criu check` printed, without CRIU's
	// source-location prefix.
	Warnings []string
	// Features maps each kernel feature Check probed (the required ones and
	// the Feature* constants) to whether this host has it.
	Features map[string]bool
	// Usable says whether forkbox can checkpoint and restore sandboxes here.
	Usable bool
	// LazyPages says whether restores fill memory lazily (lazy_linux.go):
	// `criu restore --lazy-pages` served by StartLazyPages. LazyProblem
	// says why not when it is false on a Usable host.
	LazyPages   bool
	LazyProblem string
	// viaDevice: restored tasks get their userfaultfd through
	// /dev/userfaultfd, which StartSwrk then hands to CRIU.
	viaDevice bool
	// Problem says, in words, what is missing when Usable is false: one
	// line, which clients see; ProblemLog is what CRIU printed, for the
	// daemon's log only.
	Problem, ProblemLog string
}

// Command returns a command that runs CRIU with args and the host's extra
// environment (h.Env after the daemon's own). The context kills CRIU when it
// is done, so bound every dump and restore with a deadline: a CRIU that hangs
// then fails instead of hanging its caller. Killing CRIU mid-dump can leave
// the dumped tree stopped or frozen; the caller resumes or kills it.
func (h *Host) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, h.Path, args...)
	if len(h.Env) > 0 {
		cmd.Env = append(os.Environ(), h.Env...)
	}
	return cmd
}

// Find returns the criu binary: $FORKBOX_CRIU, else
// /opt/forkbox/criu/sbin/criu, else criu on PATH, whichever comes first
// (a later one is not tried when an earlier one exists but does not work).
// Its version must be at least 4.2: older ones do not work on kernels
// >= 6.13. Errors are errdefs.ErrUnavailable and say how to get a good one.
func Find() (path string, version string, err error) {
	const fix = "run `make setup` (scripts/build-criu.sh builds CRIU 4.2.1 into /opt/forkbox/criu) or set " + EnvPath
	switch {
	case os.Getenv(EnvPath) != "":
		path = os.Getenv(EnvPath)
	case fileExists(DefaultPath):
		path = DefaultPath
	default:
		p, err := exec.LookPath("criu")
		if err != nil {
			return "", "", errdefs.Unavailable("criu not found: neither $%s, %s nor criu on PATH; %s",
				EnvPath, DefaultPath, fix)
		}
		path = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", "", errdefs.Unavailable("criu at %s does not run (`criu --version`: %v: %s); %s",
			path, err, firstLine(out), fix)
	}
	version = parseVersion(out)
	if version == "" {
		return "", "", errdefs.Unavailable("criu at %s printed no version (%q); %s", path, firstLine(out), fix)
	}
	if !versionAtLeast(version, MinVersion) {
		return "", "", errdefs.Unavailable("criu %s at %s is older than %s, and CRIU before %s does not work on kernels >= 6.13; %s",
			version, path, MinVersion, MinVersion, fix)
	}
	return path, version, nil
}

// Check finds CRIU (see Find) and tests this host with it: `criu check`,
// then `criu check --feature NAME` for the features forkbox needs and those
// it can use. It returns an error only when CRIU cannot be found or run or
// ctx ends; a host that CRIU cannot serve is a Host with Usable false and a
// Problem. It needs root, like CRIU itself, and takes well under a second
// (seven short CRIU runs: ~0.25 s on a 2-core VM once the first has written
// CRIU's kernel-feature cache, 0.6-0.8 s without one), so call it once at
// start. It makes KdatDir a tmpfs for that cache (kdat_linux.go).
func Check(ctx context.Context) (*Host, error) {
	path, version, err := Find()
	if err != nil {
		return nil, err
	}
	h := &Host{Path: path, Version: version, Features: map[string]bool{}}
	if err := ensureKdatDir(); err != nil {
		h.Warnings = append(h.Warnings, "no kernel-feature cache (every CRIU run probes the kernel again): "+err.Error())
	}

	// Plain `criu check` first, alone: it writes CRIU's kernel-feature cache
	// (in KdatDir), which the feature probes and every later run read.
	out, err := exec.CommandContext(ctx, path, "check").CombinedOutput()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("criu check: %w", ctx.Err())
	}
	h.Warnings = append(h.Warnings, warnings(out)...)
	if strings.Contains(string(out), breakpointWarning) {
		h.Env = []string{noBreakpointsEnv}
	}
	if err != nil {
		// One line for clients (a memory snapshot's 503 says it); what
		// CRIU printed is for the daemon's log (ProblemLog).
		reason := FailureReason(out)
		if reason == "" {
			reason = firstLine(out)
		}
		h.Problem = fmt.Sprintf("`%s check` failed (%v): %s", path, err, textcut.Prefix(reason, maxReason))
		if os.Geteuid() != 0 {
			h.Problem += " (CRIU needs root)"
		}
		h.ProblemLog = errorText(out)
		return h, nil
	}

	features := append(append([]string(nil), requiredFeatures...), optionalFeatures...)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, f := range features {
		wg.Go(func() {
			ok := exec.CommandContext(ctx, path, "check", "--feature", f).Run() == nil
			mu.Lock()
			h.Features[f] = ok
			mu.Unlock()
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("criu check --feature: %w", ctx.Err())
	}

	var missing []string
	for _, f := range requiredFeatures {
		if !h.Features[f] {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		h.Problem = fmt.Sprintf("this kernel lacks what CRIU needs to checkpoint a sandbox (`criu check --feature` fails for: %s)",
			strings.Join(missing, ", "))
		return h, nil
	}
	h.Usable = true
	h.viaDevice, h.LazyProblem = lazyPagesSupport(path, h.Features)
	h.LazyPages = h.LazyProblem == ""
	return h, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

var versionRE = regexp.MustCompile(`(?m)^Version:\s*(\S+)`)

// parseVersion returns the version in `criu --version` output
// ("Version: 4.2.1\n", maybe followed by "GitID: ...").
func parseVersion(out []byte) string {
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// versionAtLeast compares dotted numeric versions; a component's non-digit
// tail ("1-rc2") is ignored, and missing components count as 0.
func versionAtLeast(version, min string) bool {
	a, b := versionParts(version), versionParts(min)
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return x > y
		}
	}
	return true
}

func versionParts(v string) []int {
	var parts []int
	for _, s := range strings.Split(v, ".") {
		end := 0
		for end < len(s) && s[end] >= '0' && s[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(s[:end])
		if err != nil {
			break
		}
		parts = append(parts, n)
		if end < len(s) {
			break
		}
	}
	return parts
}

// logPrefix matches CRIU's message prefix: "Warn  (criu/kerndat.c:1799): ".
var logPrefix = regexp.MustCompile(`^(Warn|Error)\s+\([^)]*\):\s*`)

// warnings returns CRIU's warning messages in out, prefix removed, each once.
func warnings(out []byte) []string {
	var ws []string
	seen := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "Warn") {
			continue
		}
		msg := strings.TrimSpace(logPrefix.ReplaceAllString(line, ""))
		// The same fact is often warned twice, once by the probe with a
		// detail in parentheses and once by the check.
		key, _, _ := strings.Cut(msg, " (")
		if msg == "" || seen[key] {
			continue
		}
		seen[key] = true
		ws = append(ws, msg)
	}
	return ws
}

// errorText returns CRIU's error messages in out, or its last lines when it
// printed none, in one line.
func errorText(out []byte) string {
	var msgs []string
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		if strings.HasPrefix(line, "Error") {
			msgs = append(msgs, strings.TrimSpace(logPrefix.ReplaceAllString(line, "")))
		}
	}
	if len(msgs) == 0 {
		msgs = lines[max(0, len(lines)-3):]
	}
	return strings.Join(msgs, "; ")
}

func firstLine(out []byte) string {
	line, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
	return string(line)
}
