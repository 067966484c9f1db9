package config

import (
	"strings"
	"testing"
)

func TestOAuth(t *testing.T) {
	cfg := mustParse(t, `{
		"oauth": {"clientMetadataUrl": "https://mcpvisor.example/client.json"},
		"mcpServers": {
			"plain": {"url": "https://a/mcp"},
			"bearer": {"url": "https://b/mcp", "headers": {"Authorization": "Bearer x"}},
			"jwt": {"url": "https://c/mcp", "oauth": {"clientId": "id", "privateKey": "${file:/k.pem}", "signingAlgorithm": "ES256",
				"grant": "client_credentials", "scopes": ["read", "write"]}},
			"pre": {"url": "https://d/mcp", "oauth": {"clientId": "id", "clientSecret": "${keyring:d-secret}",
				"tokenEndpointAuthMethod": "client_secret_post", "clientMetadataUrl": "https://own.example/c.json"}}
		}}`, LoadOptions{LookupEnv: envOf(nil)})
	if o := cfg.Server("plain").OAuth; o == nil || o.ClientMetadataURL != "https://mcpvisor.example/client.json" || o.Grant != GrantAuthorizationCode {
		t.Errorf("plain: %+v", o)
	}
	if o := cfg.Server("bearer").OAuth; o != nil {
		t.Errorf("a server with an Authorization header has OAuth %+v", o)
	}
	want := OAuthConfig{ClientID: "id", PrivateKey: "${file:/k.pem}", TokenEndpointAuthMethod: AuthPrivateKeyJWT, SigningAlgorithm: "ES256",
		Grant: GrantClientCredentials, Scopes: []string{"read", "write"}, ClientMetadataURL: "https://mcpvisor.example/client.json"}
	eq(t, "jwt", *cfg.Server("jwt").OAuth, want)
	eq(t, "pre", *cfg.Server("pre").OAuth, OAuthConfig{ClientID: "id", ClientSecret: "${keyring:d-secret}", TokenEndpointAuthMethod: AuthClientSecretPost,
		ClientMetadataURL: "https://own.example/c.json", Grant: GrantAuthorizationCode})
	if cfg.OAuthClientMetadataURL != "https://mcpvisor.example/client.json" {
		t.Errorf("top level %q", cfg.OAuthClientMetadataURL)
	}
}

func TestOAuthErrors(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"local":        {`{"mcpServers": {"a": {"command": "x", "oauth": {}}}}`, ""},
		"method":       {`{"mcpServers": {"a": {"url": "https://h/", "oauth": {"tokenEndpointAuthMethod": "basic"}}}}`, `mcpServers.a.oauth.tokenEndpointAuthMethod: "basic" is not one of "client_secret_basic"`},
		"grant":        {`{"mcpServers": {"a": {"url": "https://h/", "oauth": {"grant": "password"}}}}`, `mcpServers.a.oauth.grant: "password" is not one of`},
		"alg":          {`{"mcpServers": {"a": {"url": "https://h/", "oauth": {"clientId": "i", "privateKey": "k", "signingAlgorithm": "HS256"}}}}`, `"HS256" is not one of "ES256", "RS256"`},
		"http cimd":    {`{"oauth": {"clientMetadataUrl": "http://x/c.json"}, "mcpServers": {"a": {"url": "https://h/"}}}`, `oauth.clientMetadataUrl: "http://x/c.json" must be an https:// URL`},
		"cimd path":    {`{"mcpServers": {"a": {"url": "https://h/", "oauth": {"clientMetadataUrl": "https://x"}}}}`, `has no path`},
		"jwt no key":   {`{"mcpServers": {"a": {"url": "https://h/", "oauth": {"clientId": "i", "tokenEndpointAuthMethod": "private_key_jwt"}}}}`, `"private_key_jwt" needs privateKey`},
		"cc no id":     {`{"mcpServers": {"a": {"url": "https://h/", "oauth": {"grant": "client_credentials"}}}}`, `grant "client_credentials" needs clientId`},
		"none secret":  {`{"mcpServers": {"a": {"url": "https://h/", "oauth": {"clientId": "i", "clientSecret": "s", "tokenEndpointAuthMethod": "none"}}}}`, `has no secret`},
		"bad ref":      {`{"mcpServers": {"a": {"url": "https://h/", "oauth": {"clientId": "i", "clientSecret": "${keyring:}"}}}}`, `mcpServers.a.oauth.clientSecret: "${keyring:}" has no keyring name`},
		"scope":        {`{"mcpServers": {"a": {"url": "https://h/", "oauth": {"scopes": ["a b"]}}}}`, `mcpServers.a.oauth.scopes[0]: "a b" is not a scope`},
		"secret no id": {`{"mcpServers": {"a": {"url": "https://h/", "oauth": {"clientSecret": "s"}}}}`, `need clientId`},
		"defaults":     {`{"defaults": {"oauth": {}}, "mcpServers": {"a": {"url": "https://h/"}}}`, `"oauth" belongs to a server`},
	} {
		_, err := Parse([]byte(tc.doc), "config.json", LoadOptions{LookupEnv: envOf(nil), Strict: tc.want == ""})
		want := tc.want
		if want == "" {
			want = "mcpServers.a.oauth: ignored for a local server"
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
}

func TestOAuthLaunchChange(t *testing.T) {
	parse := func(doc string) *Server {
		return mustParse(t, doc, LoadOptions{LookupEnv: envOf(nil)}).Server("a")
	}
	a := parse(`{"mcpServers": {"a": {"url": "https://h/"}}}`)
	b := parse(`{"mcpServers": {"a": {"url": "https://h/", "oauth": {"clientId": "x"}}}}`)
	c := parse(`{"oauth": {"clientMetadataUrl": "https://m/c.json"}, "mcpServers": {"a": {"url": "https://h/"}}}`)
	for _, o := range []*Server{b, c} {
		if ch := CompareServer(a, o); ch.Action != ActionRestarted || ch.Fields[0] != "oauth" {
			t.Errorf("change %+v", ch)
		}
		if a.LaunchHash() == o.LaunchHash() {
			t.Error("oauth does not change the launch hash")
		}
	}
}

func TestRedactResolved(t *testing.T) {
	s := mustParse(t, `{"mcpServers": {"a": {"command": "x", "env": {"T": "${keyring:t}"}}}}`, LoadOptions{LookupEnv: envOf(nil)}).Server("a")
	s.NoteResolved("tok-12345", "short")
	if got := s.RedactText("got tok-12345 and short"); got != "got [redacted] and short" {
		t.Errorf("RedactText = %q", got)
	}
}

func TestReferences(t *testing.T) {
	s := mustParse(t, `{"mcpServers": {"a": {"url": "https://h/", "headers": {"X-Api-Key": "Bearer ${keyring:a}", "X-Lit": "sk-literal-secret"},
		"oauth": {"clientId": "c", "clientSecret": "${file:/s}"}},
		"b": {"command": "x", "args": ["--t", "pre${env:T:-d}post"], "env": {"Z": "${Z}", "A": "lit"}}}}`, LoadOptions{LookupEnv: envOf(map[string]string{"Z": "z"})})
	eq(t, "a", s.Server("a").References(), []string{"headers.X-Api-Key: ${keyring:a}", "oauth.clientSecret: ${file:/s}"})
	eq(t, "b", s.Server("b").References(), []string{"env.Z: ${Z}", "args[1]: ${env:T:-d}"})
}

// A literal value with a $ in it is still hidden; a reference's text is
// not (it names the reference).
func TestRedactLiteralDollar(t *testing.T) {
	s := mustParse(t, `{"mcpServers": {"a": {"command": "x", "env": {"L": "sk-$abcdef", "R": "${keyring:name-of-it}"}}}}`, LoadOptions{LookupEnv: envOf(nil)}).Server("a")
	if got := s.RedactText("sk-$abcdef ${keyring:name-of-it}"); got != "[redacted] ${keyring:name-of-it}" {
		t.Errorf("RedactText = %q", got)
	}
}
