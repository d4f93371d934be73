package netsetup

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TableName is the nftables table (family inet) that forkbox owns. It is the
// only table forkbox ever creates, flushes or deletes.
const TableName = "forkbox"

// Names in the table besides its base chains.
const (
	// egressMap maps a sandbox's host-side interface to its policy chain.
	egressMap = "egress"
	// policyChainPrefix + host interface: a sandbox's policy chain.
	policyChainPrefix = "e_"
	// namesSetPrefix + host interface: the addresses its resolver answered
	// for allowed names, each for the answer's TTL.
	namesSetPrefix = "n_"
)

// installRules (re)writes the base chains of the table "forkbox" in a single
// nftables transaction, so it is idempotent, never leaves a window without
// the rules on a restart, touches no other table, and keeps the policy
// chains of sandboxes that run on (SetPolicy). In nft syntax, for Subnet
// 10.88.0.0/16:
//
//	table inet forkbox {
//		map egress { type ifname : verdict }
//		chain input {
//			type filter hook input priority filter; policy accept;
//			iifname "fbx*" ct state established,related accept
//			iifname "fbx*" ip daddr 10.88.0.0/16 udp dport 53 accept
//			iifname "fbx*" ip daddr 10.88.0.0/16 tcp dport 53 accept
//			iifname "fbx*" counter drop
//		}
//		chain forward {
//			type filter hook forward priority filter; policy accept;
//			iifname "fbx*" oifname "fbx*" counter drop
//			iifname "fbx*" meta nfproto ipv6 counter drop
//			iifname "fbx*" iifname vmap @egress
//			iifname "fbx*" ip daddr 10.0.0.0/8 counter drop
//			… one such rule per DeniedByDefault range …
//			iifname "fbx*" accept
//			oifname "fbx*" ct state established,related accept
//			oifname "fbx*" counter drop
//		}
//		chain prerouting {
//			type nat hook prerouting priority dstnat; policy accept;
//			iifname "fbx*" ip daddr 10.88.0.1 udp dport 53 redirect
//			iifname "fbx*" ip daddr 10.88.0.1 tcp dport 53 redirect
//		}
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			meta nfproto ipv4 ip saddr 10.88.0.0/16 oifname != "fbx*" masquerade
//		}
//		chain e_fbx1a2b3c4d5e6f { … }   # one per sandbox with internet, see policyRules
//		set n_fbx1a2b3c4d5e6f { type ipv4_addr; flags timeout; }
//	}
//
// The policies are accept because this table only has a say over sandbox
// traffic: everything else is left to the host's own firewall. Note that an
// accept here cannot override a drop in another table (a host firewall with a
// FORWARD policy of drop, as Docker installs, must allow fbx* itself).
// Interfaces rather than addresses are matched so that IPv6 (link-local
// addresses exist on every veth) is covered as well. The only service on the
// host a sandbox reaches is its DNS resolver on its own gateway address
// (resolver_linux.go), which answers only the sandbox it belongs to; the
// nameserver in every sandbox's resolv.conf is ResolverAddr (10.88.0.1
// here), which prerouting redirects to the gateway of the interface the
// query came in on.
func installRules(subnet netip.Prefix) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Name: TableName, Family: nftables.TableFamilyINet})
	egress := &nftables.Set{Table: t, Name: egressMap, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
	if err := c.AddSet(egress, nil); err != nil {
		return fmt.Errorf("netsetup: map %s: %w", egressMap, err)
	}

	accept := nftables.ChainPolicyAccept
	chain := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		ch := c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook, Priority: prio, Policy: &accept})
		c.FlushChain(ch)
		return ch
	}
	rule := func(ch *nftables.Chain, exprs ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: slices.Concat(exprs...)})
	}

	in := chain("input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
	rule(in, ifname(expr.MetaKeyIIFNAME, true), ctEstablished(), verdict(expr.VerdictAccept))
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		rule(in, ifname(expr.MetaKeyIIFNAME, true), ipv4Addr(16, subnet, true), dport(proto, 53), verdict(expr.VerdictAccept))
	}
	rule(in, ifname(expr.MetaKeyIIFNAME, true), counterDrop())

	fw := chain("forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
	rule(fw, ifname(expr.MetaKeyIIFNAME, true), ifname(expr.MetaKeyOIFNAME, true), counterDrop())
	rule(fw, ifname(expr.MetaKeyIIFNAME, true), nfproto(unix.NFPROTO_IPV6), counterDrop())
	rule(fw, ifname(expr.MetaKeyIIFNAME, true), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: egress.Name, SetID: egress.ID, IsDestRegSet: true, DestRegister: 0},
	})
	for _, p := range DeniedByDefault {
		rule(fw, ifname(expr.MetaKeyIIFNAME, true), ipv4Addr(16, p, true), counterDrop())
	}
	rule(fw, ifname(expr.MetaKeyIIFNAME, true), verdict(expr.VerdictAccept))
	rule(fw, ifname(expr.MetaKeyOIFNAME, true), ctEstablished(), verdict(expr.VerdictAccept))
	rule(fw, ifname(expr.MetaKeyOIFNAME, true), counterDrop())

	pre := chain("prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest)
	resolver := netip.PrefixFrom(ResolverAddr(subnet), 32)
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		rule(pre, ifname(expr.MetaKeyIIFNAME, true), ipv4Addr(16, resolver, true), dport(proto, 53), []expr.Any{&expr.Redir{}})
	}

	post := chain("postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	rule(post, ipv4Addr(12, subnet, true), ifname(expr.MetaKeyOIFNAME, false), []expr.Any{&expr.Masq{}})

	if err := c.Flush(); err != nil {
		return fmt.Errorf("netsetup: install nftables table inet %s: %w", TableName, err)
	}
	return nil
}

// policyRules are the rules of a sandbox's policy chain, which the forward
// chain jumps to for its packets before the default denials:
//
//	ip daddr <allow_out CIDR> accept          (each)
//	ip daddr @n_<if> accept                    (addresses of allowed names)
//	ip daddr <deny_out CIDR> counter drop      (each)
//	counter drop                               (allow-lists only)
//
// A packet that falls off the end returns to the forward chain: the default
// denials, then accept.
func policyRules(p Policy, names *nftables.Set) [][]expr.Any {
	var rules [][]expr.Any
	for _, a := range p.AllowCIDRs {
		rules = append(rules, slices.Concat(ipv4Addr(16, a, true), verdict(expr.VerdictAccept)))
	}
	rules = append(rules, []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: names.Name, SetID: names.ID},
		&expr.Verdict{Kind: expr.VerdictAccept},
	})
	for _, d := range p.DenyCIDRs {
		rules = append(rules, slices.Concat(ipv4Addr(16, d, true), counterDrop()))
	}
	if p.AllowList() {
		rules = append(rules, counterDrop())
	}
	return rules
}

// applyPolicy installs (or replaces) the policy chain of host interface
// hostIf and points the egress map at it, in one transaction: there is no
// moment without a policy. flushNames empties the addresses of allowed
// names too (when the allowed names changed).
func applyPolicy(hostIf string, p Policy, flushNames bool) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	egress := &nftables.Set{Table: t, Name: egressMap, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
	chainName := policyChainPrefix + hostIf
	existing, err := c.ListChain(t, chainName)
	exists := err == nil && existing != nil
	ch := c.AddChain(&nftables.Chain{Name: chainName, Table: t})
	names := &nftables.Set{Table: t, Name: namesSetPrefix + hostIf, KeyType: nftables.TypeIPAddr, HasTimeout: true}
	if err := c.AddSet(names, nil); err != nil {
		return fmt.Errorf("netsetup: set %s: %w", names.Name, err)
	}
	key := ifnameKey(hostIf)
	if exists {
		if err := c.SetDeleteElements(egress, []nftables.SetElement{{Key: key}}); err != nil {
			return err
		}
		c.FlushChain(ch)
		if flushNames {
			c.FlushSet(names)
		}
	}
	for _, r := range policyRules(p, names) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r})
	}
	if err := c.SetAddElements(egress, []nftables.SetElement{{Key: key, VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: chainName}}}); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netsetup: egress policy of %s: %w", hostIf, err)
	}
	return nil
}

// removePolicy deletes hostIf's policy chain, its names set and its egress
// map entry. Nothing there is no error.
func removePolicy(hostIf string) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	chainName := policyChainPrefix + hostIf
	if ch, err := c.ListChain(t, chainName); err == nil && ch != nil {
		egress := &nftables.Set{Table: t, Name: egressMap, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
		if err := c.SetDeleteElements(egress, []nftables.SetElement{{Key: ifnameKey(hostIf)}}); err != nil {
			return err
		}
		c.FlushChain(ch)
		c.DelChain(ch)
	}
	if s, err := c.GetSetByName(t, namesSetPrefix+hostIf); err == nil && s != nil {
		c.DelSet(s)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netsetup: remove egress policy of %s: %w", hostIf, err)
	}
	return nil
}

// allowAddrs adds addresses to hostIf's allowed-names set for ttl each,
// refreshing the timeout of those already there.
func allowAddrs(hostIf string, addrs []netip.Addr, ttl time.Duration) error {
	if len(addrs) == 0 {
		return nil
	}
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	names := &nftables.Set{Table: t, Name: namesSetPrefix + hostIf, KeyType: nftables.TypeIPAddr, HasTimeout: true}
	var els []nftables.SetElement
	for _, a := range addrs {
		b := a.As4()
		els = append(els, nftables.SetElement{Key: b[:], Timeout: ttl})
	}
	// An element that exists keeps its old timeout on add: delete and add
	// in one transaction, or, when some are not there (the delete fails the
	// transaction), just add.
	if err := c.SetDeleteElements(names, els); err != nil {
		return err
	}
	if err := c.SetAddElements(names, els); err != nil {
		return err
	}
	if err := c.Flush(); err == nil {
		return nil
	}
	if err := c.SetAddElements(names, els); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netsetup: allow resolved addresses for %s: %w", hostIf, err)
	}
	return nil
}

// ifnameKey is an interface name as an nftables ifname key (IFNAMSIZ bytes).
func ifnameKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// ifname matches (or, with eq false, excludes) interfaces named "fbx*": nft
// compiles a trailing-* wildcard to a compare of just the prefix bytes.
func ifname(key expr.MetaKey, eq bool) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: []byte(ifPrefix)},
	}
}

// ctEstablished matches "ct state established,related".
func ctEstablished() []expr.Any {
	mask := binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// ipv4Addr matches "meta nfproto ipv4 ip saddr|daddr [!=] <p>": offset 12
// is the source address, 16 the destination.
func ipv4Addr(offset uint32, p netip.Prefix, eq bool) []expr.Any {
	mask := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits()))
	if p.Bits() == 0 {
		mask = make([]byte, 4)
	}
	net4 := p.Masked().Addr().As4()
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	return slices.Concat(nfproto(unix.NFPROTO_IPV4), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: net4[:]},
	})
}

// nfproto matches "meta nfproto <proto>".
func nfproto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

// dport matches "<udp|tcp> dport <port>".
func dport(proto byte, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
	}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func counterDrop() []expr.Any {
	return []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
}
