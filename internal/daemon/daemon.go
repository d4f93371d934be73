// Package daemon is forkbox's composition root: it builds every part from the
// configuration in dependency order (metadata store, images, network, runtime,
// sandbox manager, HTTP API), starts them, and stops them in reverse order.
// Sandboxes outlive the daemon: a restart adopts the ones still running.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/internal/analyst"
	"github.com/forkbox/forkbox/internal/build"
	"github.com/forkbox/forkbox/internal/chat"
	"github.com/forkbox/forkbox/internal/cluster"
	"github.com/forkbox/forkbox/internal/criu"
	"github.com/forkbox/forkbox/internal/httpapi"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/netsetup"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/snapshot"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/userns"
)

// Config is the daemon's configuration.
type Config struct {
	Listen  string // host:port
	DataDir string
	// ImagesDir holds images and their layers; default <DataDir>/images.
	// Daemons may share one (tests do).
	ImagesDir string
	APIKey    string
	// OnExit is what Serve does with running sandboxes when it stops:
	// sandbox.OnExitSuspend (the default), OnExitKeep or OnExitTerminate.
	OnExit string
	// MaxUploadMB bounds a chat upload (default 50).
	MaxUploadMB int64
	// ImageBounds bound image imports and builds: the archive as sent,
	// what it expands to, its files (zero fields: image.DefaultBounds).
	ImageBounds image.Bounds
	// Binary is the executable that runs inside sandboxes (their init and
	// agent); default: forkbox-agent next to this executable, else this
	// executable (see SandboxBinary).
	Binary   string
	Defaults sandbox.Defaults
	// LockWait bounds every wait for a busy sandbox (default
	// sandbox.DefaultLockWait).
	LockWait time.Duration
	// DefaultPool is how many ready sandboxes the default pool keeps
	// (0: none; package sandbox, defaultpool.go).
	DefaultPool int
	// NoLazyRestore turns lazy restores off (the criu package's
	// lazy_linux.go): memory snapshots then restore all their pages before
	// the sandbox runs, as on hosts that cannot restore lazily.
	NoLazyRestore bool
	// UsernsFirst and UsernsCount choose the host ids that sandboxes' user
	// namespaces map onto: UsernsCount ranges of 65536 from UsernsFirst
	// (defaults userns.DefaultFirst and userns.DefaultCount).
	UsernsFirst uint32
	UsernsCount int
	// PortsDomain, when set, serves sandboxes' ports also at host names
	// <port>-<sandbox>.<PortsDomain> (a wildcard DNS name for the daemon).
	PortsDomain string
	// DNSUpstreams are the servers (host[:port]) that sandboxes' resolvers
	// ask (default: the host's resolv.conf nameservers).
	DNSUpstreams []string
	// Store is the metadata store's DSN: "" for SQLite in DataDir, or a
	// postgres:// URL; a PostgreSQL store makes the daemon node NodeID of
	// the cluster of daemons that share it.
	Store string
	// Blobs is where snapshots live: "" for DataDir, or an s3:// URL;
	// then BlobCacheMB of DataDir caches them and objects no record names
	// are collected once older than BlobGCGrace.
	Blobs       string
	BlobCacheMB int64
	BlobGCGrace time.Duration
	// RetainTerminated is how long terminated sandboxes' records (their
	// events and cells too) are kept before they are pruned, at start and
	// then hourly; 0 keeps them forever (the zero Config's choice; serve's
	// default is DefaultRetainTerminated).
	RetainTerminated time.Duration
	// NodeID, Advertise, NodeTimeout and OnNodeLost configure the node
	// (package cluster); Advertise defaults to http://Listen.
	NodeID      string
	Advertise   string
	NodeTimeout time.Duration
	OnNodeLost  string
	// The HTTP server's edges (httpapi, edges.go; zero: httpapi's
	// defaults): a keep-alive connection is closed after HTTPIdleTimeout
	// without a request, a request body must arrive at HTTPBodyMinRate
	// bytes/s after a grace of HTTPBodyTimeout, and at most HTTPMaxConns
	// connections are open at once (0: DefaultHTTPMaxConns; negative: no
	// cap).
	HTTPIdleTimeout time.Duration
	HTTPBodyTimeout time.Duration
	HTTPBodyMinRate int64
	HTTPMaxConns    int
	Logger          *slog.Logger
}

// DefaultHTTPMaxConns is the default cap on the API's open connections: a
// quarter of the daemon's open-file limit (each proxied connection to a
// sandbox's port holds a second descriptor), so that clients cannot take
// the descriptors that sandboxes, snapshots and the store need; at least 64.
func DefaultHTTPMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 1 << 16
	}
	return max(64, int(rl.Cur/4))
}

// Defaults of the blob store's settings.
const (
	DefaultBlobCacheMB = 10240
	DefaultBlobGCGrace = time.Hour
	// DefaultRetainTerminated is serve's --retain-terminated: a week.
	DefaultRetainTerminated = 7 * 24 * time.Hour
)

// clustered reports whether the daemon is a node of a cluster: its store is
// one that several daemons share.
func (c *Config) clustered() bool {
	return strings.HasPrefix(c.Store, "postgres://") || strings.HasPrefix(c.Store, "postgresql://")
}

// DefaultDataDir is ~/.local/share/forkbox (or $XDG_DATA_HOME/forkbox).
func DefaultDataDir() string {
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "forkbox")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "/var/lib/forkbox"
	}
	return filepath.Join(home, ".local", "share", "forkbox")
}

func (c *Config) imagesDir() string {
	if c.ImagesDir != "" {
		return c.ImagesDir
	}
	return filepath.Join(c.DataDir, "images")
}

// SandboxBinary returns the executable that runs inside sandboxes: the
// configured one, else forkbox-agent beside this executable (make build puts
// it there: the same init and agent without the daemon's dependencies, so a
// sandbox starts ~40 ms sooner), else this executable, which plays both roles
// too. Memory snapshots map the binary they were taken with, so it is the
// same file for the life of a data dir unless forkbox is rebuilt.
func SandboxBinary(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	agent := filepath.Join(filepath.Dir(exe), "forkbox-agent")
	if fi, err := os.Stat(agent); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return agent, nil
	}
	return exe, nil
}

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	if c.APIKey == "" && !isLoopback(host) {
		return fmt.Errorf("refusing to listen on %s without an API key: set FORKBOX_API_KEY, or listen on 127.0.0.1", c.Listen)
	}
	if c.DataDir == "" {
		return errors.New("--data-dir is empty")
	}
	if c.OnExit == "" {
		c.OnExit = sandbox.OnExitSuspend
	}
	if err := sandbox.ValidOnExit(c.OnExit); err != nil {
		return err
	}
	if c.clustered() {
		if c.NodeID == "" {
			return errors.New("--node-id is empty: a daemon with a shared --store is a node of a cluster and needs an id")
		}
		if c.Advertise == "" {
			if host == "" || host == "0.0.0.0" || host == "::" {
				return fmt.Errorf("--advertise is needed: --listen %s does not say which address other nodes reach this one at", c.Listen)
			}
			c.Advertise = "http://" + c.Listen
		}
		if c.OnNodeLost == "" {
			c.OnNodeLost = cluster.OnLostReport
		}
		if err := cluster.ValidOnLost(c.OnNodeLost); err != nil {
			return err
		}
		if c.Blobs == "" {
			return errors.New("--blobs is needed with a shared --store: the nodes of a cluster keep snapshots and suspend images in one S3 bucket, so that any node can resume any session")
		}
	}
	if c.BlobCacheMB < 0 {
		return fmt.Errorf("--blob-cache-mb %d: want 0 or more", c.BlobCacheMB)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Daemon is a running forkbox daemon.
type Daemon struct {
	cfg   Config
	log   *slog.Logger
	store store.Backend
	node  *cluster.Node
	snaps *snapshot.Store
	// blobsOn: snapshots live in object storage (--blobs).
	blobsOn bool
	blobs   analyst.Blobs // the --blobs bucket (a *blob.S3), nil without one
	api     *httpapi.Server
	mgr     *sandbox.Manager
	rt      *runtime.Runtime
	http    *http.Server
	ln      net.Listener

	// bgCtx ends background work (the default image's build) at Close.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup

	// ShutdownReport is what Serve's on-exit policy did, once it returned.
	ShutdownReport *sandbox.ShutdownReport
}

// New builds and starts every part; Serve then answers requests.
func New(ctx context.Context, cfg Config) (_ *Daemon, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Binary, err = SandboxBinary(cfg.Binary); err != nil {
		return nil, err
	}
	log.Info("sandbox binary", "path", cfg.Binary)
	d := &Daemon{cfg: cfg, log: log}
	d.bgCtx, d.bgCancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if d.store, err = store.Open(ctx, cfg.Store, cfg.DataDir); err != nil {
		return nil, err
	}
	images, err := image.Open(cfg.imagesDir())
	if err != nil {
		return nil, err
	}
	images.SetBounds(cfg.ImageBounds)
	if _, err := images.EnsureHostPython(ctx); err != nil {
		// The daemon still serves; creates that need the image say why they fail.
		log.Warn("host image unavailable", "image", image.HostImage, "err", err)
	}
	first, count := cfg.UsernsFirst, cfg.UsernsCount
	if first == 0 {
		first = userns.DefaultFirst
	}
	if count == 0 {
		count = userns.DefaultCount
	}
	absData, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ids, err := userns.New(first, count, userns.DefaultClaimDir, absData)
	if err != nil {
		return nil, err
	}
	// Before anything allocates (the runtime pre-starts inits at once).
	if err := sandbox.ReserveIDRanges(ctx, d.store, ids, log); err != nil {
		return nil, err
	}
	nm, err := netsetup.New(ctx, netsetup.Config{DNSUpstreams: cfg.DNSUpstreams, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	var mgr *sandbox.Manager
	rt, err := runtime.New(runtime.Config{
		Dir:      filepath.Join(cfg.DataDir, "sandboxes"),
		CacheDir: filepath.Join(cfg.DataDir, "cache"),
		Binary:   cfg.Binary,
		Net:      nm,
		IDs:      ids,
		OnExit:   func(id, reason string) { mgr.OnExit(id, reason) },
		Logger:   log,
	})
	if err != nil {
		return nil, err
	}
	d.rt = rt
	defaults := cfg.Defaults
	if defaults == (sandbox.Defaults{}) {
		defaults = sandbox.DefaultDefaults
	}
	snaps, err := snapshot.Open(filepath.Join(cfg.DataDir, "snapshots"))
	if err != nil {
		return nil, err
	}
	if err := d.openBlobs(ctx, snaps, images); err != nil {
		return nil, err
	}
	mgr = sandbox.New(d.store, rt, images, snaps, defaults, log)
	if cfg.clustered() {
		mgr.SetNode(cfg.NodeID)
	}
	mgr.SetLockWait(cfg.LockWait)
	if err := mgr.SetDefaultPool(cfg.DefaultPool); err != nil {
		return nil, fmt.Errorf("--default-pool: %w", err)
	}
	mgr.SetQuotaSource(d.store)
	mgr.SetCellStore(d.store)
	mgr.SetSandboxesDir(filepath.Join(cfg.DataDir, "sandboxes"))
	mgr.SetIDRanges(ids)
	// Build sandboxes are sandboxes too: within the host's bounds.
	builder := build.New(images, rt, build.Config{Logger: log, Limits: sandbox.ClampToHost(build.DefaultLimits)})
	mgr.SetImageBuilder(builder)
	checkCRIU := func(ctx context.Context) (*criu.Host, error) {
		h, err := criu.Check(ctx)
		if err == nil && h.LazyPages && cfg.NoLazyRestore {
			h.LazyPages, h.LazyProblem = false, "turned off (--lazy-restore=false)"
		}
		return h, err
	}
	mgr.SetCRIUCheck(func() (*criu.Host, error) { return checkCRIU(d.bgCtx) })
	if h, err := checkCRIU(ctx); err != nil {
		log.Warn("memory snapshots unavailable", "err", err)
		mgr.SetCRIU(nil, err.Error())
	} else {
		if !h.Usable {
			log.Warn("memory snapshots unavailable", "problem", h.Problem, "criu_output", h.ProblemLog)
		} else {
			log.Info("CRIU ready for memory snapshots", "path", h.Path, "version", h.Version, "env", h.Env, "lazy_restore", h.LazyPages)
			if !h.LazyPages {
				log.Info("restores fill memory before the sandbox runs", "why", h.LazyProblem)
			}
		}
		mgr.SetCRIU(h, "")
	}
	if cfg.clustered() {
		// Announced before the reconcile: other nodes must not take this
		// one for down (and settle its sandboxes) while it adopts them.
		if d.node, err = cluster.New(cluster.Config{NodeID: cfg.NodeID, Advertise: cfg.Advertise, Timeout: cfg.NodeTimeout,
			OnLost: cfg.OnNodeLost, Logger: log}, d.store, mgr); err != nil {
			return nil, err
		}
		if err := d.node.Announce(ctx); err != nil {
			return nil, err
		}
	}
	if err := mgr.Start(ctx); err != nil {
		return nil, fmt.Errorf("reconcile sandboxes: %w", err)
	}
	d.mgr = mgr
	if d.node != nil {
		if err := d.node.Start(ctx); err != nil {
			return nil, err
		}
	}
	d.startBlobGC()
	d.startRetention()
	// The default image: built once (forkbox prepare), then every start
	// only checks that the recipe's layers are all cached.
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		if _, err := ensureDefaultImage(d.bgCtx, builder, mgr, log); err != nil && d.bgCtx.Err() == nil {
			log.Error("default image unavailable", "image", image.DefaultImage, "err", err)
		}
	}()
	prov, provErr := chat.ProviderFromEnv(os.Getenv)
	if provErr != nil {
		log.Info("chat disabled until a model provider is configured", "why", provErr)
	} else {
		log.Info("chat ready", "provider", prov.Name(), "model", prov.Model())
	}
	chatSvc, err := analyst.New(d.store, mgr, analyst.Config{
		Provider: prov, ProviderErr: provErr, UploadsDir: filepath.Join(cfg.DataDir, "uploads"),
		MaxUploadBytes: cfg.MaxUploadMB << 20, Logger: log, Blobs: d.blobs,
	})
	if err != nil {
		return nil, err
	}
	maxConns := cfg.HTTPMaxConns
	if maxConns == 0 {
		maxConns = DefaultHTTPMaxConns()
	}
	hcfg := httpapi.Config{APIKey: cfg.APIKey, Access: d.store, Chat: chatSvc, Logger: log, PortsDomain: cfg.PortsDomain,
		MaxImageArchiveBytes: images.Bounds().ArchiveBytes,
		IdleTimeout:          cfg.HTTPIdleTimeout, BodyTimeout: cfg.HTTPBodyTimeout, BodyMinRate: cfg.HTTPBodyMinRate,
		MaxConns: max(maxConns, 0)}
	if d.node != nil {
		hcfg.Cluster = d.node
	}
	api, err := httpapi.New(hcfg, mgr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	d.api = api
	d.http, d.ln = api.NewHTTPServer(ln)
	return d, nil
}

// Addr is the address the daemon listens on.
func (d *Daemon) Addr() string { return d.ln.Addr().String() }

// Serve answers requests until ctx ends, then shuts down gracefully.
func (d *Daemon) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- d.http.Serve(d.ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := d.http.Shutdown(sctx)
	// Nothing starts a sandbox from here on (pool refills included), and
	// creates still under way end first: the policy sees every sandbox.
	d.mgr.StopStarting()
	d.log.Info("stopping: applying the on-exit policy to running sandboxes", "on_exit", d.cfg.OnExit, "running", d.mgr.LiveCount())
	rep := d.mgr.Shutdown(context.Background(), d.cfg.OnExit)
	d.log.Info("stopped sandboxes", "on_exit", d.cfg.OnExit, "suspended", rep.Suspended, "terminated", rep.Terminated,
		"left_running", rep.Kept+len(rep.Failed))
	d.ShutdownReport = &rep
	d.Close()
	return err
}

// Close stops the parts in reverse order. Sandboxes keep running.
func (d *Daemon) Close() {
	d.bgCancel()
	d.bg.Wait()
	if d.node != nil {
		d.node.Close()
	}
	if d.mgr != nil {
		d.mgr.Close()
	}
	if d.rt != nil {
		d.rt.Close()
		if d.mgr != nil && d.mgr.LiveCount() == 0 {
			if err := d.rt.ReleaseMounts(); err != nil {
				d.log.Warn("release sandboxes mount", "err", err)
			}
		}
	}
	if d.api != nil {
		d.api.Close() // the audit log's last entries, before the store closes
	}
	if d.store != nil {
		d.store.Close()
	}
}
