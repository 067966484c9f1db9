package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/mcpvisor/mcpvisor/internal/guard"
)

// The dashboard's login with team identity: the authorization code flow
// with PKCE (S256) against the issuer, run by serve for the browser.
// GET LoginPath sends the browser to the issuer's authorization endpoint
// — client auth.dashboardClientId (a public client), RFC 8707 resource
// the public URL, scope the admin scope — with a single-use state bound
// to the browser by a short-lived cookie; the issuer redirects to
// CallbackPath, where serve exchanges the code, verifies the access
// token as any admin request's (audience, admin scope), and starts a
// session (guard.Sessions): the browser gets only the session's cookie,
// never the token. POST LogoutPath ends the session.
const (
	LoginPath    = Prefix + "login"
	CallbackPath = Prefix + "callback"
	LogoutPath   = Prefix + "logout"
)

// Bounds of the logins under way.
const (
	maxFlows     = 64
	flowLifetime = 10 * time.Minute
	// issuerTimeout bounds each request to the issuer (metadata, token).
	issuerTimeout = 10 * time.Second
	// metadataTTL is how long the issuer's metadata is reused.
	metadataTTL = 10 * time.Minute
)

// flowCookie binds a login under way to the browser that began it; Lax,
// so that the issuer's redirect (a top-level navigation from another
// site) carries it back.
const flowCookie = "mcpvisor-login"

type flow struct {
	state, binding, verifier string
	issuer, publicURL        string
	expires                  time.Time
}

type asMeta struct {
	Issuer                string   `json:"issuer"`
	AuthorizationEndpoint string   `json:"authorization_endpoint"`
	TokenEndpoint         string   `json:"token_endpoint"`
	CodeChallengeMethods  []string `json:"code_challenge_methods_supported"`
}

// logins are the dashboard's logins under way, and the issuer's metadata.
type logins struct {
	hc *http.Client

	mu     sync.Mutex
	flows  map[string]*flow // by state
	meta   *asMeta
	metaAt time.Time
	now    func() time.Time
}

func newLogins() *logins {
	return &logins{
		hc: &http.Client{Timeout: issuerTimeout, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		flows: map[string]*flow{},
		now:   time.Now,
	}
}

func random() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// add keeps f, dropping expired flows and, at the bound, the oldest.
func (l *logins) add(f *flow) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for k, v := range l.flows {
		if now.After(v.expires) {
			delete(l.flows, k)
		}
	}
	for len(l.flows) >= maxFlows {
		var oldest *flow
		for _, v := range l.flows {
			if oldest == nil || v.expires.Before(oldest.expires) {
				oldest = v
			}
		}
		delete(l.flows, oldest.state)
	}
	l.flows[f.state] = f
}

// take removes and returns the live flow of state.
func (l *logins) take(state string) *flow {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.flows[state]
	if f == nil {
		return nil
	}
	delete(l.flows, state)
	if l.now().After(f.expires) {
		return nil
	}
	return f
}

// metadata is the issuer's authorization server metadata (RFC 8414, else
// OpenID Connect discovery), its issuer checked, cached a while.
func (l *logins) metadata(ctx context.Context, issuer string) (*asMeta, error) {
	l.mu.Lock()
	if m := l.meta; m != nil && m.Issuer == issuer && l.now().Sub(l.metaAt) < metadataTTL {
		l.mu.Unlock()
		return m, nil
	}
	l.mu.Unlock()
	u, err := url.Parse(issuer)
	if err != nil {
		return nil, fmt.Errorf("issuer %q: %w", issuer, err)
	}
	path := strings.TrimSuffix(u.Path, "/")
	urls := []string{
		u.Scheme + "://" + u.Host + "/.well-known/oauth-authorization-server" + path,
		strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration",
	}
	var errs []error
	for _, mu := range urls {
		var m asMeta
		if err := l.getJSON(ctx, mu, &m); err != nil {
			errs = append(errs, err)
			continue
		}
		if m.Issuer != issuer {
			errs = append(errs, fmt.Errorf("%s states the issuer %q, not %q", mu, m.Issuer, issuer))
			continue
		}
		if m.AuthorizationEndpoint == "" || m.TokenEndpoint == "" {
			errs = append(errs, fmt.Errorf("%s names no authorization or token endpoint", mu))
			continue
		}
		if len(m.CodeChallengeMethods) > 0 && !contains(m.CodeChallengeMethods, "S256") {
			return nil, fmt.Errorf("the issuer %s does not support PKCE with S256", issuer)
		}
		l.mu.Lock()
		l.meta, l.metaAt = &m, l.now()
		l.mu.Unlock()
		return &m, nil
	}
	return nil, fmt.Errorf("the issuer's metadata: %w", errors.Join(errs...))
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

func (l *logins) getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, issuerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := l.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	return nil
}

// loginConfig is the team identity in force if the dashboard may log in
// under it, else nil having answered why not.
func (h *Handler) loginConfig(w http.ResponseWriter) *guard.TeamConfig {
	c := h.guard.Team().Config()
	if c == nil || c.DashboardClientID == "" {
		http.Error(w, "the dashboard has no login of its own: set auth.dashboardClientId (a public client of the issuer)", http.StatusNotFound)
		return nil
	}
	return c
}

// beginLogin sends the browser to the issuer.
func (h *Handler) beginLogin(w http.ResponseWriter, r *http.Request) {
	c := h.loginConfig(w)
	if c == nil {
		return
	}
	m, err := h.logins.metadata(r.Context(), c.Issuer)
	if err != nil {
		loginPage(w, http.StatusBadGateway, "Login failed", "The issuer could not be reached: "+err.Error())
		return
	}
	f := &flow{state: random(), binding: random(), verifier: oauth2.GenerateVerifier(), issuer: c.Issuer,
		publicURL: c.PublicURL, expires: h.logins.now().Add(flowLifetime)}
	h.logins.add(f)
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: f.binding, Path: CallbackPath, MaxAge: int(flowLifetime.Seconds()),
		HttpOnly: true, Secure: c.Secure(), SameSite: http.SameSiteLaxMode})
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(f.verifier), oauth2.SetAuthURLParam("resource", c.PublicURL)}
	// A login hint (OpenID Connect) is passed on: a link to the
	// dashboard may name the account to log in as.
	if hint := r.URL.Query().Get("login_hint"); hint != "" && len(hint) <= 256 {
		opts = append(opts, oauth2.SetAuthURLParam("login_hint", hint))
	}
	u := oauthConfig(c, m).AuthCodeURL(f.state, opts...)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u, http.StatusFound)
}

func oauthConfig(c *guard.TeamConfig, m *asMeta) *oauth2.Config {
	return &oauth2.Config{ClientID: c.DashboardClientID, RedirectURL: c.PublicURL + CallbackPath, Scopes: []string{c.AdminScope},
		Endpoint: oauth2.Endpoint{AuthURL: m.AuthorizationEndpoint, TokenURL: m.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams}}
}

// callback finishes a login: the code exchanged, the token verified, a
// session started.
func (h *Handler) callback(w http.ResponseWriter, r *http.Request) {
	c := h.loginConfig(w)
	if c == nil {
		return
	}
	q := r.URL.Query()
	f := h.logins.take(q.Get("state"))
	ck, _ := r.Cookie(flowCookie)
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: "", Path: CallbackPath, MaxAge: -1, HttpOnly: true, Secure: c.Secure(), SameSite: http.SameSiteLaxMode})
	switch {
	case f == nil:
		loginPage(w, http.StatusBadRequest, "Login failed", "This login is unknown, used or expired: log in again.")
		return
	case ck == nil || ck.Value != f.binding:
		loginPage(w, http.StatusBadRequest, "Login failed", "This login was begun in another browser: log in again.")
		return
	case f.issuer != c.Issuer || f.publicURL != c.PublicURL:
		loginPage(w, http.StatusBadRequest, "Login failed", "The configuration changed during the login: log in again.")
		return
	case q.Get("error") != "":
		loginPage(w, http.StatusForbidden, "Login refused", "The issuer answered "+q.Get("error")+": "+q.Get("error_description"))
		return
	case q.Has("iss") && q.Get("iss") != c.Issuer: // RFC 9207
		loginPage(w, http.StatusBadRequest, "Login failed", "The redirect names another issuer than the configured one.")
		return
	case q.Get("code") == "":
		loginPage(w, http.StatusBadRequest, "Login failed", "The redirect carries no code.")
		return
	}
	m, err := h.logins.metadata(r.Context(), c.Issuer)
	if err != nil {
		loginPage(w, http.StatusBadGateway, "Login failed", "The issuer could not be reached: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), oauth2.HTTPClient, h.logins.hc), issuerTimeout)
	defer cancel()
	tok, err := oauthConfig(c, m).Exchange(ctx, q.Get("code"), oauth2.VerifierOption(f.verifier), oauth2.SetAuthURLParam("resource", c.PublicURL))
	if err != nil {
		msg := "the token endpoint refused the code"
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode != "" {
			msg += " (" + re.ErrorCode + ")"
		}
		loginPage(w, http.StatusBadGateway, "Login failed", msg+".")
		return
	}
	id, err := c.Verifier.Verify(r.Context(), tok.AccessToken)
	if err != nil {
		loginPage(w, http.StatusForbidden, "Login refused", "The issuer's token could not be verified.")
		return
	}
	if !guard.AudienceHas(id.Claims["aud"], c.PublicURL) && c.Audiences == nil {
		loginPage(w, http.StatusForbidden, "Login refused", "The token's audience is not "+c.PublicURL+".")
		return
	}
	if !id.HasScopes([]string{c.AdminScope}) {
		loginPage(w, http.StatusForbidden, "Login refused", id.Subject+" was not granted the admin scope "+c.AdminScope+".")
		return
	}
	exp := id.Expiry
	if exp.IsZero() {
		exp = tok.Expiry
	}
	sid, end := h.guard.Team().Sessions().Create(id, exp)
	http.SetCookie(w, c.SessionCookieFor(sid, end, time.Now()))
	w.Header().Set("Cache-Control", "no-store")
	// The page at the public URL (behind a proxy that serves mcpvisor
	// under a path, not this listener's "/").
	http.Redirect(w, r, c.PublicURL+"/", http.StatusSeeOther)
}

// logout ends the request's session and clears its cookie. It must come
// from the public URL's origin.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	c := h.guard.Team().Config()
	if c == nil {
		http.NotFound(w, r)
		return
	}
	if o := r.Header["Origin"]; len(o) != 1 || !strings.EqualFold(strings.TrimSuffix(o[0], "/"), c.Origin()) {
		http.Error(w, "a logout must come from "+c.Origin(), http.StatusForbidden)
		return
	}
	if sid := c.SessionID(r); sid != "" {
		h.guard.Team().Sessions().Delete(sid)
	}
	http.SetCookie(w, c.ClearCookie())
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// loginPage is a small page that says how a login ended.
func loginPage(w http.ResponseWriter, status int, title, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "<!doctype html><meta charset=utf-8><title>mcpvisor: "+html.EscapeString(title)+"</title><h1>"+
		html.EscapeString(title)+"</h1><p>"+html.EscapeString(msg)+"</p><p><a href=\"/\">Back to the dashboard</a></p>\n")
}
