package netsetup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// lockPath is flock'ed around choosing and assigning a /30, so that two
// processes on one host (a daemon and a test, two test binaries) never hand
// out the same block. It holds no data.
const lockPath = "/run/forkbox-netsetup.lock"

// Manager sets up and tears down sandbox networking on this host. It keeps no
// state of its own beyond its config: which /30s are taken is read from the
// kernel on every Attach, so a new Manager after a daemon restart sees the
// links of sandboxes that kept running. Safe for concurrent use.
type Manager struct {
	subnet    netip.Prefix
	mtu       int // of the host's default-route interface, 0 for the kernel default
	upstreams []string
	log       *slog.Logger

	mu   sync.Mutex // serializes Attach within the process
	next uint32     // block to try first on the next Attach

	rmu       sync.Mutex
	resolvers map[string]*resolver // by sandbox id, for attached sandboxes
}

// New prepares host-wide state and returns a Manager: it sets
// net.ipv4.ip_forward=1 and (re)creates the nftables table "forkbox" (see
// installRules). It is idempotent and meant to run at every daemon start,
// including after a crash with sandboxes still running.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := writeSysctl("/proc/sys/net/ipv4/ip_forward", "1"); err != nil {
		return nil, fmt.Errorf("netsetup: enable ip_forward: %w", err)
	}
	if err := installRules(cfg.Subnet); err != nil {
		return nil, err
	}
	return &Manager{subnet: cfg.Subnet, mtu: defaultRouteMTU(), upstreams: cfg.DNSUpstreams, log: cfg.Logger,
		resolvers: map[string]*resolver{}}, nil
}

// ResolverAddr is the nameserver that sandboxes with internet access use.
func (m *Manager) ResolverAddr() netip.Addr { return ResolverAddr(m.subnet) }

// LoopbackUp brings lo up in the network namespace of pid. Every sandbox
// needs it; a sandbox without internet access needs nothing else.
func (m *Manager) LoopbackUp(pid int) error {
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("netsetup: netns of pid %d: %w", pid, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netsetup: netlink in netns of pid %d: %w", pid, err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("netsetup: lo up in netns of pid %d: %w", pid, err)
	}
	return nil
}

// Attach gives the network namespace of pid access to the outside world
// under egress policy p: a veth pair whose host side is named after id (with
// id as its alias, see Links) and whose peer is "eth0" in the namespace, a
// free /30 of the subnet (host .1, sandbox .2), a default route via the
// host, the policy's nftables chain and a resolver. On error nothing is left
// behind. Attaching an id that is attached already is ErrConflict.
func (m *Manager) Attach(ctx context.Context, id string, pid int, p Policy) (_ *Link, err error) {
	if id == "" {
		return nil, errdefs.InvalidArgument("netsetup: empty sandbox id")
	}
	name := hostIfName(id)
	m.mu.Lock()
	defer m.mu.Unlock()
	unlock, err := lockFile()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	if _, err := netlink.LinkByName(name); err == nil {
		return nil, errdefs.Conflict("netsetup: sandbox %q is attached already (%s)", id, name)
	}
	used, err := m.usedBlocks()
	if err != nil {
		return nil, err
	}
	used[0] = true // ResolverAddr's
	i, ok := pickBlock(m.subnet, used, m.next)
	if !ok {
		return nil, errdefs.ResourceExhausted("netsetup: no free /30 left in %s", m.subnet)
	}
	hostIP, sandboxIP := block(m.subnet, i)

	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return nil, fmt.Errorf("netsetup: netns of pid %d: %w", pid, err)
	}
	defer ns.Close()
	if self, err := netns.GetFromPath("/proc/self/ns/net"); err == nil {
		same := ns.Equal(self)
		self.Close()
		if same {
			return nil, errdefs.InvalidArgument("netsetup: pid %d is in the host's network namespace", pid)
		}
	}

	// The peer is created right in the sandbox's namespace, so the name eth0
	// never clashes with the host's own.
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = name, m.mtu
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerNamespace: netlink.NsFd(ns)}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("netsetup: create veth %s for pid %d: %w", name, pid, err)
	}
	defer func() {
		if err != nil {
			_ = netlink.LinkDel(veth)
		}
	}()

	// The kernel ignores an alias given at creation.
	if err := netlink.LinkSetAlias(veth, id); err != nil {
		return nil, fmt.Errorf("netsetup: alias of %s: %w", name, err)
	}
	// The sandbox needs no IPv6 address on the host side to reach the world;
	// without one it has nothing there to talk to (the rules drop it anyway).
	// Absent when the host runs without IPv6.
	if err := writeSysctl("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("netsetup: disable IPv6 on %s: %w", name, err)
	}
	// Strict reverse-path filtering: packets from the sandbox carry its
	// own address, or are dropped (no posing as another sandbox to its
	// resolver).
	if err := writeSysctl("/proc/sys/net/ipv4/conf/"+name+"/rp_filter", "1"); err != nil {
		return nil, fmt.Errorf("netsetup: rp_filter on %s: %w", name, err)
	}
	if err := netlink.AddrAdd(veth, &netlink.Addr{IPNet: ipNet(hostIP)}); err != nil {
		return nil, fmt.Errorf("netsetup: address %s on %s: %w", hostIP, name, err)
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		return nil, fmt.Errorf("netsetup: %s up: %w", name, err)
	}

	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netsetup: netlink in netns of pid %d: %w", pid, err)
	}
	defer h.Close()
	peer, err := h.LinkByName("eth0")
	if err != nil {
		return nil, fmt.Errorf("netsetup: eth0 in netns of pid %d: %w", pid, err)
	}
	if err := h.AddrAdd(peer, &netlink.Addr{IPNet: ipNet(sandboxIP)}); err != nil {
		return nil, fmt.Errorf("netsetup: address %s on eth0 of pid %d: %w", sandboxIP, pid, err)
	}
	if err := h.LinkSetUp(peer); err != nil {
		return nil, fmt.Errorf("netsetup: eth0 up in netns of pid %d: %w", pid, err)
	}
	gw := hostIP.Addr().As4()
	if err := h.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: net.IP(gw[:])}); err != nil {
		return nil, fmt.Errorf("netsetup: default route in netns of pid %d: %w", pid, err)
	}

	// Until the kernel's link watcher has run for both ends, their qdisc
	// drops packets: a connect right after Attach would lose its SYN and
	// stall for the 1 s retransmit. Operstate UP is set in the same step.
	if err := waitOperUp(ctx, func() (netlink.Link, error) { return netlink.LinkByName(name) }); err != nil {
		return nil, fmt.Errorf("netsetup: %s: %w", name, err)
	}
	if err := waitOperUp(ctx, func() (netlink.Link, error) { return h.LinkByName("eth0") }); err != nil {
		return nil, fmt.Errorf("netsetup: eth0 of pid %d: %w", pid, err)
	}

	link := &Link{HostIf: name, HostIP: hostIP, SandboxIP: sandboxIP, Policy: p}
	if err := m.serve(id, link, true); err != nil {
		return nil, err
	}
	m.next = i + 1
	return link, nil
}

// serve applies link's policy and starts its resolver (replacing one that
// runs for id).
func (m *Manager) serve(id string, link *Link, flushNames bool) error {
	if err := applyPolicy(link.HostIf, link.Policy, flushNames); err != nil {
		return err
	}
	r, err := startResolver(link, link.Policy, m.upstreams, m.log)
	if err != nil {
		removePolicy(link.HostIf)
		return fmt.Errorf("netsetup: resolver of sandbox %s: %w", id, err)
	}
	m.rmu.Lock()
	old := m.resolvers[id]
	m.resolvers[id] = r
	m.rmu.Unlock()
	if old != nil {
		old.stop()
	}
	return nil
}

// Adopt takes over the network of a sandbox attached by an earlier daemon
// (link as Attach returned it): its policy chain is rewritten and its
// resolver started again.
func (m *Manager) Adopt(id string, link *Link) error {
	if link == nil {
		return nil
	}
	if _, err := netlink.LinkByName(link.HostIf); err != nil {
		return fmt.Errorf("netsetup: link %s of sandbox %s: %w", link.HostIf, id, err)
	}
	m.rmu.Lock()
	r := m.resolvers[id]
	delete(m.resolvers, id)
	m.rmu.Unlock()
	if r != nil {
		r.stop() // the port must be free for the new one
	}
	return m.serve(id, link, false)
}

// SetPolicy changes the egress policy of attached sandbox id (link as Attach
// returned it) and records it in link. Packets after it returns follow the
// new policy; connections the new policy refuses stop passing. Addresses
// answered for allowed names are forgotten when the names change.
func (m *Manager) SetPolicy(id string, link *Link, p Policy) error {
	if link == nil {
		return errdefs.FailedPrecondition("netsetup: sandbox %s has no network to apply a policy to", id)
	}
	flush := !slices.Equal(link.Policy.AllowNames, p.AllowNames)
	if err := applyPolicy(link.HostIf, p, flush); err != nil {
		return err
	}
	m.rmu.Lock()
	r := m.resolvers[id]
	m.rmu.Unlock()
	if r != nil {
		r.setPolicy(p)
	}
	link.Policy = p
	return nil
}

// Detach removes the host side of id's veth pair; the kernel removes the peer
// with it. It is idempotent: a link that is gone already is no error.
func (m *Manager) Detach(id string) error {
	name := hostIfName(id)
	m.rmu.Lock()
	r := m.resolvers[id]
	delete(m.resolvers, id)
	m.rmu.Unlock()
	if r != nil {
		r.stop()
	}
	if err := removePolicy(name); err != nil {
		return err
	}
	l, err := netlink.LinkByName(name)
	if err == nil {
		err = netlink.LinkDel(l)
	}
	var nf netlink.LinkNotFoundError
	if err == nil || errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return fmt.Errorf("netsetup: delete %s of sandbox %q: %w", name, id, err)
}

// Links returns the host-side sandbox links that exist on this host, by
// interface name, each with the sandbox id it was attached for (its alias).
// The daemon Detaches at start those whose sandbox is no longer alive.
func (m *Manager) Links() (map[string]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("netsetup: list links: %w", err)
	}
	out := map[string]string{}
	for _, l := range links {
		if a := l.Attrs(); strings.HasPrefix(a.Name, ifPrefix) && l.Type() == "veth" {
			out[a.Name] = a.Alias
		}
	}
	return out, nil
}

// usedBlocks returns the /30s of the subnet that some address on the host
// already falls in: those of attached sandboxes, whoever attached them.
func (m *Manager) usedBlocks() (map[uint32]bool, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("netsetup: list addresses: %w", err)
	}
	used := map[uint32]bool{}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			if i, ok := blockOf(m.subnet, ip); ok {
				used[i] = true
			}
		}
	}
	return used, nil
}

// waitOperUp polls link until its operational state is up, for at most a
// second (it normally takes well under a millisecond).
func waitOperUp(ctx context.Context, link func() (netlink.Link, error)) error {
	deadline := time.Now().Add(time.Second)
	for {
		l, err := link()
		if err != nil {
			return err
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not operationally up after 1s (state %s)", l.Attrs().OperState)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// defaultRouteMTU returns the MTU of the interface of the host's IPv4 default
// route, or 0 (the kernel's default, 1500) if there is none.
func defaultRouteMTU() int {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return 0
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				return l.Attrs().MTU
			}
		}
	}
	return 0
}

func lockFile() (unlock func(), err error) {
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netsetup: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("netsetup: lock %s: %w", lockPath, err)
	}
	return func() { f.Close() }, nil
}

func writeSysctl(path, value string) error {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == value {
		return nil
	}
	return os.WriteFile(path, []byte(value), 0o644)
}

func ipNet(p netip.Prefix) *net.IPNet {
	a := p.Addr().As4()
	return &net.IPNet{IP: net.IP(a[:]), Mask: net.CIDRMask(p.Bits(), 32)}
}
