package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"sort"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
)

// Exposed ports: a server that code starts inside a sandbox is reached
// through the daemon (internal/httpapi proxies /v1/sandboxes/{id}/ports/{port}/…),
// which connects to it inside the sandbox's network namespace. Each port
// has an access token (made when first asked for, revocable) and may be
// made public; otherwise the API key is needed.

// PortPath is the proxy's path for port of sandbox id.
func PortPath(id string, port int) string { return fmt.Sprintf("/v1/sandboxes/%s/ports/%d/", id, port) }

func checkPort(port int) error {
	if port < 1 || port > 65535 {
		return errdefs.InvalidArgument("port: %d is out of range [1, 65535]", port)
	}
	return nil
}

func newPortToken() string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "fbxp_" + base64.RawURLEncoding.EncodeToString(b[:])
}

func portView(sb *store.Sandbox, port int, pa store.PortAccess) *api.Port {
	return &api.Port{Sandbox: sb.ID, Port: port, Path: PortPath(sb.ID, port), Token: pa.Token, Public: pa.Public}
}

// portLister is the runtime's listing of a sandbox's listening ports
// (runtime.Runtime has it; fakes need not).
type portLister interface {
	Listeners(id string, info *runtime.Info) ([]runtime.Listener, error)
}

// ListPorts lists the ports of sandbox ref: those listening now, when it is
// running (a listing does not resume a suspended sandbox), and those with
// access settings.
func (m *Manager) ListPorts(ctx context.Context, ref string) ([]api.Port, error) {
	sb, err := m.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	byPort := map[int]*api.Port{}
	for port, pa := range sb.Spec.Ports {
		p := portView(sb, port, pa)
		p.Token = ""
		byPort[port] = p
	}
	if pl, ok := m.rt.(portLister); ok {
		if l := m.findLiveFor(ctx, sb.ID); l != nil && sb.State == api.StateRunning {
			ls, err := pl.Listeners(sb.ID, l.info)
			if err != nil {
				return nil, err
			}
			for _, li := range ls {
				p := byPort[li.Port]
				if p == nil {
					p = portView(sb, li.Port, store.PortAccess{})
					byPort[li.Port] = p
				}
				p.Listening, p.Process = true, li.Process
			}
		}
	}
	out := make([]api.Port, 0, len(byPort))
	for _, p := range byPort {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out, nil
}

// Port returns how to reach port of sandbox ref, making its token when it
// has none yet.
func (m *Manager) Port(ctx context.Context, ref string, port int) (*api.Port, error) {
	return m.updatePort(ctx, ref, port, func(pa *store.PortAccess) {})
}

// SetPortPublic makes port of sandbox ref public, or not.
func (m *Manager) SetPortPublic(ctx context.Context, ref string, port int, public bool) (*api.Port, error) {
	return m.updatePort(ctx, ref, port, func(pa *store.PortAccess) { pa.Public = public })
}

// RevokePort replaces the port's token (the old one stops working at once)
// and makes it private.
func (m *Manager) RevokePort(ctx context.Context, ref string, port int) (*api.Port, error) {
	return m.updatePort(ctx, ref, port, func(pa *store.PortAccess) { pa.Token, pa.Public = newPortToken(), false })
}

func (m *Manager) updatePort(ctx context.Context, ref string, port int, change func(*store.PortAccess)) (*api.Port, error) {
	if err := checkPort(port); err != nil {
		return nil, err
	}
	sb, err := m.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	if sb.State.Ended() {
		return nil, notRunning(sb)
	}
	var out store.PortAccess
	sb, err = m.store.Update(ctx, sb.ID, func(s *store.Sandbox) error {
		pa := s.Spec.Ports[port]
		if pa.Token == "" {
			pa.Token = newPortToken()
		}
		change(&pa)
		if s.Spec.Ports == nil {
			s.Spec.Ports = map[int]store.PortAccess{}
		}
		s.Spec.Ports[port] = pa
		out = pa
		return nil
	})
	if err != nil {
		return nil, err
	}
	return portView(sb, port, out), nil
}

// PortAccess reports whether a request for port of sandbox ref may pass
// without the API key: the port is public, or token is its token. Unknown
// sandboxes and ports without settings give false (the caller answers as
// for a wrong key, so nothing is learnt about what exists).
//
// It returns the sandbox the token (or publicity) was checked against: the
// caller reaches that one, by its id and as its tenant, and no other that
// ref might also name (two tenants may both have a "dev").
func (m *Manager) PortAccess(ctx context.Context, ref string, port int, token string) (id, owner string, ok bool) {
	sb, err := m.lookup(ctx, ref)
	if err != nil {
		return "", "", false
	}
	pa, found := sb.Spec.Ports[port]
	if !found {
		return "", "", false
	}
	if pa.Public || (token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(pa.Token)) == 1) {
		return sb.ID, sb.Tenant, true
	}
	return "", "", false
}

// DialPort connects to port of sandbox ref for one proxied request,
// resuming the sandbox when it is suspended. The sandbox counts as in use
// (and active) until release: it is not idled out, and a checkpoint or
// suspend waits for the request to end.
func (m *Manager) DialPort(ctx context.Context, ref string, port int) (net.Conn, func(), error) {
	if err := checkPort(port); err != nil {
		return nil, nil, err
	}
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	c, err := m.rt.DialPort(ctx, l.id, l.info, port)
	if err != nil {
		release()
		return nil, nil, err
	}
	return c, release, nil
}
