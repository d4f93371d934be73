package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/store"
)

// envdVersion is the envd version forkbox reports: the SDKs turn features
// on by it (0.4.0: no forced user; 0.5.7: octet-stream and gzip uploads).
const envdVersion = "0.5.7"

// defaultTemplate is the image E2B's default template names map to.
const defaultTemplate = "python"

// templateAliases are E2B's own template names, which mean forkbox's
// default image.
var templateAliases = map[string]bool{"": true, "base": true, "code-interpreter-v1": true, "code-interpreter": true}

// Controls is what the control plane needs of forkbox; *sandbox.Manager
// has it.
type Controls interface {
	Create(ctx context.Context, req *api.CreateSandboxRequest) (*api.Sandbox, error)
	Get(ctx context.Context, ref string) (*api.Sandbox, error)
	ListPage(ctx context.Context, f store.ListFilter, p store.Page) (*api.SandboxList, error)
	Delete(ctx context.Context, ref string) (*api.Sandbox, error)
	Suspend(ctx context.Context, ref, reason string) (*api.Sandbox, error)
	Resume(ctx context.Context, ref string) (*api.Sandbox, error)
	Update(ctx context.Context, ref string, req *api.UpdateSandboxRequest) (*api.Sandbox, error)
	E2BAccess(ctx context.Context, ref, template string) (*api.Sandbox, store.E2BAccess, error)
	E2BTemplate(ctx context.Context, ref string) string
	Checkpoint(ctx context.Context, ref string, req *api.CheckpointRequest) (*api.Snapshot, error)
	ListSnapshotsPage(ctx context.Context, ref, name string, p store.Page) (*api.SnapshotList, error)
	DeleteSnapshot(ctx context.Context, id string) error
	Fork(ctx context.Context, ref string, req *api.ForkRequest) (*api.ForkResult, error)
}

var _ Controls = (*sandbox.Manager)(nil)

// sandboxJSON is E2B's Sandbox (the create and connect answer).
type sandboxJSON struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
	Alias              string  `json:"alias,omitempty"`
}

// detailJSON is E2B's SandboxDetail and ListedSandbox.
type detailJSON struct {
	SandboxID           string            `json:"sandboxID"`
	TemplateID          string            `json:"templateID"`
	ClientID            string            `json:"clientID"`
	EnvdVersion         string            `json:"envdVersion"`
	Alias               string            `json:"alias,omitempty"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	State               string            `json:"state"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int64             `json:"memoryMB"`
	DiskSizeMB          int64             `json:"diskSizeMB"`
	Metadata            map[string]string `json:"metadata"`
	EnvdAccessToken     string            `json:"envdAccessToken,omitempty"`
	Domain              *string           `json:"domain"`
	AllowInternetAccess bool              `json:"allowInternetAccess"`
	Network             *networkJSON      `json:"network,omitempty"`
	Lifecycle           lifecycleJSON     `json:"lifecycle"`
}

type networkJSON struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
}

type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// createJSON is what the SDKs send to create a sandbox (camelCase but for
// allow_internet_access).
type createJSON struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Secure              *bool             `json:"secure"`
	AutoPause           *bool             `json:"autoPause"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Network *networkJSON `json:"network"`
}

// clientError is an E2B control-plane error: {"code": <status>, "message"}.
type clientError struct {
	status int
	msg    string
}

func (e *clientError) Error() string { return e.msg }

// writeControlError writes err in E2B's control-plane shape.
func writeControlError(w http.ResponseWriter, err error) {
	status, msg := http.StatusInternalServerError, err.Error()
	var ce *clientError
	if errors.As(err, &ce) {
		status = ce.status
	} else {
		status, _ = errdefs.HTTPStatus(err)
		if errors.Is(err, errdefs.ErrFailedPrecondition) || errors.Is(err, errdefs.ErrBusy) {
			status = http.StatusConflict
		}
	}
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func decodeBody(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		return &clientError{http.StatusBadRequest, "reading the body: " + err.Error()}
	}
	if len(body) > 1<<20 {
		return &clientError{http.StatusRequestEntityTooLarge, "the body is over 1 MiB"}
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &clientError{http.StatusBadRequest, "malformed JSON body: " + err.Error()}
	}
	return nil
}

// control serves E2B's control plane; the caller has authenticated the
// request's key and put its principal in the context.
type control struct {
	c   Controls
	log *slog.Logger
	mux *http.ServeMux
}

func newControl(c Controls, log *slog.Logger) *control {
	ct := &control{c: c, log: log, mux: http.NewServeMux()}
	h := func(pattern string, f func(http.ResponseWriter, *http.Request) error) {
		ct.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := f(w, r); err != nil {
				writeControlError(w, err)
			}
		})
	}
	for _, p := range []string{"", "/v2"} {
		h("POST "+p+"/sandboxes", ct.create)
		h("GET "+p+"/sandboxes", ct.list)
		h("POST "+p+"/sandboxes/{id}/connect", ct.connect)
	}
	h("POST /sandboxes/{id}/resume", ct.connect)
	h("POST /sandboxes/{id}/pause", ct.pause)
	h("DELETE /sandboxes/{id}", ct.kill)
	h("GET /sandboxes/{id}", ct.info)
	h("POST /sandboxes/{id}/timeout", ct.setTimeout)
	h("GET /sandboxes/{id}/metrics", ct.metrics)
	h("POST /sandboxes/{id}/snapshots", ct.snapshot)
	h("GET /snapshots", ct.listSnapshots)
	h("DELETE /templates/{id}", ct.deleteSnapshot)
	h("POST /sandboxes/{id}/fork", ct.fork)
	h("/", func(w http.ResponseWriter, r *http.Request) error {
		return &clientError{http.StatusNotFound, fmt.Sprintf("forkbox does not serve %s %s of E2B's API", r.Method, r.URL.Path)}
	})
	return ct
}

// IsControlPlane reports whether r's path is one of E2B's control-plane
// routes (none of forkbox's own routes starts like them).
func IsControlPlane(r *http.Request) bool {
	p := r.URL.Path
	return p == "/sandboxes" || strings.HasPrefix(p, "/sandboxes/") || p == "/v2/sandboxes" || strings.HasPrefix(p, "/v2/sandboxes/") ||
		p == "/snapshots" || strings.HasPrefix(p, "/templates/")
}

func templateImage(t string) string {
	if templateAliases[t] {
		return defaultTemplate
	}
	return t
}

func (ct *control) create(w http.ResponseWriter, r *http.Request) error {
	var req createJSON
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	cr := &api.CreateSandboxRequest{Image: templateImage(req.TemplateID), Env: req.EnvVars, Labels: req.Metadata}
	if strings.HasPrefix(req.TemplateID, "snap_") {
		cr.Image, cr.SnapshotID = "", req.TemplateID
	}
	if req.Timeout != nil {
		t := *req.Timeout
		if t < 1 {
			t = 1
		}
		cr.TimeoutSecs = &t
	}
	if req.AllowInternetAccess != nil {
		cr.AllowInternetAccess = *req.AllowInternetAccess
	}
	if req.Network != nil && (len(req.Network.AllowOut) > 0 || len(req.Network.DenyOut) > 0) {
		cr.Network = &api.NetworkPolicy{AllowOut: req.Network.AllowOut, DenyOut: req.Network.DenyOut}
		if req.AllowInternetAccess == nil {
			cr.AllowInternetAccess = true // E2B's default is on; a policy says the sandbox has a network
		}
	}
	// lifecycle.onTimeout: "pause" — suspended when idle, with or without
	// a name; otherwise killed, as E2B does.
	cr.SuspendOnIdle = req.AutoPause != nil && *req.AutoPause
	if req.AutoResume != nil && !req.AutoResume.Enabled {
		f := false
		cr.AutoResume = &f
	}
	sb, err := ct.c.Create(r.Context(), cr)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return &clientError{http.StatusBadRequest, fmt.Sprintf("template %q not found: use a forkbox image name (GET /v1/images), a snapshot id, or base/code-interpreter-v1 for forkbox's python image", req.TemplateID)}
		}
		return err
	}
	template := req.TemplateID
	if template == "" {
		template = "base"
	}
	_, acc, err := ct.c.E2BAccess(r.Context(), sb.ID, template)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sandboxView(sb, acc))
	return nil
}

func sandboxView(sb *api.Sandbox, acc store.E2BAccess) sandboxJSON {
	return sandboxJSON{SandboxID: sb.ID, TemplateID: templateOf(sb, acc.Template), ClientID: "forkbox", EnvdVersion: envdVersion,
		EnvdAccessToken: acc.EnvdToken, TrafficAccessToken: acc.TrafficToken, Alias: sb.Name}
}

func templateOf(sb *api.Sandbox, template string) string {
	if template != "" {
		return template
	}
	if sb.SnapshotID != "" {
		return sb.SnapshotID
	}
	return sb.Image
}

// live finds sandbox id of the caller's tenant; a terminated one is "not
// found", as in E2B.
func (ct *control) live(ctx context.Context, id string) (*api.Sandbox, error) {
	sb, err := ct.c.Get(ctx, id)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, &clientError{http.StatusNotFound, fmt.Sprintf("sandbox %q not found", id)}
		}
		return nil, err
	}
	if sb.State.Ended() {
		return nil, &clientError{http.StatusNotFound, fmt.Sprintf("sandbox %q not found (it is %s)", id, sb.State)}
	}
	return sb, nil
}

func (ct *control) connect(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	ctx := r.Context()
	sb, err := ct.live(ctx, r.PathValue("id"))
	if err != nil {
		return err
	}
	status := http.StatusOK
	if sb.State == api.StateSuspended || sb.State == api.StateSuspending || sb.State == api.StateResuming {
		if _, err := ct.c.Resume(ctx, sb.ID); err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
			return err
		}
		status = http.StatusCreated
	}
	if req.Timeout != nil && *req.Timeout > 0 {
		// E2B's connect only extends the time to live.
		if cur, err := ct.c.Get(ctx, r.PathValue("id")); err == nil && *req.Timeout > cur.TimeoutSecs {
			if _, err := ct.c.Update(ctx, cur.ID, &api.UpdateSandboxRequest{TimeoutSecs: req.Timeout}); err != nil {
				return err
			}
		}
	}
	sb, acc, err := ct.c.E2BAccess(ctx, r.PathValue("id"), "")
	if err != nil {
		return err
	}
	writeJSON(w, status, sandboxView(sb, acc))
	return nil
}

func (ct *control) pause(w http.ResponseWriter, r *http.Request) error {
	sb, err := ct.live(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if sb.State == api.StateSuspended {
		return &clientError{http.StatusConflict, fmt.Sprintf("sandbox %q is already paused", sb.ID)}
	}
	if _, err := ct.c.Suspend(r.Context(), sb.ID, "paused through the E2B API"); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (ct *control) kill(w http.ResponseWriter, r *http.Request) error {
	sb, err := ct.live(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if _, err := ct.c.Delete(r.Context(), sb.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func e2bState(s api.SandboxState) string {
	switch s {
	case api.StateSuspending, api.StateSuspended:
		return "paused"
	}
	return "running"
}

func (ct *control) detail(ctx context.Context, sb *api.Sandbox, withToken bool) detailJSON {
	d := detailJSON{SandboxID: sb.ID, TemplateID: templateOf(sb, ct.c.E2BTemplate(ctx, sb.ID)), ClientID: "forkbox", EnvdVersion: envdVersion,
		Alias: sb.Name, StartedAt: sb.CreatedAt, EndAt: sb.LastActiveAt.Add(time.Duration(sb.TimeoutSecs) * time.Second),
		State: e2bState(sb.State), CPUCount: max(1, int(sb.CPUs+0.999)), MemoryMB: sb.MemoryMB, DiskSizeMB: sb.DiskMB,
		Metadata: sb.Labels, AllowInternetAccess: sb.AllowInternetAccess,
		Lifecycle: lifecycleJSON{OnTimeout: "kill", AutoResume: sb.AutoResume}}
	if d.Metadata == nil {
		d.Metadata = map[string]string{}
	}
	if sb.SuspendOnIdle || sb.Name != "" {
		d.Lifecycle.OnTimeout = "pause"
	}
	if sb.Network != nil {
		d.Network = &networkJSON{AllowOut: sb.Network.AllowOut, DenyOut: sb.Network.DenyOut}
	}
	if withToken {
		if _, acc, err := ct.c.E2BAccess(ctx, sb.ID, ""); err == nil {
			d.EnvdAccessToken = acc.EnvdToken
		}
	}
	return d
}

func (ct *control) info(w http.ResponseWriter, r *http.Request) error {
	sb, err := ct.live(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ct.detail(r.Context(), sb, true))
	return nil
}

// e2bStates are the forkbox states each E2B state stands for in a list (a
// sandbox that ended, terminated or failed, is in neither; a lost one,
// which a resume may bring back, is listed as running, as info shows it).
var e2bStates = map[string][]api.SandboxState{
	"running": {api.StateCreating, api.StateRunning, api.StateResuming, api.StateLost},
	"paused":  {api.StateSuspending, api.StateSuspended},
}

// list is GET /v2/sandboxes (and the older /sandboxes): the caller's
// tenant's sandboxes that have not ended, filtered by state (comma
// separated: running, paused) and metadata (k=v pairs, URL-encoded once
// more), newest first (order=asc: oldest first), paged by limit and
// nextToken: the store's keyset pages, nextToken its cursor (opaque to
// E2B's clients, which pass back the X-Next-Token they were given). No
// X-Total-Running (optional in E2B's API): counting the whole list is
// what paging spares.
func (ct *control) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	want := map[string]bool{}
	for _, st := range q["state"] {
		for _, s := range strings.Split(st, ",") {
			if s = strings.TrimSpace(s); s != "" {
				if e2bStates[s] == nil {
					return &clientError{http.StatusBadRequest, fmt.Sprintf("state: %q is not running or paused", s)}
				}
				want[s] = true
			}
		}
	}
	if len(want) == 0 {
		want = map[string]bool{"running": true, "paused": true}
	}
	f := store.ListFilter{Labels: map[string]string{}}
	for _, s := range []string{"running", "paused"} {
		if want[s] {
			f.States = append(f.States, e2bStates[s]...)
		}
	}
	if m := q.Get("metadata"); m != "" {
		vals, err := url.ParseQuery(m)
		if err != nil {
			return &clientError{http.StatusBadRequest, "metadata: " + err.Error()}
		}
		for k, v := range vals {
			f.Labels[k] = v[0]
		}
	}
	page, err := paging(q, store.CursorSandboxes, q.Get("order") == "asc")
	if err != nil {
		return err
	}
	list, err := ct.c.ListPage(r.Context(), f, page)
	if err != nil {
		return err
	}
	out := make([]detailJSON, 0, len(list.Sandboxes))
	for i := range list.Sandboxes {
		out = append(out, ct.detail(r.Context(), &list.Sandboxes[i], false))
	}
	if list.NextCursor != "" {
		w.Header().Set("X-Next-Token", list.NextCursor)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (ct *control) setTimeout(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.Timeout == nil {
		return &clientError{http.StatusBadRequest, "timeout: is required (seconds from now)"}
	}
	sb, err := ct.live(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	t := max(*req.Timeout, 1)
	if _, err := ct.c.Update(r.Context(), sb.ID, &api.UpdateSandboxRequest{TimeoutSecs: &t}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// metrics is GET /sandboxes/{id}/metrics: one sample, of now.
func (ct *control) metrics(w http.ResponseWriter, r *http.Request) error {
	sb, err := ct.live(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	m := map[string]any{"timestamp": now, "timestampUnix": now.Unix(), "cpuCount": max(1, int(sb.CPUs+0.999)),
		"cpuUsedPct": 0.0, "memUsed": 0, "memTotal": sb.MemoryMB << 20, "memCache": 0, "diskUsed": 0, "diskTotal": sb.DiskMB << 20}
	if u := sb.Usage; u != nil {
		m["memUsed"], m["diskUsed"] = u.MemoryBytes, u.DiskUsedBytes
	}
	writeJSON(w, http.StatusOK, []any{m})
	return nil
}

// snapshotJSON is E2B's SnapshotInfo: the id a create takes as templateID.
type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotView(sn *api.Snapshot) snapshotJSON {
	names := []string{}
	if sn.Name != "" {
		names = append(names, sn.Name)
	}
	return snapshotJSON{SnapshotID: sn.ID, Names: names}
}

// snapshot is POST /sandboxes/{id}/snapshots: a memory snapshot (a
// filesystem one where memory snapshots are unavailable), which a create
// with it as templateID restores, processes and variables included.
func (ct *control) snapshot(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Name string `json:"name"`
	}
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	sb, err := ct.live(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	sn, err := ct.c.Checkpoint(r.Context(), sb.ID, &api.CheckpointRequest{Type: api.SnapshotMemory, Name: req.Name})
	if errors.Is(err, errdefs.ErrUnavailable) {
		sn, err = ct.c.Checkpoint(r.Context(), sb.ID, &api.CheckpointRequest{Type: api.SnapshotFilesystem, Name: req.Name})
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, snapshotView(sn))
	return nil
}

// listSnapshots is GET /snapshots: the caller's tenant's snapshots (those
// of sandboxID only, when given; named name, when given), newest first,
// paged like the sandbox list.
func (ct *control) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	page, err := paging(q, store.CursorSnapshots, false)
	if err != nil {
		return err
	}
	list, err := ct.c.ListSnapshotsPage(r.Context(), q.Get("sandboxID"), q.Get("name"), page)
	if errors.Is(err, errdefs.ErrNotFound) {
		list = &api.SnapshotList{}
	} else if err != nil {
		return err
	}
	out := make([]snapshotJSON, 0, len(list.Snapshots))
	for i := range list.Snapshots {
		out = append(out, snapshotView(&list.Snapshots[i]))
	}
	if list.NextCursor != "" {
		w.Header().Set("X-Next-Token", list.NextCursor)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// paging reads limit (1-1000, default 100) and nextToken (the cursor of
// the store's list of kind, oldest first or not) into a page.
func paging(q url.Values, kind string, oldest bool) (store.Page, error) {
	p := store.Page{Limit: store.DefaultPageLimit, Oldest: oldest}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxPageLimit {
			return store.Page{}, &clientError{http.StatusBadRequest, fmt.Sprintf("limit: %q is not a number from 1 to %d", v, store.MaxPageLimit)}
		}
		p.Limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		if _, err := store.DecodeCursor(v, kind, oldest); err != nil {
			return store.Page{}, &clientError{http.StatusBadRequest, fmt.Sprintf("nextToken: %.40q is not a token this server gave for this order", v)}
		}
		p.Cursor = v
	}
	return p, nil
}

// deleteSnapshot is DELETE /templates/{id} for a snapshot id (E2B's
// templates are forkbox's images, which are managed through forkbox's API).
func (ct *control) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !strings.HasPrefix(id, "snap_") {
		return &clientError{http.StatusNotFound, fmt.Sprintf("snapshot %q not found (templates are forkbox images: DELETE /v1/images/{name})", id)}
	}
	if err := ct.c.DeleteSnapshot(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// fork is POST /sandboxes/{id}/fork: count copies of the running
// sandbox, memory and all, each answered as E2B's {sandbox} item.
func (ct *control) fork(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Count   *int   `json:"count"`
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	sb, err := ct.live(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	res, err := ct.c.Fork(r.Context(), sb.ID, &api.ForkRequest{Count: count})
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(res.Sandboxes))
	for i := range res.Sandboxes {
		f := &res.Sandboxes[i]
		if req.Timeout != nil && *req.Timeout > 0 {
			if _, err := ct.c.Update(r.Context(), f.ID, &api.UpdateSandboxRequest{TimeoutSecs: req.Timeout}); err != nil {
				out = append(out, map[string]any{"error": map[string]any{"code": http.StatusInternalServerError, "message": err.Error()}})
				continue
			}
		}
		fsb, acc, err := ct.c.E2BAccess(r.Context(), f.ID, ct.c.E2BTemplate(r.Context(), sb.ID))
		if err != nil {
			out = append(out, map[string]any{"error": map[string]any{"code": http.StatusInternalServerError, "message": err.Error()}})
			continue
		}
		out = append(out, map[string]any{"sandbox": sandboxView(fsb, acc)})
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}
