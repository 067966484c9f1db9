package guard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// Dashboard sessions: with team identity, the dashboard logs in in the
// browser (authorization code with PKCE against the issuer, package
// dashboard) and keeps the login as a cookie. The cookie holds an opaque
// random session id, never the token; the id maps, here and nowhere
// else, to the identity the token verified as and the token's expiry.
// The guard accepts the cookie on the admin routes only (never on an MCP
// endpoint), and a request that changes state with it must come from the
// public URL's own origin.

// Cookie names: with an https public URL the cookie is Secure and takes
// the __Host- prefix (no Domain, Path=/, Secure: a sibling host cannot
// set or shadow it).
const (
	SessionCookie       = "mcpvisor-session"
	SecureSessionCookie = "__Host-mcpvisor-session"
)

// DefaultMaxSessions bounds the dashboard sessions held at once.
const DefaultMaxSessions = 256

// MaxSessionLifetime bounds a session whose token states no expiry.
const MaxSessionLifetime = 12 * time.Hour

// Sessions are the dashboard's logged-in sessions, bounded in number,
// each ending at its token's expiry. Safe for concurrent use.
type Sessions struct {
	mu  sync.Mutex
	max int
	now func() time.Time
	// by the SHA-256 of the session id: the ids themselves are kept
	// only in the browsers' cookies.
	m map[[sha256.Size]byte]session
}

type session struct {
	id      *identity.Identity
	expires time.Time
}

// NewSessions returns a session store that holds at most max sessions
// (DefaultMaxSessions if max <= 0).
func NewSessions(max int) *Sessions {
	if max <= 0 {
		max = DefaultMaxSessions
	}
	return &Sessions{max: max, now: time.Now, m: map[[sha256.Size]byte]session{}}
}

// Create starts a session for id until expires (the token's expiry; a
// zero or later-than-MaxSessionLifetime one is cut to that) and returns
// its opaque id. At the bound, expired sessions go first, then the one
// nearest its end.
func (s *Sessions) Create(id *identity.Identity, expires time.Time) (string, time.Time) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	sid := base64.RawURLEncoding.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if limit := now.Add(MaxSessionLifetime); expires.IsZero() || expires.After(limit) {
		expires = limit
	}
	if len(s.m) >= s.max {
		s.pruneLocked(now)
	}
	for len(s.m) >= s.max {
		var oldest [sha256.Size]byte
		var at time.Time
		first := true
		for k, v := range s.m {
			if first || v.expires.Before(at) {
				oldest, at, first = k, v.expires, false
			}
		}
		delete(s.m, oldest)
	}
	s.m[sha256.Sum256([]byte(sid))] = session{id: id, expires: expires}
	return sid, expires
}

// Lookup returns the identity of the session sid, or false if there is
// none or it has ended (then it is dropped).
func (s *Sessions) Lookup(sid string) (*identity.Identity, bool) {
	if sid == "" {
		return nil, false
	}
	k := sha256.Sum256([]byte(sid))
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[k]
	if !ok {
		return nil, false
	}
	if !s.now().Before(v.expires) {
		delete(s.m, k)
		return nil, false
	}
	return v.id, true
}

// Delete ends the session sid, if any.
func (s *Sessions) Delete(sid string) {
	k := sha256.Sum256([]byte(sid))
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}

// Clear ends every session.
func (s *Sessions) Clear() {
	s.mu.Lock()
	clear(s.m)
	s.mu.Unlock()
}

// Len is how many sessions are held (ended ones not yet dropped too).
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *Sessions) pruneLocked(now time.Time) {
	for k, v := range s.m {
		if !now.Before(v.expires) {
			delete(s.m, k)
		}
	}
}

// Sessions are the dashboard sessions of t, one store for serve's life.
// A Set that changes the issuer, the public URL or the admin scope (or
// turns team identity off) ends them all.
func (t *Team) Sessions() *Sessions {
	t.sessOnce.Do(func() { t.sess = NewSessions(t.MaxSessions) })
	return t.sess
}

// Secure reports whether the session cookie under c is Secure: the
// public URL is https.
func (c *TeamConfig) Secure() bool {
	return strings.HasPrefix(strings.ToLower(c.PublicURL), "https://")
}

// CookieName is the session cookie's name under c.
func (c *TeamConfig) CookieName() string {
	if c.Secure() {
		return SecureSessionCookie
	}
	return SessionCookie
}

// SessionCookieFor is the cookie of session sid, until expires, under c:
// HttpOnly, SameSite=Strict, Path=/, Secure with an https public URL.
func (c *TeamConfig) SessionCookieFor(sid string, expires time.Time, now time.Time) *http.Cookie {
	return &http.Cookie{Name: c.CookieName(), Value: sid, Path: "/", Expires: expires,
		MaxAge: max(1, int(expires.Sub(now).Seconds())), HttpOnly: true, Secure: c.Secure(), SameSite: http.SameSiteStrictMode}
}

// ClearCookie is the cookie that removes the session cookie under c.
func (c *TeamConfig) ClearCookie() *http.Cookie {
	return &http.Cookie{Name: c.CookieName(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: c.Secure(), SameSite: http.SameSiteStrictMode}
}

// SessionID is the session id r's cookie carries under c, or "".
func (c *TeamConfig) SessionID(r *http.Request) string {
	ck, err := r.Cookie(c.CookieName())
	if err != nil {
		return ""
	}
	return ck.Value
}

// Origin is the public URL's origin (scheme://host[:port]).
func (c *TeamConfig) Origin() string {
	u := c.PublicURL
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.IndexByte(u[i+3:], '/'); j >= 0 {
			return u[:i+3+j]
		}
	}
	return u
}

// admitSession admits r by its session cookie on an admin route, or
// returns ok false when r carries none that is live (the caller then
// answers as for no token). A change (not GET or HEAD) must carry the
// public URL's own Origin: SameSite=Strict aside, a cookie is sent by a
// browser without the page asking, so no other origin's page may act
// with it.
func (g *Guard) admitSession(w http.ResponseWriter, r *http.Request, c *TeamConfig) (*http.Request, int, bool) {
	sid := c.SessionID(r)
	if sid == "" {
		return nil, 0, false
	}
	id, ok := g.team.Sessions().Lookup(sid)
	if !ok {
		return nil, 0, false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		o := r.Header["Origin"]
		if len(o) != 1 || !strings.EqualFold(strings.TrimSuffix(o[0], "/"), c.Origin()) {
			refuse(w, http.StatusForbidden, "a change with the dashboard's session must come from "+c.Origin())
			return nil, http.StatusForbidden, true
		}
	}
	if !id.HasScopes(c.NeededScopes(g.route)) {
		refuse(w, http.StatusForbidden, "the session's token lacks the admin scope")
		return nil, http.StatusForbidden, true
	}
	return r.WithContext(identity.NewContext(r.Context(), id)), 0, true
}
