package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// Spec is a kernelspec: a kernel.json found on disk, which says how to start
// a kernel for one language. Name is the spec's directory name, lower-cased
// as Jupyter does; Dir is that directory ({resource_dir} in Argv).
type Spec struct {
	Name          string            `json:"name"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	Argv          []string          `json:"argv"`
	Env           map[string]string `json:"env,omitempty"`
	InterruptMode string            `json:"interrupt_mode"` // "signal" (the default) or "message"
	Dir           string            `json:"dir"`
}

// DefaultSpecDirs returns the standard Jupyter data directories, in the order
// Jupyter searches them: the user's ($home/.local/share/jupyter, skipped when
// home is empty), then /usr/local/share/jupyter, then /usr/share/jupyter.
func DefaultSpecDirs(home string) []string {
	var dirs []string
	if home != "" {
		dirs = append(dirs, filepath.Join(home, ".local", "share", "jupyter"))
	}
	return append(dirs, "/usr/local/share/jupyter", "/usr/share/jupyter")
}

// FindSpecs reads <dir>/kernels/*/kernel.json for each dir. When two dirs hold
// a spec of the same name the earlier dir wins. Missing dirs are fine. A spec
// that cannot be read or is invalid is skipped; the returned error then lists
// those problems, and the map still holds every valid spec.
func FindSpecs(dirs []string) (map[string]*Spec, error) {
	specs := map[string]*Spec{}
	var errs []error
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "kernels", "*", "kernel.json"))
		sort.Strings(files)
		for _, file := range files {
			sp, err := readSpec(file)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if _, ok := specs[sp.Name]; !ok {
				specs[sp.Name] = sp
			}
		}
	}
	return specs, errors.Join(errs...)
}

func readSpec(file string) (*Spec, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("kernelspec: %w", err)
	}
	var raw struct {
		Argv          []string          `json:"argv"`
		DisplayName   string            `json:"display_name"`
		Language      string            `json:"language"`
		Env           map[string]string `json:"env"`
		InterruptMode string            `json:"interrupt_mode"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("kernelspec %s: %w", file, err)
	}
	if len(raw.Argv) == 0 {
		return nil, fmt.Errorf("kernelspec %s: empty argv", file)
	}
	dir := filepath.Dir(file)
	sp := &Spec{
		Name:          strings.ToLower(filepath.Base(dir)),
		DisplayName:   raw.DisplayName,
		Language:      raw.Language,
		Argv:          raw.Argv,
		Env:           raw.Env,
		InterruptMode: raw.InterruptMode,
		Dir:           dir,
	}
	switch sp.InterruptMode {
	case "":
		sp.InterruptMode = "signal"
	case "signal", "message":
	default:
		return nil, fmt.Errorf("kernelspec %s: unknown interrupt_mode %q", file, raw.InterruptMode)
	}
	return sp, nil
}

// Resolve picks a spec by its name, or else by language: the only spec of that
// language, or among several the one named like the language ("python"), then
// the language plus "3" ("python3"), then the first by name. An empty
// nameOrLanguage means "python". Nothing found is an errdefs.ErrNotFound error
// that lists the specs there are.
func Resolve(specs map[string]*Spec, nameOrLanguage string) (*Spec, error) {
	want := strings.ToLower(strings.TrimSpace(nameOrLanguage))
	if want == "" {
		want = "python"
	}
	if sp, ok := specs[want]; ok {
		return sp, nil
	}
	var names, matches []string
	for name, sp := range specs {
		names = append(names, fmt.Sprintf("%s (%s)", name, sp.Language))
		if strings.EqualFold(sp.Language, want) {
			matches = append(matches, name)
		}
	}
	sort.Strings(names)
	sort.Strings(matches)
	if len(matches) == 0 {
		have := "none"
		if len(names) > 0 {
			have = strings.Join(names, ", ")
		}
		return nil, errdefs.NotFound("no kernel for %q; installed kernels: %s", nameOrLanguage, have)
	}
	for _, name := range []string{want, want + "3"} {
		if sp, ok := specs[name]; ok && strings.EqualFold(sp.Language, want) {
			return sp, nil
		}
	}
	return specs[matches[0]], nil
}
