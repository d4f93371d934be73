// Package notebook converts between forkbox's cell history and Jupyter
// notebooks (nbformat 4.5, the .ipynb JSON): a sandbox's or conversation's
// cells export as a notebook with their outputs, and an uploaded notebook's
// code cells are read for running.
package notebook

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// MediaType is the media type of a .ipynb file.
const MediaType = "application/x-ipynb+json"

// Item is one cell of a notebook being made: Markdown text, or a code Cell.
type Item struct {
	Markdown string
	Cell     *api.Cell
}

// mimes maps forkbox's result keys back to their MIME types.
var mimes = map[string]string{
	"text":       "text/plain",
	"html":       "text/html",
	"markdown":   "text/markdown",
	"latex":      "text/latex",
	"png":        "image/png",
	"jpeg":       "image/jpeg",
	"svg":        "image/svg+xml",
	"json":       "application/json",
	"javascript": "application/javascript",
	"pdf":        "application/pdf",
}

// Build makes an nbformat 4.5 notebook of items, in order. language is the
// kernel's ("python" or an R kernel's "r"; "" is python).
func Build(items []Item, language string) ([]byte, error) {
	cells := make([]map[string]any, 0, len(items))
	for i, it := range items {
		id := fmt.Sprintf("cell-%d", i+1)
		if it.Cell == nil {
			cells = append(cells, map[string]any{"cell_type": "markdown", "id": id, "metadata": map[string]any{}, "source": it.Markdown})
			continue
		}
		c := it.Cell
		var count any
		outputs := []map[string]any{}
		if e := c.Execution; e != nil {
			if e.ExecutionCount > 0 {
				count = e.ExecutionCount
			}
			outputs = outputsOf(e, count)
		}
		meta := map[string]any{"forkbox": map[string]any{"source": c.Source, "cell_id": c.ID, "created_at": c.CreatedAt}}
		cells = append(cells, map[string]any{"cell_type": "code", "id": id, "execution_count": count,
			"metadata": meta, "outputs": outputs, "source": c.Code})
	}
	kernel := map[string]any{"name": "python3", "display_name": "Python 3", "language": "python"}
	info := map[string]any{"name": "python"}
	if strings.EqualFold(language, "r") || language == "ir" {
		kernel = map[string]any{"name": "ir", "display_name": "R", "language": "R"}
		info = map[string]any{"name": "R"}
	}
	nb := map[string]any{
		"nbformat": 4, "nbformat_minor": 5,
		"metadata": map[string]any{"kernelspec": kernel, "language_info": info},
		"cells":    cells,
	}
	return json.MarshalIndent(nb, "", " ")
}

// outputsOf turns an execution into notebook outputs: its stdout and
// stderr as streams, its results as display data (the main one as the
// execute result), its error last.
func outputsOf(e *api.Execution, count any) []map[string]any {
	var out []map[string]any
	if s := strings.Join(e.Logs.Stdout, ""); s != "" {
		out = append(out, map[string]any{"output_type": "stream", "name": "stdout", "text": s})
	}
	if s := strings.Join(e.Logs.Stderr, ""); s != "" {
		out = append(out, map[string]any{"output_type": "stream", "name": "stderr", "text": s})
	}
	for _, r := range e.Results {
		data := map[string]any{}
		for k, v := range r {
			if mime, ok := mimes[k]; ok {
				data[mime] = v
			}
		}
		if extra, ok := r["extra"].(map[string]any); ok {
			for mime, v := range extra {
				if strings.Contains(mime, "/") {
					data[mime] = v
				}
			}
		}
		if len(data) == 0 {
			continue
		}
		if main, _ := r["is_main_result"].(bool); main && count != nil {
			out = append(out, map[string]any{"output_type": "execute_result", "execution_count": count, "data": data, "metadata": map[string]any{}})
		} else {
			out = append(out, map[string]any{"output_type": "display_data", "data": data, "metadata": map[string]any{}})
		}
	}
	if e.Error != nil {
		tb := e.Error.Traceback
		if tb == nil {
			tb = []string{}
		}
		out = append(out, map[string]any{"output_type": "error", "ename": e.Error.Name, "evalue": e.Error.Value, "traceback": tb})
	}
	if out == nil {
		out = []map[string]any{}
	}
	return out
}

// Code is a code cell of an uploaded notebook.
type Code struct {
	Source string
}

// Parsed is what running an uploaded notebook needs: its code cells, in
// order, and its kernel's language ("python" unless it says otherwise).
type Parsed struct {
	Cells    []Code
	Language string
}

// MaxCells bounds the code cells of an uploaded notebook.
const MaxCells = 1000

var langRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$`)

// Parse reads a notebook (nbformat 4) for running: its code cells (empty
// ones skipped) and its kernel's language. What is not a notebook is
// errdefs.ErrInvalidArgument naming what is wrong.
func Parse(data []byte) (*Parsed, error) {
	var nb struct {
		NBFormat *int `json:"nbformat"`
		Metadata struct {
			Kernelspec struct {
				Name     string `json:"name"`
				Language string `json:"language"`
			} `json:"kernelspec"`
			LanguageInfo struct {
				Name string `json:"name"`
			} `json:"language_info"`
		} `json:"metadata"`
		Cells []struct {
			CellType string          `json:"cell_type"`
			Source   json.RawMessage `json:"source"`
		} `json:"cells"`
		Worksheets json.RawMessage `json:"worksheets"`
	}
	if err := json.Unmarshal(data, &nb); err != nil {
		return nil, errdefs.InvalidArgument("not a Jupyter notebook (.ipynb JSON): %v", err)
	}
	switch {
	case nb.NBFormat == nil:
		return nil, errdefs.InvalidArgument("not a Jupyter notebook: no nbformat field")
	case *nb.NBFormat < 4:
		return nil, errdefs.InvalidArgument("nbformat %d is not supported: save the notebook as nbformat 4 (Jupyter's File → Save does)", *nb.NBFormat)
	case *nb.NBFormat > 4:
		return nil, errdefs.InvalidArgument("nbformat %d is newer than this forkbox reads (4)", *nb.NBFormat)
	}
	p := &Parsed{Language: "python"}
	for _, l := range []string{nb.Metadata.Kernelspec.Language, nb.Metadata.LanguageInfo.Name} {
		if l != "" {
			if !langRE.MatchString(l) {
				return nil, errdefs.InvalidArgument("the notebook's kernel language %q is not a language name", l)
			}
			p.Language = strings.ToLower(l)
			break
		}
	}
	for i, c := range nb.Cells {
		if c.CellType != "code" {
			continue
		}
		src, err := source(c.Source)
		if err != nil {
			return nil, errdefs.InvalidArgument("cell %d: %v", i+1, err)
		}
		if strings.TrimSpace(src) == "" {
			continue
		}
		if len(p.Cells) == MaxCells {
			return nil, errdefs.InvalidArgument("the notebook has more than %d code cells", MaxCells)
		}
		p.Cells = append(p.Cells, Code{Source: src})
	}
	return p, nil
}

// source reads a cell's source: a string or a list of strings.
func source(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return "", fmt.Errorf("source is neither a string nor a list of strings")
	}
	return strings.Join(lines, ""), nil
}

// Conversation lays out a conversation as notebook items: a title, then
// each turn's question, the model's steps and the answer, with the cells a
// person ran between turns (Cells of source "user") placed by time. cells
// are the conversation's sandbox's, oldest first.
func Conversation(title string, turns []api.ChatTurn, cells []api.Cell) []Item {
	items := []Item{{Markdown: "# " + title}}
	var user []api.Cell
	for _, c := range cells {
		if c.Source != api.CellModel {
			user = append(user, c)
		}
	}
	sort.SliceStable(user, func(i, j int) bool { return user[i].CreatedAt.Before(user[j].CreatedAt) })
	for _, t := range turns {
		for len(user) > 0 && user[0].CreatedAt.Before(t.CreatedAt) {
			items = append(items, Item{Cell: &user[0]})
			user = user[1:]
		}
		items = append(items, Item{Markdown: "**Question:** " + t.Question})
		for i := range t.Steps {
			s := t.Steps[i]
			items = append(items, Item{Cell: &api.Cell{Source: api.CellModel, Code: s.Code, Language: "python", Execution: s.Execution}})
		}
		switch {
		case t.Answer != "":
			items = append(items, Item{Markdown: t.Answer})
		case t.Error != "":
			items = append(items, Item{Markdown: "*The turn failed:* " + t.Error})
		}
	}
	for i := range user {
		items = append(items, Item{Cell: &user[i]})
	}
	return items
}
