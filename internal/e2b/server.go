package e2b

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/tenant"
)

// Manager is all the E2B layer needs of forkbox; *sandbox.Manager has it.
type Manager interface {
	Controls
	Code
	Backend
	E2BAuthorize(ctx context.Context, id, token string, traffic bool) (owner string, state api.SandboxState, ok bool)
}

// Server serves E2B's control plane and its sandboxes' data plane.
type Server struct {
	m       Manager
	log     *slog.Logger
	control *control
	jupyter *jupyter
	envd    http.Handler
}

// New returns the E2B API over m.
func New(m Manager, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{m: m, log: log, control: newControl(m, log), jupyter: newJupyter(m, log), envd: newEnvd(m, log)}
}

// ServeControl serves a control-plane request (IsControlPlane) whose key
// the caller has checked: its principal is in the request's context.
func (s *Server) ServeControl(w http.ResponseWriter, r *http.Request) {
	s.control.mux.ServeHTTP(w, r)
}

// ServeData serves a data-plane request (IsDataPlane): it finds the
// sandbox the E2b-Sandbox-Id header names, checks the request's token
// against the sandbox's (X-Access-Token for envd; for the code interpreter
// E2B-Traffic-Access-Token or X-Access-Token), and hands it to envd or the
// code interpreter by E2b-Sandbox-Port, acting as the sandbox's tenant.
func (s *Server) ServeData(w http.ResponseWriter, r *http.Request) {
	id, port := r.Header.Get(hdrSandboxID), r.Header.Get(hdrSandboxPort)
	traffic := port == JupyterPort
	token := r.Header.Get(hdrAccessToken)
	if traffic && token == "" {
		token = r.Header.Get(hdrTrafficToken)
	}
	owner, state, ok := s.m.E2BAuthorize(r.Context(), id, token, traffic)
	if !ok && traffic {
		if t := r.Header.Get(hdrTrafficToken); t != "" && t != token {
			owner, state, ok = s.m.E2BAuthorize(r.Context(), id, t, true)
		}
	}
	if !ok {
		// An unknown sandbox and a wrong token answer alike.
		writeJSON(w, http.StatusUnauthorized, map[string]any{"code": http.StatusUnauthorized,
			"message": "unknown sandbox or wrong access token: send the envdAccessToken of the create or connect answer as X-Access-Token"})
		return
	}
	if state.Ended() {
		// The SDKs read 502 as "the sandbox timed out (is gone)".
		writeJSON(w, http.StatusBadGateway, map[string]any{"code": http.StatusBadGateway, "message": "sandbox " + id + " is " + string(state)})
		return
	}
	ctx := tenant.With(r.Context(), tenant.Principal{Tenant: owner, KeyID: "e2b-token", Via: "e2b"})
	r = r.WithContext(withSandbox(ctx, id))
	switch port {
	case EnvdPort:
		s.envd.ServeHTTP(w, r)
	case JupyterPort:
		s.jupyter.mux.ServeHTTP(w, r)
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"code": http.StatusNotFound,
			"message": "E2b-Sandbox-Port " + port + ": forkbox serves envd (49983) and the code interpreter (49999); other ports are at /v1/sandboxes/{id}/ports/{port}/"})
	}
}
