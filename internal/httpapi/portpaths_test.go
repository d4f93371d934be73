package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
)

// Port paths and host names (ports.go), through the daemon's own
// http.Server with raw requests (a client library would clean the paths).
// Before: "+80" and "00008000" were ports 80 and 8000, and a ".." under a
// port was a 307 out of it.

func TestEdgePortNumbersAreCanonical(t *testing.T) {
	e := newEdgeServer(t, Config{PortsDomain: "ports.test"}, nil)
	do := func(method, host, path string, key bool) (int, api.ErrorBody) {
		t.Helper()
		c := e.dial(t)
		a := ""
		if key {
			a = "Authorization: Bearer " + edgeKey + "\r\n"
		}
		c.write(fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n%sContent-Length: 0\r\n\r\n", method, path, host, a))
		resp, b := c.mustResponse()
		var eb api.ErrorBody
		if resp.StatusCode >= 400 {
			eb = errorOf(t, b)
		}
		return resp.StatusCode, eb
	}
	for _, p := range []string{"+80", "00008000", "080", "0", "65536", "99999", "-1", "0x50", "8000x", "1e3", "%2B80"} {
		for _, route := range []struct{ method, path string }{
			{"GET", "/v1/sandboxes/sb/ports/" + p + "/"},
			{"POST", "/v1/sandboxes/sb/ports/" + p + "/app/x"},
			{"GET", "/v1/sandboxes/sb/ports/" + p},
			{"PUT", "/v1/sandboxes/sb/ports/" + p},
			{"DELETE", "/v1/sandboxes/sb/ports/" + p},
		} {
			code, eb := do(route.method, "x", route.path, true)
			if code != 400 || !strings.Contains(eb.Message, "is not a port number") {
				t.Errorf("%s %s: %d %+v", route.method, route.path, code, eb)
			}
		}
		// Without a key: the API's 401, or the 400 (never the proxy).
		if code, eb := do("GET", "x", "/v1/sandboxes/sb/ports/"+p+"/", false); code != 401 && code != 400 {
			t.Errorf("no key, port %s: %d %+v", p, code, eb)
		}
	}
	// The canonical form reaches the sandbox lookup.
	if code, eb := do("GET", "x", "/v1/sandboxes/sb/ports/8000/", true); code != 404 {
		t.Errorf("port 8000: %d %+v", code, eb)
	}

	// The host-name form.
	for _, h := range []string{"+80-sb.ports.test", "00008000-sb.ports.test", "080-sb.ports.test", "0-sb.ports.test", "65536-sb.ports.test"} {
		if code, eb := do("GET", h, "/", true); code != 400 {
			t.Errorf("host %s: %d %+v", h, code, eb)
		}
	}
	if code, eb := do("GET", "8000-sb.ports.test:80", "/", true); code != 404 {
		t.Errorf("host 8000-sb: %d %+v", code, eb)
	}
	// A name under the domain that is no port's is the API's, as before.
	for _, h := range []string{"www.ports.test", "x-sb.ports.test", "8000-.ports.test"} {
		if code, _ := do("GET", h, "/healthz", false); code != 200 {
			t.Errorf("%s/healthz: %d", h, code)
		}
	}
}

func TestEdgeDotSegmentsStayUnderTheirPort(t *testing.T) {
	e := newEdgeServer(t, Config{}, nil)
	for _, tc := range []struct {
		path string
		key  bool
		want int
	}{
		{"/v1/sandboxes/sb/ports/8000/../../../v1/keys", false, 400},
		{"/v1/sandboxes/sb/ports/8000/../../../v1/keys", true, 400},
		{"/v1/sandboxes/sb/ports/8000/..", true, 400},
		{"/v1/sandboxes/sb/ports/8000/.", true, 400},
		{"/v1/sandboxes/sb/ports/8000/../9000/", true, 400},
		{"/v1/sandboxes/../ports/8000/x", true, 400},
		// Percent-encoded dots and slashes are no path structure to the
		// router: they reach the app as sent (here: no such sandbox).
		{"/v1/sandboxes/sb/ports/8000/%2e%2e/%2E%2E/files?path=/etc/passwd", true, 404},
		{"/v1/sandboxes/sb/ports/8000/..%2F..%2F..%2F9000/", true, 404},
		// Within the port: served at the cleaned path (the sandbox does
		// not exist here: 404 with the key, 401 without).
		{"/v1/sandboxes/sb/ports/8000/a/../b", true, 404},
		{"/v1/sandboxes/sb/ports/8000/a/./b//c", false, 401},
	} {
		c := e.dial(t)
		a := ""
		if tc.key {
			a = "Authorization: Bearer " + edgeKey + "\r\n"
		}
		c.write(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", tc.path, a))
		resp, b := c.mustResponse()
		if resp.StatusCode != tc.want || resp.Header.Get("Location") != "" {
			t.Errorf("%s (key %v): %d (Location %q) %s, want %d", tc.path, tc.key, resp.StatusCode, resp.Header.Get("Location"), b, tc.want)
		}
		if tc.want == 400 && !strings.Contains(errorOf(t, b).Message, "leaves the port's path") {
			t.Errorf("%s: %s", tc.path, b)
		}
	}
	// Other paths keep the router's own cleaning.
	c := e.dial(t)
	c.write("GET /v1/sandboxes/../healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + edgeKey + "\r\n\r\n")
	if resp, _ := c.mustResponse(); resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "/v1/healthz" {
		t.Errorf("/v1/sandboxes/../healthz: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestPortNumber(t *testing.T) {
	for s, want := range map[string]int{"1": 1, "80": 80, "8000": 8000, "65535": 65535} {
		if n, ok := portNumber(s); !ok || n != want {
			t.Errorf("portNumber(%q) = %d, %v", s, n, ok)
		}
	}
	for _, s := range []string{"", "0", "00", "080", "+80", "-80", " 80", "80 ", "65536", "100000", "8_000", "0x50", "٨٠"} {
		if n, ok := portNumber(s); ok {
			t.Errorf("portNumber(%q) = %d, want refused", s, n)
		}
	}
}
