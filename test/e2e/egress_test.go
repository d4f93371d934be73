package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/dnstest"
)

// TestEgressPolicy: what a sandbox with internet access reaches, through
// the API. The destinations are namespaces the test makes: an "internet"
// host in TEST-NET-2 (198.51.100.0/24), a "LAN" host in 10.250.0.0/16 and a
// link-local one in 169.254.0.0/16 (never the platform's metadata address);
// names come from a DNS server of the test's on loopback, which the
// daemon's resolvers ask (FORKBOX_DNS_UPSTREAM). No packet leaves the host.
func TestEgressPolicy(t *testing.T) {
	needRoot(t)
	inet := newOutsideAt(t, func(n int) (string, string) {
		return fmt.Sprintf("198.51.100.%d", 4*n+1), fmt.Sprintf("198.51.100.%d", 4*n+2)
	})
	inet2 := newOutsideAt(t, func(n int) (string, string) {
		return fmt.Sprintf("198.51.100.%d", 4*n+1), fmt.Sprintf("198.51.100.%d", 4*n+2)
	})
	lan := newOutsideAt(t, func(n int) (string, string) { return fmt.Sprintf("10.250.%d.1", n), fmt.Sprintf("10.250.%d.2", n) })
	ll := newOutsideAt(t, func(n int) (string, string) { return fmt.Sprintf("169.254.%d.1", n), fmt.Sprintf("169.254.%d.2", n) })
	upstream := dnstest.Serve(t, map[string]string{"ok.fbx.test.": inet.ip, "other.fbx.test.": inet2.ip}, 60)
	d := startChatDaemon(t, "FORKBOX_DNS_UPSTREAM="+upstream)

	reach := func(sb, url string) string {
		t.Helper()
		res := run(t, d, sb, "python3", "-c", strings.Replace(fetchPy, "timeout=3", "timeout=1.5", 1), url)
		if strings.HasPrefix(res.Stdout, "hello from outside") {
			return "ok"
		}
		return "refused"
	}
	want := func(what, sb string, urls map[string]string) {
		t.Helper()
		for url, w := range urls {
			if got := reach(sb, url); got != w {
				t.Errorf("%s: %s is %s; want %s", what, url, got, w)
			}
		}
	}
	url := func(o *outside) string { return "http://" + o.addr + "/hello.txt" }

	sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "egress", AllowInternetAccess: true})
	want("default policy", sb.ID, map[string]string{url(inet): "ok", url(lan): "refused", url(ll): "refused"})

	// A policy change applies to the running sandbox at once.
	start := time.Now()
	upd, err := d.c.UpdateSandbox(ctxT(t), sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{
		AllowOut: []string{lan.ip + "/30"}, DenyOut: []string{inet.ip}}})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Logf("PATCH took %s", took)
	}
	if upd.Network == nil || upd.Network.DenyOut[0] != inet.ip {
		t.Fatalf("PATCH answered %+v", upd.Network)
	}
	want("allow a LAN CIDR, deny an internet host", sb.ID, map[string]string{url(lan): "ok", url(inet): "refused", url(inet2): "ok", url(ll): "refused"})

	// A name allow-list.
	if _, err := d.c.UpdateSandbox(ctxT(t), sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{AllowOut: []string{"ok.fbx.test"}}}); err != nil {
		t.Fatal(err)
	}
	names := func(sb string) string {
		t.Helper()
		return strings.TrimSpace(run(t, d, sb, "python3", "-c", `import socket
for n in ("ok.fbx.test", "other.fbx.test"):
    try:
        print(n, socket.gethostbyname(n))
    except OSError as e:
        print(n, "unresolved")`).Stdout)
	}
	wantNames := "ok.fbx.test " + inet.ip + "\nother.fbx.test unresolved"
	allowList := map[string]string{"http://ok.fbx.test:8099/hello.txt": "ok", url(inet2): "refused", url(lan): "refused"}
	if got := names(sb.ID); got != wantNames {
		t.Errorf("names under the allow-list:\n%s\nwant\n%s", got, wantNames)
	}
	want("allow-list", sb.ID, allowList)

	// It survives suspend and resume.
	if _, err := d.c.Suspend(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Resume(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := d.c.GetSandbox(ctxT(t), sb.ID); err != nil || got.Network == nil || got.Network.AllowOut[0] != "ok.fbx.test" {
		t.Fatalf("after resume: %+v %v", got, err)
	}
	if got := names(sb.ID); got != wantNames {
		t.Errorf("names after resume:\n%s", got)
	}
	want("allow-list after resume", sb.ID, allowList)

	// A fork keeps it, unless the fork gives another.
	fr, err := d.c.Fork(ctxT(t), sb.ID, api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	branch := fr.Sandboxes[0]
	t.Cleanup(func() { d.c.DeleteSandbox(ctxT(t), branch.ID) })
	if !branch.AllowInternetAccess || branch.Network == nil {
		t.Fatalf("branch: %+v", branch)
	}
	want("fork", branch.ID, allowList)
	fr, err = d.c.Fork(ctxT(t), sb.ID, api.ForkRequest{Count: 1, Network: &api.NetworkPolicy{}})
	if err != nil {
		t.Fatal(err)
	}
	open := fr.Sandboxes[0]
	t.Cleanup(func() { d.c.DeleteSandbox(ctxT(t), open.ID) })
	want("fork with the default policy", open.ID, map[string]string{url(inet2): "ok", url(lan): "refused", url(ll): "refused"})

	// Bad input: a clear 400, nothing changed.
	for _, bad := range []api.NetworkPolicy{
		{AllowOut: []string{"not a name"}},
		{DenyOut: []string{"pypi.org"}},
		{AllowOut: []string{"fd00::/8"}},
	} {
		if _, err := d.c.UpdateSandbox(ctxT(t), sb.ID, api.UpdateSandboxRequest{Network: &bad}); err == nil || !strings.Contains(err.Error(), "network") {
			t.Errorf("PATCH %+v: %v; want a 400 naming network", bad, err)
		}
	}
	plain := newSandbox(t, d, api.CreateSandboxRequest{})
	if _, err := d.c.UpdateSandbox(ctxT(t), plain.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{AllowOut: []string{"10.0.0.0/8"}}}); err == nil {
		t.Error("a policy for a sandbox without internet access was accepted")
	}
	if _, err := d.c.CreateSandbox(ctxT(t), api.CreateSandboxRequest{Network: &api.NetworkPolicy{AllowOut: []string{"10.0.0.0/8"}}}); err == nil {
		t.Error("create with a policy and no internet access was accepted")
	}
	if got := names(sb.ID); got != wantNames {
		t.Errorf("names after refused PATCHes:\n%s", got)
	}
	// Deleted, it leaves no policy chain, names set or resolver behind.
	for _, id := range []string{sb.ID, branch.ID, open.ID} {
		if _, err := d.c.DeleteSandbox(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
		assertNoLeaks(t, d, id)
	}
}
