// Package oauthtest is an in-process OAuth 2.1 authorization server and a
// protected MCP-like resource for tests, with a knob for each bad answer a
// client must survive. Both listen on 127.0.0.1. Authorization is approved
// by an immediate 302 to the redirect URI, so no browser is needed. Access
// tokens look like "tok-<random>" and refresh tokens "ref-<random>", so a
// test can grep logs and answers for leaks.
package oauthtest

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Iss values for Options.Iss.
const (
	IssCorrect    = ""
	IssOmit       = "omit"
	IssWrong      = "wrong"
	IssNormalized = "normalized" // the issuer with a "/" appended
)

// Where the metadata documents are served (Options.MetadataAt, Options.PRMAt).
const (
	MetadataOAuth        = ""              // /.well-known/oauth-authorization-server[/path]
	MetadataOIDC         = "oidc"          // /.well-known/openid-configuration[/path]
	MetadataOIDCAppended = "oidc-appended" // [/path]/.well-known/openid-configuration
	MetadataNone         = "none"          // no document: 2025-03-26 default endpoints

	PRMPath   = ""     // /.well-known/oauth-protected-resource/mcp
	PRMRoot   = "root" // /.well-known/oauth-protected-resource, resource = origin
	PRMCustom = "custom"
	PRMNone   = "none" // no PRM: the resource's origin is the issuer (2025-03-26)
)

// Options are the servers' knobs. Set changes them while running.
type Options struct {
	// Authorization server.
	IssuerPath         string // e.g. "/tenant1"
	MetadataAt         string // MetadataOAuth, MetadataOIDC, MetadataOIDCAppended, MetadataNone
	MetadataIssuer     string // written as "issuer" instead of the real one (issuer mismatch)
	NoPKCEAdvertised   bool   // omit code_challenge_methods_supported
	NoIssAdvertised    bool   // omit authorization_response_iss_parameter_supported
	Iss                string // IssCorrect, IssOmit, IssWrong, IssNormalized
	AuthorizeError     string // redirect with error= (and AuthorizeErrorDesc)
	AuthorizeErrorDesc string
	TamperState        bool     // redirect with another state
	TamperCode         bool     // redirect with a code the token endpoint does not know
	ScopesSupported    []string // AS scopes_supported
	CIMD               bool     // client_id_metadata_document_supported
	NoRegistration     bool     // no registration_endpoint
	RegistrationError  int      // the registration endpoint answers this status
	AuthMethods        []string // token_endpoint_auth_methods_supported; default none, client_secret_basic, client_secret_post
	SigningAlgs        []string // token_endpoint_auth_signing_alg_values_supported
	ClientID           string   // a pre-registered (or client credentials) client
	ClientSecret       string
	ClientPublicKey    crypto.PublicKey // verifies private_key_jwt assertions of ClientID
	RefreshTokens      bool             // issue refresh tokens, rotated on each refresh unless NoRotation
	NoRotation         bool
	TokenLifetime      time.Duration // default one hour
	Revocation         bool          // advertise and serve revocation_endpoint
	MetadataDelay      time.Duration // every metadata document waits this long
	TokenDelay         time.Duration // the token endpoint waits this long
	OversizedMetadata  bool          // AS metadata larger than 1 MiB
	TokenStatus        int           // the token endpoint answers this status with TokenError
	TokenError         string
	RefreshError       string         // refresh requests answer 400 with this error (e.g. invalid_grant)
	TokenRedirect      bool           // the token endpoint answers 307 to itself
	IDTokenClaims      map[string]any // when set, authorization code grants also answer an id_token with these claims

	HTMLCatchAll bool // unknown /.well-known/ paths (on both servers) answer 200 with an HTML page

	// Protected resource.
	PRMAt                string       // PRMPath, PRMRoot, PRMCustom, PRMNone
	NoPRMInHeader        bool         // leave resource_metadata out of the 401
	PRMResource          string       // written as "resource" instead of the real one
	PRMScopes            []string     // PRM scopes_supported
	AuthorizationServers []string     // PRM authorization_servers; default the issuer
	ChallengeScope       []string     // scope= of the 401
	RequiredScopes       []string     // a token without these gets 403 insufficient_scope
	AlwaysForbid         []string     // every token gets 403 insufficient_scope with this scope
	Handler              http.Handler // served behind the bearer check; default answers "ok"
}

// TokenRequest is one request the token endpoint saw.
type TokenRequest struct {
	Form          url.Values
	Authorization string // the Authorization header
}

type codeInfo struct {
	clientID, redirectURI, challenge, resource string
	scope                                      []string
}

type tokenInfo struct {
	clientID, resource string
	scope              []string
	expiry             time.Time
}

type client struct {
	secret, method string
	redirectURIs   []string
}

// Server is the authorization server (AS) and the protected resource (RS).
type Server struct {
	URL    string // the protected resource: RS origin + "/mcp"
	Issuer string
	AS, RS *httptest.Server

	mu          sync.Mutex
	o           Options
	counts      map[string]int
	authorizes  []url.Values
	tokens      []TokenRequest
	registers   []map[string]any
	revocations []url.Values
	codes       map[string]codeInfo
	access      map[string]tokenInfo
	refresh     map[string]tokenInfo
	clients     map[string]client
	jtis        map[string]bool
	issued      []string
}

// New starts both servers; they close when the test ends.
func New(t testing.TB, o Options) *Server {
	t.Helper()
	s := &Server{o: o, counts: map[string]int{}, codes: map[string]codeInfo{}, access: map[string]tokenInfo{},
		refresh: map[string]tokenInfo{}, clients: map[string]client{}, jtis: map[string]bool{}}
	s.AS = newLoopback(http.HandlerFunc(s.serveAS))
	s.RS = newLoopback(http.HandlerFunc(s.serveRS))
	t.Cleanup(s.Close)
	s.Issuer = s.AS.URL + o.IssuerPath
	if o.PRMAt == PRMNone {
		// 2025-03-26: the resource's origin is the authorization server.
		s.Issuer = s.RS.URL
	}
	s.URL = s.RS.URL + "/mcp"
	return s
}

func newLoopback(h http.Handler) *httptest.Server {
	return httptest.NewServer(h) // httptest listens on 127.0.0.1
}

// Close stops both servers.
func (s *Server) Close() {
	s.AS.Close()
	s.RS.Close()
}

// Set changes the knobs.
func (s *Server) Set(f func(*Options)) {
	s.mu.Lock()
	f(&s.o)
	s.mu.Unlock()
}

func (s *Server) opts() Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.o
}

// Count is how many requests of a kind were served: "as-metadata",
// "prm", "authorize", "token", "refresh" (refresh_token grants),
// "client-credentials", "register", "revoke", "resource" (requests to the
// protected resource), "resource-ok" (those that passed the bearer check).
func (s *Server) Count(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[kind]
}

func (s *Server) count(kind string) {
	s.mu.Lock()
	s.counts[kind]++
	s.mu.Unlock()
}

// Authorizations are the query parameters of every authorization request.
func (s *Server) Authorizations() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.authorizes)
}

// TokenRequests are every token request.
func (s *Server) TokenRequests() []TokenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tokens)
}

// Registrations are the bodies of every registration request.
func (s *Server) Registrations() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.registers)
}

// Revocations are the forms of every revocation request.
func (s *Server) Revocations() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.revocations)
}

// IssuedTokens are every access and refresh token issued, for leak checks.
func (s *Server) IssuedTokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.issued)
}

// RevokeAll invalidates every access and refresh token issued so far.
func (s *Server) RevokeAll() {
	s.mu.Lock()
	clear(s.access)
	clear(s.refresh)
	s.mu.Unlock()
}

// ExpireAccessTokens makes every issued access token invalid at the
// resource (as if expired), keeping refresh tokens.
func (s *Server) ExpireAccessTokens() {
	s.mu.Lock()
	clear(s.access)
	s.mu.Unlock()
}

// Valid says whether an access token would pass the resource's check.
func (s *Server) Valid(token string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ti, ok := s.access[token]
	return ok && time.Now().Before(ti.expiry)
}

// Approve performs what a browser would: it GETs the authorization URL
// and answers the query of the redirect it gets (code, state, iss or
// error), without following it.
func (s *Server) Approve(authURL string) (url.Values, error) {
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(authURL)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		return nil, fmt.Errorf("authorization answered HTTP %d, not a redirect", resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		return nil, err
	}
	return loc.Query(), nil
}

func random(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func oauthError(w http.ResponseWriter, status int, code, desc string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

func wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

func (s *Server) metadataPath(o Options) string {
	switch o.MetadataAt {
	case MetadataOIDC:
		return "/.well-known/openid-configuration" + o.IssuerPath
	case MetadataOIDCAppended:
		return o.IssuerPath + "/.well-known/openid-configuration"
	case MetadataNone:
		return ""
	}
	return "/.well-known/oauth-authorization-server" + o.IssuerPath
}

func (s *Server) metadata(o Options) map[string]any {
	base := s.Issuer
	issuer := s.Issuer
	if o.MetadataIssuer != "" {
		issuer = o.MetadataIssuer
	}
	methods := o.AuthMethods
	if methods == nil {
		methods = []string{"none", "client_secret_basic", "client_secret_post"}
	}
	m := map[string]any{
		"issuer":                                issuer,
		"authorization_endpoint":                base + "/authorize",
		"token_endpoint":                        base + "/token",
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code", "refresh_token", "client_credentials"},
		"token_endpoint_auth_methods_supported": methods,
	}
	if !o.NoPKCEAdvertised {
		m["code_challenge_methods_supported"] = []string{"S256"}
	}
	if !o.NoIssAdvertised {
		m["authorization_response_iss_parameter_supported"] = true
	}
	if !o.NoRegistration {
		m["registration_endpoint"] = base + "/register"
	}
	if o.Revocation {
		m["revocation_endpoint"] = base + "/revoke"
	}
	if o.ScopesSupported != nil {
		m["scopes_supported"] = o.ScopesSupported
	}
	if o.CIMD {
		m["client_id_metadata_document_supported"] = true
	}
	if o.SigningAlgs != nil {
		m["token_endpoint_auth_signing_alg_values_supported"] = o.SigningAlgs
	}
	if o.OversizedMetadata {
		m["padding"] = strings.Repeat("x", 1<<20+10)
	}
	return m
}

func (s *Server) serveAS(w http.ResponseWriter, r *http.Request) {
	o := s.opts()
	p := r.URL.Path
	if mp := s.metadataPath(o); mp != "" && p == mp && r.Method == http.MethodGet {
		s.count("as-metadata")
		if !wait(r, o.MetadataDelay) {
			return
		}
		writeJSON(w, http.StatusOK, s.metadata(o))
		return
	}
	switch strings.TrimPrefix(p, o.IssuerPath) {
	case "/authorize":
		s.authorize(w, r, o)
	case "/token":
		s.token(w, r, o)
	case "/register":
		if o.NoRegistration {
			http.NotFound(w, r)
			return
		}
		s.register(w, r, o)
	case "/revoke":
		if !o.Revocation {
			http.NotFound(w, r)
			return
		}
		s.revoke(w, r, o)
	default:
		notFound(w, r, o)
	}
}

func notFound(w http.ResponseWriter, r *http.Request, o Options) {
	if o.HTMLCatchAll && strings.HasPrefix(r.URL.Path, "/.well-known/") {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<!doctype html><title>app</title>"))
		return
	}
	http.NotFound(w, r)
}

func (s *Server) knownClient(o Options, id string) (client, bool) {
	if id != "" && id == o.ClientID {
		m := "client_secret_basic"
		if o.ClientSecret == "" {
			m = "none"
		}
		if o.ClientPublicKey != nil {
			m = "private_key_jwt"
		}
		return client{secret: o.ClientSecret, method: m}, true
	}
	s.mu.Lock()
	c, ok := s.clients[id]
	s.mu.Unlock()
	if ok {
		return c, true
	}
	if o.CIMD && strings.HasPrefix(id, "https://") {
		return client{method: "none"}, true
	}
	return client{}, false
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request, o Options) {
	q := r.URL.Query()
	s.mu.Lock()
	s.counts["authorize"]++
	s.authorizes = append(s.authorizes, q)
	s.mu.Unlock()
	redirect := q.Get("redirect_uri")
	ru, err := url.Parse(redirect)
	if redirect == "" || err != nil {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	c, ok := s.knownClient(o, q.Get("client_id"))
	if !ok {
		http.Error(w, "unknown client", http.StatusBadRequest)
		return
	}
	if c.redirectURIs != nil && !slices.Contains(c.redirectURIs, redirect) {
		http.Error(w, "redirect_uri not registered", http.StatusBadRequest)
		return
	}
	back := ru.Query()
	state := q.Get("state")
	if o.TamperState {
		state = "tampered-" + state
	}
	back.Set("state", state)
	switch o.Iss {
	case IssCorrect:
		back.Set("iss", s.Issuer)
	case IssWrong:
		back.Set("iss", "https://evil.example.com")
	case IssNormalized:
		back.Set("iss", s.Issuer+"/")
	}
	switch {
	case o.AuthorizeError != "":
		back.Set("error", o.AuthorizeError)
		if o.AuthorizeErrorDesc != "" {
			back.Set("error_description", o.AuthorizeErrorDesc)
		}
	case q.Get("response_type") != "code":
		back.Set("error", "unsupported_response_type")
	case q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		back.Set("error", "invalid_request")
		back.Set("error_description", "PKCE S256 is required")
	default:
		code := random("code-")
		s.mu.Lock()
		s.codes[code] = codeInfo{clientID: q.Get("client_id"), redirectURI: redirect, challenge: q.Get("code_challenge"),
			resource: q.Get("resource"), scope: strings.Fields(q.Get("scope"))}
		s.mu.Unlock()
		if o.TamperCode {
			code = "tampered-" + code
		}
		back.Set("code", code)
	}
	ru.RawQuery = back.Encode()
	http.Redirect(w, r, ru.String(), http.StatusFound)
}

// authenticate checks the token request's client authentication.
func (s *Server) authenticate(r *http.Request, o Options, form url.Values) (string, error) {
	if id, secret, ok := r.BasicAuth(); ok {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
		c, known := s.knownClient(o, id)
		if !known || c.secret == "" || c.secret != secret {
			return "", fmt.Errorf("client authentication failed")
		}
		if c.method != "client_secret_basic" {
			return "", fmt.Errorf("client must use %s", c.method)
		}
		return id, nil
	}
	if a := form.Get("client_assertion"); a != "" {
		if form.Get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" {
			return "", fmt.Errorf("bad client_assertion_type")
		}
		return s.verifyAssertion(o, a)
	}
	id := form.Get("client_id")
	c, known := s.knownClient(o, id)
	if !known {
		return "", fmt.Errorf("unknown client")
	}
	if sec := form.Get("client_secret"); sec != "" {
		if c.secret != sec || c.method != "client_secret_post" {
			return "", fmt.Errorf("client authentication failed")
		}
		return id, nil
	}
	if c.method != "none" {
		return "", fmt.Errorf("client must use %s", c.method)
	}
	return id, nil
}

func (s *Server) verifyAssertion(o Options, a string) (string, error) {
	if o.ClientPublicKey == nil {
		return "", fmt.Errorf("no key for private_key_jwt")
	}
	claims := jwt.RegisteredClaims{}
	_, err := jwt.ParseWithClaims(a, &claims, func(*jwt.Token) (any, error) { return o.ClientPublicKey, nil },
		jwt.WithValidMethods([]string{"ES256", "RS256"}), jwt.WithLeeway(30*time.Second), jwt.WithExpirationRequired(), jwt.WithIssuedAt())
	if err != nil {
		return "", fmt.Errorf("client assertion: %v", err)
	}
	if claims.Issuer != o.ClientID || claims.Subject != o.ClientID {
		return "", fmt.Errorf("client assertion: iss %q sub %q, want %q", claims.Issuer, claims.Subject, o.ClientID)
	}
	if !slices.Contains(claims.Audience, s.Issuer) && !slices.Contains(claims.Audience, s.Issuer+"/") {
		return "", fmt.Errorf("client assertion: aud %q is not the issuer", claims.Audience)
	}
	if time.Until(claims.ExpiresAt.Time) > 5*time.Minute {
		return "", fmt.Errorf("client assertion: lives too long")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if claims.ID == "" || s.jtis[claims.ID] {
		return "", fmt.Errorf("client assertion: missing or reused jti")
	}
	s.jtis[claims.ID] = true
	return o.ClientID, nil
}

func (s *Server) issue(o Options, clientID, resource string, scope []string, withRefresh bool) map[string]any {
	life := o.TokenLifetime
	if life <= 0 {
		life = time.Hour
	}
	at := random("tok-")
	ti := tokenInfo{clientID: clientID, resource: resource, scope: scope, expiry: time.Now().Add(life)}
	s.mu.Lock()
	s.access[at] = ti
	s.issued = append(s.issued, at)
	out := map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": int(life / time.Second)}
	if len(scope) > 0 {
		out["scope"] = strings.Join(scope, " ")
	}
	if withRefresh {
		rt := random("ref-")
		s.refresh[rt] = ti
		s.issued = append(s.issued, rt)
		out["refresh_token"] = rt
	}
	s.mu.Unlock()
	return out
}

func (s *Server) token(w http.ResponseWriter, r *http.Request, o Options) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if err := r.ParseForm(); err != nil {
		oauthError(w, 400, "invalid_request", "bad form")
		return
	}
	form := r.PostForm
	s.mu.Lock()
	s.counts["token"]++
	s.tokens = append(s.tokens, TokenRequest{Form: form, Authorization: r.Header.Get("Authorization")})
	s.mu.Unlock()
	if !wait(r, o.TokenDelay) {
		return
	}
	if o.TokenRedirect {
		http.Redirect(w, r, r.URL.String(), http.StatusTemporaryRedirect)
		return
	}
	if o.TokenStatus != 0 {
		oauthError(w, o.TokenStatus, o.TokenError, "the token endpoint is told to fail")
		return
	}
	clientID, err := s.authenticate(r, o, form)
	if err != nil {
		oauthError(w, 401, "invalid_client", err.Error())
		return
	}
	switch form.Get("grant_type") {
	case "authorization_code":
		code := form.Get("code")
		s.mu.Lock()
		ci, ok := s.codes[code]
		delete(s.codes, code)
		s.mu.Unlock()
		switch {
		case !ok:
			oauthError(w, 400, "invalid_grant", "unknown or used code")
		case ci.clientID != clientID:
			oauthError(w, 400, "invalid_grant", "code issued to another client")
		case ci.redirectURI != form.Get("redirect_uri"):
			oauthError(w, 400, "invalid_grant", "redirect_uri mismatch")
		case s256(form.Get("code_verifier")) != ci.challenge:
			oauthError(w, 400, "invalid_grant", "PKCE verification failed")
		case form.Get("resource") != ci.resource:
			oauthError(w, 400, "invalid_target", "resource differs from the authorization request")
		default:
			out := s.issue(o, clientID, ci.resource, ci.scope, o.RefreshTokens)
			if o.IDTokenClaims != nil {
				claims := jwt.MapClaims{"iss": s.Issuer, "aud": clientID, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
				for k, v := range o.IDTokenClaims {
					claims[k] = v
				}
				key := make([]byte, 32)
				_, _ = rand.Read(key)
				out["id_token"], _ = jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
			}
			writeJSON(w, 200, out)
		}
	case "refresh_token":
		s.count("refresh")
		if o.RefreshError != "" {
			oauthError(w, 400, o.RefreshError, "refresh is told to fail")
			return
		}
		rt := form.Get("refresh_token")
		s.mu.Lock()
		ti, ok := s.refresh[rt]
		if ok && !o.NoRotation {
			delete(s.refresh, rt)
		}
		s.mu.Unlock()
		switch {
		case !ok:
			oauthError(w, 400, "invalid_grant", "unknown refresh token")
		case ti.clientID != clientID:
			oauthError(w, 400, "invalid_grant", "refresh token of another client")
		case form.Get("resource") != ti.resource:
			oauthError(w, 400, "invalid_target", "resource differs")
		default:
			out := s.issue(o, clientID, ti.resource, ti.scope, !o.NoRotation)
			if o.NoRotation {
				delete(out, "refresh_token")
			}
			writeJSON(w, 200, out)
		}
	case "client_credentials":
		s.count("client-credentials")
		writeJSON(w, 200, s.issue(o, clientID, form.Get("resource"), strings.Fields(form.Get("scope")), false))
	default:
		oauthError(w, 400, "unsupported_grant_type", "")
	}
}

func s256(v string) string {
	h := sha256.Sum256([]byte(v))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

func (s *Server) register(w http.ResponseWriter, r *http.Request, o Options) {
	var body map[string]any
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&body); err != nil {
		oauthError(w, 400, "invalid_client_metadata", "bad JSON")
		return
	}
	s.mu.Lock()
	s.counts["register"]++
	s.registers = append(s.registers, body)
	s.mu.Unlock()
	if o.RegistrationError != 0 {
		oauthError(w, o.RegistrationError, "invalid_redirect_uri", "registration is told to fail")
		return
	}
	var uris []string
	if l, ok := body["redirect_uris"].([]any); ok {
		for _, u := range l {
			if s, ok := u.(string); ok {
				uris = append(uris, s)
			}
		}
	}
	if len(uris) == 0 {
		oauthError(w, 400, "invalid_redirect_uri", "no redirect_uris")
		return
	}
	method, _ := body["token_endpoint_auth_method"].(string)
	if method == "" {
		method = "client_secret_basic"
	}
	methods := o.AuthMethods
	if methods == nil {
		methods = []string{"none", "client_secret_basic", "client_secret_post"}
	}
	if !slices.Contains(methods, method) {
		method = methods[0]
	}
	id := random("client-")
	c := client{method: method, redirectURIs: uris}
	out := map[string]any{"client_id": id, "redirect_uris": uris, "token_endpoint_auth_method": method}
	if method != "none" {
		c.secret = random("secret-")
		out["client_secret"] = c.secret
	}
	s.mu.Lock()
	s.clients[id] = c
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) revoke(w http.ResponseWriter, r *http.Request, o Options) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, 400, "invalid_request", "bad form")
		return
	}
	s.mu.Lock()
	s.counts["revoke"]++
	s.revocations = append(s.revocations, r.PostForm)
	s.mu.Unlock()
	if _, err := s.authenticate(r, o, r.PostForm); err != nil {
		oauthError(w, 401, "invalid_client", err.Error())
		return
	}
	tok := r.PostForm.Get("token")
	s.mu.Lock()
	delete(s.access, tok)
	delete(s.refresh, tok)
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// PRMURL is where the protected resource metadata is served ("" for PRMNone).
func (s *Server) PRMURL() string {
	switch s.opts().PRMAt {
	case PRMRoot:
		return s.RS.URL + "/.well-known/oauth-protected-resource"
	case PRMCustom:
		return s.RS.URL + "/custom/metadata/location.json"
	case PRMNone:
		return ""
	}
	return s.RS.URL + "/.well-known/oauth-protected-resource/mcp"
}

// Resource is the resource identifier the PRM names.
func (s *Server) Resource() string {
	o := s.opts()
	if o.PRMResource != "" {
		return o.PRMResource
	}
	if o.PRMAt == PRMRoot {
		return s.RS.URL
	}
	return s.URL
}

func (s *Server) serveRS(w http.ResponseWriter, r *http.Request) {
	o := s.opts()
	if pu := s.PRMURL(); pu != "" && r.Method == http.MethodGet && s.RS.URL+r.URL.Path == pu {
		s.count("prm")
		if !wait(r, o.MetadataDelay) {
			return
		}
		servers := o.AuthorizationServers
		if servers == nil {
			servers = []string{s.Issuer}
		}
		doc := map[string]any{"resource": s.Resource(), "authorization_servers": servers}
		if o.PRMScopes != nil {
			doc["scopes_supported"] = o.PRMScopes
		}
		writeJSON(w, http.StatusOK, doc)
		return
	}
	if s.Issuer == s.RS.URL {
		// 2025-03-26: metadata and endpoints on the resource's origin.
		switch p := r.URL.Path; {
		case p == s.metadataPath(o), p == "/authorize", p == "/token", p == "/register", p == "/revoke":
			s.serveAS(w, r)
			return
		}
	}
	if strings.HasPrefix(r.URL.Path, "/.well-known/") {
		notFound(w, r, o)
		return
	}
	h := o.Handler
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	}
	s.ProtectedResource(h).ServeHTTP(w, r)
}

// ProtectedResource wraps h with the bearer check: no or an invalid token
// gets 401 with resource_metadata, a token lacking RequiredScopes (or any
// token while AlwaysForbid is set) gets 403 insufficient_scope.
func (s *Server) ProtectedResource(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := s.opts()
		s.count("resource")
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		s.mu.Lock()
		ti, known := s.access[tok]
		s.mu.Unlock()
		if !ok || !known || !time.Now().Before(ti.expiry) || (ti.resource != s.Resource() && ti.resource != s.URL) {
			ch := `Bearer error="invalid_token", error_description="missing or invalid token"`
			if len(o.ChallengeScope) > 0 {
				ch += fmt.Sprintf(`, scope="%s"`, strings.Join(o.ChallengeScope, " "))
			}
			if pu := s.PRMURL(); pu != "" && !o.NoPRMInHeader {
				ch += fmt.Sprintf(`, resource_metadata="%s"`, pu)
			}
			w.Header().Set("WWW-Authenticate", ch)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		need := o.AlwaysForbid
		if need == nil {
			for _, sc := range o.RequiredScopes {
				if !slices.Contains(ti.scope, sc) {
					need = o.RequiredScopes
					break
				}
			}
		}
		if need != nil {
			ch := fmt.Sprintf(`Bearer error="insufficient_scope", scope="%s"`, strings.Join(need, " "))
			if pu := s.PRMURL(); pu != "" {
				ch += fmt.Sprintf(`, resource_metadata="%s"`, pu)
			}
			w.Header().Set("WWW-Authenticate", ch)
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		s.count("resource-ok")
		h.ServeHTTP(w, r)
	})
}
