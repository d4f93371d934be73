package netsetup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// These tests need root: they create network namespaces, veth pairs and the
// nftables table. All their traffic stays inside namespaces they create: the
// "sandboxes" (sleep processes in a new netns) and an "outside" host, a netns
// with a veth to the host on a 198.18.0.0/16 benchmark-range address that
// exists nowhere else.
//
// Links, namespaces and processes are removed at cleanup. The host-wide state
// that New sets (ip_forward=1, the nftables table inet forkbox) is left as
// every daemon start leaves it: another test binary running at the same time
// (go test ./...) may be relying on it.

const dropWait = 700 * time.Millisecond // how long a dropped connect is given

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (network namespaces, veth, nftables)")
	}
}

func newManager(t testing.TB) *Manager {
	t.Helper()
	requireRoot(t)
	m, err := New(context.Background(), Config{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// startSandbox starts a process in a new network namespace and returns its pid.
func startSandbox(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sandbox: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// attach attaches a new sandbox id to pid and detaches it at cleanup.
func attach(t testing.TB, m *Manager, pid int) (string, *Link) {
	t.Helper()
	return attachWith(t, m, pid, Policy{})
}

// attachWith is attach with egress policy p.
func attachWith(t testing.TB, m *Manager, pid int, p Policy) (string, *Link) {
	t.Helper()
	id := fmt.Sprintf("fbxtest-%x", rand.Uint64())
	t.Cleanup(func() {
		if err := m.Detach(id); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	l, err := m.Attach(context.Background(), id, pid, p)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	return id, l
}

// inNetns runs f on an OS thread switched into ns (or left where it is, for
// netns.None(), when f switches itself) and switches the thread back after.
// If that fails the thread stays locked and dies with its goroutine.
func inNetns(ns netns.NsHandle, f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if ns.IsOpen() {
			if err := netns.Set(ns); err != nil {
				runtime.UnlockOSThread()
				errc <- err
				return
			}
		}
		f()
		if err := netns.Set(orig); err != nil {
			errc <- err
			return
		}
		runtime.UnlockOSThread()
		errc <- nil
	}()
	return <-errc
}

func inPid(t testing.TB, pid int, f func()) {
	t.Helper()
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := inNetns(ns, f); err != nil {
		t.Fatal(err)
	}
}

// dial connects to addr from the netns of pid (0: the host) and returns what
// the server sent: servers here answer with the client's address as they see it.
func dial(t testing.TB, pid int, addr string, timeout time.Duration) (string, error) {
	t.Helper()
	if pid == 0 {
		return dialIn(t, netns.None(), addr, timeout)
	}
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	return dialIn(t, ns, addr, timeout)
}

// dialIn is dial from netns ns (netns.None(): the host).
func dialIn(t testing.TB, ns netns.NsHandle, addr string, timeout time.Duration) (string, error) {
	t.Helper()
	var c net.Conn
	var err error
	d := func() { c, err = net.DialTimeout("tcp", addr, timeout) }
	if !ns.IsOpen() {
		d()
	} else {
		must(t, inNetns(ns, d))
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// serve listens on addr in the netns of pid (0: the host) until cleanup and
// answers every connection with the client's address.
func serve(t testing.TB, pid int, addr string) string {
	t.Helper()
	var ln net.Listener
	var err error
	l := func() { ln, err = net.Listen("tcp", addr) }
	if pid == 0 {
		l()
	} else {
		inPid(t, pid, l)
	}
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, c.RemoteAddr().String())
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// outside is a stand-in for the internet: a netns of its own, joined to the
// host by a veth on 198.18.x.y/30, with a server that tells clients their
// address. It has no route back to the sandbox subnet, so only masqueraded
// connections can succeed.
type outside struct {
	ns     netns.NsHandle
	hostIP netip.Addr // the host's end of the veth
	ip     netip.Addr // the outside's end
	addr   string     // the server, ip:port
}

func newOutside(t testing.TB) *outside {
	t.Helper()
	return newOutsideIn(t, netip.MustParsePrefix("198.18.0.0/16"))
}

// newOutsideIn is newOutside on a random /30 of pool (one that holds no
// address of this host yet).
func newOutsideIn(t testing.TB, pool netip.Prefix) *outside {
	t.Helper()
	r := rand.Uint32N(1 << 14)
	var hostIP, outIP netip.Prefix
	for try := 0; ; try++ {
		hostIP, outIP = block(pool, rand.Uint32N(1<<(30-pool.Bits())))
		if addrs, _ := netlink.AddrList(nil, netlink.FAMILY_V4); !slices.ContainsFunc(addrs, func(a netlink.Addr) bool {
			ip, _ := netip.AddrFromSlice(a.IP)
			return netip.PrefixFrom(hostIP.Addr(), 30).Masked().Contains(ip.Unmap())
		}) || try > 20 {
			break
		}
	}
	name := fmt.Sprintf("fbxtest-out-%04x", r)
	hostIf, peerIf := fmt.Sprintf("fbt%04xh", r), fmt.Sprintf("fbt%04xo", r)

	var ns netns.NsHandle
	var nsErr error
	must(t, inNetns(netns.None(), func() { ns, nsErr = netns.NewNamed(name) }))
	if nsErr != nil {
		t.Fatalf("create netns %s: %v", name, nsErr)
	}
	t.Cleanup(func() { ns.Close(); _ = netns.DeleteNamed(name) })

	attrs := netlink.NewLinkAttrs()
	attrs.Name = hostIf
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: peerIf, PeerNamespace: netlink.NsFd(ns)}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("create veth %s: %v", hostIf, err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(veth) })
	must(t, netlink.AddrAdd(veth, &netlink.Addr{IPNet: ipNet(hostIP)}))
	must(t, netlink.LinkSetUp(veth))

	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	must(t, err)
	defer h.Close()
	peer, err := h.LinkByName(peerIf)
	must(t, err)
	must(t, h.AddrAdd(peer, &netlink.Addr{IPNet: ipNet(outIP)}))
	must(t, h.LinkSetUp(peer))
	// As in Attach: a connect before both ends are operationally up loses its SYN.
	must(t, waitOperUp(context.Background(), func() (netlink.Link, error) { return netlink.LinkByName(hostIf) }))
	must(t, waitOperUp(context.Background(), func() (netlink.Link, error) { return h.LinkByName(peerIf) }))

	o := &outside{ns: ns, hostIP: hostIP.Addr(), ip: outIP.Addr()}
	var ln net.Listener
	must(t, inNetns(ns, func() { ln, err = net.Listen("tcp", net.JoinHostPort(outIP.Addr().String(), "0")) }))
	if err != nil {
		t.Fatalf("listen in %s: %v", name, err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, c.RemoteAddr().String())
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	o.addr = ln.Addr().String()
	return o
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantDropped fails unless connecting from pid to addr times out (a drop, as
// opposed to a refusal or success).
func wantDropped(t *testing.T, pid int, addr string) {
	t.Helper()
	got, err := dial(t, pid, addr, dropWait)
	if !isTimeout(err) {
		t.Fatalf("connect to %s from pid %d: got %q, %v; want a timeout (dropped)", addr, pid, got, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// (1) lo only: loopback works, the outside is unreachable.
func TestLoopbackOnly(t *testing.T) {
	m := newManager(t)
	out := newOutside(t)
	pid := startSandbox(t)

	if _, err := dial(t, pid, "127.0.0.1:1", time.Second); !errors.Is(err, unix.ENETUNREACH) {
		t.Fatalf("before LoopbackUp, 127.0.0.1: %v; want ENETUNREACH (lo down)", err)
	}
	if err := m.LoopbackUp(pid); err != nil {
		t.Fatal(err)
	}
	if err := m.LoopbackUp(pid); err != nil {
		t.Fatalf("LoopbackUp twice: %v", err)
	}
	local := serve(t, pid, "127.0.0.1:0")
	if got, err := dial(t, pid, local, time.Second); err != nil || got == "" {
		t.Fatalf("loopback in the sandbox: %q, %v", got, err)
	}
	if _, err := dial(t, pid, out.addr, time.Second); !errors.Is(err, unix.ENETUNREACH) {
		t.Fatalf("outside without Attach: %v; want ENETUNREACH", err)
	}
	// The host itself does reach the outside server.
	if _, err := dial(t, 0, out.addr, time.Second); err != nil {
		t.Fatalf("outside from the host: %v", err)
	}
}

// (2) Attach: the outside is reachable, through NAT.
func TestAttachReachesOutside(t *testing.T) {
	m := newManager(t)
	out := newOutside(t)
	pid := startSandbox(t)
	must(t, m.LoopbackUp(pid))
	_, l := attach(t, m, pid)

	if !DefaultSubnet.Contains(l.HostIP.Addr()) || l.SandboxIP.Addr() != l.HostIP.Addr().Next() || l.HostIP.Bits() != 30 {
		t.Fatalf("link %+v", l)
	}
	host, err := netlink.LinkByName(l.HostIf)
	must(t, err)
	if host.Attrs().OperState != netlink.OperUp && host.Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("%s is not up", l.HostIf)
	}
	if v6, _ := netlink.AddrList(host, netlink.FAMILY_V6); len(v6) != 0 {
		t.Fatalf("%s has IPv6 addresses %v", l.HostIf, v6)
	}
	if m.mtu != 0 && host.Attrs().MTU != m.mtu {
		t.Fatalf("%s MTU %d, want %d", l.HostIf, host.Attrs().MTU, m.mtu)
	}

	got, err := dial(t, pid, out.addr, 3*time.Second)
	if err != nil {
		t.Fatalf("outside after Attach: %v", err)
	}
	if ap, err := netip.ParseAddrPort(got); err != nil || ap.Addr() != out.hostIP {
		t.Fatalf("outside saw the client as %q; want %s (masqueraded)", got, out.hostIP)
	}
}

// A connect right after Attach must not lose its SYN (and stall 1 s for the
// retransmit) to links the kernel has not fully brought up yet.
func TestConnectRightAfterAttach(t *testing.T) {
	m := newManager(t)
	out := newOutside(t)
	for range 20 {
		pid := startSandbox(t)
		attach(t, m, pid)
		if _, err := dial(t, pid, out.addr, 800*time.Millisecond); err != nil {
			t.Fatalf("first connect after Attach: %v", err)
		}
	}
}

// (3) A sandbox cannot reach the host: not on its gateway address, not on any
// other host address.
func TestSandboxCannotReachHost(t *testing.T) {
	m := newManager(t)
	out := newOutside(t)
	pid := startSandbox(t)
	must(t, m.LoopbackUp(pid))
	_, l := attach(t, m, pid)

	for _, ip := range []netip.Addr{l.HostIP.Addr(), out.hostIP} {
		addr := serve(t, 0, net.JoinHostPort(ip.String(), "0"))
		if _, err := dial(t, 0, addr, time.Second); err != nil {
			t.Fatalf("host listener %s from the host: %v", addr, err)
		}
		wantDropped(t, pid, addr)
	}
	// The host may still open connections into the sandbox.
	in := serve(t, pid, net.JoinHostPort(l.SandboxIP.Addr().String(), "0"))
	if _, err := dial(t, 0, in, time.Second); err != nil {
		t.Fatalf("host to sandbox: %v", err)
	}
	if _, err := dial(t, pid, out.addr, 3*time.Second); err != nil {
		t.Fatalf("outside: %v", err)
	}
	// The outside cannot open connections into the sandbox, even with a route.
	h, err := netlink.NewHandleAt(out.ns, unix.NETLINK_ROUTE)
	must(t, err)
	defer h.Close()
	gw := out.hostIP.As4()
	must(t, h.RouteAdd(&netlink.Route{Dst: ipNet(DefaultSubnet), Gw: net.IP(gw[:])}))
	if got, err := dialIn(t, out.ns, in, dropWait); !isTimeout(err) {
		t.Fatalf("outside to sandbox %s: got %q, %v; want a timeout (dropped)", in, got, err)
	}
}

// (4) Two attached sandboxes cannot reach each other.
func TestSandboxesIsolated(t *testing.T) {
	m := newManager(t)
	out := newOutside(t)
	a, b := startSandbox(t), startSandbox(t)
	must(t, m.LoopbackUp(a))
	must(t, m.LoopbackUp(b))
	_, la := attach(t, m, a)
	_, lb := attach(t, m, b)

	srv := serve(t, a, "0.0.0.0:0")
	_, port, _ := net.SplitHostPort(srv)
	aAddr := net.JoinHostPort(la.SandboxIP.Addr().String(), port)
	if _, err := dial(t, a, aAddr, time.Second); err != nil {
		t.Fatalf("a to itself: %v", err)
	}
	if _, err := dial(t, 0, aAddr, time.Second); err != nil {
		t.Fatalf("host to a: %v", err)
	}
	wantDropped(t, b, aAddr)
	wantDropped(t, b, net.JoinHostPort(la.HostIP.Addr().String(), port))
	for _, pid := range []int{a, b} {
		if _, err := dial(t, pid, out.addr, 3*time.Second); err != nil {
			t.Fatalf("outside from pid %d: %v", pid, err)
		}
	}
	_ = lb
}

// (5) Detach removes the link (both ends) and is idempotent.
func TestDetach(t *testing.T) {
	m := newManager(t)
	pid := startSandbox(t)
	id, l := attach(t, m, pid)

	if links, _ := m.Links(); links[l.HostIf] != id {
		t.Fatalf("Links() = %v; want %s -> %s", links, l.HostIf, id)
	}
	must(t, m.Detach(id))
	if _, err := netlink.LinkByName(l.HostIf); err == nil {
		t.Fatalf("%s still exists after Detach", l.HostIf)
	}
	inPid(t, pid, func() {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			t.Errorf("eth0 still exists in the sandbox after Detach")
		}
	})
	must(t, m.Detach(id))
	must(t, m.Detach("fbxtest-never-attached"))
	links, err := m.Links()
	must(t, err)
	for name, lid := range links {
		if name == l.HostIf || lid == id {
			t.Fatalf("Links() after Detach still has %s -> %s", name, lid)
		}
	}
	// Attaching again after Detach works.
	if _, err := m.Attach(context.Background(), id, pid, Policy{}); err != nil {
		t.Fatalf("Attach after Detach: %v", err)
	}
	must(t, m.Detach(id))
}

// (6) New is idempotent, touches no other table, and keeps running
// sandboxes connected (a daemon restart).
func TestNewIdempotent(t *testing.T) {
	requireRoot(t)
	c, err := nftables.New()
	must(t, err)
	other := &nftables.Table{Name: fmt.Sprintf("fbxtest_other_%x", rand.Uint32()), Family: nftables.TableFamilyINet}
	c.AddTable(other)
	c.AddChain(&nftables.Chain{Name: "keep", Table: other})
	must(t, c.Flush())
	t.Cleanup(func() { c.DelTable(other); _ = c.Flush() })

	m := newManager(t)
	out := newOutside(t)
	pid := startSandbox(t)
	must(t, m.LoopbackUp(pid))
	id, _ := attach(t, m, pid)

	ours := policyChainPrefix + hostIfName(id)
	first := ruleCounts(t)
	if first[ours] != 1 {
		t.Fatalf("the sandbox's policy chain: %v", first)
	}
	want := map[string]int{"input": 4, "forward": 6 + len(DeniedByDefault), "prerouting": 2, "postrouting": 1}
	if fmt.Sprint(baseChains(first)) != fmt.Sprint(want) {
		t.Fatalf("rules per chain %v; want %v", first, want)
	}
	for range 2 {
		newManager(t)
	}
	again := ruleCounts(t)
	if again[ours] != 1 {
		t.Fatalf("the sandbox's policy chain did not survive New: %v", again)
	}
	if fmt.Sprint(baseChains(again)) != fmt.Sprint(want) {
		t.Fatalf("after New x3: rules per chain %v; want %v", again, want)
	}
	tables, err := c.ListTables()
	must(t, err)
	n, kept := 0, false
	for _, tb := range tables {
		n += btoi(tb.Name == TableName)
		kept = kept || tb.Name == other.Name
	}
	if n != 1 || !kept {
		t.Fatalf("%d tables named %s, other table kept: %v", n, TableName, kept)
	}
	if _, err := dial(t, pid, out.addr, 3*time.Second); err != nil {
		t.Fatalf("outside after New again: %v", err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// baseChains keeps the base chains of a ruleCounts result (not the policy
// chains of sandboxes, which other tests may be running).
func baseChains(counts map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range counts {
		if !strings.HasPrefix(k, policyChainPrefix) {
			out[k] = v
		}
	}
	return out
}

func ruleCounts(t *testing.T) map[string]int {
	t.Helper()
	c, err := nftables.New()
	must(t, err)
	tb := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	must(t, err)
	counts := map[string]int{}
	for _, ch := range chains {
		if ch.Table.Name != TableName {
			continue
		}
		rules, err := c.GetRules(tb, ch)
		must(t, err)
		counts[ch.Name] += len(rules)
	}
	return counts
}

// (7) /30s never collide, also across a new Manager (a daemon restart).
func TestAllocation(t *testing.T) {
	m := newManager(t)
	pids := []int{startSandbox(t), startSandbox(t), startSandbox(t), startSandbox(t)}
	ids := make([]string, 3)
	links := make([]*Link, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			ids[i] = fmt.Sprintf("fbxtest-%x", rand.Uint64())
			links[i], _ = m.Attach(context.Background(), ids[i], pids[i], Policy{})
		})
	}
	wg.Wait()
	for i, l := range links {
		t.Cleanup(func() { _ = m.Detach(ids[i]) })
		if l == nil {
			t.Fatalf("Attach %d failed", i)
		}
	}
	if _, err := m.Attach(context.Background(), ids[0], pids[3], Policy{}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Attach of an attached id: %v; want ErrConflict", err)
	}

	if _, err := m.Attach(context.Background(), "fbxtest-host", os.Getpid(), Policy{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Attach of a pid in the host netns: %v; want ErrInvalidArgument", err)
	}

	m2 := newManager(t)
	got, err := m2.Links()
	must(t, err)
	for i, l := range links {
		if got[l.HostIf] != ids[i] {
			t.Fatalf("new Manager's Links() = %v; want %s -> %s", got, l.HostIf, ids[i])
		}
	}
	_, l4 := attach(t, m2, pids[3])
	all := append(slices.Clone(links), l4)
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.HostIP.Overlaps(b.HostIP) || a.HostIf == b.HostIf {
				t.Fatalf("links collide: %+v and %+v", a, b)
			}
		}
	}
}

// BenchmarkAttachDetach reports the median time of Attach and of Detach on
// one sandbox: go test -run '^$' -bench AttachDetach -benchtime 20x.
func BenchmarkAttachDetach(b *testing.B) {
	m := newManager(b)
	pid := startSandbox(b)
	id := fmt.Sprintf("fbxtest-%x", rand.Uint64())
	b.Cleanup(func() { _ = m.Detach(id) })
	var att, det []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := m.Attach(context.Background(), id, pid, Policy{}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := m.Detach(id); err != nil {
			b.Fatal(err)
		}
		att, det = append(att, t1.Sub(t0)), append(det, time.Since(t1))
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	b.ReportMetric(median(att), "attach-ms")
	b.ReportMetric(median(det), "detach-ms")
}
