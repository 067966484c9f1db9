package oauthclient

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/oauthclient/oauthtest"
)

func TestLoginThroughChallenge(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true, ChallengeScope: []string{"mcp:basic"}}, Settings{})
	ctx := ctxT(t)
	if _, err := f.g.Token(ctx); !errors.Is(err, ErrNeedsLogin) {
		t.Fatalf("Token before login: %v", err)
	}
	wantNeedsLogin(t, f.challenge(), ReasonNoCredentials)
	if got := f.g.Info().State; got != StateNeedsLogin {
		t.Fatalf("state after a 401 = %q", got)
	}
	var changes []Info
	f.g.OnChange(func(i Info) { changes = append(changes, i) })
	info := f.mustLogin()
	if info.State != StateLoggedIn || info.Issuer != f.srv.Issuer || !info.Refreshable || info.Expiry.IsZero() {
		t.Fatalf("info = %+v", info)
	}
	if len(changes) == 0 || changes[len(changes)-1].State != StateLoggedIn {
		t.Fatalf("OnChange saw %+v", changes)
	}
	tok, err := f.g.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := f.get(tok); st != http.StatusOK {
		t.Fatalf("resource answered %d with the token", st)
	}
	a := lastAuthorize(t, f.srv)
	if a.Get("resource") != f.srv.URL || a.Get("scope") != "mcp:basic" || a.Get("code_challenge_method") != "S256" {
		t.Fatalf("authorize = %v", a)
	}
	tr := f.srv.TokenRequests()
	if len(tr) != 1 || tr[0].Form.Get("resource") != f.srv.URL || tr[0].Form.Get("code_verifier") == "" {
		t.Fatalf("token requests = %+v", tr)
	}
	regs := f.srv.Registrations()
	if len(regs) != 1 || regs[0]["application_type"] != "native" {
		t.Fatalf("registrations = %v", regs)
	}
	gt := fmt.Sprint(regs[0]["grant_types"])
	if !strings.Contains(gt, "refresh_token") || !strings.Contains(gt, "authorization_code") {
		t.Fatalf("grant_types = %s", gt)
	}
	if f.srv.Count("prm") != 1 {
		t.Fatalf("PRM fetched %d times, want 1 (from the challenge)", f.srv.Count("prm"))
	}
	r := f.stored()
	if r == nil || r.Tokens == nil || r.Clients[f.srv.Issuer] == nil || r.Tokens.Issuer != f.srv.Issuer {
		t.Fatalf("stored record = %+v", r)
	}
	// A new Grant on the same store uses the stored record.
	g2 := New(Settings{Resource: f.srv.URL}, f.store, nil, nil)
	tok2, err := g2.Token(ctx)
	if err != nil || tok2 != tok {
		t.Fatalf("reloaded Token = %v", err)
	}
	// Nothing printable holds a secret.
	for _, s := range []string{fmt.Sprint(info), fmt.Sprintf("%+v %#v", *info, *info), fmt.Sprintf("%v %+v %#v", f.g, f.g, f.g), fmt.Sprint(f.g.Info())} {
		f.noLeaks(s, "printed values")
	}
}

func TestTokenWithoutRecordUsesNoNetwork(t *testing.T) {
	f := newFixture(t, oauthtest.Options{}, Settings{})
	f.srv.Close()
	_, err := f.g.Token(ctxT(t))
	wantNeedsLogin(t, err, ReasonNoCredentials)
	if got := f.g.Info().State; got != StateNone {
		t.Fatalf("state = %q, want none before any challenge", got)
	}
}

func TestSettingsNeverPrintSecrets(t *testing.T) {
	s := Settings{Resource: "https://x/mcp", ClientID: "id", ClientSecret: "secret-hunter2", PrivateKeyPEM: []byte("secret-PEM")}
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%+v", s), fmt.Sprintf("%#v", s), fmt.Sprint(&s)} {
		if strings.Contains(out, "hunter2") || strings.Contains(out, "PEM") {
			t.Fatalf("Settings printed a secret: %s", out)
		}
	}
	g := New(s, &memStore{}, nil, nil)
	for _, out := range []string{fmt.Sprint(g), fmt.Sprintf("%+v", g), fmt.Sprintf("%#v", g)} {
		if strings.Contains(out, "hunter2") {
			t.Fatalf("Grant printed a secret: %s", out)
		}
	}
}

func TestDiscoveryOrders(t *testing.T) {
	cases := []struct {
		name string
		o    oauthtest.Options
	}{
		{"path PRM from the challenge, root AS metadata", oauthtest.Options{}},
		{"path PRM by well-known, OIDC metadata", oauthtest.Options{NoPRMInHeader: true, MetadataAt: oauthtest.MetadataOIDC}},
		{"root PRM, path-inserted AS metadata", oauthtest.Options{NoPRMInHeader: true, PRMAt: oauthtest.PRMRoot, IssuerPath: "/tenant1"}},
		{"root PRM, path-inserted OIDC", oauthtest.Options{NoPRMInHeader: true, PRMAt: oauthtest.PRMRoot, IssuerPath: "/tenant1", MetadataAt: oauthtest.MetadataOIDC}},
		{"custom PRM, OIDC appended to the issuer path", oauthtest.Options{PRMAt: oauthtest.PRMCustom, IssuerPath: "/tenant1", MetadataAt: oauthtest.MetadataOIDCAppended}},
		{"HTML catch-all pages are not documents", oauthtest.Options{NoPRMInHeader: true, PRMAt: oauthtest.PRMRoot, IssuerPath: "/tenant1", MetadataAt: oauthtest.MetadataOIDCAppended, HTMLCatchAll: true}},
		{"2025-03-26: no PRM, metadata at the origin", oauthtest.Options{PRMAt: oauthtest.PRMNone}},
		{"2025-03-26: no PRM, no metadata, default endpoints", oauthtest.Options{PRMAt: oauthtest.PRMNone, MetadataAt: oauthtest.MetadataNone}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c.o, Settings{})
			wantNeedsLogin(t, f.challenge(), ReasonNoCredentials)
			f.mustLogin()
			tok, err := f.g.Token(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if st, _ := f.get(tok); st != http.StatusOK {
				t.Fatalf("resource answered %d", st)
			}
			want := f.srv.Resource()
			if c.o.PRMAt == oauthtest.PRMNone {
				want = f.srv.URL
			}
			if got := lastAuthorize(t, f.srv).Get("resource"); got != want {
				t.Fatalf("resource on authorize = %q, want the PRM's %q", got, want)
			}
			if got := f.srv.TokenRequests()[0].Form.Get("resource"); got != want {
				t.Fatalf("resource on token = %q, want %q", got, want)
			}
			if c.o.PRMAt != oauthtest.PRMRoot && c.o.PRMAt != oauthtest.PRMNone && f.srv.Count("prm") != 1 {
				t.Fatalf("PRM fetched %d times", f.srv.Count("prm"))
			}
		})
	}
}

// refused asserts that a login attempt failed with msg, stored nothing and
// (when noAuthorize) never reached the authorization endpoint.
func refused(t *testing.T, f *fixture, err error, msg string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), msg) {
		t.Fatalf("err = %v, want one saying %q", err, msg)
	}
	f.noLeaks(err.Error(), "the error")
	if _, saves := f.store.get(); saves != 0 {
		t.Fatalf("%d saves after a refused login", saves)
	}
	if _, terr := f.g.Token(ctxT(t)); !errors.Is(terr, ErrNeedsLogin) {
		t.Fatalf("Token after a refused login: %v", terr)
	}
}

func TestBadDiscoveryIsRefused(t *testing.T) {
	cases := []struct {
		name string
		o    oauthtest.Options
		s    Settings
		msg  string
	}{
		{"PRM names another resource", oauthtest.Options{PRMResource: "https://evil.example.com/mcp"}, Settings{}, "names another resource"},
		{"metadata names another issuer", oauthtest.Options{MetadataIssuer: "https://attacker.example.com"}, Settings{}, `names issuer "https://attacker.example.com"`},
		{"metadata issuer differs by a slash", oauthtest.Options{IssuerPath: "/t"}, Settings{}, ""},
		{"no PKCE advertised", oauthtest.Options{NoPKCEAdvertised: true}, Settings{}, "does not advertise PKCE"},
		{"oversized metadata", oauthtest.Options{OversizedMetadata: true}, Settings{}, "larger than 1048576 bytes"},
		{"slow metadata", oauthtest.Options{MetadataDelay: 5 * time.Second}, Settings{Timeout: 200 * time.Millisecond}, "timed out"},
		{"no way to identify the client", oauthtest.Options{NoRegistration: true}, Settings{}, "offers no dynamic client registration"},
		{"registration refused", oauthtest.Options{RegistrationError: 400}, Settings{}, "client registration at"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := oauthtest.New(t, c.o)
			if c.msg == "" { // issuer with a trailing slash in the document
				srv.Set(func(o *oauthtest.Options) { o.MetadataIssuer = srv.Issuer + "/" })
				c.msg = "names issuer"
			}
			f := newFixtureFor(t, srv, c.s)
			_ = f.challenge()
			start := time.Now()
			_, err := f.login()
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("refusal took %v", d)
			}
			refused(t, f, err, c.msg)
			if n := f.srv.Count("authorize"); n != 0 {
				t.Fatalf("%d authorization requests", n)
			}
			if c.name != "registration refused" && f.srv.Count("register") != 0 {
				t.Fatalf("registered with a refused server")
			}
		})
	}
}

func TestUnreachableAuthorizationServer(t *testing.T) {
	f := newFixture(t, oauthtest.Options{}, Settings{})
	_ = f.challenge()
	f.srv.AS.Close()
	_, err := f.login()
	refused(t, f, err, "authorization server metadata: GET "+f.srv.AS.URL)
}

func TestBadTokenEndpointAnswers(t *testing.T) {
	cases := []struct {
		name string
		set  func(*oauthtest.Options)
		msg  string
	}{
		{"5xx", func(o *oauthtest.Options) { o.TokenStatus, o.TokenError = 503, "temporarily_unavailable" }, "HTTP 503: temporarily_unavailable"},
		{"4xx", func(o *oauthtest.Options) { o.TokenStatus, o.TokenError = 400, "invalid_request" }, "HTTP 400: invalid_request"},
		{"redirect", func(o *oauthtest.Options) { o.TokenRedirect = true }, "redirects are not followed"},
		{"slow", func(o *oauthtest.Options) { o.TokenDelay = 5 * time.Second }, "timed out"},
		{"tampered code", func(o *oauthtest.Options) { o.TamperCode = true }, "invalid_grant"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, oauthtest.Options{}, Settings{Timeout: 300 * time.Millisecond})
			f.srv.Set(c.set)
			_, err := f.login()
			refused(t, f, err, c.msg)
		})
	}
}

func TestPKCEMismatchIsRefused(t *testing.T) {
	f := newFixture(t, oauthtest.Options{}, Settings{})
	ctx := ctxT(t)
	fl, err := f.g.Begin(ctx, redirectURI)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := f.srv.Approve(fl.AuthURL)
	if err != nil {
		t.Fatal(err)
	}
	f.g.mu.Lock()
	f.g.flows[fl.ID].verifier = strings.Repeat("x", 43)
	f.g.mu.Unlock()
	_, err = f.g.Complete(ctx, fl.ID, cb)
	refused(t, f, err, "PKCE verification failed")
}

func TestTamperedStateIsRefused(t *testing.T) {
	f := newFixture(t, oauthtest.Options{TamperState: true}, Settings{})
	_, err := f.login()
	refused(t, f, err, "state does not match")
	if f.srv.Count("token") != 0 {
		t.Fatal("code exchanged despite a bad state")
	}
}

func TestIssTable(t *testing.T) {
	cases := []struct {
		noAdvert bool
		iss      string
		ok       bool
	}{
		{false, oauthtest.IssCorrect, true},
		{false, oauthtest.IssOmit, false},
		{false, oauthtest.IssWrong, false},
		{false, oauthtest.IssNormalized, false},
		{true, oauthtest.IssOmit, true},
		{true, oauthtest.IssCorrect, true},
		{true, oauthtest.IssWrong, false},
		{true, oauthtest.IssNormalized, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("advertised=%t/iss=%q", !c.noAdvert, c.iss), func(t *testing.T) {
			f := newFixture(t, oauthtest.Options{NoIssAdvertised: c.noAdvert, Iss: c.iss}, Settings{})
			_, err := f.login()
			if c.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			refused(t, f, err, "iss")
			if f.srv.Count("token") != 0 {
				t.Fatal("the token endpoint was called")
			}
		})
	}
}

func TestAuthorizationErrorIsShownOnlyFromTheIssuer(t *testing.T) {
	f := newFixture(t, oauthtest.Options{AuthorizeError: "access_denied", AuthorizeErrorDesc: "the user said\nno"}, Settings{})
	_, err := f.login()
	refused(t, f, err, "refused the login: access_denied: the user said no")

	f = newFixture(t, oauthtest.Options{AuthorizeError: "access_denied", AuthorizeErrorDesc: "click evil.example", Iss: oauthtest.IssWrong}, Settings{})
	_, err = f.login()
	refused(t, f, err, "comes from issuer")
	if strings.Contains(err.Error(), "evil.example/") || strings.Contains(err.Error(), "click") || strings.Contains(err.Error(), "access_denied") {
		t.Fatalf("an error from a mismatched issuer was shown: %v", err)
	}
}

func TestFlowsAreSingleUseExpiringAndBounded(t *testing.T) {
	f := newFixture(t, oauthtest.Options{}, Settings{})
	ctx := ctxT(t)
	fl, err := f.g.Begin(ctx, redirectURI)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(fl.Expires); d < 9*time.Minute || d > 10*time.Minute {
		t.Fatalf("flow expires in %v", d)
	}
	cb, _ := f.srv.Approve(fl.AuthURL)
	if _, err := f.g.Complete(ctx, fl.ID, cb); err != nil {
		t.Fatal(err)
	}
	if _, err := f.g.Complete(ctx, fl.ID, cb); err == nil || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("second Complete: %v", err)
	}
	// Expired.
	fl2, _ := f.g.Begin(ctx, redirectURI)
	f.g.mu.Lock()
	f.g.flows[fl2.ID].expires = time.Now().Add(-time.Second)
	f.g.mu.Unlock()
	cb2, _ := f.srv.Approve(fl2.AuthURL)
	if _, err := f.g.Complete(ctx, fl2.ID, cb2); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired Complete: %v", err)
	}
	// Cancelled.
	fl3, _ := f.g.Begin(ctx, redirectURI)
	f.g.Cancel(fl3.ID)
	if _, err := f.g.Complete(ctx, fl3.ID, nil); err == nil {
		t.Fatal("Complete after Cancel succeeded")
	}
	// Bounded.
	for range MaxFlows + 5 {
		if _, err := f.g.Begin(ctx, redirectURI); err != nil {
			t.Fatal(err)
		}
	}
	f.g.mu.Lock()
	n := len(f.g.flows)
	f.g.mu.Unlock()
	if n > MaxFlows {
		t.Fatalf("%d flows kept", n)
	}
	// Bad redirect URIs.
	if _, err := f.g.Begin(ctx, "http://example.com/cb"); err == nil {
		t.Fatal("a plain-http non-loopback redirect URI was accepted")
	}
}

func TestClientIdentityPriority(t *testing.T) {
	const cimd = "https://app.example.com/mcpvisor.json"
	cases := []struct {
		name     string
		o        oauthtest.Options
		s        Settings
		clientID string // "" means a DCR-issued one
		register bool
	}{
		{"pre-registered first", oauthtest.Options{CIMD: true, ClientID: "pre", ClientSecret: "secret-pre"},
			Settings{ClientID: "pre", ClientSecret: "secret-pre", ClientMetadataURL: cimd}, "pre", false},
		{"CIMD when advertised", oauthtest.Options{CIMD: true}, Settings{ClientMetadataURL: cimd}, cimd, false},
		{"DCR when CIMD is not advertised", oauthtest.Options{}, Settings{ClientMetadataURL: cimd}, "", true},
		{"DCR without configuration", oauthtest.Options{CIMD: true}, Settings{}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c.o, c.s)
			info := f.mustLogin()
			got := lastAuthorize(t, f.srv).Get("client_id")
			if c.clientID != "" && got != c.clientID {
				t.Fatalf("client_id = %q, want %q", got, c.clientID)
			}
			if c.clientID == "" && !strings.HasPrefix(got, "client-") {
				t.Fatalf("client_id = %q, want a registered one", got)
			}
			if info.ClientID != got {
				t.Fatalf("info client id %q", info.ClientID)
			}
			if (f.srv.Count("register") == 1) != c.register {
				t.Fatalf("%d registrations", f.srv.Count("register"))
			}
			if c.clientID == "pre" && f.srv.TokenRequests()[0].Authorization == "" {
				t.Fatal("the pre-registered secret was not sent with Basic")
			}
		})
	}
	// A DCR registration is reused for the same issuer and redirect URI.
	f := newFixture(t, oauthtest.Options{}, Settings{})
	f.mustLogin()
	f.mustLogin()
	if f.srv.Count("register") != 1 {
		t.Fatalf("%d registrations for two logins", f.srv.Count("register"))
	}
}

func TestTokenEndpointAuthFromRegistration(t *testing.T) {
	for _, m := range []string{AuthClientSecretBasic, AuthClientSecretPost, AuthNone} {
		t.Run(m, func(t *testing.T) {
			f := newFixture(t, oauthtest.Options{AuthMethods: []string{m}}, Settings{})
			f.mustLogin()
			trs := f.srv.TokenRequests()
			if len(trs) != 1 {
				t.Fatalf("%d token requests (auto-detection?)", len(trs))
			}
			tr := trs[0]
			basic := strings.HasPrefix(tr.Authorization, "Basic ")
			post := tr.Form.Get("client_secret") != ""
			if basic != (m == AuthClientSecretBasic) || post != (m == AuthClientSecretPost) {
				t.Fatalf("method %s: basic=%t post=%t", m, basic, post)
			}
		})
	}
}

func TestScopeSelection(t *testing.T) {
	cases := []struct {
		name string
		o    oauthtest.Options
		s    Settings
		want string
	}{
		{"from the challenge", oauthtest.Options{ChallengeScope: []string{"mcp:basic"}, PRMScopes: []string{"mcp:other"}}, Settings{}, "mcp:basic"},
		{"from scopes_supported", oauthtest.Options{PRMScopes: []string{"mcp:basic", "mcp:read", "mcp:write"}}, Settings{}, "mcp:basic mcp:read mcp:write"},
		{"omitted when undefined", oauthtest.Options{}, Settings{}, ""},
		{"configured", oauthtest.Options{ChallengeScope: []string{"mcp:basic"}}, Settings{Scopes: []string{"a", "b"}}, "a b"},
		{"offline_access when advertised", oauthtest.Options{PRMScopes: []string{"mcp:basic"}, ScopesSupported: []string{"mcp:basic", "offline_access"}}, Settings{}, "mcp:basic offline_access"},
		{"no offline_access when not advertised", oauthtest.Options{PRMScopes: []string{"mcp:basic"}, ScopesSupported: []string{"mcp:basic", "mcp:read"}}, Settings{}, "mcp:basic"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c.o, c.s)
			_ = f.challenge()
			f.mustLogin()
			a := lastAuthorize(t, f.srv)
			if _, has := a["scope"]; c.want == "" && has {
				t.Fatalf("scope sent: %q", a.Get("scope"))
			}
			if a.Get("scope") != c.want {
				t.Fatalf("scope = %q, want %q", a.Get("scope"), c.want)
			}
		})
	}
}

func TestStepUpUnionAndLimit(t *testing.T) {
	f := newFixture(t, oauthtest.Options{ChallengeScope: []string{"mcp:basic"}, RequiredScopes: []string{"mcp:write"}, PRMScopes: []string{"mcp:profile"}}, Settings{})
	ctx := ctxT(t)
	_ = f.challenge()
	f.mustLogin()
	tok, _ := f.g.Token(ctx)
	st, www := f.get(tok)
	if st != http.StatusForbidden {
		t.Fatalf("status %d", st)
	}
	retry, err := f.g.ChallengedToken(ctx, tok, st, www)
	nl := wantNeedsLogin(t, err, "insufficient scope: mcp:write")
	if retry || !slices.Equal(nl.Scope, []string{"mcp:basic", "mcp:write"}) {
		t.Fatalf("retry=%t scope=%v", retry, nl.Scope)
	}
	// The current token still serves other operations.
	if tok2, err := f.g.Token(ctx); err != nil || tok2 != tok {
		t.Fatalf("Token during a step-up: %v", err)
	}
	f.mustLogin()
	if got := lastAuthorize(t, f.srv).Get("scope"); got != "mcp:basic mcp:write" {
		t.Fatalf("step-up scope = %q, want the union", got)
	}
	tok, _ = f.g.Token(ctx)
	if st, _ := f.get(tok); st != http.StatusOK {
		t.Fatalf("after step-up: %d", st)
	}

	// Many requests refused before the next login count as one step-up.
	f.srv.Set(func(o *oauthtest.Options) { o.RequiredScopes = []string{"mcp:admin"} })
	for range 5 {
		st, www := f.get(tok)
		_, err := f.g.ChallengedToken(ctx, tok, st, www)
		wantNeedsLogin(t, err, "insufficient scope: mcp:admin")
	}

	// A server that is never satisfied: at most three authorizations.
	f = newFixture(t, oauthtest.Options{AlwaysForbid: []string{"mcp:admin"}}, Settings{})
	_ = f.challenge()
	var lastErr error
	for range 10 {
		if _, err := f.login(); err != nil {
			t.Fatal(err)
		}
		tok, _ := f.g.Token(ctx)
		st, www := f.get(tok)
		_, lastErr = f.g.Challenged(ctx, st, www)
		if !errors.Is(lastErr, ErrNeedsLogin) {
			break
		}
	}
	if !errors.Is(lastErr, ErrScopeRetryLimit) {
		t.Fatalf("last error = %v", lastErr)
	}
	if n := f.srv.Count("authorize"); n > 3 {
		t.Fatalf("%d authorizations", n)
	}
}

func TestAuthorizationServerMigration(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true}, Settings{})
	ctx := ctxT(t)
	_ = f.challenge()
	f.mustLogin()
	oldClient := f.g.Info().ClientID
	tok, _ := f.g.Token(ctx)
	as2 := oauthtest.New(t, oauthtest.Options{})
	f.srv.Set(func(o *oauthtest.Options) { o.AuthorizationServers = []string{as2.Issuer} })
	f.srv.RevokeAll()
	st, www := f.get(tok)
	_, err := f.g.ChallengedToken(ctx, tok, st, www)
	wantNeedsLogin(t, err, ReasonASChanged)
	if f.srv.Count("refresh") != 0 {
		t.Fatal("refreshed at the old authorization server")
	}
	if _, err := f.g.Token(ctx); !errors.Is(err, ErrNeedsLogin) {
		t.Fatalf("Token after the change: %v", err)
	}
	fl, err := f.g.Begin(ctx, redirectURI)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(fl.AuthURL, as2.Issuer+"/authorize") || as2.Count("register") != 1 {
		t.Fatalf("login went to %s with %d registrations at the new server", fl.AuthURL, as2.Count("register"))
	}
	cb, _ := as2.Approve(fl.AuthURL)
	info, err := f.g.Complete(ctx, fl.ID, cb)
	if err != nil {
		t.Fatal(err)
	}
	if info.Issuer != as2.Issuer || info.ClientID == oldClient {
		t.Fatalf("info after migration %+v", info)
	}
	for _, a := range as2.Authorizations() {
		if a.Get("client_id") == oldClient {
			t.Fatal("the old server's client id reached the new server")
		}
	}
	r := f.stored()
	if r.Clients[f.srv.Issuer] == nil || r.Clients[as2.Issuer] == nil {
		t.Fatalf("registrations are not kept per issuer: %v", r.Clients)
	}
}

func TestLogoutRevokes(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true, Revocation: true}, Settings{})
	ctx := ctxT(t)
	f.mustLogin()
	tok, _ := f.g.Token(ctx)
	var last Info
	f.g.OnChange(func(i Info) { last = i })
	if revoked, err := f.g.Logout(ctx); err != nil || !revoked {
		t.Fatalf("Logout: revoked %v, %v", revoked, err)
	}
	rv := f.srv.Revocations()
	if len(rv) != 2 || rv[0].Get("token_type_hint") != "refresh_token" || rv[1].Get("token_type_hint") != "access_token" || rv[1].Get("token") != tok {
		t.Fatalf("revocations = %d", len(rv))
	}
	if f.srv.Valid(tok) {
		t.Fatal("the access token is still valid")
	}
	if b, _ := f.store.get(); b != nil || last.State != StateNone || f.g.Info().State != StateNone {
		t.Fatalf("after logout: stored=%t state=%q", b != nil, last.State)
	}

	// A failed revocation is reported; the record goes anyway.
	f = newFixture(t, oauthtest.Options{RefreshTokens: true, Revocation: true}, Settings{Timeout: time.Second})
	f.mustLogin()
	f.srv.AS.Close()
	revoked, err := f.g.Logout(ctx)
	if revoked || err == nil || !strings.Contains(err.Error(), "revoking the refresh token") {
		t.Fatalf("Logout with an unreachable server: %v", err)
	}
	f.noLeaks(err.Error(), "the error")
	if b, _ := f.store.get(); b != nil {
		t.Fatal("the record was kept")
	}
}

// A server without revocation: logged out, nothing revoked, no error.
func TestLogoutWithoutRevocation(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true}, Settings{})
	f.mustLogin()
	revoked, err := f.g.Logout(ctxT(t))
	if revoked || err != nil || f.g.Info().State != StateNone {
		t.Fatalf("Logout: revoked %v, %v, state %q", revoked, err, f.g.Info().State)
	}
	if n := len(f.srv.Revocations()); n != 0 {
		t.Fatalf("%d revocations", n)
	}
}

func TestSubjectFromIDToken(t *testing.T) {
	f := newFixture(t, oauthtest.Options{IDTokenClaims: map[string]any{"sub": "u-123", "email": "ada@example.com"}}, Settings{})
	if info := f.mustLogin(); info.Subject != "ada@example.com" {
		t.Fatalf("subject %q", info.Subject)
	}
	f = newFixture(t, oauthtest.Options{IDTokenClaims: map[string]any{"sub": "u-123\x1b[31m"}}, Settings{})
	if info := f.mustLogin(); info.Subject != "u-123 [31m" {
		t.Fatalf("subject %q", info.Subject)
	}
}

func TestPreRegisteredClientIsBoundToItsIssuer(t *testing.T) {
	f := newFixture(t, oauthtest.Options{ClientID: "pre", ClientSecret: "secret-pre"}, Settings{ClientID: "pre", ClientSecret: "secret-pre"})
	f.mustLogin()
	as2 := oauthtest.New(t, oauthtest.Options{ClientID: "pre", ClientSecret: "secret-pre"})
	f.srv.Set(func(o *oauthtest.Options) { o.AuthorizationServers = []string{as2.Issuer} })
	_, err := f.g.Begin(ctxT(t), redirectURI)
	if err == nil || !strings.Contains(err.Error(), "authorization server changed") || strings.Contains(err.Error(), "secret-pre") {
		t.Fatalf("Begin after the change: %v", err)
	}
	if as2.Count("authorize")+as2.Count("token") != 0 {
		t.Fatal("the pre-registered client reached the new server")
	}
}
