package httpapi

import (
	"net/http"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/sandbox"
)

func (s *Server) runCode(w http.ResponseWriter, r *http.Request) error {
	var req api.RunCodeRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	ref := r.PathValue("sandbox")
	if !wantsSSE(r) {
		exec, err := s.mgr.RunCode(r.Context(), ref, &req, sandbox.CodeOptions{})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, exec)
		return nil
	}
	// SSE: stdout, stderr, result and error events as the cell produces
	// them, then done with the whole execution.
	stream := &lazySSE{w: w}
	emit := stream.emit
	exec, err := s.mgr.RunCode(r.Context(), ref, &req, sandbox.CodeOptions{OnEvent: func(ev sandbox.CodeEvent) {
		switch ev.Type {
		case "stdout":
			emit(api.EventStdout, api.OutputChunk{Data: ev.Text})
		case "stderr":
			emit(api.EventStderr, api.OutputChunk{Data: ev.Text})
		case "result":
			emit(api.EventResult, ev.Result)
		case "error":
			emit(api.EventError, ev.Error)
		}
	}})
	if err != nil {
		return stream.fail(api.EventFailure, err)
	}
	emit(api.EventDone, exec)
	return nil
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateContextRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	c, err := s.mgr.CreateContext(r.Context(), r.PathValue("sandbox"), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, c)
	return nil
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) error {
	list, err := s.mgr.ListContexts(r.Context(), r.PathValue("sandbox"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ContextList{Contexts: list})
	return nil
}

func (s *Server) contextAction(action sandbox.ContextAction) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		c, err := s.mgr.ActOnContext(r.Context(), r.PathValue("sandbox"), r.PathValue("id"), action)
		if err != nil {
			return err
		}
		if c == nil {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		writeJSON(w, http.StatusOK, c)
		return nil
	}
}
