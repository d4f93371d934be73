package httpapi

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/build"
	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
)

// maxRecipeBytes bounds a recipe, as a body or as the "recipe" part.
const maxRecipeBytes = 1 << 20

// keepAliveInterval is how often a build stream that has nothing to say
// sends an SSE comment, so that proxies do not drop a connection during a
// long silent step (and a client learns early that the peer is gone).
var keepAliveInterval = 15 * time.Second

// The content types of POST /v1/images.
var (
	recipeTypes  = []string{"application/json", "application/yaml", "text/yaml", "application/x-yaml"}
	archiveTypes = []string{"application/x-tar", "application/octet-stream", "application/vnd.oci.image.layout.v1+tar"}
)

// createImage is POST /v1/images: a build from a recipe (a JSON or YAML
// body, or a multipart body with a "recipe" part and an optional "context"
// tar), or the import of an image archive (a tar body with ?name=).
//
// A build takes minutes. The daemon's HTTP server has no write timeout and
// the handler clears any per-request deadline, so only the client going away
// (which cancels the request's context, and with it the build) ends it early.
func (s *Server) createImage(w http.ResponseWriter, r *http.Request) error {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})

	header := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(header)
	if err != nil && header != "" {
		return errdefs.InvalidArgument("Content-Type %q: %v; %s", header, err, acceptedImageTypes())
	}
	name := r.URL.Query().Get("name")
	errName := errdefs.InvalidArgument("name: the query names an imported image; a build takes its name from the recipe")
	switch {
	case slices.Contains(recipeTypes, mt):
		if name != "" {
			return errName
		}
		data, err := readLimited(http.MaxBytesReader(w, r.Body, maxRecipeBytes), maxRecipeBytes, "recipe")
		if err != nil {
			return err
		}
		rec, err := build.ParseRecipe(data)
		if err != nil {
			return err
		}
		return s.streamBuild(w, r, func(emit func(api.BuildEvent)) (*api.Image, error) {
			return s.mgr.BuildImage(r.Context(), rec, nil, emit)
		})

	case mt == "multipart/form-data":
		if name != "" {
			return errName
		}
		up, err := s.readBuildUpload(w, r, params["boundary"])
		if err != nil {
			return err
		}
		defer up.close()
		return s.streamBuild(w, r, func(emit func(api.BuildEvent)) (*api.Image, error) {
			img, err := s.mgr.BuildImage(r.Context(), up.recipe, up.context, emit)
			if rerr := up.readErr(); err != nil && rerr != nil {
				return nil, rerr
			}
			return img, err
		})

	case slices.Contains(archiveTypes, mt):
		if name == "" {
			return errdefs.InvalidArgument("name: an import needs the image's name: POST /v1/images?name=NAME")
		}
		// The importer reads the archive while the stream reports its
		// progress: without full duplex, the first event would make the
		// server swallow the rest of the body.
		_ = rc.EnableFullDuplex()
		defer drainBody(r.Body)
		// The archive is bounded as sent, before it is decompressed here;
		// what it expands to, the image store bounds.
		limit := s.cfg.MaxImageArchiveBytes
		if r.ContentLength > limit {
			return image.ArchiveTooLarge("image archive", limit)
		}
		sent := image.LimitArchive(r.Body, "image archive", limit)
		archive, err := gunzipMaybe(sent)
		if err != nil {
			return err
		}
		return s.streamBuild(w, r, func(emit func(api.BuildEvent)) (*api.Image, error) {
			img, err := s.mgr.ImportImage(r.Context(), name, archive, emit)
			if berr := sent.Exceeded(); err != nil && berr != nil {
				return nil, berr // whatever the importer made of it
			}
			return img, err
		})
	}
	if header == "" {
		return errdefs.InvalidArgument("no Content-Type; %s", acceptedImageTypes())
	}
	return errdefs.InvalidArgument("Content-Type %q is not accepted; %s", mt, acceptedImageTypes())
}

func acceptedImageTypes() string {
	return "send a recipe as " + strings.Join(recipeTypes, ", ") +
		"; a recipe with its build context as multipart/form-data (parts recipe and context)" +
		"; or an image archive to import (docker save, or an OCI layout as a tar) as " + strings.Join(archiveTypes, ", ") + " with ?name=NAME"
}

// readLimited reads r up to limit bytes; more is a too_large error about what.
func readLimited(r io.Reader, limit int64, what string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return nil, errdefs.TooLarge("%s is larger than %d bytes", what, limit)
		}
		return nil, errdefs.InvalidArgument("reading the %s: %v", what, err)
	}
	if int64(len(data)) > limit {
		return nil, errdefs.TooLarge("%s is larger than %d bytes", what, limit)
	}
	return data, nil
}

// buildUpload is a multipart build as read so far: the recipe, and the
// build context to read from (nil: none).
type buildUpload struct {
	recipe  *api.Recipe
	context io.Reader
	spool   *os.File       // when the context came before the recipe
	stream  *contextReader // when the context is read from the request
	body    io.Reader      // the request's body, when the context is read from it
}

func (u *buildUpload) close() {
	if u.spool != nil {
		u.spool.Close()
	}
	if u.body != nil {
		drainBody(u.body)
	}
}

// readErr says why reading the streamed context failed, if it did: the
// builder's error then only echoes it, with a kind that may be lost.
func (u *buildUpload) readErr() error {
	if u.stream == nil {
		return nil
	}
	return u.stream.err
}

// readBuildUpload reads a multipart build: the "recipe" part (JSON or YAML
// text, up to 1 MiB) and the optional "context" part (a tar, or a gzipped
// tar) of at most MaxUploadBytes. When the recipe comes first, as the Go
// client and the CLI send it, the context is not read here: the builder
// reads it from the request as it arrives. A context that comes first is
// spooled to an unlinked temporary file (never held in memory) until the
// recipe is read.
func (s *Server) readBuildUpload(w http.ResponseWriter, r *http.Request, boundary string) (_ *buildUpload, err error) {
	if boundary == "" {
		return nil, errdefs.InvalidArgument("multipart/form-data without a boundary")
	}
	// The context as sent is bounded by the upload limit and by the image
	// archive limit, whichever is smaller; what it expands to, the builder
	// bounds.
	limit, note := s.cfg.MaxUploadBytes, ""
	if s.cfg.MaxImageArchiveBytes < limit {
		limit, note = s.cfg.MaxImageArchiveBytes, " (--max-image-archive-mb)"
	}
	bodyLimit := limit + maxRecipeBytes + 64<<10
	if r.ContentLength > bodyLimit {
		return nil, errdefs.TooLarge("upload of %d bytes is larger than the build context limit of %d bytes%s", r.ContentLength, limit, note)
	}
	mr := multipart.NewReader(http.MaxBytesReader(w, r.Body, bodyLimit), boundary)
	u := &buildUpload{}
	defer func() {
		if err != nil {
			u.close()
		}
	}()
	var recipe []byte
parts:
	for {
		part, perr := mr.NextPart()
		if errors.Is(perr, io.EOF) {
			break
		}
		if perr != nil {
			return nil, multipartErr(perr, limit, note)
		}
		switch part.FormName() {
		case "recipe":
			if recipe != nil {
				return nil, errdefs.InvalidArgument("multipart body has more than one recipe part")
			}
			if recipe, err = readLimited(part, maxRecipeBytes, "recipe"); err != nil {
				return nil, err
			}
		case "context":
			if u.spool != nil {
				return nil, errdefs.InvalidArgument("multipart body has more than one context part")
			}
			if recipe != nil {
				// The builder reads it while the stream may report: full
				// duplex, or the server would swallow the rest of the body
				// at the first event.
				_ = http.NewResponseController(w).EnableFullDuplex()
				u.stream = &contextReader{r: part, limit: limit, note: note}
				u.body = r.Body
				if u.context, err = gunzipMaybe(u.stream); err != nil {
					if u.stream.err != nil {
						return nil, u.stream.err
					}
					return nil, err
				}
				break parts // what follows the context is not read
			}
			if u.spool, err = os.CreateTemp("", "forkbox-build-context-*"); err != nil {
				return nil, fmt.Errorf("spooling the build context: %w", err)
			}
			os.Remove(u.spool.Name()) // gone when closed, whatever happens
			n, cerr := io.Copy(u.spool, io.LimitReader(part, limit+1))
			if cerr != nil {
				if isWriteErr(cerr, u.spool) {
					if diskspace.IsFull(cerr) {
						return nil, diskspace.Full(os.TempDir(), "the build context (spooled until its recipe is read)", n, true, cerr)
					}
					return nil, fmt.Errorf("spooling the build context: %w", cerr)
				}
				return nil, multipartErr(cerr, limit, note)
			}
			if n > limit {
				return nil, errdefs.TooLarge("build context is larger than the limit of %d bytes%s", limit, note)
			}
			if _, err = u.spool.Seek(0, io.SeekStart); err != nil {
				return nil, err
			}
			if u.context, err = gunzipMaybe(u.spool); err != nil {
				return nil, err
			}
		default:
			return nil, errdefs.InvalidArgument("unknown part %q in the multipart body: want recipe and, optionally, context", part.FormName())
		}
	}
	if recipe == nil {
		return nil, errdefs.InvalidArgument("multipart body has no recipe part")
	}
	if u.recipe, err = build.ParseRecipe(recipe); err != nil {
		return nil, err
	}
	return u, nil
}

// contextReader reads a streamed build context, bounded by limit, and keeps
// the reason a read failed (too large, a malformed or cut body) as an error
// of the right kind.
type contextReader struct {
	r     io.Reader
	n     int64
	limit int64
	note  string // names the flag of the limit, when it is not the upload limit
	err   error
}

func (c *contextReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	switch {
	case c.n > c.limit:
		c.err = errdefs.TooLarge("build context is larger than the limit of %d bytes%s", c.limit, c.note)
		return 0, c.err
	case err != nil && !errors.Is(err, io.EOF):
		c.err = multipartErr(err, c.limit, c.note)
		return n, c.err
	}
	return n, err
}

// drainBody reads what is left of a full-duplex request's body, up to as
// much as the server itself would read after the handler, so that the end of
// the body is seen while the handler runs. (Go 1.26: when a full-duplex
// handler returns with less than 256 KiB of its body unread, the server's
// closing read of the body restarts the connection's background read after
// it was stopped, and reading the next request panics with "invalid
// concurrent Body.Read call". With more left, the server closes the
// connection instead, which is fine.)
func drainBody(body io.Reader) {
	_, _ = io.CopyN(io.Discard, body, 256<<10)
}

// isWriteErr tells a failed write of the spool file (a full disk, say: the
// daemon's problem) from a failed read of the upload (the client's).
func isWriteErr(err error, f *os.File) bool {
	var pe *os.PathError
	return errors.As(err, &pe) && pe.Path == f.Name()
}

func multipartErr(err error, limit int64, note string) error {
	var maxErr *http.MaxBytesError
	if errors.As(err, &maxErr) {
		return errdefs.TooLarge("upload is larger than the build context limit of %d bytes%s", limit, note)
	}
	return errdefs.InvalidArgument("malformed multipart body: %v", err)
}

// gunzipMaybe returns r decompressed when it starts like gzip, else r as is.
func gunzipMaybe(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(2)
	if len(magic) < 2 || magic[0] != 0x1f || magic[1] != 0x8b {
		return br, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, errdefs.InvalidArgument("the archive looks gzipped but is not: %v", err)
	}
	return zr, nil
}

// streamBuild runs a build or an import. With Accept: text/event-stream its
// events become SSE events named by their type (step, log), then a done event
// with the image, or an error event (api.ErrorBody) when it fails after the
// stream began; a failure before any event is a plain error answer. Without
// SSE the answer is 201 with the image.
func (s *Server) streamBuild(w http.ResponseWriter, r *http.Request, run func(emit func(api.BuildEvent)) (*api.Image, error)) error {
	if !wantsSSE(r) {
		img, err := run(func(api.BuildEvent) {})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, img)
		return nil
	}
	stream := &lazySSE{w: w}
	var (
		mu   sync.Mutex
		open = true
	)
	emit := func(ev api.BuildEvent) {
		switch ev.Type {
		case "", api.BuildEventDone, api.BuildEventError:
			return // the stream's end is this handler's to send
		}
		mu.Lock()
		defer mu.Unlock()
		if open { // an event after the build returned has nowhere to go
			stream.emit(string(ev.Type), ev)
		}
	}
	stop := keepAlive(stream, keepAliveInterval)
	img, err := run(emit)
	mu.Lock()
	open = false
	mu.Unlock()
	stop()
	if err != nil {
		return stream.fail(string(api.BuildEventError), err)
	}
	stream.emit(string(api.BuildEventDone), api.BuildEvent{Type: api.BuildEventDone, Image: img})
	return nil
}

// keepAlive sends an SSE comment on l every interval until stop is called
// (which waits for the sender to be done). A build that has not said
// anything yet for a whole interval (waiting for another build of the same
// image, say) commits to the stream then.
func keepAlive(l *lazySSE, every time.Duration) (stop func()) {
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				l.mu.Lock()
				if l.stream == nil {
					l.stream = newSSE(l.w)
				}
				fmt.Fprint(l.stream.w, ": keepalive\n\n")
				l.stream.flush()
				l.mu.Unlock()
			}
		}
	}()
	return func() {
		close(quit)
		<-exited
	}
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) error {
	page, err := pageParams(r.URL.Query())
	if err != nil {
		return err
	}
	imgs, next, err := s.mgr.ListImagesPage(r.Context(), page)
	if err != nil {
		return err
	}
	if imgs == nil {
		imgs = []api.Image{}
	}
	list := api.ImageList{Images: imgs, NextCursor: next}
	for _, b := range s.mgr.ImageReadiness() {
		// On the first page only: a client that walks the pages sees
		// each once.
		if b.State != api.ImageReady && page.Cursor == "" {
			list.Building = append(list.Building, b)
		}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) getImage(w http.ResponseWriter, r *http.Request) error {
	img, err := s.mgr.GetImage(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, img)
	return nil
}

func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) error {
	if err := s.mgr.DeleteImage(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
