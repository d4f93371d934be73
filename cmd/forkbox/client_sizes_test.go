package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestParseMiB(t *testing.T) {
	for in, want := range map[string]int64{
		"2048": 2048, "512M": 512, "512m": 512, "512MiB": 512, "512MB": 512, "1G": 1024, "1g": 1024, "1.5G": 1536,
		"1GiB": 1024, "2T": 2 << 20, "1024K": 1, "1K": 1, "0.5": 1, " 256 ": 256,
	} {
		if got, err := parseMiB(in); err != nil || got != want {
			t.Errorf("parseMiB(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "1X", "1GX", "-1G", "1e30G", "one", "1.5.5G", "NaNG", "InfG"} {
		if got, err := parseMiB(in); err == nil {
			t.Errorf("parseMiB(%q) = %d, want an error", in, got)
		}
	}
	f := mibFlag{name: "memory"}
	if err := f.Set("-1"); err == nil || err.Error() != `--memory: "-1" is not a size; use 512M, 1G or a number of MiB` {
		t.Errorf("--memory -1: %v", err)
	}
	q := mibFlag{name: "max-memory-mb", unlimited: true}
	if err := q.Set("-1"); err != nil || q.mib != -1 {
		t.Errorf("quota -1: %d %v", q.mib, err)
	}
	if err := q.Set("-2"); err == nil {
		t.Error("quota -2: want an error")
	}
}

func TestHumanMiB(t *testing.T) {
	for mib, want := range map[int64]string{0: "-", 64: "64 MiB", 1023: "1023 MiB", 1024: "1 GiB", 1536: "1.5 GiB", 23552: "23 GiB", 24105: "23.5 GiB"} {
		if got := humanMiB(mib); got != want {
			t.Errorf("humanMiB(%d) = %q, want %q", mib, got, want)
		}
	}
	for secs, want := range map[int64]string{300: "5m", 45: "45s", 3600: "1h", 90: "1m30s"} {
		if got := humanSecs(secs); got != want {
			t.Errorf("humanSecs(%d) = %q, want %q", secs, got, want)
		}
	}
}

// create takes sizes with units and sends MiB; a bad size is named with
// the way to write one, and nothing is sent.
func TestCLICreateSizes(t *testing.T) {
	d, url := newFakeDaemon(t)
	for _, c := range []struct {
		memory, disk string
		want         string
	}{
		{"1G", "4G", `"disk_mb":4096,"memory_mb":1024`},
		{"1.5G", "2048", `"disk_mb":2048,"memory_mb":1536`},
		{"512MiB", "10GiB", `"disk_mb":10240,"memory_mb":512`},
		{"2048", "512m", `"disk_mb":512,"memory_mb":2048`},
	} {
		if _, _, err := cli(t, url, "", "create", "--memory", c.memory, "--disk", c.disk); err != nil {
			t.Fatalf("--memory %s --disk %s: %v", c.memory, c.disk, err)
		}
		if got, _ := json.Marshal(d.lastReq); string(got) != "{"+c.want+"}" {
			t.Errorf("--memory %s --disk %s sent %s, want {%s}", c.memory, c.disk, got, c.want)
		}
	}
	d.lastReq = nil
	for _, c := range []struct{ args []string }{
		{[]string{"create", "--memory", "1X"}},
		{[]string{"create", "--disk", "lots"}},
		{[]string{"create", "--memory=-5"}},
	} {
		_, _, err := cli(t, url, "", c.args...)
		flag, value, _ := strings.Cut(strings.TrimPrefix(strings.Join(c.args[1:], "="), "--"), "=")
		want := "--" + flag + `: "` + value + `" is not a size; use 512M, 1G or a number of MiB`
		if err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %q", c.args, err, want)
		}
	}
	if d.lastReq != nil {
		t.Errorf("a bad size sent %v", d.lastReq)
	}
	// Other flag errors are cobra's as before.
	if _, _, err := cli(t, url, "", "create", "--cpus", "many"); err == nil || !strings.Contains(err.Error(), `invalid argument "many" for "--cpus" flag`) {
		t.Errorf("--cpus many: %v", err)
	}
	// The quota flag takes sizes (and -1) too.
	if _, _, err := cli(t, url, "", "tenant", "set", "acme", "--max-memory-mb", "4X"); err == nil ||
		err.Error() != `--max-memory-mb: "4X" is not a size; use 512M, 1G or a number of MiB` {
		t.Errorf("--max-memory-mb 4X: %v", err)
	}
}

// The daemon's refusal of limits beyond the host is shown as it is, with
// no prefix added.
func TestCLIHostLimits(t *testing.T) {
	_, url := newFakeDaemon(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "--memory", "64G", "--cpus", "1"}, "memory_mb: 65536 is more than this host has (23552 MiB; at most 22016 for one sandbox)"},
		{[]string{"create", "--cpus", "64"}, "cpus: 64 is more than this host has (2 CPUs; at most 2 for one sandbox)"},
	} {
		_, _, err := cli(t, url, "", c.args...)
		if err == nil || err.Error() != c.want || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
}

// create --help says what the daemon applies when a flag is not given.
func TestCLICreateHelpDefaults(t *testing.T) {
	out, _, err := cli(t, "http://127.0.0.1:1", "", "create", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`(default: the daemon's, "python")`,
		"CPU limit, fractional (e.g. 0.5) (default: the daemon's, 1 CPU)",
		"memory limit: 512M, 1G, 1.5G or MiB (default: the daemon's, 1 GiB)",
		"(default: the daemon's, 2 GiB)",
		"maximum number of processes (default: the daemon's, 512)",
		"(default: the daemon's, 5m)",
		"--memory size",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("create --help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, " MB") {
		t.Errorf("create --help speaks of MB:\n%s", out)
	}
}

// ls hides terminated sandboxes (the daemon leaves them out) and unclaimed
// pool members unless --all, and says what it hid.
func TestCLIListHides(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")                                                           // sbx_1
	cli(t, url, "", "create", "--name", "gone")                                                          // sbx_2
	cli(t, url, "", "create", "--label", "forkbox.pool=warm", "--label", "forkbox.pool.ready=true")      // sbx_3: ready in pool warm
	cli(t, url, "", "create", "--name", "taken", "--label", "forkbox.pool=warm", "--label", "team=data") // sbx_4: handed out
	cli(t, url, "", "create")                                                                            // sbx_5
	cli(t, url, "", "rm", "gone", "sbx_5")
	cli(t, url, "", "create", "--label", "forkbox.pool=warm", "--label", "forkbox.pool.ready=true") // sbx_6
	d.sandboxes["sbx_6"].State = api.StateTerminated                                                // a pool member that died

	out, errOut, err := cli(t, url, "", "ls")
	want := "ID NAME STATE IMAGE CPUS MEM AGE\nsbx_1 box running python 1 1 GiB 1m\nsbx_4 taken running python 1 1 GiB 1m"
	if err != nil || fields(out) != want || errOut != "terminated sandboxes and 1 ready in warm pools hidden; --all shows them\n" {
		t.Errorf("ls: %v\n%s\nstderr %q", err, out, errOut)
	}
	out, errOut, err = cli(t, url, "", "ls", "--all")
	want = "ID NAME STATE IMAGE CPUS MEM AGE\n" +
		"sbx_1 box running python 1 1 GiB 1m\n" +
		"sbx_2 gone terminated python 1 1 GiB 1m\n" +
		"sbx_3 - running (ready in pool warm) python 1 1 GiB 1m\n" +
		"sbx_4 taken running python 1 1 GiB 1m\n" +
		"sbx_5 - terminated python 1 1 GiB 1m\n" +
		"sbx_6 - terminated python 1 1 GiB 1m"
	if err != nil || fields(out) != want || errOut != "" {
		t.Errorf("ls --all: %v\n%s\nstderr %q", err, out, errOut)
	}
	if _, errOut, _ := cli(t, url, "", "ls", "-a"); errOut != "" {
		t.Errorf("ls -a: stderr %q", errOut)
	}
	// --state terminated asks for them: shown. (The fake ignores the query.)
	out, errOut, _ = cli(t, url, "", "ls", "--state", "terminated")
	if !strings.Contains(out, "sbx_2") || strings.Contains(errOut, "terminated hidden") {
		t.Errorf("ls --state terminated:\n%s\nstderr %q", out, errOut)
	}
	// --json: the same selection.
	out, _, err = cli(t, url, "", "--json", "ls")
	var list api.SandboxList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Sandboxes) != 2 || list.Sandboxes[1].ID != "sbx_4" {
		t.Errorf("ls --json: %v\n%s", err, out)
	}
	out, _, err = cli(t, url, "", "--json", "ls", "--all")
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Sandboxes) != 6 {
		t.Errorf("ls --json --all: %v\n%s", err, out)
	}
	// Nothing hidden: no footer.
	_, url = newFakeDaemon(t)
	cli(t, url, "", "create")
	if _, errOut, err := cli(t, url, "", "ls"); err != nil || errOut != "" {
		t.Errorf("nothing hidden: %v stderr %q", err, errOut)
	}
}

// ls asks for every page of the daemon's list, --page-size sandboxes at a
// time, and prints them all once, in order.
func TestCLIListWalksPages(t *testing.T) {
	d, url := newFakeDaemon(t)
	var want []string
	for i := 1; i <= 7; i++ {
		cli(t, url, "", "create")
		want = append(want, fmt.Sprintf("sbx_%d", i))
	}
	d.mu.Lock()
	d.pages = 0
	d.mu.Unlock()
	out, errOut, err := cli(t, url, "", "--page-size", "2", "ls", "--all")
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		got = append(got, strings.Fields(l)[0])
	}
	if err != nil || errOut != "" || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("ls --all by pages of 2: %v\n%s\nstderr %q", err, out, errOut)
	}
	d.mu.Lock()
	pages := d.pages
	d.mu.Unlock()
	if pages != 4 {
		t.Errorf("ls --all by pages of 2 asked %d times, want 4", pages)
	}
	out, _, err = cli(t, url, "", "--json", "--page-size", "3", "ls")
	var list api.SandboxList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Sandboxes) != 7 || list.NextCursor != "" {
		t.Errorf("ls --json by pages of 3: %v\n%s", err, out)
	}
}

// Not-found errors say which command lists what exists; the hint keeps the
// error's kind, and a many-item command does not repeat the item's name.
func TestCLIErrorHints(t *testing.T) {
	_, url := newFakeDaemon(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "nope", "--", "true"}, `sandbox "nope" not found; forkbox ls --all lists the sandboxes`},
		{[]string{"create", "--snapshot", "snap_9"}, `snapshot "snap_9" not found; forkbox snapshots lists the snapshots`},
		{[]string{"create", "--pool", "nope"}, `pool "nope" not found; forkbox pool ls lists the pools`},
	} {
		_, _, err := cli(t, url, "", c.args...)
		if err == nil || err.Error() != c.want || !errors.Is(err, errdefs.ErrNotFound) || exitCode(err) != 1 {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	for msg, want := range map[string]string{
		`image "nosuchimage" not found`:       `image "nosuchimage" not found; forkbox image ls lists the images`,
		`context "c" not found`:               `context "c" not found`,
		`sandbox "x" not found in the store!`: `sandbox "x" not found in the store!`,
	} {
		if got := explain(apiErr(404, "not_found", msg)); got.Error() != want {
			t.Errorf("explain(%q) = %q, want %q", msg, got, want)
		}
	}
	once := explain(apiErr(404, "not_found", `sandbox "x" not found`))
	if got := explain(once); got.Error() != `sandbox "x" not found; forkbox ls --all lists the sandboxes` || !errors.Is(got, errdefs.ErrNotFound) {
		t.Errorf("explain twice: %q", got)
	}
	if got := itemError("nope", apiErr(404, "not_found", `pool "nope" not found`)); got != `pool "nope" not found; forkbox pool ls lists the pools` {
		t.Errorf("itemError names the item twice: %q", got)
	}
	if got := itemError("ctx_1", apiErr(409, "conflict", "busy")); got != "ctx_1: busy" {
		t.Errorf("itemError without the item: %q", got)
	}
}

// apiErr is the error the client returns for a daemon's error answer.
func apiErr(status int, code, msg string) error {
	return &client.APIError{Status: status, Code: code, Message: msg}
}
