// Package kernel is forkbox's Jupyter kernel client: it starts a kernel from
// its kernelspec, speaks the Jupyter messaging protocol (v5.x) to it over
// ZeroMQ (shell, iopub, control and stdin; heartbeat not used) with
// HMAC-SHA256 signed messages, and turns what a cell outputs into the
// execution result forkbox's API answers with. It also relays a Jupyter
// client's own messages (Send, Options.OnMessage), so that a notebook server
// can drive the same kernel as forkbox's cells.
//
// It runs inside a sandbox, in the agent, which alone starts processes: Start
// is given a Launcher and never uses os/exec itself.
//
// Lifecycle: Start writes a connection file, launches the kernel and returns
// once kernel_info_reply arrived and iopub is known to deliver. Execute runs
// cells one at a time in arrival order. When the kernel process exits, the
// Kernel is dead (Dead is closed) and Execute returns ErrDead until Restart
// starts a fresh process; Shutdown ends it for good.
//
// Choices an API user can see:
//   - IPython kernels (ipykernel) run with history off
//     (--HistoryManager.enabled=False), uncolored tracebacks
//     (--InteractiveShell.colors=NoColor; ANSI codes are stripped from every
//     kernel's errors besides) and MPLBACKEND set to matplotlib's inline
//     backend, which ipykernel would choose itself were MPLBACKEND unset: every
//     open figure is sent as a PNG display at the end of the cell, with no
//     plt.show() and nothing run at start (so no setup cell to count).
//   - clear_output drops the results the cell displayed so far (with wait=true,
//     once the next output arrives), so a cell that redraws a figure in a loop
//     ends with the last one. Logs are kept: they are the record of what the
//     code printed, and streamed events cannot be taken back anyway.
//   - update_display_data replaces, in this cell's results, every result shown
//     with that display_id; when the display belongs to an earlier cell the
//     new value is appended instead, so the caller sees it. Either way a
//     "result" event carries the new value.
package kernel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/go-zeromq/zmq4"
)

const (
	// interruptGrace bounds the wait for execute_reply after an interrupt.
	interruptGrace = 5 * time.Second
	// shutdownGrace is how long Shutdown lets a kernel exit by itself.
	shutdownGrace = 3 * time.Second
	// eofGrace bounds the wait, once the process exited, for what it sent
	// before dying to be read from iopub.
	eofGrace = 250 * time.Millisecond
	// deadAfterSendGrace bounds the wait, after a send failed, for the
	// process's death to be recorded (its sockets close just before).
	deadAfterSendGrace = time.Second
	// kernelInfoRetry: kernel_info_request is resent this often until iopub
	// delivers (a SUB connection misses what was published before its
	// subscription reached the kernel).
	kernelInfoRetry = 500 * time.Millisecond
	// dialRetry: the kernel binds its ports some time after it starts.
	dialRetry = 20 * time.Millisecond
)

// ExitInfo is how a kernel process ended: its exit code, or the name of the
// signal that killed it ("SIGSEGV", as unix.SignalName gives; Code is then -1
// or whatever the launcher reports).
type ExitInfo struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
}

// String describes the exit as a verb phrase: "exited with code 3", "was
// killed by signal SIGSEGV".
func (e ExitInfo) String() string {
	switch e.Signal {
	case "":
		return fmt.Sprintf("exited with code %d", e.Code)
	case "SIGKILL":
		return "was killed by signal SIGKILL (it may have run out of memory)"
	default:
		return "was killed by signal " + e.Signal
	}
}

// Launcher starts argv with env (KEY=VALUE entries over the launcher's own
// base environment) in dir ("" for the launcher's default) and returns the
// process's pid and a channel that receives its exit exactly once. In the
// agent it starts the kernel as the sandbox user.
type Launcher func(argv, env []string, dir string) (pid int, exited <-chan ExitInfo, err error)

// Options configure Start.
type Options struct {
	Spec *Spec
	Cwd  string
	// Env is KEY=VALUE entries over the launcher's base env (and over the
	// spec's env).
	Env []string
	// RuntimeDir holds the connection file. It is created 0700 if missing; the
	// file is given the directory's owner, so a caller that starts kernels as
	// another user chowns the directory to that user.
	RuntimeDir string
	Launch     Launcher
	// Signal sends sig to the kernel process: SIGINT to interrupt a cell when
	// the spec's interrupt_mode is "signal", SIGKILL to stop a kernel that
	// does not stop when asked. Nil means syscall.Kill(pid, sig); a caller
	// that started the kernel in its own process group may signal the group.
	Signal func(pid int, sig syscall.Signal) error
	Logger *slog.Logger // nil: discard
	// OnMessage, when not nil, is called with every iopub message (those
	// of forkbox's own cells too) and every shell, control or stdin
	// message that does not answer a request of forkbox's own: what a
	// Jupyter client using Send needs to see. It is called from the
	// socket reader goroutines, in arrival order per channel, and must not
	// block. It stays with the Kernel across Restart. Messages whose
	// signature is bad, or whose parts are not JSON objects, never reach it.
	OnMessage func(*Message)
}

// KernelInfo is what the kernel said of itself in kernel_info_reply.
type KernelInfo struct {
	ProtocolVersion       string `json:"protocol_version"`
	Implementation        string `json:"implementation"`
	ImplementationVersion string `json:"implementation_version"`
	Language              string `json:"language"`
	LanguageVersion       string `json:"language_version"`
	Banner                string `json:"banner"`
}

// ErrDead is what Execute (and Interrupt, and Send) return once the kernel
// process is gone. Errors that match it also match
// errdefs.ErrFailedPrecondition. The caller starts a fresh kernel (Restart)
// to go on.
var ErrDead = errors.New("kernel is dead")

type deadError struct{ why string }

func (e *deadError) Error() string { return "kernel is dead: it " + e.why }
func (e *deadError) Is(target error) bool {
	return target == ErrDead || target == errdefs.ErrFailedPrecondition
}

// Kernel is a running Jupyter kernel. Its methods are safe for concurrent use.
type Kernel struct {
	o         Options
	log       *slog.Logger
	ipyConfig string     // extra config file for ipykernel, in RuntimeDir
	q         fifo       // one cell (or restart) at a time
	lc        sync.Mutex // serializes Restart and Shutdown

	mu     sync.Mutex
	cur    *proc
	closed bool // Shutdown was called
}

// proc is one kernel process and its connection; Restart replaces it.
type proc struct {
	log           *slog.Logger
	pid           int
	session       string
	key           []byte
	connFile      string
	interruptMode string
	info          KernelInfo

	onMessage func(*Message)

	sctx                         context.Context // the sockets' life
	cancel                       context.CancelFunc
	shell, control, stdin, iopub zmq4.Socket
	shellMu, controlMu, stdinMu  sync.Mutex // one Send at a time per socket
	closeOnce                    sync.Once

	mu      sync.Mutex
	inboxes map[string]*inbox // by the msg_id of our request
	exit    *ExitInfo
	reason  string // set when we stop it: "was restarted", "was shut down"

	dead     chan struct{} // closed once the process is gone
	iopubEOF chan struct{} // closed when iopub's connection ended
	eofOnce  sync.Once
}

// inbox collects the messages answering one request, in arrival order per
// channel. It is unbounded so that a slow onEvent never stalls the readers.
type inbox struct {
	mu    sync.Mutex
	msgs  []*message
	ready chan struct{}
}

func newInbox() *inbox { return &inbox{ready: make(chan struct{}, 1)} }

func (in *inbox) push(m *message) {
	in.mu.Lock()
	in.msgs = append(in.msgs, m)
	in.mu.Unlock()
	select {
	case in.ready <- struct{}{}:
	default:
	}
}

func (in *inbox) take() []*message {
	in.mu.Lock()
	defer in.mu.Unlock()
	ms := in.msgs
	in.msgs = nil
	return ms
}

// Start starts a kernel and returns when it is ready: it answered
// kernel_info_request and iopub delivers. It fails with the kernel's exit if
// the process dies first, or with ctx's error.
func Start(ctx context.Context, o Options) (*Kernel, error) {
	switch {
	case o.Spec == nil || len(o.Spec.Argv) == 0:
		return nil, errdefs.InvalidArgument("kernel: no kernelspec")
	case o.Launch == nil:
		return nil, errdefs.InvalidArgument("kernel: no launcher")
	case o.RuntimeDir == "":
		return nil, errdefs.InvalidArgument("kernel: no runtime dir")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(o.RuntimeDir, 0o700); err != nil {
		return nil, fmt.Errorf("kernel runtime dir: %w", err)
	}
	k := &Kernel{o: o, log: o.Logger.With("kernel", o.Spec.Name)}
	if isIPyKernel(o.Spec) {
		// Figures keep the size they were made with (figsize × dpi);
		// Jupyter's default crops them to their content.
		k.ipyConfig = filepath.Join(o.RuntimeDir, "ipykernel-"+newID()+".py")
		if err := writeOwnedFile(k.ipyConfig, []byte(ipykernelConfig)); err != nil {
			return nil, fmt.Errorf("kernel config: %w", err)
		}
	}
	p, err := k.launch(ctx)
	if err != nil {
		return nil, err
	}
	k.cur = p
	return k, nil
}

// launch starts one kernel process and connects to it. Each step registers
// its undo, run in reverse if a later one fails.
func (k *Kernel) launch(ctx context.Context) (_ *proc, err error) {
	began := time.Now()
	sp := k.o.Spec
	var keyBytes [32]byte
	rand.Read(keyBytes[:])
	p := &proc{
		session:       newID(),
		key:           []byte(hex.EncodeToString(keyBytes[:])),
		interruptMode: sp.InterruptMode,
		onMessage:     k.o.OnMessage,
		inboxes:       map[string]*inbox{},
		dead:          make(chan struct{}),
		iopubEOF:      make(chan struct{}),
	}
	p.log = k.log
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	ports, err := freePorts(5)
	if err != nil {
		return nil, fmt.Errorf("kernel ports: %w", err)
	}
	shellPort, iopubPort, stdinPort, controlPort, hbPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	p.connFile = filepath.Join(k.o.RuntimeDir, "kernel-"+p.session+".json")
	conn := map[string]any{
		"transport": "tcp", "ip": "127.0.0.1",
		"shell_port": shellPort, "iopub_port": iopubPort, "stdin_port": stdinPort,
		"control_port": controlPort, "hb_port": hbPort,
		"key": string(p.key), "signature_scheme": "hmac-sha256", "kernel_name": sp.Name,
	}
	if err := writeConnFile(p.connFile, conn); err != nil {
		return nil, err
	}
	undo = append(undo, func() { os.Remove(p.connFile) })

	p.sctx, p.cancel = context.WithCancel(context.Background())
	opts := []zmq4.Option{
		zmq4.WithDialerRetry(dialRetry),
		zmq4.WithDialerMaxRetries(-1), // until the kernel binds, or the socket is closed
		zmq4.WithDialerTimeout(2 * time.Second),
		zmq4.WithLogger(slog.NewLogLogger(k.log.Handler(), slog.LevelDebug)),
	}
	// The kernel sends input_request on stdin to the routing identity of
	// the shell request that asked for input, so shell and stdin share one
	// identity, as jupyter_client's channels do (control too, like them).
	ident := zmq4.WithID(zmq4.SocketIdentity(p.session))
	p.shell = zmq4.NewDealer(p.sctx, append(opts, ident)...)
	p.control = zmq4.NewDealer(p.sctx, append(opts, ident)...)
	p.stdin = zmq4.NewDealer(p.sctx, append(opts, ident)...)
	p.iopub = zmq4.NewSub(p.sctx, opts...)
	undo = append(undo, p.closeSockets)
	// Subscribe before connecting: the subscription is sent as the
	// connection opens.
	if err := p.iopub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return nil, fmt.Errorf("subscribe iopub: %w", err)
	}
	argv, env := k.command(p.connFile)
	pid, exited, err := k.o.Launch(argv, env, k.o.Cwd)
	if err != nil {
		return nil, fmt.Errorf("start kernel %s: %w", sp.Name, err)
	}
	p.pid = pid
	p.log = k.log.With("pid", pid)
	go p.watch(exited)
	undo = append(undo, func() {
		p.setReason("was stopped because its start failed")
		select {
		case <-p.dead:
			return // reaped: its pid may be someone else's now
		default:
		}
		k.signal(p.pid, syscall.SIGKILL)
		select {
		case <-p.dead:
		case <-time.After(2 * time.Second):
		}
	})
	// Connect while the kernel starts: it binds its ports in a while.
	socks := []struct {
		sock zmq4.Socket
		port int
	}{{p.shell, shellPort}, {p.control, controlPort}, {p.stdin, stdinPort}, {p.iopub, iopubPort}}
	dialed := make(chan error, len(socks))
	for _, d := range socks {
		go func() { dialed <- p.dial(d.sock, d.port) }()
	}
	diedStarting := func() error {
		return fmt.Errorf("kernel %s %s before it was ready", sp.Name, p.describe())
	}

	for range socks {
		select {
		case err := <-dialed:
			if err != nil {
				// A kernel that dies cancels the dials: report the death,
				// which is the cause, not the cancelled dial.
				select {
				case <-p.dead:
					return nil, diedStarting()
				case <-time.After(time.Second):
				}
				return nil, fmt.Errorf("connect to kernel %s: %w", sp.Name, err)
			}
		case <-p.dead:
			return nil, diedStarting()
		case <-ctx.Done():
			return nil, fmt.Errorf("start kernel %s: %w", sp.Name, ctx.Err())
		}
	}
	go p.read(p.shell, "shell")
	go p.read(p.control, "control")
	go p.read(p.stdin, "stdin")
	go p.read(p.iopub, "iopub")
	if err := p.handshake(ctx); err != nil {
		select {
		case <-p.dead:
			return nil, diedStarting()
		default:
		}
		return nil, fmt.Errorf("start kernel %s: %w", sp.Name, err)
	}
	p.log.Info("kernel ready", "implementation", p.info.Implementation,
		"language", p.info.Language, "protocol", p.info.ProtocolVersion, "took", time.Since(began))
	return p, nil
}

// dial connects sock to the kernel's port, retrying until it succeeds or the
// sockets are closed. zmq4 retries refused connections itself (the kernel has
// not bound yet); this loop also retries a failed ZMTP handshake, which is
// what a peer that is not this kernel (a port reused meanwhile) gives.
func (p *proc) dial(sock zmq4.Socket, port int) error {
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	for {
		err := sock.Dial(ep)
		if err == nil || p.sctx.Err() != nil {
			return err
		}
		p.log.Debug("connect to kernel", "endpoint", ep, "err", err)
		select {
		case <-p.sctx.Done():
			return err
		case <-time.After(dialRetry):
		}
	}
}

// ipykernelConfig is loaded by every ipykernel forkbox starts: figures are
// cropped to what they draw (labels, titles and ticks included: matplotlib's
// own bbox would cut long tick labels such as dates), as notebooks do.
const ipykernelConfig = "c.InlineBackend.print_figure_kwargs = {'bbox_inches': 'tight'}\n"

// command builds the kernel's argv and env from the spec and the options.
func (k *Kernel) command(connFile string) (argv, env []string) {
	sp := k.o.Spec
	for _, a := range sp.Argv {
		a = strings.ReplaceAll(a, "{connection_file}", connFile)
		a = strings.ReplaceAll(a, "{resource_dir}", sp.Dir)
		argv = append(argv, a)
	}
	keys := make([]string, 0, len(sp.Env))
	for key := range sp.Env {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		env = append(env, key+"="+sp.Env[key])
	}
	env = mergeEnv(env, k.o.Env)
	if isIPyKernel(sp) {
		argv = append(argv, "--HistoryManager.enabled=False", "--InteractiveShell.colors=NoColor")
		if k.ipyConfig != "" {
			argv = append(argv, "--IPKernelApp.extra_config_file="+k.ipyConfig)
		}
		env = mergeEnv(env, []string{
			// Over the sandbox's MPLBACKEND=Agg: figures come back as PNG at
			// the end of each cell, as in Jupyter.
			"MPLBACKEND=module://matplotlib_inline.backend_inline",
			// debugpy's warning about frozen modules, on every start.
			"PYDEVD_DISABLE_FILE_VALIDATION=1",
		})
	}
	return argv, env
}

func isIPyKernel(sp *Spec) bool {
	for _, a := range sp.Argv {
		if a == "ipykernel_launcher" || a == "ipykernel" || filepath.Base(a) == "ipykernel_launcher.py" {
			return true
		}
	}
	return false
}

// mergeEnv overlays KEY=VALUE entries of b on a.
func mergeEnv(a, b []string) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(a)+len(b))
	for _, list := range [][]string{a, b} {
		for _, kv := range list {
			key, _, _ := strings.Cut(kv, "=")
			if i, ok := idx[key]; ok {
				out[i] = kv
				continue
			}
			idx[key] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// writeConnFile writes the connection file 0600 and gives it the owner of
// its directory, the user the kernel runs as.
func writeConnFile(path string, conn map[string]any) error {
	b, err := json.MarshalIndent(conn, "", "  ")
	if err != nil {
		return err
	}
	return writeOwnedFile(path, b)
}

// writeOwnedFile writes a new 0600 file owned like its directory (the
// kernel's user), so the kernel can read it.
func writeOwnedFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("connection file: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("connection file: %w", err)
	}
	if st, err := os.Stat(filepath.Dir(path)); err == nil {
		if s, ok := st.Sys().(*syscall.Stat_t); ok && (int(s.Uid) != os.Geteuid() || int(s.Gid) != os.Getegid()) {
			if err := os.Chown(path, int(s.Uid), int(s.Gid)); err != nil {
				os.Remove(path)
				return fmt.Errorf("connection file: %w", err)
			}
		}
	}
	return nil
}

func (k *Kernel) signal(pid int, sig syscall.Signal) error {
	if k.o.Signal != nil {
		return k.o.Signal(pid, sig)
	}
	return syscall.Kill(pid, sig)
}

// watch waits for the process to exit, then lets iopub deliver what the
// kernel sent before dying, frees the proc's resources and marks it dead.
func (p *proc) watch(exited <-chan ExitInfo) {
	ei, ok := <-exited
	if !ok {
		ei = ExitInfo{Code: -1}
	}
	p.mu.Lock()
	p.exit = &ei
	reason := p.reason
	p.mu.Unlock()
	t := time.NewTimer(eofGrace)
	select {
	case <-p.iopubEOF:
	case <-t.C:
	}
	t.Stop()
	p.closeSockets()
	os.Remove(p.connFile)
	close(p.dead)
	if reason != "" {
		p.log.Info("kernel stopped", "why", reason, "code", ei.Code, "signal", ei.Signal)
	} else {
		p.log.Warn("kernel died", "exit", ei.String())
	}
}

func (p *proc) closeSockets() {
	p.closeOnce.Do(func() {
		p.cancel()
		p.shell.Close()
		p.control.Close()
		p.stdin.Close()
		p.iopub.Close()
	})
}

// setReason records why we are stopping the process, unless it is gone already.
func (p *proc) setReason(why string) {
	p.mu.Lock()
	if p.exit == nil && p.reason == "" {
		p.reason = why
	}
	p.mu.Unlock()
}

// describe says how the process ended, as a verb phrase.
func (p *proc) describe() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.reason != "":
		return p.reason
	case p.exit != nil:
		return p.exit.String()
	default:
		return "died"
	}
}

// read receives one socket's messages, verifies them and routes each to the
// inbox of the request it answers (by parent_header.msg_id), and to
// OnMessage when a client outside sees it (see relayed); others, and
// messages with a bad signature, are dropped. It returns when the connection
// ends: there is no reconnection, as a kernel's ports die with it.
func (p *proc) read(sock zmq4.Socket, channel string) {
	defer func() {
		if channel == "iopub" {
			p.eofOnce.Do(func() { close(p.iopubEOF) })
		}
	}()
	for {
		zm, err := sock.Recv()
		if err != nil {
			if p.sctx.Err() == nil {
				p.log.Debug("kernel connection ended", "channel", channel, "err", err)
			}
			return
		}
		if zm.Type == zmq4.CmdMsg {
			continue
		}
		m, err := decode(p.key, zm.Frames)
		if err != nil {
			p.log.Warn("dropping kernel message", "channel", channel, "err", err)
			continue
		}
		m.channel = channel
		p.mu.Lock()
		in := p.inboxes[m.Parent.MsgID]
		p.mu.Unlock()
		if in != nil {
			in.push(m)
		}
		if p.onMessage != nil && p.relayed(m, in != nil) {
			p.relay(m)
		}
	}
}

// request sends a request on the shell or control socket. When in is not
// nil, the messages that answer it are routed there until unregister.
func (p *proc) request(sock zmq4.Socket, msgType string, content any, in *inbox) (string, error) {
	frames, id, err := encode(p.key, p.session, msgType, content)
	if err != nil {
		return "", err
	}
	if in != nil {
		p.mu.Lock()
		p.inboxes[id] = in
		p.mu.Unlock()
	}
	mu := &p.shellMu
	if sock == p.control {
		mu = &p.controlMu
	}
	mu.Lock()
	err = sock.Send(zmq4.NewMsgFrom(frames...))
	mu.Unlock()
	if err != nil {
		p.unregister(id)
		return "", fmt.Errorf("send %s: %w", msgType, err)
	}
	return id, nil
}

func (p *proc) unregister(id string) {
	p.mu.Lock()
	delete(p.inboxes, id)
	p.mu.Unlock()
}

// handshake asks for kernel_info until the reply arrived on shell and a
// message of ours on iopub, which proves the subscription is in place.
func (p *proc) handshake(ctx context.Context) error {
	in := newInbox()
	var ids []string
	defer func() {
		for _, id := range ids {
			p.unregister(id)
		}
	}()
	ask := func() error {
		id, err := p.request(p.shell, "kernel_info_request", struct{}{}, in)
		if err == nil {
			ids = append(ids, id)
		}
		return err
	}
	if err := ask(); err != nil {
		return err
	}
	tick := time.NewTicker(kernelInfoRetry)
	defer tick.Stop()
	var replied, published bool
	for !replied || !published {
		select {
		case <-in.ready:
			for _, m := range in.take() {
				switch {
				case m.channel == "iopub":
					published = true
				case m.channel == "shell" && m.Header.MsgType == "kernel_info_reply" && !replied:
					var c struct {
						ProtocolVersion       string `json:"protocol_version"`
						Implementation        string `json:"implementation"`
						ImplementationVersion string `json:"implementation_version"`
						Banner                string `json:"banner"`
						LanguageInfo          struct {
							Name    string `json:"name"`
							Version string `json:"version"`
						} `json:"language_info"`
					}
					if err := json.Unmarshal(m.Content, &c); err != nil {
						return fmt.Errorf("bad kernel_info_reply: %w", err)
					}
					p.info = KernelInfo{
						ProtocolVersion: c.ProtocolVersion, Implementation: c.Implementation,
						ImplementationVersion: c.ImplementationVersion, Banner: c.Banner,
						Language: c.LanguageInfo.Name, LanguageVersion: c.LanguageInfo.Version,
					}
					replied = true
				}
			}
		case <-tick.C:
			if !published {
				if err := ask(); err != nil {
					return err
				}
			}
		case <-p.dead:
			return errors.New("kernel died")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// current returns the live process, or a dead error.
func (k *Kernel) current() (*proc, error) {
	k.mu.Lock()
	p, closed := k.cur, k.closed
	k.mu.Unlock()
	if closed {
		return nil, &deadError{"was shut down"}
	}
	select {
	case <-p.dead:
		return nil, &deadError{p.describe()}
	default:
		return p, nil
	}
}

func (k *Kernel) proc() *proc {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur
}

// Interrupt interrupts the running cell, if any: with interrupt_request on
// the control channel when the spec's interrupt_mode is "message", else with
// SIGINT to the kernel process.
func (k *Kernel) Interrupt() error {
	p, err := k.current()
	if err != nil {
		return err
	}
	return k.interrupt(p)
}

func (k *Kernel) interrupt(p *proc) error {
	if p.interruptMode == "message" {
		_, err := p.request(p.control, "interrupt_request", struct{}{}, nil)
		return err
	}
	return k.signal(p.pid, syscall.SIGINT)
}

// Restart replaces the kernel process with a fresh one (new connection,
// variables gone, execution_count from 1). A cell running meanwhile ends
// with KernelDied ("the kernel was restarted"); cells queued behind it run on
// the new process. Restart also revives a dead kernel; Dead then returns the
// new process's channel.
func (k *Kernel) Restart(ctx context.Context) error {
	k.lc.Lock()
	defer k.lc.Unlock()
	k.mu.Lock()
	old, closed := k.cur, k.closed
	k.mu.Unlock()
	if closed {
		return &deadError{"was shut down"}
	}
	// Take the head of the queue first, so the cells waiting now run after
	// the restart, on the new process.
	turn := k.q.enqueue(true)
	// A restart does not ask politely: the old state is being thrown away,
	// and a busy kernel would not answer before its cell ends anyway.
	stopErr := k.stop(ctx, old, "was restarted", 0)
	if err := k.q.wait(ctx, turn); err != nil {
		return fmt.Errorf("restart kernel: %w", err)
	}
	defer k.q.release()
	if stopErr != nil {
		return fmt.Errorf("restart kernel: stop old process: %w", stopErr)
	}
	p, err := k.launch(ctx)
	if err != nil {
		return fmt.Errorf("restart kernel: %w", err)
	}
	k.mu.Lock()
	k.cur = p
	k.mu.Unlock()
	return nil
}

// Shutdown asks the kernel to exit (shutdown_request on control), kills it
// if it has not exited after a grace period or when ctx ends, and waits for
// it to be gone. Running and later Execute calls fail as after a death.
// Shutdown is idempotent.
func (k *Kernel) Shutdown(ctx context.Context) error {
	k.lc.Lock()
	defer k.lc.Unlock()
	k.mu.Lock()
	k.closed = true
	if k.ipyConfig != "" {
		os.Remove(k.ipyConfig)
	}
	p := k.cur
	k.mu.Unlock()
	return k.stop(ctx, p, "was shut down", shutdownGrace)
}

// stop ends a process: with a shutdown_request and up to grace to obey when
// grace > 0, then SIGKILL. It returns when the process is gone or ctx ends.
func (k *Kernel) stop(ctx context.Context, p *proc, why string, grace time.Duration) error {
	p.setReason(why)
	select {
	case <-p.dead:
		return nil
	default:
	}
	if grace > 0 {
		if _, err := p.request(p.control, "shutdown_request", map[string]bool{"restart": false}, nil); err != nil {
			p.log.Debug("shutdown_request", "err", err)
		}
		t := time.NewTimer(grace)
		select {
		case <-p.dead:
			t.Stop()
			return nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if err := k.signal(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.log.Warn("kill kernel", "err", err)
	}
	select {
	case <-p.dead:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Dead is closed when the current kernel process is gone (died, or Shutdown).
// After Restart it is the new process's channel.
func (k *Kernel) Dead() <-chan struct{} { return k.proc().dead }

// ExitInfo is how the current kernel process ended, or nil while it runs.
func (k *Kernel) ExitInfo() *ExitInfo {
	p := k.proc()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit == nil {
		return nil
	}
	e := *p.exit
	return &e
}

// PID is the current kernel process's pid.
func (k *Kernel) PID() int { return k.proc().pid }

// Info is what the current kernel process said of itself at start.
func (k *Kernel) Info() KernelInfo { return k.proc().info }
