package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/lazyre"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
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

// Images per tenant: the image store is one namespace, so a tenant's own
// images are kept there under "<tenant>+<name>" (a '+' no image name the
// API accepts can hold); the default tenant's images keep their plain names
// and are the catalog every tenant may use read-only (the built-in python
// image among them). A tenant's image shadows a catalog image of the same
// name for that tenant.

// userImageName is what an image name given through the API must match.
var userImageName = lazyre.New(`^[a-z0-9][a-z0-9._-]{0,63}$`)

const tenantImageSep = "+"

// imageKey is the image store's name for tenant t's image name.
func imageKey(t, name string) string {
	if t == tenant.Default {
		return name
	}
	return t + tenantImageSep + name
}

// imageOwner splits an image store name into its tenant and its name.
func imageOwner(key string) (t, name string) {
	if i := strings.Index(key, tenantImageSep); i >= 0 {
		return key[:i], key[i+1:]
	}
	return tenant.Default, key
}

// displayImage is the name a tenant knows an image store name by.
func displayImage(key string) string {
	_, name := imageOwner(key)
	return name
}

func checkImageName(name string) error {
	if !userImageName.MatchString(name) {
		return errdefs.InvalidArgument("invalid image name %q: use lowercase letters, digits, '.', '_' and '-' (at most 64)", name)
	}
	return nil
}

// resolveImage finds image name for the context's tenant: its own, or else
// the catalog's.
func (m *Manager) resolveImage(ctx context.Context, name string) (*image.Image, error) {
	if err := checkImageName(name); err != nil {
		return nil, err
	}
	t := owner(ctx)
	if t != tenant.Default {
		img, err := m.images.Get(ctx, imageKey(t, name))
		if err == nil || !errors.Is(err, errdefs.ErrNotFound) {
			return img, err
		}
	}
	img, err := m.images.Get(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		if berr := m.buildingErr(name); berr != nil {
			return nil, berr
		}
	}
	return img, err
}

// ownImage is the image store name of the context's tenant's own image
// name, for a change (build, import, delete): catalog images are read-only
// to other tenants.
func (m *Manager) ownImage(ctx context.Context, name, verb string) (string, error) {
	if err := checkImageName(name); err != nil {
		return "", err
	}
	t := owner(ctx)
	key := imageKey(t, name)
	if t != tenant.Default && verb == "delete" {
		if _, err := m.images.Get(ctx, key); errors.Is(err, errdefs.ErrNotFound) {
			if _, err := m.images.Get(ctx, name); err == nil {
				return "", errdefs.PermissionDenied("image %q is shared by the daemon's operator and read-only", name)
			}
		}
	}
	return key, nil
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
		Name: displayImage(img.Name), ID: img.ID, Base: displayImage(img.Base), Layers: layers, Env: env, WorkDir: img.WorkDir,
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

// ListImages returns the images the context's tenant can use, by name: its
// own and the catalog's it does not shadow.
func (m *Manager) ListImages(ctx context.Context) ([]api.Image, error) {
	is, err := m.imageStore()
	if err != nil {
		return nil, err
	}
	imgs, err := is.List(ctx)
	if err != nil {
		return nil, err
	}
	t := owner(ctx)
	own := map[string]bool{}
	for _, img := range imgs {
		if it, name := imageOwner(img.Name); it == t {
			own[name] = true
		}
	}
	out := make([]api.Image, 0, len(imgs))
	for _, img := range imgs {
		it, name := imageOwner(img.Name)
		if it == t || (it == tenant.Default && !own[name]) {
			out = append(out, ImageAPI(img))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// GetImage returns image name.
func (m *Manager) GetImage(ctx context.Context, name string) (*api.Image, error) {
	img, err := m.resolveImage(ctx, name)
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
	key, err := m.ownImage(ctx, name, "delete")
	if err != nil {
		return err
	}
	return is.Remove(ctx, key, func(img *image.Image) error {
		return m.imageInUse(ctx, img.Name, "delete")
	})
}

// imageInUse fails with a conflict when sandboxes or snapshots use image
// store name key, naming them (the first few; those of other tenants, which
// use a catalog image, only by count).
func (m *Manager) imageInUse(ctx context.Context, key, verb string) error {
	me := owner(ctx)
	all := tenant.Unscoped(ctx) // a catalog image is every tenant's
	sbs, err := m.store.List(all, store.ListFilter{})
	if err != nil {
		return err
	}
	var users []string
	others := 0
	for _, sb := range sbs {
		if sb.Image == key && !sb.State.Ended() {
			if sb.Tenant != me {
				others++
				continue
			}
			users = append(users, "sandbox "+sandboxRef(sb))
		}
	}
	snaps, err := m.store.ListSnapshots(all, "")
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		if sn.Image == key {
			if sn.Tenant != me {
				others++
				continue
			}
			users = append(users, "snapshot "+sn.ID)
		}
	}
	if others > 0 {
		users = append(users, fmt.Sprintf("%d sandboxes or snapshots of other tenants", others))
	}
	name := displayImage(key)
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
func (m *Manager) BuildImage(ctx context.Context, r *api.Recipe, buildContext io.Reader, emit func(api.BuildEvent)) (_ *api.Image, err error) {
	if m.builder == nil {
		return nil, errdefs.Unavailable("image builds are unavailable on this daemon")
	}
	if err := checkImageName(r.Name); err != nil {
		return nil, err
	}
	if err := m.checkImageQuota(ctx); err != nil {
		return nil, err
	}
	rr := *r
	if rr.Name, err = m.ownImage(ctx, r.Name, "build"); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(r.Base, "debian:") {
		// The tenant's own base, or the catalog's (which the builder
		// looks up by its plain name, as the resolve failing does too).
		base, err := m.resolveImage(ctx, r.Base)
		switch {
		case err == nil:
			rr.Base = base.Name
		case !errors.Is(err, errdefs.ErrNotFound):
			return nil, err
		}
	}
	img, err := m.builder.Build(ctx, &rr, buildContext, m.replaceCheck(ctx), emit)
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
	key, err := m.ownImage(ctx, name, "import")
	if err != nil {
		return nil, err
	}
	if err := m.checkImageQuota(ctx); err != nil {
		return nil, err
	}
	img, err := m.builder.Import(ctx, key, archive, m.replaceCheck(ctx), emit)
	if err != nil {
		return nil, err
	}
	a := ImageAPI(img)
	return &a, nil
}
