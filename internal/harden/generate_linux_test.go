//go:build !forkbox_agent

package harden

import (
	"bytes"
	"os"
	"testing"
)

// The agent binary installs the filter assembled ahead; it must be the very
// program the profile gives today. Run `go generate ./internal/harden` after
// changing the policy or updating the profile.
func TestGeneratedFilterIsCurrent(t *testing.T) {
	want, err := GenerateFilterSource()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("zfilter_linux_amd64.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("zfilter_linux_amd64.go is stale: run go generate ./internal/harden")
	}
}
