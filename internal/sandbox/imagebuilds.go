package sandbox

import (
	"sort"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// The daemon's own images (the default python image, built from its recipe
// at start; minutes on a new data dir) are tracked while they build, so that
// a create from one answers 503 with the build's progress and a
// Retry-After, never 404, and /healthz and the image list say so.

// ImageBuild reports the progress of one of the daemon's own image builds.
type ImageBuild struct {
	m    *Manager
	name string
}

// TrackImageBuild starts tracking a build of the catalog image name.
func (m *Manager) TrackImageBuild(name string) *ImageBuild {
	m.imageBuildsMu.Lock()
	defer m.imageBuildsMu.Unlock()
	if m.imageBuilds == nil {
		m.imageBuilds = map[string]api.ImageReadiness{}
	}
	m.imageBuilds[name] = api.ImageReadiness{Name: name, State: api.ImageBuilding}
	return &ImageBuild{m: m, name: name}
}

// Step records that the build is at step of steps.
func (b *ImageBuild) Step(step, steps int) {
	b.m.imageBuildsMu.Lock()
	defer b.m.imageBuildsMu.Unlock()
	b.m.imageBuilds[b.name] = api.ImageReadiness{Name: b.name, State: api.ImageBuilding, Step: step, Steps: steps}
}

// Done records the build's end: ready, or failed with err.
func (b *ImageBuild) Done(err error) {
	b.m.imageBuildsMu.Lock()
	defer b.m.imageBuildsMu.Unlock()
	r := api.ImageReadiness{Name: b.name, State: api.ImageReady}
	if err != nil {
		r = api.ImageReadiness{Name: b.name, State: api.ImageFailed, Error: err.Error()}
	}
	b.m.imageBuilds[b.name] = r
}

// ImageReadiness is the state of each of the daemon's own images, by name.
func (m *Manager) ImageReadiness() []api.ImageReadiness {
	m.imageBuildsMu.Lock()
	defer m.imageBuildsMu.Unlock()
	out := make([]api.ImageReadiness, 0, len(m.imageBuilds))
	for _, r := range m.imageBuilds {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// imageBuildRetry is the Retry-After of a create that meets a build.
const imageBuildRetry = 5 * time.Second

// buildingErr is the answer to a use of catalog image name that is not
// there: 503 while it is being built (or if its build failed), nil when no
// build of it is known.
func (m *Manager) buildingErr(name string) error {
	m.imageBuildsMu.Lock()
	r, ok := m.imageBuilds[name]
	m.imageBuildsMu.Unlock()
	switch {
	case !ok:
		return nil
	case r.State == api.ImageBuilding && r.Steps > 0:
		return errdefs.RetryAfter(errdefs.Unavailable("image %q is being built (step %d of %d); try again in a few seconds", name, r.Step, r.Steps), imageBuildRetry)
	case r.State == api.ImageBuilding:
		return errdefs.RetryAfter(errdefs.Unavailable("image %q is being built; try again in a few seconds", name), imageBuildRetry)
	case r.State == api.ImageFailed:
		return errdefs.Unavailable("image %q could not be built: %s (the daemon's log has the build's output; a restart tries again)", name, r.Error)
	}
	return nil
}
