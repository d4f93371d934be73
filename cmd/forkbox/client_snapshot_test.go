package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// fakeSnapOpts shape the fake daemon's checkpoint, fork and restore answers.
type fakeSnapOpts struct {
	noCRIU  bool          // memory snapshots are unavailable (503)
	delay   time.Duration // how long a checkpoint, fork or restore takes
	arrived chan struct{} // when set, receives a value as one starts
	hang    bool          // a checkpoint, fork or restore runs until the client goes away
}

// findSnapshot returns the index of snapshot id in d.snapshots, or -1.
// Deleted snapshots stay as nil, so ids are never reused.
func (d *fakeDaemon) findSnapshot(id string) int {
	for i, sn := range d.snapshots {
		if sn != nil && sn.ID == id {
			return i
		}
	}
	return -1
}

// takeSnapshot records a snapshot of sb. d.mu is held.
func (d *fakeDaemon) takeSnapshot(sb *api.Sandbox, typ api.SnapshotType, name string) *api.Snapshot {
	sn := &api.Snapshot{ID: fmt.Sprintf("snap_%d", len(d.snapshots)+1), Type: typ, Name: name, SandboxID: sb.ID,
		ParentID: sb.SnapshotID, Image: sb.Image, SizeBytes: 4096, PausedMS: 12, CreatedAt: time.Now().Add(-2 * time.Minute)}
	if typ == api.SnapshotMemory {
		sn.SizeBytes, sn.PausedMS = 50<<20, 420
	}
	d.snapshots = append(d.snapshots, sn)
	return sn
}

// slowCall plays out d.snapOpts before a checkpoint, fork or restore; false
// means the client went away.
func (d *fakeDaemon) slowCall(r *http.Request) bool {
	d.mu.Lock()
	o := d.snapOpts
	d.mu.Unlock()
	if o.arrived != nil {
		o.arrived <- struct{}{}
	}
	if o.hang {
		<-r.Context().Done()
		return false
	}
	time.Sleep(o.delay)
	return true
}

// liveSandbox looks the sandbox up and checks that it can be snapshotted.
// d.mu is held.
func (d *fakeDaemon) liveSandbox(w http.ResponseWriter, r *http.Request) *api.Sandbox {
	sb := d.lookup(w, r)
	if sb != nil && sb.State == api.StateTerminated {
		replyErr(w, errdefs.FailedPrecondition("sandbox %s is terminated", sb.ID))
		return nil
	}
	return sb
}

func (d *fakeDaemon) checkpoint(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !d.slowCall(r) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastReq = nil
	json.Unmarshal(body, &d.lastReq)
	var req api.CheckpointRequest
	json.Unmarshal(body, &req)
	sb := d.liveSandbox(w, r)
	switch {
	case sb == nil:
	case req.Type == api.SnapshotMemory && d.snapOpts.noCRIU:
		replyErr(w, errdefs.Unavailable("memory snapshots are unavailable on this host: criu not found"))
	default:
		if req.Type == "" {
			req.Type = api.SnapshotFilesystem
		}
		reply(w, 201, d.takeSnapshot(sb, req.Type, req.Name))
	}
}

func (d *fakeDaemon) fork(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !d.slowCall(r) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastReq = nil
	json.Unmarshal(body, &d.lastReq)
	var req api.ForkRequest
	json.Unmarshal(body, &req)
	sb := d.liveSandbox(w, r)
	switch {
	case sb == nil:
	case req.Count < 1 || req.Count > 16:
		replyErr(w, errdefs.InvalidArgument("count: %d is not between 1 and 16", req.Count))
	case len(req.Names) > 0 && len(req.Names) != req.Count:
		replyErr(w, errdefs.InvalidArgument("names: %d names for %d branches", len(req.Names), req.Count))
	case d.snapOpts.noCRIU:
		replyErr(w, errdefs.Unavailable("memory snapshots are unavailable on this host: criu not found"))
	default:
		res := api.ForkResult{Snapshot: *d.takeSnapshot(sb, api.SnapshotMemory, "fork")}
		for i := range req.Count {
			n := &api.Sandbox{ID: fmt.Sprintf("sbx_%d", len(d.sandboxes)+1), State: api.StateRunning, Image: sb.Image,
				CPUs: sb.CPUs, MemoryMB: sb.MemoryMB, SnapshotID: res.Snapshot.ID, CreatedAt: time.Now()}
			if len(req.Names) > 0 {
				n.Name = req.Names[i]
			}
			d.sandboxes[n.ID] = n
			res.Sandboxes = append(res.Sandboxes, *n)
		}
		reply(w, 201, res)
	}
}

func (d *fakeDaemon) listSnapshots(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastReq = map[string]any{"query": r.URL.RawQuery}
	sandboxID := ""
	if ref := r.URL.Query().Get("sandbox"); ref != "" {
		r.SetPathValue("sb", ref)
		sb := d.lookup(w, r)
		if sb == nil {
			return
		}
		sandboxID = sb.ID
	}
	list := api.SnapshotList{Snapshots: []api.Snapshot{}}
	for i := len(d.snapshots) - 1; i >= 0; i-- { // newest first
		if sn := d.snapshots[i]; sn != nil && (sandboxID == "" || sn.SandboxID == sandboxID) {
			list.Snapshots = append(list.Snapshots, *sn)
		}
	}
	reply(w, 200, list)
}

func (d *fakeDaemon) snapshot(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := r.PathValue("id")
	i := d.findSnapshot(id)
	switch {
	case i < 0:
		replyErr(w, errdefs.NotFound("snapshot %q not found", id))
	case r.Method == http.MethodDelete:
		d.snapshots[i] = nil
		w.WriteHeader(204)
	default:
		reply(w, 200, d.snapshots[i])
	}
}

func TestCLICheckpoint(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")

	out, errOut, err := cli(t, url, "", "checkpoint", "box")
	if err != nil || out != "snap_1\n" || errOut != "" {
		t.Errorf("checkpoint: out=%q err=%q %v", out, errOut, err)
	}
	if got, _ := json.Marshal(d.lastReq); string(got) != `{"type":"filesystem"}` {
		t.Errorf("checkpoint sent %s", got)
	}

	out, _, err = cli(t, url, "", "--json", "checkpoint", "--memory", "--name", "after load", "box")
	var sn api.Snapshot
	if err != nil || json.Unmarshal([]byte(out), &sn) != nil || sn.ID != "snap_2" || sn.Type != api.SnapshotMemory ||
		sn.Name != "after load" || sn.SandboxID != "sbx_1" || sn.SizeBytes != 50<<20 {
		t.Errorf("checkpoint --json: out=%q %v", out, err)
	}
	if got, _ := json.Marshal(d.lastReq); string(got) != `{"name":"after load","type":"memory"}` {
		t.Errorf("checkpoint --memory sent %s", got)
	}

	// Restore it: create --snapshot.
	out, _, err = cli(t, url, "", "--json", "create", "--snapshot", "snap_2", "--name", "box2")
	var sb api.Sandbox
	if err != nil || json.Unmarshal([]byte(out), &sb) != nil || sb.SnapshotID != "snap_2" || sb.Name != "box2" {
		t.Errorf("create --snapshot: out=%q %v", out, err)
	}
	if got, _ := json.Marshal(d.lastReq); string(got) != `{"name":"box2","snapshot_id":"snap_2"}` {
		t.Errorf("create --snapshot sent %s", got)
	}
	if _, _, err := cli(t, url, "", "create", "--snapshot", "snap_9"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("create --snapshot unknown: %v", err)
	}

	d.snapOpts.noCRIU = true
	cli(t, url, "", "create", "--name", "gone")
	cli(t, url, "", "rm", "gone")
	for _, c := range []struct {
		args []string
		kind error
		want string
	}{
		{[]string{"checkpoint", "--memory", "box"}, errdefs.ErrUnavailable, "memory snapshots are unavailable on this host: criu not found"},
		{[]string{"checkpoint", "gone"}, errdefs.ErrFailedPrecondition, "sandbox sbx_3 is terminated"},
		{[]string{"checkpoint", "nope"}, errdefs.ErrNotFound, `sandbox "nope" not found; forkbox ls --all lists the sandboxes`},
		{[]string{"checkpoint"}, nil, "checkpoint: name the SANDBOX to checkpoint"},
		{[]string{"checkpoint", "a", "b"}, nil, "checkpoint: name the SANDBOX to checkpoint"},
	} {
		_, _, err := cli(t, url, "", c.args...)
		if err == nil || err.Error() != c.want || (c.kind != nil && !errors.Is(err, c.kind)) || exitCode(err) != 1 {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
}

func TestCLIFork(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")

	out, errOut, err := cli(t, url, "", "fork", "box")
	if err != nil || out != "sbx_2\n" || errOut != "" {
		t.Errorf("fork: out=%q err=%q %v", out, errOut, err)
	}
	if got, _ := json.Marshal(d.lastReq); string(got) != `{"count":1}` {
		t.Errorf("fork sent %s", got)
	}
	out, _, err = cli(t, url, "", "fork", "box", "-n", "3")
	if err != nil || out != "sbx_3\nsbx_4\nsbx_5\n" {
		t.Errorf("fork -n 3: out=%q %v", out, err)
	}
	// The names set the count.
	out, _, err = cli(t, url, "", "--json", "fork", "box", "--name", "try-a", "--name", "try-b")
	var res api.ForkResult
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.Snapshot.ID != "snap_3" || res.Snapshot.Type != api.SnapshotMemory ||
		len(res.Sandboxes) != 2 || res.Sandboxes[1].Name != "try-b" || res.Sandboxes[0].SnapshotID != "snap_3" {
		t.Errorf("fork --json --name: out=%q %v", out, err)
	}
	if got, _ := json.Marshal(d.lastReq); string(got) != `{"count":2,"names":["try-a","try-b"]}` {
		t.Errorf("fork --name sent %s", got)
	}
	if _, _, err = cli(t, url, "", "fork", "box", "-n", "2", "--name", "x", "--name", "y"); err != nil {
		t.Errorf("fork -n 2 with 2 names: %v", err)
	}

	for _, c := range []struct {
		args []string
		kind error
		want string
	}{
		{[]string{"fork", "box", "-n", "2", "--name", "x"}, nil, "fork: 1 --name for -n 2; give one --name per copy, or none"},
		{[]string{"fork", "box", "-n", "17"}, errdefs.ErrInvalidArgument, "count: 17 is not between 1 and 16"},
		{[]string{"fork", "box", "-n", "0"}, errdefs.ErrInvalidArgument, "count: 0 is not between 1 and 16"},
		{[]string{"fork", "nope"}, errdefs.ErrNotFound, `sandbox "nope" not found; forkbox ls --all lists the sandboxes`},
		{[]string{"fork"}, nil, "fork: name the SANDBOX to fork"},
	} {
		_, _, err := cli(t, url, "", c.args...)
		if err == nil || err.Error() != c.want || (c.kind != nil && !errors.Is(err, c.kind)) {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
	d.snapOpts.noCRIU = true
	if _, _, err := cli(t, url, "", "fork", "box"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("fork without CRIU: %v", err)
	}
}

func TestCLISnapshots(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")
	cli(t, url, "", "create")
	cli(t, url, "", "checkpoint", "box")
	cli(t, url, "", "checkpoint", "--memory", "--name", "warm", "box")
	cli(t, url, "", "create", "--snapshot", "snap_2", "--name", "box2")
	cli(t, url, "", "checkpoint", "box2")
	cli(t, url, "", "checkpoint", "sbx_2")

	for _, args := range [][]string{{"snapshots", "--flat"}, {"snapshot", "ls", "--flat"}} {
		out, _, err := cli(t, url, "", args...)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"ID TYPE NAME SANDBOX PARENT SIZE PAUSED AGE",
			"snap_4 filesystem - sbx_2 - 4.0 KiB 12ms 2m",
			"snap_3 filesystem - sbx_3 snap_2 4.0 KiB 12ms 2m",
			"snap_2 memory warm sbx_1 - 50.0 MiB 420ms 2m",
			"snap_1 filesystem - sbx_1 - 4.0 KiB 12ms 2m",
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		for i := range lines {
			lines[i] = strings.Join(strings.Fields(lines[i]), " ")
		}
		if strings.Join(lines, "\n") != strings.Join(want, "\n") {
			t.Errorf("%q printed:\n%s", args, out)
		}
	}
	if q := d.lastReq["query"]; q != "limit=1000" {
		t.Errorf("snapshots query = %q", q)
	}

	out, _, err := cli(t, url, "", "snapshots", "--flat", "box")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); err != nil || len(lines) != 3 || !strings.HasPrefix(lines[1], "snap_2 ") {
		t.Errorf("snapshots box: %v\n%s", err, out)
	}
	if q := d.lastReq["query"]; q != "limit=1000&sandbox=box" {
		t.Errorf("snapshots box query = %q", q)
	}
	out, _, err = cli(t, url, "", "--json", "snapshots", "box")
	var list api.SnapshotList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Snapshots) != 2 || list.Snapshots[0].Name != "warm" {
		t.Errorf("snapshots --json: %v\n%s", err, out)
	}

	out, _, err = cli(t, url, "", "snapshot", "inspect", "snap_2")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); err != nil || len(lines) != 2 ||
		strings.Join(strings.Fields(lines[1]), " ") != "snap_2 memory warm sbx_1 - 50.0 MiB 420ms 2m" {
		t.Errorf("inspect: %v\n%s", err, out)
	}
	out, _, err = cli(t, url, "", "--json", "snapshot", "inspect", "snap_2")
	var sn api.Snapshot
	if err != nil || json.Unmarshal([]byte(out), &sn) != nil || sn.ID != "snap_2" || sn.PausedMS != 420 {
		t.Errorf("inspect --json: %v\n%s", err, out)
	}

	out, errOut, err := cli(t, url, "", "snapshot", "rm", "snap_1", "snap_9", "snap_3")
	if out != "snap_1\nsnap_3\n" || errOut != "forkbox: snapshot \"snap_9\" not found; forkbox snapshots lists the snapshots\n" || err == nil ||
		err.Error() != "1 of 3 snapshots not removed" {
		t.Errorf("rm: out=%q err=%q %v", out, errOut, err)
	}
	if _, _, err := cli(t, url, "", "snapshot", "rm", "snap_1"); !errors.Is(err, errdefs.ErrNotFound) || err.Error() != `snapshot "snap_1" not found; forkbox snapshots lists the snapshots` {
		t.Errorf("rm again: %v", err)
	}
	out, _, err = cli(t, url, "", "--json", "snapshot", "rm", "snap_4")
	var ids []string
	if err != nil || json.Unmarshal([]byte(out), &ids) != nil || len(ids) != 1 || ids[0] != "snap_4" {
		t.Errorf("rm --json: out=%q %v", out, err)
	}
	if out, _, _ := cli(t, url, "", "snapshots", "--flat"); len(strings.Split(strings.TrimSpace(out), "\n")) != 2 {
		t.Errorf("after rm:\n%s", out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"snapshots", "a", "b"}, "snapshots: at most one SANDBOX"},
		{[]string{"snapshots", "nope"}, `sandbox "nope" not found`},
		{[]string{"snapshot", "rm"}, "snapshot rm: name at least one snapshot ID"},
		{[]string{"snapshot", "inspect"}, "snapshot inspect: name the snapshot ID"},
		{[]string{"snapshot", "inspect", "snap_9"}, `snapshot "snap_9" not found`},
		{[]string{"snapshot", "frob"}, "unknown command"},
	} {
		if _, _, err := cli(t, url, "", c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
}

// The tree: a snapshot of a sandbox restored from snapshot X is drawn under
// X; FROM names the sandbox it was taken of, RESTORED AS the live sandboxes
// started from it.
func TestCLISnapshotTree(t *testing.T) {
	_, url := newFakeDaemon(t)
	for _, args := range [][]string{
		{"create", "--name", "box"},                       // sbx_1
		{"checkpoint", "box"},                             // snap_1
		{"create", "--snapshot", "snap_1", "--name", "a"}, // sbx_2
		{"create", "--snapshot", "snap_1", "--name", "b"}, // sbx_3
		{"checkpoint", "--name", "left", "a"},             // snap_2, parent snap_1
		{"checkpoint", "--memory", "b"},                   // snap_3, parent snap_1
		{"create", "--snapshot", "snap_2", "--name", "a2"},
		{"checkpoint", "a2"}, // snap_4, parent snap_2
		{"create"},           // sbx_5
		{"checkpoint", "sbx_5"},
		{"rm", "b"}, // terminated: no longer restored from snap_1
	} {
		if out, errOut, err := cli(t, url, "", args...); err != nil {
			t.Fatalf("%q: %v %s %s", args, err, out, errOut)
		}
	}
	want := "SNAPSHOT NAME TYPE SIZE AGE FROM RESTORED AS\n" +
		"snap_1 - filesystem 4.0 KiB 2m box a\n" +
		"├─ snap_2 left filesystem 4.0 KiB 2m a a2\n" +
		"│ └─ snap_4 - filesystem 4.0 KiB 2m a2 -\n" +
		"└─ snap_3 - memory 50.0 MiB 2m b -\n" +
		"snap_5 - filesystem 4.0 KiB 2m sbx_5 -"
	for _, args := range [][]string{{"snapshots"}, {"snapshot", "ls"}} {
		out, _, err := cli(t, url, "", args...)
		if err != nil || fields(out) != want {
			t.Errorf("%q: %v\n%s\nwant\n%s", args, err, out, want)
		}
	}
	// The tree's columns line up: every row's SIZE starts where the
	// header's does (box-drawing characters count as one column each).
	out, _, _ := cli(t, url, "", "snapshots")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	col := strings.Index(lines[0], "SIZE")
	for _, l := range lines[1:] {
		if r := []rune(l); len(r) <= col || !strings.ContainsAny(string(r[col]), "0123456789") {
			t.Errorf("misaligned row %q (SIZE at rune %d)", l, col)
		}
	}
	// One sandbox's snapshots: their parents outside the list make them roots.
	out, _, err := cli(t, url, "", "snapshots", "a")
	if want := "SNAPSHOT NAME TYPE SIZE AGE FROM RESTORED AS\nsnap_2 left filesystem 4.0 KiB 2m a a2"; err != nil || fields(out) != want {
		t.Errorf("snapshots a: %v\n%s", err, out)
	}
	// Forked sandboxes are restored from the fork's snapshot.
	if _, _, err := cli(t, url, "", "fork", "box", "--name", "f1", "--name", "f2"); err != nil {
		t.Fatal(err)
	}
	out, _, _ = cli(t, url, "", "snapshots", "box")
	if !strings.Contains(fields(out), "snap_6 fork memory 50.0 MiB 2m box f1, f2") {
		t.Errorf("fork in the tree:\n%s", out)
	}
	// Nothing yet: say how to take one.
	_, url = newFakeDaemon(t)
	if out, _, err := cli(t, url, "", "snapshots"); err != nil || out != "no snapshots; forkbox checkpoint SANDBOX takes one\n" {
		t.Errorf("no snapshots: %v %q", err, out)
	}
}

func TestListOrDash(t *testing.T) {
	for _, c := range []struct {
		items []string
		want  string
	}{
		{nil, "-"}, {[]string{"a"}, "a"}, {[]string{"a", "b", "c"}, "a, b, c"}, {[]string{"a", "b", "c", "d", "e"}, "a, b, c +2 more"},
	} {
		if got := listOrDash(c.items, 3); got != c.want {
			t.Errorf("listOrDash(%q) = %q, want %q", c.items, got, c.want)
		}
	}
}

// fakeTerminal makes the commands take stderr for a terminal of the given
// width and draw progress at once.
func fakeTerminal(t *testing.T, width int) {
	oldTerm, oldDelay, oldInterval := stderrTerminal, progressDelay, progressInterval
	t.Cleanup(func() { stderrTerminal, progressDelay, progressInterval = oldTerm, oldDelay, oldInterval })
	stderrTerminal = func(io.Writer) (int, bool) { return width, true }
	progressDelay, progressInterval = 0, 5*time.Millisecond
	t.Setenv("TERM", "xterm")
	t.Setenv("LC_ALL", "")
	t.Setenv("LC_CTYPE", "")
	t.Setenv("LANG", "C")
}

func TestCLIProgress(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")
	d.snapOpts.delay = 60 * time.Millisecond

	// Not a terminal (the tests' stderr is a buffer): nothing.
	if _, errOut, err := cli(t, url, "", "checkpoint", "--memory", "box"); err != nil || errOut != "" {
		t.Errorf("no terminal: err=%q %v", errOut, err)
	}

	fakeTerminal(t, 200)
	out, errOut, err := cli(t, url, "", "checkpoint", "--memory", "box")
	if err != nil || out != "snap_2\n" {
		t.Fatalf("checkpoint: out=%q %v", out, err)
	}
	// Frames redrawn in place, the line erased, then the summary.
	if !strings.HasPrefix(errOut, "\r\x1b[K| Saving a memory snapshot of box... 0.") ||
		!strings.Contains(errOut, "\r\x1b[K/ Saving") ||
		!strings.Contains(errOut, "s\r\x1b[KSaved memory snapshot snap_2 of box (50.0 MiB, paused 420ms) in 0.") ||
		!strings.HasSuffix(errOut, "s\n") {
		t.Errorf("checkpoint progress: %q", errOut)
	}

	out, errOut, err = cli(t, url, "", "fork", "box", "-n", "2")
	if err != nil || out != "sbx_2\nsbx_3\n" || !strings.Contains(errOut, "| Forking box into 2 sandboxes... ") ||
		!strings.Contains(errOut, "\r\x1b[KForked box into 2 sandboxes from snapshot snap_3 (paused 420ms) in 0.") {
		t.Errorf("fork progress: out=%q err=%q %v", out, errOut, err)
	}

	// create --snapshot draws the line and erases it, with no summary.
	_, errOut, err = cli(t, url, "", "create", "--snapshot", "snap_2")
	if err != nil || !strings.HasPrefix(errOut, "\r\x1b[K| Restoring snapshot snap_2... 0.") || !strings.HasSuffix(errOut, "s\r\x1b[K") {
		t.Errorf("create --snapshot progress: err=%q %v", errOut, err)
	}

	// A narrow terminal: the line is cut to fit, so it never wraps.
	fakeTerminal(t, 20)
	_, errOut, _ = cli(t, url, "", "checkpoint", "box")
	if first, _, _ := strings.Cut(strings.TrimPrefix(errOut, "\r\x1b[K"), "\r"); first != "| Saving a filesyst" {
		t.Errorf("narrow terminal: %q", errOut)
	}

	// --json, TERM=dumb and errors: no summary, and no progress for the first two.
	if _, errOut, err := cli(t, url, "", "--json", "checkpoint", "box"); err != nil || errOut != "" {
		t.Errorf("--json: err=%q %v", errOut, err)
	}
	t.Setenv("TERM", "dumb")
	if _, errOut, err := cli(t, url, "", "fork", "box"); err != nil || errOut != "" {
		t.Errorf("TERM=dumb: err=%q %v", errOut, err)
	}
	t.Setenv("TERM", "xterm")
	if _, errOut, err := cli(t, url, "", "checkpoint", "nope"); err == nil || strings.Contains(errOut, "Saved") || !strings.HasSuffix(errOut, "\r\x1b[K") {
		t.Errorf("failed checkpoint: err=%q %v", errOut, err)
	}

	// UTF-8 locales get a braille spinner.
	fakeTerminal(t, 200)
	t.Setenv("LANG", "en_US.UTF-8")
	if _, errOut, _ := cli(t, url, "", "checkpoint", "box"); !strings.HasPrefix(errOut, "\r\x1b[K⠋ Saving a filesystem snapshot of box… ") {
		t.Errorf("UTF-8 spinner: %q", errOut)
	}
}

func TestCLICheckpointInterrupted(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")
	d.snapOpts.hang = true
	d.snapOpts.arrived = make(chan struct{}, 1)

	for _, args := range [][]string{{"checkpoint", "--memory", "box"}, {"fork", "box", "-n", "2"}} {
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
		if exitCode(err) != 130 || !errors.Is(err, errInterrupted) || !strings.Contains(err.Error(), "forkbox snapshots box") || o.Len() != 0 {
			t.Errorf("%q: exit %d (%v) out=%q", args, exitCode(err), err, o.String())
		}
	}
}

func TestHumanMS(t *testing.T) {
	for ms, want := range map[int64]string{0: "-", 7: "7ms", 999: "999ms", 1000: "1.0s", 1250: "1.3s", 59_949: "59.9s", 59_960: "1m00s", 125_000: "2m05s"} {
		if got := humanMS(ms); got != want {
			t.Errorf("humanMS(%d) = %q, want %q", ms, got, want)
		}
	}
	if truncate("⠋ abc", 3) != "⠋ a" || truncate("ab", 3) != "ab" {
		t.Error("truncate")
	}
	if plural(1, "sandbox", "sandboxes") != "1 sandbox" || plural(3, "sandbox", "sandboxes") != "3 sandboxes" {
		t.Error("plural")
	}
}
