package hydra

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Client authentication methods at the token endpoint (AuthMethod).
const (
	AuthSecretPost  = "client_secret_post"
	AuthSecretBasic = "client_secret_basic"
	AuthNone        = "none" // a public client (PKCE only)
)

// DefaultRedirectURI is the redirect URI of a code-flow client that names
// none: a loopback URI, for which Hydra accepts any port (RFC 8252 §7.3).
const DefaultRedirectURI = "http://127.0.0.1/callback"

// ClientSpec is an OAuth client to register.
type ClientSpec struct {
	// GrantTypes, e.g. "client_credentials", "authorization_code",
	// "refresh_token". Required.
	GrantTypes []string
	// Scopes the client may ask for.
	Scopes []string
	// Audiences the client may ask for at the token endpoint (the
	// client_credentials grant's audience parameter).
	Audiences []string
	// RedirectURIs of a code-flow client; default DefaultRedirectURI.
	RedirectURIs []string
	// AuthMethod at the token endpoint; default AuthSecretPost.
	AuthMethod string
	// Opaque: the client's access tokens are opaque (ory_at_…, for
	// introspection) instead of the server's JWTs.
	Opaque bool
}

// Client is a registered client. Its String hides the secret.
type Client struct {
	ID           string
	Secret       string
	AuthMethod   string
	RedirectURIs []string
}

func (c Client) String() string {
	return fmt.Sprintf("hydra.Client{ID:%q AuthMethod:%q}", c.ID, c.AuthMethod)
}

// GoString hides the secret from %#v too.
func (c Client) GoString() string { return c.String() }

// Token is a token endpoint's answer. Its String hides the tokens.
type Token struct {
	AccessToken  string
	TokenType    string
	RefreshToken string
	IDToken      string
	// Scope is the answer's scope (granted scopes, space-separated).
	Scope     string
	ExpiresIn int
	// Expiry is when the access token expires, from ExpiresIn.
	Expiry time.Time
}

func (t Token) String() string {
	return fmt.Sprintf("hydra.Token{TokenType:%q Scope:%q Expiry:%s refresh:%t}",
		t.TokenType, t.Scope, t.Expiry.Format(time.RFC3339), t.RefreshToken != "")
}

// GoString hides the tokens from %#v too.
func (t Token) GoString() string { return t.String() }

// CreateClient registers a client through the admin API.
func (s *Server) CreateClient(ctx context.Context, spec ClientSpec) (Client, error) {
	s.flow.Lock()
	defer s.flow.Unlock()
	if len(spec.GrantTypes) == 0 {
		return Client{}, errors.New("hydra: CreateClient: no grant types")
	}
	method := spec.AuthMethod
	if method == "" {
		method = AuthSecretPost
	}
	switch method {
	case AuthSecretPost, AuthSecretBasic, AuthNone:
	default:
		return Client{}, fmt.Errorf("hydra: CreateClient: unknown auth method %q (want %s, %s or %s)",
			method, AuthSecretPost, AuthSecretBasic, AuthNone)
	}
	body := map[string]any{
		"grant_types":                spec.GrantTypes,
		"scope":                      strings.Join(spec.Scopes, " "),
		"audience":                   nonNil(spec.Audiences),
		"token_endpoint_auth_method": method,
	}
	redirects := spec.RedirectURIs
	if slices.Contains(spec.GrantTypes, "authorization_code") {
		if len(redirects) == 0 {
			redirects = []string{DefaultRedirectURI}
		}
		body["response_types"] = []string{"code"}
		body["redirect_uris"] = redirects
	}
	if spec.Opaque {
		body["access_token_strategy"] = "opaque"
	}
	var out struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if err := s.admin(ctx, http.MethodPost, "/admin/clients", body, &out); err != nil {
		return Client{}, fmt.Errorf("hydra: CreateClient: %w", err)
	}
	if out.ClientID == "" {
		return Client{}, errors.New("hydra: CreateClient: the answer has no client_id")
	}
	return Client{ID: out.ClientID, Secret: out.ClientSecret, AuthMethod: method, RedirectURIs: redirects}, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// SetLifespan sets the lifespan of the access tokens Hydra issues to c,
// for every grant (e.g. a second, for expiry tests).
func (s *Server) SetLifespan(ctx context.Context, c Client, d time.Duration) error {
	s.flow.Lock()
	defer s.flow.Unlock()
	if d <= 0 {
		return fmt.Errorf("hydra: SetLifespan: %v is not a lifespan", d)
	}
	v := d.String()
	body := map[string]any{
		"authorization_code_grant_access_token_lifespan": v,
		"client_credentials_grant_access_token_lifespan": v,
		"refresh_token_grant_access_token_lifespan":      v,
		"jwt_bearer_grant_access_token_lifespan":         v,
		"implicit_grant_access_token_lifespan":           v,
	}
	if err := s.admin(ctx, http.MethodPut, "/admin/clients/"+url.PathEscape(c.ID)+"/lifespans", body, nil); err != nil {
		return fmt.Errorf("hydra: SetLifespan: %w", err)
	}
	return nil
}

// ClientCredentials obtains a token for c with the client_credentials
// grant, for audience and scopes (each may be empty). Hydra refuses an
// audience or a scope the client was not registered with.
func (s *Server) ClientCredentials(ctx context.Context, c Client, audience, scopes []string) (Token, error) {
	s.flow.Lock()
	defer s.flow.Unlock()
	form := url.Values{"grant_type": {"client_credentials"}}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	for _, a := range audience {
		form.Add("audience", a)
	}
	tok, err := s.token(ctx, s.hc, c, form)
	if err != nil {
		return Token{}, fmt.Errorf("hydra: client credentials: %w", err)
	}
	return tok, nil
}

// AuthorizationCode runs the authorization code flow for c as a browser
// would, headless: PKCE S256, the RFC 8707 resource parameters (granted
// as the token's audience), subject passed as login_hint (the login app
// logs it in), scopes requested and granted; then it exchanges the code,
// with the same resources. The client's first redirect URI receives the
// code: the browser stops at the redirect to it and reads the code from
// it, so nothing needs to listen there.
func (s *Server) AuthorizationCode(ctx context.Context, c Client, subject string, resource, scopes []string) (Token, error) {
	if subject == "" {
		return Token{}, errors.New("hydra: authorization code: no subject")
	}
	return s.authorizationCode(ctx, c, subject, resource, scopes)
}

// authorizationCode is AuthorizationCode; loginHint "" sends none.
func (s *Server) authorizationCode(ctx context.Context, c Client, loginHint string, resource, scopes []string) (Token, error) {
	s.flow.Lock()
	defer s.flow.Unlock()
	if len(c.RedirectURIs) == 0 {
		return Token{}, errors.New("hydra: authorization code: the client has no redirect URI (not registered for authorization_code?)")
	}
	redirectURI := c.RedirectURIs[0]
	verifier := random(32)
	sum := sha256.Sum256([]byte(verifier))
	state := random(16)
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {c.ID},
		"redirect_uri":          {redirectURI},
		"scope":                 {strings.Join(scopes, " ")},
		"state":                 {state},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
	}
	if loginHint != "" {
		q.Set("login_hint", loginHint)
	}
	for _, r := range resource {
		q.Add("resource", r)
	}

	jar, err := cookiejar.New(nil)
	if err != nil {
		return Token{}, err
	}
	tr := s.tr.Clone()
	defer tr.CloseIdleConnections()
	var callback *url.URL
	browser := &http.Client{
		Transport: tr,
		Jar:       jar,
		Timeout:   30 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if isRedirectTo(req.URL, redirectURI) {
				callback = req.URL
				return http.ErrUseLastResponse
			}
			if len(via) >= 20 {
				return errors.New("more than 20 redirects")
			}
			return nil
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.AuthURL()+"?"+q.Encode(), nil)
	if err != nil {
		return Token{}, err
	}
	resp, err := browser.Do(req)
	if err != nil {
		return Token{}, fmt.Errorf("hydra: authorization code: the browser: %w", s.withAppErr(err))
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if callback == nil {
		return Token{}, fmt.Errorf("hydra: authorization code: the browser stopped at %s (%s) before the redirect to %s: %s",
			resp.Request.URL.Scheme+"://"+resp.Request.URL.Host+resp.Request.URL.Path, resp.Status, redirectURI, s.withAppErr(errors.New(oauthError(body))))
	}
	cb := callback.Query()
	if e := cb.Get("error"); e != "" {
		return Token{}, fmt.Errorf("hydra: authorization code: the authorization server answered %s: %s", e, cb.Get("error_description"))
	}
	if cb.Get("state") != state {
		return Token{}, errors.New("hydra: authorization code: the callback's state is not the request's")
	}
	code := cb.Get("code")
	if code == "" {
		return Token{}, errors.New("hydra: authorization code: the callback has no code")
	}
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {redirectURI},
		"code_verifier": {verifier},
	}
	for _, r := range resource {
		form.Add("resource", r)
	}
	tok, err := s.token(ctx, browser, c, form)
	if err != nil {
		return Token{}, fmt.Errorf("hydra: authorization code: %w", err)
	}
	return tok, nil
}

func (s *Server) withAppErr(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.appErr != nil {
		return fmt.Errorf("%w (%v)", err, s.appErr)
	}
	return err
}

// isRedirectTo reports whether u is redirectURI, on any port when
// redirectURI is a loopback URI without one.
func isRedirectTo(u *url.URL, redirectURI string) bool {
	r, err := url.Parse(redirectURI)
	if err != nil {
		return false
	}
	if u.Scheme != r.Scheme || u.Path != r.Path {
		return false
	}
	if r.Port() == "" && (r.Hostname() == "127.0.0.1" || r.Hostname() == "::1" || r.Hostname() == "localhost") {
		return u.Hostname() == r.Hostname()
	}
	return u.Host == r.Host
}

// token posts form to the token endpoint with c's authentication.
func (s *Server) token(ctx context.Context, hc *http.Client, c Client, form url.Values) (Token, error) {
	form.Set("client_id", c.ID)
	if c.AuthMethod == AuthSecretPost || c.AuthMethod == "" {
		form.Set("client_secret", c.Secret)
	}
	status, b, err := send(ctx, hc, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.TokenURL(), strings.NewReader(form.Encode()))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		if c.AuthMethod == AuthSecretBasic {
			req.SetBasicAuth(url.QueryEscape(c.ID), url.QueryEscape(c.Secret))
		}
		return req, nil
	})
	if err != nil {
		return Token{}, fmt.Errorf("the token endpoint: %w", err)
	}
	if status != http.StatusOK {
		return Token{}, fmt.Errorf("the token endpoint answered %d %s: %s", status, http.StatusText(status), oauthError(b))
	}
	var tr struct {
		AccessToken  string `json:"access_token"`
		TokenType    string `json:"token_type"`
		RefreshToken string `json:"refresh_token"`
		IDToken      string `json:"id_token"`
		Scope        string `json:"scope"`
		ExpiresIn    int    `json:"expires_in"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		return Token{}, fmt.Errorf("the token endpoint's answer is not JSON: %w", err)
	}
	if tr.AccessToken == "" {
		return Token{}, errors.New("the token endpoint's answer has no access_token")
	}
	return Token{
		AccessToken:  tr.AccessToken,
		TokenType:    tr.TokenType,
		RefreshToken: tr.RefreshToken,
		IDToken:      tr.IDToken,
		Scope:        tr.Scope,
		ExpiresIn:    tr.ExpiresIn,
		Expiry:       time.Now().Add(time.Duration(tr.ExpiresIn) * time.Second),
	}, nil
}

func random(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
