// Package deploy holds no code: it is where forkbox's deployment files live
// (the systemd unit, its example environment, the Kubernetes manifests in
// kubernetes/), and its test checks them against what the daemon takes.
package deploy
