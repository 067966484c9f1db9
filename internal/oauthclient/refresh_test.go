package oauthclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpvisor/mcpvisor/internal/oauthclient/oauthtest"
)

// expireSoon makes the current token due for refresh.
func (f *fixture) expireSoon() {
	f.g.mu.Lock()
	f.g.rec.Tokens.Obtained = time.Now().Add(-time.Hour)
	f.g.rec.Tokens.Expiry = time.Now().Add(time.Second)
	f.g.mu.Unlock()
}

func TestRefreshIsSingleFlight(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true}, Settings{})
	ctx := ctxT(t)
	f.mustLogin()
	old, _ := f.g.Token(ctx)
	f.expireSoon()
	f.srv.Set(func(o *oauthtest.Options) { o.TokenDelay = 200 * time.Millisecond })
	const n = 20
	toks := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { toks[i], errs[i] = f.g.Token(ctx) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if toks[i] == old || toks[i] != toks[0] {
			t.Fatalf("caller %d got another token", i)
		}
	}
	if got := f.srv.Count("refresh"); got != 1 {
		t.Fatalf("%d refresh requests for %d callers, want 1", got, n)
	}
	if st, _ := f.get(toks[0]); st != http.StatusOK {
		t.Fatalf("refreshed token refused: %d", st)
	}
}

func TestRefreshWaitIsBoundedByTheCallersContext(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true}, Settings{})
	f.mustLogin()
	f.g.mu.Lock()
	f.g.rec.Tokens.Expiry = time.Now().Add(-time.Second) // expired: no fallback to the old token
	f.g.mu.Unlock()
	f.srv.Set(func(o *oauthtest.Options) { o.TokenDelay = 2 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.g.Token(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("Token = %v after %v", err, time.Since(start))
	}
	// The refresh itself goes on for the other callers and completes.
	tok, err := f.g.Token(ctxT(t))
	if err != nil || f.srv.Count("refresh") != 1 {
		t.Fatalf("second caller: %v, %d refreshes", err, f.srv.Count("refresh"))
	}
	if st, _ := f.get(tok); st != http.StatusOK {
		t.Fatal("refreshed token refused")
	}
}

func TestRotatedRefreshTokenIsSavedBeforeUse(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true}, Settings{})
	ctx := ctxT(t)
	f.mustLogin()
	before := f.stored().Tokens
	var savedAccess, savedRefresh []string
	f.store.onSave = func(b []byte) {
		r := &record{}
		_ = json.Unmarshal(b, r)
		savedAccess = append(savedAccess, r.Tokens.Access)
		savedRefresh = append(savedRefresh, r.Tokens.Refresh)
	}
	f.expireSoon()
	tok, err := f.g.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(savedAccess) != 1 || savedAccess[0] != tok || savedRefresh[0] == before.Refresh || savedRefresh[0] == "" {
		t.Fatalf("saves %d; rotated refresh token saved: %t", len(savedAccess), len(savedRefresh) == 1 && savedRefresh[0] != before.Refresh)
	}
	trs := f.srv.TokenRequests()
	last := trs[len(trs)-1].Form
	if last.Get("grant_type") != "refresh_token" || last.Get("resource") != f.srv.URL {
		t.Fatalf("refresh request lacks resource: %v", last.Get("resource"))
	}
	// The next refresh uses the rotated token (the old one is spent).
	f.expireSoon()
	if _, err := f.g.Token(ctx); err != nil {
		t.Fatalf("second refresh: %v", err)
	}
}

func TestRefreshSaveFailureKeepsTheOldRecord(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true}, Settings{})
	ctx := ctxT(t)
	f.mustLogin()
	stored, _ := f.store.get()
	old, _ := f.g.Token(ctx)
	f.g.mu.Lock()
	f.g.rec.Tokens.Expiry = time.Now().Add(-time.Second)
	oldRefresh := f.g.rec.Tokens.Refresh
	f.g.mu.Unlock()
	f.store.failSave = errors.New("disk full")
	tok, err := f.g.Token(ctx)
	if err == nil || !strings.Contains(err.Error(), "disk full") || tok != "" {
		t.Fatalf("Token handed out a token: %t, %v; want the save error and no token", tok != "", err)
	}
	f.noLeaks(err.Error(), "the error")
	now, _ := f.store.get()
	f.g.mu.Lock()
	kept := f.g.rec.Tokens.Refresh == oldRefresh && f.g.rec.Tokens.Access == old
	f.g.mu.Unlock()
	if string(now) != string(stored) || !kept {
		t.Fatal("the old record was not kept")
	}
}

func TestRefreshInvalidGrantNeedsLogin(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true}, Settings{})
	ctx := ctxT(t)
	f.mustLogin()
	var last Info
	f.g.OnChange(func(i Info) { last = i })
	f.g.mu.Lock()
	f.g.rec.Tokens.Expiry = time.Now().Add(-time.Second)
	f.g.mu.Unlock()
	f.srv.Set(func(o *oauthtest.Options) { o.RefreshError = "invalid_grant" })
	_, err := f.g.Token(ctx)
	wantNeedsLogin(t, err, ReasonRefreshRejected)
	if r := f.stored(); r.Tokens != nil || len(r.Clients) != 1 {
		t.Fatal("tokens kept (or the registration dropped) after invalid_grant")
	}
	if last.State != StateNeedsLogin || last.Reason != ReasonRefreshRejected || f.g.Info().State != StateNeedsLogin {
		t.Fatalf("info = %+v", last)
	}
	// No further refresh attempt: needs login at once.
	_, err = f.g.Token(ctx)
	wantNeedsLogin(t, err, ReasonRefreshRejected)
	if f.srv.Count("refresh") != 1 {
		t.Fatalf("%d refreshes", f.srv.Count("refresh"))
	}
}

func TestTransientRefreshFailureKeepsAValidToken(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true}, Settings{})
	ctx := ctxT(t)
	f.mustLogin()
	old, _ := f.g.Token(ctx)
	f.expireSoon()
	f.srv.Set(func(o *oauthtest.Options) { o.TokenStatus, o.TokenError = 503, "temporarily_unavailable" })
	tok, err := f.g.Token(ctx)
	if err != nil || tok != old {
		t.Fatalf("Token = %v", err)
	}
}

func TestUnauthorizedRefreshesAndRetriesOnce(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true}, Settings{})
	ctx := ctxT(t)
	f.mustLogin()
	tok, _ := f.g.Token(ctx)
	f.srv.ExpireAccessTokens()
	st, www := f.get(tok)
	retry, err := f.g.ChallengedToken(ctx, tok, st, www)
	if !retry || err != nil {
		t.Fatalf("retry=%t err=%v", retry, err)
	}
	// A late 401 for the old token does not refresh again.
	if retry, err := f.g.ChallengedToken(ctx, tok, st, www); !retry || err != nil || f.srv.Count("refresh") != 1 {
		t.Fatalf("late 401: retry=%t err=%v refreshes=%d", retry, err, f.srv.Count("refresh"))
	}
	tok2, _ := f.g.Token(ctx)
	if st, _ := f.get(tok2); st != http.StatusOK {
		t.Fatalf("after refresh: %d", st)
	}
	// The fresh token refused too: a login is needed, no refresh loop.
	f.srv.ExpireAccessTokens()
	st, www = f.get(tok2)
	_, err = f.g.ChallengedToken(ctx, tok2, st, www)
	wantNeedsLogin(t, err, ReasonTokenRejected)
	if f.srv.Count("refresh") != 1 {
		t.Fatalf("%d refreshes", f.srv.Count("refresh"))
	}
	// Statuses that are not auth challenges are not its business.
	if retry, err := f.g.Challenged(ctx, http.StatusForbidden, `Bearer error="access_denied"`); retry || err != nil {
		t.Fatalf("plain 403: %t %v", retry, err)
	}
}

// A token a 401 brought, once a request with it worked (Accepted), is an
// ordinary token: its own 401, later, refreshes again instead of asking
// for a login.
func TestAcceptedTokenRefreshesAgain(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true}, Settings{})
	ctx := ctxT(t)
	f.mustLogin()
	tok, _ := f.g.Token(ctx)
	f.srv.ExpireAccessTokens()
	st, www := f.get(tok)
	if retry, err := f.g.ChallengedToken(ctx, tok, st, www); !retry || err != nil {
		t.Fatalf("first 401: retry=%t err=%v", retry, err)
	}
	tok2, _ := f.g.Token(ctx)
	if st, _ := f.get(tok2); st != http.StatusOK {
		t.Fatalf("after refresh: %d", st)
	}
	f.g.Accepted(tok2)
	f.srv.ExpireAccessTokens()
	st, www = f.get(tok2)
	if retry, err := f.g.ChallengedToken(ctx, tok2, st, www); !retry || err != nil || f.srv.Count("refresh") != 2 {
		t.Fatalf("401 of an accepted token: retry=%t err=%v refreshes=%d", retry, err, f.srv.Count("refresh"))
	}
	f.g.Accepted("another") // not the token a 401 brought: nothing changes
}

func TestClientCredentialsBasic(t *testing.T) {
	f := newFixture(t, oauthtest.Options{ClientID: "cc-client", ClientSecret: "secret-cc", AuthMethods: []string{"client_secret_basic"}},
		Settings{Grant: GrantClientCredentials, ClientID: "cc-client", ClientSecret: "secret-cc"})
	ctx := ctxT(t)
	tok, err := f.g.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := f.get(tok); st != http.StatusOK {
		t.Fatalf("resource: %d", st)
	}
	tr := f.srv.TokenRequests()[0]
	if tr.Form.Get("grant_type") != "client_credentials" || !strings.HasPrefix(tr.Authorization, "Basic ") ||
		tr.Form.Get("client_secret") != "" || tr.Form.Get("resource") != f.srv.URL {
		t.Fatalf("token request: basic=%t resource=%q", strings.HasPrefix(tr.Authorization, "Basic "), tr.Form.Get("resource"))
	}
	if f.srv.Count("authorize") != 0 {
		t.Fatal("an authorization request for client credentials")
	}
	if i := f.g.Info(); i.State != StateClientCredentials || i.Expiry.IsZero() {
		t.Fatalf("info %+v", i)
	}
	// A 401 fetches a new token, once.
	f.srv.ExpireAccessTokens()
	st, www := f.get(tok)
	if retry, err := f.g.ChallengedToken(ctx, tok, st, www); !retry || err != nil {
		t.Fatalf("retry=%t err=%v", retry, err)
	}
	tok2, _ := f.g.Token(ctx)
	if tok2 == tok || f.srv.Count("client-credentials") != 2 {
		t.Fatal("no new token after a 401")
	}
	// A wrong secret is a clear error and stores nothing new.
	f2 := newFixture(t, oauthtest.Options{ClientID: "cc-client", ClientSecret: "secret-cc"},
		Settings{Grant: GrantClientCredentials, ClientID: "cc-client", ClientSecret: "secret-wrong"})
	_, err = f2.g.Token(ctx)
	if err == nil || !strings.Contains(err.Error(), "invalid_client") {
		t.Fatalf("wrong secret: %v", err)
	}
	f2.noLeaks(err.Error(), "the error")
	if _, saves := f2.store.get(); saves != 0 {
		t.Fatal("saved after a refused grant")
	}
	if _, err := f2.g.Begin(ctx, redirectURI); err == nil {
		t.Fatal("Begin for a client credentials grant")
	}
}

func ecKey(t *testing.T) (*ecdsa.PrivateKey, []byte) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func TestClientCredentialsPrivateKeyJWT(t *testing.T) {
	k, pemKey := ecKey(t)
	f := newFixture(t, oauthtest.Options{ClientID: "cc-client", ClientPublicKey: &k.PublicKey, AuthMethods: []string{"private_key_jwt"}, SigningAlgs: []string{"ES256"}},
		Settings{Grant: GrantClientCredentials, ClientID: "cc-client", PrivateKeyPEM: pemKey})
	ctx := ctxT(t)
	tok, err := f.g.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := f.get(tok); st != http.StatusOK {
		t.Fatalf("resource: %d", st)
	}
	// Check the assertion as the suite does.
	form := f.srv.TokenRequests()[0].Form
	if form.Get("client_id") != "" || form.Get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" {
		t.Fatalf("form has client_id %q, type %q", form.Get("client_id"), form.Get("client_assertion_type"))
	}
	var c jwt.RegisteredClaims
	if _, err := jwt.ParseWithClaims(form.Get("client_assertion"), &c, func(*jwt.Token) (any, error) { return &k.PublicKey, nil },
		jwt.WithValidMethods([]string{"ES256"})); err != nil {
		t.Fatal(err)
	}
	if c.Issuer != "cc-client" || c.Subject != "cc-client" || len(c.Audience) != 1 || c.Audience[0] != f.srv.Issuer ||
		c.ID == "" || c.ExpiresAt.Sub(c.IssuedAt.Time) > time.Minute {
		t.Fatalf("claims %+v", c)
	}
	// Another fetch: a fresh jti (the fake AS refuses a reused one).
	f.srv.ExpireAccessTokens()
	st, www := f.get(tok)
	if retry, err := f.g.ChallengedToken(ctx, tok, st, www); !retry || err != nil {
		t.Fatalf("second fetch: %v", err)
	}
	// A key the AS does not know.
	_, other := ecKey(t)
	f2 := newFixture(t, oauthtest.Options{ClientID: "cc-client", ClientPublicKey: &k.PublicKey},
		Settings{Grant: GrantClientCredentials, ClientID: "cc-client", PrivateKeyPEM: other})
	if _, err := f2.g.Token(ctx); err == nil || !strings.Contains(err.Error(), "invalid_client") {
		t.Fatalf("unknown key: %v", err)
	}
	// An algorithm the AS does not accept.
	f3 := newFixture(t, oauthtest.Options{ClientID: "cc-client", ClientPublicKey: &k.PublicKey, SigningAlgs: []string{"RS256"}},
		Settings{Grant: GrantClientCredentials, ClientID: "cc-client", PrivateKeyPEM: pemKey})
	if _, err := f3.g.Token(ctx); err == nil || !strings.Contains(err.Error(), "not ES256") {
		t.Fatalf("unaccepted algorithm: %v", err)
	}
	// Not a key.
	f4 := newFixture(t, oauthtest.Options{}, Settings{Grant: GrantClientCredentials, ClientID: "cc-client", PrivateKeyPEM: []byte("secret-garbage")})
	if _, err := f4.g.Token(ctx); err == nil || !strings.Contains(err.Error(), "not a PEM") || strings.Contains(err.Error(), "garbage") {
		t.Fatalf("bad key: %v", err)
	}
}

func TestPreRegisteredPrivateKeyJWTLogin(t *testing.T) {
	k, pemKey := ecKey(t)
	f := newFixture(t, oauthtest.Options{ClientID: "pre", ClientPublicKey: &k.PublicKey, RefreshTokens: true},
		Settings{ClientID: "pre", PrivateKeyPEM: pemKey})
	f.mustLogin()
	f.expireSoon()
	if _, err := f.g.Token(ctxT(t)); err != nil { // the refresh authenticates with a new assertion
		t.Fatal(err)
	}
	for _, tr := range f.srv.TokenRequests() {
		if tr.Form.Get("client_assertion") == "" {
			t.Fatal("a token request without a client assertion")
		}
	}
}

func TestLogoutDuringRefreshWins(t *testing.T) {
	// With revocation the refresh fails (invalid_grant); without, it succeeds.
	for _, revocation := range []bool{false, true} {
		t.Run(fmt.Sprintf("revocation=%t", revocation), func(t *testing.T) { logoutDuringRefresh(t, revocation) })
	}
}

func logoutDuringRefresh(t *testing.T, revocation bool) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true, Revocation: revocation}, Settings{})
	ctx := ctxT(t)
	f.mustLogin()
	f.expireSoon()
	f.srv.Set(func(o *oauthtest.Options) { o.TokenDelay = 300 * time.Millisecond })
	done := make(chan error, 1)
	go func() { _, err := f.g.Token(ctx); done <- err }()
	deadline := time.Now().Add(5 * time.Second)
	for f.srv.Count("token") < 2 { // the refresh request has reached the server
		if time.Now().After(deadline) {
			t.Fatal("the refresh never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := f.g.Logout(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if b, _ := f.store.get(); b != nil {
		t.Fatal("a refresh that finished after the logout stored its tokens")
	}
	if _, err := f.g.Token(ctx); !errors.Is(err, ErrNeedsLogin) {
		t.Fatalf("Token after logout: %v", err)
	}
}

func TestConcurrentChallengesRefreshOnce(t *testing.T) {
	f := newFixture(t, oauthtest.Options{RefreshTokens: true}, Settings{})
	ctx := ctxT(t)
	f.mustLogin()
	tok, _ := f.g.Token(ctx)
	f.srv.ExpireAccessTokens()
	st, www := f.get(tok)
	// Each challenge re-reads the PRM (slowly) before refreshing, so
	// callers arriving while the first one is between its PRM read and
	// the end of its refresh start their flight after it ended.
	f.srv.Set(func(o *oauthtest.Options) { o.MetadataDelay = 100 * time.Millisecond })
	const n = 16
	errs := make([]error, n)
	retries := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { retries[i], errs[i] = f.g.ChallengedToken(ctx, tok, st, www) })
		time.Sleep(10 * time.Millisecond) // staggered arrivals
	}
	wg.Wait()
	for i := range n {
		if !retries[i] || errs[i] != nil {
			t.Fatalf("caller %d: retry=%t err=%v", i, retries[i], errs[i])
		}
	}
	if got := f.srv.Count("refresh"); got != 1 {
		t.Fatalf("%d refreshes for one rejected token", got)
	}
}
