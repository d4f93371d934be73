// Package jupyter serves the Jupyter Server kernel API — kernelspecs,
// kernels, sessions and the kernels' WebSocket channels — so that Jupyter
// clients run their kernels in forkbox sandboxes: a notebook server started
// with --gateway-url pointing here (its UI, files and notebooks stay where
// it runs; every kernel runs in a sandbox), nbclient through jupyter_server's
// GatewayKernelManager, or any client of the REST and WebSocket API itself.
//
// A kernel is a code context of a sandbox (kernelid.go): starting one from
// a kernelspec makes a sandbox of that kernelspec's image and uses its
// default Python context, so forkbox's own /code calls, its history, its
// snapshots, forks and suspend/resume all see the notebook's variables;
// with KERNEL_FORKBOX_SANDBOX in the start request's env (which a notebook
// server forwards from its own environment) the kernel is a new context in
// that existing sandbox instead (KERNEL_FORKBOX_CONTEXT=default: its default
// context). Deleting a kernel deletes the sandbox made for it, or the
// context made in an existing one.
//
// The channels relay raw Jupyter messages between the WebSocket and the
// sandbox's agent, which signs them for the kernel and keeps a bounded log
// of what the kernel sends (see sandbox.Manager.JupyterRecv for why the
// daemon polls that log rather than holding a connection into the sandbox).
// A message to a suspended sandbox's kernel resumes it; a checkpoint, fork
// or suspend happens while a notebook is connected.
//
// The routes sit under /jupyter behind forkbox's keys (Jupyter clients send
// "Authorization: token <key>", which the daemon accepts there); every
// kernel and session belongs to the tenant whose sandbox it runs in.
package jupyter

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// Prefix is where the API is served.
const Prefix = "/jupyter"

// Labels on a sandbox made for a kernel: it is the kernel's (deleting the
// kernel deletes it) and which kernelspec started it.
const (
	LabelKernel = "forkbox.jupyter"
	LabelSpec   = "forkbox.jupyter.spec"
)

// Env names a start request may carry (a notebook server forwards its own
// KERNEL_* variables).
const (
	envSandbox = "KERNEL_FORKBOX_SANDBOX"
	envContext = "KERNEL_FORKBOX_CONTEXT"
)

// defaultSpec is the kernelspec of the default image: Jupyter's own name
// for a Python 3 kernel, so notebooks saved elsewhere open with it.
const defaultSpec = "python3"

// specPrefix names the kernelspecs of the other images: forkbox-<image>.
const specPrefix = "forkbox-"

// Sandboxes is what the gateway needs of the sandbox manager.
type Sandboxes interface {
	Create(ctx context.Context, req *api.CreateSandboxRequest) (*api.Sandbox, error)
	Get(ctx context.Context, ref string) (*api.Sandbox, error)
	List(ctx context.Context, f store.ListFilter) ([]api.Sandbox, error)
	Delete(ctx context.Context, ref string) (*api.Sandbox, error)
	ListImages(ctx context.Context) ([]api.Image, error)
	CreateContextWithID(ctx context.Context, ref, id string, req *api.CreateContextRequest) (*api.Context, error)
	ListContexts(ctx context.Context, ref string) ([]api.Context, error)
	ActOnContext(ctx context.Context, ref, id string, action sandbox.ContextAction) (*api.Context, error)
	JupyterSend(ctx context.Context, ref, contextRef, language string, msg *sandbox.JupyterMessage) error
	JupyterRecv(ctx context.Context, ref, contextRef, language string, after int64, wait time.Duration) (*sandbox.JupyterRecvAnswer, error)
}

// Gateway serves the API. Kernel activity and sessions are kept in memory:
// a kernel id resolves without them, and a restarted daemon lists the
// kernels of the sandboxes it made for kernels (their labels) again.
type Gateway struct {
	sb  Sandboxes
	log *slog.Logger
	now func() time.Time

	mu       sync.Mutex
	kernels  map[string]*kernel  // by kernel id
	sessions map[string]*session // by session id
}

// New returns a gateway over sb.
func New(sb Sandboxes, log *slog.Logger) *Gateway {
	if log == nil {
		log = slog.Default()
	}
	return &Gateway{sb: sb, log: log, now: time.Now, kernels: map[string]*kernel{}, sessions: map[string]*session{}}
}

// kernel is what the gateway knows of a kernel beyond its id.
type kernel struct {
	id     string
	ref    kernelRef
	tenant string
	spec   string
	owns   bool // the sandbox was made for it

	mu           sync.Mutex
	lastActivity time.Time
	state        string // execution_state: "starting", "idle", "busy", …
	conns        int
	head         int64 // the newest message seq a connection saw
}

// kernelModel is a kernel as Jupyter's REST API shows it, with where it
// runs in forkbox.
type kernelModel struct {
	ID             string      `json:"id"`
	Name           string      `json:"name"`
	LastActivity   string      `json:"last_activity"`
	ExecutionState string      `json:"execution_state"`
	Connections    int         `json:"connections"`
	Forkbox        kernelPlace `json:"forkbox"`
}

type kernelPlace struct {
	Sandbox string `json:"sandbox"`
	Context string `json:"context"`
}

// jupyterTime is the timestamp format Jupyter's clients parse
// (strptime "%Y-%m-%dT%H:%M:%S.%fZ").
const jupyterTime = "2006-01-02T15:04:05.000000Z"

func (k *kernel) model() kernelModel {
	k.mu.Lock()
	defer k.mu.Unlock()
	return kernelModel{ID: k.id, Name: k.spec, LastActivity: k.lastActivity.UTC().Format(jupyterTime),
		ExecutionState: k.state, Connections: k.conns,
		Forkbox: kernelPlace{Sandbox: k.ref.sandbox, Context: k.ref.contextRef()}}
}

func (k *kernel) touch(now time.Time, state string) {
	k.mu.Lock()
	if now.After(k.lastActivity) {
		k.lastActivity = now
	}
	if state != "" {
		k.state = state
	}
	k.mu.Unlock()
}

// kernelFor returns the kernel id names, for the caller's tenant: the
// sandbox must exist and be the caller's (404 otherwise, as for an id that
// never was).
func (g *Gateway) kernelFor(ctx context.Context, id string) (*kernel, *api.Sandbox, error) {
	ref, err := parseKernelID(id)
	if err != nil {
		return nil, nil, err
	}
	sb, err := g.sb.Get(ctx, ref.sandbox)
	if errors.Is(err, errdefs.ErrNotFound) || (err == nil && sb.State == api.StateTerminated) {
		g.forget(id)
		return nil, nil, errdefs.NotFound("kernel %q not found", id)
	}
	if err != nil {
		return nil, nil, err
	}
	return g.remember(ctx, id, ref, sb), sb, nil
}

// remember returns the gateway's record of a kernel, making one for a
// kernel it has not seen in this process (a restart, a fork's branch).
func (g *Gateway) remember(ctx context.Context, id string, ref kernelRef, sb *api.Sandbox) *kernel {
	g.mu.Lock()
	defer g.mu.Unlock()
	if k := g.kernels[id]; k != nil {
		return k
	}
	spec := sb.Labels[LabelSpec]
	if spec == "" {
		spec = specName(sb.Image)
	}
	k := &kernel{id: id, ref: ref, tenant: tenant.Of(ctx), spec: spec, state: "idle",
		owns: ref.ctx == 0 && sb.Labels[LabelKernel] != "", lastActivity: sb.CreatedAt}
	g.kernels[id] = k
	return k
}

func (g *Gateway) forget(id string) {
	g.mu.Lock()
	delete(g.kernels, id)
	for sid, s := range g.sessions {
		if s.kernelID == id {
			delete(g.sessions, sid)
		}
	}
	g.mu.Unlock()
}

// specName is the kernelspec name of an image's Python kernel.
func specName(img string) string {
	if img == "" || img == image.DefaultImage {
		return defaultSpec
	}
	return specPrefix + img
}

// imageOf is the image a kernelspec name starts.
func imageOf(spec string) (string, bool) {
	if spec == defaultSpec {
		return image.DefaultImage, true
	}
	img, ok := strings.CutPrefix(spec, specPrefix)
	return img, ok && img != ""
}

// specModel is a kernelspec as the REST API shows it.
type specModel struct {
	Name      string            `json:"name"`
	Spec      specBody          `json:"spec"`
	Resources map[string]string `json:"resources"`
}

type specBody struct {
	Argv          []string          `json:"argv"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	InterruptMode string            `json:"interrupt_mode"`
	Env           map[string]string `json:"env"`
	Metadata      map[string]any    `json:"metadata"`
}

func newSpecModel(img string) specModel {
	name := specName(img)
	display := "Python 3 (forkbox)"
	if name != defaultSpec {
		display = "Python 3 (forkbox: " + img + ")"
	}
	return specModel{Name: name, Resources: map[string]string{}, Spec: specBody{
		// What the sandbox runs; the client never starts it itself.
		Argv:        []string{"python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"},
		DisplayName: display, Language: "python", InterruptMode: "message", Env: map[string]string{},
		Metadata: map[string]any{"forkbox": map[string]any{"image": img}},
	}}
}

// Kernelspecs answers GET /api/kernelspecs: a Python kernel for each image
// (a kernel of it runs in a new sandbox of that image).
func (g *Gateway) Kernelspecs(w http.ResponseWriter, r *http.Request) error {
	imgs, err := g.sb.ListImages(r.Context())
	if err != nil {
		return err
	}
	specs := map[string]specModel{}
	for _, img := range imgs {
		m := newSpecModel(img.Name)
		specs[m.Name] = m
	}
	if _, ok := specs[defaultSpec]; !ok {
		// The default image may still be building: its kernelspec is
		// there anyway (a start waits for the image like a create does).
		specs[defaultSpec] = newSpecModel(image.DefaultImage)
	}
	writeJSON(w, http.StatusOK, map[string]any{"default": defaultSpec, "kernelspecs": specs})
	return nil
}

// Kernelspec answers GET /api/kernelspecs/{name}.
func (g *Gateway) Kernelspec(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	img, ok := imageOf(name)
	if !ok {
		return errdefs.NotFound("kernelspec %q not found", name)
	}
	imgs, err := g.sb.ListImages(r.Context())
	if err != nil {
		return err
	}
	if img != image.DefaultImage && !slices.ContainsFunc(imgs, func(i api.Image) bool { return i.Name == img }) {
		return errdefs.NotFound("kernelspec %q not found", name)
	}
	writeJSON(w, http.StatusOK, newSpecModel(img))
	return nil
}

// KernelspecResource answers GET /kernelspecs/{name}/{file}: forkbox's
// kernelspecs carry no logos or scripts.
func (g *Gateway) KernelspecResource(w http.ResponseWriter, r *http.Request) error {
	return errdefs.NotFound("kernelspec %q has no resource %q", r.PathValue("name"), r.PathValue("file"))
}

// startRequest is the body of POST /api/kernels.
type startRequest struct {
	Name string            `json:"name"`
	Path string            `json:"path"`
	Env  map[string]string `json:"env"`
}

// maxBody bounds a REST request's body.
const maxBody = 1 << 20

// StartKernel answers POST /api/kernels.
func (g *Gateway) StartKernel(w http.ResponseWriter, r *http.Request) error {
	var req startRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	k, err := g.start(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", Prefix+"/api/kernels/"+k.id)
	writeJSON(w, http.StatusCreated, k.model())
	return nil
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.Body == nil || r.ContentLength == 0 {
		return nil
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return errdefs.InvalidArgument("bad request body: %v", err)
	}
	return nil
}

// start starts a kernel: a new sandbox of the kernelspec's image, or a
// context in the sandbox the env names.
func (g *Gateway) start(ctx context.Context, req startRequest) (*kernel, error) {
	if req.Name == "" {
		req.Name = defaultSpec
	}
	img, ok := imageOf(req.Name)
	if !ok {
		return nil, errdefs.NotFound("kernelspec %q not found: forkbox's are %s and %s<image>", req.Name, defaultSpec, specPrefix)
	}
	now := g.now()
	if ref := req.Env[envSandbox]; ref != "" {
		sb, err := g.sb.Get(ctx, ref)
		if err != nil {
			return nil, err
		}
		if sb.State == api.StateTerminated {
			return nil, errdefs.FailedPrecondition("sandbox %s is terminated", sb.ID)
		}
		kr := kernelRef{sandbox: sb.ID}
		if req.Env[envContext] != "default" {
			n, err := randomContext()
			if err != nil {
				return nil, err
			}
			kr.ctx = n
			if _, err := g.sb.CreateContextWithID(ctx, sb.ID, kr.contextRef(), &api.CreateContextRequest{Language: "python"}); err != nil {
				return nil, fmt.Errorf("new context in sandbox %s: %w", sb.ID, err)
			}
		}
		return g.register(ctx, kr, req.Name, false, now)
	}
	sb, err := g.sb.Create(ctx, &api.CreateSandboxRequest{Image: img,
		Labels: map[string]string{LabelKernel: "kernel", LabelSpec: req.Name}})
	if err != nil {
		return nil, err
	}
	return g.register(ctx, kernelRef{sandbox: sb.ID}, req.Name, true, now)
}

func (g *Gateway) register(ctx context.Context, kr kernelRef, spec string, owns bool, now time.Time) (*kernel, error) {
	id, err := kr.id()
	if err != nil {
		return nil, err
	}
	k := &kernel{id: id, ref: kr, tenant: tenant.Of(ctx), spec: spec, owns: owns, state: "idle", lastActivity: now}
	g.mu.Lock()
	g.kernels[id] = k
	g.mu.Unlock()
	g.log.Info("jupyter kernel started", "kernel", id, "sandbox", kr.sandbox, "context", kr.contextRef(), "spec", spec)
	return k, nil
}

func randomContext() (uint32, error) {
	for {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		if n := binary.BigEndian.Uint32(b[:]); n != 0 {
			return n, nil
		}
	}
}

// ListKernels answers GET /api/kernels: the caller's kernels this daemon
// started or served, and those of the sandboxes made for kernels.
func (g *Gateway) ListKernels(w http.ResponseWriter, r *http.Request) error {
	list, err := g.kernelsOf(r.Context())
	if err != nil {
		return err
	}
	out := make([]kernelModel, 0, len(list))
	for _, k := range list {
		out = append(out, k.model())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (g *Gateway) kernelsOf(ctx context.Context) ([]*kernel, error) {
	sbs, err := g.sb.List(ctx, store.ListFilter{})
	if err != nil {
		return nil, err
	}
	byID := map[string]*api.Sandbox{}
	for i := range sbs {
		if sbs[i].State != api.StateTerminated {
			byID[sbs[i].ID] = &sbs[i]
		}
	}
	// Sandboxes made for a kernel that this process has not seen.
	for _, sb := range byID {
		if sb.Labels[LabelKernel] == "" {
			continue
		}
		kr := kernelRef{sandbox: sb.ID}
		if id, err := kr.id(); err == nil {
			g.remember(ctx, id, kr, sb)
		}
	}
	who := tenant.Of(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*kernel
	for id, k := range g.kernels {
		if k.tenant != who {
			continue
		}
		if byID[k.ref.sandbox] == nil {
			delete(g.kernels, id) // its sandbox is gone
			continue
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b *kernel) int { return strings.Compare(a.id, b.id) })
	return out, nil
}

// GetKernel answers GET /api/kernels/{id}.
func (g *Gateway) GetKernel(w http.ResponseWriter, r *http.Request) error {
	k, _, err := g.kernelFor(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, k.model())
	return nil
}

// DeleteKernel answers DELETE /api/kernels/{id}: the sandbox made for the
// kernel is deleted, a context made in an existing sandbox is deleted, and a
// kernel that is an existing sandbox's default context is only forgotten
// (its state is the sandbox's, not the notebook's, to end).
func (g *Gateway) DeleteKernel(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := g.shutdown(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (g *Gateway) shutdown(ctx context.Context, id string) error {
	k, sb, err := g.kernelFor(ctx, id)
	if err != nil {
		return err
	}
	switch {
	case k.owns || (k.ref.ctx == 0 && sb.Labels[LabelKernel] != ""):
		if _, err := g.sb.Delete(ctx, sb.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	case k.ref.ctx != 0:
		if _, err := g.sb.ActOnContext(ctx, sb.ID, k.ref.contextRef(), sandbox.ContextDelete); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	g.forget(id)
	g.log.Info("jupyter kernel shut down", "kernel", id, "sandbox", sb.ID)
	return nil
}

// InterruptKernel answers POST /api/kernels/{id}/interrupt.
func (g *Gateway) InterruptKernel(w http.ResponseWriter, r *http.Request) error {
	if _, err := g.act(r.Context(), r.PathValue("id"), sandbox.ContextInterrupt); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// RestartKernel answers POST /api/kernels/{id}/restart.
func (g *Gateway) RestartKernel(w http.ResponseWriter, r *http.Request) error {
	k, err := g.act(r.Context(), r.PathValue("id"), sandbox.ContextRestart)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, k.model())
	return nil
}

// act interrupts or restarts a kernel's context. The default context is
// found by listing (its id is the agent's); one that never ran has no
// kernel to act on.
func (g *Gateway) act(ctx context.Context, id string, action sandbox.ContextAction) (*kernel, error) {
	k, sb, err := g.kernelFor(ctx, id)
	if err != nil {
		return nil, err
	}
	cid := k.ref.contextRef()
	if k.ref.ctx == 0 {
		list, err := g.sb.ListContexts(ctx, sb.ID)
		if err != nil {
			return nil, err
		}
		cid = ""
		for _, c := range list {
			if c.Default && strings.EqualFold(c.Language, "python") {
				cid = c.ID
			}
		}
		if cid == "" {
			return k, nil
		}
	}
	if _, err := g.sb.ActOnContext(ctx, sb.ID, cid, action); err != nil {
		return nil, err
	}
	k.touch(g.now(), "")
	return k, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func errorsIsNotFound(err error) bool { return errors.Is(err, errdefs.ErrNotFound) }
