package netsetup

import (
	"net/netip"
	"strings"
	"testing"
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

func TestFilterResolvConf(t *testing.T) {
	in := "# Generated\nnameserver 127.0.0.53\noptions edns0 trust-ad\nsearch example.internal\n"
	out, n := filterResolvConf([]byte(in))
	if n != 0 || strings.Contains(string(out), "\nnameserver 127") || !strings.Contains(string(out), "search example.internal\n") {
		t.Fatalf("stub only: n=%d\n%s", n, out)
	}
	in = "nameserver ::1\nnameserver fe80::1%eth0\nnameserver 192.0.2.53\nnameserver 2001:db8::53\n"
	out, n = filterResolvConf([]byte(in))
	if n != 2 || !strings.Contains(string(out), "\nnameserver 192.0.2.53\n") || strings.Contains(string(out), "\nnameserver ::1") {
		t.Fatalf("mixed: n=%d\n%s", n, out)
	}
	if got := ResolvConf(); !strings.Contains(string(got), "nameserver ") {
		t.Fatalf("ResolvConf names no nameserver:\n%s", got)
	}
}
