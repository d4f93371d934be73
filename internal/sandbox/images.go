package sandbox

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/store"
)

// ImageStore is what the Manager needs from the image store to list and
// remove images.
type ImageStore interface {
	Images
	List(ctx context.Context) ([]*image.Image, error)
	Remove(ctx context.Context, name string, inUse func(img *image.Image) error) error
}

// ImageBuilder builds images from recipes and imports OCI archives. replace
// is called before an existing image of the same name is replaced and may
// refuse.
type ImageBuilder interface {
	Build(ctx context.Context, r *api.Recipe, buildContext io.Reader, replace func(old *image.Image) error, emit func(api.BuildEvent)) (*image.Image, error)
	Import(ctx context.Context, name string, archive io.Reader, replace func(old *image.Image) error, emit func(api.BuildEvent)) (*image.Image, error)
}

// SetImageBuilder enables image builds and imports.
func (m *Manager) SetImageBuilder(b ImageBuilder) { m.builder = b }

// ImageAPI converts an image to its API shape.
func ImageAPI(img *image.Image) api.Image {
	layers := img.Layers
	if layers == nil {
		layers = []string{}
	}
	env := img.Env
	if env == nil {
		env = []string{}
	}
	return api.Image{
		Name: img.Name, ID: img.ID, Base: img.Base, Layers: layers, Env: env, WorkDir: img.WorkDir,
		User: img.User, UID: img.UID, GID: img.GID, SizeBytes: img.SizeBytes, CreatedAt: img.CreatedAt,
	}
}

func (m *Manager) imageStore() (ImageStore, error) {
	is, ok := m.images.(ImageStore)
	if !ok {
		return nil, errdefs.Unavailable("this daemon has no image store")
	}
	return is, nil
}

// ListImages returns every image, by name.
func (m *Manager) ListImages(ctx context.Context) ([]api.Image, error) {
	is, err := m.imageStore()
	if err != nil {
		return nil, err
	}
	imgs, err := is.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Image, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, ImageAPI(img))
	}
	return out, nil
}

// GetImage returns image name.
func (m *Manager) GetImage(ctx context.Context, name string) (*api.Image, error) {
	img, err := m.images.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	a := ImageAPI(img)
	return &a, nil
}

// DeleteImage removes image name and the layers no other image uses. An
// image that a sandbox (running or suspended) or a snapshot sits on is
// refused with a conflict naming them.
func (m *Manager) DeleteImage(ctx context.Context, name string) error {
	is, err := m.imageStore()
	if err != nil {
		return err
	}
	return is.Remove(ctx, name, func(img *image.Image) error {
		return m.imageInUse(ctx, img.Name, "delete")
	})
}

// imageInUse fails with a conflict when sandboxes or snapshots use image
// name, naming them (the first few).
func (m *Manager) imageInUse(ctx context.Context, name, verb string) error {
	sbs, err := m.store.List(ctx, store.ListFilter{})
	if err != nil {
		return err
	}
	var users []string
	for _, sb := range sbs {
		if sb.Image == name && sb.State != api.StateTerminated && sb.State != api.StateError {
			users = append(users, "sandbox "+sandboxRef(sb))
		}
	}
	snaps, err := m.store.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		if sn.Image == name {
			users = append(users, "snapshot "+sn.ID)
		}
	}
	if len(users) == 0 {
		return nil
	}
	const show = 5
	more := ""
	if len(users) > show {
		more = fmt.Sprintf(" and %d more", len(users)-show)
		users = users[:show]
	}
	return errdefs.Conflict("cannot %s image %q: in use by %s%s", verb, name, strings.Join(users, ", "), more)
}

func sandboxRef(sb *store.Sandbox) string {
	if sb.Name != "" {
		return sb.ID + " (" + sb.Name + ")"
	}
	return sb.ID
}

// replaceCheck refuses to replace an image that is in use. The store calls
// it only when a build changes the image.
func (m *Manager) replaceCheck(ctx context.Context) func(old *image.Image) error {
	return func(old *image.Image) error { return m.imageInUse(ctx, old.Name, "replace") }
}

// BuildImage builds r (with the tar buildContext for copy steps, or nil) and
// registers the image, streaming progress to emit.
func (m *Manager) BuildImage(ctx context.Context, r *api.Recipe, buildContext io.Reader, emit func(api.BuildEvent)) (*api.Image, error) {
	if m.builder == nil {
		return nil, errdefs.Unavailable("image builds are unavailable on this daemon")
	}
	img, err := m.builder.Build(ctx, r, buildContext, m.replaceCheck(ctx), emit)
	if err != nil {
		return nil, err
	}
	a := ImageAPI(img)
	return &a, nil
}

// ImportImage imports an OCI image archive (docker save, or an OCI layout
// as a tar) as image name.
func (m *Manager) ImportImage(ctx context.Context, name string, archive io.Reader, emit func(api.BuildEvent)) (*api.Image, error) {
	if m.builder == nil {
		return nil, errdefs.Unavailable("image imports are unavailable on this daemon")
	}
	img, err := m.builder.Import(ctx, name, archive, m.replaceCheck(ctx), emit)
	if err != nil {
		return nil, err
	}
	a := ImageAPI(img)
	return &a, nil
}
