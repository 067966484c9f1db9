// Package guard is the one gate in front of every HTTP route mcpvisor
// serves — the MCP endpoints, the admin API, the event stream, /metrics —
// so that each applies the same checks, in the same order, with the same
// answers:
//
//  1. DNS-rebinding protection by Host: a request that arrived on a
//     loopback address must name a loopback host (localhost, *.localhost,
//     127.0.0.0/8, ::1), else 403.
//  2. Origin: a request that carries an Origin header must come from a
//     loopback origin, an allowed one, or (on a listener beyond loopback)
//     its own; else 403. Requests without Origin (curl, SDK clients) pass.
//  3. The bearer token, if one is configured: "Authorization: Bearer
//     <token>", the scheme matched case-insensitively (RFC 9110, 11.1) and
//     the token compared in constant time; else 401 with
//     WWW-Authenticate.
//  4. With team identity (the config's "auth", Team), instead of 3: an
//     access token the issuer signed, for this route's resource, with the
//     scopes the route requires (RFC 6750, RFC 9728 challenges; team.go).
//     The request then carries the token's identity in its context. On
//     the admin routes the static token, if one is configured, is an
//     admin credential besides.
package guard

import (
	"crypto/sha256"
	"crypto/subtle"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Options configure a Guard. The zero value checks Host and Origin and
// asks for no token.
type Options struct {
	// Token, if set, is required as "Authorization: Bearer <token>";
	// requests without it, or with another, get 401.
	Token string

	// AllowedOrigins are origins ("https://app.example.com", exact match,
	// case-insensitive, a trailing slash ignored) allowed besides loopback
	// ones; "*" allows any. A request whose Origin header is present and
	// not allowed gets 403.
	AllowedOrigins []string

	// DisableHostCheck turns off the DNS-rebinding protection by Host
	// (for a reverse proxy on the same machine that passes its own Host
	// on). The Origin check stays.
	DisableHostCheck bool

	// Team, if set, is the team identity: while it holds a config, every
	// request needs an access token (see the package doc).
	Team *Team
	// Route is what this guard guards, for the token's audience, the
	// scopes and the resource metadata of its challenges.
	Route Route
}

// Guard checks requests. It is safe for concurrent use and never changes
// after New.
type Guard struct {
	token     *[sha256.Size]byte // nil: no token required
	origins   []string
	anyOrigin bool
	hostCheck bool
	team      *Team
	route     Route
}

// New returns a guard for opts.
func New(opts Options) *Guard {
	g := &Guard{hostCheck: !opts.DisableHostCheck, team: opts.Team, route: opts.Route}
	if opts.Token != "" {
		sum := sha256.Sum256([]byte(opts.Token))
		g.token = &sum
	}
	for _, o := range opts.AllowedOrigins {
		if o == "*" {
			g.anyOrigin = true
		}
		g.origins = append(g.origins, strings.TrimSuffix(o, "/"))
	}
	return g
}

// Check returns 0 if r may pass, else the HTTP status to refuse it with
// (403 or 401) and why, for the reply and the log.
func (g *Guard) Check(r *http.Request) (status int, reason string) {
	if reason := g.checkHostOrigin(r); reason != "" {
		return http.StatusForbidden, reason
	}
	if g.token != nil && !g.authorized(r) {
		return http.StatusUnauthorized, "a bearer token is required"
	}
	return 0, ""
}

// Allow checks r and, if it may not pass, writes the refusal: a plain text
// 403, or a 401 with WWW-Authenticate. It reports whether r may pass.
func (g *Guard) Allow(w http.ResponseWriter, r *http.Request) bool {
	_, status := g.Admit(w, r)
	return status == 0
}

// Admit checks r as Allow does. It returns r — with team identity, r
// carrying its token's identity — and 0, or, having written the
// refusal, nil and its status.
func (g *Guard) Admit(w http.ResponseWriter, r *http.Request) (*http.Request, int) {
	if r, ok := admitVouched(r); ok {
		return r, 0
	}
	if reason := g.checkHostOrigin(r); reason != "" {
		refuse(w, http.StatusForbidden, reason)
		return nil, http.StatusForbidden
	}
	if c := g.team.Config(); c != nil {
		return g.admitTeam(w, r, c)
	}
	if g.token != nil && !g.authorized(r) {
		refuse(w, http.StatusUnauthorized, "a bearer token is required")
		return nil, http.StatusUnauthorized
	}
	return r, 0
}

// Route is the route g guards.
func (g *Guard) Route() Route { return g.route }

// AllowPublic is Allow without the token: Host and Origin are checked
// (403), the bearer token is not. It is for what holds no secret and must
// load in a browser, which sends no Authorization header when it
// navigates to a page or loads its scripts: the dashboard's static files.
// What they show comes from routes behind Allow.
func (g *Guard) AllowPublic(w http.ResponseWriter, r *http.Request) bool {
	if reason := g.checkHostOrigin(r); reason != "" {
		refuse(w, http.StatusForbidden, reason)
		return false
	}
	return true
}

// AllowChange is Allow for a request that changes state (anything but
// GET and HEAD) on routes meant for this listener's own pages and for
// clients that send no Origin (a CLI): such a request that carries an
// Origin must be of the listener's own origin (403 otherwise). Allow lets
// every loopback origin through — browser MCP clients need that — so
// without this any page a browser has open on a local port could act
// with a simple cross-origin POST when no token is set.
func (g *Guard) AllowChange(w http.ResponseWriter, r *http.Request) bool {
	if !g.Allow(w, r) {
		return false
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	if v := r.Header["Origin"]; len(v) != 0 && !sameOrigin(v[0], r.Host) {
		refuse(w, http.StatusForbidden, "a change from another origin ("+v[0]+") than this listener's")
		return false
	}
	return true
}

// sameOrigin reports whether origin is http(s) at host.
func sameOrigin(origin, host string) bool {
	o := strings.TrimSuffix(origin, "/")
	for _, scheme := range []string{"http://", "https://"} {
		if hp, ok := strings.CutPrefix(o, scheme); ok {
			return host != "" && strings.EqualFold(hp, host)
		}
	}
	return false
}

// refuse writes a refusal: a plain text 403, or a 401 with
// WWW-Authenticate.
func refuse(w http.ResponseWriter, status int, reason string) {
	hdr := w.Header()
	if status == http.StatusUnauthorized {
		hdr["Www-Authenticate"] = []string{`Bearer realm="mcpvisor"`}
		reason = "Unauthorized: " + reason
	} else {
		reason = "Forbidden: " + reason
	}
	hdr["Content-Type"] = []string{"text/plain; charset=utf-8"}
	hdr["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, reason+"\n")
}

// Wrap returns a handler that serves next only the requests g allows.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r, status := g.Admit(w, r); status == 0 {
			next.ServeHTTP(w, r)
		}
	})
}

// authorized checks the bearer token. Both sides are hashed before the
// constant-time compare, so that neither the token's content nor its
// length shows in the time taken.
func (g *Guard) authorized(r *http.Request) bool {
	v := r.Header["Authorization"]
	if len(v) != 1 {
		return false
	}
	const scheme = "Bearer "
	a := v[0]
	if len(a) < len(scheme) || !strings.EqualFold(a[:len(scheme)], scheme) {
		return false
	}
	tok := strings.TrimSpace(a[len(scheme):])
	if tok == "" {
		return false
	}
	return g.tokenIs(tok)
}

// tokenIs reports whether tok is the static token, in constant time.
func (g *Guard) tokenIs(tok string) bool {
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], g.token[:]) == 1
}

// checkHostOrigin is the DNS-rebinding protection. It returns why r is
// refused, or "".
func (g *Guard) checkHostOrigin(r *http.Request) string {
	loopback := false
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if t, ok := a.(*net.TCPAddr); ok {
			loopback = t.IP.IsLoopback()
		}
	}
	if g.hostCheck && loopback && !isLoopbackName(hostOnly(r.Host)) {
		return "Host is not a loopback name"
	}
	if v := r.Header["Origin"]; len(v) != 0 && !g.originAllowed(v[0], r.Host, loopback) {
		return "Origin not allowed"
	}
	return ""
}

func (g *Guard) originAllowed(origin, host string, loopbackListener bool) bool {
	if g.anyOrigin {
		return true
	}
	o := strings.TrimSuffix(origin, "/")
	for _, a := range g.origins {
		if strings.EqualFold(a, o) {
			return true
		}
	}
	i := strings.Index(o, "://")
	if i < 0 {
		return false // "null" and garbage
	}
	hostport := o[i+3:]
	if isLoopbackName(hostOnly(hostport)) {
		return true
	}
	// Same origin, where Host itself is not checked.
	return !loopbackListener && host != "" && strings.EqualFold(hostport, host)
}

// hostOnly strips the port from a Host header value or an origin's
// authority, and the brackets from an IPv6 literal.
func hostOnly(hp string) string {
	if strings.HasPrefix(hp, "[") {
		if i := strings.IndexByte(hp, ']'); i > 0 {
			return hp[1:i]
		}
		return hp
	}
	if i := strings.IndexByte(hp, ':'); i >= 0 && strings.IndexByte(hp[i+1:], ':') < 0 {
		return hp[:i]
	}
	return hp
}

// isLoopbackName reports whether host names the loopback interface:
// localhost (and *.localhost, RFC 6761), 127.0.0.0/8 or ::1.
func isLoopbackName(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	const sfx = ".localhost"
	if len(host) > len(sfx) && strings.EqualFold(host[len(host)-len(sfx):], sfx) {
		return true
	}
	if host == "" || (host[0] != ':' && (host[0] < '0' || host[0] > '9')) {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// Team is the team identity g checks tokens by (nil: none).
func (g *Guard) Team() *Team { return g.team }
