package netsetup

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// Egress policy of a sandbox with internet access.
//
// By default a sandbox reaches the public internet only: the ranges in
// DeniedByDefault (loopback, link-local with the cloud metadata address,
// RFC 1918, CGNAT, multicast, reserved) are refused, as are the host itself
// and every other sandbox (see nftables_linux.go). A policy refines that:
//
//   - allow_out entries (addresses, CIDRs or domain names) are reachable even
//     when a default or a deny_out entry covers them: allow wins;
//   - deny_out entries (addresses or CIDRs) are refused;
//   - a domain name in allow_out makes the policy an allow-list: only the
//     allowed names resolve (through the daemon's resolver, which adds the
//     addresses it answers to the sandbox's allowed set for their TTL) and
//     every destination not allowed is refused, whether a name led to it or
//     not. "*.example.com" allows every name under example.com, not
//     example.com itself.
//
// IPv6 is not routed for sandboxes, so entries are IPv4.

// MaxPolicyEntries bounds allow_out and deny_out each.
const MaxPolicyEntries = 128

// DeniedByDefault are the destinations a sandbox with internet access cannot
// reach unless its allow_out names them.
var DeniedByDefault = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this" network
	netip.MustParsePrefix("10.0.0.0/8"),     // RFC 1918
	netip.MustParsePrefix("100.64.0.0/10"),  // CGNAT (RFC 6598)
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, cloud metadata (169.254.169.254)
	netip.MustParsePrefix("172.16.0.0/12"),  // RFC 1918
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("192.168.0.0/16"), // RFC 1918
	netip.MustParsePrefix("224.0.0.0/4"),    // multicast
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, broadcast
}

// Policy is a parsed egress policy. The zero Policy is the default.
type Policy struct {
	AllowCIDRs []netip.Prefix `json:"allow_cidrs,omitempty"`
	DenyCIDRs  []netip.Prefix `json:"deny_cidrs,omitempty"`
	// AllowNames are lower-case domain names, "*." for every name under one.
	AllowNames []string `json:"allow_names,omitempty"`
}

// AllowList reports whether only allowed destinations are reachable (the
// policy names domains).
func (p Policy) AllowList() bool { return len(p.AllowNames) > 0 }

// NameAllowed reports whether the resolver may answer name (a query name,
// with or without the final dot).
func (p Policy) NameAllowed(name string) bool {
	if !p.AllowList() {
		return true
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, a := range p.AllowNames {
		if suffix, ok := strings.CutPrefix(a, "*."); ok {
			if strings.HasSuffix(name, "."+suffix) {
				return true
			}
		} else if name == a {
			return true
		}
	}
	return false
}

// allowsAddr reports whether an allow_out CIDR covers a.
func (p Policy) allowsAddr(a netip.Addr) bool {
	for _, c := range p.AllowCIDRs {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

func deniedByDefault(a netip.Addr) bool {
	for _, c := range DeniedByDefault {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

// Equal reports whether p and q are the same policy.
func (p Policy) Equal(q Policy) bool {
	return slices.Equal(p.AllowCIDRs, q.AllowCIDRs) && slices.Equal(p.DenyCIDRs, q.DenyCIDRs) && slices.Equal(p.AllowNames, q.AllowNames)
}

// ParsePolicy parses allow_out and deny_out entries. Errors are
// errdefs.ErrInvalidArgument and name the entry.
func ParsePolicy(allowOut, denyOut []string) (Policy, error) {
	var p Policy
	if len(allowOut) > MaxPolicyEntries || len(denyOut) > MaxPolicyEntries {
		return p, errdefs.InvalidArgument("network: at most %d entries in allow_out and in deny_out", MaxPolicyEntries)
	}
	for _, e := range allowOut {
		if pfx, ok, err := parseAddrEntry("allow_out", e); err != nil {
			return p, err
		} else if ok {
			p.AllowCIDRs = append(p.AllowCIDRs, pfx)
			continue
		}
		name, err := parseDomain(e)
		if err != nil {
			return p, errdefs.InvalidArgument("network.allow_out: %q is neither an IPv4 address, a CIDR nor a domain name: %v", e, err)
		}
		p.AllowNames = append(p.AllowNames, name)
	}
	for _, e := range denyOut {
		pfx, ok, err := parseAddrEntry("deny_out", e)
		if err != nil {
			return p, err
		}
		if !ok {
			return p, errdefs.InvalidArgument("network.deny_out: %q is not an IPv4 address or CIDR (deny_out takes addresses; to allow only some names, list them in allow_out)", e)
		}
		p.DenyCIDRs = append(p.DenyCIDRs, pfx)
	}
	slices.SortFunc(p.AllowCIDRs, netip.Prefix.Compare)
	slices.SortFunc(p.DenyCIDRs, netip.Prefix.Compare)
	p.AllowCIDRs, p.DenyCIDRs = slices.Compact(p.AllowCIDRs), slices.Compact(p.DenyCIDRs)
	slices.Sort(p.AllowNames)
	p.AllowNames = slices.Compact(p.AllowNames)
	return p, nil
}

// parseAddrEntry parses an address or CIDR; ok is false when e is neither
// (it may be a name). IPv6 is an error: it is not routed.
func parseAddrEntry(field, e string) (netip.Prefix, bool, error) {
	e = strings.TrimSpace(e)
	var pfx netip.Prefix
	if a, err := netip.ParseAddr(e); err == nil {
		pfx = netip.PrefixFrom(a, a.BitLen())
	} else if p, err := netip.ParsePrefix(e); err == nil {
		pfx = p
	} else {
		return pfx, false, nil
	}
	if a := pfx.Addr(); a.Is4In6() {
		pfx = netip.PrefixFrom(a.Unmap(), pfx.Bits()-96)
	}
	if !pfx.Addr().Is4() {
		return pfx, false, errdefs.InvalidArgument("network.%s: %q is IPv6, which sandboxes do not route; give IPv4 addresses", field, e)
	}
	return pfx.Masked(), true, nil
}

// parseDomain validates a domain name, optionally "*." followed by one,
// and returns it in lower case without a final dot.
func parseDomain(e string) (string, error) {
	name := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(e), "."))
	rest := strings.TrimPrefix(name, "*.")
	if rest == "" || len(rest) > 253 {
		return "", fmt.Errorf("empty or longer than 253 characters")
	}
	labels := strings.Split(rest, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", fmt.Errorf("label %q: 1 to 63 characters", l)
		}
		for i, c := range l {
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok || (c == '-' && (i == 0 || i == len(l)-1)) {
				return "", fmt.Errorf("label %q: letters, digits and inner hyphens only", l)
			}
		}
	}
	if len(labels) < 2 && !strings.HasPrefix(name, "*.") {
		return "", fmt.Errorf("a single label is not a domain name")
	}
	return name, nil
}
