package netsetup

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestHostIfName(t *testing.T) {
	a, b := hostIfName("sbx-1"), hostIfName("sbx-2")
	if len(a) != 15 || !strings.HasPrefix(a, "fbx") || a == b || a != hostIfName("sbx-1") {
		t.Fatalf("hostIfName: %q %q", a, b)
	}
}

func TestBlocks(t *testing.T) {
	s := netip.MustParsePrefix("10.88.0.0/16")
	h, sb := block(s, 0)
	if h.String() != "10.88.0.1/30" || sb.String() != "10.88.0.2/30" {
		t.Fatalf("block 0: %s %s", h, sb)
	}
	h, sb = block(s, 16383)
	if h.String() != "10.88.255.253/30" || sb.String() != "10.88.255.254/30" {
		t.Fatalf("last block: %s %s", h, sb)
	}
	for _, a := range []string{"10.88.1.4", "10.88.1.5", "10.88.1.7"} {
		if i, ok := blockOf(s, netip.MustParseAddr(a)); !ok || i != 65 {
			t.Fatalf("blockOf(%s) = %d, %v", a, i, ok)
		}
	}
	if _, ok := blockOf(s, netip.MustParseAddr("10.89.0.1")); ok {
		t.Fatal("blockOf outside the subnet")
	}

	small := netip.MustParsePrefix("10.88.0.0/28") // 4 blocks
	used := map[uint32]bool{0: true, 2: true}
	for _, c := range []struct{ next, want uint32 }{{0, 1}, {2, 3}, {3, 3}, {4, 1}} {
		if i, ok := pickBlock(small, used, c.next); !ok || i != c.want {
			t.Fatalf("pickBlock(next=%d) = %d, %v; want %d", c.next, i, ok, c.want)
		}
	}
	used[1], used[3] = true, true
	if _, ok := pickBlock(small, used, 0); ok {
		t.Fatal("pickBlock on a full pool")
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil || c.Subnet != DefaultSubnet {
		t.Fatalf("defaults: %v %v", c, err)
	}
	for _, bad := range []string{"10.88.0.0/31", "fd00::/64"} {
		if _, err := (Config{Subnet: netip.MustParsePrefix(bad)}).withDefaults(); err == nil {
			t.Fatalf("subnet %s accepted", bad)
		}
	}
}

func TestSandboxResolvConf(t *testing.T) {
	got := string(SandboxResolvConf(netip.MustParseAddr("10.88.0.1")))
	if !strings.HasSuffix(got, "\nnameserver 10.88.0.1\n") || strings.Count(got, "nameserver ") != 1 {
		t.Fatalf("sandbox resolv.conf:\n%s", got)
	}
	if ns := hostNameservers(); len(ns) == 0 {
		t.Fatal("no upstream nameserver")
	}
	if a := ResolverAddr(netip.MustParsePrefix("10.88.0.0/16")); a.String() != "10.88.0.1" {
		t.Fatalf("resolver address %s", a)
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy([]string{"10.1.2.3", "192.168.0.0/16", "PyPI.org.", "*.pythonhosted.org", "10.1.2.3/32"}, []string{"203.0.113.0/24", "::ffff:198.51.100.7"})
	if err != nil {
		t.Fatal(err)
	}
	want := "allow [10.1.2.3/32 192.168.0.0/16] names [*.pythonhosted.org pypi.org] deny [198.51.100.7/32 203.0.113.0/24]"
	if got := fmt.Sprintf("allow %v names %v deny %v", p.AllowCIDRs, p.AllowNames, p.DenyCIDRs); got != want {
		t.Fatalf("parsed %s\nwant   %s", got, want)
	}
	if !p.AllowList() {
		t.Fatal("a policy with names is not an allow-list")
	}
	for name, want := range map[string]bool{
		"pypi.org": true, "PYPI.ORG.": true, "files.pythonhosted.org.": true, "a.b.pythonhosted.org": true,
		"pythonhosted.org": false, "evilpypi.org": false, "pypi.org.evil.com": false, "example.com": false,
	} {
		if p.NameAllowed(name) != want {
			t.Errorf("NameAllowed(%q) = %v", name, !want)
		}
	}
	if def := (Policy{}); def.AllowList() || !def.NameAllowed("anything.example") {
		t.Fatal("the default policy refuses names")
	}
	for _, bad := range [][2][]string{
		{{"fd00::/8"}, nil},
		{{"localhost"}, nil},
		{{"bad_-.example..com"}, nil},
		{{"*"}, nil},
		{{"-x.example.com"}, nil},
		{nil, {"pypi.org"}},
		{nil, {"10.0.0.0/33"}},
		{make([]string, MaxPolicyEntries+1), nil},
	} {
		if _, err := ParsePolicy(bad[0], bad[1]); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParsePolicy(%q, %q) = %v; want invalid argument", bad[0], bad[1], err)
		}
	}
	// Rebinding: a name's address in a default-denied range stays denied
	// unless an allow_out CIDR covers it.
	if !deniedByDefault(netip.MustParseAddr("169.254.169.254")) || deniedByDefault(netip.MustParseAddr("198.51.100.7")) {
		t.Fatal("default denials")
	}
	if !p.allowsAddr(netip.MustParseAddr("192.168.3.4")) || p.allowsAddr(netip.MustParseAddr("10.1.2.4")) {
		t.Fatal("allowsAddr")
	}
}
