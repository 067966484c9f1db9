package guard

import (
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/mcpvisor/mcpvisor/internal/authn"
	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// Team is the team identity every route's guard checks tokens by (the
// config's "auth"): one per serve, its settings swapped whole at a
// reload. With none set, the guards check as they did before: the
// loopback rules and the optional static token.
type Team struct {
	cur atomic.Pointer[TeamConfig]

	// MaxSessions bounds the dashboard's sessions (0:
	// DefaultMaxSessions); set before the first use.
	MaxSessions int
	sessOnce    sync.Once
	sess        *Sessions
}

// TeamConfig is one config's team identity. It never changes once set.
type TeamConfig struct {
	// Verifier verifies access tokens (the issuer's JWTs, or opaque ones
	// by introspection).
	Verifier *authn.Verifier
	// PublicURL is the deployment's base URL, no trailing slash: every
	// resource identifier and metadata URL is built from it, never from
	// a request's Host.
	PublicURL string
	// Issuer is the authorization server, for the resource metadata.
	Issuer string
	// Scopes are required on every MCP endpoint; ServerScopes, besides,
	// on a server's own.
	Scopes       []string
	ServerScopes map[string][]string
	// AdminScope is required on the admin routes.
	AdminScope string
	// Audiences, when set, are accepted on every route; nil means each
	// route accepts only a token whose audience is the route's own
	// public URL (RFC 8707: a token for one endpoint is not one for
	// another).
	Audiences []string
	// DashboardClientID is the issuer's public client the dashboard logs
	// in with ("": the dashboard has no login of its own).
	DashboardClientID string
}

// Set makes c the team identity in force (nil: none) and returns the one
// it replaces, whose Verifier the caller closes. The dashboard's
// sessions end when the issuer, the public URL or the admin scope
// change: they were verified under the former.
func (t *Team) Set(c *TeamConfig) *TeamConfig {
	old := t.cur.Swap(c)
	if old != nil && (c == nil || c.Issuer != old.Issuer || c.PublicURL != old.PublicURL || c.AdminScope != old.AdminScope) {
		t.Sessions().Clear()
	}
	return old
}

// Config is the team identity in force, or nil.
func (t *Team) Config() *TeamConfig {
	if t == nil {
		return nil
	}
	return t.cur.Load()
}

// Route is what a guard guards: an MCP endpoint (Path "/mcp", or a
// server's "/servers/NAME/mcp" with Server set) or the admin routes
// (Admin: the API, /metrics, the dashboard's data, anything else).
type Route struct {
	Path   string
	Server string
	Admin  bool
}

// Resource is the route's public URL under c: its resource identifier.
func (c *TeamConfig) Resource(rt Route) string {
	if rt.Admin || rt.Path == "" {
		return c.PublicURL
	}
	return c.PublicURL + rt.Path
}

// MetadataURL is the URL of the route's protected resource metadata.
func (c *TeamConfig) MetadataURL(rt Route) string {
	p := rt.Path
	if rt.Admin {
		p = ""
	}
	return c.PublicURL + authn.MetadataPath(p)
}

// NeededScopes is every scope the route requires.
func (c *TeamConfig) NeededScopes(rt Route) []string {
	if rt.Admin {
		return []string{c.AdminScope}
	}
	need := slices.Clone(c.Scopes)
	for _, s := range c.ServerScopes[rt.Server] {
		if !slices.Contains(need, s) {
			need = append(need, s)
		}
	}
	return need
}

// ServerScopesNeeded is every scope a call of server needs through
// /mcp: the endpoint's and the server's own.
func (c *TeamConfig) ServerScopesNeeded(server string) []string {
	return c.NeededScopes(Route{Path: "/mcp", Server: server})
}

// admitTeam checks r's token under c for rt. It returns r carrying the
// identity, or writes the refusal and returns its status.
func (g *Guard) admitTeam(w http.ResponseWriter, r *http.Request, c *TeamConfig) (*http.Request, int) {
	rt := g.route
	need := c.NeededScopes(rt)
	prm := c.MetadataURL(rt)
	tok, err := authn.Extract(r)
	if err != nil {
		var ae *authn.Error
		if errors.As(err, &ae) {
			ch := ae.Challenge(prm, need)
			ch.Write(w)
			return nil, ch.Status
		}
		ch := &authn.Challenge{Status: http.StatusBadRequest, Error: authn.CodeInvalidRequest, Description: "malformed credentials", ResourceMetadata: prm}
		ch.Write(w)
		return nil, http.StatusBadRequest
	}
	if tok == "" && rt.Admin {
		if r, status, ok := g.admitSession(w, r, c); ok {
			return r, status
		}
	}
	if tok == "" {
		(&authn.Challenge{Status: http.StatusUnauthorized, ResourceMetadata: prm, Scopes: need}).Write(w)
		return nil, http.StatusUnauthorized
	}
	if rt.Admin && g.token != nil && g.tokenIs(tok) {
		// The static token: an explicit admin credential, and only that.
		return r.WithContext(identity.NewContext(r.Context(), staticAdmin)), 0
	}
	id, err := c.Verifier.Verify(r.Context(), tok)
	if err != nil {
		var ae *authn.Error
		if !errors.As(err, &ae) {
			ae = &authn.Error{Code: authn.CodeInvalidToken, Description: "the token could not be verified"}
		}
		ch := ae.Challenge(prm, need)
		ch.Write(w)
		return nil, ch.Status
	}
	if c.Audiences == nil && !audienceHas(id.Claims["aud"], c.Resource(rt)) {
		ch := &authn.Challenge{Status: http.StatusUnauthorized, Error: authn.CodeInvalidToken,
			Description: "the token's audience is not this endpoint", ResourceMetadata: prm, Scopes: need}
		ch.Write(w)
		return nil, ch.Status
	}
	if !id.HasScopes(need) {
		ch := &authn.Challenge{Status: http.StatusForbidden, Error: authn.CodeInsufficientScope,
			Description: "the token lacks a scope this endpoint requires", ResourceMetadata: prm, Scopes: need}
		ch.Write(w)
		return nil, ch.Status
	}
	return r.WithContext(identity.NewContext(r.Context(), id)), 0
}

// staticAdmin is the identity of the configured static token.
var staticAdmin = (&identity.Identity{Kind: identity.Static, Issuer: "mcpvisor", Subject: "static-token", UID: -1}).Finish()

// audienceHas reports whether aud (a claim: a string or a list) holds
// want, exactly or but for one trailing slash.
func audienceHas(aud any, want string) bool {
	match := func(a string) bool {
		return a == want || a == want+"/" || a+"/" == want
	}
	switch v := aud.(type) {
	case string:
		return match(v)
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok && match(s) {
				return true
			}
		}
	case []string:
		return slices.ContainsFunc(v, match)
	}
	return false
}

// AudiencesFor is every audience a verifier under publicURL accepts by
// default: the base (admin) URL, /mcp and each server's endpoint.
func AudiencesFor(publicURL string, servers []string) []string {
	out := []string{publicURL, publicURL + "/mcp"}
	for _, s := range servers {
		out = append(out, publicURL+"/servers/"+s+"/mcp")
	}
	return out
}

// AudienceHas reports whether aud (an "aud" claim: a string or a list)
// holds want, exactly or but for one trailing slash.
func AudienceHas(aud any, want string) bool { return audienceHas(aud, want) }

// ScopeChallenge is the WWW-Authenticate value of a 403 for a request
// of g's route that needs scopes the token lacks: every scope needed —
// the route's own and those given — in one challenge, with the route's
// resource metadata. Without team identity it names the scopes alone.
func (g *Guard) ScopeChallenge(scopes []string) string {
	c := g.team.Config()
	ch := &authn.Challenge{Status: http.StatusForbidden, Error: authn.CodeInsufficientScope,
		Description: "the token lacks a scope this call requires", Scopes: scopes}
	if c != nil {
		need := c.NeededScopes(g.route)
		for _, s := range scopes {
			if !slices.Contains(need, s) {
				need = append(need, s)
			}
		}
		ch.Scopes, ch.ResourceMetadata = need, c.MetadataURL(g.route)
	}
	return ch.Header()
}
