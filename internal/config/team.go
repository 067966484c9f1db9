package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/policy"
	"github.com/mcpvisor/mcpvisor/internal/secret"
)

// AuthConfig is the top-level "auth" object: mcpvisor as an OAuth 2.1
// resource server (MCP 2026-07-28 authorization). With it, every HTTP
// request carries an access token the issuer signed (or its
// introspection endpoint vouches for), and that token's subject is the
// request's identity. Without it, nothing changes: the loopback guard
// and the optional static bearer token.
type AuthConfig struct {
	// Issuer is the authorization server's issuer identifier, exactly as
	// its metadata states it (its metadata and JWKS are discovered).
	Issuer string
	// PublicURL is the base URL clients reach this deployment at (behind
	// a balancer or an ingress, not the listen address), without a
	// trailing slash. Every endpoint's resource identifier and every
	// metadata URL is built from it, never from a request's Host.
	PublicURL string
	// Audiences are the accepted token audiences; nil means each
	// endpoint's own public URL (PublicURL + "/mcp", PublicURL +
	// "/servers/NAME/mcp").
	Audiences []string
	// Scopes are required on every MCP endpoint.
	Scopes []string
	// ServerScopes are required, besides Scopes, to use a server —
	// on its own endpoint and through /mcp alike.
	ServerScopes map[string][]string
	// AdminScope is required on the admin API, /metrics and the
	// dashboard's data (default DefaultAdminScope).
	AdminScope string
	// Algorithms are the accepted JWT signing algorithms (nil: the
	// asymmetric ones; never none or HMAC).
	Algorithms []string
	// ClockSkew is the tolerance on exp and nbf (default 60 s, at most
	// 5 min).
	ClockSkew time.Duration
	// JWKSURL overrides the issuer metadata's jwks_uri.
	JWKSURL string
	// GroupsClaim names the claim holding the subject's groups
	// (default "groups").
	GroupsClaim string
	// Introspection, when set, verifies tokens that are not JWTs with
	// RFC 7662 token introspection.
	Introspection *IntrospectionConfig
	// DashboardClientID is a public client (no secret, PKCE) registered
	// with the issuer, whose redirect URI is PublicURL + "/ui/callback"
	// (and, for mcpvisor login --gateway, http://127.0.0.1/callback):
	// the dashboard logs in with it. Empty: the dashboard has no login of
	// its own.
	DashboardClientID string
}

// IntrospectionConfig is auth.introspection.
type IntrospectionConfig struct {
	URL      string
	ClientID string
	// ClientSecret as written: a literal or a secret reference, resolved
	// when serve starts. Never shown.
	ClientSecret string
}

// DefaultAdminScope is the scope the admin API requires with auth.
const DefaultAdminScope = "mcpvisor:admin"

// MaxClockSkew bounds auth.clockSkew.
const MaxClockSkew = 5 * time.Minute

// EndpointURL is the public URL of the endpoint at path ("/mcp",
// "/servers/NAME/mcp").
func (a *AuthConfig) EndpointURL(path string) string { return a.PublicURL + path }

// PolicyRule is one rule of the top-level "policy" array.
type PolicyRule struct {
	// Name names the rule in decisions and the audit (default: its path).
	Name string
	// Effect is "allow" or "deny".
	Effect string
	// When is a CEL expression over identity, server, method, tool,
	// prompt, resource and arguments that yields a bool.
	When string
	// Path is the rule's JSON path in the config, for errors.
	Path string
}

// AuditConfig is the top-level "audit" object.
type AuditConfig struct {
	// File is where the JSON lines go: "-" for standard output, else a
	// path (default: audit.jsonl in the state directory).
	File string
	// MaxSize rotates the file past this many bytes (default 100 MB).
	MaxSize int64
	// MaxFiles is how many rotated files are kept (default 5).
	MaxFiles int
	// Queue bounds the records waiting to be written (default 4096).
	Queue int
	// FailClosed refuses requests while the queue is full or the file
	// cannot be written.
	FailClosed bool
	// Arguments is how a call's arguments are recorded: "digest" (the
	// default), "redact", "omit" or "full".
	Arguments string
}

// Audit argument modes.
var auditArgModes = []string{"digest", "redact", "omit", "full"}

// Rate is a token bucket: PerSecond requests a second on average, Burst
// at once.
type Rate struct {
	PerSecond float64
	Burst     int
}

// LimitsConfig is the top-level "rateLimits" object.
type LimitsConfig struct {
	// PerIdentity bounds each identity's requests; PerTool each
	// identity's calls of one tool.
	PerIdentity, PerTool Rate
}

var authNames = []string{"issuer", "publicUrl", "audiences", "scopes", "serverScopes", "adminScope", "algorithms", "clockSkew", "jwksUrl", "groupsClaim", "introspection", "dashboardClientId"}

// jwtAlgs are the algorithms auth.algorithms may name: authn's.
var jwtAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"}

// auth reads the top-level "auth" object.
func (p *parser) auth(v *node, at string) *AuthConfig {
	if v.kind == kindNull {
		return nil
	}
	a := &AuthConfig{AdminScope: DefaultAdminScope, ClockSkew: time.Minute}
	p.secure(v, at, authNames, func(key string, v *node, kat string) bool {
		switch key {
		case "issuer":
			if s, ok := p.str(v, kat); ok && p.checkHTTPURL(s, kat, "the issuer") {
				a.Issuer = s
			}
		case "publicUrl":
			if s, ok := p.str(v, kat); ok && p.checkHTTPURL(s, kat, "the public URL") {
				a.PublicURL = strings.TrimSuffix(s, "/")
			}
		case "jwksUrl":
			if s, ok := p.str(v, kat); ok && p.checkHTTPURL(s, kat, "the JWKS URL") {
				a.JWKSURL = s
			}
		case "audiences":
			if l, ok := p.strings(v, kat); ok {
				for i, s := range l {
					if strings.TrimSpace(s) == "" {
						p.errorf(index(kat, i), "is empty")
					}
				}
				a.Audiences = l
			}
		case "scopes":
			a.Scopes = p.scopeList(v, kat)
		case "serverScopes":
			a.ServerScopes = map[string][]string{}
			p.secure(v, kat, nil, func(name string, v *node, sat string) bool {
				a.ServerScopes[name] = p.scopeList(v, sat)
				return true
			})
		case "dashboardClientId":
			if s, ok := p.str(v, kat); ok {
				if strings.TrimSpace(s) == "" || strings.ContainsAny(s, " \t\r\n") {
					p.errorf(kat, "%q is not a client id (no spaces)", s)
				} else {
					a.DashboardClientID = s
				}
			}
		case "adminScope":
			if s, ok := p.str(v, kat); ok {
				if s == "" || strings.ContainsAny(s, " \t\r\n\"\\") {
					p.errorf(kat, "%q is not a scope (no spaces, quotes or backslashes)", s)
				} else {
					a.AdminScope = s
				}
			}
		case "algorithms":
			if l, ok := p.strings(v, kat); ok {
				for i, s := range l {
					p.oneOf(s, index(kat, i), jwtAlgs)
				}
				if len(l) == 0 {
					p.errorf(kat, "is empty: no token could be accepted")
				}
				a.Algorithms = l
			}
		case "clockSkew":
			if d := p.duration(v, kat); d != nil {
				if *d < 0 || *d > MaxClockSkew {
					p.errorf(kat, "%v is out of range (0 to %v)", *d, MaxClockSkew)
				} else {
					a.ClockSkew = *d
				}
			}
		case "groupsClaim":
			if s, ok := p.str(v, kat); ok {
				if s == "" {
					p.errorf(kat, "is empty")
				}
				a.GroupsClaim = s
			}
		case "introspection":
			a.Introspection = p.introspection(v, kat)
		default:
			return false
		}
		return true
	})
	if v.kind != kindObject {
		return nil
	}
	if a.Issuer == "" && !p.hasErrorAt(0, at+".issuer") {
		p.errorf(at, "needs \"issuer\": the authorization server whose tokens are accepted")
	}
	if a.PublicURL == "" && !p.hasErrorAt(0, at+".publicUrl") {
		p.errorf(at, "needs \"publicUrl\": the URL clients reach mcpvisor at (behind a balancer the listen address is not it)")
	}
	if a.PublicURL != "" {
		if u, err := url.Parse(a.PublicURL); err == nil && (u.RawQuery != "" || u.Fragment != "") {
			p.errorf(at+".publicUrl", "%q must have no query or fragment", a.PublicURL)
		}
	}
	return a
}

// introspection reads auth.introspection.
func (p *parser) introspection(v *node, at string) *IntrospectionConfig {
	if v.kind == kindNull {
		return nil
	}
	in := &IntrospectionConfig{}
	p.secure(v, at, []string{"url", "clientId", "clientSecret"}, func(key string, v *node, kat string) bool {
		switch key {
		case "url":
			if s, ok := p.str(v, kat); ok && p.checkHTTPURL(s, kat, "the introspection endpoint") {
				in.URL = s
			}
		case "clientId":
			in.ClientID, _ = p.str(v, kat)
		case "clientSecret":
			if s, ok := p.str(v, kat); ok {
				in.ClientSecret = p.reference(s, kat, false)
				p.noIdentityRef(s, kat, "introspection is serve's own")
			}
		default:
			return false
		}
		return true
	})
	if v.kind == kindObject && in.URL == "" && !p.hasErrorAt(0, at+".url") {
		p.errorf(at, "needs \"url\": the RFC 7662 introspection endpoint")
	}
	if in.ClientSecret != "" && in.ClientID == "" {
		p.errorf(at, "clientSecret needs clientId")
	}
	return in
}

// scopeList reads an array of scope tokens.
func (p *parser) scopeList(v *node, at string) []string {
	l, ok := p.strings(v, at)
	if !ok {
		return nil
	}
	for i, sc := range l {
		if sc == "" || strings.ContainsAny(sc, " \t\r\n\"\\") {
			p.errorf(index(at, i), "%q is not a scope (no spaces, quotes or backslashes)", sc)
		}
	}
	return l
}

// checkHTTPURL checks an absolute https URL (http only to a loopback
// host), with no credentials or fragment.
func (p *parser) checkHTTPURL(s, at, what string) bool {
	u, err := url.Parse(s)
	switch {
	case err != nil || !u.IsAbs():
		p.errorf(at, "%q is not an absolute URL (%s)", s, what)
	case u.Scheme != "https" && u.Scheme != "http":
		p.errorf(at, "%q must be an https:// URL (%s)", s, what)
	case u.Host == "":
		p.errorf(at, "%q has no host", s)
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		p.errorf(at, "%q must be https:// (plain http only to a loopback address)", s)
	case u.User != nil || u.Fragment != "":
		p.errorf(at, "%q must have no credentials or fragment", s)
	default:
		return true
	}
	return false
}

func loopbackHost(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// policy reads the top-level "policy" array of rules.
func (p *parser) policy(v *node, at string) []PolicyRule {
	if v.kind == kindNull {
		return nil
	}
	if v.kind != kindArray {
		p.errorf(at, "must be an array of rules ({\"effect\": \"allow\"|\"deny\", \"when\": CEL}), not %s", v.kind)
		return nil
	}
	var rules []PolicyRule
	for i, e := range v.vals {
		rat := index(at, i)
		r := PolicyRule{Path: rat + ".when"}
		p.secure(e, rat, []string{"name", "effect", "when"}, func(key string, v *node, kat string) bool {
			switch key {
			case "name":
				r.Name, _ = p.str(v, kat)
			case "effect":
				if s, ok := p.str(v, kat); ok && p.oneOf(s, kat, []string{"allow", "deny"}) {
					r.Effect = s
				}
			case "when":
				if s, ok := p.str(v, kat); ok {
					if strings.TrimSpace(s) == "" {
						p.errorf(kat, "is empty")
					}
					r.When = s
				}
			default:
				return false
			}
			return true
		})
		if e.kind != kindObject {
			continue
		}
		if r.Effect == "" && !p.hasErrorAt(0, rat+".effect") {
			p.errorf(rat, "needs \"effect\": \"allow\" or \"deny\"")
		}
		if r.When == "" && !p.hasErrorAt(0, rat+".when") {
			p.errorf(rat, "needs \"when\": a CEL expression (\"true\" for always)")
		}
		if r.Name == "" {
			r.Name = rat
		}
		rules = append(rules, r)
	}
	return rules
}

// audit reads the top-level "audit" object.
func (p *parser) audit(v *node, at string) *AuditConfig {
	if v.kind == kindNull {
		return nil
	}
	a := &AuditConfig{MaxSize: 100 << 20, MaxFiles: 5, Queue: 4096, Arguments: "digest"}
	p.secure(v, at, []string{"file", "maxSize", "maxFiles", "queue", "failClosed", "arguments"}, func(key string, v *node, kat string) bool {
		switch key {
		case "file":
			if s, ok := p.str(v, kat); ok {
				if s == "" {
					p.errorf(kat, "is empty: use \"-\" for standard output")
				} else if s != "-" {
					s, _ = p.expand(s, kat, false)
				}
				a.File = s
			}
		case "maxSize":
			if n := p.size(v, kat, false); n != nil {
				if *n < 4096 {
					p.errorf(kat, "%d bytes is too small for an audit file (at least 4 KiB)", *n)
				} else {
					a.MaxSize = int64(min(*n, 1<<62))
				}
			}
		case "maxFiles":
			if n := p.integer(v, kat); n != nil {
				if *n < 1 || *n > 1000 {
					p.errorf(kat, "%d is out of range (1 to 1000)", *n)
				} else {
					a.MaxFiles = *n
				}
			}
		case "queue":
			if n := p.integer(v, kat); n != nil {
				if *n < 1 || *n > 1<<20 {
					p.errorf(kat, "%d is out of range (1 to %d)", *n, 1<<20)
				} else {
					a.Queue = *n
				}
			}
		case "failClosed":
			if b := p.boolean(v, kat); b != nil {
				a.FailClosed = *b
			}
		case "arguments":
			if s, ok := p.str(v, kat); ok && p.oneOf(s, kat, auditArgModes) {
				a.Arguments = s
			}
		default:
			return false
		}
		return true
	})
	if v.kind != kindObject {
		return nil
	}
	return a
}

// rateLimits reads the top-level "rateLimits" object.
func (p *parser) rateLimits(v *node, at string) *LimitsConfig {
	if v.kind == kindNull {
		return nil
	}
	l := &LimitsConfig{}
	p.secure(v, at, []string{"perIdentity", "perTool"}, func(key string, v *node, kat string) bool {
		switch key {
		case "perIdentity":
			l.PerIdentity = p.rate(v, kat)
		case "perTool":
			l.PerTool = p.rate(v, kat)
		default:
			return false
		}
		return true
	})
	if v.kind != kindObject {
		return nil
	}
	return l
}

// rate reads {"perSecond": N, "burst": B}; burst defaults to
// max(1, ceil(perSecond)).
func (p *parser) rate(v *node, at string) Rate {
	var r Rate
	p.secure(v, at, []string{"perSecond", "burst"}, func(key string, v *node, kat string) bool {
		switch key {
		case "perSecond":
			if f := p.number(v, kat); f != nil {
				if *f <= 0 || *f > 1e9 {
					p.errorf(kat, "%v is out of range (more than 0, at most 1e9)", *f)
				} else {
					r.PerSecond = *f
				}
			}
		case "burst":
			if n := p.integer(v, kat); n != nil {
				if *n < 1 {
					p.errorf(kat, "%d is not a positive burst", *n)
				} else {
					r.Burst = *n
				}
			}
		default:
			return false
		}
		return true
	})
	if v.kind == kindObject && r.PerSecond == 0 && !p.hasErrorAt(0, at+".perSecond") {
		p.errorf(at, "needs \"perSecond\": the requests a second allowed on average")
	}
	if r.Burst == 0 && r.PerSecond > 0 {
		r.Burst = max(1, int(r.PerSecond+0.999999))
	}
	return r
}

// String shows r as "N/s burst B".
func (r Rate) String() string {
	if r.PerSecond == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%g/s burst %d", r.PerSecond, r.Burst)
}

// checkTeam checks what spans the team blocks and the servers, and
// compiles the policy: each rule type-checked on its own, so that an
// error names its rule's path.
func (p *parser) checkTeam(cfg *Config) {
	if len(cfg.Policy) > 0 {
		rules := make([]policy.Rule, len(cfg.Policy))
		bad := false
		for i, r := range cfg.Policy {
			rules[i] = policy.Rule{Name: r.Name, Effect: policy.Effect(r.Effect), When: r.When, Path: r.Path}
			if r.Effect == "" || r.When == "" {
				bad = true
				continue
			}
			if _, err := policy.Compile([]policy.Rule{{Effect: rules[i].Effect, When: r.When, Path: "-"}}); err != nil {
				p.errorf(r.Path, "%s", strings.TrimPrefix(err.Error(), "-: "))
				bad = true
			}
		}
		if !bad {
			pol, err := policy.Compile(rules)
			if err != nil {
				p.errorf("policy", "%v", err)
			}
			cfg.Compiled = pol
		}
	}
	if cfg.Auth != nil {
		for name := range cfg.Auth.ServerScopes {
			if cfg.Server(name) == nil {
				p.errorf("auth.serverScopes."+name, "no server is named %q: a misspelt name would leave the server it meant unprotected", name)
			}
		}
	}
	for _, s := range cfg.Servers {
		if s.Sharing == SharingPerIdentity && cfg.Auth == nil {
			p.warnf(p.serversKey+"."+s.Name+".sharing", "%q without \"auth\": every HTTP client is one anonymous identity, and each local user one", SharingPerIdentity)
		}
	}
}

// secure is object for the team blocks (auth, policy, audit,
// rateLimits): an unknown field there is an error, not a warning — a
// misspelled "scopes" ignored would leave an endpoint open.
func (p *parser) secure(n *node, at string, known []string, fn func(key string, v *node, at string) bool) {
	if n.kind == kindNull {
		return
	}
	if n.kind != kindObject {
		p.errorf(at, "must be an object, not %s", n.kind)
		return
	}
	p.fields(n, at, func(key string, v *node, fat string) {
		if fn(key, v, fat) {
			return
		}
		msg := "unknown field: refused in a security setting, where one ignored could weaken it"
		if s := suggest(key, known); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		p.errorf(fat, "%s", msg)
	})
}

// noIdentityRef refuses a per-identity reference (${identity.sub},
// ${keyring:NAME@identity}) where no identity is: why says whose the
// value is.
func (p *parser) noIdentityRef(s, at, why string) {
	if secret.UsesIdentity(s) {
		p.errorf(at, "a per-identity reference cannot be used here: %s, not an identity's", why)
	}
}
