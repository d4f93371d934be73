// Package build builds forkbox images from recipes: a base (a Debian suite
// bootstrapped with debootstrap, or another image), then ordered steps. Each
// step that changes files (run, copy) becomes a content-addressed layer of
// the image store, cached by its parent and the step, so an unchanged prefix
// of a recipe is never built twice. Run steps execute as root in a build
// sandbox (the runtime's build mode) with network access; the sandbox's
// writable layer, minus forkbox's own files, is the step's layer.
package build

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// stepKinds are the step kinds a recipe may use, in the order error messages
// list them.
var stepKinds = []string{"run", "env", "workdir", "user", "copy"}

// maxSteps bounds a recipe: every layer is one overlay lower dir, and the
// mount options of a sandbox's root must fit in a page.
const maxSteps = 48

// ParseRecipe reads a recipe written as JSON or YAML and validates it. Errors
// wrap errdefs.ErrInvalidArgument and say what is wrong and where.
func ParseRecipe(data []byte) (*api.Recipe, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errdefs.InvalidArgument("recipe is empty")
	}
	if data[0] != '{' {
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, errdefs.InvalidArgument("recipe is neither JSON nor YAML: %v", err)
		}
		data = j
	}
	var raw struct {
		Name   string            `json:"name"`
		Base   string            `json:"base"`
		Mirror string            `json:"mirror"`
		Steps  []json.RawMessage `json:"steps"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, errdefs.InvalidArgument("recipe: %v", err)
	}
	r := &api.Recipe{Name: raw.Name, Base: raw.Base, Mirror: raw.Mirror}
	for i, rs := range raw.Steps {
		st, err := parseStep(rs)
		if err != nil {
			return nil, errdefs.InvalidArgument("recipe step %d: %v", i+1, err)
		}
		r.Steps = append(r.Steps, st)
	}
	if err := Validate(r); err != nil {
		return nil, err
	}
	return r, nil
}

// parseStep reads one step: an object with exactly one known key.
func parseStep(data json.RawMessage) (api.RecipeStep, error) {
	var st api.RecipeStep
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return st, fmt.Errorf("a step is an object with one of %s: %v", strings.Join(stepKinds, ", "), err)
	}
	if len(m) != 1 {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return st, fmt.Errorf("a step has exactly one kind (%s), this one has %d: %s", strings.Join(stepKinds, ", "), len(m), strings.Join(keys, ", "))
	}
	for k, v := range m {
		if !slices.Contains(stepKinds, k) {
			return st, fmt.Errorf("unknown step kind %q (want one of %s)", k, strings.Join(stepKinds, ", "))
		}
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.DisallowUnknownFields()
		var target any
		switch k {
		case "run":
			target = &st.Run
		case "env":
			target = &st.Env
		case "workdir":
			target = &st.Workdir
		case "user":
			target = &st.User
		case "copy":
			target = &st.Copy
		}
		if err := dec.Decode(target); err != nil {
			return st, fmt.Errorf("%s: %v", k, err)
		}
	}
	return st, nil
}

// Validate checks a recipe that arrived already decoded (the Go client and
// the JSON API send api.Recipe). Errors wrap errdefs.ErrInvalidArgument.
func Validate(r *api.Recipe) error {
	if r.Name == "" {
		return errdefs.InvalidArgument("recipe: name is required")
	}
	if r.Base == "" {
		return errdefs.InvalidArgument("recipe: base is required (debian:<suite> or an image name)")
	}
	if len(r.Steps) > maxSteps {
		return errdefs.InvalidArgument("recipe: %d steps, at most %d", len(r.Steps), maxSteps)
	}
	for i, st := range r.Steps {
		if err := validateStep(st); err != nil {
			return errdefs.InvalidArgument("recipe step %d (%s): %v", i+1, stepKind(st), err)
		}
	}
	return nil
}

func validateStep(st api.RecipeStep) error {
	n := 0
	for _, set := range []bool{st.Run != "", st.Env != nil, st.Workdir != "", st.User != "", st.Copy != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("a step sets exactly one of %s", strings.Join(stepKinds, ", "))
	}
	switch {
	case st.Env != nil:
		// An empty env is refused: as JSON (omitempty) it is no step at
		// all, so the same recipe sent by the Go client would fail.
		if len(st.Env) == 0 {
			return fmt.Errorf("env sets no variable")
		}
		for k := range st.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return fmt.Errorf("invalid variable name %q", k)
			}
		}
	case st.Workdir != "":
		if !path.IsAbs(st.Workdir) {
			return fmt.Errorf("workdir %q is not absolute", st.Workdir)
		}
	case st.User != "":
		if st.User == "root" || st.User == "0" || strings.HasPrefix(st.User, "0:") {
			return fmt.Errorf("sandbox code never runs as root (run steps already do)")
		}
	case st.Copy != nil:
		if _, err := CleanSrc(st.Copy.Src); err != nil {
			return err
		}
		if !path.IsAbs(st.Copy.Dest) {
			return fmt.Errorf("copy dest %q is not absolute", st.Copy.Dest)
		}
	}
	return nil
}

// CleanSrc returns a copy step's source as a clean path inside the build
// context, refusing one that escapes it.
func CleanSrc(src string) (string, error) {
	if src == "" {
		return "", fmt.Errorf("copy src is empty")
	}
	if path.IsAbs(src) {
		return "", fmt.Errorf("copy src %q escapes the build context: use a path relative to it", src)
	}
	c := path.Clean(src)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("copy src %q escapes the build context", src)
	}
	return c, nil
}

// stepKind names a step's kind.
func stepKind(st api.RecipeStep) string {
	switch {
	case st.Run != "":
		return "run"
	case st.Env != nil:
		return "env"
	case st.Workdir != "":
		return "workdir"
	case st.User != "":
		return "user"
	case st.Copy != nil:
		return "copy"
	}
	return "empty"
}
