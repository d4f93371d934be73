// Package netsetup is the network plumbing of sandboxes.
//
// A sandbox is a process tree in its own network namespace. A fresh network
// namespace has only a loopback device, and it is down, so every sandbox needs
// LoopbackUp. A sandbox created with allow_internet_access additionally gets
// Attach: a veth pair whose host side ("fbx" + a hash of the sandbox id) lives
// in the host namespace and whose peer is "eth0" inside the sandbox, a /30 out
// of Config.Subnet (host .1, sandbox .2) and a default route through the host.
// The host masquerades that traffic (SNAT to the outgoing interface's address).
//
// Lifecycle: the daemon calls New once at start (and again after a crash: it
// is idempotent), LoopbackUp and maybe Attach when a sandbox starts, Detach
// when it goes away, and Links at start to find host links whose sandbox is
// gone. All durable state lives in the kernel (links, their addresses and
// aliases, the nftables table "forkbox"), so nothing is lost when the daemon
// restarts while sandboxes keep running.
//
// Isolation (see nftables_linux.go for the ruleset): a sandbox can reach the
// outside world, but neither the host itself (daemon API, other services) nor
// another sandbox; the outside cannot open connections into a sandbox.
package netsetup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// DefaultSubnet is the pool that sandbox links are carved from when
// Config.Subnet is unset.
var DefaultSubnet = netip.MustParsePrefix("10.88.0.0/16")

// ifPrefix starts the name of every host-side sandbox link. The nftables rules
// match interfaces by it, so nothing else on the host may use it.
const ifPrefix = "fbx"

// Config configures a Manager.
type Config struct {
	// Subnet is the IPv4 pool for sandbox links, one /30 per sandbox.
	// Default DefaultSubnet (10.88.0.0/16: 16383 sandboxes; its first /30
	// is kept for ResolverAddr).
	Subnet netip.Prefix
	// DNSUpstreams are the servers (host:port) the sandboxes' resolvers
	// ask; default the host's /etc/resolv.conf nameservers (a local stub
	// included: the daemon runs on the host), else FallbackNameservers.
	DNSUpstreams []string
	// Logger logs the resolvers' troubles; default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if !c.Subnet.IsValid() {
		c.Subnet = DefaultSubnet
	}
	c.Subnet = c.Subnet.Masked()
	if !c.Subnet.Addr().Is4() || c.Subnet.Bits() > 29 {
		return c, errdefs.InvalidArgument("netsetup: subnet %s: want an IPv4 prefix of /29 or larger", c.Subnet)
	}
	if len(c.DNSUpstreams) == 0 {
		c.DNSUpstreams = hostNameservers()
	}
	for i, u := range c.DNSUpstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			c.DNSUpstreams[i] = net.JoinHostPort(u, "53")
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Link describes the network link of an attached sandbox.
type Link struct {
	HostIf    string       `json:"host_if"`    // host-side veth, e.g. "fbx1a2b3c4d5e6f"
	HostIP    netip.Prefix `json:"host_ip"`    // e.g. 10.88.0.5/30, the sandbox's gateway
	SandboxIP netip.Prefix `json:"sandbox_ip"` // e.g. 10.88.0.6/30, on eth0 in the sandbox
	// Policy is the egress policy in force (see policy.go).
	Policy Policy `json:"policy"`
}

// ResolverAddr is the nameserver of every sandbox with internet access
// (resolver_linux.go): the first host address of subnet, whose /30 is
// never handed out. The host redirects a sandbox's DNS packets to it to
// that sandbox's own resolver.
func ResolverAddr(subnet netip.Prefix) netip.Addr {
	h, _ := block(subnet.Masked(), 0)
	return h.Addr()
}

// hostIfName is the host-side interface name of sandbox id: "fbx" and 12 hex
// digits of its SHA-256, 15 characters, the most Linux allows.
func hostIfName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return ifPrefix + hex.EncodeToString(sum[:6])
}

// block returns the host and sandbox addresses of the i-th /30 of subnet.
func block(subnet netip.Prefix, i uint32) (host, sandbox netip.Prefix) {
	b := subnet.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	at := func(off uint32) netip.Prefix {
		v := base + 4*i + off
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), 30)
	}
	return at(1), at(2)
}

// blockOf returns the index of the /30 of subnet that holds a, if any.
func blockOf(subnet netip.Prefix, a netip.Addr) (uint32, bool) {
	a = a.Unmap()
	if !a.Is4() || !subnet.Contains(a) {
		return 0, false
	}
	x, s := a.As4(), subnet.Addr().As4()
	v := uint32(x[0])<<24 | uint32(x[1])<<16 | uint32(x[2])<<8 | uint32(x[3])
	base := uint32(s[0])<<24 | uint32(s[1])<<16 | uint32(s[2])<<8 | uint32(s[3])
	return (v - base) / 4, true
}

// pickBlock returns the first /30 of subnet at or after next (wrapping around)
// that is not in used. Starting after the last one handed out, rather than at
// the lowest free one, keeps a just-freed address (and conntrack entries that
// still name it) out of use for as long as the pool allows.
func pickBlock(subnet netip.Prefix, used map[uint32]bool, next uint32) (uint32, bool) {
	n := uint32(1) << (30 - subnet.Bits())
	for k := uint32(0); k < n; k++ {
		i := (next + k) % n
		if !used[i] {
			return i, true
		}
	}
	return 0, false
}

// FallbackNameservers are what the sandboxes' resolvers ask when the host's
// resolv.conf names no nameserver.
var FallbackNameservers = []string{"1.1.1.1", "8.8.8.8"}

// SandboxResolvConf returns /etc/resolv.conf content for a sandbox with
// internet access: the host's search and options lines, and resolver as the
// only nameserver.
func SandboxResolvConf(resolver netip.Addr) []byte {
	host, _ := os.ReadFile("/etc/resolv.conf")
	var b bytes.Buffer
	b.WriteString("# forkbox: names resolve through the daemon, which applies the sandbox's egress policy\n")
	sc := bufio.NewScanner(bytes.NewReader(host))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && (f[0] == "search" || f[0] == "domain" || f[0] == "options") {
			b.WriteString(sc.Text())
			b.WriteByte('\n')
		}
	}
	fmt.Fprintf(&b, "nameserver %s\n", resolver)
	return b.Bytes()
}

// hostNameservers returns the host's nameservers (host:port), or
// FallbackNameservers.
func hostNameservers() []string {
	var out []string
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 2 && f[0] == "nameserver" {
				if a, err := netip.ParseAddr(f[1]); err == nil && !a.IsUnspecified() {
					out = append(out, net.JoinHostPort(a.String(), "53"))
				}
			}
		}
	}
	if len(out) == 0 {
		for _, ns := range FallbackNameservers {
			out = append(out, net.JoinHostPort(ns, "53"))
		}
	}
	return out
}
