package client

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/sse"
)

// BuildImage builds an image from a recipe and registers it under r.Name,
// replacing an image of that name. The daemon bootstraps or reuses r.Base and
// runs the steps in order; steps whose layer is cached are not run again.
//
// contextDir, when not "", is the build context: the directory that copy
// steps' Src paths are relative to. It is sent as a tar, streamed as it is
// read (regular files, directories and symbolic links). Leave it "" for a
// recipe without copy steps.
//
// onEvent (may be nil) receives the build's progress as the daemon sends it,
// on the calling goroutine: a "step" event as each step starts (Cached when
// its layer came from the cache), "log" events with its output, and last the
// "done" event whose Image is also returned. A build takes minutes; cancelling
// ctx cancels it on the daemon.
//
// Errors are *APIError: ErrInvalidArgument for a malformed recipe or a failing
// step (the message carries the step's exit status and the end of its
// output), ErrNotFound for an unknown base image, ErrConflict when the image
// to replace is in use, ErrUnavailable when the daemon cannot build images.
//
//	img, err := c.BuildImage(ctx, api.Recipe{
//		Name: "py",
//		Base: "debian:bookworm",
//		Steps: []api.RecipeStep{
//			{Run: "apt-get update && apt-get install -y --no-install-recommends python3"},
//			{Env: map[string]string{"PYTHONUNBUFFERED": "1"}},
//			{Copy: &api.CopyStep{Src: "app", Dest: "/opt/app"}},
//		},
//	}, "./build", func(ev api.BuildEvent) {
//		if ev.Type == api.BuildEventLog {
//			fmt.Println(ev.Line)
//		}
//	})
func (c *Client) BuildImage(ctx context.Context, r api.Recipe, contextDir string, onEvent func(api.BuildEvent)) (*api.Image, error) {
	if r.Steps == nil {
		r.Steps = []api.RecipeStep{} // null is not a list of steps
	}
	recipe, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if contextDir == "" {
		req, err := c.newRequest(ctx, http.MethodPost, "/v1/images", nil, bytes.NewReader(recipe))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return c.buildStream(ctx, req, onEvent)
	}
	return c.buildMultipart(ctx, recipe, "application/json", contextDir, onEvent)
}

// BuildImageYAML builds an image like BuildImage from a recipe written as
// YAML or JSON text (a recipe file), which the daemon parses as written:
//
//	name: py
//	base: debian:bookworm
//	steps:
//	  - run: apt-get update && apt-get install -y python3
//	  - copy: {src: app, dest: /opt/app}
//
// contextDir is the build context as for BuildImage ("" for none).
func (c *Client) BuildImageYAML(ctx context.Context, recipe []byte, contextDir string, onEvent func(api.BuildEvent)) (*api.Image, error) {
	return c.buildMultipart(ctx, recipe, "application/yaml", contextDir, onEvent)
}

// buildMultipart sends a build as multipart/form-data: the recipe part, then
// (when contextDir is not "") the context part, a tar written through a pipe
// as the request goes out, so that no part of the context is held whole.
func (c *Client) buildMultipart(ctx context.Context, recipe []byte, recipeType, contextDir string, onEvent func(api.BuildEvent)) (*api.Image, error) {
	if contextDir != "" {
		fi, err := os.Stat(contextDir)
		if err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("build context %s is not a directory", contextDir)
		}
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	werr := make(chan error, 1)
	go func() {
		err := writeBuildParts(mw, recipe, recipeType, contextDir)
		pw.CloseWithError(err)
		werr <- err
	}()
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/images", nil, pr)
	if err != nil {
		pr.Close()
		<-werr
		return nil, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	img, err := c.buildStream(ctx, req, onEvent)
	// The build is over: the daemon has read all of the context it will.
	// The writer is done, or blocked because the daemon refused the build
	// early: stop it. A writer that failed by itself (an unreadable file in
	// the context) says better than the transport or the daemon what went
	// wrong.
	pr.CloseWithError(errAnswered)
	if wErr := <-werr; err != nil && wErr != nil && !errors.Is(wErr, errAnswered) && !errors.Is(wErr, io.ErrClosedPipe) {
		return nil, wErr
	}
	return img, err
}

// errAnswered stops a request body's writer once the daemon has answered.
var errAnswered = errors.New("the daemon answered before the whole body was sent")

func writeBuildParts(mw *multipart.Writer, recipe []byte, recipeType, contextDir string) error {
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="recipe"`)
	h.Set("Content-Type", recipeType)
	pw, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := pw.Write(recipe); err != nil {
		return err
	}
	if contextDir != "" {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="context"; filename="context.tar"`)
		h.Set("Content-Type", "application/x-tar")
		pw, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		if err := TarDir(pw, contextDir); err != nil {
			return fmt.Errorf("build context: %w", err)
		}
	}
	return mw.Close()
}

// ImportImage imports an image archive as image name, replacing an image of
// that name: the output of docker save (or podman save), or an OCI image
// layout packed as a tar, gzipped or not. archive is streamed, never held
// whole, and not closed; an OCI layout directory can be sent with TarDir
// through an io.Pipe. onEvent (may be nil) receives the import's progress
// as for BuildImage.
//
//	f, err := os.Open("python-3.12.tar") // docker save python:3.12 > python-3.12.tar
//	if err != nil {
//		return err
//	}
//	defer f.Close()
//	img, err := c.ImportImage(ctx, "python312", f, nil)
func (c *Client) ImportImage(ctx context.Context, name string, archive io.Reader, onEvent func(api.BuildEvent)) (*api.Image, error) {
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/images", url.Values{"name": {name}}, nil)
	if err != nil {
		return nil, err
	}
	// As in WriteFile: the body is set by hand so that the transport does
	// not close the caller's reader, with its length when it is known.
	if n, ok := knownLength(archive); ok && n == 0 {
		req.Body = http.NoBody
	} else {
		req.Body = io.NopCloser(archive)
		if ok {
			req.ContentLength = n
		}
	}
	req.Header.Set("Content-Type", "application/x-tar")
	return c.buildStream(ctx, req, onEvent)
}

// buildStream sends a build or import request asking for an event stream and
// follows the stream to its done or error event.
func (c *Client) buildStream(ctx context.Context, req *http.Request, onEvent func(api.BuildEvent)) (*api.Image, error) {
	var img *api.Image
	err := c.followStream(ctx, req, "build", func(body io.Reader) error {
		img = new(api.Image)
		return decodeJSON(body, img)
	}, func(ev sse.Event) error {
		if ev.Name == string(api.BuildEventError) {
			return failureError(ev.Data)
		}
		var be api.BuildEvent
		if err := decodeEvent(ev, &be); err != nil {
			return err
		}
		if be.Type == "" {
			be.Type = api.BuildEventType(ev.Name)
		}
		if onEvent != nil {
			onEvent(be)
		}
		if ev.Name == string(api.BuildEventDone) {
			if be.Image == nil {
				return fmt.Errorf("done event without an image")
			}
			img = be.Image
			return errStreamDone
		}
		// step, log, and kinds of event from a newer daemon went to onEvent.
		return nil
	})
	if err != nil {
		return nil, err
	}
	return img, nil
}

// ListImages returns every image, by name.
func (c *Client) ListImages(ctx context.Context) ([]api.Image, error) {
	list, err := c.ImageList(ctx)
	if err != nil {
		return nil, err
	}
	return list.Images, nil
}

// ImageList returns every image and the daemon's own images being built
// now: it follows the list's pages to the last (ListImagesPage returns
// one).
func (c *Client) ImageList(ctx context.Context) (*api.ImageList, error) {
	out := &api.ImageList{Images: []api.Image{}}
	err := c.walk(ctx, func(ctx context.Context, p Page) (string, error) {
		list, err := c.ListImagesPage(ctx, p)
		if err != nil {
			return "", err
		}
		out.Images = append(out.Images, list.Images...)
		out.Building = append(out.Building, list.Building...)
		return list.NextCursor, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetImage returns one image by name.
func (c *Client) GetImage(ctx context.Context, name string) (*api.Image, error) {
	var img api.Image
	if err := c.doJSON(ctx, http.MethodGet, imagePath(name), nil, nil, &img); err != nil {
		return nil, err
	}
	return &img, nil
}

// DeleteImage deletes an image and frees the layers no other image uses. It
// fails with ErrConflict while a sandbox (running or suspended) or a
// snapshot uses the image; the message names them.
func (c *Client) DeleteImage(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, imagePath(name), nil, nil, nil)
}

// imagePath returns /v1/images/{name} with the name escaped.
func imagePath(name string) string {
	return "/v1/images/" + url.PathEscape(name)
}

// TarDir writes the tree under dir to w as a tar stream: what BuildImage
// sends as a build context, and what ImportImage takes for an OCI image
// layout directory. Names are relative to dir, with slashes; directories,
// regular files and symbolic links (as links, never followed) are written in
// lexical order, without owner names or ids, so that the same tree gives the
// same tar. Other kinds of file (sockets, devices, FIFOs) are skipped.
func TarDir(w io.Writer, dir string) error {
	// dir itself may be a symbolic link (to the directory meant); the links
	// inside it are written as links.
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		switch mode := info.Mode(); {
		case mode.IsDir(), mode.IsRegular():
		case mode&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.ModTime = info.ModTime().Truncate(time.Second)
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if n != hdr.Size {
			return fmt.Errorf("%s changed size while it was read", p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
