package httpapi

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/textcut"
)

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateSandboxRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	sb, err := s.mgr.Create(r.Context(), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sb)
	return nil
}

// listSandboxes is GET /v1/sandboxes: a page of the caller's sandboxes,
// newest first, terminated ones hidden unless state=terminated (them alone)
// or include_terminated=true (all).
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	page, err := pageParams(q)
	if err != nil {
		return err
	}
	f := store.ListFilter{State: api.SandboxState(q.Get("state")), Name: q.Get("name")}
	if f.State != "" && !f.State.Valid() {
		return errdefs.InvalidArgument("state: unknown state %q", f.State)
	}
	all, err := boolParam(q, "include_terminated")
	if err != nil {
		return err
	}
	f.HideTerminated = f.State == "" && !all
	for _, l := range q["label"] {
		k, v, ok := strings.Cut(l, ":")
		if !ok || k == "" {
			return errdefs.InvalidArgument("label: %q must be key:value", l)
		}
		if f.Labels == nil {
			f.Labels = map[string]string{}
		}
		f.Labels[k] = v
	}
	list, err := s.mgr.ListPage(r.Context(), f, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// pageParams reads a list's page from the query: limit (1 to 1000, default
// 100) and cursor (the next_cursor of the page before, or empty for the
// first page; the store decodes it, and a malformed one is a 400 naming
// it).
func pageParams(q url.Values) (store.Page, error) {
	p := store.Page{Limit: store.DefaultPageLimit, Cursor: q.Get("cursor")}
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > store.MaxPageLimit {
			return store.Page{}, errdefs.InvalidArgument("limit: %q is not a number from 1 to %d", v[0], store.MaxPageLimit)
		}
		p.Limit = n
	}
	return p, nil
}

// boolParam reads a true/false query parameter (absent: false).
func boolParam(q url.Values, name string) (bool, error) {
	v, ok := q[name]
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(v[0])
	if err != nil {
		return false, errdefs.InvalidArgument("%s: %q is not true or false", name, v[0])
	}
	return b, nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.mgr.Get(r.Context(), r.PathValue("sandbox"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) updateSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.UpdateSandboxRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	sb, err := s.mgr.Update(r.Context(), r.PathValue("sandbox"), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.mgr.Delete(r.Context(), r.PathValue("sandbox"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	var req api.ExecRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	ref := r.PathValue("sandbox")
	if !wantsSSE(r) {
		res, err := s.mgr.Exec(r.Context(), ref, &req, sandbox.ExecOptions{})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	stream := &lazySSE{w: w}
	emit := stream.emit
	var outBuf, errBuf utf8Carry
	res, err := s.mgr.Exec(r.Context(), ref, &req, sandbox.ExecOptions{
		OnStdout: func(b []byte) {
			if t := outBuf.take(b); t != "" {
				emit(api.EventStdout, api.OutputChunk{Data: t})
			}
		},
		OnStderr: func(b []byte) {
			if t := errBuf.take(b); t != "" {
				emit(api.EventStderr, api.OutputChunk{Data: t})
			}
		},
	})
	if t := outBuf.flush(); t != "" {
		emit(api.EventStdout, api.OutputChunk{Data: t})
	}
	if t := errBuf.flush(); t != "" {
		emit(api.EventStderr, api.OutputChunk{Data: t})
	}
	if err != nil {
		return stream.fail(api.EventError, err)
	}
	emit(api.EventExit, res)
	return nil
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) error {
	rc, size, err := s.mgr.ReadFile(r.Context(), r.PathValue("sandbox"), r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	_, err = io.Copy(w, rc)
	return err
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	path := q.Get("path")
	var mode uint32
	if m := q.Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o777 {
			return errdefs.InvalidArgument("mode: %q is not an octal permission like 0644", m)
		}
		mode = uint32(v)
	}
	if r.ContentLength > s.cfg.MaxUploadBytes {
		return errdefs.TooLarge("upload of %d bytes is larger than the limit of %d bytes", r.ContentLength, s.cfg.MaxUploadBytes)
	}
	body := io.Reader(http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes))
	if ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "multipart/form-data" {
		part, err := firstFilePart(multipart.NewReader(body, params["boundary"]))
		if err != nil {
			return err
		}
		if path == "" || strings.HasSuffix(path, "/") {
			path += part.FileName()
		}
		body = part
	}
	cb := &clientBody{r: body}
	res, err := s.mgr.WriteFile(r.Context(), r.PathValue("sandbox"), path, mode, cb)
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) || errors.As(cb.err, &maxErr) || strings.Contains(err.Error(), "request body too large") {
			return errdefs.TooLarge("upload is larger than the limit of %d bytes", s.cfg.MaxUploadBytes)
		}
		return cb.explain(err)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// firstFilePart returns the "file" part of a multipart upload (or the first
// part with a file name).
func firstFilePart(mr *multipart.Reader) (*multipart.Part, error) {
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return nil, errdefs.InvalidArgument("multipart upload has no file part")
		}
		if err != nil {
			return nil, errdefs.InvalidArgument("malformed multipart body: %v", err)
		}
		if p.FormName() == "file" || p.FileName() != "" {
			return p, nil
		}
	}
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	rec := q.Get("recursive")
	recursive, err := strconv.ParseBool(rec)
	if rec != "" && err != nil {
		return errdefs.InvalidArgument("recursive: %q is not a boolean", rec)
	}
	if err := s.mgr.RemoveFile(r.Context(), r.PathValue("sandbox"), q.Get("path"), recursive); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	res, err := s.mgr.ListFiles(r.Context(), r.PathValue("sandbox"), r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// utf8Carry holds back the bytes of a UTF-8 sequence that a chunk boundary
// split, so that each streamed chunk is valid text.
type utf8Carry struct{ pending []byte }

func (c *utf8Carry) take(b []byte) string {
	buf := append(c.pending, b...)
	whole := textcut.Complete(buf)
	c.pending = append([]byte(nil), buf[len(whole):]...)
	return string(whole)
}

func (c *utf8Carry) flush() string {
	s := string(c.pending)
	c.pending = nil
	return s
}

// clientBody reads what a client uploads and remembers why a read failed:
// a body cut short or a multipart part that never ends is the client's
// error (400), whatever the code that was reading it (the agent client, the
// upload store) made of it.
type clientBody struct {
	r   io.Reader
	err error
}

func (c *clientBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && c.err == nil {
		c.err = err
	}
	return n, err
}

// explain returns the client's error when reading its body failed, else err.
func (c *clientBody) explain(err error) error {
	if c.err == nil {
		return err
	}
	if hasKind(c.err) {
		return c.err // the body's own reason (it came too slowly)
	}
	var maxErr *http.MaxBytesError
	if errors.As(c.err, &maxErr) {
		return errdefs.TooLarge("upload is larger than the limit of %d bytes", maxErr.Limit)
	}
	return errdefs.InvalidArgument("the upload ended early or is malformed: %v", c.err)
}
