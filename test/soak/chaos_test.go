package soak

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	_ "modernc.org/sqlite" // the test reads the daemon's store (read-only) for its end checks
)

// The chaos soak's bounds. Those of the length are tunable from the
// environment (see TestChaos); the others are the contract it holds the
// daemon to.
const (
	defaultChaosDuration = 100 * time.Second
	defaultChaosKills    = 3
	defaultChaosWorkers  = 6
	// restartDelay is how long the daemon stays dead after each SIGKILL.
	restartDelay = 500 * time.Millisecond
	// healthzBound: a restarted daemon's port answers GET /healthz within
	// this of its start, whatever it finds. healthzGiveUp ends the test
	// when it never does.
	healthzBound  = 5 * time.Second
	healthzGiveUp = 60 * time.Second
	// settleBound: after a restart, a sandbox leaves creating, suspending
	// and resuming, and calls about it stop answering 503, within this.
	settleBound = 60 * time.Second
	// chaosOpTimeout: a request slower than this has hung.
	chaosOpTimeout = 2 * time.Minute
	chaosMaxBoxes  = 3 // sessions a worker keeps at once
	chaosMaxSnaps  = 3 // snapshots a worker keeps at once
	// chaosLabel labels every sandbox the test creates with its worker and
	// sequence number, so that the sandbox of a create a kill cut is found.
	chaosLabel = "forkbox-chaos"
	// chaosFile is the file each session holds (its hash is in the ledger).
	chaosFile = "/workspace/chaos.bin"
)

// killPlan is what each kill aims at, in turn: the start of an operation
// of that kind by any worker (the kill lands a moment after it), or ""
// for a kill at a random moment. Every kill also cuts whatever else the
// other workers have in flight.
var killPlan = []string{"suspend", "checkpoint_memory", "fork", "", "resume", "checkpoint_filesystem"}

// TestChaos is the chaos soak: FORKBOX_CHAOS_WORKERS clients (default 6)
// do what agents do against one daemon — create named and ephemeral
// sessions, run cells that set and read variables, exec, write and read
// files, take memory and filesystem checkpoints and restore them, fork
// into 2, suspend (and auto-resume with the next call), delete — while a
// killer kills the daemon with SIGKILL FORKBOX_CHAOS_KILLS times (default
// 3; spread over the duration, or a mean of FORKBOX_CHAOS_INTERVAL of
// traffic apart), sometimes at a random moment and sometimes just after a
// worker started a suspend, a checkpoint, a fork or a resume, and restarts
// it restartDelay later with the same flags and data dir. Traffic runs for
// FORKBOX_CHAOS_DURATION (default 100s), and until the last kill is
// checked.
//
// Each worker keeps a ledger of what the API acknowledged: its sessions,
// their state, the variables set in them and the hash of their file, its
// snapshots and what they hold, and its deletes; and, for requests a kill
// cut, what they may or may not have done. After every restart and at the
// end the ledger is checked (docs/ARCHITECTURE.md, "Daemon restart and
// crashes"): every acknowledged session still exists in a documented state
// (running, suspended, or error with a reason — error only where a request
// about it was cut); one untouched by the kill comes back as it was; each
// answers a cell with the variables last acknowledged and holds its file
// (resumed if suspended); acknowledged snapshots exist and deletes stay
// done; a create cut by a kill made one sandbox or none, a fork cut by one
// made all its branches or none and then left no snapshot. The test fails
// on any lost session or wrong value; on any 5xx but 503 unavailable with
// a Retry-After (which it retries); on any transport error but those of a
// request in flight at a kill; on a restart whose /healthz does not answer
// within healthzBound, or still counts sandboxes recovering settleBound
// after it; on a sandbox still creating, suspending or resuming
// settleBound after a restart; on a frozen cgroup at the end; and, after
// the final cleanup, on anything left: mounts, loop devices, cgroups,
// veths, nftables entries and processes of its sandboxes, processes the
// killed daemons left, and snapshot directories without rows or rows
// without directories. FORKBOX_CHAOS_SEED makes a run's choices repeat
// (the kills' timing does not); FORKBOX_CHAOS_LOG=<file> keeps the
// daemon's whole log of a failed run.
func TestChaos(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the chaos soak needs root (it runs a real daemon: namespaces, cgroups, mounts); make test and make chaos run it as root")
	}
	dur := envDuration(t, "FORKBOX_CHAOS_DURATION", defaultChaosDuration)
	kills := int(envInt(t, "FORKBOX_CHAOS_KILLS", defaultChaosKills))
	workers := int(envInt(t, "FORKBOX_CHAOS_WORKERS", defaultChaosWorkers))
	var interval time.Duration // 0: the kills spread over the duration
	if os.Getenv("FORKBOX_CHAOS_INTERVAL") != "" {
		interval = envDuration(t, "FORKBOX_CHAOS_INTERVAL", 0)
	}
	seed := uint64(envInt(t, "FORKBOX_CHAOS_SEED", time.Now().UnixNano()&(1<<62-1)))
	if workers < 1 {
		t.Fatalf("FORKBOX_CHAOS_WORKERS=%d: want at least 1", workers)
	}
	// Traffic, then per kill a restart and its checks beyond it, then the
	// end's checks and cleanup.
	need := dur + time.Duration(kills)*30*time.Second + 5*time.Minute
	if interval > 0 {
		need += time.Duration(kills) * interval
	}
	if dl, ok := t.Deadline(); ok && time.Until(dl) < need {
		t.Fatalf("the test deadline (-timeout) leaves %s for a %s chaos soak with %d kills and its checks; give -timeout at least %s",
			time.Until(dl).Round(time.Second), dur, kills, need.Round(time.Minute))
	}
	apart := "spread over it"
	if interval > 0 {
		apart = fmt.Sprintf("%s of traffic apart", interval)
	}
	t.Logf("chaos soak: %s of traffic, %d workers, %d kills %s, seed %d (FORKBOX_CHAOS_SEED)", dur, workers, kills, apart, seed)

	bin := forkboxBinary(t)
	// The default pool is off: its ready sandboxes would come and go
	// across the restarts without any client asking, and their kernels
	// load a small machine.
	d := startDaemon(t, bin, filepath.Join(t.TempDir(), "data"), "--default-pool=0")
	c := newChaos(t, d, seed)
	t.Cleanup(func() {
		c.mu.Lock()
		c.over = true // the daemon's stop at the end is no crash
		c.mu.Unlock()
	})
	c.watch(d.exited)

	// Warm-up: one round of everything, so that what the daemon builds
	// once (disk templates, CRIU's check, the image's cache) is in the
	// baseline and the first kill meets a daemon in its stride.
	warm := c.newWorker(-1)
	warm.warmUp()
	warm.cleanup()
	if c.failed() {
		c.report(dur, workers, kills, time.Duration(0))
		t.Logf("daemon log tail:\n%s", c.logTail(20000))
		t.FailNow()
	}
	c.baseMounts, c.baseLoops = hostCounts(d.dataDir)
	t.Logf("baseline at idle: %d mounts and %d loop devices under the data dir", c.baseMounts, c.baseLoops)

	start := time.Now()
	c.start, c.workers = start, workers
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		c.killer(kills, dur, interval)
	}()
	deadline := start.Add(dur)
	ws := make([]*cworker, workers)
	var wg sync.WaitGroup
	for i := range ws {
		ws[i] = c.newWorker(i)
		wg.Add(1)
		go func(w *cworker) {
			defer wg.Done()
			w.loop(deadline, killerDone)
		}(ws[i])
	}
	wg.Wait()
	<-killerDone
	traffic := time.Since(start)
	t.Logf("traffic done after %s", traffic.Round(time.Second))

	if !c.stopped() {
		// The ledgers once more, then the daemon as a whole, then the
		// cleanup and what it must leave.
		each(ws, (*cworker).verify)
		c.endChecks(ws)
		each(ws, (*cworker).cleanup)
		c.leakChecks()
	}
	c.report(dur, workers, kills, traffic)
	if c.failed() {
		if p := os.Getenv("FORKBOX_CHAOS_LOG"); p != "" {
			if data, err := os.ReadFile(d.logPath); err == nil {
				os.WriteFile(p, data, 0o644)
				t.Logf("the daemon's whole log is in %s", p)
			}
		}
		t.Logf("daemon log tail:\n%s", c.logTail(20000))
	}
}

// each runs f for every worker at once and waits for them.
func each(ws []*cworker, f func(*cworker)) {
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func(w *cworker) {
			defer wg.Done()
			f(w)
		}(w)
	}
	wg.Wait()
}

// chaos is the state shared by the workers and the killer.
type chaos struct {
	t     *testing.T
	d     *daemon
	c     *client.Client
	tr    *http.Transport
	seed  uint64
	start time.Time
	reqs  atomic.Int64 // HTTP requests sent

	mu       sync.Mutex
	gen      int                   // kills so far
	down     bool                  // between a kill and the restarted daemon's /healthz
	up       chan struct{}         // closed when the daemon of gen answers
	inflight map[*request]struct{} // requests sent and not yet answered
	want     string                // what the killer waits for a worker to start
	hit      chan string           // gets the op that started
	expect   bool                  // the daemon's exit is the killer's
	over     bool                  // the test ended: the daemon's exit is its stop
	crashed  bool                  // the daemon exited on its own: the run stops
	checked  map[int]int           // workers that checked their ledger after kill n
	cond     *sync.Cond            // on mu: checked changed, or the run stopped

	ops      map[string]*chaosOp
	failures []string
	nfail    int
	killsLog []killRecord
	errored  []string // sessions found in error, and why
	n503     map[string]int
	checks   map[string]int
	orphans  []proc          // processes of killed daemons: all gone at the end
	knownIDs map[string]bool // every sandbox a ledger ever held
	workers  int             // the workers that check their ledger after each kill

	baseMounts, baseLoops int
}

type chaosOp struct {
	count, errs, cut, n503, n4xx int
	lat                          []time.Duration
}

type killRecord struct {
	n       int
	at      time.Duration // since the traffic started
	target  string        // what it aimed at ("" random)
	landed  string        // the op it followed, for an aimed kill
	delay   time.Duration // after that op's start
	inFl    []string      // the requests in flight that it cut
	healthz time.Duration // from the restart to /healthz answering
	// recovering is what that first /healthz counted still settling, and
	// settled how long after the restart it counted none.
	recovering int
	settled    time.Duration
	check      time.Duration // from /healthz to every worker's ledger checked
}

// request is one HTTP request in flight; cut is set by a kill during it.
type request struct {
	op  string
	cut bool
}

// proc is a process by pid and start time (a pid alone may be reused).
type proc struct {
	pid   int
	start string
	what  string
}

func newChaos(t *testing.T, d *daemon, seed uint64) *chaos {
	c := &chaos{t: t, d: d, seed: seed, up: make(chan struct{}), inflight: map[*request]struct{}{},
		checked: map[int]int{}, ops: map[string]*chaosOp{}, n503: map[string]int{}, checks: map[string]int{},
		knownIDs: map[string]bool{}}
	close(c.up)
	c.cond = sync.NewCond(&c.mu)
	c.tr = http.DefaultTransport.(*http.Transport).Clone()
	c.tr.MaxIdleConnsPerHost = 32
	c.c = client.New("http://"+d.addr, client.WithHTTPClient(&http.Client{Transport: &recTransport{base: c.tr, n: &c.reqs}}))
	return c
}

func (c *chaos) failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if strings.Contains(msg, errStopped.Error()) {
		return // the failure that stopped the run is reported
	}
	c.mu.Lock()
	c.nfail++
	if len(c.failures) < 100 {
		c.failures = append(c.failures, msg)
	}
	c.mu.Unlock()
	c.t.Errorf("%s", msg)
}

func (c *chaos) failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nfail > 0
}

func (c *chaos) stopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashed
}

func (c *chaos) count(what string) {
	c.mu.Lock()
	c.checks[what]++
	c.mu.Unlock()
}

func (c *chaos) known(id string) {
	c.mu.Lock()
	c.knownIDs[id] = true
	c.mu.Unlock()
}

func (c *chaos) logTail(n int64) string {
	f, err := os.Open(c.d.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// logMark writes a line of the test's into the daemon's log (the daemon is
// down when it does), so that the log shows where each run begins.
func (c *chaos) logMark(format string, args ...any) {
	f, err := os.OpenFile(c.d.logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "==== chaos: "+format+" ====\n", args...)
	f.Close()
}

// watch fails the run when the daemon of exited ends on its own (not by
// the killer, not by the test's end).
func (c *chaos) watch(exited chan struct{}) {
	go func() {
		<-exited
		c.mu.Lock()
		if c.expect || c.over {
			c.mu.Unlock()
			return
		}
		c.crashed = true
		if c.down {
			close(c.up) // nothing waits for a restart that will not come
			c.down = false
		}
		c.cond.Broadcast()
		c.mu.Unlock()
		c.failf("the daemon exited on its own; the run stops. Log tail:\n%s", c.logTail(8000))
	}()
}

// recTransport counts requests and tells each call (through its context)
// the status and Retry-After of its answer, which the client's APIError
// does not carry.
type recTransport struct {
	base http.RoundTripper
	n    *atomic.Int64
}

type infoKey struct{}

type callInfo struct {
	status     int
	retryAfter string
}

func (rt *recTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.n.Add(1)
	resp, err := rt.base.RoundTrip(req)
	if info, ok := req.Context().Value(infoKey{}).(*callInfo); ok && err == nil {
		info.status = resp.StatusCode
		info.retryAfter = resp.Header.Get("Retry-After")
	}
	return resp, err
}

// Errors of call besides the daemon's answers and failures.
var (
	// errRestarted: the daemon was killed since the worker last checked its
	// ledger, and this request was not sent; the worker checks first.
	errRestarted = errors.New("the daemon was restarted before this request")
	// errStopped: the daemon died on its own; the run is over.
	errStopped = errors.New("the daemon died; the run stopped")
)

// cutError is a request a kill cut: in flight when the daemon got its
// SIGKILL, it ended with the connection's error. What it did is unknown.
type cutError struct {
	op  string
	err error
}

func (e *cutError) Error() string { return fmt.Sprintf("%s cut by the kill: %v", e.op, e.err) }

func isCut(err error) bool {
	var ce *cutError
	return errors.As(err, &ce)
}

// connErr is a request's error that a kill of the daemon explains: the
// connection refused, reset, or closed before the whole answer.
func connErr(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNABORTED, io.EOF, io.ErrUnexpectedEOF} {
		if errors.Is(err, e) {
			return true
		}
	}
	msg := err.Error()
	for _, s := range []string{"connection refused", "connection reset", "broken pipe", "EOF", "server closed idle connection", "transport connection broken"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// idRE matches the ids in a message (the 503s are counted by kind).
var idRE = regexp.MustCompile(`\b(sbx_|snap_)[a-z0-9]+`)

func apiStatus(err error) int {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// begin registers a request of w about to be sent. While the daemon is
// down it waits for the restart; a kill since w's last check makes it
// errRestarted.
func (c *chaos) begin(w *cworker, op string) (*request, error) {
	for {
		c.mu.Lock()
		if c.crashed {
			c.mu.Unlock()
			return nil, errStopped
		}
		if w.gen != c.gen {
			c.mu.Unlock()
			return nil, errRestarted
		}
		if !c.down {
			r := &request{op: op}
			c.inflight[r] = struct{}{}
			c.mu.Unlock()
			return r, nil
		}
		up := c.up
		c.mu.Unlock()
		<-up
	}
}

// end unregisters r and says whether a kill cut it.
func (c *chaos) end(r *request) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inflight, r)
	return r.cut
}

func (c *chaos) record(op string, d time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.ops[op]
	if st == nil {
		st = &chaosOp{}
		c.ops[op] = st
	}
	st.count++
	switch {
	case err == nil:
		st.lat = append(st.lat, d)
	case isCut(err):
		st.cut++
	case apiStatus(err) == http.StatusServiceUnavailable:
		st.n503++
	case apiStatus(err) >= 400 && apiStatus(err) < 500:
		st.n4xx++ // the caller judges: some are expected (a 404 of what a check wants gone)
	default:
		st.errs++
	}
}

// starting tells the killer that w starts op (an aimed kill waits for it).
func (c *chaos) starting(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.want != "" && aims(c.want, op) {
		c.want = ""
		c.hit <- op
	}
}

func aims(target, op string) bool {
	switch target {
	case "suspend":
		return op == "suspend"
	case "checkpoint_memory", "checkpoint_filesystem":
		return op == target
	case "fork":
		return op == "fork"
	case "resume":
		return op == "resume" || strings.HasSuffix(op, "_auto_resume")
	}
	return false
}

// killer kills the daemon kills times and restarts it, waiting after each
// restart until every worker checked its ledger. With no interval the n-th
// kill comes about n/(kills+1) into the duration (within a quarter of the
// space between kills, and after at least minTraffic of traffic since the
// last check); with one, after a random half to one and a half of it since
// the last check.
func (c *chaos) killer(kills int, dur, interval time.Duration) {
	const minTraffic = 5 * time.Second
	r := rand.New(rand.NewPCG(c.seed, 1<<40))
	slot := dur / time.Duration(kills+1)
	for n := 1; n <= kills; n++ {
		wait := interval/2 + time.Duration(r.Int64N(int64(interval)+1))
		if interval == 0 {
			at := time.Duration(n)*slot + time.Duration(r.Int64N(int64(slot)/2+1)) - slot/4
			wait = max(minTraffic, at-time.Since(c.start))
		}
		if !c.sleep(wait) {
			return
		}
		target := killPlan[(n-1)%len(killPlan)]
		rec := killRecord{n: n, target: target}
		if target != "" {
			hit := make(chan string, 1)
			c.mu.Lock()
			c.want, c.hit = target, hit
			c.mu.Unlock()
			select {
			case op := <-hit:
				// A moment into the op: a share of how long it took so far.
				rec.landed = op
				rec.delay = time.Duration(float64(c.typical(op)) * (0.05 + 0.9*r.Float64()))
				time.Sleep(rec.delay)
			case <-time.After(20 * time.Second):
				c.mu.Lock()
				c.want = ""
				c.mu.Unlock()
				c.t.Logf("kill %d: no %s started within 20s; killing at random", n, target)
			}
		}
		if !c.kill(&rec) {
			return
		}
		time.Sleep(restartDelay)
		if !c.restart(&rec) {
			return
		}
		checkStart := time.Now()
		c.settled(&rec, checkStart.Add(-rec.healthz))
		if !c.waitChecked(n) {
			return
		}
		rec.check = time.Since(checkStart)
		c.mu.Lock()
		c.killsLog = append(c.killsLog, rec)
		c.mu.Unlock()
		c.t.Logf("kill %d at %s (%s): %d requests cut %v; %s; ledgers checked in %s",
			n, rec.at.Round(100*time.Millisecond), rec.describe(), len(rec.inFl), rec.inFl,
			rec.restarted(), rec.check.Round(100*time.Millisecond))
	}
}

// restarted says how the restart went.
func (k killRecord) restarted() string {
	return fmt.Sprintf("/healthz %s after the restart (%d sandboxes recovering), none recovering after %s",
		k.healthz.Round(time.Millisecond), k.recovering, k.settled.Round(time.Millisecond))
}

func (k killRecord) describe() string {
	switch {
	case k.target == "":
		return "at random"
	case k.landed == "":
		return "aimed at " + k.target + ", none came"
	}
	return fmt.Sprintf("%s after a %s started", k.delay.Round(time.Millisecond), k.landed)
}

// sleep waits d unless the run stopped.
func (c *chaos) sleep(d time.Duration) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if c.stopped() {
			return false
		}
		time.Sleep(min(100*time.Millisecond, time.Until(end)))
	}
	return !c.stopped()
}

// typical is how long op usually takes (its median so far; 500 ms before
// it ran).
func (c *chaos) typical(op string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.ops[op]
	if st == nil || len(st.lat) == 0 {
		return 500 * time.Millisecond
	}
	lat := slices.Clone(st.lat)
	slices.Sort(lat)
	return lat[len(lat)/2]
}

// kill SIGKILLs the daemon and waits until it is gone. The requests in
// flight are marked cut; new ones wait for the restart.
func (c *chaos) kill(rec *killRecord) bool {
	c.mu.Lock()
	if c.crashed {
		c.mu.Unlock()
		return false
	}
	c.down = true
	c.expect = true
	c.gen++
	c.up = make(chan struct{})
	for r := range c.inflight {
		r.cut = true
		rec.inFl = append(rec.inFl, r.op)
	}
	pid := c.d.cmd.Process.Pid
	exited := c.d.exited
	c.mu.Unlock()
	sort.Strings(rec.inFl)
	rec.at = time.Since(c.start)
	kids := descendants(pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		c.failf("kill %d: SIGKILL of the daemon (pid %d): %v", rec.n, pid, err)
	}
	<-exited
	c.mu.Lock()
	c.orphans = append(c.orphans, kids...)
	c.mu.Unlock()
	c.logMark("kill %d: the test killed the daemon (pid %d) with SIGKILL; %d requests were in flight %v", rec.n, pid, len(rec.inFl), rec.inFl)
	return true
}

// restart starts the daemon again with the same flags and data dir, and
// times its /healthz.
func (c *chaos) restart(rec *killRecord) bool {
	c.logMark("kill %d: restart", rec.n)
	start := time.Now()
	c.mu.Lock()
	c.expect = false
	err := c.d.spawn()
	exited := c.d.exited
	c.mu.Unlock()
	if err != nil {
		c.failf("kill %d: restarting the daemon: %v", rec.n, err)
		c.stop()
		return false
	}
	c.watch(exited)
	for {
		h, err := c.health()
		if err == nil {
			rec.recovering = h.Recovering
			break
		}
		if c.stopped() {
			return false
		}
		if time.Since(start) > healthzGiveUp {
			c.failf("kill %d: the restarted daemon's /healthz did not answer within %s (%v); the run stops. Log tail:\n%s",
				rec.n, healthzGiveUp, err, c.logTail(8000))
			c.stop()
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	rec.healthz = time.Since(start)
	if rec.healthz > healthzBound {
		c.failf("kill %d: the restarted daemon's /healthz answered after %s, past the contract's %s",
			rec.n, rec.healthz.Round(time.Millisecond), healthzBound)
	}
	// Connections to the dead daemon must not carry new requests.
	c.tr.CloseIdleConnections()
	c.mu.Lock()
	c.down = false
	close(c.up)
	c.mu.Unlock()
	return true
}

// health asks the daemon's /healthz (a connection of its own, short).
func (c *chaos) health() (*api.Health, error) {
	hc := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + c.d.addr + "/healthz")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var h api.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return nil, fmt.Errorf("status %d: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK || h.Status != "ok" {
		return nil, fmt.Errorf("status %d, %q", resp.StatusCode, h.Status)
	}
	return &h, nil
}

// settled waits until the restarted daemon's /healthz counts no sandbox
// still recovering, within settleBound, and records how long it took.
func (c *chaos) settled(rec *killRecord, since time.Time) {
	for {
		h, err := c.health()
		if err == nil && h.Recovering == 0 {
			rec.settled = time.Since(since)
			return
		}
		if c.stopped() {
			return
		}
		if time.Since(since) > settleBound {
			what := fmt.Sprint(err)
			if err == nil {
				what = fmt.Sprintf("%d sandboxes still recovering", h.Recovering)
			}
			c.failf("kill %d: the restarted daemon has not settled %s after its start: %s", rec.n, settleBound, what)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the run after a failure that leaves no daemon to talk to.
func (c *chaos) stop() {
	c.mu.Lock()
	c.crashed = true
	if c.down {
		c.down = false
		close(c.up)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

// waitChecked waits until every worker checked its ledger after kill n.
func (c *chaos) waitChecked(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.checked[n] < c.workers && !c.crashed {
		c.cond.Wait()
	}
	return !c.crashed
}

// descendants lists the processes below pid.
func descendants(pid int) []proc {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	info := map[int]proc{}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 20 {
			continue
		}
		me, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		parent, _ := strconv.Atoi(f[1])
		children[parent] = append(children[parent], me)
		info[me] = proc{pid: me, start: f[19], what: procInfo(filepath.Dir(p))}
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range children[p] {
			out = append(out, info[k])
			queue = append(queue, k)
		}
	}
	return out
}

// alive reports whether p is still the process it was.
func (p proc) alive() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(s[i+1:])
	return len(f) > 19 && f[19] == p.start && f[0] != "Z"
}

// A cworker owns its sessions and snapshots: no other worker touches them,
// so what each holds is known, up to what the requests a kill cut did.
type cworker struct {
	c     *chaos
	id    int
	r     *rand.Rand
	gen   int // the kill after which it last checked its ledger
	seq   int
	boxes []*cbox
	snaps []*csnap
	// What the ledger must find again or find gone at the next check.
	pending      []*pending // creates and forks a kill cut
	deleted      []string   // sandboxes whose delete was acknowledged
	deletedSnaps []string
}

// cbox is a session and what the API acknowledged of it.
type cbox struct {
	id, name, label string
	state           api.SandboxState // running or suspended
	vars            map[string]int64 // v_<n> of its default context
	maybe           map[string]int64 // set by a cell a kill cut: there or not
	file            string           // sha256 of chaosFile; "" none
	maybeFile       string           // of a write a kill cut
	cutOp           string           // the op a kill cut since the last check
	deleting        bool             // a delete of it was cut
}

// csnap is a snapshot and what a session restored from it holds.
type csnap struct {
	id, src  string
	typ      api.SnapshotType
	vars     map[string]int64 // memory snapshots; a filesystem one starts a new kernel
	file     string
	deleting bool // a delete of it was cut
}

// pending is a create or fork whose answer a kill cut.
type pending struct {
	op    string
	label string   // a create's
	names []string // a fork's branches
	src   *cbox    // a fork's source
	vars  map[string]int64
	file  string
}

func (c *chaos) newWorker(id int) *cworker {
	return &cworker{c: c, id: id, r: rand.New(rand.NewPCG(c.seed, uint64(id+2)))}
}

func (w *cworker) pick(n int) int { return w.r.IntN(n) }

// call sends the request f of op: it waits while the daemon is down, and
// retries a 503 unavailable with a Retry-After (a sandbox being settled
// after a restart) for up to settleBound. It returns nil; a *cutError for
// a request a kill cut; errRestarted or errStopped for one not sent; an
// *client.APIError of another answer (a 4xx the caller may expect); or a
// failure: any other 5xx, or a transport error no kill explains.
func (w *cworker) call(op string, f func(ctx context.Context) error) error {
	c := w.c
	var first503 time.Time
	for {
		r, err := c.begin(w, op)
		if err != nil {
			return err
		}
		info := &callInfo{}
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), infoKey{}, info), chaosOpTimeout)
		start := time.Now()
		err = f(ctx)
		timedOut := ctx.Err() != nil
		cancel()
		cut := c.end(r)
		if err != nil && !errors.As(err, new(*client.APIError)) && cut && connErr(err) {
			err = &cutError{op: op, err: err}
		}
		c.record(op, time.Since(start), err)
		if err == nil || isCut(err) {
			return err
		}
		var ae *client.APIError
		if errors.As(err, &ae) {
			if ae.Status != http.StatusServiceUnavailable {
				if ae.Status >= 500 {
					return fmt.Errorf("%s answered %d %s: %w", op, ae.Status, ae.Code, err)
				}
				return err
			}
			secs, perr := strconv.Atoi(info.retryAfter)
			if ae.Code != "unavailable" || perr != nil || secs < 0 {
				return fmt.Errorf("%s answered 503 %s without a usable Retry-After (%q): %w", op, ae.Code, info.retryAfter, err)
			}
			c.mu.Lock()
			c.n503[op+": "+idRE.ReplaceAllString(ae.Message, "${1}…")]++
			c.mu.Unlock()
			if first503.IsZero() {
				first503 = time.Now()
			} else if time.Since(first503) > settleBound {
				return fmt.Errorf("%s still answered 503 %s after %s of retries: %w", op, ae.Code, settleBound, err)
			}
			time.Sleep(time.Duration(min(max(secs, 1), 5)) * time.Second)
			continue
		}
		if timedOut {
			return fmt.Errorf("%s: no answer within %s: %w", op, chaosOpTimeout, err)
		}
		if cut {
			return fmt.Errorf("%s: cut by a kill with an error that is no connection's: %w", op, err)
		}
		return fmt.Errorf("%s: the daemon was up, no kill explains: %w", op, err)
	}
}

// Outcomes of an op's request, for the ledger.
const (
	done    = iota // acknowledged
	cut            // a kill cut it: unknown
	aborted        // not sent (a restart to check first), or a failure already reported
)

// outcome sorts err of op on b (nil for none): a failure is reported and b
// dropped, so that one failure does not cascade.
func (w *cworker) outcome(op string, b *cbox, err error) int {
	switch {
	case err == nil:
		return done
	case isCut(err):
		if b != nil {
			b.cutOp = op
		}
		return cut
	case errors.Is(err, errRestarted), errors.Is(err, errStopped):
		return aborted
	}
	where := ""
	if b != nil {
		where = fmt.Sprintf(" on %s (%s)", b.id, b.name)
	}
	w.c.failf("worker %d: %s%s: %v", w.id, op, where, err)
	if b != nil {
		w.broken(b)
	}
	return aborted
}

// broken drops b after a failure, deleting it if it can.
func (w *cworker) broken(b *cbox) {
	w.drop(b)
	w.call("delete_broken", func(ctx context.Context) error {
		_, err := w.c.c.DeleteSandbox(ctx, b.id)
		return err
	})
}

func (w *cworker) drop(b *cbox) {
	w.boxes = slices.DeleteFunc(w.boxes, func(x *cbox) bool { return x == b })
}

// loop runs random operations until deadline and the killer's end,
// checking the ledger after each kill.
func (w *cworker) loop(deadline time.Time, killerDone chan struct{}) {
	c := w.c
	for {
		c.mu.Lock()
		gen, crashed := c.gen, c.crashed
		up := c.up
		c.mu.Unlock()
		if crashed {
			return
		}
		if gen != w.gen {
			<-up
			if c.stopped() {
				return
			}
			w.gen = gen
			w.verify()
			c.mu.Lock()
			c.checked[gen]++
			c.cond.Broadcast()
			c.mu.Unlock()
			continue
		}
		select {
		case <-killerDone:
			if time.Now().After(deadline) {
				return
			}
		default:
		}
		w.step()
	}
}

// step runs one random operation.
func (w *cworker) step() {
	if len(w.boxes) == 0 {
		w.createAny()
		return
	}
	if len(w.boxes) > chaosMaxBoxes {
		w.delete(w.boxes[0])
		return
	}
	if len(w.snaps) > chaosMaxSnaps {
		w.deleteSnapshot(w.snaps[0])
		return
	}
	b := w.boxes[w.pick(len(w.boxes))]
	type choice struct {
		weight int
		run    func()
	}
	choices := []choice{
		{3, w.createAny},
		{5, func() { w.cell(b) }},
		{3, func() { w.exec(b) }},
		{3, func() { w.files(b) }},
		{1, func() { w.checkpoint(b, api.SnapshotFilesystem) }},
		{1, func() { w.checkpoint(b, api.SnapshotMemory) }},
		{1, func() { w.fork(b) }},
		{1, func() { w.delete(b) }},
	}
	if b.state == api.StateSuspended {
		choices = append(choices, choice{2, func() { w.resume(b) }})
	} else {
		choices = append(choices,
			choice{2, func() { w.suspend(b) }}, // the next call on it resumes it
			choice{1, func() {
				if w.suspend(b) {
					w.cell(b)
				}
			}})
	}
	if len(w.snaps) > 0 {
		choices = append(choices, choice{2, func() { w.restore(w.snaps[w.pick(len(w.snaps))]) }})
		choices = append(choices, choice{1, func() { w.deleteSnapshot(w.snaps[w.pick(len(w.snaps))]) }})
	}
	total := 0
	for _, ch := range choices {
		total += ch.weight
	}
	x := w.pick(total)
	for _, ch := range choices {
		if x -= ch.weight; x < 0 {
			ch.run()
			return
		}
	}
}

// warmUp goes once through every operation.
func (w *cworker) warmUp() {
	w.create("create_named", api.CreateSandboxRequest{Name: w.nextName()}, nil)
	if len(w.boxes) == 0 {
		return
	}
	b := w.boxes[0]
	w.cell(b)
	w.files(b)
	w.exec(b)
	w.checkpoint(b, api.SnapshotFilesystem)
	w.checkpoint(b, api.SnapshotMemory)
	for _, sn := range slices.Clone(w.snaps) {
		w.restore(sn)
	}
	w.fork(b)
	if w.suspend(b) {
		w.cell(b)
	}
	if w.suspend(b) {
		w.resume(b)
	}
}

// cleanup deletes every session and snapshot of the worker.
func (w *cworker) cleanup() {
	for tries := 0; len(w.boxes) > 0 && tries < 100; tries++ {
		w.delete(w.boxes[0])
	}
	for tries := 0; len(w.snaps) > 0 && tries < 100; tries++ {
		w.deleteSnapshot(w.snaps[0])
	}
}

func (w *cworker) nextName() string {
	w.seq++
	if w.id < 0 {
		return fmt.Sprintf("chaos-warm-%d", w.seq)
	}
	return fmt.Sprintf("chaos-w%d-%d", w.id, w.seq)
}

func vname(w *cworker) string {
	w.seq++
	return fmt.Sprintf("v_%d", w.seq)
}

var chaosDiskMB int64 = 512

func (w *cworker) createAny() {
	switch w.pick(3) {
	case 0:
		w.create("create_named", api.CreateSandboxRequest{Name: w.nextName()}, nil)
	case 1:
		if len(w.snaps) > 0 {
			w.restore(w.snaps[w.pick(len(w.snaps))])
			return
		}
		fallthrough
	default:
		w.create("create", api.CreateSandboxRequest{}, nil)
	}
}

// create makes a session (from sn when not nil) and records it; a create a
// kill cut is looked for by its label at the next check.
func (w *cworker) create(op string, req api.CreateSandboxRequest, sn *csnap) *cbox {
	hour := int64(3600)
	w.seq++
	label := fmt.Sprintf("w%d-%d", w.id, w.seq)
	req.Labels = map[string]string{chaosLabel: label}
	req.DiskMB, req.TimeoutSecs = &chaosDiskMB, &hour
	req.AllowInternetAccess = w.pick(4) == 0 // a quarter with a network link: veth, nftables
	vars, file := map[string]int64{}, ""
	if sn != nil {
		req.SnapshotID = sn.id
		vars, file = maps2(sn.vars), sn.file
	}
	var sb *api.Sandbox
	w.c.starting(op)
	err := w.call(op, func(ctx context.Context) error {
		var err error
		sb, err = w.c.c.CreateSandbox(ctx, req)
		return err
	})
	switch w.outcome(op, nil, err) {
	case cut:
		w.pending = append(w.pending, &pending{op: op, label: label, vars: vars, file: file})
		return nil
	case aborted:
		return nil
	}
	w.c.known(sb.ID)
	b := &cbox{id: sb.ID, name: sb.Name, label: label, state: api.StateRunning, vars: vars, maybe: map[string]int64{}, file: file}
	w.boxes = append(w.boxes, b)
	if sb.State != api.StateRunning || sb.Name != req.Name {
		w.c.failf("worker %d: %s: created %s is %s named %q; want running, %q", w.id, op, sb.ID, sb.State, sb.Name, req.Name)
		w.broken(b)
		return nil
	}
	return b
}

// restore creates a session from a snapshot and checks what it holds.
func (w *cworker) restore(sn *csnap) {
	req := api.CreateSandboxRequest{}
	if w.pick(2) == 0 {
		req.Name = w.nextName()
	}
	if b := w.create("restore_"+string(sn.typ), req, sn); b != nil {
		w.cell(b)
	}
}

// dumpVars prints the context's v_ variables as JSON.
const dumpVars = "import json as _cj\nprint(_cj.dumps({k: v for k, v in globals().items() if k.startswith('v_')}))"

// runCell runs code (which ends printing the variables) in b and compares
// them with the ledger plus set; a cut leaves set maybe there.
func (w *cworker) runCell(op string, b *cbox, code string, set map[string]int64) int {
	if b.state == api.StateSuspended {
		op += "_auto_resume"
	}
	var ex *api.Execution
	w.c.starting(op)
	err := w.call(op, func(ctx context.Context) error {
		var err error
		ex, err = w.c.c.RunCode(ctx, b.id, api.RunCodeRequest{Code: code})
		return err
	})
	switch w.outcome(op, b, err) {
	case cut:
		for k, v := range set {
			b.maybe[k] = v
		}
		return cut
	case aborted:
		return aborted
	}
	b.state = api.StateRunning
	if ex.Error != nil {
		w.c.failf("worker %d: %s on %s (%s): cell failed: %s: %s", w.id, op, b.id, b.name, ex.Error.Name, ex.Error.Value)
		w.broken(b)
		return aborted
	}
	var got map[string]int64
	out := strings.Join(ex.Logs.Stdout, "")
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
		w.c.failf("worker %d: %s on %s (%s): the cell printed %q: %v", w.id, op, b.id, b.name, out, err)
		w.broken(b)
		return aborted
	}
	w.c.count("variables compared")
	if err := b.match(got, set); err != nil {
		w.c.failf("worker %d: %s on %s (%s): %v", w.id, op, b.id, b.name, err)
		w.broken(b)
		return aborted
	}
	return done
}

// match compares the variables a cell printed with the ledger: each
// acknowledged one (and each of set, which the cell itself set) with its
// value, each maybe one with its value or not at all, no other. It
// resolves the maybe ones and adds set.
func (b *cbox) match(got, set map[string]int64) error {
	want := maps2(b.vars)
	for k, v := range set {
		want[k] = v
	}
	var errs []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			errs = append(errs, fmt.Sprintf("%s is gone (acknowledged %d)", k, v))
		} else if g != v {
			errs = append(errs, fmt.Sprintf("%s = %d, acknowledged %d", k, g, v))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; ok {
			continue
		}
		if v, ok := b.maybe[k]; !ok {
			errs = append(errs, fmt.Sprintf("%s = %d was never set", k, g))
		} else if g != v {
			errs = append(errs, fmt.Sprintf("%s = %d, its cut cell set %d", k, g, v))
		}
	}
	sort.Strings(errs)
	if len(errs) > 0 {
		return fmt.Errorf("the kernel's variables are wrong: %s", strings.Join(errs, "; "))
	}
	for k := range b.maybe {
		if v, ok := got[k]; ok {
			want[k] = v
		}
	}
	b.vars, b.maybe = want, map[string]int64{}
	return nil
}

// cell sets a new variable and reads them all.
func (w *cworker) cell(b *cbox) {
	k, v := vname(w), w.r.Int64N(1e12)
	w.runCell("code", b, fmt.Sprintf("%s = %d\n%s", k, v, dumpVars), map[string]int64{k: v})
}

// exec hashes the session's file (or echoes a token without one).
func (w *cworker) exec(b *cbox) {
	op := "exec"
	if b.state == api.StateSuspended {
		op += "_auto_resume"
	}
	req := api.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo $0", fmt.Sprintf("chaos-%d", w.r.Uint32())}}
	want := req.Args[2] + "\n"
	if b.file != "" && b.maybeFile == "" {
		req = api.ExecRequest{Cmd: "sha256sum", Args: []string{chaosFile}}
		want = b.file + "  " + chaosFile + "\n"
	}
	var res *api.ExecResult
	w.c.starting(op)
	err := w.call(op, func(ctx context.Context) error {
		var err error
		res, err = w.c.c.Exec(ctx, b.id, req)
		return err
	})
	if w.outcome(op, b, err) != done {
		return
	}
	b.state = api.StateRunning
	if res.ExitCode != 0 || res.Stdout != want {
		w.c.failf("worker %d: %s on %s (%s): %s: exit %d, %q (stderr %q); want %q", w.id, op, b.id, b.name, req.Cmd, res.ExitCode, res.Stdout, res.Stderr, want)
		w.broken(b)
	}
}

// files replaces the session's file with random bytes (mostly small,
// sometimes a MiB or two) and reads it back.
func (w *cworker) files(b *cbox) {
	op := "write_file"
	if b.state == api.StateSuspended {
		op += "_auto_resume"
	}
	size := 1 + w.pick(32<<10)
	if w.pick(8) == 0 {
		size = 1<<20 + w.pick(1<<20)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(w.r.Uint32())
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	w.c.starting(op)
	err := w.call(op, func(ctx context.Context) error {
		res, err := w.c.c.WriteFile(ctx, b.id, chaosFile, bytes.NewReader(data), 0o644)
		if err == nil && res.Size != int64(size) {
			return fmt.Errorf("upload of %d bytes reported %d", size, res.Size)
		}
		return err
	})
	switch w.outcome(op, b, err) {
	case cut:
		b.maybeFile = hash
		return
	case aborted:
		return
	}
	b.state, b.file = api.StateRunning, hash
	w.checkFile("read_file", b)
}

// checkFile reads the session's file and compares it with the ledger: the
// acknowledged content, or that of a write a kill cut (which then is).
func (w *cworker) checkFile(op string, b *cbox) bool {
	if b.file == "" && b.maybeFile == "" {
		return true
	}
	var got []byte
	err := w.call(op, func(ctx context.Context) error {
		var err error
		got, err = w.c.c.ReadFile(ctx, b.id, chaosFile)
		return err
	})
	if apiStatus(err) == http.StatusNotFound && b.file == "" {
		b.maybeFile = "" // the cut write never happened
		return true
	}
	if w.outcome(op, b, err) != done {
		return false
	}
	w.c.count("files compared")
	sum := sha256.Sum256(got)
	switch hash := hex.EncodeToString(sum[:]); {
	case hash == b.file:
	case hash == b.maybeFile:
		b.file = hash
	default:
		w.c.failf("worker %d: %s on %s (%s): %s holds %d bytes with sha256 %s; acknowledged %s (a cut write: %q)",
			w.id, op, b.id, b.name, chaosFile, len(got), hash[:12], short(b.file), short(b.maybeFile))
		w.broken(b)
		return false
	}
	b.maybeFile = ""
	return true
}

func short(h string) string { return h[:min(12, len(h))] }

func (w *cworker) checkpoint(b *cbox, typ api.SnapshotType) {
	op := "checkpoint_" + string(typ)
	var sn *api.Snapshot
	w.c.starting(op)
	err := w.call(op, func(ctx context.Context) error {
		var err error
		sn, err = w.c.c.Checkpoint(ctx, b.id, api.CheckpointRequest{Type: typ})
		return err
	})
	if w.outcome(op, b, err) != done {
		return
	}
	w.snaps = append(w.snaps, b.snapshot(sn.ID, typ))
	if sn.Type != typ || sn.SandboxID != b.id {
		w.c.failf("worker %d: %s: snapshot %s is a %s of %s; want a %s of %s", w.id, op, sn.ID, sn.Type, sn.SandboxID, typ, b.id)
	}
}

// snapshot is what a snapshot of b of type typ holds now.
func (b *cbox) snapshot(id string, typ api.SnapshotType) *csnap {
	sn := &csnap{id: id, src: b.id, typ: typ, file: b.file, vars: map[string]int64{}}
	if typ == api.SnapshotMemory {
		sn.vars = maps2(b.vars)
	}
	return sn
}

// fork makes two named branches of b; each, and b, go on from b's state.
func (w *cworker) fork(b *cbox) {
	base := w.nextName()
	names := []string{base + "-a", base + "-b"}
	var res *api.ForkResult
	w.c.starting("fork")
	err := w.call("fork", func(ctx context.Context) error {
		var err error
		res, err = w.c.c.Fork(ctx, b.id, api.ForkRequest{Count: 2, Names: names})
		return err
	})
	switch w.outcome("fork", b, err) {
	case cut:
		w.pending = append(w.pending, &pending{op: "fork", names: names, src: b, vars: maps2(b.vars), file: b.file})
		return
	case aborted:
		return
	}
	w.snaps = append(w.snaps, b.snapshot(res.Snapshot.ID, api.SnapshotMemory))
	var branches []*cbox
	for _, sb := range res.Sandboxes {
		w.c.known(sb.ID)
		nb := &cbox{id: sb.ID, name: sb.Name, state: api.StateRunning, vars: maps2(b.vars), maybe: map[string]int64{}, file: b.file}
		branches = append(branches, nb)
		w.boxes = append(w.boxes, nb)
	}
	if len(res.Sandboxes) != 2 {
		w.c.failf("worker %d: fork of %s gave %d sandboxes, want 2", w.id, b.id, len(res.Sandboxes))
		return
	}
	for _, nb := range append(branches, b) {
		w.cell(nb)
	}
}

func (w *cworker) suspend(b *cbox) bool {
	var sb *api.Sandbox
	w.c.starting("suspend")
	err := w.call("suspend", func(ctx context.Context) error {
		var err error
		sb, err = w.c.c.Suspend(ctx, b.id)
		return err
	})
	if w.outcome("suspend", b, err) != done {
		return false
	}
	b.state = api.StateSuspended
	if sb.State != api.StateSuspended {
		w.c.failf("worker %d: suspend of %s answered state %s", w.id, b.id, sb.State)
		w.broken(b)
		return false
	}
	return true
}

func (w *cworker) resume(b *cbox) {
	var sb *api.Sandbox
	w.c.starting("resume")
	err := w.call("resume", func(ctx context.Context) error {
		var err error
		sb, err = w.c.c.Resume(ctx, b.id)
		return err
	})
	if w.outcome("resume", b, err) != done {
		return
	}
	b.state = api.StateRunning
	if sb.State != api.StateRunning {
		w.c.failf("worker %d: resume of %s answered state %s", w.id, b.id, sb.State)
		w.broken(b)
	}
}

func (w *cworker) delete(b *cbox) {
	var sb *api.Sandbox
	err := w.call("delete", func(ctx context.Context) error {
		var err error
		sb, err = w.c.c.DeleteSandbox(ctx, b.id)
		return err
	})
	switch w.outcome("delete", b, err) {
	case cut:
		b.deleting = true
		return
	case aborted:
		if errors.Is(err, errRestarted) {
			return // tried again later
		}
		w.drop(b) // a failure (reported) or the end
		return
	}
	w.drop(b)
	w.deleted = append(w.deleted, b.id)
	if sb.State != api.StateTerminated {
		w.c.failf("worker %d: delete of %s answered state %s", w.id, b.id, sb.State)
	}
}

func (w *cworker) deleteSnapshot(sn *csnap) {
	err := w.call("delete_snapshot", func(ctx context.Context) error {
		return w.c.c.DeleteSnapshot(ctx, sn.id)
	})
	switch w.outcome("delete_snapshot", nil, err) {
	case cut:
		sn.deleting = true
		return
	case aborted:
		if errors.Is(err, errRestarted) {
			return
		}
	default:
		w.deletedSnaps = append(w.deletedSnaps, sn.id)
	}
	w.snaps = slices.DeleteFunc(w.snaps, func(x *csnap) bool { return x == sn })
}

func maps2(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// verify checks the worker's ledger against the daemon, after a restart
// and at the end: first what the cut creates and forks did, then every
// session, snapshot and delete.
func (w *cworker) verify() {
	for _, p := range w.pending {
		if p.op == "fork" {
			w.resolveFork(p)
		} else {
			w.resolveCreate(p)
		}
	}
	w.pending = nil
	for _, b := range slices.Clone(w.boxes) {
		w.checkBox(b)
	}
	for _, sn := range slices.Clone(w.snaps) {
		w.checkSnap(sn)
	}
	for _, id := range w.deleted {
		sb, err := w.get("check_deleted", id)
		if errors.Is(err, errStopped) {
			return
		}
		if err != nil {
			w.c.failf("worker %d: checking deleted session %s: %v", w.id, id, err)
		} else if sb != nil && sb.State != api.StateTerminated {
			w.c.failf("worker %d: session %s, whose delete was acknowledged, is %s again", w.id, id, sb.State)
		}
		w.c.count("deletes checked")
	}
	w.deleted = nil
	for _, id := range w.deletedSnaps {
		err := w.call("check_deleted_snapshot", func(ctx context.Context) error {
			_, err := w.c.c.GetSnapshot(ctx, id)
			return err
		})
		if errors.Is(err, errStopped) {
			return
		}
		if err == nil {
			w.c.failf("worker %d: snapshot %s, whose delete was acknowledged, exists again", w.id, id)
		} else if apiStatus(err) != http.StatusNotFound {
			w.c.failf("worker %d: checking deleted snapshot %s: %v", w.id, id, err)
		}
		w.c.count("deletes checked")
	}
	w.deletedSnaps = nil
}

// get is GET of a sandbox by id or name; nil for a 404.
func (w *cworker) get(op, ref string) (*api.Sandbox, error) {
	var sb *api.Sandbox
	err := w.call(op, func(ctx context.Context) error {
		var err error
		sb, err = w.c.c.GetSandbox(ctx, ref)
		return err
	})
	if apiStatus(err) == http.StatusNotFound {
		return nil, nil
	}
	return sb, err
}

func transient(s api.SandboxState) bool {
	return s == api.StateCreating || s == api.StateSuspending || s == api.StateResuming
}

// settled waits until the sandbox ref is in a stable state (nil: it does
// not exist), within settleBound.
func (w *cworker) settled(ref string) (*api.Sandbox, bool) {
	deadline := time.Now().Add(settleBound)
	for {
		sb, err := w.get("check_get", ref)
		if err != nil {
			if !errors.Is(err, errStopped) {
				w.c.failf("worker %d: checking %s: %v", w.id, ref, err)
			}
			return nil, false
		}
		if sb == nil || !transient(sb.State) {
			return sb, true
		}
		if time.Now().After(deadline) {
			w.c.failf("worker %d: %s (%s) is still %s %s after the restart (%s)", w.id, sb.ID, sb.Name, sb.State, settleBound, sb.StateReason)
			return nil, false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkBox holds a session of the ledger to what the API acknowledged.
func (w *cworker) checkBox(b *cbox) {
	c := w.c
	c.count("sessions checked")
	sb, ok := w.settled(b.id)
	if !ok {
		w.drop(b)
		return
	}
	switch {
	case sb == nil || sb.State == api.StateTerminated:
		w.drop(b)
		if !b.deleting {
			what := "is gone (404)"
			if sb != nil {
				what = "is terminated (" + sb.StateReason + ")"
			}
			c.failf("worker %d: acknowledged session %s (%s) %s; the kill cut %q on it", w.id, b.id, b.name, what, b.cutOp)
		}
		return
	case sb.State == api.StateError:
		w.drop(b)
		if sb.StateReason == "" {
			c.failf("worker %d: session %s (%s) is in error without a reason", w.id, b.id, b.name)
		}
		if b.cutOp == "" {
			c.failf("worker %d: session %s (%s), untouched by the kill (acknowledged %s), is in error: %s", w.id, b.id, b.name, b.state, sb.StateReason)
		}
		c.mu.Lock()
		c.errored = append(c.errored, fmt.Sprintf("%s (%s), %s cut: %s", b.id, b.name, b.cutOp, sb.StateReason))
		c.mu.Unlock()
		w.deleteFound(sb)
		return
	case sb.State != api.StateRunning && sb.State != api.StateSuspended:
		w.drop(b)
		c.failf("worker %d: session %s (%s) is %s after the restart (%s)", w.id, b.id, b.name, sb.State, sb.StateReason)
		return
	}
	if b.cutOp == "" && sb.State != b.state {
		c.failf("worker %d: session %s (%s), untouched by the kill, was %s and is %s (%s)", w.id, b.id, b.name, b.state, sb.State, sb.StateReason)
	}
	b.state = sb.State
	if w.runCell("check_code", b, dumpVars, nil) != done {
		return
	}
	if !w.checkFile("check_file", b) {
		return
	}
	if !w.checkUnknownSnapshots(b) {
		return
	}
	b.cutOp = ""
	if b.deleting {
		b.deleting = false
		w.delete(b)
	}
}

// checkUnknownSnapshots lists b's snapshots: each is in the ledger, or
// one a checkpoint the kill cut took (then adopted).
func (w *cworker) checkUnknownSnapshots(b *cbox) bool {
	var list *api.SnapshotList
	err := w.call("check_snapshots", func(ctx context.Context) error {
		var err error
		list, err = w.c.c.ListSnapshots(ctx, b.id)
		return err
	})
	if w.outcome("check_snapshots", b, err) != done {
		return false
	}
	for _, s := range list.Snapshots {
		if slices.ContainsFunc(w.snaps, func(x *csnap) bool { return x.id == s.ID }) {
			continue
		}
		if strings.HasPrefix(b.cutOp, "checkpoint_") && s.Name == "" && s.Type == api.SnapshotType(strings.TrimPrefix(b.cutOp, "checkpoint_")) {
			w.snaps = append(w.snaps, b.snapshot(s.ID, s.Type))
			w.c.count("snapshots of cut checkpoints adopted")
			continue
		}
		w.c.failf("worker %d: session %s (%s) has a snapshot no acknowledged or cut call made: %s (%s, %q); the kill cut %q on it",
			w.id, b.id, b.name, s.ID, s.Type, s.Name, b.cutOp)
		w.snaps = append(w.snaps, b.snapshot(s.ID, s.Type)) // deleted at the end
	}
	return true
}

// checkSnap: an acknowledged snapshot still exists (one whose delete a
// kill cut may be gone).
func (w *cworker) checkSnap(sn *csnap) {
	w.c.count("snapshots checked")
	var got *api.Snapshot
	err := w.call("check_snapshot", func(ctx context.Context) error {
		var err error
		got, err = w.c.c.GetSnapshot(ctx, sn.id)
		return err
	})
	if apiStatus(err) == http.StatusNotFound {
		w.snaps = slices.DeleteFunc(w.snaps, func(x *csnap) bool { return x == sn })
		if !sn.deleting {
			w.c.failf("worker %d: acknowledged snapshot %s (%s of %s) is gone", w.id, sn.id, sn.typ, sn.src)
		}
		return
	}
	if w.outcome("check_snapshot", nil, err) != done {
		return
	}
	if got.Type != sn.typ {
		w.c.failf("worker %d: snapshot %s is a %s, acknowledged a %s", w.id, sn.id, got.Type, sn.typ)
	}
	if sn.deleting {
		sn.deleting = false
		w.deleteSnapshot(sn)
	}
}

// deleteFound deletes a sandbox the check found in error or left over.
func (w *cworker) deleteFound(sb *api.Sandbox) {
	var got *api.Sandbox
	err := w.call("delete_found", func(ctx context.Context) error {
		var err error
		got, err = w.c.c.DeleteSandbox(ctx, sb.ID)
		return err
	})
	if err != nil {
		if !errors.Is(err, errStopped) {
			w.c.failf("worker %d: delete of %s (%s, %s): %v", w.id, sb.ID, sb.Name, sb.State, err)
		}
		return
	}
	if got.State != api.StateTerminated {
		w.c.failf("worker %d: delete of %s (%s) answered state %s", w.id, sb.ID, sb.Name, got.State)
	}
}

// resolveCreate finds what a create a kill cut made: nothing, or one
// sandbox, settled running (then a session of the ledger, with what it was
// to hold) or error with a reason (then deleted).
func (w *cworker) resolveCreate(p *pending) {
	c := w.c
	c.count("cut creates resolved")
	var list *api.SandboxList
	err := w.call("check_list", func(ctx context.Context) error {
		var err error
		list, err = c.c.ListSandboxes(ctx, client.ListOptions{Labels: map[string]string{chaosLabel: p.label}})
		return err
	})
	if err != nil {
		if !errors.Is(err, errStopped) {
			c.failf("worker %d: listing the sandbox of the cut %s (label %s): %v", w.id, p.op, p.label, err)
		}
		return
	}
	if len(list.Sandboxes) > 1 {
		c.failf("worker %d: one cut %s made %d sandboxes (label %s)", w.id, p.op, len(list.Sandboxes), p.label)
	}
	for _, found := range list.Sandboxes {
		c.known(found.ID)
		sb, ok := w.settled(found.ID)
		if !ok || sb == nil {
			continue
		}
		switch sb.State {
		case api.StateTerminated:
		case api.StateError:
			if sb.StateReason == "" {
				c.failf("worker %d: the sandbox %s of the cut %s is in error without a reason", w.id, sb.ID, p.op)
			}
			c.mu.Lock()
			c.errored = append(c.errored, fmt.Sprintf("%s (%s), made by the cut %s: %s", sb.ID, sb.Name, p.op, sb.StateReason))
			c.mu.Unlock()
			w.deleteFound(sb)
		case api.StateRunning:
			b := &cbox{id: sb.ID, name: sb.Name, label: p.label, state: api.StateRunning, vars: maps2(p.vars), maybe: map[string]int64{}, file: p.file}
			w.boxes = append(w.boxes, b)
			c.count("sessions of cut creates adopted")
		default:
			c.failf("worker %d: the sandbox %s of the cut %s is %s (%s)", w.id, sb.ID, p.op, sb.State, sb.StateReason)
			w.deleteFound(sb)
		}
	}
}

// resolveFork holds a fork a kill cut to all or nothing: both branches
// running with the source's state and the fork's snapshot kept, or no
// branch running (each gone, terminated, or in error with a reason) and no
// snapshot of it left.
func (w *cworker) resolveFork(p *pending) {
	c := w.c
	c.count("cut forks resolved")
	var found []*api.Sandbox
	running := 0
	for _, name := range p.names {
		sb, ok := w.settled(name)
		if !ok {
			return
		}
		if sb != nil {
			c.known(sb.ID)
			found = append(found, sb)
			if sb.State == api.StateRunning {
				running++
			}
		}
	}
	if running == len(p.names) {
		for _, sb := range found {
			w.boxes = append(w.boxes, &cbox{id: sb.ID, name: sb.Name, state: api.StateRunning, vars: maps2(p.vars), maybe: map[string]int64{}, file: p.file})
		}
		snapID := found[0].SnapshotID
		err := w.call("check_snapshot", func(ctx context.Context) error {
			_, err := c.c.GetSnapshot(ctx, snapID)
			return err
		})
		if err != nil {
			c.failf("worker %d: the cut fork of %s made both branches but its snapshot %s: %v", w.id, p.src.id, snapID, err)
			return
		}
		w.snaps = append(w.snaps, &csnap{id: snapID, src: p.src.id, typ: api.SnapshotMemory, vars: maps2(p.vars), file: p.file})
		c.count("cut forks found whole")
		return
	}
	var states []string
	snaps := map[string]bool{}
	for _, sb := range found {
		states = append(states, fmt.Sprintf("%s %s (%s)", sb.Name, sb.State, sb.StateReason))
		if sb.SnapshotID != "" {
			snaps[sb.SnapshotID] = true
		}
	}
	if running > 0 {
		c.failf("worker %d: the fork of %s a kill cut is not all or nothing: %s", w.id, p.src.id, strings.Join(states, ", "))
	}
	for _, sb := range found {
		switch sb.State {
		case api.StateError:
			if sb.StateReason == "" {
				c.failf("worker %d: branch %s of the cut fork is in error without a reason", w.id, sb.Name)
			}
			c.mu.Lock()
			c.errored = append(c.errored, fmt.Sprintf("%s (%s), a branch of the cut fork of %s: %s", sb.ID, sb.Name, p.src.id, sb.StateReason))
			c.mu.Unlock()
			w.deleteFound(sb)
		case api.StateTerminated:
		default:
			if running == 0 {
				c.failf("worker %d: branch %s of the cut fork is %s (%s)", w.id, sb.Name, sb.State, sb.StateReason)
			}
			w.deleteFound(sb)
		}
	}
	// The fork's snapshot goes with it: the one its branches name, and any
	// "fork" snapshot of the source the ledger does not know.
	deadline := time.Now().Add(settleBound)
	for {
		var left []string
		for id := range snaps {
			err := w.call("check_snapshot", func(ctx context.Context) error {
				_, err := c.c.GetSnapshot(ctx, id)
				return err
			})
			if err == nil {
				left = append(left, id)
			} else if apiStatus(err) != http.StatusNotFound {
				c.failf("worker %d: checking the snapshot %s of the cut fork: %v", w.id, id, err)
				return
			}
		}
		var list *api.SnapshotList
		err := w.call("check_snapshots", func(ctx context.Context) error {
			var err error
			list, err = c.c.ListSnapshots(ctx, p.src.id)
			return err
		})
		if err != nil {
			c.failf("worker %d: listing the snapshots of %s: %v", w.id, p.src.id, err)
			return
		}
		for _, s := range list.Snapshots {
			if s.Name == "fork" && !snaps[s.ID] && !slices.ContainsFunc(w.snaps, func(x *csnap) bool { return x.id == s.ID }) {
				left = append(left, s.ID)
			}
		}
		if len(left) == 0 {
			c.count("cut forks found undone")
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(left)
			c.failf("worker %d: the fork of %s a kill cut left its snapshot %v %s after the restart (branches: %s)",
				w.id, p.src.id, left, settleBound, strings.Join(states, ", "))
			for _, id := range left {
				w.snaps = append(w.snaps, &csnap{id: id, src: p.src.id, typ: api.SnapshotMemory, vars: maps2(p.vars), file: p.file})
			}
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// endChecks, with the traffic over and every ledger checked: no sandbox
// of the daemon is transient or unknown, none is frozen, every snapshot is
// in a ledger, and the store's snapshot rows and directories agree.
func (c *chaos) endChecks(ws []*cworker) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ids := map[string]bool{}
	snapIDs := map[string]bool{}
	for _, w := range ws {
		for _, b := range w.boxes {
			ids[b.id] = true
		}
		for _, sn := range w.snaps {
			snapIDs[sn.id] = true
		}
	}
	deadline := time.Now().Add(settleBound)
	for {
		list, err := c.c.ListSandboxes(ctx, client.ListOptions{})
		if err != nil {
			c.failf("end: list sandboxes: %v", err)
			return
		}
		var busy []string
		for _, sb := range list.Sandboxes {
			c.known(sb.ID)
			if transient(sb.State) {
				busy = append(busy, fmt.Sprintf("%s (%s) %s", sb.ID, sb.Name, sb.State))
			}
		}
		if len(busy) == 0 || time.Now().After(deadline) {
			for _, s := range busy {
				c.failf("end: sandbox %s after the run and %s", s, settleBound)
			}
			for _, sb := range list.Sandboxes {
				if sb.State == api.StateTerminated || ids[sb.ID] {
					continue
				}
				c.failf("end: sandbox %s (%s, labels %v) is %s (%s) and in no ledger", sb.ID, sb.Name, sb.Labels, sb.State, sb.StateReason)
				c.c.DeleteSandbox(ctx, sb.ID)
			}
			for _, sb := range list.Sandboxes {
				if sb.State != api.StateTerminated {
					if f := frozen(sb.ID); f != "" {
						c.failf("end: sandbox %s (%s, %s) has a frozen cgroup: %s", sb.ID, sb.Name, sb.State, f)
					}
				}
			}
			c.count("end: sandboxes checked")
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if list, err := c.c.ListSnapshots(ctx, ""); err != nil {
		c.failf("end: list snapshots: %v", err)
	} else {
		for _, s := range list.Snapshots {
			if !snapIDs[s.ID] {
				c.failf("end: snapshot %s (%s %q of %s) is in no ledger", s.ID, s.Type, s.Name, s.SandboxID)
				c.c.DeleteSnapshot(ctx, s.ID)
			}
		}
	}
	c.snapshotStore("end")
}

// snapshotStore compares the snapshot rows of the daemon's store (suspend
// images included) with the snapshot directories of its data dir.
func (c *chaos) snapshotStore(when string) {
	rows, err := c.query("SELECT id FROM snapshots")
	if err != nil {
		c.failf("%s: reading the store's snapshots: %v", when, err)
		return
	}
	inStore := map[string]bool{}
	for _, r := range rows {
		inStore[r] = true
	}
	entries, _ := os.ReadDir(filepath.Join(c.d.dataDir, "snapshots"))
	onDisk := map[string]bool{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // the store's own (.intents: the marks of forks in flight)
		}
		onDisk[e.Name()] = true
		if !inStore[e.Name()] {
			c.failf("%s: snapshot directory %s has no row in the store", when, e.Name())
		}
	}
	for id := range inStore {
		if !onDisk[id] {
			c.failf("%s: snapshot %s of the store has no directory", when, id)
		}
	}
	// With nothing in flight no fork is marked (a mark is cleared once the
	// fork answered, or by the start after a kill).
	marks, _ := filepath.Glob(filepath.Join(c.d.dataDir, "snapshots", ".intents", "*", "*"))
	for _, m := range marks {
		c.failf("%s: an intent mark is left: %s", when, m)
	}
	c.count(when + ": snapshot rows and directories compared")
}

// query runs a one-column query on the daemon's SQLite store, read-only.
func (c *chaos) query(q string) ([]string, error) {
	path := filepath.Join(c.d.dataDir, "forkbox.db")
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma="+url.QueryEscape("busy_timeout(10000)"))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.Query(q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// frozen describes the frozen cgroup of sandbox id ("" when none is).
func frozen(id string) string {
	for _, p := range []string{"/sys/fs/cgroup/freezer/forkbox/" + id + "/freezer.state"} {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != "THAWED" {
			return p + ": " + strings.TrimSpace(string(b))
		}
	}
	for _, p := range []string{"/sys/fs/cgroup/forkbox/" + id + "/cgroup.freeze", "/sys/fs/cgroup/unified/forkbox/" + id + "/cgroup.freeze"} {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != "0" {
			return p + ": " + strings.TrimSpace(string(b))
		}
	}
	return ""
}

// hostCounts counts the mounts under dataDir and the loop devices on files
// under it.
func hostCounts(dataDir string) (mounts, loops int) {
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && (f[4] == dataDir || strings.HasPrefix(f[4], dataDir+"/")) {
				mounts++
			}
		}
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range backing {
		if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), dataDir+"/") {
			loops++
		}
	}
	return mounts, loops
}

// leakChecks, after every worker deleted what it had: nothing live,
// nothing in the snapshot store, and nothing of any sandbox the daemon
// ever had left on the host, nor any process of the killed daemons.
func (c *chaos) leakChecks() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if list, err := c.c.ListSandboxes(ctx, client.ListOptions{}); err != nil {
		c.failf("after cleanup: list sandboxes: %v", err)
	} else {
		for _, sb := range list.Sandboxes {
			c.known(sb.ID)
			if sb.State != api.StateTerminated {
				c.failf("after cleanup: sandbox %s (%s) is %s", sb.ID, sb.Name, sb.State)
			}
		}
	}
	if list, err := c.c.ListSnapshots(ctx, ""); err != nil {
		c.failf("after cleanup: list snapshots: %v", err)
	} else if len(list.Snapshots) > 0 {
		c.failf("after cleanup: %d snapshots left", len(list.Snapshots))
	}
	c.snapshotStore("after cleanup")
	if left := snapshotDirsLeft(c.d.dataDir); len(left) > 0 {
		c.failf("leak: snapshot directories left: %v", left)
	}
	rows, err := c.query("SELECT id FROM sandboxes")
	if err != nil {
		c.failf("after cleanup: reading the store's sandboxes: %v", err)
	}
	c.mu.Lock()
	for _, id := range rows {
		c.knownIDs[id] = true
	}
	ids := make(map[string]bool, len(c.knownIDs))
	for id := range c.knownIDs {
		ids[id] = true
	}
	orphans := slices.Clone(c.orphans)
	c.mu.Unlock()
	// What a delete frees may take a moment to go (a killed process stays,
	// a zombie, until its parent reaps it): wait for it, within bounds.
	var leaks []string
	start := time.Now()
	for first := true; ; first = false {
		leaks = hostLeaks(c.d.dataDir, ids)
		if m, l := hostCounts(c.d.dataDir); m > c.baseMounts || l > c.baseLoops {
			leaks = append(leaks, fmt.Sprintf("mounts under the data dir: %d (%d before), loop devices: %d (%d before)", m, c.baseMounts, l, c.baseLoops))
		}
		for _, p := range orphans {
			if p.alive() {
				leaks = append(leaks, "process a killed daemon left: "+p.what)
			}
		}
		if len(leaks) == 0 || time.Since(start) > 30*time.Second {
			break
		}
		if first {
			// For the report: what a leak was before it went or stayed.
			c.t.Logf("left on the host right after the cleanup (%s to look; waiting up to 30s for it to go):\n  %s",
				time.Since(start).Round(time.Millisecond), strings.Join(leaks, "\n  "))
		}
		time.Sleep(time.Second)
	}
	if waited := time.Since(start); waited > time.Second {
		c.t.Logf("the host took %s to free what the deleted sandboxes held", waited.Round(time.Second))
	}
	for _, l := range leaks {
		c.failf("leak: %s", l)
	}
	c.mu.Lock()
	c.checks["sandboxes checked for leaks"] = len(ids)
	c.mu.Unlock()
}

// sbxRE matches a sandbox id, vethRE a sandbox's veth.
var (
	sbxRE  = regexp.MustCompile(`sbx_[a-z0-9]+`)
	vethRE = regexp.MustCompile(`fbx[0-9a-f]{12}`)
)

// hostLeaks is sandboxLeaks for many sandboxes in one pass over the host
// (the per-sandbox one reads every process's cgroups once per sandbox),
// plus frozen cgroups and nftables entries: mounts, cgroups and whether
// they are frozen, processes in them, veths and their nftables chains,
// sets and map elements, loop devices, directories.
func hostLeaks(dataDir string, ids map[string]bool) []string {
	var out []string
	mine := func(s string) []string {
		var found []string
		for _, id := range sbxRE.FindAllString(s, -1) {
			if ids[id] && !slices.Contains(found, id) {
				found = append(found, id)
			}
		}
		return found
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			for _, id := range mine(line) {
				out = append(out, id+": mount: "+line)
			}
		}
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/forkbox/sbx_*")
	cg2, _ := filepath.Glob("/sys/fs/cgroup/forkbox/sbx_*")
	for _, cg := range append(cgs, cg2...) {
		if id := filepath.Base(cg); ids[id] {
			out = append(out, id+": cgroup: "+cg)
			if f := frozen(id); f != "" {
				out = append(out, id+": frozen cgroup: "+f)
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if found := mine(string(b)); len(found) > 0 {
			out = append(out, found[0]+": process: "+procInfo(filepath.Dir(p)))
		}
	}
	veths := map[string]string{}
	for id := range ids {
		sum := sha256.Sum256([]byte(id))
		veths["fbx"+hex.EncodeToString(sum[:6])] = id
	}
	if ifs, err := net.Interfaces(); err == nil {
		for _, ifc := range ifs {
			if id, ok := veths[ifc.Name]; ok {
				out = append(out, id+": veth: "+ifc.Name)
			}
		}
	}
	if b, err := exec.Command("nft", "list", "table", "inet", "forkbox").Output(); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			for _, name := range vethRE.FindAllString(line, -1) {
				if id, ok := veths[name]; ok {
					out = append(out, id+": nftables: "+strings.TrimSpace(line))
				}
			}
		}
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range backing {
		if b, err := os.ReadFile(p); err == nil {
			for _, id := range mine(string(b)) {
				out = append(out, id+": loop device: "+p+" → "+strings.TrimSpace(string(b)))
			}
		}
	}
	if ents, err := os.ReadDir(filepath.Join(dataDir, "sandboxes")); err == nil {
		for _, e := range ents {
			if ids[e.Name()] {
				out = append(out, e.Name()+": directory: "+filepath.Join(dataDir, "sandboxes", e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out
}

// report prints what the run did and found.
func (c *chaos) report(dur time.Duration, workers, kills int, traffic time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	names := make([]string, 0, len(c.ops))
	for name := range c.ops {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "%-30s %6s %5s %5s %5s %6s %8s %8s\n", "operation", "count", "4xx", "503", "cut", "errors", "p50 ms", "max ms")
	total := 0
	for _, name := range names {
		st := c.ops[name]
		lat := slices.Clone(st.lat)
		slices.Sort(lat)
		total += st.count
		fmt.Fprintf(&b, "%-30s %6d %5d %5d %5d %6d %8.0f %8.0f\n", name, st.count, st.n4xx, st.n503, st.cut, st.errs, ms(pct(lat, 50)), ms(pct(lat, 100)))
	}
	fmt.Fprintf(&b, "%d calls, %d HTTP requests, in %s of traffic (seed %d)\n", total, c.reqs.Load(), traffic.Round(time.Second), c.seed)
	fmt.Fprintf(&b, "kills: %d of %d\n", len(c.killsLog), kills)
	for _, k := range c.killsLog {
		fmt.Fprintf(&b, "  kill %d at %s, %s: cut %d requests %v; %s; ledgers checked in %s\n",
			k.n, k.at.Round(100*time.Millisecond), k.describe(), len(k.inFl), k.inFl, k.restarted(), k.check.Round(100*time.Millisecond))
	}
	checks := make([]string, 0, len(c.checks))
	for k := range c.checks {
		checks = append(checks, k)
	}
	sort.Strings(checks)
	b.WriteString("checks:")
	for _, k := range checks {
		fmt.Fprintf(&b, " %s %d;", k, c.checks[k])
	}
	b.WriteString("\n")
	n503 := 0
	for _, n := range c.n503 {
		n503 += n
	}
	fmt.Fprintf(&b, "503 unavailable with Retry-After: %d\n", n503)
	keys := make([]string, 0, len(c.n503))
	for k := range c.n503 {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %dx %s\n", c.n503[k], k)
	}
	fmt.Fprintf(&b, "sandboxes found in error: %d\n", len(c.errored))
	for _, e := range c.errored {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	fmt.Fprintf(&b, "failures: %d\n", c.nfail)
	c.t.Logf("chaos summary (%s, %d workers):\n%s", dur, workers, b.String())
}
