package build

import (
	"encoding/json"
	"errors"
	"path"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/images"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// Recipes arrive from API clients (a JSON or YAML body, or a multipart part)
// and are parsed before anything checks who sent them, so every byte string
// must end in either a valid recipe or an invalid_argument error.

// FuzzParseRecipe checks ParseRecipe on any bytes: it never panics, its
// errors are all invalid_argument (a 400, never a 500), and what it accepts
// is valid and survives being written out again, as JSON (what the Go client
// sends) and as YAML, unchanged.
func FuzzParseRecipe(f *testing.F) {
	for _, s := range []string{
		"name: demo\nbase: python\nsteps:\n  - run: echo hi\n  - env: {A: \"1\", B: two}\n  - workdir: /srv\n  - user: user\n  - copy: {src: lib, dest: /opt/lib}\n",
		`{"name":"demo","base":"python","steps":[{"run":"echo hi"}]}`,
		`{"name":"x","base":"debian:bookworm","mirror":"http://deb.example/debian","steps":null}`,
		`{"name":"x","base":"python","steps":[{"copy":{"src":"a/../b","dest":"/b"}}]}`,
		`{"name":"x","base":"python","steps":[{"copy":{"src":"../a","dest":"/a"}}]}`,
		`{"name":"x","base":"python","steps":[{"env":{}}]}`,
		`{"name":"x","base":"python","steps":[{"env":{"A=B":"1"}}]}`,
		`{"name":"x","base":"python","steps":[{"run":"a","env":{"A":"1"}}]}`,
		`{"name":"x","base":"python","steps":[{"user":"0:0"}]}`,
		`{"name":"x","base":"python","steps":[{}]}`,
		`{"name":"x","base":"python"} trailing`,
		"name: [unclosed\n",
		"a: &a [*a, *a]\nname: x\n",
		"name: x\nbase: python\nsteps:\n  - run: |\n      set -e\n      echo 'multi line'\n",
		"name: yes\nbase: 0x10\n",
		"\xef\xbb\xbfname: x\nbase: y\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Add(images.Python)
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRecipe(data)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("ParseRecipe(%q) = %v: not invalid_argument, so the API would answer %d", data, err, status(err))
			}
			if r != nil {
				t.Fatalf("ParseRecipe(%q) returned a recipe with the error %v", data, err)
			}
			return
		}
		if err := Validate(r); err != nil {
			t.Fatalf("ParseRecipe(%q) accepted a recipe that Validate refuses: %v", data, err)
		}
		for i, st := range r.Steps {
			if st.Copy == nil {
				continue
			}
			c, err := CleanSrc(st.Copy.Src)
			if err != nil {
				t.Fatalf("step %d: accepted copy src %q that CleanSrc refuses: %v", i+1, st.Copy.Src, err)
			}
			checkInsideContext(t, st.Copy.Src, c)
		}

		j, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("marshal %+v: %v", r, err)
		}
		checkSame(t, "JSON", data, j, r)
		y, err := yaml.Marshal(r)
		if err != nil {
			t.Fatalf("marshal %+v as YAML: %v", r, err)
		}
		checkSame(t, "YAML", data, y, r)
	})
}

// checkSame parses the re-encoded recipe b and wants r back.
func checkSame(t *testing.T, format string, data, b []byte, r *api.Recipe) {
	t.Helper()
	again, err := ParseRecipe(b)
	if err != nil {
		t.Fatalf("ParseRecipe(%q) accepted, but its %s form %q is refused: %v", data, format, b, err)
	}
	if !reflect.DeepEqual(again, r) {
		t.Fatalf("ParseRecipe(%q) = %#v, but its %s form %q parses as %#v", data, r, format, b, again)
	}
}

// FuzzCleanSrc checks that a copy step's source CleanSrc accepts always
// names something inside the build context, and that it refuses exactly the
// sources that are empty, absolute or climb out.
func FuzzCleanSrc(f *testing.F) {
	for _, s := range []string{"lib", ".", "./", "a/../b", "a/../../b", "..", "../", "/etc", "a//b/./c/", "..a", "a/..", "a/../..", "...", "a\x00b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		c, err := CleanSrc(src)
		cleaned := path.Clean(src)
		escapes := src == "" || strings.HasPrefix(src, "/") || cleaned == ".." || strings.HasPrefix(cleaned, "../")
		if escapes != (err != nil) {
			t.Fatalf("CleanSrc(%q) = %q, %v; want an error: %v", src, c, err, escapes)
		}
		if err == nil {
			checkInsideContext(t, src, c)
		}
	})
}

// checkInsideContext fails unless c, CleanSrc's answer for src, is a clean
// relative path that stays inside the build context.
func checkInsideContext(t *testing.T, src, c string) {
	t.Helper()
	if c == "" || strings.HasPrefix(c, "/") || c != path.Clean(c) {
		t.Fatalf("CleanSrc(%q) = %q: not a clean relative path", src, c)
	}
	for _, el := range strings.Split(c, "/") {
		if el == ".." {
			t.Fatalf("CleanSrc(%q) = %q: has a .. element", src, c)
		}
	}
	if j := path.Join("/context", c); j != "/context" && !strings.HasPrefix(j, "/context/") {
		t.Fatalf("CleanSrc(%q) = %q leads to %s, outside /context", src, c, j)
	}
}

// status is the HTTP status the API would answer for err.
func status(err error) int {
	s, _ := errdefs.HTTPStatus(err)
	return s
}
