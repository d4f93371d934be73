// Package sandboxtest holds what tests of the packages above the sandbox
// manager share to build a real Manager without a host: a Runtime that runs
// nothing.
package sandboxtest

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/forkbox/forkbox/internal/netsetup"
	"github.com/forkbox/forkbox/internal/runtime"
)

// NoRuntime is a sandbox.Runtime that starts nothing (Create fails) and
// finds nothing left by an earlier daemon: for tests that hold sandboxes
// written straight into the store, or that never get as far as a start.
// Embed it to give one method a behaviour of its own.
type NoRuntime struct{}

func (NoRuntime) Create(context.Context, runtime.Spec) (*runtime.Info, error) {
	return nil, errors.New("no runtime in this test")
}
func (NoRuntime) Adopt(context.Context, string, *runtime.Info) error     { return nil }
func (NoRuntime) Destroy(context.Context, string, *runtime.Info) error   { return nil }
func (NoRuntime) Usage(string) runtime.Usage                             { return runtime.Usage{} }
func (NoRuntime) OOMKills(string) int64                                  { return 0 }
func (NoRuntime) SetEgress(string, *runtime.Info, netsetup.Policy) error { return nil }
func (NoRuntime) SetHostname(string, *runtime.Info, string) error        { return nil }
func (NoRuntime) DialPort(context.Context, string, *runtime.Info, int) (net.Conn, error) {
	return nil, errors.New("no sandboxes here")
}
func (NoRuntime) SandboxDirs() ([]string, error) { return nil, nil }
func (NoRuntime) LeftoverCRIU(context.Context, time.Duration) (found, killed []int) {
	return nil, nil
}
func (NoRuntime) Recover(context.Context, string) (runtime.Recovered, error) {
	return runtime.Recovered{}, nil
}
