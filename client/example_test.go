package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

// These examples need a running daemon (forkbox serve), so they are compiled
// but not run by go test.

func Example() {
	ctx := context.Background()
	c := client.FromEnv() // FORKBOX_URL, FORKBOX_API_KEY

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Image: "python"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.DeleteSandbox(context.Background(), sb.ID)

	res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: "python3", Args: []string{"-c", "print(6*7)"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
}

func ExampleNew() {
	c := client.New("http://10.0.0.5:8080", client.WithAPIKey(os.Getenv("FORKBOX_API_KEY")))
	if err := c.Health(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func ExampleClient_CreateSandbox() {
	cpus, mem, idle := 2.0, int64(2048), int64(600)
	sb, err := client.FromEnv().CreateSandbox(context.Background(), api.CreateSandboxRequest{
		Name:        "analysis",
		CPUs:        &cpus,
		MemoryMB:    &mem,
		TimeoutSecs: &idle, // named: suspended, not terminated, after 10 idle minutes
		Labels:      map[string]string{"team": "data"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sb.ID, sb.State)
}

func ExampleClient_ListSandboxes() {
	list, err := client.FromEnv().ListSandboxes(context.Background(), client.ListOptions{
		State:  api.StateRunning,
		Labels: map[string]string{"team": "data"},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, sb := range list.Sandboxes {
		fmt.Println(sb.ID, sb.Name)
	}
}

func ExampleClient_ExecStream() {
	res, err := client.FromEnv().ExecStream(context.Background(), "analysis",
		api.ExecRequest{Cmd: "sh", Args: []string{"-c", "for i in 1 2 3; do echo $i; sleep 1; done"}},
		func(b []byte) { os.Stdout.Write(b) },
		func(b []byte) { os.Stderr.Write(b) },
	)
	if err != nil {
		log.Fatal(err)
	}
	os.Exit(res.ExitCode)
}

func ExampleClient_WriteFile() {
	ctx := context.Background()
	c := client.FromEnv()

	f, err := os.Open("sales.csv")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	// Streamed: a large file is never held in memory. "data/sales.csv" is
	// relative to /workspace; parent directories are created.
	if _, err := c.WriteFile(ctx, "analysis", "data/sales.csv", f, 0o644); err != nil {
		log.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, "analysis", "run.sh", strings.NewReader("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		log.Fatal(err)
	}
}

func ExampleClient_ReadFileTo() {
	out, err := os.Create("chart.png")
	if err != nil {
		log.Fatal(err)
	}
	defer out.Close()
	if _, err := client.FromEnv().ReadFileTo(context.Background(), "analysis", "chart.png", out); err != nil {
		log.Fatal(err)
	}
}

func ExampleAPIError() {
	_, err := client.FromEnv().GetSandbox(context.Background(), "no-such-box")
	switch {
	case errors.Is(err, client.ErrNotFound):
		fmt.Println("no such sandbox")
	case err != nil:
		var ae *client.APIError
		if errors.As(err, &ae) {
			fmt.Println(ae.Status, ae.Code, ae.Message)
		}
	}
}

func ExampleClient_RunCode() {
	ctx := context.Background()
	c := client.FromEnv()

	// Cells in one context share their variables, like a notebook.
	if _, err := c.RunCode(ctx, "analysis", api.RunCodeRequest{Code: "sales = [120, 95]"}); err != nil {
		log.Fatal(err)
	}
	exec, err := c.RunCode(ctx, "analysis", api.RunCodeRequest{Code: "sum(sales)"})
	if err != nil {
		log.Fatal(err) // the call failed: no such sandbox, daemon unreachable, …
	}
	if exec.Error != nil {
		log.Fatalf("%s: %s", exec.Error.Name, exec.Error.Value) // the cell raised
	}
	fmt.Println(client.MainText(exec)) // 215
}

func ExampleClient_RunCodeStream() {
	timeout := int64(60_000)
	exec, err := client.FromEnv().RunCodeStream(context.Background(), "analysis",
		api.RunCodeRequest{Code: "import time\nfor i in range(3):\n    print(i); time.sleep(1)", TimeoutMS: &timeout},
		client.CodeHandlers{
			OnStdout: func(s string) { fmt.Print(s) },
			OnStderr: func(s string) { fmt.Fprint(os.Stderr, s) },
			OnResult: func(r map[string]any) {
				if _, ok := r["png"]; ok {
					fmt.Println("[a figure]")
				}
			},
			OnError: func(e api.ExecutionError) { fmt.Fprintln(os.Stderr, strings.Join(e.Traceback, "\n")) },
		})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cell", exec.ExecutionCount, "took", exec.DurationMS, "ms")
}

func ExampleClient_Checkpoint() {
	ctx := context.Background()
	c := client.FromEnv()

	// Save the kernels' variables too, then start a second sandbox from there.
	sn, err := c.Checkpoint(ctx, "analysis", api.CheckpointRequest{Type: api.SnapshotMemory, Name: "after-load"})
	if errors.Is(err, client.ErrUnavailable) {
		log.Fatal("this host cannot take memory snapshots: ", err)
	} else if err != nil {
		log.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SnapshotID: sn.ID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sn.ID, "restored as", sb.ID)
}

func ExampleClient_Fork() {
	ctx := context.Background()
	c := client.FromEnv()

	// Three copies of a live sandbox, each free to try something else.
	res, err := c.Fork(ctx, "analysis", api.ForkRequest{Count: 3, Names: []string{"try-a", "try-b", "try-c"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, sb := range res.Sandboxes {
		fmt.Println(sb.Name, sb.ID, "from", res.Snapshot.ID)
	}
}
