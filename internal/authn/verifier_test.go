package authn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
)

const aud = "https://mcp.example.com/mcp"

// setup starts an in-memory issuer and a Verifier of its tokens for aud.
func setup(t *testing.T, io authntest.Options, mod func(*Options)) (*authntest.Issuer, *Verifier) {
	t.Helper()
	io.InMemory = true
	iss := authntest.Start(t, io)
	o := Options{Issuer: iss.URL, Audiences: []string{aud}, HTTPClient: iss.Client()}
	if mod != nil {
		mod(&o)
	}
	v, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return iss, v
}

// refused checks err is an *Error with code, whose text holds neither the
// token nor its payload.
func refused(t *testing.T, err error, code, token string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	if e.Code != code {
		t.Fatalf("code %q (%v), want %q", e.Code, e, code)
	}
	if token != "" {
		parts := strings.Split(token, ".")
		for _, p := range append(parts, token) {
			if len(p) > 8 && (strings.Contains(e.Error(), p) || strings.Contains(e.Description, p)) {
				t.Fatalf("error %q holds the token", e.Error())
			}
		}
	}
	return e
}

func TestNewRefusesBadOptions(t *testing.T) {
	good := func() Options { return Options{Issuer: "https://as.example.com", Audiences: []string{aud}} }
	cases := []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"no issuer", func(o *Options) { o.Issuer = "" }, "issuer is required"},
		{"relative issuer", func(o *Options) { o.Issuer = "as.example.com" }, "not an absolute URL"},
		{"http issuer", func(o *Options) { o.Issuer = "http://as.example.com" }, "must use https"},
		{"issuer with query", func(o *Options) { o.Issuer = "https://as.example.com?x=1" }, "query"},
		{"ftp issuer", func(o *Options) { o.Issuer = "ftp://as.example.com" }, "https URL"},
		{"no audience", func(o *Options) { o.Audiences = nil }, "audience"},
		{"blank audience", func(o *Options) { o.Audiences = []string{" "} }, "white space"},
		{"alg none", func(o *Options) { o.Algorithms = []string{"RS256", "none"} }, `"none" is never`},
		{"alg HS256", func(o *Options) { o.Algorithms = []string{"HS256"} }, "symmetric"},
		{"alg unknown", func(o *Options) { o.Algorithms = []string{"RS1"} }, "unknown algorithm"},
		{"negative skew", func(o *Options) { o.Skew = -time.Second }, "negative skew"},
		{"huge skew", func(o *Options) { o.Skew = 6 * time.Minute }, "exceeds"},
		{"http jwks", func(o *Options) { o.JWKSURL = "http://keys.example.com/jwks" }, "JWKS URL"},
		{"secret without id", func(o *Options) { o.Introspection = &Introspection{ClientSecret: "s"} }, "without a client id"},
	}
	for _, c := range cases {
		o := good()
		c.mod(&o)
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
	o := good()
	o.Issuer = "http://127.0.0.1:4444"
	v, err := New(o)
	if err != nil {
		t.Fatalf("loopback http issuer refused: %v", err)
	}
	if v.opts.Skew != DefaultSkew || len(v.algs) != len(asymmetric) || v.opts.GroupsClaim != "groups" {
		t.Errorf("defaults: skew %v algs %v groups %q", v.opts.Skew, v.algs, v.opts.GroupsClaim)
	}
	v.Close()
}

func TestVerifyGoodTokens(t *testing.T) {
	iss, v := setup(t, authntest.Options{}, func(o *Options) { o.GroupsClaim = "ext.groups" })
	ctx := context.Background()
	for _, alg := range []string{"RS256", "ES256"} {
		c := iss.Claims("alice", aud, "https://other.example.com")
		c["ext"] = map[string]any{"groups": []any{"ops", "dev"}}
		tok := iss.Mint(t, c, MintOptions(alg))
		id, err := v.Verify(ctx, tok)
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if id.Subject != "alice" || id.Issuer != iss.URL || id.ClientID != "client-1" || id.Key() == "" || id.UID != -1 ||
			strings.Join(id.Groups, ",") != "ops,dev" || strings.Join(id.Scopes, ",") != "mcp" ||
			id.Expiry.Unix() != c["exp"].(int64) || id.Claims["jti"] != c["jti"] {
			t.Errorf("%s: identity %+v", alg, id)
		}
	}
	// Hydra's shapes: typ JWT or at+jwt or none at all; scp array, azp.
	c := iss.Claims("bob", aud)
	delete(c, "scope")
	delete(c, "client_id")
	c["scp"] = []any{"mcp:tools", "admin"}
	c["azp"] = "cli"
	for _, typ := range []any{"JWT", "at+jwt", "application/at+jwt", nil} {
		id, err := v.Verify(ctx, iss.Mint(t, c, authntest.MintOptions{Header: map[string]any{"typ": typ}}))
		if err != nil {
			t.Fatalf("typ %v: %v", typ, err)
		}
		if strings.Join(id.Scopes, " ") != "mcp:tools admin" || id.ClientID != "cli" {
			t.Errorf("typ %v: scopes %v client %q", typ, id.Scopes, id.ClientID)
		}
	}
	// A top-level groups string (default claim); no kid, and a single
	// key fits RS256.
	c = iss.Claims("carol", aud)
	c["groups"] = "ops"
	v4, err := New(Options{Issuer: iss.URL, Audiences: []string{aud}, HTTPClient: iss.Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer v4.Close()
	id, err := v4.Verify(ctx, iss.Mint(t, c, authntest.MintOptions{Kid: "-"}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(id.Groups, ",") != "ops" {
		t.Errorf("groups %v", id.Groups)
	}
}

// MintOptions picks the issuer's key for alg.
func MintOptions(alg string) authntest.MintOptions { return authntest.MintOptions{Alg: alg} }

// TestBadTokens is the bad-token matrix: each is refused with
// invalid_token and a description that holds nothing of the token.
func TestBadTokens(t *testing.T) {
	iss, v := setup(t, authntest.Options{}, func(o *Options) {
		o.Algorithms = []string{"RS256", "ES256"}
	})
	ctx := context.Background()
	now := time.Now()
	with := func(mod func(jwt.MapClaims)) jwt.MapClaims {
		c := iss.Claims("alice", aud)
		mod(c)
		return c
	}
	good := iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{})
	if _, err := v.Verify(ctx, good); err != nil {
		t.Fatalf("the good token: %v", err)
	}
	stranger := iss.NewKey(t, "RS256")
	ps := iss.NewKey(t, "PS256")
	iss.Publish(ps)
	cases := []struct {
		name, token, desc string
	}{
		{"expired", iss.Mint(t, with(func(c jwt.MapClaims) { c["exp"] = now.Add(-2 * time.Minute).Unix() }), authntest.MintOptions{}), "token expired"},
		{"no exp", iss.Mint(t, with(func(c jwt.MapClaims) { delete(c, "exp") }), authntest.MintOptions{}), "required claim"},
		{"not yet valid", iss.Mint(t, with(func(c jwt.MapClaims) { c["nbf"] = now.Add(2 * time.Minute).Unix() }), authntest.MintOptions{}), "not valid yet"},
		{"issued in the future", iss.Mint(t, with(func(c jwt.MapClaims) { c["iat"] = now.Add(2 * time.Minute).Unix() }), authntest.MintOptions{}), "issued in the future"},
		{"wrong audience", iss.Mint(t, iss.Claims("alice", "https://other.example.com/mcp"), authntest.MintOptions{}), "not for this resource"},
		{"no audience", iss.Mint(t, with(func(c jwt.MapClaims) { delete(c, "aud") }), authntest.MintOptions{}), "not for this resource"},
		{"wrong issuer", iss.Mint(t, with(func(c jwt.MapClaims) { c["iss"] = iss.URL + "/" }), authntest.MintOptions{}), "another issuer"},
		{"no issuer", iss.Mint(t, with(func(c jwt.MapClaims) { delete(c, "iss") }), authntest.MintOptions{}), "required claim"},
		{"no subject", iss.Mint(t, with(func(c jwt.MapClaims) { delete(c, "sub") }), authntest.MintOptions{}), "no subject"},
		{"alg none", authntest.NoneToken(iss.Claims("alice", aud)), "signature invalid"},
		{"HS256 signed with the public key", iss.HS256WithPublicKey(t, iss.Claims("alice", aud)), "signature invalid"},
		{"tampered payload", authntest.Tamper(good, iss.Claims("mallory", aud)), "signature invalid"},
		{"signed by a stranger under a known kid", iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Key: stranger, Kid: iss.RSA().Kid}), "signature invalid"},
		{"alg outside the allow-list", iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Key: ps}), "signature invalid"},
		{"RS256 header on the EC key", iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Key: iss.RSA(), Kid: iss.EC().Kid}), "does not fit its key"},
		{"id token typ", iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Header: map[string]any{"typ": "dpop+jwt"}}), "not an access token"},
		{"crit header", iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Header: map[string]any{"crit": []string{"exp"}}}), "critical"},
		{"not a JWT without introspection", "opaque-token-1234567890", "not a JWT"},
		{"garbage with two dots", "aaaaaaaaaa.bbbbbbbbbb.cccccccccc", "not a JWT"},
		{"JWT with a bad payload", "eyJhbGciOiJSUzI1NiJ9.!!!.cccccccccc", "malformed"},
		{"too long", strings.Repeat("a", MaxTokenLen+1), "too long"},
		{"empty", "", "no token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := v.Verify(ctx, c.token)
			if id != nil {
				t.Fatalf("accepted: %+v", id)
			}
			e := refused(t, err, CodeInvalidToken, c.token)
			if !strings.Contains(e.Description, c.desc) {
				t.Errorf("description %q, want %q", e.Description, c.desc)
			}
			if e.Status() != 401 {
				t.Errorf("status %d", e.Status())
			}
		})
	}
}

func TestAudienceTrailingSlashOnly(t *testing.T) {
	iss, v := setup(t, authntest.Options{}, func(o *Options) {
		o.Audiences = []string{aud, "https://mcp.example.com/servers/x/mcp/"}
	})
	ctx := context.Background()
	cases := []struct {
		aud any
		ok  bool
	}{
		{aud, true},
		{aud + "/", true},
		{"https://mcp.example.com/servers/x/mcp", true},
		{"https://mcp.example.com/servers/x/mcp/", true},
		{[]any{"https://a.example.com", aud}, true},
		{aud + "//", false},
		{"https://mcp.example.com/mc", false},
		{"https://mcp.example.com/", false},
		{aud + "x", false},
		{aud + "/x", false},
		{"https://MCP.example.com/mcp", false},
		{"https://mcp.example.com/MCP", false},
		{"http://mcp.example.com/mcp", false},
		{"https://mcp.example.com/servers/x", false},
		{"", false},
		{[]any{}, false},
		{[]any{42}, false},
	}
	for _, c := range cases {
		claims := iss.Claims("alice")
		claims["aud"] = c.aud
		_, err := v.Verify(ctx, iss.Mint(t, claims, authntest.MintOptions{}))
		if (err == nil) != c.ok {
			t.Errorf("aud %#v: err %v, want accepted=%v", c.aud, err, c.ok)
		}
	}
}

func TestSkewBounds(t *testing.T) {
	iss, v := setup(t, authntest.Options{}, func(o *Options) { o.Skew = 30 * time.Second })
	ctx := context.Background()
	for _, c := range []struct {
		exp, nbf time.Duration
		ok       bool
	}{
		{-20 * time.Second, -time.Hour, true},
		{-40 * time.Second, -time.Hour, false},
		{time.Hour, 20 * time.Second, true},
		{time.Hour, 40 * time.Second, false},
	} {
		claims := iss.Claims("alice", aud)
		claims["exp"] = time.Now().Add(c.exp).Unix()
		claims["nbf"] = time.Now().Add(c.nbf).Unix()
		claims["iat"] = time.Now().Add(-time.Hour).Unix()
		if _, err := v.Verify(ctx, iss.Mint(t, claims, authntest.MintOptions{})); (err == nil) != c.ok {
			t.Errorf("exp %v nbf %v: err %v, want accepted=%v", c.exp, c.nbf, err, c.ok)
		}
	}
}
