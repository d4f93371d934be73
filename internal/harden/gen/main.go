//go:build !forkbox_agent

// Command gen writes the seccomp filter that the agent binary carries
// assembled (package harden, build tag forkbox_agent): the same program the
// full binary builds from Docker's profile at run time. Run by `go generate`
// in internal/harden; TestGeneratedFilterIsCurrent fails when the file is
// stale.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/forkbox/forkbox/internal/harden"
)

func main() {
	out := flag.String("o", "zfilter_linux_amd64.go", "file to write")
	flag.Parse()
	src, err := harden.GenerateFilterSource()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Println("wrote", *out)
}
