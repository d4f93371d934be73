// Package server is forkbox's in-sandbox agent.
//
// The agent is forkbox-agent (or, when that is not beside it, the forkbox
// binary itself, which holds the same code), bind-mounted read-only at
// /.forkbox/forkbox and started by the runtime as the sandbox's init (PID 1).
// It reaps every orphan, runs commands as the sandbox user with streamed
// output, serves file operations, code contexts (Jupyter kernels) and
// directory watches. It speaks HTTP/1.1 over a Unix socket in /.forkbox/run,
// a directory bind-mounted from the daemon's side, in the bodies
// internal/agent/wire defines (its package comment says why a socket there),
// and imports nothing of the daemon: not even the daemon's client for it,
// internal/agent/client (cmd/forkbox-agent's tests check what it links).
package server
