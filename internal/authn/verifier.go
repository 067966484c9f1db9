// Package authn verifies the bearer tokens of requests to mcpvisor as an
// OAuth 2.0 resource server (MCP authorization, RFC 6750, RFC 9068, RFC
// 7662, RFC 9728): JWT access tokens against the configured issuer's
// JWKS, opaque tokens by the issuer's introspection endpoint. It also
// extracts the token from a request, writes RFC 6750 challenges and
// serves RFC 9728 protected resource metadata.
//
// The JWKS is fetched and cached here (golang-jwt does the signature
// checks): an unknown kid refetches at most once per RefetchInterval
// whatever the flood, requests wait for a fetch under way for at most
// FetchWait, and nothing runs after Close.
package authn

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/golang-jwt/jwt/v5"
	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// Bounds of the key cache and of waiting for the issuer.
const (
	// RefetchInterval: the JWKS (and the issuer's metadata) is fetched
	// at most once per interval on demand (an unknown kid), however
	// many requests ask.
	RefetchInterval = 5 * time.Second
	// RetryInterval: after a failed fetch, the next is not tried sooner.
	RetryInterval = 2 * time.Second
	// RefreshInterval: keys older than this are refreshed in the
	// background at the next request (which does not wait for it).
	RefreshInterval = 15 * time.Minute
	// FetchWait bounds how long a request waits for a fetch under way.
	FetchWait = 2 * time.Second
	// FetchTimeout bounds one fetch (metadata, JWKS, introspection).
	FetchTimeout = 10 * time.Second
	// DefaultSkew is the clock skew allowed on exp, nbf and iat.
	DefaultSkew = 60 * time.Second
	// MaxSkew is the largest Skew New accepts.
	MaxSkew = 5 * time.Minute
	// MaxIntrospections bounds the introspection requests under way at
	// once; a request that finds them all busy for FetchWait is answered
	// issuer_unavailable. It keeps a flood of made-up opaque tokens from
	// becoming a flood at the authorization server.
	MaxIntrospections = 16
	// DefaultCacheSize bounds the verified-token cache.
	DefaultCacheSize = 10000
	maxDocument      = 1 << 20
)

// asymmetric are the algorithms a token may be signed with: public-key
// signatures only. "none" and HMAC (HS*) are never accepted, so a token
// "signed" with the issuer's public key as an HMAC secret fails by
// construction.
var asymmetric = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"}

// Options configure a Verifier.
type Options struct {
	// Issuer is the authorization server's issuer identifier; a token's
	// iss and the discovered metadata's issuer must equal it exactly.
	// https, or http on a loopback host.
	Issuer string
	// Audiences are the accepted aud values (RFC 9068 §4; the endpoints'
	// RFC 8707 resource URLs). A token's audience matches one exactly or
	// differing only by one trailing slash; nothing looser.
	Audiences []string
	// Algorithms is the allow-list of signature algorithms; default all
	// of RS256/384/512, PS256/384/512, ES256/384, EdDSA. None and HS*
	// are refused.
	Algorithms []string
	// Skew is the clock skew allowed on exp, nbf, iat: default 60 s,
	// at most MaxSkew.
	Skew time.Duration
	// JWKSURL overrides the jwks_uri of the issuer's metadata.
	JWKSURL string
	// Introspection, when set, verifies opaque tokens (anything not a
	// JWS compact serialization) by RFC 7662.
	Introspection *Introspection
	// GroupsClaim names the claim that holds the groups (a string or an
	// array of strings): default "groups". A dotted name (ext.groups)
	// reaches into nested objects when no top-level claim has it.
	GroupsClaim string
	// CacheSize bounds the verified-token cache; 0 means
	// DefaultCacheSize, negative disables it.
	CacheSize int
	// HTTPClient fetches metadata, JWKS and introspection; default a
	// client with a FetchTimeout timeout.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Introspection is an RFC 7662 endpoint. With ClientID set, mcpvisor
// authenticates by client_secret_basic. An empty URL means the
// introspection_endpoint of the issuer's metadata.
type Introspection struct {
	URL          string
	ClientID     string
	ClientSecret string
}

// Verifier verifies bearer tokens. It is safe for concurrent use.
type Verifier struct {
	opts      Options
	algs      []string
	audiences map[string]bool
	parser    *jwt.Parser
	client    *http.Client
	log       *slog.Logger
	cache     *tokenCache
	introSem  chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	meta     *asMetadata
	keys     []jwk
	keysAt   time.Time // when keys were fetched
	next     time.Time // no fetch before
	inflight *fetch
}

type fetch struct {
	done chan struct{}
	err  error
}

type asMetadata struct {
	Issuer                string `json:"issuer"`
	JWKSURI               string `json:"jwks_uri"`
	IntrospectionEndpoint string `json:"introspection_endpoint"`
}

// New checks opts and returns a Verifier. It does no network I/O: the
// issuer's metadata and keys are fetched at the first Verify.
func New(opts Options) (*Verifier, error) {
	if err := checkIssuer(opts.Issuer); err != nil {
		return nil, err
	}
	if len(opts.Audiences) == 0 {
		return nil, errors.New("authn: at least one audience is required")
	}
	auds := map[string]bool{}
	for _, a := range opts.Audiences {
		if a == "" || strings.TrimSpace(a) != a || strings.ContainsAny(a, " \t\r\n") {
			return nil, fmt.Errorf("authn: audience %q is empty or holds white space", a)
		}
		auds[a] = true
	}
	algs := opts.Algorithms
	if len(algs) == 0 {
		algs = asymmetric
	}
	for _, a := range algs {
		switch {
		case strings.EqualFold(a, "none"):
			return nil, errors.New(`authn: algorithm "none" is never accepted`)
		case strings.HasPrefix(strings.ToUpper(a), "HS"):
			return nil, fmt.Errorf("authn: algorithm %q is symmetric: only public-key algorithms are accepted", a)
		case !contains(asymmetric, a):
			return nil, fmt.Errorf("authn: unknown algorithm %q (known: %s)", a, strings.Join(asymmetric, ", "))
		}
	}
	switch {
	case opts.Skew < 0:
		return nil, fmt.Errorf("authn: negative skew %v", opts.Skew)
	case opts.Skew > MaxSkew:
		return nil, fmt.Errorf("authn: skew %v exceeds the maximum %v", opts.Skew, MaxSkew)
	case opts.Skew == 0:
		opts.Skew = DefaultSkew
	}
	if opts.JWKSURL != "" {
		if err := checkEndpoint("JWKS URL", opts.JWKSURL); err != nil {
			return nil, err
		}
	}
	if in := opts.Introspection; in != nil {
		if in.URL != "" {
			if err := checkEndpoint("introspection URL", in.URL); err != nil {
				return nil, err
			}
		}
		if in.ClientSecret != "" && in.ClientID == "" {
			return nil, errors.New("authn: introspection client secret without a client id")
		}
	}
	if opts.GroupsClaim == "" {
		opts.GroupsClaim = "groups"
	}
	size := opts.CacheSize
	if size == 0 {
		size = DefaultCacheSize
	}
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: FetchTimeout}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	v := &Verifier{
		opts: opts, algs: algs, audiences: auds, client: client, log: log,
		parser: jwt.NewParser(
			jwt.WithValidMethods(algs),
			jwt.WithIssuer(opts.Issuer),
			jwt.WithLeeway(opts.Skew),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithStrictDecoding(),
		),
	}
	v.introSem = make(chan struct{}, MaxIntrospections)
	if size > 0 {
		v.cache = newTokenCache(size)
	}
	v.ctx, v.cancel = context.WithCancel(context.Background())
	return v, nil
}

func checkIssuer(iss string) error {
	if iss == "" {
		return errors.New("authn: an issuer is required")
	}
	u, err := url.Parse(iss)
	if err != nil {
		return fmt.Errorf("authn: issuer %q is not a URL: %v", iss, err)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("authn: issuer %q has a query, fragment or user info (RFC 8414 §2)", iss)
	}
	return checkScheme("issuer", iss, u)
}

func checkEndpoint(what, s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("authn: %s %q is not a URL: %v", what, s, err)
	}
	return checkScheme(what, s, u)
}

func checkScheme(what, s string, u *url.URL) error {
	if u.Host == "" {
		return fmt.Errorf("authn: %s %q is not an absolute URL", what, s)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopback(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("authn: %s %q must use https (http only on a loopback host)", what, s)
	}
	return fmt.Errorf("authn: %s %q must be an https URL", what, s)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Close stops the Verifier's fetches under way and waits for them; every
// Verify after it fails with issuer_unavailable.
func (v *Verifier) Close() error {
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	v.cancel()
	v.wg.Wait()
	return nil
}

// Verify verifies token and returns who it stands for. A JWS compact
// token (three dot-separated parts, the first a JSON header with an
// alg) is verified as a JWT; anything else by introspection, if
// configured. The error is always an *Error:
// invalid_token (401), or issuer_unavailable (503) when the issuer's keys
// or introspection endpoint cannot be had.
//
// Verified tokens are cached (keyed by a SHA-256 of the token, never the
// token) until their exp, checked at every hit. A key the issuer later
// drops from its JWKS does not purge the tokens it verified: they stay
// valid until their exp, as they would at any resource server that
// cached them; revoke by short token lifetimes.
func (v *Verifier) Verify(ctx context.Context, token string) (*identity.Identity, error) {
	if token == "" {
		return nil, invalidToken("no token", nil)
	}
	if len(token) > MaxTokenLen {
		return nil, invalidToken("token too long", nil)
	}
	var key [32]byte
	if v.cache != nil {
		key = tokenKey(token)
		if id := v.cache.get(key, time.Now()); id != nil {
			return id, nil
		}
	}
	var (
		id  *identity.Identity
		err *Error
	)
	if looksLikeJWT(token) {
		id, err = v.verifyJWT(ctx, token)
	} else {
		id, err = v.introspect(ctx, token)
	}
	if err != nil {
		return nil, err
	}
	if v.cache != nil {
		v.cache.put(key, id, time.Now())
	}
	return id, nil
}

// looksLikeJWT: three dot-separated parts, the first a base64url JSON
// object with an alg. Opaque tokens may hold dots (Hydra's one); only a
// JWS header makes a JWT.
func looksLikeJWT(token string) bool {
	head, rest, ok := strings.Cut(token, ".")
	if !ok || strings.Count(rest, ".") != 1 || len(head) > 4096 {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return false
	}
	var h struct {
		Alg *string `json:"alg"`
	}
	return json.Unmarshal(b, &h) == nil && h.Alg != nil
}

// tokenKey is the cache key of token: its SHA-256, computed without
// copying the token (sha256 does not keep the slice).
func tokenKey(token string) [32]byte {
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(token), len(token)))
}

var allowedTyp = map[string]bool{"jwt": true, "at+jwt": true, "application/at+jwt": true}

func (v *Verifier) verifyJWT(ctx context.Context, token string) (*identity.Identity, *Error) {
	var keyErr *Error
	claims := jwt.MapClaims{}
	tok, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if typ, ok := t.Header["typ"]; ok {
			s, _ := typ.(string)
			if !allowedTyp[strings.ToLower(s)] {
				keyErr = invalidToken("token type is not an access token", nil)
				return nil, keyErr
			}
		}
		if _, ok := t.Header["crit"]; ok {
			keyErr = invalidToken("token has critical header parameters", nil)
			return nil, keyErr
		}
		alg, _ := t.Header["alg"].(string)
		kid, _ := t.Header["kid"].(string)
		k, e := v.key(ctx, kid, alg)
		if e != nil {
			keyErr = e
			return nil, e
		}
		return k, nil
	})
	if err != nil || !tok.Valid {
		if keyErr != nil {
			return nil, keyErr
		}
		return nil, invalidToken(describe(err), err)
	}
	exp, _ := claims.GetExpirationTime()
	return v.identity(map[string]any(claims), exp.Time)
}

// describe turns a golang-jwt error into a short, safe description.
func describe(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token not valid yet"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token issued in the future"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "token from another issuer"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "token lacks a required claim"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "token signature invalid"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "token signature cannot be verified"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "token malformed"
	}
	return "token invalid"
}

// identity checks what Verify checks beyond the signature and times (aud,
// sub) on verified claims and makes the Identity.
func (v *Verifier) identity(claims map[string]any, exp time.Time) (*identity.Identity, *Error) {
	if !v.audienceOK(claims["aud"]) {
		return nil, invalidToken("token not for this resource", nil)
	}
	sub, _ := claims["sub"].(string)
	if sub == "" {
		return nil, invalidToken("token has no subject", nil)
	}
	id := &identity.Identity{
		Kind:    identity.Token,
		Issuer:  v.opts.Issuer,
		Subject: sub,
		Claims:  claims,
		Expiry:  exp,
		UID:     -1,
	}
	if c, ok := claims["client_id"].(string); ok && c != "" {
		id.ClientID = c
	} else if c, ok := claims["azp"].(string); ok {
		id.ClientID = c
	}
	id.Groups = strings_(lookup(claims, v.opts.GroupsClaim))
	if s, ok := claims["scope"].(string); ok {
		id.Scopes = strings.Fields(s)
	} else if scp, ok := claims["scp"]; ok {
		if s, ok := scp.(string); ok {
			id.Scopes = strings.Fields(s)
		} else {
			id.Scopes = strings_(scp)
		}
	}
	return id.Finish(), nil
}

// audienceOK: aud (a string or an array of strings) names an accepted
// audience, exactly or differing by one trailing slash.
func (v *Verifier) audienceOK(aud any) bool {
	var list []string
	switch a := aud.(type) {
	case string:
		list = []string{a}
	case []any:
		for _, x := range a {
			if s, ok := x.(string); ok {
				list = append(list, s)
			}
		}
	case []string:
		list = a
	}
	for _, a := range list {
		if a == "" {
			continue
		}
		if v.audiences[a] || v.audiences[a+"/"] ||
			strings.HasSuffix(a, "/") && v.audiences[a[:len(a)-1]] {
			return true
		}
	}
	return false
}

// lookup finds claim name, at the top level or, for a dotted name, by
// walking nested objects.
func lookup(claims map[string]any, name string) any {
	if x, ok := claims[name]; ok {
		return x
	}
	parts := strings.Split(name, ".")
	if len(parts) < 2 {
		return nil
	}
	var cur any = claims
	for _, p := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// strings_ is x as a list of strings: a string is one, an array keeps its
// strings.
func strings_(x any) []string {
	switch a := x.(type) {
	case string:
		if a == "" {
			return nil
		}
		return []string{a}
	case []any:
		var out []string
		for _, e := range a {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	case []string:
		return a
	}
	return nil
}
