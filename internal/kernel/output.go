package kernel

import (
	"encoding/json"
	"regexp"
	"strings"
)

// Execution is the result of running one cell, as docs/API.md ("The execution
// result") describes it.
// Slices are never nil, so they encode as [] rather than null.
type Execution struct {
	Logs           Logs       `json:"logs"`
	Results        []Result   `json:"results"`
	Error          *ExecError `json:"error"` // nil on success
	ExecutionCount int        `json:"execution_count"`
}

// Logs is what the cell wrote to stdout and stderr, one string per stream
// message the kernel sent (the kernel batches writes that come close together).
type Logs struct {
	Stdout []string `json:"stdout"`
	Stderr []string `json:"stderr"`
}

// ExecError is the error a cell raised, or one forkbox reports for it
// (TimeoutError, KernelDied). Traceback lines carry no ANSI color codes.
type ExecError struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
}

// Result is one displayed value keyed by format: text, html, markdown, latex,
// png, jpeg, svg, json, javascript, pdf. Values are strings (png, jpeg and pdf
// base64 without line breaks), except json, which is the JSON value itself as
// a json.RawMessage. MIME types without a short key go under "extra", a
// map[string]any keyed by MIME type. The value of the cell's last expression
// (execute_result) has "is_main_result": true.
type Result map[string]any

// Event is one piece of output, delivered while the cell runs:
// Type "stdout" or "stderr" with Text, "result" with Result, or "error" with
// Error.
type Event struct {
	Type   string     `json:"type"`
	Text   string     `json:"text,omitempty"`
	Result Result     `json:"result,omitempty"`
	Error  *ExecError `json:"error,omitempty"`
}

// formats maps MIME types to the result keys that docs/API.md lists.
var formats = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"text/latex":             "latex",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"image/svg+xml":          "svg",
	"application/json":       "json",
	"application/javascript": "javascript",
	"application/pdf":        "pdf",
}

// newResult turns a MIME bundle (the data of display_data, execute_result or
// update_display_data) into a Result.
func newResult(data map[string]json.RawMessage, main bool) Result {
	r := Result{}
	extra := map[string]any{}
	for mime, raw := range data {
		key, known := formats[mime]
		if key == "json" {
			r[key] = raw
			continue
		}
		var v any = raw
		if s, ok := jsonString(raw); ok {
			if key == "png" || key == "jpeg" || key == "pdf" {
				s = strings.Join(strings.Fields(s), "")
			}
			v = s
		}
		if known {
			r[key] = v
		} else {
			extra[mime] = v
		}
	}
	if len(extra) > 0 {
		r["extra"] = extra
	}
	if main {
		r["is_main_result"] = true
	}
	return r
}

// jsonString decodes a JSON string, or a list of strings (the multi-line form
// notebooks use), into one string.
func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var lines []string
	if json.Unmarshal(raw, &lines) == nil {
		return strings.Join(lines, ""), true
	}
	return "", false
}

// ansi matches terminal escape sequences: CSI (colors, cursor) and OSC.
var ansi = regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]`)

func stripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansi.ReplaceAllString(s, "")
}

// newExecError builds an ExecError from the content of an error message or
// an execute_reply with status "error".
func newExecError(content json.RawMessage) *ExecError {
	var c struct {
		Ename     string   `json:"ename"`
		Evalue    string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	}
	_ = json.Unmarshal(content, &c)
	e := &ExecError{Name: stripANSI(c.Ename), Value: stripANSI(c.Evalue), Traceback: make([]string, 0, len(c.Traceback))}
	for _, line := range c.Traceback {
		e.Traceback = append(e.Traceback, stripANSI(line))
	}
	return e
}

func newExecution() *Execution {
	return &Execution{Logs: Logs{Stdout: []string{}, Stderr: []string{}}, Results: []Result{}}
}
