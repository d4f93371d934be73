package api

import "time"

// Image is an image as the API shows it (GET /v1/images, the result of a
// build or an import).
type Image struct {
	Name string `json:"name"`
	// ID digests the image's layers and defaults ("sha256:…").
	ID string `json:"id"`
	// Base is what the image was built on: "debian:bookworm", another
	// image's name, "oci" for an import, "host" for the host-derived image.
	Base string `json:"base,omitempty"`
	// Layers are the ids of its layers, bottom first.
	Layers    []string  `json:"layers"`
	Env       []string  `json:"env"`
	WorkDir   string    `json:"workdir"`
	User      string    `json:"user,omitempty"`
	UID       int       `json:"uid"`
	GID       int       `json:"gid"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
}

// ImageList is the body of GET /v1/images: one page of images, by name.
type ImageList struct {
	Images []Image `json:"images"`
	// Building are the daemon's own images being built now (not yet in
	// Images), on the first page only.
	Building []ImageReadiness `json:"building,omitempty"`
	// NextCursor, when set, is the cursor of the next page (pass it as
	// ?cursor=); absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Recipe is how an image is built (POST /v1/images with a JSON or YAML
// body, or the "recipe" part of a multipart body whose "context" part is a
// tar of the files that copy steps use).
type Recipe struct {
	Name string `json:"name"`
	// Base is "debian:<suite>" (bootstrapped with debootstrap from the
	// host's Debian mirror) or the name of an image (built or imported).
	Base string `json:"base"`
	// Mirror overrides the Debian mirror of a debian: base.
	Mirror string       `json:"mirror,omitempty"`
	Steps  []RecipeStep `json:"steps"`
}

// RecipeStep is one step of a recipe: exactly one field is set.
type RecipeStep struct {
	// Run is a shell command run by /bin/sh -c as root in a build sandbox
	// that has network access. Its changes become a layer.
	Run string `json:"run,omitempty"`
	// Env sets environment variables for later steps and for sandboxes.
	Env map[string]string `json:"env,omitempty"`
	// Workdir sets the working directory of later steps and of sandboxes.
	Workdir string `json:"workdir,omitempty"`
	// User sets who sandbox processes run as: a name from the image's
	// /etc/passwd or uid[:gid]; not root. run steps stay root.
	User string `json:"user,omitempty"`
	// Copy copies a file or directory of the build context into the image.
	Copy *CopyStep `json:"copy,omitempty"`
}

// CopyStep copies Src (relative to the build context) to Dest (absolute in
// the image). Directories are copied with their contents.
type CopyStep struct {
	Src  string `json:"src"`
	Dest string `json:"dest"`
}

// BuildEventType is the kind of a build event (BuildEvent.Type), and the
// name of its SSE event.
type BuildEventType string

// Build event types: the SSE event names of POST /v1/images.
const (
	BuildEventStep  BuildEventType = "step"  // a step starts (or is served from the cache)
	BuildEventLog   BuildEventType = "log"   // a line of output
	BuildEventDone  BuildEventType = "done"  // the image is registered; Image is set
	BuildEventError BuildEventType = "error" // the build failed; ErrorBody
)

// BuildEvent is one event of a build or import log.
type BuildEvent struct {
	Type BuildEventType `json:"type"`
	// Step is the 1-based step number (0 for the base), Total the number of
	// steps.
	Step   int    `json:"step"`
	Total  int    `json:"total,omitempty"`
	Kind   string `json:"kind,omitempty"`   // base, run, env, workdir, user, copy, layer
	Detail string `json:"detail,omitempty"` // the command, path or base
	// Cached says a step's layer came from the cache.
	Cached bool   `json:"cached,omitempty"`
	Line   string `json:"line,omitempty"`
	Image  *Image `json:"image,omitempty"`
}

// ImageReadiness is the state of an image the daemon makes itself (the
// default python image, built from its recipe at start): "building" with
// its step, "ready", or "failed" with why.
type ImageReadiness struct {
	Name  string     `json:"name"`
	State ImageState `json:"state"`
	Step  int        `json:"step,omitempty"`
	Steps int        `json:"steps,omitempty"`
	Error string     `json:"error,omitempty"`
}

// ImageState is how far the daemon is with one of its own images
// (ImageReadiness.State).
type ImageState string

// Image readiness states.
const (
	ImageBuilding ImageState = "building"
	ImageReady    ImageState = "ready"
	ImageFailed   ImageState = "failed"
)

// Health is the body of GET /healthz: the daemon answers; Images says
// whether its own images are ready, Chat whether a model is configured.
type Health struct {
	Status string           `json:"status"`
	Images []ImageReadiness `json:"images"`
	Chat   *ChatReadiness   `json:"chat,omitempty"`
	// Recovering counts the sandboxes a restart found that are still being
	// settled (calls about them answer 503 with Retry-After); 0 once all are.
	Recovering int `json:"recovering"`
}

// ChatReadiness says whether the chat has a model, and if not, why.
type ChatReadiness struct {
	Ready bool   `json:"ready"`
	Why   string `json:"why,omitempty"`
}
