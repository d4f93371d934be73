// Package lazyre is a regexp compiled on first use. Package-level
// regexp.MustCompile runs at program start, and every forkbox process —
// including each sandbox's agent, whose start is on the create path — pays
// for it; these are compiled only by the code that matches with them.
package lazyre

import (
	"regexp"
	"sync"
)

// RE is a lazily compiled regular expression.
type RE struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

// New returns a regexp that compiles expr (which must be valid) on first use.
func New(expr string) *RE { return &RE{expr: expr} }

func (r *RE) get() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.expr) })
	return r.re
}

// MatchString reports whether s matches.
func (r *RE) MatchString(s string) bool { return r.get().MatchString(s) }

// String returns the expression.
func (r *RE) String() string { return r.expr }
