package guard

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

func adminIdentity(sub string, scopes ...string) *identity.Identity {
	return (&identity.Identity{Kind: identity.Token, Issuer: "https://issuer.test", Subject: sub, Scopes: scopes}).Finish()
}

func TestSessionsBounded(t *testing.T) {
	s := NewSessions(3)
	base := time.Now()
	var ids []string
	for i := range 5 {
		sid, _ := s.Create(adminIdentity(fmt.Sprint("u", i)), base.Add(time.Duration(i+1)*time.Minute))
		ids = append(ids, sid)
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("held %d sessions, want the bound 3", n)
	}
	// The two nearest their end went first.
	for i, sid := range ids {
		_, ok := s.Lookup(sid)
		if want := i >= 2; ok != want {
			t.Errorf("session %d live = %v, want %v", i, ok, want)
		}
	}
}

func TestSessionsExpireAtTokenExpiry(t *testing.T) {
	s := NewSessions(0)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	sid, exp := s.Create(adminIdentity("alice"), now.Add(time.Minute))
	if !exp.Equal(now.Add(time.Minute)) {
		t.Fatalf("session ends %v, want the token's expiry", exp)
	}
	if id, ok := s.Lookup(sid); !ok || id.Subject != "alice" {
		t.Fatalf("fresh session not found: %v %v", id, ok)
	}
	now = now.Add(time.Minute)
	if _, ok := s.Lookup(sid); ok {
		t.Fatal("a session outlived its token's expiry")
	}
	if s.Len() != 0 {
		t.Fatal("an ended session was kept")
	}
	// No expiry stated: bounded all the same.
	_, exp = s.Create(adminIdentity("bob"), time.Time{})
	if !exp.Equal(now.Add(MaxSessionLifetime)) {
		t.Fatalf("session without a token expiry ends %v, want %v", exp, now.Add(MaxSessionLifetime))
	}
	if _, ok := s.Lookup("not-a-session"); ok {
		t.Fatal("an unknown id was accepted")
	}
	if _, ok := s.Lookup(""); ok {
		t.Fatal("an empty id was accepted")
	}
}

func TestSessionsConcurrent(t *testing.T) {
	s := NewSessions(8)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				sid, _ := s.Create(adminIdentity(fmt.Sprint(i, j)), time.Now().Add(time.Hour))
				s.Lookup(sid)
				if j%3 == 0 {
					s.Delete(sid)
				}
			}
		}()
	}
	wg.Wait()
	if s.Len() > 8 {
		t.Fatalf("held %d sessions past the bound 8", s.Len())
	}
}

func TestSessionCookieAttributes(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		url, name string
		secure    bool
	}{
		{"https://mcp.example.com", SecureSessionCookie, true},
		{"http://127.0.0.1:7331", SessionCookie, false},
	} {
		tc := &TeamConfig{PublicURL: c.url}
		ck := tc.SessionCookieFor("sid", now.Add(time.Hour), now)
		line := ck.String()
		for _, want := range []string{c.name + "=sid", "HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=3600"} {
			if !strings.Contains(line, want) {
				t.Errorf("%s: cookie %q lacks %q", c.url, line, want)
			}
		}
		if strings.Contains(line, "Secure") != c.secure {
			t.Errorf("%s: cookie %q: Secure should be %v", c.url, line, c.secure)
		}
		if strings.Contains(line, "Domain") {
			t.Errorf("%s: cookie %q has a Domain", c.url, line)
		}
		clr := tc.ClearCookie().String()
		if !strings.Contains(clr, "Max-Age=0") || !strings.Contains(clr, c.name+"=;") {
			t.Errorf("%s: clearing cookie %q does not remove it", c.url, clr)
		}
	}
}

// teamGuard is a guard for rt under a team identity at publicURL, with
// its session store.
func teamGuard(publicURL string, rt Route) (*Guard, *Team, *TeamConfig) {
	team := &Team{}
	tc := &TeamConfig{PublicURL: publicURL, Issuer: "https://issuer.test", AdminScope: "mcpvisor:admin"}
	team.Set(tc)
	return New(Options{Team: team, Route: rt}), team, tc
}

func TestSessionCookieAdminRoutesOnly(t *testing.T) {
	const pub = "http://127.0.0.1:7331"
	admin, team, tc := teamGuard(pub, Route{Admin: true})
	mcp := New(Options{Team: team, Route: Route{Path: "/mcp"}})
	srv := New(Options{Team: team, Route: Route{Path: "/servers/a/mcp", Server: "a"}})
	sid, exp := team.Sessions().Create(adminIdentity("alice", "mcpvisor:admin"), time.Now().Add(time.Hour))
	withCookie := func(method string, hdr ...string) *http.Request {
		r := request("127.0.0.1:7331", hdr...)
		r.Method = method
		r.AddCookie(tc.SessionCookieFor(sid, exp, time.Now()))
		return r
	}

	w := httptest.NewRecorder()
	r, status := admin.Admit(w, withCookie(http.MethodGet))
	if status != 0 {
		t.Fatalf("admin GET with the session cookie: %d %s", status, w.Body)
	}
	if id := identity.FromContext(r.Context()); id == nil || id.Subject != "alice" {
		t.Fatalf("admitted request carries identity %v, want alice", id)
	}
	for name, g := range map[string]*Guard{"/mcp": mcp, "/servers/a/mcp": srv} {
		w := httptest.NewRecorder()
		if _, status := g.Admit(w, withCookie(http.MethodPost, "Origin", pub)); status != http.StatusUnauthorized {
			t.Errorf("%s with only the session cookie: %d, want 401", name, status)
		}
	}
	// Without the cookie, or with a forged one: 401 as for no token.
	w = httptest.NewRecorder()
	r = request("127.0.0.1:7331")
	r.AddCookie(&http.Cookie{Name: SessionCookie, Value: "forged"})
	if _, status := admin.Admit(w, r); status != http.StatusUnauthorized {
		t.Errorf("forged session cookie: %d, want 401", status)
	}
	// Logout ends it.
	team.Sessions().Delete(sid)
	w = httptest.NewRecorder()
	if _, status := admin.Admit(w, withCookie(http.MethodGet)); status != http.StatusUnauthorized {
		t.Errorf("after logout: %d, want 401", status)
	}
}

func TestSessionChangeNeedsOwnOrigin(t *testing.T) {
	const pub = "http://127.0.0.1:7331"
	admin, team, tc := teamGuard(pub, Route{Admin: true})
	sid, exp := team.Sessions().Create(adminIdentity("alice", "mcpvisor:admin"), time.Now().Add(time.Hour))
	for _, c := range []struct {
		method, origin string
		want           int
	}{
		{http.MethodPost, pub, 0},
		{http.MethodPost, pub + "/", 0},
		{http.MethodPost, "", http.StatusForbidden},
		{http.MethodPost, "http://127.0.0.1:9999", http.StatusForbidden},
		{http.MethodDelete, "http://localhost:7331", http.StatusForbidden},
		{http.MethodGet, "", 0},
	} {
		r := request("127.0.0.1:7331", "Origin", c.origin)
		r.Method = c.method
		r.AddCookie(tc.SessionCookieFor(sid, exp, time.Now()))
		w := httptest.NewRecorder()
		if _, status := admin.Admit(w, r); status != c.want {
			t.Errorf("%s Origin %q: %d, want %d (%s)", c.method, c.origin, status, c.want, w.Body)
		}
	}
}

func TestSessionNeedsAdminScope(t *testing.T) {
	admin, team, tc := teamGuard("http://127.0.0.1:7331", Route{Admin: true})
	sid, exp := team.Sessions().Create(adminIdentity("bob", "other"), time.Now().Add(time.Hour))
	r := request("127.0.0.1:7331")
	r.AddCookie(tc.SessionCookieFor(sid, exp, time.Now()))
	w := httptest.NewRecorder()
	if _, status := admin.Admit(w, r); status != http.StatusForbidden {
		t.Fatalf("session without the admin scope: %d, want 403", status)
	}
}

func TestTeamSetEndsSessionsOnIssuerChange(t *testing.T) {
	_, team, tc := teamGuard("http://127.0.0.1:7331", Route{Admin: true})
	sid, _ := team.Sessions().Create(adminIdentity("alice"), time.Now().Add(time.Hour))
	same := *tc
	team.Set(&same) // a reload that changed nothing of the sessions' ground
	if _, ok := team.Sessions().Lookup(sid); !ok {
		t.Fatal("a reload with the same issuer ended the sessions")
	}
	other := *tc
	other.Issuer = "https://other.test"
	team.Set(&other)
	if _, ok := team.Sessions().Lookup(sid); ok {
		t.Fatal("a session outlived a change of issuer")
	}
	sid, _ = team.Sessions().Create(adminIdentity("alice"), time.Now().Add(time.Hour))
	team.Set(nil)
	if _, ok := team.Sessions().Lookup(sid); ok {
		t.Fatal("a session outlived team identity")
	}
}
