package e2e

// TestREADME pastes README.md into a shell, as a new user does, against a
// daemon of its own (a temporary data dir; serve's default on-exit policy,
// as `make run` starts it), and checks that every block works and prints
// what its comments promise. At the end, pass or fail, it deletes what the
// README made in every tenant: pools, sandboxes, snapshots and the images
// that were not there before. The README's conventions:
//
//   - Every fenced block is run or explicitly skipped; any other block
//     fails the test, so the README cannot drift from what works.
//     ```sh blocks run in order in one bash session (each block under
//     set -e and pipefail; variables, exports and the working directory
//     carry over to the next block), with the forkbox under test on PATH
//     (as `make install` puts it there) and TMPDIR in a temporary directory.
//     ```python blocks run with the Python SDK installed offline in a venv,
//     ```js blocks with node and E2B's SDK (test/e2bcompat/node_modules),
//     both in the shell's working directory and environment of the moment,
//     and must exit 0.
//   - `<!-- readme-test: skip (why) -->` on the line before a fence skips
//     the block (it starts a daemon, needs a model provider, ...).
//   - `<!-- readme-test: restart VAR=VALUE ... -->` on the line before a
//     fence stands for a block that restarts the daemon: the test stops its
//     daemon (SIGTERM) and starts it again on the same address and data dir
//     with those variables, instead of running the block.
//   - `# → TEXT` (`// → TEXT` in js), at the end of a command's last line
//     or on comment lines right after the command, is output that command
//     must print (stdout and stderr together). In python and js blocks the
//     TEXTs must appear in the program's output in order. Matching is on
//     substrings with all whitespace removed from both sides (JSON
//     indentation and table column widths do not matter), and `…` in TEXT
//     stands for any text. Other comments are prose and are not checked.
//   - 127.0.0.1:8080 and localhost:8080 (the daemon's default address)
//     are replaced by the test daemon's address.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/sandbox"
)

// readmeBlock is one fenced block of the README.
type readmeBlock struct {
	line   int    // line of the opening fence, 1-based
	lang   string // the fence's info string
	marker string // the readme-test marker before it, if any
	body   string
}

var (
	readmeFence  = regexp.MustCompile("^\\s*```\\s*([A-Za-z0-9_+-]*)\\s*$")
	readmeMarker = regexp.MustCompile(`^\s*<!--\s*readme-test:\s*(.*?)\s*-->\s*$`)
	readmeClose  = regexp.MustCompile("^\\s*```\\s*$")
)

// readmeBlocks parses the fenced blocks of a Markdown file.
func readmeBlocks(text string) ([]readmeBlock, error) {
	lines := strings.Split(text, "\n")
	var blocks []readmeBlock
	for i := 0; i < len(lines); i++ {
		m := readmeFence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := readmeBlock{line: i + 1, lang: m[1]}
		if i > 0 {
			if mm := readmeMarker.FindStringSubmatch(lines[i-1]); mm != nil {
				b.marker = mm[1]
			}
		}
		var body []string
		j := i + 1
		for ; j < len(lines) && !readmeClose.MatchString(lines[j]); j++ {
			body = append(body, lines[j])
		}
		if j == len(lines) {
			return nil, fmt.Errorf("line %d: the fence is never closed", b.line)
		}
		b.body = strings.Join(body, "\n") + "\n"
		blocks = append(blocks, b)
		i = j
	}
	return blocks, nil
}

// readmeCommand is one command of a shell block: its lines (continuations
// and heredocs included) and the output it promises.
type readmeCommand struct {
	line   int // line in the README
	text   string
	expect []string
}

var (
	readmeHeredoc = regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)
	readmeArrow   = regexp.MustCompile(`(?:^|\s)(?:#|//) → (.*)$`)
	readmeArrowLn = regexp.MustCompile(`^\s*(?:#|//) → (.*)$`)
)

// shellCommands splits a shell block into commands.
func shellCommands(b readmeBlock) []readmeCommand {
	lines := strings.Split(strings.TrimSuffix(b.body, "\n"), "\n")
	var cmds []readmeCommand
	var cur *readmeCommand
	for i := 0; i < len(lines); i++ {
		ln := lines[i]
		trimmed := strings.TrimSpace(ln)
		if m := readmeArrowLn.FindStringSubmatch(ln); m != nil {
			if cur != nil {
				cur.expect = append(cur.expect, m[1])
			}
			continue
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			cur = nil // prose: a later arrow line belongs to no command
			continue
		}
		c := readmeCommand{line: b.line + 1 + i}
		text := []string{ln}
		// A heredoc's body, then continuation lines, belong to the command.
		for {
			last := text[len(text)-1]
			if m := readmeHeredoc.FindStringSubmatch(last); m != nil {
				for i+1 < len(lines) {
					i++
					text = append(text, lines[i])
					if strings.TrimSpace(lines[i]) == m[1] {
						break
					}
				}
				continue
			}
			if strings.HasSuffix(last, "\\") && i+1 < len(lines) {
				i++
				text = append(text, lines[i])
				continue
			}
			break
		}
		if m := readmeArrow.FindStringSubmatch(text[len(text)-1]); m != nil && !readmeHeredoc.MatchString(text[0]) {
			c.expect = append(c.expect, m[1])
		}
		c.text = strings.Join(text, "\n")
		cmds = append(cmds, c)
		cur = &cmds[len(cmds)-1]
	}
	return cmds
}

// programExpects is the promised output of a python or js block, in order.
func programExpects(body string) []string {
	var out []string
	for _, ln := range strings.Split(body, "\n") {
		if m := readmeArrow.FindStringSubmatch(ln); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

var readmeSpace = regexp.MustCompile(`\s+`)

// readmeMatch reports whether output contains want, whitespace ignored and
// … standing for any text, and returns where the match ends.
func readmeMatch(output, want string) (int, bool) {
	out := readmeSpace.ReplaceAllString(output, "")
	parts := strings.Split(readmeSpace.ReplaceAllString(want, ""), "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	loc := regexp.MustCompile(`(?s)` + strings.Join(parts, ".*?")).FindStringIndex(out)
	if loc == nil {
		return 0, false
	}
	return loc[1], true
}

// readmeShell is the bash session the sh blocks run in.
type readmeShell struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	chunks chan []byte
	done   chan struct{}
	dir    string // for block scripts and the environment dumps
}

const readmeSep = "\x1e" // starts the shell's marker lines

func startReadmeShell(t *testing.T, env []string, workDir, dir string) *readmeShell {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &readmeShell{chunks: make(chan []byte, 1024), done: make(chan struct{}), dir: dir}
	s.cmd = exec.Command("bash", "--norc", "--noprofile")
	s.cmd.Dir = workDir
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = w, w
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() {
		defer close(s.chunks)
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				s.chunks <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				r.Close()
				return
			}
		}
	}()
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.stdin.Close()
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	})
	return s
}

// run runs one block's commands and returns each command's output; ok is
// false when the block failed (the shell exited) or timed out.
func (s *readmeShell) run(n int, cmds []readmeCommand, timeout time.Duration) (outs []string, all string, ok bool) {
	var script strings.Builder
	for i, c := range cmds {
		fmt.Fprintf(&script, "printf '\\n%s%d\\n'\n%s\n", readmeSep, i, c.text)
	}
	path := filepath.Join(s.dir, fmt.Sprintf("block%d.sh", n))
	if err := os.WriteFile(path, []byte(script.String()), 0o644); err != nil {
		return nil, err.Error(), false
	}
	envPath := filepath.Join(s.dir, "env")
	fmt.Fprintf(s.stdin, "set -e -o pipefail; . %s; set +e +o pipefail; env -0 > %s; printf '\\n%sEND\\n'\n", path, envPath, readmeSep)
	var buf bytes.Buffer
	deadline := time.After(timeout)
	end := []byte("\n" + readmeSep + "END\n")
loop:
	for !bytes.Contains(buf.Bytes(), end) {
		select {
		case c, open := <-s.chunks:
			if !open {
				break loop
			}
			buf.Write(c)
		case <-deadline:
			break loop
		}
	}
	all = buf.String()
	ok = bytes.Contains(buf.Bytes(), end)
	all = strings.TrimSuffix(all, string(end))
	// Split at the markers: "\n\x1eN\n" precedes command N's output.
	outs = make([]string, len(cmds))
	parts := strings.Split(all, "\n"+readmeSep)
	for _, p := range parts[1:] {
		var i int
		nl := strings.IndexByte(p, '\n')
		if nl < 0 {
			nl = len(p)
		}
		if _, err := fmt.Sscanf(p[:nl], "%d", &i); err == nil && i < len(outs) {
			outs[i] = strings.TrimPrefix(p[nl:], "\n")
		}
	}
	return outs, all, ok
}

// env is the session's exported environment after the last block.
func (s *readmeShell) env() ([]string, string) {
	b, _ := os.ReadFile(filepath.Join(s.dir, "env"))
	var env []string
	pwd := ""
	for _, kv := range strings.Split(string(b), "\x00") {
		if kv == "" {
			continue
		}
		env = append(env, kv)
		if v, ok := strings.CutPrefix(kv, "PWD="); ok {
			pwd = v
		}
	}
	return env, pwd
}

// readmeCall is an admin call to d for the cleanup.
func readmeCall(d *daemon, key, tenant, method, path string, out any) {
	req, err := http.NewRequest(method, "http://"+d.addr+path, nil)
	if err != nil {
		return
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if tenant != "" {
		req.Header.Set("X-Forkbox-Tenant", tenant)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
}

// readmeCleanup deletes what the README made on d, in every tenant: pools
// first (they refill), sandboxes, snapshots, then the images that were not
// there before.
func readmeCleanup(d *daemon, key string, imagesBefore map[string]bool) {
	tenants := []string{""}
	if key != "" {
		var tl api.TenantList
		readmeCall(d, key, "", "GET", "/v1/tenants", &tl)
		for _, tn := range tl.Tenants {
			tenants = append(tenants, tn.Name)
		}
	}
	for _, tn := range tenants {
		var pools api.PoolList
		readmeCall(d, key, tn, "GET", "/v1/pools", &pools)
		for _, p := range pools.Pools {
			readmeCall(d, key, tn, "DELETE", "/v1/pools/"+p.Name, nil)
		}
		var sbs api.SandboxList
		readmeCall(d, key, tn, "GET", "/v1/sandboxes", &sbs)
		for _, sb := range sbs.Sandboxes {
			if sb.State != api.StateTerminated {
				readmeCall(d, key, tn, "DELETE", "/v1/sandboxes/"+sb.ID, nil)
			}
		}
		var snaps api.SnapshotList
		readmeCall(d, key, tn, "GET", "/v1/snapshots", &snaps)
		for _, s := range snaps.Snapshots {
			readmeCall(d, key, tn, "DELETE", "/v1/snapshots/"+s.ID, nil)
		}
		var imgs api.ImageList
		readmeCall(d, key, tn, "GET", "/v1/images", &imgs)
		for _, im := range imgs.Images {
			if !imagesBefore[im.Name] {
				readmeCall(d, key, tn, "DELETE", "/v1/images/"+im.Name, nil)
			}
		}
	}
}

func TestREADME(t *testing.T) {
	needRoot(t)
	text, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readmeBlocks(string(text))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	// Every block is run or skipped on purpose, before anything runs.
	for _, b := range blocks {
		switch {
		case strings.HasPrefix(b.marker, "skip"):
			if !regexp.MustCompile(`^skip\s*\(.+\)$`).MatchString(b.marker) {
				t.Errorf("README.md:%d: a skip marker says why: <!-- readme-test: skip (why) -->", b.line)
			}
		case strings.HasPrefix(b.marker, "restart"):
		case b.marker != "":
			t.Errorf("README.md:%d: unknown marker %q", b.line, b.marker)
		case b.lang == "sh" || b.lang == "python" || b.lang == "js":
		default:
			t.Errorf("README.md:%d: a ```%s block is neither run (sh, python, js) nor skipped with <!-- readme-test: skip (why) -->", b.line, b.lang)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	root := t.TempDir()
	// As `make run` starts it: serve's default on-exit policy and its
	// default pool (so every block also runs on sandboxes handed out
	// from it).
	addr, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	poolArgs := []string{fmt.Sprintf("--default-pool=%d", sandbox.DefaultPoolSize)}
	d := &daemon{dataDir: filepath.Join(root, "data"), addr: addr, defaultOnExit: true, args: poolArgs}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	key := "" // the daemon's admin key, once a restart sets one
	var imgs api.ImageList
	readmeCall(d, "", "", "GET", "/v1/images", &imgs)
	imagesBefore := map[string]bool{}
	for _, im := range imgs.Images {
		imagesBefore[im.Name] = true
	}
	t.Cleanup(func() {
		if d.exited == nil { // a restart that did not start
			return
		}
		readmeCleanup(d, key, imagesBefore)
		d.stop()
	})

	work, scratch := filepath.Join(root, "work"), filepath.Join(root, "scratch")
	tmp := filepath.Join(root, "tmp")
	for _, dir := range []string{work, scratch, tmp} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "FORKBOX_URL") || k == "FORKBOX_API_KEY" || strings.HasPrefix(k, "E2B_") || k == "TMPDIR" || k == "PATH" {
			continue
		}
		env = append(env, kv)
	}
	absBin, err := filepath.Abs(binary)
	if err != nil {
		t.Fatal(err)
	}
	env = append(env, "PATH="+filepath.Dir(absBin)+":"+os.Getenv("PATH"), "TMPDIR="+tmp)
	sh := startReadmeShell(t, env, work, scratch)
	localize := func(s string) string {
		return strings.NewReplacer("127.0.0.1:8080", addr, "localhost:8080", addr).Replace(s)
	}

	var venv string
	start := time.Now()
	for n, b := range blocks {
		where := fmt.Sprintf("README.md:%d (```%s)", b.line, b.lang)
		if strings.HasPrefix(b.marker, "skip") {
			t.Logf("%s: skipped: %s", where, strings.TrimSpace(strings.TrimPrefix(b.marker, "skip")))
			continue
		}
		if r, ok := strings.CutPrefix(b.marker, "restart"); ok {
			denv := strings.Fields(r)
			// As Ctrl-C does: the daemon applies its on-exit policy
			// (suspending a sandbox takes a second or two) and exits.
			d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.exited:
			case <-time.After(2 * time.Minute):
				t.Fatalf("%s: the daemon did not exit within 2 minutes of SIGTERM; log:\n%s", where, d.logTail())
			}
			d.log.Close()
			d = &daemon{dataDir: d.dataDir, addr: addr, env: denv, defaultOnExit: true, args: poolArgs}
			for _, kv := range denv {
				if v, ok := strings.CutPrefix(kv, "FORKBOX_API_KEY="); ok {
					key = v
				}
			}
			if err := d.start(); err != nil {
				t.Fatalf("%s: restart the daemon with %v: %v", where, denv, err)
			}
			t.Logf("%s: restarted the daemon with %v", where, denv)
			continue
		}
		blockStart := time.Now()
		switch b.lang {
		case "sh":
			cmds := shellCommands(b)
			for i := range cmds {
				cmds[i].text = localize(cmds[i].text)
			}
			outs, all, ok := sh.run(n, cmds, 4*time.Minute)
			if !ok {
				failed := "the block"
				for i := len(outs) - 1; i >= 0; i-- {
					if strings.Contains(all, fmt.Sprintf("\n%s%d\n", readmeSep, i)) {
						failed = fmt.Sprintf("README.md:%d: %s", cmds[i].line, cmds[i].text)
						break
					}
				}
				t.Fatalf("%s failed (or timed out) at %s\noutput:\n%s\ndaemon log:\n%s", where, failed, all, d.logTail())
			}
			for i, c := range cmds {
				for _, want := range c.expect {
					if _, ok := readmeMatch(outs[i], want); !ok {
						t.Errorf("README.md:%d: %s\nprinted:\n%s\nwhich lacks what the README promises: %s", c.line, c.text, outs[i], want)
					}
				}
			}
		case "python", "js":
			senv, pwd := sh.env()
			if pwd == "" {
				pwd = work
			}
			var cmd *exec.Cmd
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			if b.lang == "python" {
				if venv == "" {
					venv, _ = sdkPyInstall(t)
				}
				script := filepath.Join(scratch, fmt.Sprintf("block%d.py", n))
				if err := os.WriteFile(script, []byte(b.body), 0o644); err != nil {
					t.Fatal(err)
				}
				cmd = exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), script)
				senv = append(senv, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
			} else {
				mods, err := filepath.Abs("../e2bcompat/node_modules")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(filepath.Join(mods, "@e2b", "code-interpreter")); err != nil {
					t.Fatalf("%s: E2B's SDK is not installed: run `make setup` (scripts/setup.sh runs npm ci in test/e2bcompat): %v", where, err)
				}
				// ES modules resolve packages from the script's directory up.
				jsDir := filepath.Join(scratch, fmt.Sprintf("js%d", n))
				if err := os.MkdirAll(jsDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(mods, filepath.Join(jsDir, "node_modules")); err != nil {
					t.Fatal(err)
				}
				script := filepath.Join(jsDir, "readme.mjs")
				if err := os.WriteFile(script, []byte(b.body), 0o644); err != nil {
					t.Fatal(err)
				}
				cmd = exec.CommandContext(ctx, "node", script)
			}
			cmd.Dir, cmd.Env = pwd, senv
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("%s: %v\noutput:\n%s\ndaemon log:\n%s", where, err, out, d.logTail())
			}
			rest := string(out)
			for _, want := range programExpects(b.body) {
				end, ok := readmeMatch(rest, want)
				if !ok {
					t.Errorf("%s printed:\n%s\nwhich lacks (in order) what the README promises: %s", where, out, want)
					break
				}
				rest = readmeSpaceCut(rest, end)
			}
		}
		t.Logf("%s: ran in %.1fs", where, time.Since(blockStart).Seconds())
	}
	t.Logf("README.md: %d blocks in %.1fs", len(blocks), time.Since(start).Seconds())
}

// readmeSpaceCut drops the start of s up to the n-th byte that is not
// whitespace (as readmeMatch counts them).
func readmeSpaceCut(s string, n int) string {
	for i, r := range s {
		if n <= 0 {
			return s[i:]
		}
		if !strings.ContainsRune(" \t\r\n\f", r) {
			n -= utf8.RuneLen(r)
		}
	}
	return ""
}
