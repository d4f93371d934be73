// Package client is the Go SDK for the forkbox daemon's HTTP API (v1). The
// forkbox CLI is built on it, so everything the CLI does a program can do too.
//
// Install it with `go get github.com/forkbox/forkbox/client` (the wire types
// are in github.com/forkbox/forkbox/api). Version is the SDK's version: it
// follows semantic versioning against the v1 API — a minor version adds
// methods or fields, nothing is removed or changed before a v2 API — and is
// sent in the User-Agent. The Python and TypeScript SDKs (sdk/python,
// sdk/js) have the same surface for sandboxes, code, files, snapshots and
// ports; managing keys, tenants and the audit log is the Go SDK's and the
// CLI's (an operator's task).
//
// A Client is safe for concurrent use and holds no per-call state: create one
// per daemon and share it. Every method takes a context; cancelling it aborts
// the HTTP request, including a streaming exec or a large file transfer.
//
// Errors the daemon reports come back as *APIError, which unwraps to the
// matching errdefs sentinel (re-exported here as ErrNotFound, ErrConflict, …),
// so callers can branch with errors.Is:
//
//	c := client.FromEnv() // FORKBOX_URL, FORKBOX_API_KEY
//	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Image: "python"})
//	if err != nil {
//		return err
//	}
//	defer c.DeleteSandbox(context.Background(), sb.ID)
//
//	res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: "python3", Args: []string{"-c", "print(6*7)"}})
//	if err != nil {
//		return err
//	}
//	fmt.Print(res.Stdout) // 42
//
//	if _, err := c.GetSandbox(ctx, "no-such-box"); errors.Is(err, client.ErrNotFound) {
//		// ...
//	}
//
// Output of a long command can be consumed as it is produced with ExecStream,
// and files move without being held in memory with WriteFile and ReadFileTo.
//
// Code runs in stateful contexts (Jupyter kernels) with RunCode and
// RunCodeStream; a cell that raises is not an error of the call but the
// execution's Error:
//
//	exec, err := c.RunCode(ctx, sb.ID, api.RunCodeRequest{Code: "sum([120, 95])"})
//	if err != nil {
//		return err
//	}
//	if exec.Error != nil {
//		return fmt.Errorf("%s: %s", exec.Error.Name, exec.Error.Value)
//	}
//	fmt.Println(client.MainText(exec)) // 215
//
// CreateContext, ListContexts, InterruptContext, RestartContext and
// DeleteContext manage the contexts.
//
// Checkpoint saves a sandbox as a snapshot (its disk, or with
// api.SnapshotMemory its processes too), CreateSandbox with SnapshotID
// restores one, and Fork does both at once: one memory snapshot, then N
// running copies that diverge from there. ListSnapshots, GetSnapshot and
// DeleteSnapshot manage the snapshots.
//
// Images: BuildImage builds a recipe (api.Recipe: a base, then run, env,
// workdir, user and copy steps, each a cached layer) with an optional build
// context directory for copy steps, streaming the build log; BuildImageYAML
// sends a recipe as written; ImportImage registers a `docker save` tarball or
// an OCI layout tar (TarDir makes one from a layout directory); ListImages,
// GetImage and DeleteImage manage them.
//
// Suspend saves a running sandbox to disk and frees its CPU and memory;
// Resume brings it back under the same id and name, kernels and all. A
// sandbox created with AutoResume (the default) is also resumed by the next
// call that needs it running.
//
// CreatePool keeps a number of sandboxes ready, restored from a golden
// snapshot (or started from an image), and CreateSandbox with Pool hands one
// out at once:
//
//	_, err := c.CreatePool(ctx, api.CreatePoolRequest{Name: "warm", SnapshotID: snap.ID, Size: 4})
//	...
//	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Pool: "warm", Name: "session-42"})
//
// ListPools and DeletePool manage the pools.
//
// The analyst: UploadFile stores a CSV, and Chat asks a question about it in
// plain language; a model answers by running code in the conversation's
// sandbox, and the answer carries the charts the code drew and every step it
// ran. ChatStream follows the answer as it is made (the model's text, each
// piece of code and its output). The answer's ConversationID continues the
// conversation, its variables still defined:
//
//	f, err := os.Open("sales.csv")
//	...
//	up, err := c.UploadFile(ctx, "sales.csv", f, "")
//	...
//	res, err := c.Chat(ctx, api.ChatRequest{Question: "Profit by region?", FileIDs: []string{up.ID}})
//	...
//	res, err = c.Chat(ctx, api.ChatRequest{Question: "And by product?", ConversationID: res.ConversationID})
//
// CreateConversation starts a conversation (and its sandbox, for code cells)
// before any question; ListConversations, GetConversation (with its turns
// and files), DeleteConversation and GetUpload manage them. Chat needs the
// daemon to have a model provider configured; without one it fails with
// ErrUnavailable, and the rest works.
//
// Tenants: every resource belongs to the tenant of the API key that made it.
// With an admin key, CreateKey makes a key for a tenant (its Secret is shown
// only then), ListKeys and RevokeKey manage keys, ListTenants, GetTenant and
// SetTenantQuotas manage tenants' quotas, and Audit reads the audit log;
// Usage, with any key, shows what the caller's tenant holds against its
// quotas. A call that would go over a quota fails with ErrResourceExhausted,
// and its *APIError's Quota says which quota and by how much.
package client
