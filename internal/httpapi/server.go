// Package httpapi serves forkbox's HTTP API (v1; conventions in docs/API.md): REST + SSE
// handlers over a sandbox.Manager, bearer-key auth, request size limits,
// Prometheus metrics and the OpenAPI document. Errors are written in one
// place (writeError) from the errdefs kind of the error.
package httpapi

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/analyst"
	"github.com/forkbox/forkbox/internal/e2b"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/jupyter"
	"github.com/forkbox/forkbox/internal/mcpserver"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
	"github.com/forkbox/forkbox/web"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed openapi.json
var openapiJSON []byte

// OpenAPI returns the embedded OpenAPI document.
func OpenAPI() []byte { return openapiJSON }

// Config configures the API server.
type Config struct {
	// APIKey, when set, is required as a bearer token on every call except
	// /healthz (or a tenant's key from Access); it is the default tenant's
	// admin key.
	APIKey string
	// Access keeps tenants' keys and quotas and the audit log (nil: only
	// APIKey, no audit log).
	Access store.AccessStore
	// MaxJSONBytes bounds JSON request bodies (default 1 MiB).
	MaxJSONBytes int64
	// MaxUploadBytes bounds file uploads (default 1 GiB).
	MaxUploadBytes int64
	// MaxImageArchiveBytes bounds an image archive to import, and a build
	// context, as sent (before any decompression; default
	// image.DefaultBounds.ArchiveBytes, 4 GiB). What they expand to is
	// the image store's to bound (image.Bounds).
	MaxImageArchiveBytes int64
	// Chat serves /v1/chat, conversations and uploads; nil: those answer 503.
	Chat *analyst.Service
	// PortsDomain, when set, also routes requests for host names
	// <port>-<sandbox>.<PortsDomain> to that port of that sandbox (see
	// ports.go), for apps that need to be served at "/".
	PortsDomain string
	// Cluster, when the daemon is a node of a cluster, forwards calls for
	// other nodes' sandboxes there and places creates (nil: a single
	// daemon).
	Cluster Cluster
	// The HTTP server's edges (edges.go; zero: the Default… values).
	// IdleTimeout closes a keep-alive connection that waits that long for
	// its next request; HeaderTimeout bounds the reading of a request's
	// header; a body must arrive at BodyMinRate bytes/s after a grace of
	// BodyTimeout; MaxConns caps the connections served at once (0: no cap).
	IdleTimeout   time.Duration
	HeaderTimeout time.Duration
	BodyTimeout   time.Duration
	BodyMinRate   int64
	MaxConns      int
	Logger        *slog.Logger
}

// Cluster is what the API needs of the daemon's node (package cluster).
type Cluster interface {
	// Route forwards r to the node it belongs to and reports whether it
	// did; an error is the answer to r.
	Route(w http.ResponseWriter, r *http.Request) (bool, error)
	// RouteSandbox is Route for a call about sandbox ref (E2B's, which
	// name it in a header or in their own paths).
	RouteSandbox(w http.ResponseWriter, r *http.Request, ref string) (bool, error)
	Nodes(ctx context.Context) ([]api.Node, error)
}

// credentials are the headers a caller authenticated with, kept in its
// request's context so that the calls MCP makes in-process for it can be
// forwarded to another node of a cluster as the same caller.
type credentials struct{ authorization, actAs string }

type credentialsKey struct{}

func withCredentials(ctx context.Context, r *http.Request) context.Context {
	return context.WithValue(ctx, credentialsKey{}, credentials{r.Header.Get("Authorization"), r.Header.Get(actAsHeader)})
}

// routed serves r through the cluster's forwarding (when the daemon is a
// node), then the mux.
func (s *Server) routed(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Cluster != nil {
		handled, err := s.cfg.Cluster.Route(w, r)
		if err != nil {
			writeError(w, err)
			s.requests.WithLabelValues("cluster", strconv.Itoa(errStatus(err))).Inc()
			return
		}
		if handled {
			s.requests.WithLabelValues("forwarded", "").Inc()
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// routedSandbox forwards a call about sandbox ref to its node (when it is
// another's) and reports whether it did; an error is written as E2B's.
func (s *Server) routedSandbox(w http.ResponseWriter, r *http.Request, ref string) bool {
	if s.cfg.Cluster == nil {
		return false
	}
	handled, err := s.cfg.Cluster.RouteSandbox(w, r, ref)
	if err != nil {
		status := errStatus(err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"code": status, "message": err.Error()})
		return true
	}
	if handled {
		s.requests.WithLabelValues("forwarded", "").Inc()
	}
	return handled
}

// Server is the HTTP API.
type Server struct {
	cfg      Config
	mgr      *sandbox.Manager
	log      *slog.Logger
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	panics   prometheus.Counter
	mux      *http.ServeMux
	// hostProxy serves PortsDomain's host names.
	hostProxy http.Handler
	audit     *auditLog
	// e2b serves E2B's API for E2B's SDKs (internal/e2b).
	e2b *e2b.Server
	// jupyter serves Jupyter Server's kernel API under /jupyter
	// (internal/jupyter).
	jupyter *jupyter.Gateway
}

// New builds the API server over mgr.
func New(cfg Config, mgr *sandbox.Manager) (*Server, error) {
	if cfg.MaxJSONBytes == 0 {
		cfg.MaxJSONBytes = 1 << 20
	}
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = 1 << 30
	}
	if cfg.MaxImageArchiveBytes <= 0 {
		cfg.MaxImageArchiveBytes = image.DefaultBounds.ArchiveBytes
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.BodyMinRate <= 0 {
		cfg.BodyMinRate = DefaultBodyMinRate
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, mgr: mgr, log: cfg.Logger, reg: prometheus.NewRegistry(), mux: http.NewServeMux()}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forkbox_http_requests_total", Help: "HTTP requests by route and status code.",
	}, []string{"route", "code"})
	s.panics = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "forkbox_http_panics_total", Help: "Panics recovered in request handlers (each one a bug, logged with its stack).",
	})
	s.reg.MustRegister(s.requests, s.panics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := mgr.Register(s.reg); err != nil {
		return nil, err
	}
	if cfg.Access != nil {
		s.reg.MustRegister(&tenantCollector{s: s})
	}
	s.audit = newAuditLog(cfg.Access, s.log)
	s.e2b = e2b.New(mgr, s.log)
	s.jupyter = jupyter.New(mgr, s.log)
	s.routes()
	s.hostProxy = s.instrument("<port>-<sandbox>.ports-domain", s.proxyHost)
	return s, nil
}

func (s *Server) routes() {
	h := func(pattern string, f func(http.ResponseWriter, *http.Request) error) {
		s.mux.Handle(pattern, s.instrument(pattern, f))
	}
	h("GET /healthz", s.health)
	// Metrics name every tenant: an admin's.
	metrics := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
	s.mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := requireAdmin(r.Context()); err != nil {
			writeError(w, err)
			return
		}
		metrics.ServeHTTP(w, r)
	}))
	h("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openapiJSON)
		return nil
	})
	h("POST /v1/keys", s.createKey)
	h("GET /v1/keys", s.listKeys)
	h("DELETE /v1/keys/{id}", s.revokeKey)
	h("GET /v1/tenants", s.listTenants)
	h("GET /v1/tenants/{tenant}", s.getTenant)
	h("PUT /v1/tenants/{tenant}", s.setTenant)
	h("GET /v1/usage", s.usage)
	h("GET /v1/audit", s.listAudit)
	h("GET /v1/nodes", s.listNodes)
	h("POST /v1/sandboxes", s.createSandbox)
	h("GET /v1/sandboxes", s.listSandboxes)
	h("GET /v1/sandboxes/{sandbox}", s.getSandbox)
	h("PATCH /v1/sandboxes/{sandbox}", s.updateSandbox)
	h("DELETE /v1/sandboxes/{sandbox}", s.deleteSandbox)
	h("GET /v1/sandboxes/{sandbox}/ports", s.listPorts)
	h("GET /v1/sandboxes/{sandbox}/ports/{port}", s.portCall(s.mgr.Port))
	h("PUT /v1/sandboxes/{sandbox}/ports/{port}", s.updatePort)
	h("DELETE /v1/sandboxes/{sandbox}/ports/{port}", s.portCall(s.mgr.RevokePort))
	h("/v1/sandboxes/{sandbox}/ports/{port}/{path...}", s.proxyPort)
	h("POST /v1/sandboxes/{sandbox}/exec", s.exec)
	h("GET /v1/sandboxes/{sandbox}/files", s.readFile)
	h("PUT /v1/sandboxes/{sandbox}/files", s.writeFile)
	h("DELETE /v1/sandboxes/{sandbox}/files", s.removeFile)
	h("GET /v1/sandboxes/{sandbox}/files/list", s.listFiles)
	h("POST /v1/sandboxes/{sandbox}/code", s.runCode)
	h("GET /v1/sandboxes/{sandbox}/cells", s.listCells)
	h("GET /v1/sandboxes/{sandbox}/notebook", s.sandboxNotebook)
	h("POST /v1/sandboxes/{sandbox}/notebook", s.runNotebook)
	h("POST /v1/sandboxes/{sandbox}/checkpoint", s.checkpoint)
	h("POST /v1/sandboxes/{sandbox}/fork", s.fork)
	h("POST /v1/sandboxes/{sandbox}/suspend", s.suspend)
	h("POST /v1/sandboxes/{sandbox}/resume", s.resume)
	h("POST /v1/pools", s.createPool)
	h("GET /v1/pools", s.listPools)
	h("DELETE /v1/pools/{name}", s.deletePool)
	h("GET /v1/snapshots", s.listSnapshots)
	h("GET /v1/snapshots/{id}", s.getSnapshot)
	h("DELETE /v1/snapshots/{id}", s.deleteSnapshot)
	h("POST /v1/images", s.createImage)
	h("GET /v1/images", s.listImages)
	h("GET /v1/images/{name}", s.getImage)
	h("DELETE /v1/images/{name}", s.deleteImage)
	h("POST /v1/chat", s.chat)
	h("POST /v1/conversations", s.createConversation)
	h("GET /v1/conversations", s.listConversations)
	h("GET /v1/conversations/{id}", s.getConversation)
	h("DELETE /v1/conversations/{id}", s.deleteConversation)
	h("GET /v1/conversations/{id}/notebook", s.conversationNotebook)
	h("POST /v1/files", s.uploadFile)
	h("GET /v1/files/{id}", s.getUpload)
	h("POST /v1/sandboxes/{sandbox}/contexts", s.createContext)
	h("GET /v1/sandboxes/{sandbox}/contexts", s.listContexts)
	h("DELETE /v1/sandboxes/{sandbox}/contexts/{id}", s.contextAction(sandbox.ContextDelete))
	h("POST /v1/sandboxes/{sandbox}/contexts/{id}/interrupt", s.contextAction(sandbox.ContextInterrupt))
	h("POST /v1/sandboxes/{sandbox}/contexts/{id}/restart", s.contextAction(sandbox.ContextRestart))
	// Jupyter Server's kernel API, for notebook servers (--gateway-url)
	// and Jupyter clients.
	h("GET /jupyter/api/kernelspecs", s.jupyter.Kernelspecs)
	h("GET /jupyter/api/kernelspecs/{name}", s.jupyter.Kernelspec)
	h("GET /jupyter/kernelspecs/{name}/{file}", s.jupyter.KernelspecResource)
	h("GET /jupyter/api/kernels", s.jupyter.ListKernels)
	h("POST /jupyter/api/kernels", s.jupyter.StartKernel)
	h("GET /jupyter/api/kernels/{id}", s.jupyter.GetKernel)
	h("DELETE /jupyter/api/kernels/{id}", s.jupyter.DeleteKernel)
	h("POST /jupyter/api/kernels/{id}/interrupt", s.jupyter.InterruptKernel)
	h("POST /jupyter/api/kernels/{id}/restart", s.jupyter.RestartKernel)
	h("GET /jupyter/api/kernels/{id}/channels", s.jupyter.Channels)
	h("GET /jupyter/api/sessions", s.jupyter.ListSessions)
	h("POST /jupyter/api/sessions", s.jupyter.CreateSession)
	h("GET /jupyter/api/sessions/{id}", s.jupyter.GetSession)
	h("PATCH /jupyter/api/sessions/{id}", s.jupyter.UpdateSession)
	h("DELETE /jupyter/api/sessions/{id}", s.jupyter.DeleteSession)
	// MCP over streamable HTTP; its tools call this mux in-process, with
	// the same panic recovery as HTTP requests, as the caller of /mcp
	// (whose principal their context carries; none: refused).
	mcp := mcpserver.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := tenant.From(r.Context())
		if !ok {
			writeError(w, errdefs.Unauthenticated("an in-process call without a caller"))
			return
		}
		p.Via = "mcp"
		// As the caller of /mcp, should the call go to another node.
		if c, ok := r.Context().Value(credentialsKey{}).(credentials); ok {
			r.Header.Set("Authorization", c.authorization)
			if c.actAs != "" {
				r.Header.Set(actAsHeader, c.actAs)
			}
		}
		s.serve(w, r.WithContext(tenant.With(r.Context(), p)), http.HandlerFunc(s.routed))
	}))
	h("/mcp", func(w http.ResponseWriter, r *http.Request) error { return serveMCP(mcp, w, r) })
	// The web UI: index.html at /, its files under /ui/.
	ui := web.Handler()
	s.mux.Handle("GET /{$}", ui)
	s.mux.Handle("GET /ui/", ui)
	h("/", func(w http.ResponseWriter, r *http.Request) error {
		return errdefs.NotFound("no route for %s %s", r.Method, r.URL.Path)
	})
}

// listNodes answers GET /v1/nodes: the cluster's nodes (none on a single
// daemon).
func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) error {
	out := api.NodeList{Nodes: []api.Node{}}
	if s.cfg.Cluster != nil {
		list, err := s.cfg.Cluster.Nodes(r.Context())
		if err != nil {
			return err
		}
		out.Nodes = list
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// health answers GET /healthz: the daemon is up (always 200 "ok"), with
// whether its own images are built yet and whether the chat has a model.
func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	h := api.Health{Status: "ok", Images: s.mgr.ImageReadiness(), Recovering: s.mgr.Recovering()}
	if s.cfg.Chat != nil {
		ready, why := s.cfg.Chat.Ready()
		h.Chat = &api.ChatReadiness{Ready: ready, Why: why}
	}
	writeJSON(w, http.StatusOK, h)
	return nil
}

// Handler returns the API with request ids, panic recovery and
// authentication in front.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Every body but a port's and E2B's data plane's (streams of
			// their own) is read under the edge's rate, and read on when
			// its handler left some of it: refused, unauthenticated, or
			// answered before it was read (bodies.go).
			if !hasBody(r) {
				s.dispatch(w, r)
				return
			}
			if s.streamedBody(r) {
				s.dispatch(w, r)
				boundLeftover(w, s.cfg.BodyTimeout)
				return
			}
			g := s.guardBody(w, r.Body)
			r = withBody(r, g)
			s.dispatch(w, r)
			lingerOnUnread(w, r, g)
		}))
	})
}

// dispatch serves r: a port's host name, E2B's API, or forkbox's API behind
// its key.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	t, err := s.portHost(r)
	if err != nil {
		writeError(w, err)
		s.requests.WithLabelValues("<port>-<sandbox>.ports-domain", strconv.Itoa(errStatus(err))).Inc()
		return
	}
	if t != nil {
		if s.routedSandbox(w, r, t.ref) {
			return // its node checks key, token or public
		}
		s.hostProxy.ServeHTTP(w, r) // checks key, token or public itself
		return
	}
	// E2B's API: its data plane by header first (its /metrics is
	// not forkbox's), then its control plane by path.
	if e2b.IsDataPlane(r) {
		if s.routedSandbox(w, r, e2b.DataPlaneSandbox(r)) {
			return // its node checks the token
		}
		s.e2b.ServeData(w, r) // checks the sandbox's token itself
		s.requests.WithLabelValues("e2b-data", "").Inc()
		return
	}
	if e2b.IsControlPlane(r) {
		s.serveE2BControl(w, r)
		return
	}
	// Dot segments under a port stay under it (the router would
	// redirect them out of it).
	if r, err = cleanPortPath(r); err != nil {
		writeError(w, err)
		s.requests.WithLabelValues("/v1/sandboxes/{sandbox}/ports/{port}/{path...}", strconv.Itoa(errStatus(err))).Inc()
		return
	}
	// The UI's files are public (they hold no secret; the page asks
	// for the key), everything else needs a key.
	// A sandbox's exposed port also takes its own token
	// (proxyPort checks).
	if r.URL.Path != "/healthz" && !web.Public(r) && !portProxyRE.MatchString(r.URL.Path) {
		p, err := s.authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="forkbox"`)
			writeError(w, err)
			s.requests.WithLabelValues("auth", strconv.Itoa(errStatus(err))).Inc()
			return
		}
		r = r.WithContext(withCredentials(tenant.With(r.Context(), p), r))
	}
	s.routed(w, r)
}

// requestIDHeader carries a request's id both ways: a client may choose it
// (to find its request in the log), else the daemon makes one.
const requestIDHeader = "X-Request-Id"

type ridKey struct{}

// RequestID returns the id of the request ctx belongs to ("" outside one).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(ridKey{}).(string)
	return id
}

// requestID is the client's X-Request-Id when it is a short plain token,
// else a new random one.
func requestID(r *http.Request) string {
	if id := r.Header.Get(requestIDHeader); len(id) > 0 && len(id) <= 64 && strings.Trim(id,
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == "" {
		return id
	}
	var b [8]byte
	rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// serve runs h for one request with an id and panic recovery: a panic in a
// handler becomes a 500 carrying the request id (its stack goes to the log
// under the same id), or, when the answer had already started, an error
// event on an event stream or a cut connection on anything else, so a
// client never takes a truncated answer for a whole one. Every lock, temp
// dir and reservation a handler took is released by its own deferred
// cleanups as the panic unwinds through them.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, h http.Handler) {
	rid := RequestID(r.Context())
	if rid == "" { // the in-process MCP client's requests come with the id of their /mcp request
		rid = requestID(r)
		r = r.WithContext(context.WithValue(r.Context(), ridKey{}, rid))
	}
	w.Header().Set(requestIDHeader, rid)
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if p == http.ErrAbortHandler {
			panic(p)
		}
		s.panics.Inc()
		s.log.Error("panic in request handler", "request_id", rid, "method", r.Method, "path", r.URL.Path,
			"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		err := fmt.Errorf("internal error (request %s): the daemon hit a bug handling %s %s; it has been logged", rid, r.Method, r.URL.Path)
		switch {
		case sw.code == 0:
			writeError(sw, err)
		case strings.HasPrefix(sw.Header().Get("Content-Type"), "text/event-stream"):
			(&sse{w: sw, f: sw}).send(api.EventError, api.ErrorBody{Code: "internal", Message: err.Error(), RequestID: rid})
		default:
			panic(http.ErrAbortHandler)
		}
	}()
	h.ServeHTTP(sw, r)
}

// statusWriter remembers the status code for metrics and logs.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) instrument(route string, f func(http.ResponseWriter, *http.Request) error) http.Handler {
	// A port's proxy forwards its bodies as they come, whatever their pace
	// (they are the app's); every other body is read under the edge's
	// rate (bodyGuard).
	proxied := strings.Contains(route, "/ports/{port}/") || strings.Contains(route, "ports-domain")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body *bodyGuard
		if !proxied && hasBody(r) {
			// Handler guarded it; a request MCP's tools make in-process
			// comes here first.
			if body, _ = r.Body.(*bodyGuard); body == nil {
				body = s.guardBody(w, r.Body)
				r = withBody(r, body)
			}
			// Handlers of these methods read no body; one sent anyway is
			// read first, so that the connection is not reset under a
			// long answer by the unread bytes when it closes.
			if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodDelete {
				body.drain()
			}
		}
		sw := &statusWriter{ResponseWriter: w}
		start := time.Now()
		audit := audited(r.Method, route)
		res := &resourceBox{}
		if audit {
			r = r.WithContext(context.WithValue(r.Context(), resourceKey{}, res))
		}
		err := f(sw, r)
		clientGone := err != nil && r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
		if err != nil {
			if clientGone && sw.code == 0 {
				// The client went away and took the call with it: no one
				// reads an answer, and nothing failed on this side.
				sw.code = statusClientClosed
			} else if sw.code == 0 {
				writeError(sw, err)
			} else {
				s.log.Warn("error after response started", "route", route, "err", err)
			}
		}
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		// A body refused for its size, or before it was read, is read on
		// (at the edge's rate, up to a bound) and dropped, so that a client
		// still sending it gets the answer rather than a reset connection.
		lingerOnUnread(sw, r, body)
		s.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		if audit {
			s.record(r, route, res.v, code, err)
		}
		lvl := slog.LevelDebug
		if code >= 500 {
			lvl = slog.LevelError
		}
		s.log.Log(r.Context(), lvl, "http", "request_id", RequestID(r.Context()), "method", r.Method, "path", r.URL.Path,
			"code", code, "ms", time.Since(start).Milliseconds(), "err", err)
	})
}

// statusClientClosed is the status recorded (never sent) for a call whose
// client went away before its answer: nginx's 499.
const statusClientClosed = 499

func errStatus(err error) int {
	st, _ := errdefs.HTTPStatus(err)
	return st
}

// record puts one call in the audit log.
func (s *Server) record(r *http.Request, route, resource string, code int, err error) {
	p, _ := tenant.From(r.Context())
	if resource == "" {
		resource = resourceOf(r)
	}
	outcome := "ok"
	if err != nil {
		_, outcome = errdefs.HTTPStatus(err)
	} else if code >= 400 {
		outcome = strings.ToLower(strings.ReplaceAll(http.StatusText(code), " ", "_"))
	}
	s.audit.add(api.AuditEntry{At: time.Now().UTC(), KeyID: p.KeyID, Tenant: p.Tenant, Action: route, Resource: resource,
		Status: code, Outcome: outcome, RequestID: RequestID(r.Context()), Via: p.Via})
}

// Close writes out the audit log's last entries and stops its writer.
func (s *Server) Close() { s.audit.close() }

// writeError is the one place where an error becomes an HTTP answer.
func writeError(w http.ResponseWriter, err error) {
	status, code := errdefs.HTTPStatus(err)
	msg := err.Error()
	if status == http.StatusInternalServerError && msg == "" {
		msg = "internal error"
	}
	body := api.ErrorBody{Code: code, Message: msg, RequestID: w.Header().Get(requestIDHeader)}
	if d := errdefs.RetryAfterOf(err); d > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, d.Round(time.Second)/time.Second))))
	}
	var qe *sandbox.QuotaError
	if errors.As(err, &qe) {
		body.Quota = &qe.QuotaExceeded
	}
	writeJSON(w, status, api.Error{Error: body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// decodeJSON reads a JSON body strictly: unknown fields, trailing data,
// wrong types and oversized bodies are client errors that name the problem.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	return s.decodeJSONLimit(w, r, v, s.cfg.MaxJSONBytes)
}

// decodeJSONLimit is decodeJSON with a body limit of its own (a chat
// question may carry a whole CSV).
func (s *Server) decodeJSONLimit(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	if r.ContentLength > limit {
		// Said up front: refused before any of it is read.
		return errdefs.TooLarge("request body is larger than %d bytes", limit)
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			return errdefs.InvalidArgument("malformed JSON: unexpected data after the object")
		}
		return nil
	}
	var (
		maxErr  *http.MaxBytesError
		synErr  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
	)
	switch {
	case hasKind(err):
		return err // the body's own reason (it came too slowly)
	case errors.As(err, &maxErr):
		return errdefs.TooLarge("request body is larger than %d bytes", maxErr.Limit)
	case errors.Is(err, io.EOF):
		return errdefs.InvalidArgument("malformed JSON: empty body")
	case errors.As(err, &synErr), errors.Is(err, io.ErrUnexpectedEOF):
		return errdefs.InvalidArgument("malformed JSON: %v", err)
	case errors.As(err, &typeErr):
		return errdefs.InvalidArgument("%s: expected %s, got JSON %s", typeErr.Field, typeErr.Type, typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return errdefs.InvalidArgument("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return errdefs.InvalidArgument("malformed JSON: %v", err)
}

func wantsSSE(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// sse writes Server-Sent Events.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	s := &sse{w: w, f: f}
	s.flush()
	return s
}

func (s *sse) flush() {
	if s.f != nil {
		s.f.Flush()
	}
}

// send writes one event whose data is v as JSON (one line).
func (s *sse) send(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	s.flush()
	return nil
}

// lazySSE opens the event stream at the first event, so that a call refused
// before anything happened still answers with a plain error and status.
type lazySSE struct {
	w      http.ResponseWriter
	mu     sync.Mutex
	stream *sse
}

func (l *lazySSE) emit(event string, v any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stream == nil {
		l.stream = newSSE(l.w)
	}
	l.stream.send(event, v)
}

// fail ends a call that failed: as the answer if no event was sent yet, else
// as a last event of the stream (named event).
func (l *lazySSE) fail(event string, err error) error {
	l.mu.Lock()
	started := l.stream != nil
	l.mu.Unlock()
	if !started {
		return err
	}
	_, code := errdefs.HTTPStatus(err)
	l.emit(event, api.ErrorBody{Code: code, Message: err.Error(), RequestID: l.w.Header().Get(requestIDHeader)})
	return nil
}
