package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/lazyre"
	"github.com/forkbox/forkbox/internal/sandbox"
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
// proxyPort, which also accepts a port's token).
var portProxyRE = lazyre.New(`^/v1/sandboxes/[^/]+/ports/[0-9]+/`)

const (
	portTokenHeader = "X-Forkbox-Token"
	portTokenQuery  = "forkbox_token"
	// portCSP makes what a sandbox serves a document of an opaque origin.
	portCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"
)

// keyOK reports whether r carries the daemon's API key (true when there is
// none).
func (s *Server) keyOK(r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) == 1
}

func portParam(r *http.Request) (int, error) {
	p, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || p < 1 || p > 65535 {
		return 0, errdefs.InvalidArgument("port: %q is not a port number (1 to 65535)", r.PathValue("port"))
	}
	return p, nil
}

func (s *Server) writePort(w http.ResponseWriter, r *http.Request, p *api.Port) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	p.URL = scheme + "://" + r.Host + p.Path
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) getPort(w http.ResponseWriter, r *http.Request) error {
	port, err := portParam(r)
	if err != nil {
		return err
	}
	p, err := s.mgr.Port(r.Context(), r.PathValue("sandbox"), port)
	if err != nil {
		return err
	}
	s.writePort(w, r, p)
	return nil
}

func (s *Server) updatePort(w http.ResponseWriter, r *http.Request) error {
	port, err := portParam(r)
	if err != nil {
		return err
	}
	var req api.UpdatePortRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	p, err := s.mgr.SetPortPublic(r.Context(), r.PathValue("sandbox"), port, req.Public)
	if err != nil {
		return err
	}
	s.writePort(w, r, p)
	return nil
}

func (s *Server) revokePort(w http.ResponseWriter, r *http.Request) error {
	port, err := portParam(r)
	if err != nil {
		return err
	}
	p, err := s.mgr.RevokePort(r.Context(), r.PathValue("sandbox"), port)
	if err != nil {
		return err
	}
	s.writePort(w, r, p)
	return nil
}

func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("sandbox")
	port, err := portParam(r)
	if err != nil {
		return err
	}
	token := r.Header.Get(portTokenHeader)
	if token == "" {
		token = r.URL.Query().Get(portTokenQuery)
	}
	if !s.keyOK(r) && !s.mgr.PortAccess(r.Context(), id, port, token) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="forkbox"`)
		return errdefs.Unauthenticated("this port needs the API key (Authorization: Bearer …) or its token (%s header or %s query parameter; GET /v1/sandboxes/{sandbox}/ports/{port} gives it)", portTokenHeader, portTokenQuery)
	}
	conn, release, err := s.mgr.DialPort(r.Context(), id, port)
	if err != nil {
		return err
	}
	defer release()
	defer conn.Close()
	prefix := sandbox.PortPath(id, port)
	dialed := false
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetXForwarded()
			out := pr.Out
			out.URL.Scheme, out.URL.Host = "http", "127.0.0.1:"+strconv.Itoa(port)
			// The path below the port, as the client escaped it (the
			// sandbox segment holds no "/", so the first match is it).
			escaped := r.URL.EscapedPath()
			marker := "/ports/" + r.PathValue("port")
			rest := "/"
			if i := strings.Index(escaped, marker+"/"); i >= 0 {
				rest = escaped[i+len(marker):]
			}
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
			out.Header.Set("X-Forwarded-Prefix", strings.TrimSuffix(prefix, "/"))
			out.Header.Del("Authorization")
			out.Header.Del(portTokenHeader)
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
			writeError(w, errdefs.Unavailable("port %d of sandbox %s: %v", port, id, err))
		},
	}
	rp.ServeHTTP(w, r)
	return nil
}
