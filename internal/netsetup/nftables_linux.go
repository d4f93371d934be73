package netsetup

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TableName is the nftables table (family inet) that forkbox owns. It is the
// only table forkbox ever creates, flushes or deletes.
const TableName = "forkbox"

// installRules replaces the table "forkbox" with the ruleset below in a single
// nftables transaction (add table; delete table; add table and its contents),
// so it is idempotent, never leaves a window without the rules on a restart,
// and touches no other table. In nft syntax, for Subnet 10.88.0.0/16:
//
//	table inet forkbox {
//		chain input {
//			type filter hook input priority filter; policy accept;
//			iifname "fbx*" ct state established,related accept
//			iifname "fbx*" counter drop
//		}
//		chain forward {
//			type filter hook forward priority filter; policy accept;
//			iifname "fbx*" oifname "fbx*" counter drop
//			iifname "fbx*" accept
//			oifname "fbx*" ct state established,related accept
//			oifname "fbx*" counter drop
//		}
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			meta nfproto ipv4 ip saddr 10.88.0.0/16 oifname != "fbx*" masquerade
//		}
//	}
//
// The policies are accept because this table only has a say over sandbox
// traffic: everything else is left to the host's own firewall. Note that an
// accept here cannot override a drop in another table (a host firewall with a
// FORWARD policy of drop, as Docker installs, must allow fbx* itself).
// Interfaces rather than addresses are matched so that IPv6 (link-local
// addresses exist on every veth) is covered as well.
func installRules(subnet netip.Prefix) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)

	accept := nftables.ChainPolicyAccept
	chain := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook, Priority: prio, Policy: &accept})
	}
	rule := func(ch *nftables.Chain, exprs ...[]expr.Any) {
		var all []expr.Any
		for _, e := range exprs {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: all})
	}

	in := chain("input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
	rule(in, ifname(expr.MetaKeyIIFNAME, true), ctEstablished(), verdict(expr.VerdictAccept))
	rule(in, ifname(expr.MetaKeyIIFNAME, true), counterDrop())

	fw := chain("forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
	rule(fw, ifname(expr.MetaKeyIIFNAME, true), ifname(expr.MetaKeyOIFNAME, true), counterDrop())
	rule(fw, ifname(expr.MetaKeyIIFNAME, true), verdict(expr.VerdictAccept))
	rule(fw, ifname(expr.MetaKeyOIFNAME, true), ctEstablished(), verdict(expr.VerdictAccept))
	rule(fw, ifname(expr.MetaKeyOIFNAME, true), counterDrop())

	post := chain("postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	rule(post, ipv4Saddr(subnet), ifname(expr.MetaKeyOIFNAME, false), []expr.Any{&expr.Masq{}})

	if err := c.Flush(); err != nil {
		return fmt.Errorf("netsetup: install nftables table inet %s: %w", TableName, err)
	}
	return nil
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

// ipv4Saddr matches "meta nfproto ipv4 ip saddr <p>".
func ipv4Saddr(p netip.Prefix) []expr.Any {
	mask := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits()))
	net4 := p.Masked().Addr().As4()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: net4[:]},
	}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func counterDrop() []expr.Any {
	return []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
}
