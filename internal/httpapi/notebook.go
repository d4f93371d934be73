package httpapi

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/notebook"
	"github.com/forkbox/forkbox/internal/sandbox"
)

// maxNotebookBytes bounds an uploaded notebook (outputs included).
const maxNotebookBytes = 32 << 20

// listCells answers GET /v1/sandboxes/{sandbox}/cells: the code the sandbox
// ran, oldest first.
func (s *Server) listCells(w http.ResponseWriter, r *http.Request) error {
	cells, err := s.mgr.Cells(r.Context(), r.PathValue("sandbox"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.CellList{Cells: cells})
	return nil
}

// sandboxNotebook answers GET /v1/sandboxes/{sandbox}/notebook: its cells as
// a Jupyter notebook, with their outputs.
func (s *Server) sandboxNotebook(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.mgr.Get(r.Context(), r.PathValue("sandbox"))
	if err != nil {
		return err
	}
	cells, err := s.mgr.Cells(r.Context(), sb.ID)
	if err != nil {
		return err
	}
	label := sb.ID
	if sb.Name != "" {
		label = sb.Name + " (" + sb.ID + ")"
	}
	items := []notebook.Item{{Markdown: fmt.Sprintf("# forkbox sandbox %s\n\nThe cells it ran, with their outputs.", label)}}
	lang := ""
	for i := range cells {
		items = append(items, notebook.Item{Cell: &cells[i]})
		if lang == "" {
			lang = cells[i].Language
		}
	}
	name := sb.Name
	if name == "" {
		name = sb.ID
	}
	return writeNotebook(w, name, items, lang)
}

// conversationNotebook answers GET /v1/conversations/{id}/notebook: its
// questions, the model's steps with their outputs, its answers, and the
// cells the person ran, in order.
func (s *Server) conversationNotebook(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.analyst()
	if err != nil {
		return err
	}
	c, err := svc.GetConversation(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeNotebook(w, c.Title, notebook.Conversation(c.Title, c.Turns, c.Cells), "python")
}

// unsafeFileChars are what a download's file name does not keep.
var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func writeNotebook(w http.ResponseWriter, name string, items []notebook.Item, lang string) error {
	b, err := notebook.Build(items, lang)
	if err != nil {
		return err
	}
	file := unsafeFileChars.ReplaceAllString(name, "-")
	if len(file) > 80 {
		file = file[:80]
	}
	if file == "" || file == "-" {
		file = "notebook"
	}
	w.Header().Set("Content-Type", notebook.MediaType)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": file + ".ipynb"}))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	return nil
}

// runNotebook answers POST /v1/sandboxes/{sandbox}/notebook: the uploaded
// notebook's code cells run in the sandbox in order, stopping at the first
// that fails. JSON: every cell at the end; SSE: a "cell" event as each
// finishes, then "done".
func (s *Server) runNotebook(w http.ResponseWriter, r *http.Request) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxNotebookBytes))
	var maxErr *http.MaxBytesError
	if errors.As(err, &maxErr) {
		return errdefs.TooLarge("a notebook is at most %d MiB", maxNotebookBytes>>20)
	}
	if err != nil {
		return errdefs.InvalidArgument("reading the notebook: %v", err)
	}
	nb, err := notebook.Parse(body)
	if err != nil {
		return err
	}
	lang := nb.Language
	if lang == "python" {
		lang = ""
	}
	ref := r.PathValue("sandbox")
	run := api.NotebookRun{Cells: []api.Cell{}, Total: len(nb.Cells)}
	sse := wantsSSE(r)
	stream := &lazySSE{w: w}
	for _, c := range nb.Cells {
		var cell api.Cell
		exec, err := s.mgr.RunCode(r.Context(), ref, &api.RunCodeRequest{Code: c.Source, Language: lang},
			sandbox.CodeOptions{OnRecorded: func(c api.Cell) { cell = c }})
		if err != nil {
			if sse {
				return stream.fail(api.EventFailure, err)
			}
			return err
		}
		if cell.ID == "" { // no history kept: the answer still has the run
			cell = api.Cell{Code: c.Source, Language: nb.Language, Source: api.CellUser, ContextID: exec.ContextID, Execution: exec}
		}
		run.Ran++
		if sse {
			stream.emit(api.EventCell, cell)
		} else {
			run.Cells = append(run.Cells, cell)
		}
		if exec.Error != nil {
			run.Stopped = run.Ran < run.Total
			break
		}
	}
	if sse {
		run.Cells = nil
		stream.emit(api.EventDone, run)
		return nil
	}
	writeJSON(w, http.StatusOK, run)
	return nil
}
