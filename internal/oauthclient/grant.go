package oauthclient

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// Grant is one configured server's OAuth client. It is safe for concurrent use.
type Grant struct {
	s          Settings
	store      Store
	hc         *http.Client
	noRedirect *http.Client
	log        *slog.Logger
	timeout    time.Duration
	flowLife   time.Duration
	sign       *signer
	signErr    error

	saveMu sync.Mutex // serializes record changes and Store writes

	mu             sync.Mutex
	loaded         bool
	rec            *record
	reason         string   // a needs-login reason, "" when none
	rmURL          string   // resource_metadata of the last 401 challenge
	challengeScope []string // scope of the last 401 challenge
	pendingScope   []string // the union a step-up asks for
	flight         *flight
	fresh401       string // an access token obtained because of a 401
	lastStepUps    map[string]*stepUp
	flows          map[string]*pendingFlow
	onChange       []func(Info)
	gen            uint64 // counts record changes; a flight's result is dropped when it moved
	logins         int    // completed logins
}

type flight struct {
	done chan struct{}
	tok  string
	err  error
}

type stepUp struct {
	n     int
	first time.Time
	login int // g.logins when last counted: one count per login
}

const stepUpWindow = 10 * time.Minute

type pendingFlow struct {
	id, state, verifier string
	redirectURI         string
	issuer              string
	issSupported        bool
	resource            string
	scopes              []string
	tokenEndpoint       string
	revocationEndpoint  string
	client              clientAuth
	kind                string
	reg                 *clientReg // a new DCR registration to keep on success
	expires             time.Time
}

// New makes a Grant. hc may be nil (http.DefaultClient's transport), log may be nil.
func New(s Settings, store Store, hc *http.Client, log *slog.Logger) *Grant {
	if hc == nil {
		hc = &http.Client{}
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if s.ClientName == "" {
		s.ClientName = "mcpvisor"
	}
	nr := *hc
	nr.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	g := &Grant{
		s: s, store: store, hc: hc, noRedirect: &nr, log: log,
		timeout: s.Timeout, flowLife: s.FlowLifetime,
		lastStepUps: map[string]*stepUp{}, flows: map[string]*pendingFlow{},
	}
	if g.timeout <= 0 {
		g.timeout = DefaultTimeout
	}
	if g.flowLife <= 0 {
		g.flowLife = DefaultFlowLifetime
	}
	if len(s.PrivateKeyPEM) > 0 || s.AuthMethod == AuthPrivateKeyJWT {
		g.sign, g.signErr = parseSigner(s.PrivateKeyPEM, s.SigningAlgorithm)
	}
	return g
}

func (g *Grant) clientCredentials() bool { return g.s.Grant == GrantClientCredentials }

// Load reads the stored record once; later calls do nothing. Token,
// Challenged, Begin and Logout call it themselves; call it early so that
// Info reflects the stored record.
func (g *Grant) Load(ctx context.Context) error {
	g.saveMu.Lock()
	defer g.saveMu.Unlock()
	return g.loadLocked(ctx)
}

func (g *Grant) loadLocked(ctx context.Context) error {
	g.mu.Lock()
	loaded := g.loaded
	g.mu.Unlock()
	if loaded {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	data, err := g.store.Load(ctx)
	var rec *record
	switch {
	case errors.Is(err, ErrNoRecord):
	case err != nil:
		return fmt.Errorf("loading the oauth record: %w", err)
	default:
		var r record
		if jerr := json.Unmarshal(data, &r); jerr != nil {
			g.log.Warn("oauth: the stored record is unreadable; ignoring it", "error", jerr.Error())
		} else {
			rec = &r
		}
	}
	g.mu.Lock()
	g.rec, g.loaded = rec, true
	g.mu.Unlock()
	return nil
}

// update changes the record through a copy, saves it, and only then makes
// it current. A failed Save leaves the current record as it was.
func (g *Grant) update(ctx context.Context, change func(r *record)) error {
	return g.updateFrom(ctx, anyGen, change)
}

const anyGen = ^uint64(0)

// errSuperseded: the record changed (a login, a logout, another refresh)
// since a request began; its result is dropped.
var errSuperseded = errors.New("superseded by a newer change of the record")

// updateFrom is update when the record is still at generation gen.
func (g *Grant) updateFrom(ctx context.Context, gen uint64, change func(r *record)) error {
	g.saveMu.Lock()
	defer g.saveMu.Unlock()
	if err := g.loadLocked(ctx); err != nil {
		return err
	}
	g.mu.Lock()
	if gen != anyGen && gen != g.gen {
		g.mu.Unlock()
		return errSuperseded
	}
	next := g.rec.clone()
	g.mu.Unlock()
	change(next)
	data, err := json.Marshal(next)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if err := g.store.Save(sctx, data); err != nil {
		return fmt.Errorf("saving the oauth record: %w", err)
	}
	g.mu.Lock()
	g.rec = next
	g.gen++
	g.mu.Unlock()
	return nil
}

// current answers the current access token after a flight was superseded.
func (g *Grant) current() (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rec == nil || g.rec.Tokens == nil {
		reason := g.reason
		if reason == "" {
			reason = ReasonNoCredentials
		}
		return "", g.needsLogin(reason, g.nextScopeLocked())
	}
	return g.rec.Tokens.Access, nil
}

// OnChange registers f to be called after each change of state.
func (g *Grant) OnChange(f func(Info)) {
	g.mu.Lock()
	g.onChange = append(g.onChange, f)
	g.mu.Unlock()
}

func (g *Grant) changed() {
	g.mu.Lock()
	fs := slices.Clone(g.onChange)
	info := g.infoLocked()
	g.mu.Unlock()
	for _, f := range fs {
		f(info)
	}
}

// Info describes the state; it never holds a token.
func (g *Grant) Info() Info {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.infoLocked()
}

func (g *Grant) infoLocked() Info {
	var t *tokenSet
	if g.rec != nil {
		t = g.rec.Tokens
	}
	i := Info{}
	if t != nil {
		i.Issuer, i.ClientID, i.Scopes, i.Expiry, i.Subject = t.Issuer, t.ClientID, slices.Clone(t.Scopes), t.Expiry, t.Subject
		i.Refreshable = t.Refresh != ""
	}
	switch {
	case g.clientCredentials():
		i.State = StateClientCredentials
		i.Reason = g.reason
	case t != nil && g.reason == "" && !t.Refreshable() && t.expired():
		i.State, i.Reason = StateNeedsLogin, ReasonExpired
	case t != nil && strings.HasPrefix(g.reason, ReasonScopePrefix):
		i.State, i.Reason = StateLoggedIn, g.reason
	case t != nil && g.reason == "":
		i.State = StateLoggedIn
	case g.reason != "":
		i.State, i.Reason = StateNeedsLogin, g.reason
	default:
		i.State = StateNone
	}
	return i
}

func (t *tokenSet) Refreshable() bool { return t.Refresh != "" }

func (t *tokenSet) expired() bool { return !t.Expiry.IsZero() && !time.Now().Before(t.Expiry) }

// refreshDue says the token is within min(60 s, 10% of its life) of expiry.
func (t *tokenSet) refreshDue() bool {
	if t.Expiry.IsZero() {
		return false
	}
	margin := 60 * time.Second
	if life := t.Expiry.Sub(t.Obtained); life > 0 && life/10 < margin {
		margin = life / 10
	}
	return !time.Now().Before(t.Expiry.Add(-margin))
}

func (g *Grant) needsLogin(reason string, scope []string) *NeedsLoginError {
	return &NeedsLoginError{Reason: reason, Scope: slices.Clone(scope)}
}

// Token answers a valid access token, refreshing (or, for client
// credentials, fetching) one when needed. One refresh runs at a time
// however many callers wait; each waits at most until its ctx ends.
func (g *Grant) Token(ctx context.Context) (string, error) {
	if err := g.Load(ctx); err != nil {
		return "", err
	}
	g.mu.Lock()
	var t *tokenSet
	if g.rec != nil {
		t = g.rec.Tokens
	}
	if t != nil && !t.refreshDue() && (g.reason == "" || strings.HasPrefix(g.reason, ReasonScopePrefix) || g.clientCredentials()) {
		tok := t.Access
		g.mu.Unlock()
		return tok, nil
	}
	if g.clientCredentials() {
		var old string
		if t != nil && !t.expired() {
			old = t.Access
		}
		g.mu.Unlock()
		tok, err := g.shared(ctx, g.fetchClientCredentials)
		if err != nil && old != "" && ctx.Err() == nil {
			g.log.Warn("oauth: early client credentials fetch failed; using the current token until it expires", "error", err.Error())
			return old, nil
		}
		return tok, err
	}
	if t == nil {
		reason := g.reason
		if reason == "" {
			reason = ReasonNoCredentials
		}
		scope := g.nextScopeLocked()
		g.mu.Unlock()
		return "", g.needsLogin(reason, scope)
	}
	if t.Refresh == "" {
		if t.expired() {
			g.mu.Unlock()
			return "", g.needsLogin(ReasonExpired, nil)
		}
		tok := t.Access
		g.mu.Unlock()
		return tok, nil
	}
	old, stillValid := t.Access, !t.expired()
	g.mu.Unlock()
	tok, err := g.shared(ctx, g.refresh)
	if err != nil && stillValid && !errors.Is(err, ErrNeedsLogin) && ctx.Err() == nil {
		g.log.Warn("oauth: early refresh failed; using the current token until it expires", "error", err.Error())
		return old, nil
	}
	return tok, err
}

// shared runs fn as the one flight in progress, or joins the one running.
// fn runs detached from any caller's ctx; every request in it is bounded.
func (g *Grant) shared(ctx context.Context, fn func(context.Context) (string, error)) (string, error) {
	g.mu.Lock()
	f := g.flight
	if f == nil {
		f = &flight{done: make(chan struct{})}
		g.flight = f
		go func() {
			tok, err := fn(context.WithoutCancel(ctx))
			g.mu.Lock()
			f.tok, f.err = tok, err
			g.flight = nil
			g.mu.Unlock()
			close(f.done)
		}()
	}
	g.mu.Unlock()
	select {
	case <-f.done:
		return f.tok, f.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// clientAuthFor is how the recorded tokens' client authenticates.
func (g *Grant) clientAuthFor(r *record, t *tokenSet) clientAuth {
	ca := clientAuth{id: t.ClientID, method: t.AuthMethod, audience: t.Issuer}
	switch t.ClientKind {
	case kindPre, kindCC:
		ca.secret = g.s.ClientSecret
	case kindDCR:
		if c := r.Clients[t.Issuer]; c != nil {
			ca.secret = c.ClientSecret
		}
	}
	return ca
}

// refresh runs a refresh_token grant and saves the rotated record before
// the new access token is handed out.
func (g *Grant) refresh(ctx context.Context) (string, error) {
	g.mu.Lock()
	if g.rec == nil || g.rec.Tokens == nil || g.rec.Tokens.Refresh == "" {
		g.mu.Unlock()
		return "", g.needsLogin(ReasonNoCredentials, nil)
	}
	r := g.rec.clone()
	gen := g.gen
	g.mu.Unlock()
	t := r.Tokens
	ca := g.clientAuthFor(r, t)
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {t.Refresh}, "resource": {t.Resource}}
	tr, err := g.tokenRequest(ctx, t.TokenEndpoint, form, ca, []string{t.Refresh, t.Access, ca.secret})
	if err != nil {
		var te *TokenError
		if errors.As(err, &te) && te.Code == "invalid_grant" {
			g.log.Warn("oauth: the refresh token was refused; a login is needed", "issuer", t.Issuer)
			derr := g.updateFrom(ctx, gen, func(r *record) { r.Tokens = nil })
			if errors.Is(derr, errSuperseded) {
				return g.current()
			}
			g.mu.Lock()
			g.reason = ReasonRefreshRejected
			if derr != nil { // keep the stored tokens, but never use them again
				g.rec = g.rec.clone()
				g.rec.Tokens = nil
			}
			g.mu.Unlock()
			g.changed()
			return "", g.needsLogin(ReasonRefreshRejected, t.Scopes)
		}
		return "", fmt.Errorf("refreshing the access token: %w", err)
	}
	nt := *t
	g.applyTokenResponse(&nt, tr, t.Scopes)
	if tr.RefreshToken == "" {
		nt.Refresh = t.Refresh
	}
	if err := g.updateFrom(ctx, gen, func(r *record) { r.Tokens = &nt }); err != nil {
		if errors.Is(err, errSuperseded) {
			return g.current()
		}
		return "", fmt.Errorf("refreshed, but %w; keeping the old record", err)
	}
	g.mu.Lock()
	g.reason = ""
	g.mu.Unlock()
	g.log.Debug("oauth: access token refreshed", "issuer", t.Issuer, "expiry", nt.Expiry)
	g.changed()
	return nt.Access, nil
}

func (g *Grant) applyTokenResponse(t *tokenSet, tr *tokenResponse, requested []string) {
	now := time.Now()
	t.Access = tr.AccessToken
	if tr.RefreshToken != "" {
		t.Refresh = tr.RefreshToken
	}
	t.Obtained = now
	t.Expiry = time.Time{}
	if s := tr.ExpiresIn.String(); s != "" {
		if n, err := strconv.ParseFloat(s, 64); err == nil && n > 0 {
			t.Expiry = now.Add(time.Duration(n * float64(time.Second)))
		}
	}
	if sc := strings.Fields(tr.Scope); len(sc) > 0 {
		t.Scopes = sc
	} else {
		t.Scopes = slices.Clone(requested)
	}
	if s := subjectOf(tr.IDToken, tr.AccessToken); s != "" {
		t.Subject = s
	}
}

// chooseAuthMethod picks the token endpoint authentication of a
// configured client.
func (g *Grant) chooseAuthMethod(m *asMetadata, secret string) string {
	if g.s.AuthMethod != "" {
		return g.s.AuthMethod
	}
	if g.sign != nil || g.signErr != nil {
		return AuthPrivateKeyJWT
	}
	if secret == "" {
		return AuthNone
	}
	sup := m.TokenEndpointAuthMethodsSupported
	if len(sup) == 0 || slices.Contains(sup, AuthClientSecretBasic) {
		return AuthClientSecretBasic
	}
	if slices.Contains(sup, AuthClientSecretPost) {
		return AuthClientSecretPost
	}
	return AuthClientSecretBasic
}

func (g *Grant) checkSigningAlg(m *asMetadata) error {
	if g.signErr != nil {
		return g.signErr
	}
	if g.sign == nil || len(m.TokenEndpointAuthSigningAlgs) == 0 {
		return nil
	}
	if !slices.Contains(m.TokenEndpointAuthSigningAlgs, g.sign.method.Alg()) {
		return fmt.Errorf("authorization server %s accepts client assertions signed with %s, not %s",
			m.Issuer, strings.Join(m.TokenEndpointAuthSigningAlgs, ", "), g.sign.method.Alg())
	}
	return nil
}

// fetchClientCredentials runs discovery and a client_credentials grant.
func (g *Grant) fetchClientCredentials(ctx context.Context) (string, error) {
	if g.s.ClientID == "" {
		return "", errors.New("the client_credentials grant needs a client id (oauth.clientId)")
	}
	g.mu.Lock()
	rm, scope, gen := g.rmURL, g.nextScopeLocked(), g.gen
	g.mu.Unlock()
	d, err := g.discover(ctx, rm, "")
	if err != nil {
		return "", err
	}
	if err := g.checkSigningAlg(d.meta); err != nil {
		return "", err
	}
	if len(scope) == 0 {
		scope = d.prmScopes
	}
	ca := clientAuth{id: g.s.ClientID, secret: g.s.ClientSecret, method: g.chooseAuthMethod(d.meta, g.s.ClientSecret), audience: d.issuer}
	form := url.Values{"grant_type": {GrantClientCredentials}, "resource": {d.resource}}
	if len(scope) > 0 {
		form.Set("scope", strings.Join(scope, " "))
	}
	tr, err := g.tokenRequest(ctx, d.meta.TokenEndpoint, form, ca, []string{ca.secret})
	if err != nil {
		g.mu.Lock()
		g.reason = "client credentials refused"
		g.mu.Unlock()
		g.changed()
		return "", fmt.Errorf("client credentials grant: %w", err)
	}
	t := &tokenSet{Issuer: d.issuer, ClientID: ca.id, ClientKind: kindCC, AuthMethod: ca.method,
		TokenEndpoint: d.meta.TokenEndpoint, RevocationEndpoint: d.meta.RevocationEndpoint, Resource: d.resource}
	g.applyTokenResponse(t, tr, scope)
	if err := g.updateFrom(ctx, gen, func(r *record) { r.Tokens = t }); err != nil {
		if errors.Is(err, errSuperseded) {
			return g.current()
		}
		return "", err
	}
	g.mu.Lock()
	g.reason, g.pendingScope = "", nil
	g.mu.Unlock()
	g.changed()
	return t.Access, nil
}

// nextScopeLocked is the scope a login (or a client credentials fetch)
// asks for, before PRM scopes_supported: configured, else a step-up's
// union, else the last challenge's.
func (g *Grant) nextScopeLocked() []string {
	switch {
	case len(g.s.Scopes) > 0:
		return slices.Clone(g.s.Scopes)
	case len(g.pendingScope) > 0:
		return slices.Clone(g.pendingScope)
	default:
		return slices.Clone(g.challengeScope)
	}
}

// Challenged handles a 401 or 403 answer the server gave a request that
// carried the current token. See ChallengedToken, which is better: knowing
// the token sent, it neither refreshes twice for one token nor keeps
// refreshing for a server that refuses every token.
func (g *Grant) Challenged(ctx context.Context, status int, wwwAuthenticate string) (retry bool, err error) {
	return g.ChallengedToken(ctx, "", status, wwwAuthenticate)
}

// ChallengedToken handles a 401 or 403 answer to a request that carried
// token used ("" means the current one). retry says to send the request
// again, once, with a fresh Token. A 401 invalid_token refreshes (one
// flight); a 401 without a record records the challenge and asks for a
// login; a 401 after the protected resource metadata stopped naming the
// record's issuer drops the tokens ("authorization server changed"); a
// 403 insufficient_scope asks for a login with the union of the current
// and challenged scopes, at most MaxStepUps times per scope set, then
// answers ErrScopeRetryLimit. Other statuses are not its business:
// retry false, err nil.
func (g *Grant) ChallengedToken(ctx context.Context, used string, status int, wwwAuthenticate string) (retry bool, err error) {
	if status != http.StatusUnauthorized && status != http.StatusForbidden {
		return false, nil
	}
	if err := g.Load(ctx); err != nil {
		return false, err
	}
	c := ParseChallenge(wwwAuthenticate)
	if status == http.StatusForbidden {
		if c.Error != "insufficient_scope" {
			return false, nil
		}
		return g.stepUp(ctx, c)
	}
	g.mu.Lock()
	if c.ResourceMetadata != "" {
		g.rmURL = c.ResourceMetadata
	}
	if len(c.Scope) > 0 {
		g.challengeScope = c.Scope
	}
	var t *tokenSet
	if g.rec != nil {
		t = g.rec.Tokens
	}
	if t != nil && used != "" && used != t.Access {
		g.mu.Unlock()
		return true, nil // already replaced since that request
	}
	// A token obtained because of a 401 and refused again means the
	// server rejects what the authorization server issues: no refresh
	// loop. Only known when the caller says which token it sent.
	fresh := t != nil && used != "" && g.fresh401 == used
	if g.clientCredentials() {
		if fresh {
			g.mu.Unlock()
			return false, errors.New("the server refused a freshly issued client credentials token")
		}
		stale := ""
		if t != nil {
			stale = t.Access
		}
		g.mu.Unlock()
		tok, err := g.shared(ctx, g.unlessReplaced(stale, g.fetchClientCredentials))
		if err != nil {
			return false, err
		}
		g.mu.Lock()
		g.fresh401 = tok
		g.mu.Unlock()
		return true, nil
	}
	if t == nil {
		if g.reason == "" {
			g.reason = ReasonNoCredentials
		}
		reason, scope := g.reason, g.nextScopeLocked()
		g.mu.Unlock()
		g.changed()
		return false, g.needsLogin(reason, scope)
	}
	rm := g.rmURL
	g.mu.Unlock()

	// Has the server moved to another authorization server?
	if prm, perr := g.discoverPRM(ctx, rm); perr != nil {
		g.log.Warn("oauth: re-reading protected resource metadata after a 401 failed", "error", perr.Error())
	} else if prm != nil && !slices.Contains(prm.AuthorizationServers, t.Issuer) {
		g.log.Warn("oauth: the server's authorization server changed; a login is needed", "old", t.Issuer, "new", strings.Join(prm.AuthorizationServers, " "))
		return false, g.dropTokens(ctx, ReasonASChanged, nil)
	}
	if fresh || t.Refresh == "" {
		return false, g.dropTokens(ctx, ReasonTokenRejected, t.Scopes)
	}
	tok, err := g.shared(ctx, g.unlessReplaced(t.Access, g.refresh))
	if err != nil {
		return false, err
	}
	g.mu.Lock()
	g.fresh401 = tok
	g.mu.Unlock()
	return true, nil
}

// Accepted is told that a request sent with token succeeded: a token
// obtained because of a 401 is an ordinary one from then on, and its own
// 401, later, is refreshed like any other's.
func (g *Grant) Accepted(token string) {
	g.mu.Lock()
	if token != "" && g.fresh401 == token {
		g.fresh401 = ""
	}
	g.mu.Unlock()
}

// unlessReplaced runs fn only if stale is still the current access token;
// otherwise another flight already replaced it and that one is answered.
func (g *Grant) unlessReplaced(stale string, fn func(context.Context) (string, error)) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		g.mu.Lock()
		if g.rec != nil && g.rec.Tokens != nil && g.rec.Tokens.Access != stale {
			tok := g.rec.Tokens.Access
			g.mu.Unlock()
			return tok, nil
		}
		g.mu.Unlock()
		return fn(ctx)
	}
}

// dropTokens forgets the tokens (keeping registrations) and asks for a login.
func (g *Grant) dropTokens(ctx context.Context, reason string, scope []string) error {
	if err := g.update(ctx, func(r *record) { r.Tokens = nil }); err != nil {
		g.log.Warn("oauth: could not save the record without its tokens", "error", err.Error())
		g.mu.Lock()
		g.rec = g.rec.clone()
		g.rec.Tokens = nil
		g.mu.Unlock()
	}
	g.mu.Lock()
	g.reason = reason
	if len(scope) > 0 && len(g.pendingScope) == 0 && len(g.challengeScope) == 0 {
		g.pendingScope = slices.Clone(scope)
	}
	next := g.nextScopeLocked()
	g.mu.Unlock()
	g.changed()
	return g.needsLogin(reason, next)
}

func (g *Grant) stepUp(ctx context.Context, c Challenge) (bool, error) {
	g.mu.Lock()
	var current []string
	if g.rec != nil && g.rec.Tokens != nil {
		current = g.rec.Tokens.Scopes
	}
	if len(current) == 0 {
		current = g.nextScopeLocked()
	}
	union := unionScopes(current, c.Scope)
	key := strings.Join(union, " ")
	now := time.Now()
	for k, s := range g.lastStepUps {
		if now.Sub(s.first) > stepUpWindow {
			delete(g.lastStepUps, k)
		}
	}
	s := g.lastStepUps[key]
	if s == nil {
		s = &stepUp{first: now, login: -1}
		g.lastStepUps[key] = s
	}
	if s.login != g.logins { // the same demand again before a new login counts once
		s.n++
		s.login = g.logins
	}
	if s.n > MaxStepUps {
		// No login gets this scope: the grant no longer asks for one
		// (the operation fails for good until the user logs in anew).
		asked := strings.HasPrefix(g.reason, ReasonScopePrefix)
		if asked {
			g.reason, g.pendingScope = "", nil
		}
		g.mu.Unlock()
		if asked {
			g.changed()
		}
		return false, fmt.Errorf("%w: the server still requires scope %q after %d authorizations", ErrScopeRetryLimit, strings.Join(c.Scope, " "), MaxStepUps+1)
	}
	g.pendingScope = union
	cc := g.clientCredentials()
	g.reason = ReasonScopePrefix + strings.Join(c.Scope, " ")
	reason := g.reason
	g.mu.Unlock()
	if cc {
		if _, err := g.shared(ctx, g.fetchClientCredentials); err != nil {
			return false, err
		}
		return true, nil
	}
	g.changed()
	return false, g.needsLogin(reason, union)
}

func unionScopes(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Begin starts an authorization code login whose callback goes to
// redirectURI (a loopback http or an https URL).
func (g *Grant) Begin(ctx context.Context, redirectURI string) (*Flow, error) {
	if g.clientCredentials() {
		return nil, errors.New("this server uses the client_credentials grant: there is nothing to log in to")
	}
	if err := checkEndpoint(redirectURI); err != nil {
		return nil, fmt.Errorf("redirect URI: %w", err)
	}
	if err := g.Load(ctx); err != nil {
		return nil, err
	}
	g.mu.Lock()
	rm, scope := g.rmURL, g.nextScopeLocked()
	prefer := ""
	var known *clientReg
	if g.rec != nil && g.rec.Tokens != nil {
		prefer = g.rec.Tokens.Issuer
	}
	g.mu.Unlock()
	d, err := g.discover(ctx, rm, prefer)
	if err != nil {
		return nil, err
	}
	m := d.meta
	if err := m.checkPKCE(); err != nil {
		return nil, err
	}
	if m.AuthorizationEndpoint == "" {
		return nil, fmt.Errorf("authorization server %s has no authorization_endpoint", d.issuer)
	}
	g.mu.Lock()
	if g.rec != nil {
		if c := g.rec.Clients[d.issuer]; c != nil && slices.Contains(c.RedirectURIs, redirectURI) {
			cp := *c
			known = &cp
		}
	}
	g.mu.Unlock()

	if len(scope) == 0 {
		scope = slices.Clone(d.prmScopes)
	}
	if slices.Contains(m.ScopesSupported, "offline_access") && !slices.Contains(scope, "offline_access") {
		scope = append(scope, "offline_access")
	}

	f := &pendingFlow{
		id: randomString(16), state: randomString(32), verifier: oauth2.GenerateVerifier(),
		redirectURI: redirectURI, issuer: d.issuer, issSupported: m.IssParameterSupported,
		resource: d.resource, scopes: scope, tokenEndpoint: m.TokenEndpoint,
		revocationEndpoint: m.RevocationEndpoint, expires: time.Now().Add(g.flowLife),
	}
	// Client identity: pre-registered, else CIMD, else DCR.
	switch {
	case g.s.ClientID != "":
		if err := g.checkSigningAlg(m); err != nil {
			return nil, err
		}
		g.mu.Lock()
		var boundTo string
		if g.rec != nil && g.rec.PreClientID == g.s.ClientID {
			boundTo = g.rec.PreIssuer
		}
		g.mu.Unlock()
		if boundTo != "" && boundTo != d.issuer {
			return nil, fmt.Errorf("the server's authorization server changed from %s to %s, and the configured client id was used with the former: configure a client registered with %s (or log out to reset)", boundTo, d.issuer, d.issuer)
		}
		f.kind = kindPre
		f.client = clientAuth{id: g.s.ClientID, secret: g.s.ClientSecret, method: g.chooseAuthMethod(m, g.s.ClientSecret), audience: d.issuer}
	case g.s.ClientMetadataURL != "" && m.CIMDSupported:
		f.kind = kindCIMD
		f.client = clientAuth{id: g.s.ClientMetadataURL, method: AuthNone, audience: d.issuer}
	case known != nil:
		f.kind = kindDCR
		f.client = clientAuth{id: known.ClientID, secret: known.ClientSecret, method: known.AuthMethod, audience: d.issuer}
	case m.RegistrationEndpoint != "":
		reg, err := g.register(ctx, m, redirectURI, scope)
		if err != nil {
			return nil, err
		}
		f.kind, f.reg = kindDCR, reg
		f.client = clientAuth{id: reg.ClientID, secret: reg.ClientSecret, method: reg.AuthMethod, audience: d.issuer}
	default:
		if g.s.ClientMetadataURL != "" {
			return nil, fmt.Errorf("authorization server %s neither supports client metadata documents nor dynamic registration: configure oauth.clientId", d.issuer)
		}
		return nil, fmt.Errorf("authorization server %s offers no dynamic client registration: configure oauth.clientId (or oauth.clientMetadataUrl)", d.issuer)
	}

	cfg := oauth2.Config{ClientID: f.client.id, Endpoint: oauth2.Endpoint{AuthURL: m.AuthorizationEndpoint}, RedirectURL: redirectURI, Scopes: scope}
	authURL := cfg.AuthCodeURL(f.state, oauth2.S256ChallengeOption(f.verifier), oauth2.SetAuthURLParam("resource", d.resource))

	g.mu.Lock()
	g.pruneFlowsLocked()
	g.flows[f.id] = f
	g.mu.Unlock()
	g.log.Debug("oauth: login begun", "issuer", d.issuer, "client", f.kind, "scopes", strings.Join(scope, " "))
	return &Flow{ID: f.id, AuthURL: authURL, Expires: f.expires}, nil
}

// pruneFlowsLocked drops expired flows and keeps at most MaxFlows-1, the
// oldest going first.
func (g *Grant) pruneFlowsLocked() {
	now := time.Now()
	for id, f := range g.flows {
		if now.After(f.expires) {
			delete(g.flows, id)
		}
	}
	for len(g.flows) >= MaxFlows {
		var oldest *pendingFlow
		for _, f := range g.flows {
			if oldest == nil || f.expires.Before(oldest.expires) {
				oldest = f
			}
		}
		delete(g.flows, oldest.id)
	}
}

// register runs RFC 7591 dynamic client registration.
func (g *Grant) register(ctx context.Context, m *asMetadata, redirectURI string, scope []string) (*clientReg, error) {
	method := AuthNone
	if sup := m.TokenEndpointAuthMethodsSupported; len(sup) > 0 && !slices.Contains(sup, AuthNone) {
		switch {
		case slices.Contains(sup, AuthClientSecretBasic):
			method = AuthClientSecretBasic
		case slices.Contains(sup, AuthClientSecretPost):
			method = AuthClientSecretPost
		}
	}
	body := map[string]any{
		"client_name":                g.s.ClientName,
		"application_type":           "native",
		"redirect_uris":              []string{redirectURI},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": method,
	}
	if len(scope) > 0 {
		body["scope"] = strings.Join(scope, " ")
	}
	data, _ := json.Marshal(body)
	rctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, m.RegistrationEndpoint, strings.NewReader(string(data)))
	if err != nil {
		return nil, fmt.Errorf("client registration: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := g.noRedirect.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client registration at %s: %v", m.RegistrationEndpoint, cleanTransportError(rctx, err))
	}
	defer resp.Body.Close()
	rb, err := readCapped(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("client registration at %s: %v", m.RegistrationEndpoint, cleanTransportError(rctx, err))
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		var e struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		msg := ""
		if json.Unmarshal(rb, &e) == nil && e.Error != "" {
			msg = ": " + sanitize(e.Error, 64)
			if e.Description != "" {
				msg += ": " + sanitize(e.Description, 300)
			}
		}
		return nil, fmt.Errorf("client registration at %s refused (HTTP %d)%s", m.RegistrationEndpoint, resp.StatusCode, msg)
	}
	var out struct {
		ClientID                string `json:"client_id"`
		ClientSecret            string `json:"client_secret"`
		TokenEndpointAuthMethod string `json:"token_endpoint_auth_method"`
	}
	if err := json.Unmarshal(rb, &out); err != nil || out.ClientID == "" {
		return nil, fmt.Errorf("client registration at %s: the answer has no client_id", m.RegistrationEndpoint)
	}
	reg := &clientReg{ClientID: out.ClientID, ClientSecret: out.ClientSecret, AuthMethod: out.TokenEndpointAuthMethod, RedirectURIs: []string{redirectURI}}
	if reg.AuthMethod == "" {
		reg.AuthMethod = method
		if reg.ClientSecret != "" && method == AuthNone {
			reg.AuthMethod = AuthClientSecretBasic
		}
	}
	return reg, nil
}

// Cancel forgets a begun flow.
func (g *Grant) Cancel(flowID string) {
	g.mu.Lock()
	delete(g.flows, flowID)
	g.mu.Unlock()
}

// Complete finishes a flow with the callback's query parameters: it checks
// state and iss, exchanges the code and saves the record. A flow is used once.
func (g *Grant) Complete(ctx context.Context, flowID string, callback url.Values) (*Info, error) {
	g.mu.Lock()
	f := g.flows[flowID]
	delete(g.flows, flowID)
	g.mu.Unlock()
	if f == nil {
		return nil, ErrUnknownFlow
	}
	if time.Now().After(f.expires) {
		return nil, errors.New("the login flow expired; begin again")
	}
	if subtle.ConstantTimeCompare([]byte(callback.Get("state")), []byte(f.state)) != 1 {
		return nil, errors.New("the authorization response's state does not match this login: refusing it")
	}
	if iss, ok := callback["iss"]; ok {
		if len(iss) != 1 || iss[0] != f.issuer {
			got := ""
			if len(iss) > 0 {
				got = iss[0]
			}
			return nil, fmt.Errorf("the authorization response comes from issuer %q, not %q: refusing it", sanitize(got, 200), f.issuer)
		}
	} else if f.issSupported {
		return nil, fmt.Errorf("the authorization response has no iss although %s advertises it: refusing it", f.issuer)
	}
	if e := callback.Get("error"); e != "" {
		msg := "the authorization server refused the login: " + sanitize(e, 64)
		if d := callback.Get("error_description"); d != "" {
			msg += ": " + sanitize(d, 300)
		}
		return nil, errors.New(msg)
	}
	code := callback.Get("code")
	if code == "" {
		return nil, errors.New("the authorization response has no code")
	}
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {f.redirectURI},
		"code_verifier": {f.verifier},
		"resource":      {f.resource},
	}
	tr, err := g.tokenRequest(ctx, f.tokenEndpoint, form, f.client, []string{code, f.verifier, f.client.secret})
	if err != nil {
		return nil, fmt.Errorf("exchanging the authorization code: %w", err)
	}
	t := &tokenSet{Issuer: f.issuer, ClientID: f.client.id, ClientKind: f.kind, AuthMethod: f.client.method,
		TokenEndpoint: f.tokenEndpoint, RevocationEndpoint: f.revocationEndpoint, Resource: f.resource}
	g.applyTokenResponse(t, tr, f.scopes)
	if err := g.update(ctx, func(r *record) {
		if f.reg != nil {
			if r.Clients == nil {
				r.Clients = map[string]*clientReg{}
			}
			r.Clients[f.issuer] = f.reg
		}
		if f.kind == kindPre {
			r.PreClientID, r.PreIssuer = f.client.id, f.issuer
		}
		r.Tokens = t
	}); err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.reason, g.pendingScope, g.fresh401 = "", nil, ""
	g.logins++
	info := g.infoLocked()
	g.mu.Unlock()
	g.log.Info("oauth: logged in", "issuer", f.issuer, "scopes", strings.Join(t.Scopes, " "))
	g.changed()
	return &info, nil
}

// Logout revokes the tokens when the authorization server offers RFC 7009
// revocation (refresh token first), then deletes the record. A failed
// revocation is reported, but the record is deleted anyway.
func (g *Grant) Logout(ctx context.Context) (revoked bool, err error) {
	if err := g.Load(ctx); err != nil {
		return false, err
	}
	g.saveMu.Lock()
	defer g.saveMu.Unlock()
	g.mu.Lock()
	r := g.rec.clone()
	g.mu.Unlock()
	var errs []error
	tried := false
	if t := r.Tokens; t != nil && t.RevocationEndpoint != "" {
		tried = true
		ca := g.clientAuthFor(r, t)
		for _, x := range []struct{ tok, hint string }{{t.Refresh, "refresh_token"}, {t.Access, "access_token"}} {
			if x.tok == "" {
				continue
			}
			form := url.Values{"token": {x.tok}, "token_type_hint": {x.hint}}
			if _, _, err := g.postForm(ctx, t.RevocationEndpoint, form, ca, []string{t.Refresh, t.Access, ca.secret}); err != nil {
				errs = append(errs, fmt.Errorf("revoking the %s: %w", strings.ReplaceAll(x.hint, "_", " "), err))
			}
		}
	}
	dctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if err := g.store.Delete(dctx); err != nil && !errors.Is(err, ErrNoRecord) {
		return false, fmt.Errorf("deleting the oauth record: %w", err)
	}
	g.mu.Lock()
	g.rec, g.reason, g.pendingScope, g.fresh401 = nil, "", nil, ""
	g.gen++
	g.lastStepUps = map[string]*stepUp{}
	g.mu.Unlock()
	g.changed()
	if len(errs) > 0 {
		return false, fmt.Errorf("logged out, but %w", errors.Join(errs...))
	}
	return tried, nil
}

// String names the server only; a Grant never prints its secrets.
func (g *Grant) String() string { return "oauthclient.Grant{" + g.s.Resource + "}" }

// GoString is String.
func (g *Grant) GoString() string { return g.String() }
