package netsetup

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// A sandbox with internet access resolves names through the daemon: its
// resolv.conf names ResolverAddr, which the host redirects to a resolver
// listening on the sandbox's own gateway address (one per sandbox, so the
// socket a query arrives on says whose it is; packets whose source is not
// that sandbox's address are ignored, and rp_filter on the host-side veth
// keeps a sandbox from using another's address). The resolver answers names
// the sandbox's policy allows by asking the host's upstream servers, and
// before answering adds the addresses of an allow-list's names to the
// sandbox's nftables set for their TTL (at least minAllowTTL), so the connect
// that follows the lookup is let through. Other names get NXDOMAIN with an
// extended error "Blocked". AAAA queries are answered empty: sandboxes have
// no IPv6 route.

const (
	// minAllowTTL is the least time an answered address stays allowed:
	// programs connect a little after they resolve, and some cache answers
	// past a TTL of 0 or 1 s.
	minAllowTTL = 30 * time.Second
	// maxAllowTTL caps it.
	maxAllowTTL = 24 * time.Hour
	// upstreamTimeout bounds one question to one upstream server.
	upstreamTimeout = 3 * time.Second
)

type resolver struct {
	hostIf    string
	sandboxIP netip.Addr
	upstreams []string // host:port
	log       *slog.Logger

	mu     sync.RWMutex
	policy Policy

	udp, tcp *dns.Server
	pc       net.PacketConn
	ln       net.Listener
	served   sync.WaitGroup // the two serving goroutines
}

// startResolver listens on the link's gateway address, port 53, UDP and TCP.
func startResolver(link *Link, p Policy, upstreams []string, log *slog.Logger) (*resolver, error) {
	r := &resolver{hostIf: link.HostIf, sandboxIP: link.SandboxIP.Addr(), upstreams: upstreams, log: log, policy: p}
	addr := net.JoinHostPort(link.HostIP.Addr().String(), "53")
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		pc.Close()
		return nil, err
	}
	r.pc, r.ln = pc, ln
	r.udp = &dns.Server{PacketConn: pc, Handler: r}
	r.tcp = &dns.Server{Listener: ln, Handler: r, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	for _, s := range []*dns.Server{r.udp, r.tcp} {
		r.served.Add(1)
		go func(s *dns.Server) {
			defer r.served.Done()
			if err := s.ActivateAndServe(); err != nil {
				log.Debug("sandbox resolver stopped", "if", r.hostIf, "err", err)
			}
		}(s)
	}
	return r, nil
}

func (r *resolver) setPolicy(p Policy) {
	r.mu.Lock()
	r.policy = p
	r.mu.Unlock()
}

// stop closes the resolver's sockets (the address is free again when it
// returns: a sandbox attached next may get the same /30) and its servers.
func (r *resolver) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// Shutdown does nothing to a server that has not started serving yet
	// (a sandbox deleted right after it was made): the sockets are closed
	// here in any case, which ends ActivateAndServe too.
	r.udp.ShutdownContext(ctx)
	r.tcp.ShutdownContext(ctx)
	r.pc.Close()
	r.ln.Close()
	// The server closes its socket too, on its way out; when both calls
	// race, the one that loses returns before the descriptor is really
	// closed. Waiting for the servers to return waits for that close.
	done := make(chan struct{})
	go func() { r.served.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.log.Warn("sandbox resolver: servers did not stop", "if", r.hostIf)
	}
}

// ServeDNS answers one query of the sandbox.
func (r *resolver) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	if !r.fromSandbox(w.RemoteAddr()) {
		return // not this sandbox's: no answer at all
	}
	if len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeFormatError)
		w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	r.mu.RLock()
	p := r.policy
	r.mu.RUnlock()
	if !p.NameAllowed(q.Name) {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeNameError)
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeBlocked, ExtraText: "not in the sandbox's allow_out"})
		w.WriteMsg(m)
		return
	}
	if q.Qtype == dns.TypeAAAA {
		m := new(dns.Msg)
		m.SetReply(req)
		w.WriteMsg(m)
		return
	}
	network := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		network = "tcp"
	}
	resp := r.ask(req, network)
	if resp == nil {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeServerFailure)
		w.WriteMsg(m)
		return
	}
	if p.AllowList() {
		var addrs []netip.Addr
		ttl := maxAllowTTL
		for _, rr := range resp.Answer {
			if a, ok := rr.(*dns.A); ok {
				// A name may point anywhere (DNS rebinding): an address
				// the defaults deny stays denied unless allow_out names
				// its range.
				if ip, ok := netip.AddrFromSlice(a.A.To4()); ok && (!deniedByDefault(ip) || p.allowsAddr(ip)) {
					addrs = append(addrs, ip)
					ttl = min(ttl, time.Duration(a.Hdr.Ttl)*time.Second)
				}
			}
		}
		if err := allowAddrs(r.hostIf, addrs, max(ttl, minAllowTTL)); err != nil {
			r.log.Warn("sandbox resolver: allowing answered addresses", "if", r.hostIf, "name", q.Name, "err", err)
			m := new(dns.Msg)
			m.SetRcode(req, dns.RcodeServerFailure)
			w.WriteMsg(m)
			return
		}
	}
	resp.Id = req.Id
	w.WriteMsg(resp)
}

func (r *resolver) fromSandbox(a net.Addr) bool {
	var ip net.IP
	switch a := a.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	}
	got, ok := netip.AddrFromSlice(ip)
	return ok && got.Unmap() == r.sandboxIP
}

// ask forwards req to the upstream servers in turn; nil when none answers.
func (r *resolver) ask(req *dns.Msg, network string) *dns.Msg {
	c := &dns.Client{Net: network, Timeout: upstreamTimeout}
	for _, up := range r.upstreams {
		resp, _, err := c.Exchange(req, up)
		if err == nil && resp != nil {
			return resp
		}
		r.log.Debug("sandbox resolver: upstream", "upstream", up, "err", err)
	}
	return nil
}
