package e2e

import (
	"errors"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

// TestSDKGo is the SDK lifecycle of issue 8 through the Go SDK, the way a
// program outside this module uses it (client and api only): a named
// session with files and variables suspended and resumed, a memory
// checkpoint with sessions started from it, a fork into two branches, and
// the daemon's errors as typed errors with its message.
func TestSDKGo(t *testing.T) {
	needRoot(t)
	ctx := ctxT(t)
	c := client.New("http://" + shared.addr)

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "sdk-go-session"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSandbox(ctxT(t), sb.ID) })
	if _, err := c.WriteFile(ctx, sb.ID, "/workspace/notes.txt", strings.NewReader("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ex, err := c.RunCodeStream(ctx, sb.Name, api.RunCodeRequest{Code: "import pandas as pd\ndf = pd.DataFrame({'x': range(10)})\nprint(df.x.sum())"},
		client.CodeHandlers{OnStdout: func(s string) { out.WriteString(s) }})
	if err != nil || ex.Error != nil || out.String() != "45\n" {
		t.Fatalf("run code: %v %+v %q", err, ex, out.String())
	}

	// Suspend, then any call by name resumes it with its file and variables.
	if s, err := c.Suspend(ctx, sb.Name); err != nil || s.State != api.StateSuspended {
		t.Fatalf("suspend: %v %+v", err, s)
	}
	ex, err = c.RunCode(ctx, sb.Name, api.RunCodeRequest{Code: "len(df)"})
	if err != nil || ex.Error != nil || ex.Results[0]["text"] != "10" {
		t.Fatalf("after resume: %v %+v", err, ex)
	}
	if b, err := c.ReadFile(ctx, sb.Name, "/workspace/notes.txt"); err != nil || string(b) != "kept\n" {
		t.Fatalf("file after resume: %q %v", b, err)
	}

	// A golden memory snapshot and sessions from it.
	sn, err := c.Checkpoint(ctx, sb.ID, api.CheckpointRequest{Type: api.SnapshotMemory, Name: "golden"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSnapshot(ctxT(t), sn.ID) })
	for i := 0; i < 2; i++ {
		s, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SnapshotID: sn.ID})
		if err != nil {
			t.Fatal(err)
		}
		id := s.ID
		t.Cleanup(func() { c.DeleteSandbox(ctxT(t), id) })
		ex, err := c.RunCode(ctx, id, api.RunCodeRequest{Code: "df.x.max()"})
		if err != nil || ex.Error != nil || ex.Results[0]["text"] != "9" {
			t.Fatalf("session %d from the snapshot: %v %+v", i, err, ex)
		}
	}

	// Fork into two branches that diverge.
	fr, err := c.Fork(ctx, sb.ID, api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSnapshot(ctxT(t), fr.Snapshot.ID) })
	for i, b := range fr.Sandboxes {
		id := b.ID
		t.Cleanup(func() { c.DeleteSandbox(ctxT(t), id) })
		code := []string{"df['x'] = df.x * 2\nint(df.x.sum())", "df['x'] = df.x + 1\nint(df.x.sum())"}[i]
		want := []string{"90", "55"}[i]
		ex, err := c.RunCode(ctx, id, api.RunCodeRequest{Code: code})
		if err != nil || ex.Error != nil || ex.Results[0]["text"] != want {
			t.Fatalf("branch %d: %v %+v", i, err, ex)
		}
	}

	// Errors are typed and carry the daemon's message.
	_, err = c.GetSandbox(ctx, "sdk-go-no-such")
	var apiErr *client.APIError
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &apiErr) || apiErr.Code != "not_found" || !strings.Contains(apiErr.Message, "sdk-go-no-such") {
		t.Fatalf("unknown sandbox: %#v", err)
	}
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMB: i64(-5)}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("bad create: %v", err)
	}
	if _, err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}
