package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
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
	sb, err := m.store.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if sb.State == api.StateTerminated || sb.State == api.StateError {
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
	sb, err := m.store.Get(ctx, ref)
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
