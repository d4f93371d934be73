// Package dnstest serves DNS answers for tests: a server on the host's
// loopback (UDP and TCP, one port) that answers A questions for the names it
// is given and NXDOMAIN for the rest. The daemon's sandbox resolvers are
// pointed at it (--dns-upstream), so no question leaves the host.
package dnstest

import (
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// Serve answers names (fully qualified, lower case, "ok.fbx.test.") with
// their IPv4 address, TTL ttl, until the test ends, and returns its
// address (127.0.0.1:port).
func Serve(t testing.TB, names map[string]string, ttl uint32) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", pc.LocalAddr().String())
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		if len(req.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
			w.WriteMsg(m)
			return
		}
		q := req.Question[0]
		ip, ok := names[strings.ToLower(q.Name)]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.ParseIP(ip)})
		}
		w.WriteMsg(m)
	})
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		go s.ActivateAndServe()
		t.Cleanup(func() { s.Shutdown() })
	}
	return pc.LocalAddr().String()
}
