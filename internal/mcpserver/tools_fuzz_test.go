package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/textcut"
)

// The SDK decodes and checks the tools' JSON arguments against their
// schemas; what these targets cover is the decoding the tools do on top
// (write_file's base64 content and octal mode), and the rendering of what
// comes back from a sandbox (files and cell results, both hostile) for the
// model.

// writeRecorder is a backend that records write_file's call. Any other
// method of the embedded nil Backend would panic: the target calls none.
type writeRecorder struct {
	Backend
	calls int
	data  []byte
	mode  os.FileMode
}

func (w *writeRecorder) WriteFile(_ context.Context, _, path string, r io.Reader, mode os.FileMode) (*api.WriteFileResult, error) {
	w.calls++
	w.data, _ = io.ReadAll(r)
	w.mode = mode
	return &api.WriteFileResult{Path: path, Size: int64(len(w.data))}, nil
}

// FuzzWriteFileArgs runs write_file with any content, encoding and mode.
// It checks: no panic; a refusal is an invalid_argument error and writes
// nothing; an accepted call writes exactly the content (base64-decoded when
// asked, whitespace ignored) with the mode given in octal, at most 07777.
func FuzzWriteFileArgs(f *testing.F) {
	for _, s := range [][3]string{
		{"hello\n", "", ""},
		{"aGVs\nbG8=\n", "base64", "0755"},
		{"aGVsbG8", "base64", ""},
		{"x", "BASE64", "644"},
		{"x", "utf8", "07777"},
		{"x", "text", "10000"},
		{"x", "latin-1", ""},
		{"x", "", "0o644"},
		{"x", "", "-1"},
		{"x", "", "+644"},
		{"x", "", "000000000000000000000644"},
		{" \t\r\n", "base64", "0"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, content, encoding, mode string) {
		rec := &writeRecorder{}
		tl := &tools{b: rec, maxRead: defaultMaxReadBytes}
		_, _, err := tl.writeFile(context.Background(), writeFileIn{Sandbox: "sb", Path: "/workspace/f", Content: content, Encoding: encoding, Mode: mode})

		want := []byte(content)
		var wantErr bool
		switch strings.ToLower(encoding) {
		case "", "utf-8", "utf8", "text":
		case "base64":
			b, derr := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(content), ""))
			want, wantErr = b, derr != nil
		default:
			wantErr = true
		}
		var wantMode uint64
		if mode != "" {
			m, perr := strconv.ParseUint(mode, 8, 64)
			wantMode = m
			wantErr = wantErr || perr != nil || m > 0o7777
		}
		if err != nil {
			if !wantErr || !strings.HasPrefix(err.Error(), "invalid_argument: ") || rec.calls != 0 {
				t.Fatalf("write_file(%q, %q, %q) = %v after %d writes; want an error: %v", content, encoding, mode, err, rec.calls, wantErr)
			}
			return
		}
		if wantErr || rec.calls != 1 || !bytes.Equal(rec.data, want) || uint64(rec.mode) != wantMode {
			t.Fatalf("write_file(%q, %q, %q) wrote %q with mode %o in %d calls; want %q, %o (an error: %v)", content, encoding, mode, rec.data, rec.mode, rec.calls, want, wantMode, wantErr)
		}
	})
}

// FuzzFileResult renders any file content for read_file. It checks: no
// panic; every text the model gets is valid UTF-8 (JSON would mangle
// anything else); an image comes back byte for byte; text that is shown as
// such is the file's content (less a rune cut by the read limit); the only
// refusal is a truncated image.
func FuzzFileResult(f *testing.F) {
	f.Add([]byte("hello\n"), false, false)
	f.Add([]byte("h\xc3\xa9llo \xe2\x9c"), true, false)
	f.Add([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), false, false)
	f.Add([]byte("\x89PNG\r\n\x1a\n"), true, false)
	f.Add([]byte("GIF89a"), false, true)
	f.Add([]byte("\xff\xfe\x00binary"), false, false)
	f.Add([]byte{}, true, false)
	f.Fuzz(func(t *testing.T, data []byte, truncated, forceBase64 bool) {
		res, _, err := fileResult("/workspace/f", data, truncated, forceBase64)
		mime := sniff(data)
		if err != nil {
			if !truncated || forceBase64 || !isImage(mime) || !strings.HasPrefix(err.Error(), "invalid_argument: ") {
				t.Fatalf("fileResult(%q, %v, %v) = %v", data, truncated, forceBase64, err)
			}
			return
		}
		if len(res.Content) == 0 {
			t.Fatalf("fileResult(%q) has no content", data)
		}
		for _, c := range res.Content {
			switch c := c.(type) {
			case *mcp.TextContent:
				if !utf8.ValidString(c.Text) {
					t.Fatalf("fileResult(%q) gave text that is not UTF-8: %q", data, c.Text)
				}
			case *mcp.ImageContent:
				if forceBase64 || !bytes.Equal(c.Data, data) || c.MIMEType != mime {
					t.Fatalf("fileResult(%q) gave the image %s %q", data, c.MIMEType, c.Data)
				}
			default:
				t.Fatalf("fileResult(%q) gave content %T", data, c)
			}
		}
		if !forceBase64 && !isImage(mime) {
			text := res.Content[0].(*mcp.TextContent).Text
			shown := data
			if truncated {
				shown = textcut.Complete(data)
			}
			if isText(shown) && !strings.HasPrefix(text, string(shown)) {
				t.Fatalf("fileResult(%q) shows text %q", data, text)
			}
			if !isText(shown) && !strings.Contains(text, base64.StdEncoding.EncodeToString(data)) {
				t.Fatalf("fileResult(%q) shows binary data as %q", data, text)
			}
		}
	})
}

// FuzzExecutionResult renders any execution, as a sandbox's kernel may make
// it, for run_code. It checks: no panic; there is always some content;
// the result is an error exactly when the execution has one; images are
// only what results carry; and the structured summary encodes as JSON.
func FuzzExecutionResult(f *testing.F) {
	for _, s := range []string{
		`{"logs":{"stdout":["hi\n"],"stderr":[]},"results":[{"text":"2","is_main_result":true}],"error":null,"execution_count":1}`,
		`{"logs":{"stdout":[],"stderr":["warn"]},"results":[{"png":"iVBORw0KGgo=","text":"<Figure>"},{"jpeg":"!!notbase64"},{"markdown":"# t"}],"error":null}`,
		`{"results":[{"png":1,"gif":"R0lGOD\nlh","is_main_result":"true"}],"error":{"name":"E","value":"v","traceback":["a","b\n"]}}`,
		`{"results":[null,{}],"logs":{"stdout":null}}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var ex api.Execution
		if json.Unmarshal(raw, &ex) != nil {
			return // the client would have refused the answer
		}
		res := executionResult(&ex)
		if len(res.Content) == 0 {
			t.Fatalf("executionResult(%s) has no content", raw)
		}
		if res.IsError != (ex.Error != nil) {
			t.Fatalf("executionResult(%s): IsError %v", raw, res.IsError)
		}
		images := 0
		for _, c := range res.Content {
			if _, ok := c.(*mcp.ImageContent); ok {
				images++
			}
		}
		if images > len(ex.Results) {
			t.Fatalf("executionResult(%s): %d images from %d results", raw, images, len(ex.Results))
		}
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("executionResult(%s) does not encode: %v", raw, err)
		}
		sum := executionSummary(&ex)
		if sum.Images > len(ex.Results) {
			t.Fatalf("executionSummary(%s) counts %d images in %d results", raw, sum.Images, len(ex.Results))
		}
		if _, err := json.Marshal(sum); err != nil {
			t.Fatalf("executionSummary(%s) does not encode: %v", raw, err)
		}
	})
}
