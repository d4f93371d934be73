package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/lazyre"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/tenant"
)

// Exposed ports: /v1/sandboxes/{sandbox}/ports/{port}/… is proxied to a
// server on 127.0.0.1:{port} inside the sandbox (HTTP/1.1, streamed both
// ways, WebSocket and other upgrades passed through). Besides the API key,
// the port's token (X-Forkbox-Token, or the forkbox_token query parameter)
// or the port being public lets a request through; the key and the token
// never reach the sandbox. What the sandbox answers is served under
// "Content-Security-Policy: sandbox …", so a page it serves runs in an
// opaque origin, not the daemon's (it cannot read the web UI's stored key
// or call the API with the user's credentials), and its cookies are kept
// to its port's path.

// portProxyRE matches the proxy's paths (the API key check leaves them to
// proxyPort, which also accepts a port's token). A port in another form
// than portNumber's needs the key, and then is refused by portParam.
var portProxyRE = lazyre.New(`^/v1/sandboxes/[^/]+/ports/[1-9][0-9]{0,4}/`)

const (
	portTokenHeader = "X-Forkbox-Token"
	portTokenQuery  = "forkbox_token"
	portTokenCookie = "forkbox_token"
	// portCSP makes what a sandbox serves a document of an opaque origin.
	portCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"
)

// portNumber reads a port number in its one canonical form: decimal 1 to
// 65535 without sign or leading zeros ("+80", "080" and "0x50" are not
// ports: two spellings of one port would be two paths, two cookie scopes,
// two host names of one app).
func portNumber(s string) (int, bool) {
	if len(s) == 0 || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, n <= 65535
}

func badPort(p string) error {
	return errdefs.InvalidArgument("port: %q is not a port number (1 to 65535, in decimal without sign or leading zeros)", p)
}

func portParam(r *http.Request) (int, error) {
	p, ok := portNumber(r.PathValue("port"))
	if !ok {
		return 0, badPort(r.PathValue("port"))
	}
	return p, nil
}

// portPrefix returns the path prefix of the port's proxy that p is under
// (/v1/sandboxes/{sandbox}/ports/{port}/, as sent), or "" when it is under
// none.
func portPrefix(p string) string {
	rest, ok := strings.CutPrefix(p, "/v1/sandboxes/")
	if !ok {
		return ""
	}
	sb, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	rest, ok = strings.CutPrefix(rest, "ports/")
	if !ok {
		return ""
	}
	port, _, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	return "/v1/sandboxes/" + sb + "/ports/" + port + "/"
}

// cleanPortPath keeps a request under a port's proxy within that port. The
// router answers a path with dot segments ("..", ".") or doubled slashes
// with a redirect to its cleaned form, which for ".." is a path out of the
// port (the port's token route, another port, another API route): instead,
// a path whose cleaned form stays under the same port's prefix is served at
// that form (what a browser would have asked for), and one that climbs out
// is refused. Like the router, it looks at the path as sent: "%2e%2e" and
// "%2f" are no path structure to the daemon and reach the app as they are.
func cleanPortPath(r *http.Request) (*http.Request, error) {
	if r.Method == http.MethodConnect {
		return r, nil // the router does not clean these either
	}
	escaped := r.URL.EscapedPath()
	prefix := portPrefix(escaped)
	if prefix == "" {
		return r, nil
	}
	clean := cleanPath(escaped)
	if clean == escaped {
		return r, nil
	}
	if !strings.HasPrefix(clean, prefix) {
		return nil, errdefs.InvalidArgument("path %s leaves the port's path %s (it is %s once its dot segments are resolved); paths under a port stay under it", escaped, prefix, clean)
	}
	p, err := url.PathUnescape(clean)
	if err != nil {
		return nil, errdefs.InvalidArgument("path %s: %v", escaped, err)
	}
	u := *r.URL
	u.Path, u.RawPath = p, clean
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = &u
	return r2, nil
}

// cleanPath is the path the router serves p at (net/http's cleanPath).
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

func (s *Server) writePort(w http.ResponseWriter, r *http.Request, p *api.Port) {
	s.portURLs(r, p)
	writeJSON(w, http.StatusOK, p)
}

// portURLs fills p's URL (and HostURL) for the address r came to.
func (s *Server) portURLs(r *http.Request, p *api.Port) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	p.URL = scheme + "://" + r.Host + p.Path
	if d := s.cfg.PortsDomain; d != "" {
		port := ""
		if _, pt, err := net.SplitHostPort(r.Host); err == nil {
			port = ":" + pt
		}
		p.HostURL = fmt.Sprintf("%s://%d-%s.%s%s/", scheme, p.Port, p.Sandbox, d, port)
	}
}

// listPorts is GET /v1/sandboxes/{sandbox}/ports.
func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) error {
	ports, err := s.mgr.ListPorts(r.Context(), r.PathValue("sandbox"))
	if err != nil {
		return err
	}
	for i := range ports {
		s.portURLs(r, &ports[i])
	}
	writeJSON(w, http.StatusOK, api.PortList{Ports: ports})
	return nil
}

// portCall serves GET and DELETE on a port: op on the sandbox and port of
// the path.
func (s *Server) portCall(op func(ctx context.Context, ref string, port int) (*api.Port, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		port, err := portParam(r)
		if err != nil {
			return err
		}
		p, err := op(r.Context(), r.PathValue("sandbox"), port)
		if err != nil {
			return err
		}
		s.writePort(w, r, p)
		return nil
	}
}

func (s *Server) updatePort(w http.ResponseWriter, r *http.Request) error {
	if _, err := portParam(r); err != nil {
		return err
	}
	var req api.UpdatePortRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	return s.portCall(func(ctx context.Context, ref string, port int) (*api.Port, error) {
		return s.mgr.SetPortPublic(ctx, ref, port, req.Public)
	})(w, r)
}

func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request) error {
	port, err := portParam(r)
	if err != nil {
		return err
	}
	// The path below the port, as the client escaped it (the sandbox
	// segment holds no "/", so the first match is it).
	escaped := r.URL.EscapedPath()
	marker := "/ports/" + r.PathValue("port")
	rest := "/"
	if i := strings.Index(escaped, marker+"/"); i >= 0 {
		rest = escaped[i+len(marker):]
	}
	return s.proxy(w, r, r.PathValue("sandbox"), port, rest, false)
}

// hostTarget is the port and sandbox a PortsDomain host name names.
type hostTarget struct {
	ref  string
	port int
}

// portHost parses r's host as <port>-<sandbox>.<PortsDomain>; nil when it
// is not one. A label whose first part is a number but not a port in its
// canonical form (+80-…, 080-…, 99999-…) is an error: it names a port of
// no sandbox's.
func (s *Server) portHost(r *http.Request) (*hostTarget, error) {
	if s.cfg.PortsDomain == "" {
		return nil, nil
	}
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(host, "."+strings.ToLower(s.cfg.PortsDomain))
	if !ok || strings.Contains(label, ".") {
		return nil, nil
	}
	p, ref, ok := strings.Cut(label, "-")
	if !ok || strings.Trim(strings.TrimLeft(p, "+-"), "0123456789") != "" || strings.TrimLeft(p, "+-") == "" {
		return nil, nil // not a port's host name
	}
	port, ok := portNumber(p)
	if !ok {
		return nil, badPort(p)
	}
	if ref == "" {
		return nil, nil // names no sandbox: the API's
	}
	return &hostTarget{ref: ref, port: port}, nil
}

// proxyHost serves a PortsDomain host name: the whole path goes to the
// port, as sent (the app has the whole origin: there is nothing for a ".."
// to leave). A token given as ?forkbox_token= is kept in a cookie of that
// host (HttpOnly, never forwarded), so the pages and files the app loads
// next pass too.
func (s *Server) proxyHost(w http.ResponseWriter, r *http.Request) error {
	t, err := s.portHost(r)
	if err != nil {
		return err
	}
	return s.proxy(w, r, t.ref, t.port, r.URL.EscapedPath(), true)
}

// proxy forwards r to port of sandbox ref, at path rest (escaped). host
// says the request came by a PortsDomain host name (its own origin) rather
// than by the daemon's path.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, ref string, port int, rest string, host bool) error {
	token := r.Header.Get(portTokenHeader)
	fromQuery := false
	if token == "" {
		if token = r.URL.Query().Get(portTokenQuery); token != "" {
			fromQuery = true
		}
	}
	if token == "" {
		if c, err := r.Cookie(portTokenCookie); err == nil {
			token = c.Value
		}
	}
	// A key scopes the sandbox lookups that follow to its tenant; a token
	// (or a public port) is checked against the sandbox it names.
	target := ref
	if p, err := s.authenticate(r); err == nil {
		r = r.WithContext(tenant.With(r.Context(), p))
	} else if id, owner, ok := s.mgr.PortAccess(r.Context(), ref, port, token); ok {
		target = id
		r = r.WithContext(tenant.With(r.Context(), tenant.Principal{Tenant: owner, KeyID: "port-token"}))
	} else {
		w.Header().Set("WWW-Authenticate", `Bearer realm="forkbox"`)
		return errdefs.Unauthenticated("this port needs an API key (Authorization: Bearer …) or its token (%s header or %s query parameter; GET /v1/sandboxes/{sandbox}/ports/{port} gives it)", portTokenHeader, portTokenQuery)
	}
	conn, release, err := s.mgr.DialPort(r.Context(), target, port)
	if err != nil {
		return err
	}
	defer release()
	defer conn.Close()
	prefix := ""
	if !host {
		prefix = sandbox.PortPath(ref, port)
	}
	if fromQuery {
		// The pages the app links to next pass too: the token is kept in
		// a cookie of the port's host, or of the port's path on the
		// daemon's host (it never reaches the app, see dropCookie).
		path := "/"
		if !host {
			path = prefix
		}
		http.SetCookie(w, &http.Cookie{Name: portTokenCookie, Value: token, Path: path, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	}
	dialed := false
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetXForwarded()
			out := pr.Out
			out.URL.Scheme, out.URL.Host = "http", "127.0.0.1:"+strconv.Itoa(port)
			out.URL.Path, out.URL.RawPath = rest, ""
			if p, err := url.PathUnescape(rest); err == nil {
				out.URL.Path, out.URL.RawPath = p, rest
			}
			q := out.URL.Query()
			if q.Has(portTokenQuery) {
				q.Del(portTokenQuery)
				out.URL.RawQuery = q.Encode()
			}
			out.Host = r.Host
			if prefix != "" {
				out.Header.Set("X-Forwarded-Prefix", strings.TrimSuffix(prefix, "/"))
			}
			out.Header.Del("Authorization")
			out.Header.Del(portTokenHeader)
			dropCookie(out.Header, portTokenCookie)
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if dialed {
					return nil, errors.New("one connection per proxied request")
				}
				dialed = true
				return conn, nil
			},
			DisableKeepAlives:  true,
			DisableCompression: true,
		},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if host {
				return nil // its own origin: the app's headers as they are
			}
			resp.Header.Add("Content-Security-Policy", portCSP)
			cookies := resp.Header.Values("Set-Cookie")
			resp.Header.Del("Set-Cookie")
			for _, line := range cookies {
				c, err := http.ParseSetCookie(line)
				if err != nil {
					continue
				}
				c.Domain = ""
				if !strings.HasPrefix(c.Path, prefix) {
					c.Path = prefix
				}
				resp.Header.Add("Set-Cookie", c.String())
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			writeError(w, errdefs.Unavailable("port %d of sandbox %s: %v", port, ref, err))
		},
	}
	rp.ServeHTTP(w, r)
	return nil
}

// dropCookie removes the cookie name from h's Cookie headers.
func dropCookie(h http.Header, name string) {
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	h.Del("Cookie")
	for _, line := range lines {
		var keep []string
		for _, part := range strings.Split(line, ";") {
			if k, _, _ := strings.Cut(strings.TrimSpace(part), "="); k != name && strings.TrimSpace(part) != "" {
				keep = append(keep, strings.TrimSpace(part))
			}
		}
		if len(keep) > 0 {
			h.Add("Cookie", strings.Join(keep, "; "))
		}
	}
}
