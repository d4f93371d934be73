package e2b

// envd: what E2B runs on port 49983 inside each of its sandboxes, served
// here on a forkbox sandbox's behalf. Processes and the filesystem are the
// Connect protocol (connect-go, the JSON codec the SDKs use; the services
// are generated from spec/envd by scripts/gen-envd.sh), files and health
// are plain HTTP. Every request is for the sandbox sandboxID(ctx), which the
// caller resolved and authorized.
//
// Commands run as under E2B's envd: detached from their Start stream (a
// table of them per sandbox serves List, Connect, SendInput, CloseStdin and
// SendSignal), on a pseudo-terminal when Start asks for a pty (Update
// resizes it). What forkbox cannot do (yet) is answered with connect's
// unimplemented and a message that says so: StreamInput and directory
// watches.

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/forkbox/forkbox/api"
	fspb "github.com/forkbox/forkbox/internal/e2b/envdpb/filesystem"
	"github.com/forkbox/forkbox/internal/e2b/envdpb/filesystem/filesystemconnect"
	procpb "github.com/forkbox/forkbox/internal/e2b/envdpb/process"
	"github.com/forkbox/forkbox/internal/e2b/envdpb/process/processconnect"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sandbox"
)

// Backend is what the E2B layer needs of forkbox; *sandbox.Manager has it.
type Backend interface {
	Exec(ctx context.Context, ref string, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error)
	ReadFile(ctx context.Context, ref, path string) (io.ReadCloser, int64, error)
	WriteFile(ctx context.Context, ref, path string, mode uint32, body io.Reader) (*api.WriteFileResult, error)
	RemoveFile(ctx context.Context, ref, path string, recursive bool) error
	ListFiles(ctx context.Context, ref, path string) (*api.FileList, error)
	// ExecInput and ExecSignal reach a command Exec runs with
	// ExecOptions.ID.
	ExecInput(ctx context.Context, ref, id string, data []byte, closeStdin bool) error
	ExecSignal(ctx context.Context, ref, id, signal string) error
	// ExecResize resizes the terminal of a command Exec runs with
	// ExecOptions.PTY.
	ExecResize(ctx context.Context, ref, id string, size sandbox.PTYSize) error
}

var _ Backend = (*sandbox.Manager)(nil)

// sandboxUser is the one user forkbox runs sandbox code as (uid 1000, home
// homeDir); E2B clients may name it, or no user at all.
const sandboxUser = "user"

const (
	// firstPID is the first synthetic pid a sandbox's processes get.
	firstPID = 1000
	// defaultKeepalive is the most time a Start stream stays silent while
	// its command runs (proxies cut idle connections); a client's shorter
	// Keepalive-Ping-Interval wins.
	defaultKeepalive = 20 * time.Second
	// maxListEntries bounds a recursive ListDir.
	maxListEntries = 10000
	// maxRPCRequest bounds a Connect request message (paths and commands).
	maxRPCRequest = 4 << 20
)

// envd serves E2B's envd for the sandbox each request names.
type envd struct {
	b         Backend
	log       *slog.Logger
	mux       *http.ServeMux
	keepalive time.Duration

	mu    sync.Mutex
	procs map[string]*procTable // by sandbox id
	// watchers are the polled directory watches (watch.go).
	watchers watcherTable
}

// newEnvd returns the handler of E2B's envd (port 49983) for the sandbox
// sandboxID(r.Context()) of each request: 502 when there is none.
func newEnvd(b Backend, log *slog.Logger) http.Handler {
	e := &envd{b: b, log: log, keepalive: defaultKeepalive, procs: map[string]*procTable{}}
	opts := []connect.HandlerOption{
		connect.WithInterceptors(userInterceptor{}),
		connect.WithReadMaxBytes(maxRPCRequest),
	}
	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(&processService{e}, opts...))
	mux.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{e}, opts...))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", e.handleRead)
	mux.HandleFunc("POST /files", e.handleWrite)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeEnvdError(w, http.StatusNotFound, fmt.Sprintf("envd: no route %s %s", r.Method, r.URL.Path))
	})
	e.mux = mux
	return e
}

func (e *envd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if sandboxID(r.Context()) == "" {
		// What E2B's edge answers for a sandbox it cannot reach: the SDKs
		// take 502 as "the sandbox is gone".
		writeEnvdError(w, http.StatusBadGateway, "envd: the request names no sandbox")
		return
	}
	e.mux.ServeHTTP(w, r)
}

// --- users and paths ---

// errUser is the answer to a client that asks for another user than
// sandboxUser (E2B's user:'root' option, say).
func errUser(name string) error {
	return errdefs.PermissionDenied("user %q: forkbox runs sandbox code as '%s' only", name, sandboxUser)
}

// checkUser accepts no user or sandboxUser.
func checkUser(name string) error {
	if name == "" || name == sandboxUser {
		return nil
	}
	return errUser(name)
}

// basicUser is the user of an "Authorization: Basic base64(user:)" header,
// the way E2B's SDKs name the user an RPC acts as; "" without one.
func basicUser(h http.Header) string {
	scheme, cred, ok := strings.Cut(h.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "<undecodable Basic credentials>"
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name
}

// userInterceptor refuses RPCs for users other than sandboxUser.
type userInterceptor struct{}

func (userInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := checkUser(basicUser(req.Header())); err != nil {
			return nil, connect.NewError(connect.CodePermissionDenied, err)
		}
		return next(ctx, req)
	}
}

func (userInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (userInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := checkUser(basicUser(conn.RequestHeader())); err != nil {
			return connect.NewError(connect.CodePermissionDenied, err)
		}
		return next(ctx, conn)
	}
}

// resolvePath makes an E2B path absolute the way envd does: "~" and "~/x"
// are in the home directory, relative paths are against it, "" is the home
// directory itself. ".." is resolved lexically (forkbox's agent refuses it).
func resolvePath(p string) (string, error) {
	if strings.HasPrefix(p, "~") {
		if p != "~" && !strings.HasPrefix(p, "~/") {
			return "", errdefs.InvalidArgument("path %q: cannot expand another user's home directory", p)
		}
		p = homeDir + p[1:]
	}
	if !strings.HasPrefix(p, "/") {
		p = homeDir + "/" + p
	}
	return path.Clean(p), nil
}

// resolveTarget is resolvePath for paths an operation changes: they must
// be given.
func resolveTarget(what, p string) (string, error) {
	if p == "" {
		return "", errdefs.InvalidArgument("%s is required", what)
	}
	return resolvePath(p)
}

// --- errors ---

// rpcErr maps a forkbox error to a Connect error (errdefs kinds to codes).
func (e *envd) rpcErr(ctx context.Context, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		code = connect.CodeNotFound
	case errors.Is(err, errdefs.ErrInvalidArgument):
		code = connect.CodeInvalidArgument
	case errors.Is(err, errdefs.ErrPermissionDenied):
		code = connect.CodePermissionDenied
	case errors.Is(err, errdefs.ErrUnauthenticated):
		code = connect.CodeUnauthenticated
	case errors.Is(err, errdefs.ErrConflict):
		code = connect.CodeAlreadyExists
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, errdefs.ErrResourceExhausted), errors.Is(err, errdefs.ErrInsufficientStorage),
		errors.Is(err, errdefs.ErrTooLarge):
		code = connect.CodeResourceExhausted
	case errors.Is(err, errdefs.ErrUnavailable), errors.Is(err, errdefs.ErrBusy):
		code = connect.CodeUnavailable
	case errors.Is(err, errdefs.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	}
	if code == connect.CodeInternal {
		e.log.Warn("e2b envd: internal error", "sandbox", sandboxID(ctx), "err", err)
	}
	return connect.NewError(code, err)
}

// unimplemented answers an RPC forkbox does not serve, saying why.
func unimplemented(format string, args ...any) error {
	return connect.NewError(connect.CodeUnimplemented, fmt.Errorf(format, args...))
}

// envdError is the error body of envd's plain HTTP routes.
type envdError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeEnvdError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(envdError{Code: status, Message: msg})
}

// restError answers err on a plain HTTP route with the status of its kind.
func (e *envd) restError(w http.ResponseWriter, r *http.Request, err error) {
	status, _ := errdefs.HTTPStatus(err)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		status = http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return // the client is gone
	}
	if status == http.StatusInternalServerError {
		e.log.Warn("e2b envd: internal error", "sandbox", sandboxID(r.Context()), "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeEnvdError(w, status, err.Error())
}

// --- GET and POST /files ---

// restUser is the user a plain HTTP request names: ?username= or Basic auth.
func restUser(r *http.Request) error {
	if err := checkUser(r.URL.Query().Get("username")); err != nil {
		return err
	}
	return checkUser(basicUser(r.Header))
}

// handleRead serves GET /files?path=P: the file's bytes.
func (e *envd) handleRead(w http.ResponseWriter, r *http.Request) {
	if err := restUser(r); err != nil {
		writeEnvdError(w, http.StatusUnauthorized, err.Error())
		return
	}
	p, err := resolvePath(r.URL.Query().Get("path"))
	if err != nil {
		e.restError(w, r, err)
		return
	}
	rc, size, err := e.b.ReadFile(r.Context(), sandboxID(r.Context()), p)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			// The SDKs turn exactly this into FileNotFound.
			writeEnvdError(w, http.StatusNotFound, fmt.Sprintf("path '%s' does not exist", p))
			return
		}
		e.restError(w, r, fmt.Errorf("read %s: %w", p, err))
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil && r.Context().Err() == nil {
		e.log.Warn("e2b envd: file read broke off", "sandbox", sandboxID(r.Context()), "path", p, "err", err)
	}
}

// writtenEntry is one item of POST /files's answer.
type writtenEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// handleWrite serves POST /files: multipart/form-data with parts named
// "file" (each written to ?path=, or, without it, to its own filename), or
// one raw body (application/octet-stream, gzip allowed) written to ?path=.
// It answers the files written, in order.
func (e *envd) handleWrite(w http.ResponseWriter, r *http.Request) {
	if err := restUser(r); err != nil {
		writeEnvdError(w, http.StatusUnauthorized, err.Error())
		return
	}
	ctx := r.Context()
	id := sandboxID(ctx)
	query := r.URL.Query().Get("path")
	write := func(target string, body io.Reader) (writtenEntry, error) {
		p, err := resolveTarget("path", target)
		if err != nil {
			return writtenEntry{}, err
		}
		res, err := e.b.WriteFile(ctx, id, p, 0o644, body)
		if err != nil {
			return writtenEntry{}, fmt.Errorf("write %s: %w", p, err)
		}
		if res != nil && res.Path != "" {
			p = res.Path
		}
		return writtenEntry{Name: path.Base(p), Type: "file", Path: p}, nil
	}
	var out []writtenEntry
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		mr, err := r.MultipartReader()
		if err != nil {
			writeEnvdError(w, http.StatusBadRequest, "bad multipart body: "+err.Error())
			return
		}
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				writeEnvdError(w, http.StatusBadRequest, "bad multipart body: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			target := query
			if target == "" {
				// Part.FileName keeps only the base name; the SDKs put
				// the whole target path there.
				_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				target = params["filename"]
				if target == "" {
					part.Close()
					writeEnvdError(w, http.StatusBadRequest, "a part named 'file' has no filename, and the request no ?path=")
					return
				}
			}
			ent, err := write(target, part)
			part.Close()
			if err != nil {
				e.writeErr(w, r, err)
				return
			}
			out = append(out, ent)
		}
		if len(out) == 0 {
			writeEnvdError(w, http.StatusBadRequest, "the multipart body has no part named 'file'")
			return
		}
	} else {
		if query == "" {
			writeEnvdError(w, http.StatusBadRequest, "path is required (?path=) for a body that is not multipart/form-data")
			return
		}
		var body io.Reader = r.Body
		switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
		case "gzip":
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				writeEnvdError(w, http.StatusBadRequest, "bad gzip body: "+err.Error())
				return
			}
			defer zr.Close()
			body = zr
		default:
			writeEnvdError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Encoding %q is not supported (gzip or none)", enc))
			return
		}
		ent, err := write(query, body)
		if err != nil {
			e.writeErr(w, r, err)
			return
		}
		out = append(out, ent)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// writeErr answers a failed upload: 507, E2B's "not enough disk space",
// when the sandbox's disk is full (the agent's ENOSPC is resource_exhausted).
func (e *envd) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errdefs.ErrResourceExhausted) || errors.Is(err, errdefs.ErrInsufficientStorage) {
		writeEnvdError(w, http.StatusInsufficientStorage, err.Error())
		return
	}
	if errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) {
		writeEnvdError(w, http.StatusBadRequest, "bad gzip body: "+err.Error())
		return
	}
	e.restError(w, r, err)
}

// --- process.Process ---

type processService struct{ e *envd }

var _ processconnect.ProcessHandler = (*processService)(nil)

// proc is a command of a sandbox started by Start: it runs detached from
// the Start stream (which is only its first subscriber) until it ends or
// the Start request's deadline passes, as under E2B's envd.
type proc struct {
	pid    uint32
	info   *procpb.ProcessInfo
	execID string // the command's id at the agent (ExecOptions.ID)
	cmd    string
	pty    bool // it runs on a pseudo-terminal (Start with pty)

	startOnce sync.Once
	started   chan struct{} // closed once the agent reports the start, or the command ended
	done      chan struct{} // closed once the command ended; res, err and overdue are set then

	res     *api.ExecResult
	err     error
	overdue bool // it ran past the Start request's deadline and was killed

	subs map[*subscriber]struct{} // guarded by envd.mu
}

func (p *proc) markStarted() { p.startOnce.Do(func() { close(p.started) }) }

// subscriber is a stream that follows a proc's events: Start's own, or a
// Connect's. The command's output waits for a subscriber that is slow
// (backpressure, as when the stream was the command's only reader), never
// for one that is gone.
type subscriber struct {
	ch       chan *procpb.ProcessEvent
	gone     chan struct{}
	goneOnce sync.Once
}

func (s *subscriber) leave() { s.goneOnce.Do(func() { close(s.gone) }) }

// procTable is a sandbox's running commands.
type procTable struct {
	next    uint32
	running map[uint32]*proc
}

const (
	// maxProcs bounds the commands that run at once in a sandbox.
	maxProcs = 64
	// maxSubscribers bounds the streams that follow one command.
	maxSubscribers = 16
	// subscriberQueue is how many events wait for a slow subscriber
	// before the command's output waits for it.
	subscriberQueue = 64
	// startWait bounds how long an input or a signal waits for the agent
	// to report that a command just started.
	startWait = 10 * time.Second
	// killWait bounds how long a SIGKILL waits for the command to end, so
	// that the SDK's next call sees it gone.
	killWait = 5 * time.Second
	// maxInput bounds one SendInput.
	maxInput = 1 << 20
	// maxPTYSize bounds a terminal's columns and rows.
	maxPTYSize = 1000
)

// newProc registers a command of sandbox id under a new pid, with sub as
// its first subscriber.
func (e *envd) newProc(id string, info *procpb.ProcessInfo, cmd string, sub *subscriber) (*proc, error) {
	var salt [6]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return nil, fmt.Errorf("process id: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.procs[id]
	if t == nil {
		t = &procTable{next: firstPID, running: map[uint32]*proc{}}
		e.procs[id] = t
	}
	if len(t.running) >= maxProcs {
		return nil, errdefs.ResourceExhausted("%d processes run in this sandbox already; wait for one to end or kill one", maxProcs)
	}
	pid := t.next
	t.next++
	info.Pid = pid
	p := &proc{
		pid: pid, info: info, cmd: cmd,
		execID:  fmt.Sprintf("e2b-%d-%s", pid, hex.EncodeToString(salt[:])),
		started: make(chan struct{}), done: make(chan struct{}),
		subs: map[*subscriber]struct{}{sub: {}},
	}
	t.running[pid] = p
	return p, nil
}

func newSubscriber() *subscriber {
	return &subscriber{ch: make(chan *procpb.ProcessEvent, subscriberQueue), gone: make(chan struct{})}
}

// findProc finds a running command of sandbox id by pid or tag.
func (e *envd) findProc(id string, sel *procpb.ProcessSelector) (*proc, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.procs[id]
	switch s := sel.GetSelector().(type) {
	case *procpb.ProcessSelector_Pid:
		if t != nil {
			if p := t.running[s.Pid]; p != nil {
				return p, nil
			}
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", s.Pid))
	case *procpb.ProcessSelector_Tag:
		var found *proc
		if t != nil {
			for _, p := range t.running {
				if p.info.GetTag() == s.Tag && (found == nil || p.pid < found.pid) {
					found = p
				}
			}
		}
		if found == nil {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", s.Tag))
		}
		return found, nil
	}
	return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process: a pid or a tag is required"))
}

// subscribe adds a subscriber to a running p.
func (e *envd) subscribe(p *proc) (*subscriber, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-p.done:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found (it ended)", p.pid))
	default:
	}
	if len(p.subs) >= maxSubscribers {
		return nil, errdefs.ResourceExhausted("process %d has %d streams following it already", p.pid, maxSubscribers)
	}
	sub := newSubscriber()
	p.subs[sub] = struct{}{}
	return sub, nil
}

func (e *envd) unsubscribe(p *proc, sub *subscriber) {
	e.mu.Lock()
	delete(p.subs, sub)
	e.mu.Unlock()
	sub.leave()
}

// publish hands ev to p's subscribers, waiting for those that are slow.
func (e *envd) publish(p *proc, ev *procpb.ProcessEvent) {
	e.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	e.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

// runProc runs p until it ends, then removes it from the table; subscribers
// then send its end.
func (e *envd) runProc(ctx context.Context, cancel context.CancelFunc, id string, p *proc, req *api.ExecRequest, keepStdin bool, pty *sandbox.PTYSize) {
	defer cancel()
	output := func(stderr bool) func([]byte) {
		return func(b []byte) {
			if len(b) == 0 {
				return
			}
			p.markStarted() // an agent that does not report the start
			d := &procpb.ProcessEvent_DataEvent{Output: &procpb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
			if stderr {
				d.Output = &procpb.ProcessEvent_DataEvent_Stderr{Stderr: b}
			}
			e.publish(p, &procpb.ProcessEvent{Event: &procpb.ProcessEvent_Data{Data: d}})
		}
	}
	onPTY := func(b []byte) {
		if len(b) == 0 {
			return
		}
		p.markStarted()
		d := &procpb.ProcessEvent_DataEvent{Output: &procpb.ProcessEvent_DataEvent_Pty{Pty: b}}
		e.publish(p, &procpb.ProcessEvent{Event: &procpb.ProcessEvent_Data{Data: d}})
	}
	res, err := e.b.Exec(ctx, id, req, sandbox.ExecOptions{
		OnStdout: output(false), OnStderr: output(true), OnPTY: onPTY, OnStart: p.markStarted,
		ID: p.execID, KeepStdin: keepStdin, PTY: pty,
	})
	p.markStarted()
	e.mu.Lock()
	p.res, p.err = res, err
	p.overdue = err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded)
	if t := e.procs[id]; t != nil && t.running[p.pid] == p {
		delete(t.running, p.pid)
	}
	e.mu.Unlock()
	close(p.done)
}

// follow streams p's events to one subscriber through send: start, output
// as it comes, keepalives while it is silent, then its end. A subscriber
// that goes away leaves the command running.
func (e *envd) follow(ctx context.Context, p *proc, sub *subscriber, keepalive time.Duration, send func(*procpb.ProcessEvent) error, overdue func() error) error {
	defer e.unsubscribe(p, sub)
	if err := send(&procpb.ProcessEvent{Event: &procpb.ProcessEvent_Start{Start: &procpb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return err
	}
	t := time.NewTicker(keepalive)
	defer t.Stop()
	for {
		select {
		case ev := <-sub.ch:
			if err := send(ev); err != nil {
				return err
			}
		case <-t.C:
			if err := send(&procpb.ProcessEvent{Event: &procpb.ProcessEvent_Keepalive{Keepalive: &procpb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return overdue()
			}
			return ctx.Err()
		case <-p.done:
			// All its output was queued before it ended.
			for {
				select {
				case ev := <-sub.ch:
					if err := send(ev); err != nil {
						return err
					}
					continue
				default:
				}
				break
			}
			switch {
			case p.overdue:
				return overdue()
			case p.err != nil:
				return e.rpcErr(ctx, fmt.Errorf("run %s: %w", p.cmd, p.err))
			}
			return send(&procpb.ProcessEvent{Event: &procpb.ProcessEvent_End{End: endEvent(p.res)}})
		}
	}
}

// Start runs a command and streams its events: start (with a pid of this
// layer's own), output as it comes, keepalives while it is silent, end.
// As under E2B's envd, the command does not depend on the stream: a client
// that goes away leaves it running (Connect follows it again, SendSignal
// kills it); the Start request's deadline (Connect-Timeout-Ms), if any,
// kills it.
func (s *processService) Start(ctx context.Context, req *connect.Request[procpb.StartRequest], stream *connect.ServerStream[procpb.StartResponse]) error {
	e := s.e
	id := sandboxID(ctx)
	msg := req.Msg
	var pty *sandbox.PTYSize
	if msg.Pty != nil {
		// A pseudo-terminal (E2B's pty.create): its output comes as
		// DataEvent.pty, SendInput's input.pty goes to it, Update
		// resizes it; its stdin is open whatever msg.stdin says.
		sz, err := ptySize(msg.Pty)
		if err != nil {
			return e.rpcErr(ctx, err)
		}
		pty = sz
	}
	cfg := msg.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	cwd := homeDir
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		var err error
		if cwd, err = resolvePath(*cfg.Cwd); err != nil {
			return e.rpcErr(ctx, err)
		}
	}
	// stdin: false (the SDKs' default) closes the command's stdin; true
	// keeps it open for SendInput and CloseStdin.
	ereq := &api.ExecRequest{Cmd: cfg.Cmd, Args: cfg.Args, Env: cfg.Envs, Cwd: cwd}
	info := &procpb.ProcessInfo{
		Config: &procpb.ProcessConfig{Cmd: cfg.Cmd, Args: cfg.Args, Envs: cfg.Envs, Cwd: &cwd},
		Tag:    msg.Tag,
	}
	sub := newSubscriber()
	p, err := e.newProc(id, info, cfg.Cmd, sub)
	if err != nil {
		return e.rpcErr(ctx, err)
	}
	p.pty = pty != nil
	// The command's context keeps the request's values (the tenant it
	// runs for) and deadline, not its cancellation.
	execCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if dl, ok := ctx.Deadline(); ok {
		cancel()
		execCtx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl)
	}
	go e.runProc(execCtx, cancel, id, p, ereq, msg.GetStdin() || pty != nil, pty)
	return e.follow(ctx, p, sub, e.keepaliveFor(req.Header()),
		func(ev *procpb.ProcessEvent) error { return stream.Send(&procpb.StartResponse{Event: ev}) },
		func() error {
			return connect.NewError(connect.CodeDeadlineExceeded,
				fmt.Errorf("command %s ran past the request's timeout (Connect-Timeout-Ms) and was killed: %w", cfg.Cmd, context.DeadlineExceeded))
		})
}

// keepaliveFor is the keepalive period of a stream: defaultKeepalive, or
// the client's Keepalive-Ping-Interval (seconds) when shorter.
func (e *envd) keepaliveFor(h http.Header) time.Duration {
	d := e.keepalive
	if n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		if c := time.Duration(n) * time.Second; c < d {
			d = c
		}
	}
	return d
}

// endEvent is a command's end as envd reports it, from Go's ProcessState:
// "exit status N" (and, when N is not 0, the same as error), or for a
// signal exit code -1, exited false, "signal: killed".
func endEvent(res *api.ExecResult) *procpb.ProcessEvent_EndEvent {
	end := &procpb.ProcessEvent_EndEvent{ExitCode: int32(res.ExitCode), Exited: true}
	if res.Signal != "" {
		end.ExitCode = -1
		end.Exited = false
		end.Status = "signal: " + signalText(res.Signal)
	} else {
		end.Status = fmt.Sprintf("exit status %d", res.ExitCode)
	}
	if !end.Exited || end.ExitCode != 0 {
		msg := end.Status
		if res.Error != "" {
			// Why, when forkbox knows more than the status: timed out,
			// out of memory, could not start.
			msg += " (" + res.Error + ")"
		}
		end.Error = &msg
	}
	return end
}

// signalText is Go's name of a signal ("killed" for "SIGKILL").
func signalText(name string) string {
	if n := unix.SignalNum(name); n != 0 {
		return syscall.Signal(n).String()
	}
	return strings.ToLower(strings.TrimPrefix(name, "SIG"))
}

// List answers the commands running in the sandbox.
func (s *processService) List(ctx context.Context, req *connect.Request[procpb.ListRequest]) (*connect.Response[procpb.ListResponse], error) {
	e := s.e
	e.mu.Lock()
	var out []*procpb.ProcessInfo
	if t := e.procs[sandboxID(ctx)]; t != nil {
		for _, p := range t.running {
			out = append(out, p.info)
		}
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return connect.NewResponse(&procpb.ListResponse{Processes: out}), nil
}

// Connect follows a running command (by pid or tag): start, then its
// output from now on, then its end. The stream going away, or its own
// deadline passing, leaves the command running.
func (s *processService) Connect(ctx context.Context, req *connect.Request[procpb.ConnectRequest], stream *connect.ServerStream[procpb.ConnectResponse]) error {
	e := s.e
	p, err := e.findProc(sandboxID(ctx), req.Msg.GetProcess())
	if err != nil {
		return e.rpcErr(ctx, err)
	}
	sub, err := e.subscribe(p)
	if err != nil {
		return e.rpcErr(ctx, err)
	}
	return e.follow(ctx, p, sub, e.keepaliveFor(req.Header()),
		func(ev *procpb.ProcessEvent) error { return stream.Send(&procpb.ConnectResponse{Event: ev}) },
		func() error {
			return connect.NewError(connect.CodeDeadlineExceeded,
				fmt.Errorf("the Connect stream's timeout (Connect-Timeout-Ms) expired; process %d keeps running: %w", p.pid, context.DeadlineExceeded))
		})
}

// reachable finds a running command for an input or a signal, once the
// agent has it registered.
func (e *envd) reachable(ctx context.Context, sel *procpb.ProcessSelector) (*proc, error) {
	p, err := e.findProc(sandboxID(ctx), sel)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(startWait)
	defer t.Stop()
	select {
	case <-p.started:
	case <-t.C: // the agent's own answer says what is wrong
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-p.done:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found (it ended)", p.pid))
	default:
	}
	return p, nil
}

// procErr maps the agent's not-found (the command ended meanwhile) to envd's.
func (e *envd) procErr(ctx context.Context, p *proc, err error) error {
	if errors.Is(err, errdefs.ErrNotFound) {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found (it ended): %w", p.pid, err))
	}
	return e.rpcErr(ctx, err)
}

// ptySize checks a terminal size of Start or Update: 1 to 1000 columns
// and rows.
func ptySize(pty *procpb.PTY) (*sandbox.PTYSize, error) {
	sz := pty.GetSize()
	if sz == nil {
		return nil, errdefs.InvalidArgument("pty.size is required")
	}
	if sz.Cols < 1 || sz.Cols > maxPTYSize || sz.Rows < 1 || sz.Rows > maxPTYSize {
		return nil, errdefs.InvalidArgument("pty size %dx%d: columns and rows are 1 to %d", sz.Cols, sz.Rows, maxPTYSize)
	}
	return &sandbox.PTYSize{Cols: uint16(sz.Cols), Rows: uint16(sz.Rows)}, nil
}

// Update resizes the terminal of a command started with a pty (E2B's
// pty.resize).
func (s *processService) Update(ctx context.Context, req *connect.Request[procpb.UpdateRequest]) (*connect.Response[procpb.UpdateResponse], error) {
	e := s.e
	if req.Msg.Pty == nil {
		// Nothing else of a process can be updated.
		return connect.NewResponse(&procpb.UpdateResponse{}), nil
	}
	sz, err := ptySize(req.Msg.Pty)
	if err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	p, err := e.reachable(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	if !p.pty {
		return nil, e.rpcErr(ctx, errdefs.FailedPrecondition("process %d runs without a pty; only a pty can be resized", p.pid))
	}
	if err := e.b.ExecResize(ctx, sandboxID(ctx), p.execID, *sz); err != nil {
		return nil, e.procErr(ctx, p, fmt.Errorf("resize the pty of process %d: %w", p.pid, err))
	}
	return connect.NewResponse(&procpb.UpdateResponse{}), nil
}

func (s *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[procpb.StreamInputRequest]) (*connect.Response[procpb.StreamInputResponse], error) {
	return nil, unimplemented("process.Process/StreamInput is not supported; use SendInput")
}

// SendInput writes to the stdin of a command started with stdin: true
// (input.stdin), or to the terminal of one started with a pty (input.pty).
func (s *processService) SendInput(ctx context.Context, req *connect.Request[procpb.SendInputRequest]) (*connect.Response[procpb.SendInputResponse], error) {
	e := s.e
	var data []byte
	toPTY := false
	switch in := req.Msg.GetInput().GetInput().(type) {
	case *procpb.ProcessInput_Stdin:
		data = in.Stdin
	case *procpb.ProcessInput_Pty:
		data, toPTY = in.Pty, true
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input.stdin or input.pty is required"))
	}
	if len(data) > maxInput {
		return nil, e.rpcErr(ctx, errdefs.TooLarge("input of %d bytes: at most %d at once", len(data), maxInput))
	}
	p, err := e.reachable(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	if toPTY && !p.pty {
		return nil, e.rpcErr(ctx, errdefs.FailedPrecondition("process %d runs without a pty; send its input as stdin", p.pid))
	}
	if len(data) > 0 {
		if err := e.b.ExecInput(ctx, sandboxID(ctx), p.execID, data, false); err != nil {
			return nil, e.procErr(ctx, p, fmt.Errorf("send input to process %d: %w", p.pid, err))
		}
	}
	return connect.NewResponse(&procpb.SendInputResponse{}), nil
}

// CloseStdin closes the stdin of a command started with stdin: true.
func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[procpb.CloseStdinRequest]) (*connect.Response[procpb.CloseStdinResponse], error) {
	e := s.e
	p, err := e.reachable(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	if err := e.b.ExecInput(ctx, sandboxID(ctx), p.execID, nil, true); err != nil {
		return nil, e.procErr(ctx, p, fmt.Errorf("close the stdin of process %d: %w", p.pid, err))
	}
	return connect.NewResponse(&procpb.CloseStdinResponse{}), nil
}

// SendSignal signals a command's process group. After SIGKILL it waits
// (a little) for the command to end, so that it is gone from List and a
// second kill finds nothing.
func (s *processService) SendSignal(ctx context.Context, req *connect.Request[procpb.SendSignalRequest]) (*connect.Response[procpb.SendSignalResponse], error) {
	e := s.e
	var sig string
	switch req.Msg.GetSignal() {
	case procpb.Signal_SIGNAL_SIGKILL:
		sig = "SIGKILL"
	case procpb.Signal_SIGNAL_SIGTERM:
		sig = "SIGTERM"
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %v: SIGNAL_SIGKILL or SIGNAL_SIGTERM", req.Msg.GetSignal()))
	}
	p, err := e.reachable(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	if err := e.b.ExecSignal(ctx, sandboxID(ctx), p.execID, sig); err != nil {
		return nil, e.procErr(ctx, p, fmt.Errorf("signal process %d: %w", p.pid, err))
	}
	if sig == "SIGKILL" {
		t := time.NewTimer(killWait)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return connect.NewResponse(&procpb.SendSignalResponse{}), nil
}

// --- filesystem.Filesystem ---

type filesystemService struct{ e *envd }

var _ filesystemconnect.FilesystemHandler = (*filesystemService)(nil)

// entryInfo converts a forkbox directory entry; ok is false for types E2B
// has no name for (FIFOs, sockets, devices), which envd's clients skip.
func entryInfo(fi *api.FileInfo) (*fspb.EntryInfo, bool) {
	var typ fspb.FileType
	var mode os.FileMode
	switch fi.Type {
	case "file":
		typ = fspb.FileType_FILE_TYPE_FILE
	case "dir":
		typ, mode = fspb.FileType_FILE_TYPE_DIRECTORY, os.ModeDir
	case "symlink":
		typ, mode = fspb.FileType_FILE_TYPE_SYMLINK, os.ModeSymlink
	default:
		return nil, false
	}
	// forkbox's mode is the octal permission bits ("0644", "1777").
	bits, err := strconv.ParseUint(fi.Mode, 8, 32)
	if err != nil {
		bits = 0
	}
	mode |= os.FileMode(bits) & os.ModePerm
	if bits&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if bits&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if bits&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	ent := &fspb.EntryInfo{
		Name:        fi.Name,
		Type:        typ,
		Path:        fi.Path,
		Size:        fi.Size,
		Mode:        uint32(mode.Perm()),
		Permissions: mode.String(),
	}
	if !fi.ModifiedAt.IsZero() {
		ent.ModifiedTime = timestamppb.New(fi.ModifiedAt)
	}
	return ent, true
}

// stat describes p (absolute, clean) from its parent's listing; a symlink
// is described itself, not its target.
func (e *envd) stat(ctx context.Context, p string) (*fspb.EntryInfo, error) {
	id := sandboxID(ctx)
	if p == "/" {
		// No parent to list: check that the root answers, and describe
		// it as every image has it.
		if _, err := e.b.ListFiles(ctx, id, "/"); err != nil {
			return nil, err
		}
		return &fspb.EntryInfo{Name: "/", Type: fspb.FileType_FILE_TYPE_DIRECTORY, Path: "/",
			Mode: 0o755, Permissions: (os.ModeDir | 0o755).String()}, nil
	}
	dir, name := path.Split(p)
	list, err := e.b.ListFiles(ctx, id, path.Clean(dir))
	if err != nil {
		return nil, err
	}
	for i := range list.Entries {
		fi := &list.Entries[i]
		if fi.Name != name {
			continue
		}
		ent, ok := entryInfo(fi)
		if !ok {
			return nil, errdefs.InvalidArgument("%s is a %s, which E2B's file API does not describe", p, fi.Type)
		}
		ent.Path = p
		return ent, nil
	}
	return nil, errdefs.NotFound("path %s does not exist", p)
}

func (s *filesystemService) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	p, err := resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, s.e.rpcErr(ctx, err)
	}
	ent, err := s.e.stat(ctx, p)
	if err != nil {
		return nil, s.e.rpcErr(ctx, err)
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: ent}), nil
}

// ListDir lists a directory to the depth asked (1, its entries, when 0),
// depth first in name order like envd's filepath.WalkDir, not following
// symlinks below it. Subdirectories the user may not read are skipped.
func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	e := s.e
	p, err := resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	id := sandboxID(ctx)
	entries := []*fspb.EntryInfo{}
	var walk func(dir string, level int, top bool) error
	walk = func(dir string, level int, top bool) error {
		list, err := e.b.ListFiles(ctx, id, dir)
		if err != nil {
			if !top && (errors.Is(err, errdefs.ErrPermissionDenied) || errors.Is(err, errdefs.ErrNotFound)) {
				return nil // unreadable, or gone meanwhile
			}
			return fmt.Errorf("list %s: %w", dir, err)
		}
		sort.Slice(list.Entries, func(i, j int) bool { return list.Entries[i].Name < list.Entries[j].Name })
		for i := range list.Entries {
			fi := &list.Entries[i]
			ent, ok := entryInfo(fi)
			if !ok {
				continue
			}
			ent.Path = path.Join(dir, fi.Name)
			if len(entries) == maxListEntries {
				return errdefs.ResourceExhausted("listing %s to depth %d exceeds %d entries; ask for less depth", p, depth, maxListEntries)
			}
			entries = append(entries, ent)
			if ent.Type == fspb.FileType_FILE_TYPE_DIRECTORY && level < depth {
				if err := walk(ent.Path, level+1, false); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, 1, true); err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
}

// run runs a coreutils command of a filesystem operation in the sandbox, as
// its user, and maps a failure to an error kind from its message.
func (e *envd) run(ctx context.Context, cmd string, args ...string) error {
	res, err := e.b.Exec(ctx, sandboxID(ctx), &api.ExecRequest{
		Cmd: cmd, Args: args, Cwd: "/", Env: map[string]string{"LC_ALL": "C"},
	}, sandbox.ExecOptions{})
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	if res.ExitCode == 0 && res.Signal == "" {
		return nil
	}
	msg := strings.TrimSpace(res.Stderr)
	if msg == "" {
		msg = res.Error
	}
	if msg == "" {
		msg = endEvent(res).Status
	}
	switch {
	case res.ExitCode == 126 || res.ExitCode == 127:
		return errdefs.Unavailable("the sandbox cannot run %s: %s", cmd, msg)
	case strings.Contains(msg, "No such file or directory"):
		return errdefs.NotFound("%s", msg)
	case strings.Contains(msg, "Permission denied"), strings.Contains(msg, "Operation not permitted"),
		strings.Contains(msg, "Read-only file system"):
		return errdefs.PermissionDenied("%s", msg)
	case strings.Contains(msg, "No space left"), strings.Contains(msg, "quota exceeded"):
		return errdefs.ResourceExhausted("%s", msg)
	case strings.Contains(msg, "Not a directory"), strings.Contains(msg, "File exists"),
		strings.Contains(msg, "Is a directory"), strings.Contains(msg, "cannot overwrite"),
		strings.Contains(msg, "Directory not empty"), strings.Contains(msg, "cannot move"):
		return errdefs.InvalidArgument("%s", msg)
	}
	return fmt.Errorf("%s failed: %s", cmd, msg)
}

// MakeDir creates a directory and its parents: already_exists when it is
// there, invalid_argument when something else is.
func (s *filesystemService) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	e := s.e
	p, err := resolveTarget("path", req.Msg.GetPath())
	if err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	ent, err := e.stat(ctx, p)
	switch {
	case err == nil && ent.Type == fspb.FileType_FILE_TYPE_DIRECTORY:
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
	case err == nil:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", p))
	case !errors.Is(err, errdefs.ErrNotFound):
		return nil, e.rpcErr(ctx, fmt.Errorf("stat %s: %w", p, err))
	}
	if err := e.run(ctx, "/bin/mkdir", "-p", "--", p); err != nil {
		return nil, e.rpcErr(ctx, fmt.Errorf("make directory %s: %w", p, err))
	}
	if ent, err = e.stat(ctx, p); err != nil {
		// Made, but not described (a race with a remove, say): what envd
		// itself answers.
		ent = &fspb.EntryInfo{Name: path.Base(p), Type: fspb.FileType_FILE_TYPE_DIRECTORY, Path: p}
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: ent}), nil
}

// Move renames source to destination (replacing a file there), creating
// the destination's parents, like envd's os.Rename after EnsureDirs.
func (s *filesystemService) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	e := s.e
	src, err := resolveTarget("source", req.Msg.GetSource())
	if err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	dst, err := resolveTarget("destination", req.Msg.GetDestination())
	if err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	if src == "/" || dst == "/" {
		return nil, e.rpcErr(ctx, errdefs.InvalidArgument("cannot move / or onto it"))
	}
	if _, err := e.stat(ctx, src); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("source file not found: %s", src))
		}
		return nil, e.rpcErr(ctx, fmt.Errorf("stat %s: %w", src, err))
	}
	if parent := path.Dir(dst); parent != "/" {
		if err := e.run(ctx, "/bin/mkdir", "-p", "--", parent); err != nil {
			return nil, e.rpcErr(ctx, fmt.Errorf("make directory %s: %w", parent, err))
		}
	}
	if err := e.run(ctx, "/bin/mv", "-T", "--", src, dst); err != nil {
		return nil, e.rpcErr(ctx, fmt.Errorf("move %s to %s: %w", src, dst, err))
	}
	ent, err := e.stat(ctx, dst)
	if err != nil {
		return nil, e.rpcErr(ctx, fmt.Errorf("stat %s: %w", dst, err))
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: ent}), nil
}

// Remove removes a file or a directory with its contents; a path that does
// not exist is no error (envd's os.RemoveAll).
func (s *filesystemService) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	e := s.e
	p, err := resolveTarget("path", req.Msg.GetPath())
	if err != nil {
		return nil, e.rpcErr(ctx, err)
	}
	if err := e.b.RemoveFile(ctx, sandboxID(ctx), p, true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, e.rpcErr(ctx, fmt.Errorf("remove %s: %w", p, err))
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	return s.e.watchDir(ctx, req, stream)
}

func (s *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	return s.e.createWatcher(ctx, req)
}

func (s *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	return s.e.getWatcherEvents(ctx, req)
}

func (s *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	return s.e.removeWatcher(ctx, req)
}
