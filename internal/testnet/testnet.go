// Package testnet builds small networks of a test's own, for tests and
// benchmarks of forkbox clusters: a bridge in the caller's network namespace
// (the "switch", whose address serves the shared PostgreSQL and MinIO) and
// one network namespace per node (its "host"), each with its own address on
// the bridge. It needs root and iproute2.
package testnet

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// Net is a bridge and its hosts.
type Net struct {
	// Gateway is the bridge's address, reachable from every host.
	Gateway string
	// Namespaces are the hosts' network namespaces (names under
	// /run/netns), Addrs their addresses, in order.
	Namespaces []string
	Addrs      []string
	bridge     string
}

// New makes a bridge with address 10.77.0.1/24 and n namespaces with
// addresses 10.77.0.2 …, all named after prefix (a few letters; one Net per
// prefix at a time), and removes them when t ends. What an earlier run that
// was killed left under the same prefix is removed first.
func New(t testing.TB, prefix string, n int) *Net {
	t.Helper()
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	tn := &Net{bridge: prefix + "br", Gateway: "10.77.0.1"}
	cleanup := func() {
		for i := 0; i < n; i++ {
			exec.Command("ip", "netns", "del", fmt.Sprintf("%s%d", prefix, i)).Run()
			exec.Command("ip", "link", "del", fmt.Sprintf("%sv%d", prefix, i)).Run()
		}
		exec.Command("ip", "link", "del", tn.bridge).Run()
	}
	cleanup()
	t.Cleanup(cleanup)
	ip("link", "add", tn.bridge, "type", "bridge")
	ip("addr", "add", tn.Gateway+"/24", "dev", tn.bridge)
	ip("link", "set", tn.bridge, "up")
	for i := 0; i < n; i++ {
		ns, host, peer := fmt.Sprintf("%s%d", prefix, i), fmt.Sprintf("%sv%d", prefix, i), fmt.Sprintf("%sp%d", prefix, i)
		addr := fmt.Sprintf("10.77.0.%d", i+2)
		ip("netns", "add", ns)
		ip("link", "add", host, "type", "veth", "peer", "name", peer)
		ip("link", "set", host, "master", tn.bridge, "up")
		ip("link", "set", peer, "netns", ns)
		ip("-n", ns, "addr", "add", addr+"/24", "dev", peer)
		ip("-n", ns, "link", "set", peer, "up")
		ip("-n", ns, "link", "set", "lo", "up")
		ip("-n", ns, "route", "add", "default", "via", tn.Gateway)
		tn.Namespaces = append(tn.Namespaces, ns)
		tn.Addrs = append(tn.Addrs, addr)
	}
	return tn
}

// Command runs name in namespace i's network (only: nsenter enters no other
// namespace, so the process shares the caller's mounts, which a daemon
// restarted later must see).
func (n *Net) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + n.Namespaces[i], "--", name}, args...)...)
}
