package oauthclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// protectedResource is an RFC 9728 document.
type protectedResource struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
}

// asMetadata is an RFC 8414 (or OpenID Connect discovery) document.
type asMetadata struct {
	Issuer                            string   `json:"issuer"`
	AuthorizationEndpoint             string   `json:"authorization_endpoint"`
	TokenEndpoint                     string   `json:"token_endpoint"`
	RegistrationEndpoint              string   `json:"registration_endpoint"`
	RevocationEndpoint                string   `json:"revocation_endpoint"`
	ScopesSupported                   []string `json:"scopes_supported"`
	CodeChallengeMethodsSupported     []string `json:"code_challenge_methods_supported"`
	TokenEndpointAuthMethodsSupported []string `json:"token_endpoint_auth_methods_supported"`
	TokenEndpointAuthSigningAlgs      []string `json:"token_endpoint_auth_signing_alg_values_supported"`
	GrantTypesSupported               []string `json:"grant_types_supported"`
	IssParameterSupported             bool     `json:"authorization_response_iss_parameter_supported"`
	CIMDSupported                     bool     `json:"client_id_metadata_document_supported"`

	fallback bool // no document: the 2025-03-26 default endpoints
}

// discovery is what a login or a client credentials fetch starts from.
type discovery struct {
	resource  string   // the resource parameter: the PRM's resource verbatim, else the configured URL
	prmScopes []string // PRM scopes_supported
	servers   []string // PRM authorization_servers (nil without PRM)
	issuer    string
	meta      *asMetadata
}

// discoverPRM finds the protected resource metadata: the challenge's
// resource_metadata URL first, then the path-suffixed well-known URL, then
// the root one. It answers nil, nil when there is none (a 2025-03-26 server).
func (g *Grant) discoverPRM(ctx context.Context, fromChallenge string) (*protectedResource, error) {
	ru, err := url.Parse(g.s.Resource)
	if err != nil || ru.Host == "" || (ru.Scheme != "https" && ru.Scheme != "http") {
		return nil, fmt.Errorf("server URL %q is not an http(s) URL", g.s.Resource)
	}
	origin := ru.Scheme + "://" + ru.Host
	var candidates []string
	if fromChallenge != "" {
		candidates = append(candidates, fromChallenge)
	}
	if p := strings.TrimSuffix(ru.EscapedPath(), "/"); p != "" {
		candidates = append(candidates, origin+"/.well-known/oauth-protected-resource"+p)
	}
	candidates = append(candidates, origin+"/.well-known/oauth-protected-resource")
	seen := map[string]bool{}
	for _, c := range candidates {
		if seen[c] {
			continue
		}
		seen[c] = true
		if err := checkEndpoint(c); err != nil {
			return nil, fmt.Errorf("protected resource metadata URL: %w", err)
		}
		if err := g.checkNamed(c); err != nil {
			return nil, fmt.Errorf("protected resource metadata URL: %w", err)
		}
		var prm protectedResource
		err := g.getJSON(ctx, c, &prm)
		var fe *fetchError
		if errors.As(err, &fe) && fe.notFound() {
			g.log.Debug("oauth: no protected resource metadata", "url", c, "status", fe.status, "notJSON", fe.notJSON)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("protected resource metadata: %w", err)
		}
		if !resourceMatches(prm.Resource, g.s.Resource) {
			return nil, fmt.Errorf("protected resource metadata at %s names another resource (%q, not %q): refusing it",
				c, sanitize(prm.Resource, 200), g.s.Resource)
		}
		if len(prm.AuthorizationServers) == 0 {
			return nil, fmt.Errorf("protected resource metadata at %s names no authorization server", c)
		}
		return &prm, nil
	}
	return nil, nil
}

// resourceMatches applies RFC 9728 §3.3 to MCP: the document's resource is
// the server URL itself or a prefix of it on a path boundary (the origin
// for root metadata).
func resourceMatches(prmResource, configured string) bool {
	if prmResource == "" {
		return false
	}
	if prmResource == configured {
		return true
	}
	p, err1 := url.Parse(prmResource)
	c, err2 := url.Parse(configured)
	if err1 != nil || err2 != nil || p.Scheme != c.Scheme || !strings.EqualFold(p.Host, c.Host) ||
		p.RawQuery != "" || p.Fragment != "" {
		return false
	}
	pp := strings.TrimSuffix(p.EscapedPath(), "/")
	cp := strings.TrimSuffix(c.EscapedPath(), "/")
	return pp == "" || pp == cp || strings.HasPrefix(cp, pp+"/")
}

// asMetadataURLs lists the well-known URLs of an issuer in the spec's order.
func asMetadataURLs(issuer string) ([]string, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("authorization server %q is not a valid issuer URL", sanitize(issuer, 200))
	}
	origin := u.Scheme + "://" + u.Host
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	if p == "" {
		return []string{
			origin + "/.well-known/oauth-authorization-server",
			origin + "/.well-known/openid-configuration",
		}, nil
	}
	return []string{
		origin + "/.well-known/oauth-authorization-server" + p,
		origin + "/.well-known/openid-configuration" + p,
		origin + p + "/.well-known/openid-configuration",
	}, nil
}

// errNoASMetadata: every candidate answered 4xx.
var errNoASMetadata = errors.New("no authorization server metadata")

// fetchASMetadata reads and checks an issuer's metadata.
func (g *Grant) fetchASMetadata(ctx context.Context, issuer string) (*asMetadata, error) {
	if err := checkEndpoint(issuer); err != nil {
		return nil, fmt.Errorf("authorization server: %w", err)
	}
	urls, err := asMetadataURLs(issuer)
	if err != nil {
		return nil, err
	}
	for _, mu := range urls {
		var m asMetadata
		err := g.getJSON(ctx, mu, &m)
		var fe *fetchError
		if errors.As(err, &fe) && fe.notFound() {
			g.log.Debug("oauth: no authorization server metadata", "url", mu, "status", fe.status, "notJSON", fe.notJSON)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("authorization server metadata: %w", err)
		}
		if m.Issuer != issuer {
			return nil, fmt.Errorf("authorization server metadata at %s names issuer %q, not %q: refusing it",
				mu, sanitize(m.Issuer, 200), issuer)
		}
		if err := m.check(); err != nil {
			return nil, fmt.Errorf("authorization server metadata at %s: %w", mu, err)
		}
		return &m, nil
	}
	return nil, errNoASMetadata
}

func (m *asMetadata) check() error {
	for _, e := range []struct{ name, v string }{
		{"authorization_endpoint", m.AuthorizationEndpoint},
		{"token_endpoint", m.TokenEndpoint},
		{"registration_endpoint", m.RegistrationEndpoint},
		{"revocation_endpoint", m.RevocationEndpoint},
	} {
		if e.v == "" {
			continue
		}
		if err := checkEndpoint(e.v); err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
	}
	if m.TokenEndpoint == "" {
		return errors.New("no token_endpoint")
	}
	return nil
}

// checkPKCE refuses an authorization server that does not advertise S256.
func (m *asMetadata) checkPKCE() error {
	if m.fallback {
		return nil
	}
	for _, c := range m.CodeChallengeMethodsSupported {
		if c == "S256" {
			return nil
		}
	}
	if len(m.CodeChallengeMethodsSupported) == 0 {
		return fmt.Errorf("authorization server %s does not advertise PKCE (code_challenge_methods_supported): refusing to proceed", m.Issuer)
	}
	return fmt.Errorf("authorization server %s does not support PKCE S256 (only %s)", m.Issuer, strings.Join(m.CodeChallengeMethodsSupported, ", "))
}

// checkEndpoint allows https, and http only to a loopback host.
func checkEndpoint(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not an absolute URL", sanitize(raw, 200))
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopback(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("%s is plain http to a non-loopback host", u.Redacted())
	}
	return fmt.Errorf("%q is not an http(s) URL", sanitize(raw, 200))
}

// checkNamed refuses a URL the server named (in its challenge or its
// metadata) on a loopback or private address when the server itself is
// not on one: a remote server must not make mcpvisor send requests to
// the machine's or its network's own services.
func (g *Grant) checkNamed(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not an absolute URL", sanitize(raw, 200))
	}
	ru, _ := url.Parse(g.s.Resource)
	if ru == nil || isLocal(ru.Hostname()) || !isLocal(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("%s is on a local or private address, and server %s is not", u.Redacted(), ru.Host)
}

// isLocal reports whether host is loopback, or an IP address of a private,
// link-local or unspecified range.
func isLocal(host string) bool {
	if isLoopback(host) {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified())
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// discover runs PRM then AS metadata discovery. preferIssuer, when the PRM
// still lists it, is chosen over the first authorization server.
func (g *Grant) discover(ctx context.Context, fromChallenge, preferIssuer string) (*discovery, error) {
	prm, err := g.discoverPRM(ctx, fromChallenge)
	if err != nil {
		return nil, err
	}
	d := &discovery{resource: g.s.Resource}
	if prm != nil {
		d.resource = prm.Resource
		d.prmScopes = prm.ScopesSupported
		d.servers = prm.AuthorizationServers
		d.issuer = prm.AuthorizationServers[0]
		for _, s := range prm.AuthorizationServers {
			if s == preferIssuer && s != "" {
				d.issuer = s
			}
		}
	} else {
		// 2025-03-26: the server's origin is the authorization server.
		ru, _ := url.Parse(g.s.Resource)
		d.issuer = ru.Scheme + "://" + ru.Host
		g.log.Debug("oauth: no protected resource metadata; using the server's origin as authorization server", "issuer", d.issuer)
	}
	if err := g.checkNamed(d.issuer); err != nil {
		return nil, fmt.Errorf("authorization server: %w", err)
	}
	m, err := g.fetchASMetadata(ctx, d.issuer)
	if errors.Is(err, errNoASMetadata) {
		base := strings.TrimSuffix(d.issuer, "/")
		m = &asMetadata{
			Issuer:                d.issuer,
			AuthorizationEndpoint: base + "/authorize",
			TokenEndpoint:         base + "/token",
			RegistrationEndpoint:  base + "/register",
			fallback:              true,
		}
		g.log.Debug("oauth: no authorization server metadata; using the default endpoints", "issuer", d.issuer)
		err = nil
	}
	if err != nil {
		return nil, err
	}
	d.meta = m
	return d, nil
}
