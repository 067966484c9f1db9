package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTeamBlocks(t *testing.T) {
	cfg := mustParse(t, `{
	  "auth": {"issuer": "https://as.example.com", "publicUrl": "https://mcp.example.com/",
	    "scopes": ["mcp"], "serverScopes": {"gh": ["gh:use"]}, "clockSkew": "30s", "dashboardClientId": "dash",
	    "introspection": {"url": "https://as.example.com/introspect", "clientId": "rs", "clientSecret": "${keyring:rs}"}},
	  "policy": [{"name": "ops", "effect": "allow", "when": "\"ops\" in identity.groups"}, {"effect": "deny", "when": "tool == \"rm\""}],
	  "audit": {"file": "-", "arguments": "redact", "maxSize": "1MiB", "failClosed": true},
	  "rateLimits": {"perIdentity": {"perSecond": 5}, "perTool": {"perSecond": 0.5, "burst": 2}},
	  "mcpServers": {"gh": {"command": "x", "sharing": "per-identity"}}}`, LoadOptions{})
	a := cfg.Auth
	if a == nil || a.Issuer != "https://as.example.com" || a.PublicURL != "https://mcp.example.com" || a.AdminScope != DefaultAdminScope ||
		a.ClockSkew != 30*time.Second || !slices.Equal(a.ServerScopes["gh"], []string{"gh:use"}) || a.Introspection.ClientSecret != "${keyring:rs}" || a.DashboardClientID != "dash" {
		t.Errorf("auth = %+v", a)
	}
	if a.EndpointURL("/mcp") != "https://mcp.example.com/mcp" {
		t.Errorf("EndpointURL = %q", a.EndpointURL("/mcp"))
	}
	if len(cfg.Policy) != 2 || cfg.Policy[0].Name != "ops" || cfg.Policy[1].Name != "policy[1]" || cfg.Policy[1].Path != "policy[1].when" || cfg.Policy[1].Effect != "deny" {
		t.Errorf("policy = %+v", cfg.Policy)
	}
	if au := cfg.Audit; au == nil || au.File != "-" || au.Arguments != "redact" || au.MaxSize != 1<<20 || !au.FailClosed || au.MaxFiles != 5 || au.Queue != 4096 {
		t.Errorf("audit = %+v", cfg.Audit)
	}
	if l := cfg.RateLimits; l == nil || l.PerIdentity != (Rate{5, 5}) || l.PerTool != (Rate{0.5, 2}) {
		t.Errorf("rateLimits = %+v", cfg.RateLimits)
	}
	if cfg.Servers[0].Sharing != SharingPerIdentity {
		t.Errorf("sharing = %q", cfg.Servers[0].Sharing)
	}
	if cfg := mustParse(t, `{"audit": {}, "mcpServers": {"a": {"command": "x"}}}`, LoadOptions{}); cfg.Audit == nil || cfg.Audit.Arguments != "digest" || cfg.Auth != nil {
		t.Errorf("an empty audit block: %+v", cfg.Audit)
	}
}

func TestTeamErrors(t *testing.T) {
	tests := []struct{ name, json, path, want string }{
		{"auth without issuer", `{"auth": {"publicUrl": "https://m"}}`, "auth", `needs "issuer"`},
		{"auth without public URL", `{"auth": {"issuer": "https://as"}}`, "auth", `needs "publicUrl"`},
		{"plain http issuer", `{"auth": {"issuer": "http://as.example.com", "publicUrl": "https://m"}}`, "auth.issuer", "must be https://"},
		{"relative public URL", `{"auth": {"issuer": "https://as", "publicUrl": "/mcp"}}`, "auth.publicUrl", "is not an absolute URL"},
		{"public URL with query", `{"auth": {"issuer": "https://as", "publicUrl": "https://m/?a=1"}}`, "auth.publicUrl", "no query"},
		{"bad scope", `{"auth": {"issuer": "https://as", "publicUrl": "https://m", "scopes": ["a b"]}}`, "auth.scopes[0]", "is not a scope"},
		{"bad dashboard client id", `{"auth": {"issuer": "https://as", "publicUrl": "https://m", "dashboardClientId": " "}}`, "auth.dashboardClientId", "is not a client id"},
		{"bad admin scope", `{"auth": {"issuer": "https://as", "publicUrl": "https://m", "adminScope": ""}}`, "auth.adminScope", "is not a scope"},
		{"hmac algorithm", `{"auth": {"issuer": "https://as", "publicUrl": "https://m", "algorithms": ["HS256"]}}`, "auth.algorithms[0]", `"HS256" is not one of`},
		{"an algorithm the verifier lacks", `{"auth": {"issuer": "https://as", "publicUrl": "https://m", "algorithms": ["ES512"]}}`, "auth.algorithms[0]", `"ES512" is not one of`},
		{"scopes of no server", `{"auth": {"issuer": "https://as", "publicUrl": "https://m", "serverScopes": {"gihtub": ["g"]}}, "mcpServers": {"github": {"command": "x"}}}`, "auth.serverScopes.gihtub", "no server is named"},
		{"none algorithm", `{"auth": {"issuer": "https://as", "publicUrl": "https://m", "algorithms": ["none"]}}`, "auth.algorithms[0]", `"none" is not one of`},
		{"skew too large", `{"auth": {"issuer": "https://as", "publicUrl": "https://m", "clockSkew": "1h"}}`, "auth.clockSkew", "out of range"},
		{"introspection without url", `{"auth": {"issuer": "https://as", "publicUrl": "https://m", "introspection": {}}}`, "auth.introspection", `needs "url"`},
		{"unknown auth field", `{"auth": {"issuer": "https://as", "publicUrl": "https://m", "audience": ["x"]}}`, "auth.audience", `unknown field: refused in a security setting, where one ignored could weaken it; did you mean "audiences"?`},
		{"unknown rule field", `{"policy": [{"effect": "deny", "when": "true", "unless": "false"}]}`, "policy[0].unless", "unknown field: refused"},
		{"policy not an array", `{"policy": {"effect": "allow"}}`, "policy", "must be an array of rules"},
		{"rule without effect", `{"policy": [{"when": "true"}]}`, "policy[0]", `needs "effect"`},
		{"rule with a bad effect", `{"policy": [{"effect": "permit", "when": "true"}]}`, "policy[0].effect", `"permit" is not one of`},
		{"rule without when", `{"policy": [{"effect": "deny"}]}`, "policy[0]", `needs "when"`},
		{"audit bad arguments mode", `{"audit": {"arguments": "hash"}}`, "audit.arguments", `"hash" is not one of`},
		{"audit empty file", `{"audit": {"file": ""}}`, "audit.file", "is empty"},
		{"audit tiny file", `{"audit": {"maxSize": 10}}`, "audit.maxSize", "too small"},
		{"rate without perSecond", `{"rateLimits": {"perIdentity": {"burst": 3}}}`, "rateLimits.perIdentity", `needs "perSecond"`},
		{"negative rate", `{"rateLimits": {"perTool": {"perSecond": -1}}}`, "rateLimits.perTool.perSecond", "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := parseErr(t, tt.json, LoadOptions{})
			for _, p := range e.Problems {
				if p.Path == tt.path && strings.Contains(p.Message, tt.want) {
					return
				}
			}
			t.Errorf("no problem at %q containing %q; got:\n%v", tt.path, tt.want, e)
		})
	}
}

// A rule that does not compile or type-check is an error at its own
// path; the others still load into nothing (no half policy).
func TestPolicyCompiledAtLoad(t *testing.T) {
	cfg := mustParse(t, `{"policy": [{"effect": "deny", "when": "tool == \"rm\""}], "mcpServers": {"a": {"command": "x"}}}`, LoadOptions{})
	if cfg.Compiled == nil || cfg.Compiled.Empty() {
		t.Fatal("a good policy is not compiled")
	}
	e := parseErr(t, `{"policy": [{"effect": "allow", "when": "true"}, {"effect": "deny", "when": "tool == 1"}, {"effect": "allow", "when": "identity.sub"}, {"effect": "deny", "when": "tool ==" }], "mcpServers": {"a": {"command": "x"}}}`, LoadOptions{})
	want := map[string]string{"policy[1].when": "no matching overload", "policy[2].when": "bool", "policy[3].when": "Syntax error"}
	for path, msg := range want {
		found := false
		for _, p := range e.Problems {
			if p.Path == path && strings.Contains(p.Message, msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("no problem at %s containing %q; got:\n%v", path, msg, e)
		}
	}
	for _, p := range e.Problems {
		if p.Path == "policy[0].when" {
			t.Errorf("the good rule has a problem: %v", p)
		}
	}
}

// A per-identity reference where no identity is — an OAuth client's
// secret or key, the introspection client's secret — is an error naming
// the field.
func TestIdentityReferencesWhereNoIdentityIs(t *testing.T) {
	for path, doc := range map[string]string{
		"mcpServers.r.oauth.clientSecret": `{"mcpServers": {"r": {"url": "https://r.example/mcp", "sharing": "per-identity", "oauth": {"clientId": "c", "clientSecret": "${keyring:s@identity}"}}}}`,
		"mcpServers.r.oauth.privateKey":   `{"mcpServers": {"r": {"url": "https://r.example/mcp", "oauth": {"clientId": "c", "privateKey": "${identity.sub}"}}}}`,
		"auth.introspection.clientSecret": `{"auth": {"issuer": "https://as", "publicUrl": "https://m", "introspection": {"url": "https://as/i", "clientId": "rs", "clientSecret": "${keyring:x@identity}"}}, "mcpServers": {"a": {"command": "x"}}}`,
	} {
		e := parseErr(t, doc, LoadOptions{})
		found := false
		for _, p := range e.Problems {
			if p.Path == path && strings.Contains(p.Message, "per-identity reference cannot be used here") {
				found = true
			}
		}
		if !found {
			t.Errorf("no problem at %s; got:\n%v", path, e)
		}
	}
}
