package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"

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

// Limits of discovery. Kernelspecs under the user's home are written by
// whoever runs code in the sandbox, so reading them must stay cheap whatever
// is there: a kernel.json is a few hundred bytes, and a machine has a handful
// of kernels.
const (
	// MaxSpecSize is the largest kernel.json read; a bigger one is skipped.
	MaxSpecSize = 64 << 10
	// MaxSpecEntries is how many entries of one kernels directory are looked
	// at; the rest are skipped.
	MaxSpecEntries = 1024
)

// validName is what Jupyter accepts as a kernel name.
var validName = regexp.MustCompile(`^[a-z0-9._-]+$`)

// Opener opens name read-only for discovery: a directory when dir is set,
// else a regular file. It must not block, whatever name is (a FIFO in a
// spec's place), and may refuse what it will not read. A name that does not
// exist, or whose parent is not a directory, is an error that matches
// fs.ErrNotExist or syscall.ENOTDIR.
type Opener func(name string, dir bool) (*os.File, error)

// OpenNonBlocking is the default Opener: open(2) with O_NONBLOCK, so that a
// FIFO does not wait for a writer (it is then refused as not a regular file
// before anything is read), and O_NOCTTY.
func OpenNonBlocking(name string, dir bool) (*os.File, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY
	if dir {
		flags |= syscall.O_DIRECTORY
	}
	return os.OpenFile(name, flags, 0)
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

// FindSpecs is FindSpecsWith(dirs, OpenNonBlocking).
func FindSpecs(dirs []string) (map[string]*Spec, error) {
	return FindSpecsWith(dirs, OpenNonBlocking)
}

// FindSpecsWith reads <dir>/kernels/*/kernel.json for each dir, opening every
// directory and file through open. When two dirs hold a spec of the same
// name the earlier dir wins. Missing dirs, and entries without a kernel.json,
// are fine. A spec that cannot be read, is not a regular file, is larger
// than MaxSpecSize, has an invalid name or is invalid is skipped; the
// returned error then lists those problems, and the map still holds every
// valid spec.
func FindSpecsWith(dirs []string, open Opener) (map[string]*Spec, error) {
	specs := map[string]*Spec{}
	var errs []error
	for _, dir := range dirs {
		kdir := filepath.Join(dir, "kernels")
		names, err := readNames(kdir, open)
		if err != nil {
			if !absent(err) {
				errs = append(errs, fmt.Errorf("kernelspecs in %s: %w", kdir, err))
			}
			if names == nil {
				continue
			}
		}
		for _, name := range names {
			sp, err := readSpec(filepath.Join(kdir, name), open)
			if err != nil {
				if !absent(err) {
					errs = append(errs, err)
				}
				continue
			}
			if _, ok := specs[sp.Name]; !ok {
				specs[sp.Name] = sp
			}
		}
	}
	return specs, errors.Join(errs...)
}

// absent is true of errors that mean "nothing there": a missing directory or
// file, or a path through something that is not a directory.
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// readNames lists dir, sorted, at most MaxSpecEntries names; past that it
// returns the first ones with an error saying so.
func readNames(dir string, open Opener) ([]string, error) {
	d, err := open(dir, true)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(MaxSpecEntries + 1)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(names) > MaxSpecEntries {
		names = names[:MaxSpecEntries]
		err = fmt.Errorf("more than %d entries; the rest are skipped", MaxSpecEntries)
	} else {
		err = nil
	}
	sort.Strings(names)
	return names, err
}

// readSpec reads and parses dir/kernel.json.
func readSpec(dir string, open Opener) (*Spec, error) {
	file := filepath.Join(dir, "kernel.json")
	f, err := open(file, false)
	if err != nil {
		if absent(err) {
			return nil, err
		}
		// The message names the file once.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("kernelspec %s: %w", file, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("kernelspec %s: %w", file, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("kernelspec %s: not a regular file but a %s", file, kind(st.Mode()))
	}
	if st.Size() > MaxSpecSize {
		return nil, fmt.Errorf("kernelspec %s: %d bytes, more than the %d a kernelspec may have", file, st.Size(), MaxSpecSize)
	}
	// The size can change between the stat and the read: read one byte
	// more than allowed to notice.
	b, err := io.ReadAll(io.LimitReader(f, MaxSpecSize+1))
	if err != nil {
		return nil, fmt.Errorf("kernelspec %s: %w", file, err)
	}
	if len(b) > MaxSpecSize {
		return nil, fmt.Errorf("kernelspec %s: more than the %d bytes a kernelspec may have", file, MaxSpecSize)
	}
	return ParseSpec(b, dir)
}

// kind names a file type for messages.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "special file"
}

// ParseSpec validates the content of dir/kernel.json and returns its spec.
// The spec's name is dir's base name, lower-cased; it must be a valid
// Jupyter kernel name (letters, digits, '.', '_' and '-').
func ParseSpec(b []byte, dir string) (*Spec, error) {
	file := filepath.Join(dir, "kernel.json")
	base := filepath.Base(dir)
	if !validName.MatchString(strings.ToLower(base)) {
		return nil, fmt.Errorf("kernelspec %s: %q is not a valid kernel name (letters, digits, '.', '_', '-')", file, base)
	}
	var raw struct {
		Argv          []string          `json:"argv"`
		DisplayName   string            `json:"display_name"`
		Language      string            `json:"language"`
		Env           map[string]string `json:"env"`
		InterruptMode string            `json:"interrupt_mode"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("kernelspec %s: invalid JSON: %w", file, err)
	}
	if len(raw.Argv) == 0 {
		return nil, fmt.Errorf("kernelspec %s: empty argv", file)
	}
	if raw.Argv[0] == "" {
		return nil, fmt.Errorf("kernelspec %s: argv[0] is empty", file)
	}
	for _, a := range raw.Argv {
		if strings.ContainsRune(a, 0) {
			return nil, fmt.Errorf("kernelspec %s: argv has a NUL byte", file)
		}
	}
	for k, v := range raw.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("kernelspec %s: invalid env entry %q", file, k)
		}
	}
	sp := &Spec{
		Name:          strings.ToLower(base),
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
