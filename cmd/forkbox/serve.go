package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/forkbox/forkbox/internal/agent"
	"github.com/forkbox/forkbox/internal/daemon"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/spf13/cobra"
)

func serveCmd() *cobra.Command {
	cfg := daemon.Config{}
	var debug bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the forkbox daemon",
		Long: "Run the forkbox daemon: the HTTP API, the sandbox runtime and the metadata store.\n" +
			"Set FORKBOX_API_KEY to require a bearer key (needed to listen on a non-loopback address).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			cfg.APIKey = os.Getenv("FORKBOX_API_KEY")
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			d, err := daemon.New(ctx, cfg)
			if err != nil {
				return err
			}
			auth := "no API key: loopback only"
			if cfg.APIKey != "" {
				auth = "API key required"
			}
			fmt.Fprintf(os.Stderr, "forkbox daemon listening on http://%s (%s), data in %s\n", d.Addr(), auth, cfg.DataDir)
			return d.Serve(ctx)
		},
	}
	cmd.Flags().StringVar(&cfg.Listen, "listen", "127.0.0.1:8080", "address to listen on")
	cmd.Flags().StringVar(&cfg.DataDir, "data-dir", daemon.DefaultDataDir(), "where forkbox keeps its state")
	cmd.Flags().BoolVar(&debug, "debug", false, "log every request")
	return cmd
}

// internalCmds are started by forkbox itself, never by users.
func internalCmds() []*cobra.Command {
	return []*cobra.Command{
		{
			Use:    "agent",
			Short:  "Run as a sandbox's init (started by the runtime)",
			Hidden: true,
			Args:   cobra.NoArgs,
			RunE: func(*cobra.Command, []string) error {
				if os.Getpid() != 1 {
					return fmt.Errorf("the agent runs only as a sandbox's init (pid 1)")
				}
				return agent.Main()
			},
		},
		{
			Use:    "__sandbox-init",
			Hidden: true,
			Args:   cobra.NoArgs,
			Run:    func(*cobra.Command, []string) { runtime.InitMain() },
		},
	}
}
