#!/usr/bin/env bash
# gen-envd.sh regenerates the Go code of E2B's envd protocol (the process
# and filesystem services that internal/e2b serves to E2B's SDKs) from
# spec/envd/*.proto into internal/e2b/envdpb/:
#
#	internal/e2b/envdpb/process/process.pb.go                      messages
#	internal/e2b/envdpb/process/processconnect/process.connect.go  Connect handlers
#	internal/e2b/envdpb/filesystem/...                             likewise
#
# The generated files are committed: neither builds nor CI run this script
# (make test does not need protoc). Run it by hand after editing a .proto,
# from anywhere in the repository, and commit its output.
#
# It needs protoc (Debian: apt-get install protobuf-compiler; its
# google/protobuf/timestamp.proto is in /usr/include) and the two plugins at
# the versions the module uses, which it installs into $(go env GOPATH)/bin
# when they are missing or of another version:
#
#	google.golang.org/protobuf/cmd/protoc-gen-go            (as go.mod's google.golang.org/protobuf)
#	connectrpc.com/connect/cmd/protoc-gen-connect-go        (as go.mod's connectrpc.com/connect)
set -euo pipefail

cd "$(dirname "$0")/.."

command -v protoc >/dev/null || {
	echo "gen-envd.sh: protoc not found; install it (Debian: apt-get install protobuf-compiler)" >&2
	exit 1
}

modver() { go list -m -f '{{.Version}}' "$1"; }
PROTOBUF_VERSION=$(modver google.golang.org/protobuf)
CONNECT_VERSION=$(modver connectrpc.com/connect)

GOBIN=$(go env GOBIN)
GOBIN=${GOBIN:-$(go env GOPATH)/bin}
export PATH="$GOBIN:$PATH"

# installed reports whether plugin $1 is installed at module version $2
# (go version -m reads the version a binary was built from).
installed() {
	local bin="$GOBIN/$1"
	[ -x "$bin" ] && go version -m "$bin" | awk '$1 == "mod" { print $3 }' | grep -qx "$2"
}
installed protoc-gen-go "$PROTOBUF_VERSION" ||
	go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOBUF_VERSION"
installed protoc-gen-connect-go "$CONNECT_VERSION" ||
	go install "connectrpc.com/connect/cmd/protoc-gen-connect-go@$CONNECT_VERSION"

MODULE=github.com/forkbox/forkbox
rm -rf internal/e2b/envdpb
# -I spec: the files register as envd/process.proto and envd/filesystem.proto
# in the protobuf registry (names unlikely to clash with another library's).
protoc -I spec \
	--go_out=. --go_opt=module="$MODULE" \
	--connect-go_out=. --connect-go_opt=module="$MODULE" \
	spec/envd/process.proto spec/envd/filesystem.proto
gofmt -l internal/e2b/envdpb | (! grep .) || { echo "gen-envd.sh: generated code is not gofmt-clean" >&2; exit 1; }
echo "gen-envd.sh: generated:"
find internal/e2b/envdpb -name '*.go' | sort
