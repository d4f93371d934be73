// Package soak runs mixed concurrent traffic against one real forkbox
// daemon for a set time (FORKBOX_SOAK_DURATION, default 2m; `make soak`
// runs 20m) and fails on any error, any wrong result, and on anything left
// behind afterwards: mounts, loop devices, cgroups, veths, nftables rules,
// processes, and daemon file descriptors, goroutines or memory beyond a
// bound. Run as root; as any other user it skips with the reason.
package soak

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	fbdaemon "github.com/forkbox/forkbox/internal/daemon"
)

// Bounds, each tunable from the environment.
const (
	defaultDuration = 2 * time.Minute
	defaultWorkers  = 4
	// After the soak, with every sandbox deleted, the daemon's goroutines and
	// open fds must be back within this many of where they were at idle
	// before it (HTTP keep-alive connections and timers come and go).
	defaultSlack = 20
	// RSS may grow by the larger of this many MiB and this share of the
	// idle RSS before the soak. Observed on a 2-core VM: about 50 MiB at
	// idle after the warm-up, at most 1.5 MiB more at the peak of 4 busy
	// workers and within 1.5 MiB of the start afterwards (files and
	// snapshots stream through the daemon; nothing big is held). The bound
	// leaves room for the Go heap keeping what a busy moment made it grow
	// to, and is still crossed by a leak of about 13 KiB per operation in a
	// 20-minute soak (about 5000 operations).
	defaultRSSSlackMB  = 64
	defaultRSSSlackPct = 50
	opTimeout          = 3 * time.Minute // one operation slower than this has hung
	maxBoxes           = 3               // sandboxes a worker keeps at once
	maxSnaps           = 3               // snapshots a worker keeps at once
)

// TestSoak is the soak: FORKBOX_SOAK_WORKERS workers (default 4) each own
// their sandboxes and snapshots and cycle through a weighted mix of
// operations, checking each result, for FORKBOX_SOAK_DURATION; then
// everything is deleted and the host and the daemon must be as they were.
func TestSoak(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the soak needs root (it runs a real daemon: namespaces, cgroups, mounts); make test and make soak run it as root")
	}
	dur := envDuration(t, "FORKBOX_SOAK_DURATION", defaultDuration)
	workers := int(envInt(t, "FORKBOX_SOAK_WORKERS", defaultWorkers))
	slack := envInt(t, "FORKBOX_SOAK_SLACK", defaultSlack)
	rssSlackMB := envInt(t, "FORKBOX_SOAK_RSS_SLACK_MB", defaultRSSSlackMB)
	rssSlackPct := envInt(t, "FORKBOX_SOAK_RSS_SLACK_PCT", defaultRSSSlackPct)
	if dl, ok := t.Deadline(); ok && time.Until(dl) < dur+5*time.Minute {
		t.Fatalf("the test deadline (-timeout) leaves %s for a %s soak and its setup and checks; give -timeout at least %s",
			time.Until(dl).Round(time.Second), dur, dur+10*time.Minute)
	}

	bin := forkboxBinary(t)
	d := startDaemon(t, bin, filepath.Join(t.TempDir(), "data"))
	s := &soak{t: t, d: d, stats: map[string]*opStats{}, made: map[string]bool{}}

	// Warm-up: one round of everything, so that what the daemon builds once
	// (disk templates, ready inits, CRIU's check, the image's cache) is in
	// the baseline and not counted as growth.
	warm := s.newWorker(-1, 1)
	warm.warmUp()
	warm.cleanup()
	if s.failed() {
		s.report(dur, workers, sample{}, sample{}, nil)
		t.FailNow()
	}
	base := s.settle(sample{}, 0, 15*time.Second)
	t.Logf("baseline at idle: %s", base)

	// The soak itself, with a monitor that samples the daemon and notices
	// it dying.
	start := time.Now()
	deadline := start.Add(dur)
	stopMon := make(chan struct{})
	monDone := make(chan struct{})
	go s.monitor(stopMon, monDone)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			w := s.newWorker(i, uint64(time.Now().UnixNano())+uint64(i))
			w.loop(deadline)
			w.cleanup()
		}(i)
	}
	wg.Wait()
	close(stopMon)
	<-monDone
	t.Logf("soak of %s with %d workers done in %s", dur, workers, time.Since(start).Round(time.Second))

	// Afterwards: nothing live, nothing left on the host, the daemon back
	// near its baseline.
	if list, err := d.c.ListSandboxes(context.Background(), client.ListOptions{}); err != nil {
		s.failf("list sandboxes after the soak: %v", err)
	} else {
		for _, sb := range list.Sandboxes {
			if sb.State != api.StateTerminated {
				s.failf("sandbox %s (%s) is %s after every worker deleted its own", sb.ID, sb.Name, sb.State)
			}
		}
	}
	if list, err := d.c.ListSnapshots(context.Background(), ""); err != nil {
		s.failf("list snapshots after the soak: %v", err)
	} else if len(list.Snapshots) > 0 {
		s.failf("%d snapshots left after every worker deleted its own", len(list.Snapshots))
	}
	end := s.settle(base, slack, time.Minute)
	var leaks []string
	s.mu.Lock()
	ids := make([]string, 0, len(s.made))
	for id := range s.made {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	sort.Strings(ids)
	// What a delete frees may take a moment to go (a killed process stays,
	// a zombie, until its parent reaps it): wait for it, within bounds.
	leakStart := time.Now()
	for {
		leaks = nil
		for _, id := range ids {
			leaks = append(leaks, sandboxLeaks(d.dataDir, id)...)
		}
		if len(leaks) == 0 || time.Since(leakStart) > 30*time.Second {
			break
		}
		time.Sleep(time.Second)
	}
	if waited := time.Since(leakStart); waited > time.Second {
		t.Logf("the host took %s to free what the deleted sandboxes held", waited.Round(time.Second))
	}
	leaks = append(leaks, end.diff(base, slack, rssSlackMB, rssSlackPct)...)
	for _, l := range leaks {
		s.failf("leak: %s", l)
	}
	if left := snapshotDirsLeft(d.dataDir); len(left) > 0 {
		s.failf("leak: snapshot directories left: %v", left)
	}
	s.report(dur, workers, base, end, leaks)
	if s.failed() {
		t.Logf("daemon log tail:\n%s", d.logTail())
	}
}

// soak is the state shared by the workers: the daemon, per-operation
// statistics, failures and every sandbox id made.
type soak struct {
	t  *testing.T
	d  *daemon
	mu sync.Mutex

	stats    map[string]*opStats
	failures []string
	nfail    int
	made     map[string]bool
	peak     sample
}

type opStats struct {
	Count  int             `json:"count"`
	Errors int             `json:"errors"`
	lat    []time.Duration // of the successful ones
}

func (s *soak) failf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nfail++
	msg := fmt.Sprintf(format, args...)
	if len(s.failures) < 50 {
		s.failures = append(s.failures, msg)
	}
	s.t.Errorf("%s", msg)
}

func (s *soak) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nfail > 0
}

func (s *soak) record(op string, d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats[op]
	if st == nil {
		st = &opStats{}
		s.stats[op] = st
	}
	st.Count++
	if err != nil {
		st.Errors++
	} else {
		st.lat = append(st.lat, d)
	}
}

func (s *soak) madeSandbox(id string) {
	s.mu.Lock()
	s.made[id] = true
	s.mu.Unlock()
}

// monitor samples the daemon every 10 s for the peak, and fails the soak
// when the daemon dies.
func (s *soak) monitor(stop, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.d.exited:
			s.failf("the daemon exited during the soak; log tail:\n%s", s.d.logTail())
			return
		case <-tick.C:
			if sm, err := s.d.sample(); err == nil {
				s.mu.Lock()
				s.peak = s.peak.max(sm)
				s.mu.Unlock()
			}
		}
	}
}

// settle waits (up to bound) for the daemon to come back to base within
// slack, then samples it. With a zero base it only waits a moment for what
// the warm-up started to end.
func (s *soak) settle(base sample, slack int64, bound time.Duration) sample {
	deadline := time.Now().Add(bound)
	var last sample
	for {
		sm, err := s.d.sample()
		if err != nil {
			s.failf("sampling the daemon: %v", err)
			return last
		}
		last = sm
		if base.RSS == 0 {
			if time.Now().After(deadline) {
				return sm
			}
		} else if len(sm.diff(base, slack, 1<<40, 0)) == 0 || time.Now().After(deadline) {
			return sm
		}
		time.Sleep(time.Second)
	}
}

// report prints the summary and writes it as JSON to FORKBOX_SOAK_REPORT.
func (s *soak) report(dur time.Duration, workers int, base, end sample, leaks []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	type opOut struct {
		Count  int     `json:"count"`
		Errors int     `json:"errors"`
		P50ms  float64 `json:"p50_ms"`
		P95ms  float64 `json:"p95_ms"`
		MaxMs  float64 `json:"max_ms"`
	}
	ops := map[string]opOut{}
	names := make([]string, 0, len(s.stats))
	for name := range s.stats {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s %6s %6s %9s %9s %9s\n", "operation", "count", "errors", "p50 ms", "p95 ms", "max ms")
	total := 0
	for _, name := range names {
		st := s.stats[name]
		lat := slices.Clone(st.lat)
		slices.Sort(lat)
		o := opOut{Count: st.Count, Errors: st.Errors, P50ms: ms(pct(lat, 50)), P95ms: ms(pct(lat, 95)), MaxMs: ms(pct(lat, 100))}
		ops[name] = o
		total += st.Count
		fmt.Fprintf(&b, "%-20s %6d %6d %9.0f %9.0f %9.0f\n", name, o.Count, o.Errors, o.P50ms, o.P95ms, o.MaxMs)
	}
	fmt.Fprintf(&b, "%d operations, %d sandboxes made, %d failures\n", total, len(s.made), s.nfail)
	fmt.Fprintf(&b, "daemon at idle before: %s\ndaemon at peak:        %s\ndaemon at idle after:  %s\n", base, s.peak, end)
	if len(leaks) == 0 {
		b.WriteString("leaks: none\n")
	} else {
		fmt.Fprintf(&b, "leaks: %d\n", len(leaks))
	}
	s.t.Logf("soak summary (%s, %d workers):\n%s", dur, workers, b.String())
	path := os.Getenv("FORKBOX_SOAK_REPORT")
	if path == "" {
		return
	}
	out := map[string]any{
		"duration": dur.String(), "workers": workers, "operations": ops, "sandboxes_made": len(s.made),
		"start": base, "peak": s.peak, "end": end, "leaks": leaks, "failures": s.failures, "failure_count": s.nfail,
	}
	data, _ := json.MarshalIndent(out, "", "  ")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		s.t.Errorf("writing the report: %v", err)
	}
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// A worker owns its sandboxes (boxes) and snapshots: no other worker
// touches them, so every result is known in advance.
type worker struct {
	s     *soak
	id    int
	r     *rand.Rand
	boxes []*box
	snaps []*snap
	seq   int
}

// box is a sandbox and what the worker knows is in it.
type box struct {
	id, name string
	n        int                 // the counter n in its default Python context
	files    map[string][32]byte // path → sha256 of what was written
}

// snap is a snapshot and what a sandbox restored from it must hold.
type snap struct {
	id    string
	typ   api.SnapshotType
	n     int // the counter (memory snapshots; a filesystem one starts a new kernel)
	files map[string][32]byte
}

func (s *soak) newWorker(id int, seed uint64) *worker {
	return &worker{s: s, id: id, r: rand.New(rand.NewPCG(seed, uint64(id+1)))}
}

// op runs one operation, times it and records a failure with the daemon's
// log tail.
func (w *worker) op(name string, b *box, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	w.s.record(name, time.Since(start), err)
	if err != nil {
		where := ""
		if b != nil {
			where = fmt.Sprintf(" on %s (%s)", b.id, b.name)
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s: %w", opTimeout, err)
		}
		w.s.failf("worker %d: %s%s after %s: %v", w.id, name, where, time.Since(start).Round(time.Millisecond), err)
	}
	return err
}

func (w *worker) c() *client.Client { return w.s.d.c }

func (w *worker) pick(n int) int { return w.r.IntN(n) }

// warmUp goes once through create, code, files, both checkpoints, a
// restore of each, a fork, suspend and resume.
func (w *worker) warmUp() {
	b := w.create("create", api.CreateSandboxRequest{})
	if b == nil {
		return
	}
	w.code(b)
	w.files(b)
	w.exec(b)
	w.checkpoint(b, api.SnapshotFilesystem)
	w.checkpoint(b, api.SnapshotMemory)
	for _, sn := range slices.Clone(w.snaps) {
		w.restore(sn)
	}
	w.fork(b)
	w.suspendThenCode(b)
	w.suspendResume(b)
}

// loop runs random operations until deadline.
func (w *worker) loop(deadline time.Time) {
	type choice struct {
		weight int
		run    func()
	}
	for time.Now().Before(deadline) && !w.s.dead() {
		if len(w.boxes) == 0 {
			w.createAny()
			continue
		}
		if len(w.boxes) > maxBoxes {
			w.delete(w.boxes[0])
			continue
		}
		if len(w.snaps) > maxSnaps {
			w.deleteSnapshot(w.snaps[0])
			continue
		}
		b := w.boxes[w.pick(len(w.boxes))]
		choices := []choice{
			{3, w.createAny},
			{4, func() { w.exec(b) }},
			{5, func() { w.code(b) }},
			{3, func() { w.files(b) }},
			{1, func() { w.checkpoint(b, api.SnapshotFilesystem) }},
			{1, func() { w.checkpoint(b, api.SnapshotMemory) }},
			{1, func() { w.fork(b) }},
			{1, func() { w.suspendThenCode(b) }},
			{1, func() { w.suspendResume(b) }},
			{1, func() { w.delete(b) }},
		}
		if len(w.snaps) > 0 {
			choices = append(choices, choice{2, func() { w.restore(w.snaps[w.pick(len(w.snaps))]) }})
			choices = append(choices, choice{1, func() { w.deleteSnapshot(w.snaps[w.pick(len(w.snaps))]) }})
		}
		total := 0
		for _, c := range choices {
			total += c.weight
		}
		x := w.pick(total)
		for _, c := range choices {
			if x -= c.weight; x < 0 {
				c.run()
				break
			}
		}
	}
}

func (s *soak) dead() bool {
	select {
	case <-s.d.exited:
		return true
	default:
		return false
	}
}

// cleanup deletes every sandbox and snapshot the worker owns.
func (w *worker) cleanup() {
	for len(w.boxes) > 0 {
		w.delete(w.boxes[0])
	}
	for len(w.snaps) > 0 {
		w.deleteSnapshot(w.snaps[0])
	}
}

func (w *worker) drop(b *box) {
	w.boxes = slices.DeleteFunc(w.boxes, func(x *box) bool { return x == b })
}

// broken drops a box after a failed operation, deleting it if it can, so
// that one failure does not cascade into the following operations.
func (w *worker) broken(b *box) {
	w.drop(b)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	w.c().DeleteSandbox(ctx, b.id)
}

func (w *worker) createAny() {
	hour := int64(3600)
	inet := w.pick(4) == 0 // a quarter with a network link: veth, addresses, nftables
	switch w.pick(4) {
	case 0:
		w.seq++
		w.create("create_named", api.CreateSandboxRequest{Name: fmt.Sprintf("soak-w%d-%d", w.id, w.seq), TimeoutSecs: &hour, AllowInternetAccess: inet})
	case 1:
		if sn := w.snapOf(api.SnapshotMemory); sn != nil {
			w.restore(sn)
			return
		}
		fallthrough
	default:
		w.create("create", api.CreateSandboxRequest{TimeoutSecs: &hour, AllowInternetAccess: inet})
	}
}

func (w *worker) snapOf(typ api.SnapshotType) *snap {
	var out []*snap
	for _, sn := range w.snaps {
		if sn.typ == typ {
			out = append(out, sn)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out[w.pick(len(out))]
}

// soakDiskMB is the disk of the soak's sandboxes: what they write is small,
// and at the default 2 GiB the promises of ~20 live sandboxes approach the
// free space of a CI machine, where creates are then refused for room.
var soakDiskMB int64 = 512

func (w *worker) create(op string, req api.CreateSandboxRequest) *box {
	if req.DiskMB == nil {
		req.DiskMB = &soakDiskMB
	}
	var b *box
	w.op(op, nil, func(ctx context.Context) error {
		sb, err := w.c().CreateSandbox(ctx, req)
		if err != nil {
			return err
		}
		w.s.madeSandbox(sb.ID)
		b = &box{id: sb.ID, name: sb.Name, files: map[string][32]byte{}}
		w.boxes = append(w.boxes, b)
		if sb.State != api.StateRunning || sb.Name != req.Name {
			return fmt.Errorf("created %s: state %s, name %q; want running, %q", sb.ID, sb.State, sb.Name, req.Name)
		}
		return nil
	})
	return b
}

// code increments the counter in the default context and checks its value:
// the kernel kept its state (across suspends, restores and forks too).
func (w *worker) code(b *box) bool {
	return w.codeAs("code", b)
}

func (w *worker) codeAs(op string, b *box) bool {
	err := w.op(op, b, func(ctx context.Context) error {
		ex, err := w.c().RunCode(ctx, b.id, api.RunCodeRequest{Code: "n = globals().get('n', 0) + 1\nn"})
		if err != nil {
			return err
		}
		if ex.Error != nil {
			return fmt.Errorf("cell failed: %s: %s", ex.Error.Name, ex.Error.Value)
		}
		if got, want := client.MainText(ex), strconv.Itoa(b.n+1); got != want {
			return fmt.Errorf("counter is %q, want %s: the kernel lost its state", got, want)
		}
		b.n++
		return nil
	})
	if err != nil {
		w.broken(b)
	}
	return err == nil
}

// exec runs a command and checks its output; when the box holds a file,
// the command hashes it, which checks the file as well.
func (w *worker) exec(b *box) {
	err := w.op("exec", b, func(ctx context.Context) error {
		for path, sum := range b.files {
			res, err := w.c().Exec(ctx, b.id, api.ExecRequest{Cmd: "sha256sum", Args: []string{path}})
			if err != nil {
				return err
			}
			if want := hex.EncodeToString(sum[:]) + "  " + path + "\n"; res.ExitCode != 0 || res.Stdout != want {
				return fmt.Errorf("sha256sum %s: exit %d, %q (stderr %q); want %q", path, res.ExitCode, res.Stdout, res.Stderr, want)
			}
			return nil
		}
		token := fmt.Sprintf("soak-%d", w.r.Uint32())
		res, err := w.c().Exec(ctx, b.id, api.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo $0", token}})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 || res.Stdout != token+"\n" {
			return fmt.Errorf("echo: exit %d, %q (stderr %q); want %q", res.ExitCode, res.Stdout, res.Stderr, token+"\n")
		}
		return nil
	})
	if err != nil {
		w.broken(b)
	}
}

// files uploads random bytes (mostly small, sometimes a few MiB) and
// downloads them again.
func (w *worker) files(b *box) {
	err := w.op("upload_download", b, func(ctx context.Context) error {
		size := 1 + w.pick(64<<10)
		if w.pick(8) == 0 {
			size = 1<<20 + w.pick(3<<20)
		}
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(w.r.Uint32())
		}
		path := fmt.Sprintf("/workspace/soak-%d.bin", w.pick(3))
		res, err := w.c().WriteFile(ctx, b.id, path, strings.NewReader(string(data)), 0o644)
		if err != nil {
			return err
		}
		if res.Size != int64(size) {
			return fmt.Errorf("upload of %d bytes reported %d", size, res.Size)
		}
		got, err := w.c().ReadFile(ctx, b.id, path)
		if err != nil {
			return err
		}
		if sha256.Sum256(got) != sha256.Sum256(data) {
			return fmt.Errorf("download of %s: %d bytes that differ from the %d uploaded", path, len(got), size)
		}
		b.files[path] = sha256.Sum256(data)
		return nil
	})
	if err != nil {
		w.broken(b)
	}
}

func (w *worker) checkpoint(b *box, typ api.SnapshotType) {
	err := w.op("checkpoint_"+string(typ), b, func(ctx context.Context) error {
		sn, err := w.c().Checkpoint(ctx, b.id, api.CheckpointRequest{Type: typ})
		if err != nil {
			return err
		}
		s := &snap{id: sn.ID, typ: typ, files: maps(b.files)}
		if typ == api.SnapshotMemory {
			s.n = b.n
		}
		w.snaps = append(w.snaps, s)
		if sn.Type != typ || sn.SandboxID != b.id {
			return fmt.Errorf("snapshot %s: type %s of %s; want %s of %s", sn.ID, sn.Type, sn.SandboxID, typ, b.id)
		}
		return nil
	})
	if err != nil {
		w.broken(b)
	}
}

// restore creates a sandbox from a snapshot and checks it: its files, and
// for a memory snapshot the counter it had (a filesystem one starts a new
// kernel, so the counter starts again).
func (w *worker) restore(sn *snap) {
	b := w.create("create_from_"+string(sn.typ), api.CreateSandboxRequest{SnapshotID: sn.id})
	if b == nil {
		return
	}
	b.n, b.files = sn.n, maps(sn.files)
	if w.codeAs("code_after_restore", b) {
		w.exec(b)
	}
}

// fork makes two branches of a running sandbox; each, and the source, go
// on from the same counter independently.
func (w *worker) fork(src *box) {
	var branches []*box
	err := w.op("fork", src, func(ctx context.Context) error {
		res, err := w.c().Fork(ctx, src.id, api.ForkRequest{Count: 2})
		if err != nil {
			return err
		}
		w.snaps = append(w.snaps, &snap{id: res.Snapshot.ID, typ: api.SnapshotMemory, n: src.n, files: maps(src.files)})
		for _, sb := range res.Sandboxes {
			w.s.madeSandbox(sb.ID)
			b := &box{id: sb.ID, name: sb.Name, n: src.n, files: maps(src.files)}
			branches = append(branches, b)
			w.boxes = append(w.boxes, b)
		}
		if len(res.Sandboxes) != 2 {
			return fmt.Errorf("fork gave %d sandboxes, want 2", len(res.Sandboxes))
		}
		return nil
	})
	if err != nil {
		w.broken(src)
		return
	}
	for _, b := range append(branches, src) {
		w.codeAs("code_after_fork", b)
	}
}

// suspendThenCode suspends a sandbox and runs code in it, which resumes it
// with its kernel's state.
func (w *worker) suspendThenCode(b *box) {
	if !w.suspend(b) {
		return
	}
	if w.codeAs("code_auto_resume", b) {
		w.expectState(b, api.StateRunning)
	}
}

// suspendResume suspends and explicitly resumes a sandbox.
func (w *worker) suspendResume(b *box) {
	if !w.suspend(b) {
		return
	}
	err := w.op("resume", b, func(ctx context.Context) error {
		sb, err := w.c().Resume(ctx, b.id)
		if err != nil {
			return err
		}
		if sb.State != api.StateRunning {
			return fmt.Errorf("resumed sandbox is %s", sb.State)
		}
		return nil
	})
	if err != nil {
		w.broken(b)
		return
	}
	w.code(b)
}

func (w *worker) suspend(b *box) bool {
	err := w.op("suspend", b, func(ctx context.Context) error {
		sb, err := w.c().Suspend(ctx, b.id)
		if err != nil {
			return err
		}
		if sb.State != api.StateSuspended {
			return fmt.Errorf("suspended sandbox is %s", sb.State)
		}
		return nil
	})
	if err != nil {
		w.broken(b)
	}
	return err == nil
}

func (w *worker) expectState(b *box, state api.SandboxState) {
	err := w.op("get", b, func(ctx context.Context) error {
		sb, err := w.c().GetSandbox(ctx, b.id)
		if err != nil {
			return err
		}
		if sb.State != state {
			return fmt.Errorf("sandbox is %s, want %s", sb.State, state)
		}
		return nil
	})
	if err != nil {
		w.broken(b)
	}
}

func (w *worker) delete(b *box) {
	w.drop(b)
	w.op("delete", b, func(ctx context.Context) error {
		sb, err := w.c().DeleteSandbox(ctx, b.id)
		if err != nil {
			return err
		}
		if sb.State != api.StateTerminated {
			return fmt.Errorf("deleted sandbox is %s", sb.State)
		}
		return nil
	})
}

func (w *worker) deleteSnapshot(sn *snap) {
	w.snaps = slices.DeleteFunc(w.snaps, func(x *snap) bool { return x == sn })
	w.op("delete_snapshot", nil, func(ctx context.Context) error {
		if err := w.c().DeleteSnapshot(ctx, sn.id); err != nil {
			return fmt.Errorf("snapshot %s: %w", sn.id, err)
		}
		return nil
	})
}

func maps(m map[string][32]byte) map[string][32]byte {
	out := make(map[string][32]byte, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// sample is what is measured of the daemon and the host: the daemon's
// goroutines, open fds and RSS (from its /metrics), and the host's mounts
// under the data dir, loop devices backed by files under it, and the rules
// and set elements of the nftables table inet forkbox.
type sample struct {
	Goroutines int64 `json:"goroutines"`
	FDs        int64 `json:"open_fds"`
	RSS        int64 `json:"rss_bytes"`
	Mounts     int64 `json:"mounts"`
	Loops      int64 `json:"loop_devices"`
	NftRules   int64 `json:"nft_rules"` // -1: nft is not installed
}

func (sm sample) String() string {
	return fmt.Sprintf("goroutines %d, open fds %d, RSS %.1f MiB, mounts %d, loop devices %d, nft rules %d",
		sm.Goroutines, sm.FDs, float64(sm.RSS)/(1<<20), sm.Mounts, sm.Loops, sm.NftRules)
}

func (sm sample) max(o sample) sample {
	return sample{Goroutines: max(sm.Goroutines, o.Goroutines), FDs: max(sm.FDs, o.FDs), RSS: max(sm.RSS, o.RSS),
		Mounts: max(sm.Mounts, o.Mounts), Loops: max(sm.Loops, o.Loops), NftRules: max(sm.NftRules, o.NftRules)}
}

// diff lists how sm is past base: host objects must be back to what they
// were, goroutines and fds within slack, RSS within the larger of slackMB
// and pct percent.
func (sm sample) diff(base sample, slack, slackMB, pct int64) []string {
	var out []string
	if sm.Mounts > base.Mounts {
		out = append(out, fmt.Sprintf("mounts under the data dir: %d, %d before", sm.Mounts, base.Mounts))
	}
	if sm.Loops > base.Loops {
		out = append(out, fmt.Sprintf("loop devices on files under the data dir: %d, %d before", sm.Loops, base.Loops))
	}
	if sm.NftRules != base.NftRules {
		out = append(out, fmt.Sprintf("rules and set elements in table inet forkbox: %d, %d before", sm.NftRules, base.NftRules))
	}
	if sm.Goroutines > base.Goroutines+slack {
		out = append(out, fmt.Sprintf("daemon goroutines: %d, %d before (slack %d)", sm.Goroutines, base.Goroutines, slack))
	}
	if sm.FDs > base.FDs+slack {
		out = append(out, fmt.Sprintf("daemon open fds: %d, %d before (slack %d)", sm.FDs, base.FDs, slack))
	}
	bound := max(slackMB<<20, base.RSS*pct/100)
	if sm.RSS > base.RSS+bound {
		out = append(out, fmt.Sprintf("daemon RSS: %.1f MiB, %.1f MiB before (bound +%.1f MiB)",
			float64(sm.RSS)/(1<<20), float64(base.RSS)/(1<<20), float64(bound)/(1<<20)))
	}
	return out
}

// sample measures the daemon and the host now.
func (d *daemon) sample() (sample, error) {
	var sm sample
	resp, err := http.Get("http://" + d.addr + "/metrics")
	if err != nil {
		return sm, err
	}
	defer resp.Body.Close()
	got := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			sm.Goroutines = int64(f)
		case "process_open_fds":
		case "process_resident_memory_bytes":
			sm.RSS = int64(f)
		default:
			continue
		}
		got[name] = true
	}
	if len(got) != 3 {
		return sm, fmt.Errorf("/metrics lacks go_goroutines, process_open_fds or process_resident_memory_bytes (found %v)", got)
	}
	// The fds from /proc, as the daemon's own count includes the one it
	// reads its fd directory with.
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
	if err != nil {
		return sm, err
	}
	sm.FDs = int64(len(fds))
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 4 && (fields[4] == d.dataDir || strings.HasPrefix(fields[4], d.dataDir+"/")) {
				sm.Mounts++
			}
		}
		f.Close()
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range backing {
		if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), d.dataDir+"/") {
			sm.Loops++
		}
	}
	sm.NftRules = nftRules()
	return sm, nil
}

// nftRules counts the rules and set elements of table inet forkbox (-1
// without nft, 0 without the table).
func nftRules() int64 {
	if _, err := exec.LookPath("nft"); err != nil {
		return -1
	}
	out, err := exec.Command("nft", "-j", "list", "table", "inet", "forkbox").Output()
	if err != nil {
		return 0
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if json.Unmarshal(out, &doc) != nil {
		return 0
	}
	var n int64
	for _, obj := range doc.Nftables {
		if _, ok := obj["rule"]; ok {
			n++
		}
		if raw, ok := obj["set"]; ok {
			var set struct {
				Elem []json.RawMessage `json:"elem"`
			}
			json.Unmarshal(raw, &set)
			n += int64(len(set.Elem))
		}
	}
	return n
}

// sandboxLeaks lists what is left on the host of sandbox id: mounts,
// cgroups (v1 hierarchies and the unified one), processes in its cgroups,
// its veth (named "fbx" and 12 hex digits of the id's SHA-256), a loop
// device on its disk, its directory.
func sandboxLeaks(dataDir, id string) []string {
	var out []string
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, id) {
				out = append(out, id+": mount: "+line)
			}
		}
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/forkbox/" + id)
	cg2, _ := filepath.Glob("/sys/fs/cgroup/forkbox/" + id)
	for _, c := range append(cgs, cg2...) {
		out = append(out, id+": cgroup: "+c)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "/"+id) {
			out = append(out, id+": process: "+procInfo(filepath.Dir(p)))
		}
	}
	sum := sha256.Sum256([]byte(id))
	veth := "fbx" + hex.EncodeToString(sum[:6])
	if _, err := net.InterfaceByName(veth); err == nil {
		out = append(out, id+": veth: "+veth)
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range backing {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), id) {
			out = append(out, id+": loop device: "+p+" → "+strings.TrimSpace(string(b)))
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, "sandboxes", id)); err == nil {
		out = append(out, id+": directory: "+filepath.Join(dataDir, "sandboxes", id))
	}
	return out
}

// snapshotDirsLeft lists the snapshot directories under dataDir, and the
// fork marks of the store's .intents (a fork's, until it answered), which
// with nothing in flight must all be gone.
func snapshotDirsLeft(dataDir string) []string {
	var out []string
	entries, _ := os.ReadDir(filepath.Join(dataDir, "snapshots"))
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	marks, _ := filepath.Glob(filepath.Join(dataDir, "snapshots", ".intents", "*", "*"))
	for _, m := range marks {
		out = append(out, strings.TrimPrefix(m, filepath.Join(dataDir, "snapshots")+"/"))
	}
	return out
}

// procInfo describes a process for a leak report: pid, name, state (Z is a
// zombie nobody reaped yet), parent, command line, and for a zombie or a
// process of several threads each thread's state and wait channel (a
// zombie leader with live threads cannot be reaped).
func procInfo(dir string) string {
	stat, _ := os.ReadFile(filepath.Join(dir, "stat"))
	cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
	// stat is "pid (comm) state ppid …"; comm may hold spaces.
	st := string(stat)
	state := ""
	if i, j := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')'); i >= 0 && j > i {
		f := strings.Fields(st[j+1:])
		if len(f) > 1 {
			state = f[0]
			st = fmt.Sprintf("%s, state %s, parent %s", st[i+1:j], f[0], f[1])
		}
	}
	out := fmt.Sprintf("%s (%s) %q", dir, st, strings.ReplaceAll(strings.TrimSpace(string(cmd)), "\x00", " "))
	tasks, _ := filepath.Glob(filepath.Join(dir, "task", "*"))
	if state == "Z" || len(tasks) > 1 {
		var ts []string
		for _, task := range tasks {
			b, _ := os.ReadFile(filepath.Join(task, "stat"))
			wchan, _ := os.ReadFile(filepath.Join(task, "wchan"))
			s := string(b)
			if j := strings.LastIndexByte(s, ')'); j > 0 {
				if f := strings.Fields(s[j+1:]); len(f) > 0 {
					ts = append(ts, fmt.Sprintf("%s %s %s", filepath.Base(task), f[0], wchan))
				}
			}
		}
		out += fmt.Sprintf(", threads: %v", ts)
	}
	return out
}

// daemon is a `forkbox serve` run by the test (a small copy of the e2e
// tests' helper). spawn starts it (again: the chaos test restarts it with
// the same flags after each kill), appending to the same log.
type daemon struct {
	dataDir, addr, logPath string
	bin                    string
	args                   []string // serve's flags after --listen and --data-dir
	cmd                    *exec.Cmd
	c                      *client.Client
	exited                 chan struct{} // closed when the process of cmd has exited
}

// forkboxBinary is a copy of FORKBOX_BIN (make test and make soak set it)
// and of the forkbox-agent beside it, else a fresh build. A copy, because a
// sandbox's memory images name the agent binary it ran: a `make build`
// during the soak would make every suspended sandbox unrestorable.
func forkboxBinary(t *testing.T) string {
	dir := t.TempDir()
	if bin := os.Getenv("FORKBOX_BIN"); bin != "" {
		for _, src := range []string{bin, filepath.Join(filepath.Dir(bin), "forkbox-agent")} {
			data, err := os.ReadFile(src)
			if errors.Is(err, os.ErrNotExist) && src != bin {
				continue // forkbox plays the agent itself
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return filepath.Join(dir, filepath.Base(bin))
	}
	bin := filepath.Join(dir, "forkbox")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/forkbox")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build forkbox: %v\n%s", err, out)
	}
	return bin
}

// startDaemon builds the default image if needed (in the images directory
// the other tests share), then starts a daemon on a free port with its own
// data dir and the extra serve flags args, and stops it when the test ends.
func startDaemon(t *testing.T, bin, dataDir string, args ...string) *daemon {
	if os.Getenv("FORKBOX_IMAGES_DIR") == "" {
		t.Setenv("FORKBOX_IMAGES_DIR", filepath.Join(fbdaemon.DefaultDataDir(), "images"))
	}
	if out, err := exec.Command(bin, "prepare").CombinedOutput(); err != nil {
		t.Fatalf("forkbox prepare: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	d := &daemon{dataDir: dataDir, addr: addr, logPath: dataDir + ".log", bin: bin, args: args}
	if err := d.spawn(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop(t) })
	d.c = client.New("http://" + addr)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := d.c.Health(ctx)
		cancel()
		if err == nil {
			return d
		}
		select {
		case <-d.exited:
			t.Fatalf("daemon exited at start; log:\n%s", d.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not healthy after 60s: %v; log:\n%s", err, d.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// spawn starts the daemon's process with its flags, its output appended to
// its log, and sets cmd and a new exited.
func (d *daemon) spawn() error {
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(d.bin, append([]string{"serve", "--listen", d.addr, "--data-dir", d.dataDir}, d.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	d.cmd, d.exited = cmd, exited
	return nil
}

// stop ends the daemon with SIGTERM: with nothing running it must be gone
// quickly. Whatever is still live is deleted first.
func (d *daemon) stop(t *testing.T) {
	select {
	case <-d.exited:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if list, err := d.c.ListSandboxes(ctx, client.ListOptions{}); err == nil {
		for _, sb := range list.Sandboxes {
			if sb.State != api.StateTerminated {
				d.c.DeleteSandbox(ctx, sb.ID)
			}
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("the daemon did not stop within 20s of SIGTERM; killing it")
		d.cmd.Process.Kill()
		<-d.exited
	}
}

func (d *daemon) logTail() string {
	f, err := os.Open(d.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 6000 {
		f.Seek(-6000, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

func envInt(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration like 2m or 20m", name, v)
	}
	return d
}
