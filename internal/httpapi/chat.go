package httpapi

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/analyst"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// analyst returns the chat service, or an error when this server has none.
func (s *Server) analyst() (*analyst.Service, error) {
	if s.cfg.Chat == nil {
		return nil, errdefs.Unavailable("chat is not enabled on this server")
	}
	return s.cfg.Chat, nil
}

// chat answers a question (POST /v1/chat): JSON, or with SSE the loop's
// events as they happen, then done with the whole answer.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.analyst()
	if err != nil {
		return err
	}
	// A question may carry a CSV inline: allow an upload's size.
	var req api.ChatRequest
	if err := s.decodeJSONLimit(w, r, &req, svc.MaxUploadBytes()+(1<<20)); err != nil {
		return err
	}
	if !wantsSSE(r) {
		res, err := svc.Ask(r.Context(), &req, nil)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	stream := &lazySSE{w: w}
	res, err := svc.Ask(r.Context(), &req, func(ev api.ChatEvent) { stream.emit(string(ev.Type), ev) })
	if err != nil {
		return stream.fail(api.ChatEventError, err)
	}
	stream.emit(api.ChatEventDone, res)
	return nil
}

func (s *Server) createConversation(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.analyst()
	if err != nil {
		return err
	}
	var req api.CreateConversationRequest
	if r.ContentLength != 0 {
		if err := s.decodeJSON(w, r, &req); err != nil {
			return err
		}
	}
	c, err := svc.CreateConversation(r.Context(), req.Title)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, c)
	return nil
}

func (s *Server) listConversations(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.analyst()
	if err != nil {
		return err
	}
	page, err := pageParams(r.URL.Query())
	if err != nil {
		return err
	}
	list, err := svc.ListConversationsPage(r.Context(), page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) getConversation(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.analyst()
	if err != nil {
		return err
	}
	c, err := svc.GetConversation(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

func (s *Server) deleteConversation(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.analyst()
	if err != nil {
		return err
	}
	if err := svc.DeleteConversation(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// uploadFile takes a CSV (POST /v1/files, multipart part "file", with an
// optional "conversation_id" field before it).
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.analyst()
	if err != nil {
		return err
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return errdefs.InvalidArgument("upload a file as multipart/form-data with a part named \"file\"")
	}
	// A body the uploads dir cannot hold is refused before it is read.
	if err := svc.CheckRoom(r.ContentLength); err != nil {
		return err
	}
	// The service enforces the limit with a clear message; this bound only
	// stops a body that goes on far beyond it.
	mr := multipart.NewReader(http.MaxBytesReader(w, r.Body, svc.MaxUploadBytes()+(1<<20)), params["boundary"])
	convID := ""
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return errdefs.InvalidArgument("the upload has no part named \"file\"")
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return errdefs.TooLarge("the upload is larger than the limit of %d MiB", svc.MaxUploadBytes()>>20)
			}
			return errdefs.InvalidArgument("malformed multipart body: %v", err)
		}
		switch part.FormName() {
		case "conversation_id":
			b, err := io.ReadAll(io.LimitReader(part, 256))
			if err != nil {
				return errdefs.InvalidArgument("conversation_id: %v", err)
			}
			convID = strings.TrimSpace(string(b))
		case "file":
			name := part.FileName()
			if name == "" {
				return errdefs.InvalidArgument("the \"file\" part has no file name")
			}
			body := &clientBody{r: part}
			f, err := svc.Upload(r.Context(), name, body, convID)
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					return errdefs.TooLarge("the upload is larger than the limit of %d MiB", svc.MaxUploadBytes()>>20)
				}
				return body.explain(err)
			}
			writeJSON(w, http.StatusCreated, f)
			return nil
		}
		part.Close()
	}
}

func (s *Server) getUpload(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.analyst()
	if err != nil {
		return err
	}
	f, err := svc.GetUpload(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, f)
	return nil
}
