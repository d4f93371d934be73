package main

import (
	"flag"
	"testing"

	"github.com/forkbox/forkbox/internal/tools/deps"
)

var updateDeps = flag.Bool("update", false, "rewrite deps.txt from what forkbox links")

// deps.txt lists every package outside the standard library that forkbox
// links, so that a change of dependencies is a reviewed diff of it.
func TestDeps(t *testing.T) {
	deps.Check(t, "deps.txt", *updateDeps)
}
