package guard

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// request builds a request as if it had arrived on local (a loopback
// listener unless told otherwise).
func request(local string, hdr ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:7331/x", nil)
	addr, _ := net.ResolveTCPAddr("tcp", local)
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, addr))
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			continue
		}
		if hdr[i] == "Host" {
			r.Host = hdr[i+1]
			continue
		}
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func TestToken(t *testing.T) {
	g := New(Options{Token: "s3cret"})
	for _, c := range []struct {
		auth []string
		ok   bool
	}{
		{nil, false},
		{[]string{"Bearer s3cret"}, true},
		{[]string{"bearer s3cret"}, true},
		{[]string{"BEARER s3cret"}, true},
		{[]string{"Bearer   s3cret  "}, true},
		{[]string{"Bearer s3cret2"}, false},
		{[]string{"Bearer s3cre"}, false},
		{[]string{"Bearer "}, false},
		{[]string{"Bearer"}, false},
		{[]string{"Bearers3cret"}, false},
		{[]string{"Basic czNjcmV0"}, false},
		{[]string{"s3cret"}, false},
		{[]string{"Bearer s3cret", "Bearer s3cret"}, false}, // one Authorization, not two
	} {
		var hdr []string
		for _, a := range c.auth {
			hdr = append(hdr, "Authorization", a)
		}
		status, _ := g.Check(request("127.0.0.1:7331", hdr...))
		if ok := status == 0; ok != c.ok {
			t.Errorf("Authorization %q: status %d, want pass %v", c.auth, status, c.ok)
		}
		if !c.ok && status != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", c.auth, status)
		}
	}
	if status, _ := New(Options{}).Check(request("127.0.0.1:7331", "Authorization", "Bearer anything")); status != 0 {
		t.Errorf("no token configured: %d", status)
	}
}

func TestHostAndOrigin(t *testing.T) {
	g := New(Options{AllowedOrigins: []string{"https://app.example/"}})
	cases := []struct {
		local, host, origin string
		status              int
	}{
		{"127.0.0.1:7331", "127.0.0.1:7331", "", 0},
		{"127.0.0.1:7331", "localhost:7331", "", 0},
		{"127.0.0.1:7331", "LOCALHOST", "", 0},
		{"127.0.0.1:7331", "[::1]:7331", "", 0},
		{"127.0.0.1:7331", "127.0.0.2:80", "", 0},
		{"127.0.0.1:7331", "mcp.localhost:7331", "", 0},
		{"127.0.0.1:7331", "evil.example", "", 403},
		{"127.0.0.1:7331", "evil.example:7331", "", 403},
		{"127.0.0.1:7331", "127.0.0.1.evil.example", "", 403},
		{"127.0.0.1:7331", "localhost.evil.example:80", "", 403},
		{"127.0.0.1:7331", "127.0.0.1:7331", "http://evil.example", 403},
		{"127.0.0.1:7331", "127.0.0.1:7331", "null", 403},
		{"127.0.0.1:7331", "127.0.0.1:7331", "http://localhost:5173", 0},
		{"127.0.0.1:7331", "127.0.0.1:7331", "http://[::1]:8080", 0},
		{"127.0.0.1:7331", "127.0.0.1:7331", "https://app.example", 0},
		{"127.0.0.1:7331", "127.0.0.1:7331", "https://APP.example", 0},
		{"127.0.0.1:7331", "127.0.0.1:7331", "https://app.example:8443", 403},
		{"127.0.0.1:7331", "evil.example:7331", "http://evil.example:7331", 403}, // DNS rebinding: same origin, wrong host
		// Beyond loopback the Host is not checked, and a page may call
		// its own origin.
		{"192.0.2.1:7331", "mcp.example:7331", "", 0},
		{"192.0.2.1:7331", "mcp.example:7331", "http://mcp.example:7331", 0},
		{"192.0.2.1:7331", "mcp.example:7331", "http://evil.example", 403},
	}
	for _, c := range cases {
		if status, reason := g.Check(request(c.local, "Host", c.host, "Origin", c.origin)); status != c.status {
			t.Errorf("on %s Host %q Origin %q: %d (%s), want %d", c.local, c.host, c.origin, status, reason, c.status)
		}
	}
	open := New(Options{DisableHostCheck: true})
	if status, _ := open.Check(request("127.0.0.1:7331", "Host", "mcp.example:7331")); status != 0 {
		t.Errorf("DisableHostCheck: %d", status)
	}
	if status, _ := open.Check(request("127.0.0.1:7331", "Origin", "http://evil.example")); status != 403 {
		t.Errorf("DisableHostCheck keeps the Origin check: %d", status)
	}
	if status, _ := New(Options{AllowedOrigins: []string{"*"}}).Check(request("127.0.0.1:7331", "Origin", "http://evil.example")); status != 0 {
		t.Errorf("AllowedOrigins *: %d", status)
	}
}

// The Host and Origin checks come before the token: a rebinding page gets
// 403 whether or not it guessed the token.
func TestWrap(t *testing.T) {
	g := New(Options{Token: "t"})
	served := 0
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
	for _, c := range []struct {
		hdr    []string
		status int
		body   string
	}{
		{[]string{"Authorization", "Bearer t"}, 200, ""},
		{nil, 401, "Unauthorized: "},
		{[]string{"Host", "evil.example"}, 403, "Forbidden: Host"},
		{[]string{"Origin", "http://evil.example"}, 403, "Forbidden: Origin"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, request("127.0.0.1:7331", c.hdr...))
		if rec.Code != c.status || !strings.HasPrefix(rec.Body.String(), c.body) {
			t.Errorf("%q: %d %q, want %d %q…", c.hdr, rec.Code, rec.Body, c.status, c.body)
		}
		if c.status == 401 && rec.Header().Get("WWW-Authenticate") != `Bearer realm="mcpvisor"` {
			t.Errorf("401 with WWW-Authenticate %q", rec.Header().Get("WWW-Authenticate"))
		}
	}
	if served != 1 {
		t.Errorf("served %d requests, want 1", served)
	}
}

// AllowPublic checks Host and Origin as Allow does, and never the token:
// a browser's navigation to the dashboard loads without one, a
// rebinding Host or a foreign Origin is refused as on any route.
func TestAllowPublic(t *testing.T) {
	g := New(Options{Token: "s3cret"})
	for _, c := range []struct {
		host, origin string
		status       int
	}{
		{"127.0.0.1:7331", "", 200},
		{"localhost:7331", "http://localhost:7331", 200},
		{"evil.example", "", 403},
		{"127.0.0.1:7331", "https://evil.example", 403},
	} {
		w := httptest.NewRecorder()
		ok := g.AllowPublic(w, request("127.0.0.1:7331", "Host", c.host, "Origin", c.origin))
		if ok != (c.status == 200) || (!ok && w.Code != c.status) {
			t.Errorf("Host %q Origin %q: allowed %v, status %d, want %d", c.host, c.origin, ok, w.Code, c.status)
		}
		if !ok && !strings.HasPrefix(w.Body.String(), "Forbidden: ") {
			t.Errorf("Host %q Origin %q: body %q", c.host, c.origin, w.Body.String())
		}
		w = httptest.NewRecorder()
		if g.Allow(w, request("127.0.0.1:7331", "Host", c.host, "Origin", c.origin)) || (c.status == 200 && w.Code != 401) {
			t.Errorf("Host %q Origin %q: Allow without the token passed or answered %d", c.host, c.origin, w.Code)
		}
	}
}

// AllowChange lets a change (POST) through only from the listener's own
// origin or with no Origin; another loopback origin, which Allow passes,
// is refused for it, and reads (GET) are as Allow says.
func TestAllowChange(t *testing.T) {
	g := New(Options{})
	for _, c := range []struct {
		method, host, origin string
		status               int
	}{
		{"POST", "127.0.0.1:7331", "", 200},
		{"POST", "127.0.0.1:7331", "http://127.0.0.1:7331", 200},
		{"POST", "localhost:7331", "http://localhost:7331/", 200},
		{"POST", "127.0.0.1:7331", "http://localhost:5173", 403},
		{"POST", "127.0.0.1:7331", "http://127.0.0.1:7332", 403},
		{"POST", "127.0.0.1:7331", "null", 403},
		{"GET", "127.0.0.1:7331", "http://localhost:5173", 200},
		{"POST", "evil.example", "", 403},
	} {
		r := request("127.0.0.1:7331", "Host", c.host, "Origin", c.origin)
		r.Method = c.method
		w := httptest.NewRecorder()
		ok := g.AllowChange(w, r)
		if ok != (c.status == 200) || (!ok && w.Code != c.status) {
			t.Errorf("%s Host %q Origin %q: allowed %v, status %d, want %d", c.method, c.host, c.origin, ok, w.Code, c.status)
		}
	}
}
