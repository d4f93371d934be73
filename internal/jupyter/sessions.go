package jupyter

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/tenant"
)

// A session ties a notebook (its path) to a kernel, as Jupyter Server's
// sessions API does. A notebook server in gateway mode keeps its sessions
// itself; these serve clients that speak the API to forkbox directly. They
// live in the daemon's memory: a restart forgets them, not their kernels.

type session struct {
	id       string
	tenant   string
	path     string
	name     string
	typ      string
	kernelID string
}

type sessionModel struct {
	ID       string        `json:"id"`
	Path     string        `json:"path"`
	Name     string        `json:"name"`
	Type     string        `json:"type"`
	Kernel   kernelModel   `json:"kernel"`
	Notebook notebookModel `json:"notebook"`
}

type notebookModel struct {
	Path string `json:"path"`
	Name string `json:"name"`
}

// sessionRequest is the body of POST and PATCH /api/sessions.
// sessionKernel is the kernel a session request names: an existing one by
// id, or a new one of a kernelspec by name.
type sessionKernel struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type sessionRequest struct {
	Path   *string        `json:"path"`
	Name   *string        `json:"name"`
	Type   *string        `json:"type"`
	Kernel *sessionKernel `json:"kernel"`
	// Older clients name the path here.
	Notebook *struct {
		Path string `json:"path"`
	} `json:"notebook"`
}

// maxSessionsPerTenant bounds what one tenant keeps in the daemon's memory.
const maxSessionsPerTenant = 1000

func (g *Gateway) sessionModel(ctx context.Context, s *session) (sessionModel, bool) {
	k, _, err := g.kernelFor(ctx, s.kernelID)
	if err != nil {
		return sessionModel{}, false
	}
	return sessionModel{ID: s.id, Path: s.path, Name: s.name, Type: s.typ, Kernel: k.model(),
		Notebook: notebookModel{Path: s.path, Name: s.name}}, true
}

// sessionFor finds the caller's session id.
func (g *Gateway) sessionFor(ctx context.Context, id string) (*session, error) {
	g.mu.Lock()
	s := g.sessions[id]
	g.mu.Unlock()
	if s == nil || s.tenant != tenant.Of(ctx) {
		return nil, errdefs.NotFound("session %q not found", id)
	}
	return s, nil
}

// ListSessions answers GET /api/sessions.
func (g *Gateway) ListSessions(w http.ResponseWriter, r *http.Request) error {
	who := tenant.Of(r.Context())
	g.mu.Lock()
	var list []*session
	for _, s := range g.sessions {
		if s.tenant == who {
			list = append(list, s)
		}
	}
	g.mu.Unlock()
	slices.SortFunc(list, func(a, b *session) int { return strings.Compare(a.id, b.id) })
	out := []sessionModel{}
	for _, s := range list {
		if m, ok := g.sessionModel(r.Context(), s); ok {
			out = append(out, m)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// GetSession answers GET /api/sessions/{id}.
func (g *Gateway) GetSession(w http.ResponseWriter, r *http.Request) error {
	s, err := g.sessionFor(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	m, ok := g.sessionModel(r.Context(), s)
	if !ok {
		return errdefs.NotFound("session %q not found: its kernel is gone", s.id)
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

// CreateSession answers POST /api/sessions: a session for the path with the
// kernel named by id, or a new kernel of the kernelspec named. A path that
// has a session already gets that one, as in Jupyter Server.
func (g *Gateway) CreateSession(w http.ResponseWriter, r *http.Request) error {
	var req sessionRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	ctx := r.Context()
	s := &session{id: uuid.NewString(), tenant: tenant.Of(ctx), typ: "notebook"}
	if req.Path != nil {
		s.path = *req.Path
	} else if req.Notebook != nil {
		s.path = req.Notebook.Path
	}
	if req.Name != nil {
		s.name = *req.Name
	}
	if req.Type != nil {
		s.typ = *req.Type
	}
	if s.path != "" {
		g.mu.Lock()
		var same *session
		n := 0
		for _, o := range g.sessions {
			if o.tenant == s.tenant {
				n++
				if o.path == s.path {
					same = o
				}
			}
		}
		g.mu.Unlock()
		if same != nil {
			if m, ok := g.sessionModel(ctx, same); ok {
				writeJSON(w, http.StatusCreated, m)
				return nil
			}
		}
		if n >= maxSessionsPerTenant {
			return errdefs.ResourceExhausted("at most %d sessions per tenant", maxSessionsPerTenant)
		}
	}
	kernelID, err := g.sessionKernel(ctx, req.Kernel, true)
	if err != nil {
		return err
	}
	s.kernelID = kernelID
	g.mu.Lock()
	g.sessions[s.id] = s
	g.mu.Unlock()
	m, ok := g.sessionModel(ctx, s)
	if !ok {
		return errdefs.NotFound("kernel %q of the new session is gone", s.kernelID)
	}
	writeJSON(w, http.StatusCreated, m)
	return nil
}

// UpdateSession answers PATCH /api/sessions/{id}: a new path, name, type,
// or kernel (an existing one by id, or a new one of a kernelspec; the old
// kernel is shut down when no other session uses it, as in Jupyter Server).
func (g *Gateway) UpdateSession(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	s, err := g.sessionFor(ctx, r.PathValue("id"))
	if err != nil {
		return err
	}
	var req sessionRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	old := ""
	if next, err := g.sessionKernel(ctx, req.Kernel, false); err != nil {
		return err
	} else if next != "" {
		old, s.kernelID = s.kernelID, next
	}
	g.mu.Lock()
	if req.Path != nil {
		s.path = *req.Path
	}
	if req.Name != nil {
		s.name = *req.Name
	}
	if req.Type != nil {
		s.typ = *req.Type
	}
	g.mu.Unlock()
	if old != "" && old != s.kernelID && !g.kernelInSession(old) {
		if err := g.shutdown(ctx, old); err != nil && !errorsIsNotFound(err) {
			g.log.Warn("jupyter: shutting down a session's previous kernel", "kernel", old, "err", err)
		}
	}
	m, ok := g.sessionModel(ctx, s)
	if !ok {
		return errdefs.NotFound("session %q not found: its kernel is gone", s.id)
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

// DeleteSession answers DELETE /api/sessions/{id}; its kernel is shut down
// too, as in Jupyter Server.
func (g *Gateway) DeleteSession(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	s, err := g.sessionFor(ctx, r.PathValue("id"))
	if err != nil {
		return err
	}
	g.mu.Lock()
	delete(g.sessions, s.id)
	g.mu.Unlock()
	if !g.kernelInSession(s.kernelID) {
		if err := g.shutdown(ctx, s.kernelID); err != nil && !errorsIsNotFound(err) {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// sessionKernel returns the id of the kernel a session request names: an
// existing kernel's (checked), or that of a new one of the named kernelspec;
// with none named, a new default kernel when orDefault, else "".
func (g *Gateway) sessionKernel(ctx context.Context, k *sessionKernel, orDefault bool) (string, error) {
	switch {
	case k != nil && k.ID != "":
		if _, _, err := g.kernelFor(ctx, k.ID); err != nil {
			return "", err
		}
		return k.ID, nil
	case k != nil && k.Name != "" || orDefault:
		name := ""
		if k != nil {
			name = k.Name
		}
		started, err := g.start(ctx, startRequest{Name: name})
		if err != nil {
			return "", err
		}
		return started.id, nil
	}
	return "", nil
}

func (g *Gateway) kernelInSession(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.sessions {
		if s.kernelID == id {
			return true
		}
	}
	return false
}
