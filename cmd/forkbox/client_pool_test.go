package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

func (d *fakeDaemon) suspend(w http.ResponseWriter, r *http.Request) {
	if !d.slowCall(r) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	sb := d.lookup(w, r)
	switch {
	case sb == nil:
	case d.snapOpts.noCRIU:
		replyErr(w, errdefs.Unavailable("suspend needs memory snapshots, unavailable on this host: criu not found"))
	case sb.State != api.StateRunning:
		replyErr(w, errdefs.FailedPrecondition("sandbox %s is %s; only a running sandbox can be suspended", sb.ID, sb.State))
	default:
		sb.State, sb.StateReason = api.StateSuspended, "suspended on request"
		reply(w, 200, sb)
	}
}

func (d *fakeDaemon) resume(w http.ResponseWriter, r *http.Request) {
	if !d.slowCall(r) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	sb := d.lookup(w, r)
	switch {
	case sb == nil:
	case sb.State != api.StateSuspended:
		replyErr(w, errdefs.FailedPrecondition("sandbox %s is %s; only a suspended sandbox can be resumed", sb.ID, sb.State))
	default:
		sb.State, sb.StateReason = api.StateRunning, ""
		reply(w, 200, sb)
	}
}

// findPool returns the pool called name, or nil. d.mu is held.
func (d *fakeDaemon) findPool(name string) *api.Pool {
	for _, p := range d.pools {
		if p.Name == name {
			return p
		}
	}
	return nil
}

func (d *fakeDaemon) createPool(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastReq = nil
	json.Unmarshal(body, &d.lastReq)
	var req api.CreatePoolRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		replyErr(w, errdefs.InvalidArgument("body: %v", err))
		return
	}
	p := &api.Pool{Name: req.Name, SnapshotID: req.SnapshotID, Image: req.Image, Size: req.Size, Ready: req.Size,
		CreatedAt: time.Now().Add(-3 * time.Minute)}
	switch {
	case req.Size < 1 || req.Size > 32:
		replyErr(w, errdefs.InvalidArgument("size: %d is out of range [1, 32]", req.Size))
	case (req.SnapshotID == "") == (req.Image == ""):
		replyErr(w, errdefs.InvalidArgument("snapshot_id, image: give exactly one"))
	case req.SnapshotID != "" && d.findSnapshot(req.SnapshotID) < 0:
		replyErr(w, errdefs.NotFound("snapshot %q not found", req.SnapshotID))
	case d.findPool(req.Name) != nil:
		replyErr(w, errdefs.Conflict("pool %q already exists", req.Name))
	default:
		if req.SnapshotID != "" {
			p.Image = d.snapshots[d.findSnapshot(req.SnapshotID)].Image
		}
		d.pools = append(d.pools, p)
		reply(w, 201, p)
	}
}

func (d *fakeDaemon) listPools(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	list := api.PoolList{Pools: []api.Pool{}}
	for _, p := range d.pools {
		list.Pools = append(list.Pools, *p)
	}
	slices.SortFunc(list.Pools, func(a, b api.Pool) int { return strings.Compare(a.Name, b.Name) }) // as the daemon does
	reply(w, 200, list)
}

func (d *fakeDaemon) deletePool(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name := r.PathValue("name")
	for i, p := range d.pools {
		if p.Name == name {
			d.pools = append(d.pools[:i], d.pools[i+1:]...)
			w.WriteHeader(204)
			return
		}
	}
	replyErr(w, errdefs.NotFound("pool %q not found", name))
}

// fields squeezes the runs of blanks of each line of a table to one space.
func fields(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := range lines {
		lines[i] = strings.Join(strings.Fields(lines[i]), " ")
	}
	return strings.Join(lines, "\n")
}

func TestCLISuspendResume(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")
	cli(t, url, "", "create")

	out, errOut, err := cli(t, url, "", "suspend", "box")
	if err != nil || out != "sbx_1 suspended\n" || errOut != "" {
		t.Errorf("suspend: out=%q err=%q %v", out, errOut, err)
	}
	// ls shows the suspended sandbox with its limits, like any other.
	out, _, err = cli(t, url, "", "ls")
	if want := "ID NAME STATE IMAGE CPUS MEM AGE\nsbx_1 box suspended python 1 1 GiB 1m\nsbx_2 - running python 1 1 GiB 1m"; err != nil || fields(out) != want {
		t.Errorf("ls with a suspended sandbox: %v\n%s", err, out)
	}
	if _, _, err := cli(t, url, "", "ls", "--state", "suspended"); err != nil || d.lastReq["query"] != "state=suspended" {
		t.Errorf("ls --state suspended: query %v, %v", d.lastReq["query"], err)
	}
	out, _, err = cli(t, url, "", "--json", "ls")
	var list api.SandboxList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || list.Sandboxes[0].State != api.StateSuspended || !list.Sandboxes[0].AutoResume {
		t.Errorf("ls --json: %v\n%s", err, out)
	}

	out, errOut, err = cli(t, url, "", "resume", "box")
	if err != nil || out != "sbx_1 running\n" || errOut != "" {
		t.Errorf("resume: out=%q err=%q %v", out, errOut, err)
	}

	// Several at once: each one in turn; --json gives a sandbox list.
	out, _, err = cli(t, url, "", "--json", "suspend", "box", "sbx_2")
	list = api.SandboxList{}
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Sandboxes) != 2 ||
		list.Sandboxes[1].ID != "sbx_2" || list.Sandboxes[1].State != api.StateSuspended {
		t.Errorf("suspend --json: %v\n%s", err, out)
	}
	out, errOut, err = cli(t, url, "", "resume", "sbx_2", "nope", "box")
	if out != "sbx_2 running\nsbx_1 running\n" || errOut != "forkbox: sandbox \"nope\" not found; forkbox ls --all lists the sandboxes\n" ||
		err == nil || err.Error() != "1 of 3 sandboxes not resumed" || exitCode(err) != 1 {
		t.Errorf("resume with a failure: out=%q err=%q %v", out, errOut, err)
	}
	out, _, err = cli(t, url, "", "--json", "resume", "nope")
	if !errors.Is(err, errdefs.ErrNotFound) || strings.TrimSpace(out) != "{\n  \"sandboxes\": []\n}" {
		t.Errorf("resume --json of nothing: out=%q %v", out, err)
	}

	for _, c := range []struct {
		args []string
		kind error
		want string
	}{
		{[]string{"resume", "box"}, errdefs.ErrFailedPrecondition, "sandbox sbx_1 is running; only a suspended sandbox can be resumed"},
		{[]string{"suspend", "nope"}, errdefs.ErrNotFound, `sandbox "nope" not found; forkbox ls --all lists the sandboxes`},
		{[]string{"suspend"}, nil, "suspend: name at least one SANDBOX (id or name)"},
		{[]string{"resume"}, nil, "resume: name at least one SANDBOX (id or name)"},
		{[]string{"suspend", "box", "nope"}, nil, "1 of 2 sandboxes not suspended"},
		{[]string{"suspend", "box"}, errdefs.ErrFailedPrecondition, "sandbox sbx_1 is suspended; only a running sandbox can be suspended"},
	} {
		_, _, err := cli(t, url, "", c.args...)
		if err == nil || err.Error() != c.want || (c.kind != nil && !errors.Is(err, c.kind)) || exitCode(err) != 1 {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
	d.snapOpts.noCRIU = true
	if _, _, err := cli(t, url, "", "suspend", "sbx_2"); !errors.Is(err, errdefs.ErrUnavailable) ||
		err.Error() != "suspend needs memory snapshots, unavailable on this host: criu not found" {
		t.Errorf("suspend without CRIU: %v", err)
	}
}

func TestCLISuspendProgress(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")
	cli(t, url, "", "create")
	d.snapOpts.delay = 60 * time.Millisecond
	fakeTerminal(t, 200)

	out, errOut, err := cli(t, url, "", "suspend", "box", "sbx_2")
	if err != nil || out != "sbx_1 suspended\nsbx_2 suspended\n" ||
		!strings.HasPrefix(errOut, "\r\x1b[K| Suspending box... 0.") ||
		!strings.Contains(errOut, "\r\x1b[KSuspended box (sbx_1) in 0.") ||
		!strings.Contains(errOut, "\r\x1b[K| Suspending sbx_2... 0.") ||
		!strings.Contains(errOut, "\r\x1b[KSuspended sbx_2 in 0.") || !strings.HasSuffix(errOut, "s\n") {
		t.Errorf("suspend progress: out=%q err=%q %v", out, errOut, err)
	}
	out, errOut, err = cli(t, url, "", "resume", "box")
	if err != nil || out != "sbx_1 running\n" || !strings.Contains(errOut, "| Resuming box... ") ||
		!strings.Contains(errOut, "\r\x1b[KResumed box (sbx_1) in 0.") {
		t.Errorf("resume progress: out=%q err=%q %v", out, errOut, err)
	}
	// A failure erases the line and prints no summary.
	if _, errOut, err := cli(t, url, "", "resume", "box"); err == nil || strings.Contains(errOut, "Resumed") || !strings.HasSuffix(errOut, "\r\x1b[K") {
		t.Errorf("failed resume: err=%q %v", errOut, err)
	}
	// create --pool draws its own line.
	cli(t, url, "", "checkpoint", "--memory", "box")
	cli(t, url, "", "pool", "create", "warm", "--snapshot", "snap_1", "--size", "1")
	if _, errOut, err := cli(t, url, "", "create", "--pool", "warm"); err != nil ||
		!strings.HasPrefix(errOut, "\r\x1b[K| Taking a sandbox from pool warm... 0.") {
		t.Errorf("create --pool progress: err=%q %v", errOut, err)
	}
	// --json: no progress.
	if _, errOut, err := cli(t, url, "", "--json", "suspend", "box"); err != nil || errOut != "" {
		t.Errorf("--json: err=%q %v", errOut, err)
	}
}

func TestCLISuspendInterrupted(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")
	d.snapOpts.hang = true
	d.snapOpts.arrived = make(chan struct{}, 1)

	for _, c := range []struct {
		args  []string
		doing string
	}{{[]string{"suspend", "box"}, "suspending"}, {[]string{"resume", "box"}, "resuming"}} {
		args := c.args
		root := &cobra.Command{Use: "forkbox", SilenceUsage: true, SilenceErrors: true}
		addClientFlags(root)
		root.AddCommand(clientCmds()...)
		var o, e bytes.Buffer
		root.SetOut(&o)
		root.SetErr(&e)
		root.SetArgs(append([]string{"--url", url}, args...))
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-d.snapOpts.arrived; cancel() }() // Ctrl-C while the daemon works
		err := root.ExecuteContext(ctx)
		cancel()
		if exitCode(err) != 130 || !errors.Is(err, errInterrupted) || !strings.Contains(err.Error(), "may still finish "+c.doing+" box: see forkbox ls") || o.Len() != 0 {
			t.Errorf("%q: exit %d (%v) out=%q", args, exitCode(err), err, o.String())
		}
	}
}

func TestCLIPools(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")
	cli(t, url, "", "checkpoint", "--memory", "box")

	out, errOut, err := cli(t, url, "", "pool", "create", "warm", "--snapshot", "snap_1", "--size", "2")
	if err != nil || out != "warm\n" || errOut != "" {
		t.Errorf("pool create: out=%q err=%q %v", out, errOut, err)
	}
	if got, _ := json.Marshal(d.lastReq); string(got) != `{"name":"warm","size":2,"snapshot_id":"snap_1"}` {
		t.Errorf("pool create sent %s", got)
	}
	out, _, err = cli(t, url, "", "--json", "pool", "create", "plain", "--image", "python", "-n", "1")
	var p api.Pool
	if err != nil || json.Unmarshal([]byte(out), &p) != nil || p.Name != "plain" || p.Image != "python" || p.Size != 1 || p.SnapshotID != "" {
		t.Errorf("pool create --json: out=%q %v", out, err)
	}
	if got, _ := json.Marshal(d.lastReq); string(got) != `{"image":"python","name":"plain","size":1}` {
		t.Errorf("pool create --image sent %s", got)
	}

	out, _, err = cli(t, url, "", "pool", "ls")
	if want := "NAME SOURCE SIZE READY AGE\nplain python 1 1 3m\nwarm snap_1 2 2 3m"; err != nil || fields(out) != want {
		t.Errorf("pool ls: %v\n%s", err, out)
	}

	// create --pool takes a ready sandbox, with the name and labels given.
	out, _, err = cli(t, url, "", "create", "--pool", "warm", "--name", "s1", "--label", "user=42")
	if err != nil || out != "sbx_2\n" {
		t.Errorf("create --pool: out=%q %v", out, err)
	}
	if got, _ := json.Marshal(d.lastReq); string(got) != `{"labels":{"user":"42"},"name":"s1","pool":"warm"}` {
		t.Errorf("create --pool sent %s", got)
	}
	out, _, err = cli(t, url, "", "--json", "pool", "list")
	var list api.PoolList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Pools) != 2 || list.Pools[1].Ready != 1 || list.Pools[1].Size != 2 {
		t.Errorf("pool ls --json: %v\n%s", err, out)
	}
	out, _, err = cli(t, url, "", "--json", "create", "--no-auto-resume", "--name", "manual")
	var sb api.Sandbox
	if err != nil || json.Unmarshal([]byte(out), &sb) != nil || sb.AutoResume {
		t.Errorf("create --no-auto-resume: out=%q %v", out, err)
	}
	if got, _ := json.Marshal(d.lastReq); string(got) != `{"auto_resume":false,"name":"manual"}` {
		t.Errorf("create --no-auto-resume sent %s", got)
	}
	if out, _, _ := cli(t, url, "", "--json", "create"); !strings.Contains(out, `"auto_resume": true`) {
		t.Errorf("create without --no-auto-resume: %s", out)
	}

	for _, c := range []struct {
		args []string
		kind error
		want string
	}{
		{[]string{"create", "--pool", "nope"}, errdefs.ErrNotFound, `pool "nope" not found; forkbox pool ls lists the pools`},
		{[]string{"create", "--pool", "warm", "--image", "python"}, nil,
			"create: a --pool sandbox comes from the pool's own snapshot or image; drop --snapshot and --image"},
		{[]string{"pool", "create", "warm", "--image", "python", "--size", "1"}, errdefs.ErrConflict, `pool "warm" already exists`},
		{[]string{"pool", "create", "x", "--snapshot", "snap_9", "--size", "1"}, errdefs.ErrNotFound, `snapshot "snap_9" not found; forkbox snapshots lists the snapshots`},
		{[]string{"pool", "create", "x", "--image", "python", "--size", "33"}, errdefs.ErrInvalidArgument, "size: 33 is out of range [1, 32]"},
		{[]string{"pool", "create", "x", "--image", "python", "--size", "0"}, errdefs.ErrInvalidArgument, "size: 0 is out of range [1, 32]"},
		{[]string{"pool", "create", "x", "--image", "python", "--snapshot", "snap_1", "--size", "1"}, nil, "pool create: give --snapshot or --image, not both"},
		{[]string{"pool", "create", "x", "--size", "1"}, nil, "pool create: give the --snapshot ID or the --image to fill the pool from"},
		{[]string{"pool", "create", "x", "--image", "python"}, nil, "pool create: give the pool's --size (1–32)"},
		{[]string{"pool", "create", "--image", "python", "--size", "1"}, nil, "pool create: name the pool: forkbox pool create NAME (--snapshot ID | --image IMAGE) --size N"},
		{[]string{"pool", "ls", "x"}, nil, `unknown command "x" for "forkbox pool ls"`},
		{[]string{"pool", "rm"}, nil, "pool rm: name at least one pool NAME"},
		{[]string{"pool", "rm", "nope"}, errdefs.ErrNotFound, `pool "nope" not found; forkbox pool ls lists the pools`},
	} {
		_, _, err := cli(t, url, "", c.args...)
		if err == nil || err.Error() != c.want || (c.kind != nil && !errors.Is(err, c.kind)) || exitCode(err) != 1 {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
	if _, _, err := cli(t, url, "", "pool", "frob"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("pool frob: %v", err)
	}
	if out, _, err := cli(t, url, "", "pool"); err != nil || !strings.Contains(out, "forkbox pool create warm --snapshot") {
		t.Errorf("pool without a subcommand: %v\n%s", err, out)
	}

	out, errOut, err = cli(t, url, "", "pool", "rm", "warm", "nope")
	if out != "warm\n" || errOut != "forkbox: pool \"nope\" not found; forkbox pool ls lists the pools\n" || err == nil || err.Error() != "1 of 2 pools not removed" {
		t.Errorf("pool rm: out=%q err=%q %v", out, errOut, err)
	}
	out, _, err = cli(t, url, "", "--json", "pool", "rm", "plain")
	var names []string
	if err != nil || json.Unmarshal([]byte(out), &names) != nil || len(names) != 1 || names[0] != "plain" {
		t.Errorf("pool rm --json: out=%q %v", out, err)
	}
	if out, _, err := cli(t, url, "", "pool", "ls"); err != nil || fields(out) != "NAME SOURCE SIZE READY AGE" {
		t.Errorf("pool ls after rm: %v\n%s", err, out)
	}
}
