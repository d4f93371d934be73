package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/internal/agent/server"
	"github.com/forkbox/forkbox/internal/cluster"
	"github.com/forkbox/forkbox/internal/daemon"
	"github.com/forkbox/forkbox/internal/httpapi"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/sandboxinit"
	"github.com/forkbox/forkbox/internal/units"
	"github.com/forkbox/forkbox/internal/userns"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
			fmt.Fprintf(os.Stderr, "web UI: http://%s/\n", d.Addr())
			fmt.Fprintf(os.Stderr, "on exit (Ctrl-C, SIGTERM): %s\n", onExitSays[cfg.OnExit])
			err = d.Serve(ctx)
			if rep := d.ShutdownReport; rep != nil {
				fmt.Fprintf(os.Stderr, "forkbox daemon stopped (--on-exit=%s): %s\n", cfg.OnExit, rep)
			}
			return err
		},
	}
	addServeFlags(cmd, &cfg, &debug)
	return cmd
}

// onExitSays tells, at start, what each --on-exit policy will do.
var onExitSays = map[string]string{
	sandbox.OnExitSuspend:   "named sessions are suspended to disk (they resume at the next start), the others terminated (--on-exit=suspend)",
	sandbox.OnExitKeep:      "every sandbox keeps running; the next start adopts them; until then nothing idles them out (--on-exit=keep)",
	sandbox.OnExitTerminate: "every sandbox is terminated (--on-exit=terminate)",
}

// addServeFlags adds serve's flags to cmd. prepare takes them too (and
// uses those that say where images go), so that `make run ARGS=…` builds
// the images where the daemon it starts looks for them.
func addServeFlags(cmd *cobra.Command, cfg *daemon.Config, debug *bool) {
	cmd.Flags().StringVar(&cfg.Listen, "listen", "127.0.0.1:8080", "address to listen on")
	addDataFlags(cmd, cfg)
	cmd.Flags().BoolVar(debug, "debug", false, "log every request")
	cmd.Flags().Int64Var(&cfg.MaxUploadMB, "max-upload-mb", envInt("FORKBOX_MAX_UPLOAD_MB", 50),
		"largest CSV a chat upload may be, in MiB (env FORKBOX_MAX_UPLOAD_MB)")
	addImageBoundFlags(cmd, cfg)
	lockWait := sandbox.DefaultLockWait
	if v, err := time.ParseDuration(os.Getenv("FORKBOX_LOCK_WAIT")); err == nil && v > 0 {
		lockWait = v
	}
	cmd.Flags().Uint32Var(&cfg.UsernsFirst, "userns-first", uint32(envInt("FORKBOX_USERNS_FIRST", int64(userns.DefaultFirst))),
		"first host id of the ranges sandboxes' user namespaces map onto; never a host account's (env FORKBOX_USERNS_FIRST)")
	cmd.Flags().IntVar(&cfg.UsernsCount, "userns-count", int(envInt("FORKBOX_USERNS_COUNT", userns.DefaultCount)),
		"how many 65536-id ranges from --userns-first sandboxes may use (env FORKBOX_USERNS_COUNT)")
	var dnsDefault []string
	if v := os.Getenv("FORKBOX_DNS_UPSTREAM"); v != "" {
		dnsDefault = strings.Split(v, ",")
	}
	cmd.Flags().StringSliceVar(&cfg.DNSUpstreams, "dns-upstream", dnsDefault,
		"DNS servers (host[:port], repeatable) that sandboxes' names are resolved with, after their egress policy allows them; default the host's /etc/resolv.conf nameservers (env FORKBOX_DNS_UPSTREAM, comma-separated)")
	cmd.Flags().StringVar(&cfg.PortsDomain, "ports-domain", os.Getenv("FORKBOX_PORTS_DOMAIN"),
		"also serve a sandbox's ports at host names <port>-<sandbox>.DOMAIN, at their root (point a wildcard DNS name *.DOMAIN at the daemon; env FORKBOX_PORTS_DOMAIN)")
	onExit := os.Getenv("FORKBOX_ON_EXIT")
	if onExit == "" {
		onExit = sandbox.OnExitSuspend
	}
	cmd.Flags().StringVar(&cfg.OnExit, "on-exit", onExit,
		"what stopping the daemon does with running sandboxes: suspend (named sessions to disk, the others terminated; nothing lost, nothing left running), keep (all keep running for the next start to adopt: restarts and upgrades under a service manager), terminate (env FORKBOX_ON_EXIT)")
	cmd.Flags().DurationVar(&cfg.LockWait, "lock-wait", lockWait,
		"longest a call waits for a sandbox that another operation (a suspend, resume, checkpoint, create) holds before it answers 409 busy (env FORKBOX_LOCK_WAIT)")
	defPool := sandbox.DefaultPoolSize
	if v, err := strconv.Atoi(os.Getenv("FORKBOX_DEFAULT_POOL")); err == nil && v >= 0 {
		defPool = v
	}
	cmd.Flags().IntVar(&cfg.DefaultPool, "default-pool", defPool,
		"how many ready sandboxes of the default image, each with its Python kernel started, the daemon keeps so that a plain create's first cell answers at once; 0 turns it off (env FORKBOX_DEFAULT_POOL)")
	lazyOn, err := strconv.ParseBool(os.Getenv("FORKBOX_LAZY_RESTORE"))
	lazyOff := err == nil && !lazyOn
	cmd.Flags().Var(newNotBool(&cfg.NoLazyRestore, lazyOff), "lazy-restore",
		"restore memory snapshots lazily where the host allows: the sandbox starts while its pages are copied in, instead of after (env FORKBOX_LAZY_RESTORE=0 turns it off)")
	cmd.Flags().Lookup("lazy-restore").NoOptDefVal = "true"
	addHTTPFlags(cmd, cfg)
	addClusterFlags(cmd, cfg)
}

// addHTTPFlags adds the flags of the HTTP server's edges (docs/OPERATIONS.md,
// "The HTTP edge").
func addHTTPFlags(cmd *cobra.Command, cfg *daemon.Config) {
	f := cmd.Flags()
	f.DurationVar(&cfg.HTTPIdleTimeout, "http-idle-timeout", envDuration("FORKBOX_HTTP_IDLE_TIMEOUT", httpapi.DefaultIdleTimeout),
		"how long a keep-alive connection may wait for its next request before the daemon closes it (env FORKBOX_HTTP_IDLE_TIMEOUT)")
	f.DurationVar(&cfg.HTTPBodyTimeout, "http-body-timeout", envDuration("FORKBOX_HTTP_BODY_TIMEOUT", httpapi.DefaultBodyTimeout),
		"how long a request body may take before it must keep --http-body-min-rate; a slower one is cut with a 400 (env FORKBOX_HTTP_BODY_TIMEOUT)")
	f.Int64Var(&cfg.HTTPBodyMinRate, "http-body-min-rate", envInt("FORKBOX_HTTP_BODY_MIN_RATE", httpapi.DefaultBodyMinRate),
		"the slowest a request body may arrive, in bytes per second on average, after --http-body-timeout (env FORKBOX_HTTP_BODY_MIN_RATE)")
	maxConns := daemon.DefaultHTTPMaxConns()
	if v, err := strconv.Atoi(os.Getenv("FORKBOX_HTTP_MAX_CONNS")); err == nil && v != 0 {
		maxConns = v
	}
	f.IntVar(&cfg.HTTPMaxConns, "http-max-conns", maxConns,
		"most connections the API keeps open at once: at the cap the longest idle one is closed, and new ones wait while all are busy; default a quarter of the daemon's open-file limit, -1 for no cap (env FORKBOX_HTTP_MAX_CONNS)")
}

// envDuration is the duration in env var key, else def.
func envDuration(key string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// addClusterFlags adds the flags of the shared stores and of a node of a
// cluster (docs/ARCHITECTURE.md, "Many nodes").
func addClusterFlags(cmd *cobra.Command, cfg *daemon.Config) {
	f := cmd.Flags()
	f.StringVar(&cfg.Store, "store", os.Getenv("FORKBOX_STORE"),
		"metadata store: empty for SQLite in the data dir, or postgres://user:password@host:5432/db?sslmode=… for a PostgreSQL that several daemons share as nodes of one cluster (env FORKBOX_STORE)")
	f.StringVar(&cfg.Blobs, "blobs", os.Getenv("FORKBOX_BLOBS"),
		"where snapshots and suspend images live: empty for the data dir, or s3://bucket/prefix?endpoint=host:port&secure=false&region=… for S3-compatible object storage; credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or the URL (env FORKBOX_BLOBS)")
	f.Int64Var(&cfg.BlobCacheMB, "blob-cache-mb", envInt("FORKBOX_BLOB_CACHE_MB", daemon.DefaultBlobCacheMB),
		"with --blobs, how much of the data dir holds snapshots as a local cache, in MiB (env FORKBOX_BLOB_CACHE_MB)")
	gcGrace := daemon.DefaultBlobGCGrace
	if v, err := time.ParseDuration(os.Getenv("FORKBOX_BLOB_GC_GRACE")); err == nil && v >= 0 {
		gcGrace = v
	}
	f.DurationVar(&cfg.BlobGCGrace, "blob-gc-grace", gcGrace,
		"with --blobs, how old an object no snapshot record names must be before the collector (at start, then hourly) deletes it (env FORKBOX_BLOB_GC_GRACE)")
	addRetainFlag(cmd, cfg)
	host, _ := os.Hostname()
	nodeID := os.Getenv("FORKBOX_NODE_ID")
	if nodeID == "" {
		nodeID = host
	}
	f.StringVar(&cfg.NodeID, "node-id", nodeID,
		"with a PostgreSQL --store, this node's id in the cluster (env FORKBOX_NODE_ID)")
	f.StringVar(&cfg.Advertise, "advertise", os.Getenv("FORKBOX_ADVERTISE"),
		"with a PostgreSQL --store, the URL other nodes reach this one's API at (default http://<--listen>, when that is not a wildcard address; env FORKBOX_ADVERTISE)")
	timeout := cluster.DefaultTimeout
	if v, err := time.ParseDuration(os.Getenv("FORKBOX_NODE_TIMEOUT")); err == nil && v > 0 {
		timeout = v
	}
	f.DurationVar(&cfg.NodeTimeout, "node-timeout", timeout,
		"a node whose last heartbeat is older is down: its suspended sessions resume on other nodes, its running sandboxes are lost (env FORKBOX_NODE_TIMEOUT)")
	onLost := os.Getenv("FORKBOX_ON_NODE_LOST")
	if onLost == "" {
		onLost = cluster.OnLostReport
	}
	f.StringVar(&cfg.OnNodeLost, "on-node-lost", onLost,
		"what becomes of a down node's running sandboxes: report (state lost) or resume (from their last suspend image, without what changed since; lost when they have none) (env FORKBOX_ON_NODE_LOST)")
}

// addImageBoundFlags adds the flags that bound image imports and builds
// (image.Bounds), in MiB and files.
func addImageBoundFlags(cmd *cobra.Command, cfg *daemon.Config) {
	d := image.DefaultBounds
	var archiveMB, expandedMB int64
	cmd.Flags().Int64Var(&archiveMB, "max-image-archive-mb", envInt("FORKBOX_MAX_IMAGE_ARCHIVE_MB", d.ArchiveBytes>>20),
		"largest image archive an import may send, and build context a build may, as sent (compressed or not), in MiB (env FORKBOX_MAX_IMAGE_ARCHIVE_MB)")
	cmd.Flags().Int64Var(&expandedMB, "max-image-expanded-mb", envInt("FORKBOX_MAX_IMAGE_EXPANDED_MB", d.ExpandedBytes>>20),
		"most an image archive's layers (together), a build context, or a build's copy steps (together) may expand to, in MiB (env FORKBOX_MAX_IMAGE_EXPANDED_MB)")
	cmd.Flags().Int64Var(&cfg.ImageBounds.Files, "max-image-files", envInt("FORKBOX_MAX_IMAGE_FILES", d.Files),
		"most files an image archive's layers (together), a build context, or a build's copy steps (together) may hold (env FORKBOX_MAX_IMAGE_FILES)")
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		cfg.ImageBounds.ArchiveBytes, cfg.ImageBounds.ExpandedBytes = archiveMB<<20, expandedMB<<20
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}

// addRetainFlag adds --retain-terminated (env FORKBOX_RETAIN_TERMINATED):
// how long terminated sandboxes' records stay listed before the daemon
// prunes them. A malformed environment value fails the start rather than
// falling back to the default, which could prune records that were meant
// to be kept.
func addRetainFlag(cmd *cobra.Command, cfg *daemon.Config) {
	cfg.RetainTerminated = daemon.DefaultRetainTerminated
	var envErr error
	if v, ok := os.LookupEnv("FORKBOX_RETAIN_TERMINATED"); ok {
		if d, err := parseRetention(v); err != nil {
			envErr = fmt.Errorf("FORKBOX_RETAIN_TERMINATED=%q: %w", v, err)
		} else {
			cfg.RetainTerminated = d
		}
	}
	cmd.Flags().Var(retentionValue{&cfg.RetainTerminated}, "retain-terminated",
		"how long a terminated sandbox's record, events and cells are kept (and listed with include_terminated) before the daemon prunes them, at start and then hourly: a duration such as 72h or whole days such as 7d; 0 keeps them forever. A terminated sandbox that a snapshot or a conversation names is kept while they exist (env FORKBOX_RETAIN_TERMINATED)")
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if envErr != nil && !c.Flags().Changed("retain-terminated") {
			return envErr
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}

// parseRetention reads a retention: a Go duration (72h, 90m), whole days
// (7d) or 0; never negative.
func parseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days < 0 || days > 100*365 {
			return 0, fmt.Errorf("want a duration such as 72h, whole days such as 7d, or 0")
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("want a duration such as 72h, whole days such as 7d, or 0")
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("a retention cannot be negative")
	}
	return d, nil
}

// retentionValue is the flag value of a retention (parseRetention).
type retentionValue struct{ d *time.Duration }

func (v retentionValue) String() string {
	switch {
	case v.d == nil:
		return ""
	case *v.d > 0 && *v.d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", *v.d/(24*time.Hour))
	}
	return v.d.String()
}

func (v retentionValue) Set(s string) error {
	d, err := parseRetention(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

func (v retentionValue) Type() string { return "duration" }

// notBool is a boolean flag that sets the negation of a Config field, so
// that the field's zero value is the flag's default (true).
type notBool struct{ p *bool }

func newNotBool(p *bool, off bool) notBool { *p = off; return notBool{p} }

func (b notBool) String() string {
	if b.p == nil {
		return "true"
	}
	return strconv.FormatBool(!*b.p)
}
func (b notBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.p = !v
	return nil
}
func (b notBool) Type() string { return "bool" }

// envInt reads an integer environment variable, def when unset or bad.
func envInt(key string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(key), 10, 64); err == nil && v > 0 {
		return v
	}
	return def
}

// addDataFlags adds the flags that say where the daemon's state lives.
func addDataFlags(cmd *cobra.Command, cfg *daemon.Config) {
	cmd.Flags().StringVar(&cfg.DataDir, "data-dir", daemon.DefaultDataDir(), "where forkbox keeps its state")
	cmd.Flags().StringVar(&cfg.ImagesDir, "images-dir", os.Getenv("FORKBOX_IMAGES_DIR"),
		"where images and their layers live (env FORKBOX_IMAGES_DIR; default <data-dir>/images)")
}

// prepareCmd builds the default image before the first daemon start.
func prepareCmd() *cobra.Command {
	var cfg daemon.Config
	cmd := &cobra.Command{
		Use:   "prepare",
		Short: "Build the default images (needs root; make run and make test run it)",
		Long: "Build the default \"python\" image from its recipe (images/python.yaml, embedded in the binary:\n" +
			"Debian bookworm bootstrapped from the host's mirror plus the data-science packages) and the\n" +
			"host-derived \"host\" image, into the images directory. Cached layers are reused, so a second\n" +
			"run takes well under a second. A running daemon builds the same on start, in the background.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			if cfg.ImagesDir == "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "images go to %s\n", filepath.Join(cfg.DataDir, "images"))
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			start := time.Now()
			printer := newBuildPrinter(cmd)
			img, err := daemon.Prepare(ctx, cfg, printer.onEvent)
			printer.stop()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "image %s ready: %d layers, %s, in %s\n", img.Name, len(img.Layers),
				units.Bytes(img.SizeBytes), time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	var debug bool
	addServeFlags(cmd, &cfg, &debug)
	// Only the flags that say where state and images live matter here.
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "data-dir" && f.Name != "images-dir" {
			f.Hidden = true
		}
	})
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
				return server.Main()
			},
		},
		{
			Use:    "__sandbox-init",
			Hidden: true,
			Args:   cobra.NoArgs,
			Run:    func(*cobra.Command, []string) { sandboxinit.Main() },
		},
		{
			Use:                sandboxinit.SpawnRole,
			Hidden:             true,
			DisableFlagParsing: true,
			Run:                func(_ *cobra.Command, args []string) { sandboxinit.Spawn(args) },
		},
	}
}
