package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/forkbox/forkbox/api"
)

// Paths in the file methods are sandbox paths; a relative path is relative to
// /workspace in the sandbox.

func pathQuery(path string) url.Values { return url.Values{"path": {path}} }

// ReadFile returns the whole content of a file in the sandbox. For large
// files prefer ReadFileTo, which does not hold the content in memory.
func (c *Client) ReadFile(ctx context.Context, sandbox, path string) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := c.ReadFileTo(ctx, sandbox, path, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReadFileTo streams a file of the sandbox into w and returns the number of
// bytes written. On error w may have received part of the file.
func (c *Client) ReadFileTo(ctx context.Context, sandbox, path string, w io.Writer) (int64, error) {
	req, err := c.newRequest(ctx, http.MethodGet, sandboxPath(sandbox, "/files"), pathQuery(path), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.send(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("reading %s from sandbox %s: %w", path, sandbox, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("reading %s from sandbox %s: got %d of %d bytes: %w", path, sandbox, n, resp.ContentLength, io.ErrUnexpectedEOF)
	}
	return n, nil
}

// WriteFile streams r into a file of the sandbox, creating parent
// directories, and replaces the file if it exists. mode sets the permission
// bits (0 leaves the daemon's default, 0644). r is read to EOF and never
// buffered whole; it is not closed.
func (c *Client) WriteFile(ctx context.Context, sandbox, path string, r io.Reader, mode os.FileMode) (*api.WriteFileResult, error) {
	q := pathQuery(path)
	if mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", mode.Perm()))
	}
	req, err := c.newRequest(ctx, http.MethodPut, sandboxPath(sandbox, "/files"), q, nil)
	if err != nil {
		return nil, err
	}
	// Set the body by hand: http.NewRequest would let the transport close
	// an *os.File that belongs to the caller. A known length is sent as
	// Content-Length (the daemon can refuse an oversized file up front);
	// otherwise the body goes chunked.
	if n, ok := knownLength(r); ok && n == 0 {
		req.Body = http.NoBody
	} else {
		req.Body = io.NopCloser(r)
		if ok {
			req.ContentLength = n
		}
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res api.WriteFileResult
	if err := decodeJSON(resp.Body, &res); err != nil {
		return nil, fmt.Errorf("decoding write answer: %w", err)
	}
	return &res, nil
}

// knownLength reports how many bytes r will yield, when that can be told
// without reading it.
func knownLength(r io.Reader) (int64, bool) {
	switch v := r.(type) {
	case *bytes.Buffer:
		return int64(v.Len()), true
	case *bytes.Reader:
		return int64(v.Len()), true
	case *strings.Reader:
		return int64(v.Len()), true
	case *os.File:
		fi, err := v.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return 0, false
		}
		off, err := v.Seek(0, io.SeekCurrent)
		if err != nil || off > fi.Size() {
			return 0, false
		}
		return fi.Size() - off, true
	}
	return 0, false
}

// ListFiles lists a directory of the sandbox.
func (c *Client) ListFiles(ctx context.Context, sandbox, path string) (*api.FileList, error) {
	var list api.FileList
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, "/files/list"), pathQuery(path), nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// RemoveFile removes a file or an empty directory of the sandbox; with
// recursive it removes a directory and everything in it.
func (c *Client) RemoveFile(ctx context.Context, sandbox, path string, recursive bool) error {
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", "true")
	}
	return c.doJSON(ctx, http.MethodDelete, sandboxPath(sandbox, "/files"), q, nil, nil)
}
