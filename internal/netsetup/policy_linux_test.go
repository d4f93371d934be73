package netsetup

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"

	"github.com/forkbox/forkbox/internal/dnstest"
)

// Egress policy attacks. Every destination is a namespace of the test's own
// (see newOutsideIn): an "internet" host in 198.51.100.0/24 (TEST-NET-2), a
// "LAN" host in 10.250.0.0/16 and a link-local one in 169.254.0.0/16 (never
// the platform's metadata address), plus a DNS server of the test's on the
// host's loopback that the sandboxes' resolvers ask.

var (
	internetPool  = netip.MustParsePrefix("198.51.100.0/24")
	lanPool       = netip.MustParsePrefix("10.250.0.0/16")
	linkLocalPool = netip.MustParsePrefix("169.254.0.0/17") // below 169.254.169.x
)

// lookup asks the sandbox's nameserver (ResolverAddr) from the netns of pid.
func lookup(t *testing.T, pid int, m *Manager, name string) (*dns.Msg, error) {
	t.Helper()
	var resp *dns.Msg
	var err error
	inPid(t, pid, func() {
		c := &dns.Client{Timeout: 2 * time.Second}
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), dns.TypeA)
		resp, _, err = c.Exchange(q, net.JoinHostPort(m.ResolverAddr().String(), "53"))
	})
	return resp, err
}

func answerA(resp *dns.Msg) []string {
	var out []string
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return out
}

func mustPolicy(t *testing.T, allow, deny []string) Policy {
	t.Helper()
	p, err := ParsePolicy(allow, deny)
	must(t, err)
	return p
}

func TestEgressPolicy(t *testing.T) {
	requireRoot(t)
	inet, inet2 := newOutsideIn(t, internetPool), newOutsideIn(t, internetPool)
	lan, ll := newOutsideIn(t, lanPool), newOutsideIn(t, linkLocalPool)
	upstream := dnstest.Serve(t, map[string]string{
		"ok.fbx.test.":      inet.ip.String(),
		"other.fbx.test.":   inet2.ip.String(),
		"rebind.fbx.test.":  ll.ip.String(),
		"www.sub.fbx.test.": inet2.ip.String(),
	}, 1)
	m, err := New(context.Background(), Config{DNSUpstreams: []string{upstream}})
	must(t, err)
	pid := startSandbox(t)
	must(t, m.LoopbackUp(pid))
	id, link := attachWith(t, m, pid, Policy{})

	// The default: the public internet only.
	if _, err := dial(t, pid, inet.addr, 3*time.Second); err != nil {
		t.Fatalf("default policy, internet host: %v", err)
	}
	wantDropped(t, pid, lan.addr)
	wantDropped(t, pid, ll.addr)
	// The sandbox's resolver answers any name (default policy), and only
	// the sandbox: the host asking it gets nothing.
	if resp, err := lookup(t, pid, m, "other.fbx.test"); err != nil || strings.Join(answerA(resp), ",") != inet2.ip.String() {
		t.Fatalf("default policy, lookup: %v %v", resp, err)
	}
	c := &dns.Client{Timeout: 500 * time.Millisecond}
	q := new(dns.Msg)
	q.SetQuestion("ok.fbx.test.", dns.TypeA)
	if resp, _, err := c.Exchange(q, net.JoinHostPort(link.HostIP.Addr().String(), "53")); err == nil {
		t.Fatalf("the resolver answered the host: %v", resp)
	}

	// allow_out a CIDR opens the LAN; deny_out closes the internet host;
	// each change applies at once, to a connection's next packet.
	must(t, m.SetPolicy(id, link, mustPolicy(t, []string{lan.ip.String() + "/30"}, []string{inet.ip.String()})))
	if _, err := dial(t, pid, lan.addr, 3*time.Second); err != nil {
		t.Fatalf("allow_out LAN: %v", err)
	}
	wantDropped(t, pid, inet.addr)
	if _, err := dial(t, pid, inet2.addr, 3*time.Second); err != nil {
		t.Fatalf("another internet host under a deny of one: %v", err)
	}
	wantDropped(t, pid, ll.addr)
	if link.Policy.DenyCIDRs[0].Addr() != inet.ip {
		t.Fatalf("the link does not record the policy: %+v", link.Policy)
	}

	// Allow wins over deny.
	must(t, m.SetPolicy(id, link, mustPolicy(t, []string{inet.ip.String()}, []string{"0.0.0.0/0"})))
	if _, err := dial(t, pid, inet.addr, 3*time.Second); err != nil {
		t.Fatalf("allow_out over deny_out 0.0.0.0/0: %v", err)
	}
	wantDropped(t, pid, inet2.addr)

	// A name allow-list: the allowed name resolves and connects; others
	// do not resolve, and their addresses are refused all the same.
	must(t, m.SetPolicy(id, link, mustPolicy(t, []string{"ok.fbx.test", "*.sub.fbx.test", "rebind.fbx.test"}, nil)))
	resp, err := lookup(t, pid, m, "OK.fbx.test")
	if err != nil || resp.Rcode != dns.RcodeSuccess || strings.Join(answerA(resp), ",") != inet.ip.String() {
		t.Fatalf("allowed name: %v %v", resp, err)
	}
	if _, err := dial(t, pid, inet.addr, 3*time.Second); err != nil {
		t.Fatalf("the allowed name's address: %v", err)
	}
	if resp, err := lookup(t, pid, m, "other.fbx.test"); err != nil || resp.Rcode != dns.RcodeNameError {
		t.Fatalf("a name not allowed: %v %v; want NXDOMAIN", resp, err)
	}
	wantDropped(t, pid, inet2.addr)
	// A wildcard allows names under it, and their addresses.
	if resp, err := lookup(t, pid, m, "www.sub.fbx.test"); err != nil || len(answerA(resp)) != 1 {
		t.Fatalf("wildcard name: %v %v", resp, err)
	}
	if _, err := dial(t, pid, inet2.addr, 3*time.Second); err != nil {
		t.Fatalf("the wildcard name's address: %v", err)
	}
	// DNS rebinding: an allowed name that points at a link-local address
	// resolves, and the address stays refused.
	if resp, err := lookup(t, pid, m, "rebind.fbx.test"); err != nil || len(answerA(resp)) != 1 {
		t.Fatalf("rebinding name: %v %v", resp, err)
	}
	wantDropped(t, pid, ll.addr)
	wantDropped(t, pid, lan.addr)

	// Back to the default: the names' addresses are forgotten.
	must(t, m.SetPolicy(id, link, Policy{}))
	wantDropped(t, pid, lan.addr)
	if _, err := dial(t, pid, inet2.addr, 3*time.Second); err != nil {
		t.Fatalf("back to the default: %v", err)
	}

	// A new Manager (a daemon restart) adopts the sandbox: its chain and
	// resolver work again.
	m.rmu.Lock()
	old := m.resolvers[id] // the old daemon's goes with it
	delete(m.resolvers, id)
	m.rmu.Unlock()
	old.stop()
	m2, err := New(context.Background(), Config{DNSUpstreams: []string{upstream}})
	must(t, err)
	must(t, m2.Adopt(id, link))
	if resp, err := lookup(t, pid, m2, "ok.fbx.test"); err != nil || len(answerA(resp)) != 1 {
		t.Fatalf("lookup after adopt: %v %v", resp, err)
	}
	wantDropped(t, pid, ll.addr)

	// Detach removes the chain, the names set and the map entry.
	must(t, m2.Detach(id))
	nc, err := nftables.New()
	must(t, err)
	tb := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	if ch, err := nc.ListChain(tb, policyChainPrefix+link.HostIf); err == nil && ch != nil {
		t.Fatalf("policy chain left after Detach")
	}
	if s, err := nc.GetSetByName(tb, namesSetPrefix+link.HostIf); err == nil && s != nil {
		t.Fatalf("names set left after Detach")
	}
}

// A sandbox's resolver answers that sandbox only: another sandbox asking it
// gets nothing (and strict reverse-path filtering keeps it from posing with
// the other's address).
func TestResolverAnswersOnlyItsSandbox(t *testing.T) {
	requireRoot(t)
	upstream := dnstest.Serve(t, map[string]string{"ok.fbx.test.": "198.51.100.1"}, 1)
	m, err := New(context.Background(), Config{DNSUpstreams: []string{upstream}})
	must(t, err)
	a, b := startSandbox(t), startSandbox(t)
	must(t, m.LoopbackUp(a))
	must(t, m.LoopbackUp(b))
	_, la := attachWith(t, m, a, Policy{})
	_, lb := attachWith(t, m, b, mustPolicy(t, []string{"ok.fbx.test"}, nil))
	// a asks b's resolver directly: no answer (its source is a's address,
	// not b's).
	var err2 error
	inPid(t, a, func() {
		c := &dns.Client{Timeout: 700 * time.Millisecond}
		q := new(dns.Msg)
		q.SetQuestion("ok.fbx.test.", dns.TypeA)
		_, _, err2 = c.Exchange(q, net.JoinHostPort(lb.HostIP.Addr().String(), "53"))
	})
	if err2 == nil {
		t.Fatal("sandbox a got an answer from sandbox b's resolver")
	}
	// The rp_filter on the host side of each link is strict.
	for _, l := range []*Link{la, lb} {
		if v := readSysctl(t, "/proc/sys/net/ipv4/conf/"+l.HostIf+"/rp_filter"); v != "1" {
			t.Fatalf("rp_filter of %s: %s", l.HostIf, v)
		}
	}
	if resp, err := lookup(t, b, m, "ok.fbx.test"); err != nil || len(answerA(resp)) != 1 {
		t.Fatalf("b's own lookup: %v %v", resp, err)
	}
}

func readSysctl(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return strings.TrimSpace(string(b))
}

// A resolver stopped right after it started frees its address at once (a
// sandbox deleted as soon as it was made, its /30 handed out again): the
// DNS server's own shutdown does nothing before it has started serving.
func TestResolverStopFreesAddress(t *testing.T) {
	requireRoot(t)
	link := &Link{HostIf: "lo", HostIP: netip.MustParsePrefix("127.0.88.1/30"), SandboxIP: netip.MustParsePrefix("127.0.88.2/30")}
	for i := 0; i < 50; i++ {
		r, err := startResolver(link, Policy{}, []string{"127.0.0.1:9"}, slog.Default())
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		r.stop()
	}
}
