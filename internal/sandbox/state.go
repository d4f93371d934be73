package sandbox

import (
	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// transitions lists the legal state changes (docs/ARCHITECTURE.md, "States
// and transitions", draws them and says when each happens):
//
//	creating → running ⇄ (suspending → suspended → resuming) → terminated
//
// plus error (with a reason) from any live state, and, in a cluster, lost
// from any state that holds processes when their node stops answering
// (Manager.NodeLost; with --on-node-lost=resume one with a suspend image
// becomes suspended instead). terminated is final.
var transitions = map[api.SandboxState][]api.SandboxState{
	api.StateCreating:   {api.StateRunning, api.StateError, api.StateTerminated, api.StateLost},
	api.StateRunning:    {api.StateSuspending, api.StateTerminated, api.StateError, api.StateLost},
	api.StateSuspending: {api.StateSuspended, api.StateRunning, api.StateError, api.StateTerminated, api.StateLost},
	api.StateSuspended:  {api.StateResuming, api.StateTerminated, api.StateError},
	api.StateResuming:   {api.StateRunning, api.StateSuspended, api.StateError, api.StateTerminated, api.StateLost},
	api.StateError:      {api.StateTerminated},
	api.StateLost:       {api.StateTerminated, api.StateRunning}, // running: its node came back with it (reconcile)
	api.StateTerminated: {},
}

// checkTransition returns a failed-precondition error for an illegal change.
func checkTransition(id string, from, to api.SandboxState) error {
	for _, s := range transitions[from] {
		if s == to {
			return nil
		}
	}
	return errdefs.FailedPrecondition("sandbox %s is %s and cannot become %s", id, from, to)
}
