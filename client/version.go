package client

// Version is the Go SDK's version (semantic versioning; see the package
// documentation). It is sent as forkbox-go-client/<Version> in User-Agent.
const Version = "0.8.0"
