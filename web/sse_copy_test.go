package web

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite static/sse.js from the SDK's compiled parser")

// sseHeader opens static/sse.js: the file is the TypeScript SDK's compiled
// event-stream parser, copied, so that the UI and the SDK cannot disagree on
// a stream (one algorithm, written once, in sdk/js/src/sse.ts).
const sseHeader = `// Code copied from sdk/js/dist/sse.js (compiled from sdk/js/src/sse.ts) by
// web's TestSSEIsTheSDKs; DO NOT EDIT. The UI reads server-sent events with
// the TypeScript SDK's parser; change sdk/js/src/sse.ts, run npm run build in
// sdk/js, then: go test ./web -run '^TestSSEIsTheSDKs$' -update

`

// TestSSEIsTheSDKs fails when static/sse.js is not the header above and
// the SDK's compiled parser, byte for byte.
func TestSSEIsTheSDKs(t *testing.T) {
	sdk, err := os.ReadFile(filepath.Join("..", "sdk", "js", "dist", "sse.js"))
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(sseHeader), sdk...)
	path := filepath.Join("static", "sse.js")
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("web/static/sse.js is not a copy of sdk/js/dist/sse.js; regenerate: go test ./web -run '^TestSSEIsTheSDKs$' -update")
	}
}
