package mcpserver

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

// imageFormats are the result formats returned as MCP image content, in
// the order they are preferred when a result carries several.
var imageFormats = []struct{ key, mime string }{
	{"png", "image/png"},
	{"jpeg", "image/jpeg"},
	{"gif", "image/gif"},
	{"webp", "image/webp"},
}

// textFormats are the result formats tried, in order, for a result's text
// when it has no image.
var textFormats = []string{"text", "markdown", "latex", "html", "svg", "javascript"}

// executionResult turns a cell's execution into MCP content, in this
// order: stdout, stderr, each result (an image for every PNG or JPEG, else
// its text; the main result, the value of the last expression, as
// "[result]"), and the error with its traceback, which also marks the
// result as an error so the model sees that the code failed.
func executionResult(ex *api.Execution) *mcp.CallToolResult {
	res := &mcp.CallToolResult{}
	text := func(s string) { res.Content = append(res.Content, &mcp.TextContent{Text: s}) }
	if s := strings.Join(ex.Logs.Stdout, ""); s != "" {
		text("[stdout]\n" + s)
	}
	if s := strings.Join(ex.Logs.Stderr, ""); s != "" {
		text("[stderr]\n" + s)
	}
	for _, r := range ex.Results {
		main := r["is_main_result"] == true
		imaged := false
		for _, f := range imageFormats {
			s, ok := r[f.key].(string)
			if !ok || s == "" {
				continue
			}
			data, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
			if err != nil {
				text(fmt.Sprintf("[image: undecodable %s result: %v]", f.key, err))
				continue
			}
			res.Content = append(res.Content, &mcp.ImageContent{MIMEType: f.mime, Data: data})
			imaged = true
			break
		}
		if imaged && !main {
			continue // the text of a figure is only "<Figure size 640x480 with 1 Axes>"
		}
		for _, f := range textFormats {
			if s, ok := r[f].(string); ok && s != "" {
				label := "[display]"
				if main {
					label = "[result]"
				}
				if f != "text" {
					label = strings.TrimSuffix(label, "]") + " " + f + "]"
				}
				text(label + "\n" + s)
				break
			}
		}
	}
	if e := ex.Error; e != nil {
		var b strings.Builder
		fmt.Fprintf(&b, "[error] %s: %s", e.Name, e.Value)
		if tb := strings.TrimRight(strings.Join(e.Traceback, "\n"), "\n"); tb != "" {
			b.WriteString("\n")
			b.WriteString(tb)
		}
		text(b.String())
		res.IsError = true
	}
	if len(res.Content) == 0 {
		text("(no output)")
	}
	return res
}

// codeSummary is run_code's structured output: the execution without its
// images (they are in the content).
type codeSummary struct {
	ExecutionCount int                 `json:"execution_count"`
	ContextID      string              `json:"context_id,omitempty"`
	DurationMS     int64               `json:"duration_ms"`
	Stdout         string              `json:"stdout"`
	Stderr         string              `json:"stderr"`
	Text           string              `json:"text,omitempty"`
	Images         int                 `json:"images,omitempty"`
	Error          *api.ExecutionError `json:"error,omitempty"`
}

func executionSummary(ex *api.Execution) codeSummary {
	s := codeSummary{
		ExecutionCount: ex.ExecutionCount, ContextID: ex.ContextID, DurationMS: ex.DurationMS,
		Stdout: strings.Join(ex.Logs.Stdout, ""), Stderr: strings.Join(ex.Logs.Stderr, ""),
		Text: client.MainText(ex), Error: ex.Error,
	}
	for _, r := range ex.Results {
		for _, f := range imageFormats {
			if v, ok := r[f.key].(string); ok && v != "" {
				s.Images++
				break
			}
		}
	}
	return s
}

// sniff names the MIME type of data from its first bytes.
func sniff(data []byte) string {
	t := http.DetectContentType(data)
	if i := strings.IndexByte(t, ';'); i >= 0 {
		t = t[:i]
	}
	return t
}

func isImage(mime string) bool {
	switch mime {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return true
	}
	return false
}

// isText reports whether data reads as text: valid UTF-8 without NUL bytes.
func isText(data []byte) bool {
	return utf8.Valid(data) && bytes.IndexByte(data, 0) < 0
}
