// Package authntest is a fake OAuth authorization server for tests of
// token verification: RFC 8414 and OpenID Connect metadata, a JWKS of RSA
// and EC keys (rotatable; fetches counted), JWT minting with any header,
// the classic bad tokens (alg none, HS256 keyed with the public key, a
// tampered payload) and an RFC 7662 introspection endpoint for opaque
// tokens it is told about (calls counted).
//
// It listens on 127.0.0.1 (Start) or only in memory (Start with
// InMemory: no socket, for testing/synctest bubbles); Client reaches it
// either way without the network.
package authntest

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Options shape the fake issuer.
type Options struct {
	// Path is the issuer URL's path ("" for none), e.g. "/realms/a".
	Path string
	// OIDCOnly serves only /.well-known/openid-configuration (as Hydra
	// does), not RFC 8414's oauth-authorization-server.
	OIDCOnly bool
	// InMemory does not listen: URL is https://issuer.test{Path} and only
	// Client reaches it. Use it inside testing/synctest bubbles.
	InMemory bool
	// IntrospectionClientID and -Secret, when set, are required (HTTP
	// Basic) at the introspection endpoint.
	IntrospectionClientID, IntrospectionSecret string
}

// Key is a signing key of the issuer.
type Key struct {
	Kid    string
	Alg    string
	Signer crypto.Signer
}

// Issuer is the fake authorization server.
type Issuer struct {
	// URL is the issuer identifier (no trailing slash).
	URL  string
	host string
	opts Options
	srv  *httptest.Server

	mu         sync.Mutex
	rsa, ec    *Key
	published  []*Key
	opaque     map[string]map[string]any
	down       bool
	jwksDelay  time.Duration
	inDelay    time.Duration
	metaIssuer string

	jwksFetches    atomic.Int64
	jwksInFlight   atomic.Int64
	metaFetches    atomic.Int64
	introspections atomic.Int64
	inFlight       atomic.Int64
	inFlightMax    atomic.Int64
}

// Start starts an issuer with one RSA (RS256) and one EC (ES256) key
// published; it stops at the test's end.
func Start(t testing.TB, o Options) *Issuer {
	t.Helper()
	i := &Issuer{opts: o, opaque: map[string]map[string]any{}}
	i.rsa = i.NewKey(t, "RS256")
	i.ec = i.NewKey(t, "ES256")
	i.published = []*Key{i.rsa, i.ec}
	if o.InMemory {
		i.URL = "https://issuer.test" + o.Path
	} else {
		i.srv = httptest.NewServer(http.HandlerFunc(i.serve))
		t.Cleanup(i.srv.Close)
		i.URL = i.srv.URL + o.Path
	}
	u, _ := url.Parse(i.URL)
	i.host = u.Host
	return i
}

// Client is an HTTP client that reaches the issuer in memory (no
// socket); requests to any other host fail.
func (i *Issuer) Client() *http.Client {
	return &http.Client{Transport: memTransport{i}}
}

type memTransport struct{ i *Issuer }

func (m memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != m.i.host {
		return nil, errors.New("authntest: no route to " + req.URL.Host)
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	// Serialize and parse the request, as a server would see it.
	raw, err := httputil.DumpRequestOut(req, true)
	if err != nil {
		return nil, err
	}
	sreq, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		return nil, err
	}
	sreq = sreq.WithContext(req.Context())
	rec := httptest.NewRecorder()
	m.i.serve(rec, sreq)
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// NewKey makes a key for alg (RS256/384/512, PS*, ES256/384/512) with a
// fresh kid; it is not published.
func (i *Issuer) NewKey(t testing.TB, alg string) *Key {
	t.Helper()
	var s crypto.Signer
	var err error
	switch {
	case strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS"):
		s, err = rsa.GenerateKey(rand.Reader, 2048)
	case alg == "ES256":
		s, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case alg == "ES384":
		s, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case alg == "ES512":
		s, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	default:
		t.Fatalf("authntest: no key for %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	return &Key{Kid: strings.ToLower(alg[:2]) + "-" + hex.EncodeToString(b), Alg: alg, Signer: s}
}

// RSA and EC are the issuer's current default keys.
func (i *Issuer) RSA() *Key { i.mu.Lock(); defer i.mu.Unlock(); return i.rsa }
func (i *Issuer) EC() *Key  { i.mu.Lock(); defer i.mu.Unlock(); return i.ec }

// Publish adds k to the JWKS; Unpublish removes it.
func (i *Issuer) Publish(k *Key) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.published = append(i.published, k)
}

func (i *Issuer) Unpublish(k *Key) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for n, p := range i.published {
		if p == k {
			i.published = append(i.published[:n:n], i.published[n+1:]...)
			return
		}
	}
}

// Rotate replaces the RSA key with a new one, in the JWKS too, and
// returns it.
func (i *Issuer) Rotate(t testing.TB) *Key {
	k := i.NewKey(t, "RS256")
	i.mu.Lock()
	old := i.rsa
	i.rsa = k
	i.mu.Unlock()
	i.Unpublish(old)
	i.Publish(k)
	return k
}

// SetDown makes every endpoint answer 503 (down) or serve again.
func (i *Issuer) SetDown(down bool) { i.mu.Lock(); i.down = down; i.mu.Unlock() }

// SetJWKSDelay delays every JWKS answer by d (or until the request's
// context ends).
func (i *Issuer) SetJWKSDelay(d time.Duration) { i.mu.Lock(); i.jwksDelay = d; i.mu.Unlock() }

// SetIntrospectionDelay delays every introspection answer by d.
func (i *Issuer) SetIntrospectionDelay(d time.Duration) { i.mu.Lock(); i.inDelay = d; i.mu.Unlock() }

// IntrospectionsMaxInFlight is the most introspection requests that were
// being answered at once.
func (i *Issuer) IntrospectionsMaxInFlight() int { return int(i.inFlightMax.Load()) }

// SetMetadataIssuer makes the metadata documents name issuer s instead of
// URL ("" restores it).
func (i *Issuer) SetMetadataIssuer(s string) { i.mu.Lock(); i.metaIssuer = s; i.mu.Unlock() }

// JWKSFetches, MetadataFetches and Introspections count requests served.
func (i *Issuer) JWKSFetches() int     { return int(i.jwksFetches.Load()) }
func (i *Issuer) MetadataFetches() int { return int(i.metaFetches.Load()) }
func (i *Issuer) Introspections() int  { return int(i.introspections.Load()) }

// JWKSInFlight counts JWKS requests being answered now (delayed ones).
func (i *Issuer) JWKSInFlight() int { return int(i.jwksInFlight.Load()) }

// JWKSURL and IntrospectionURL are the endpoints' URLs.
func (i *Issuer) JWKSURL() string          { return i.base() + "/jwks.json" }
func (i *Issuer) IntrospectionURL() string { return i.base() + "/introspect" }

func (i *Issuer) base() string { return strings.TrimSuffix(i.URL, i.opts.Path) }

// AddOpaque registers an opaque token and the introspection answer for
// it (active is not implied: set "active": true).
func (i *Issuer) AddOpaque(token string, answer map[string]any) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.opaque[token] = answer
}

// Claims are valid access-token claims for sub and audiences: iss, sub,
// aud, client_id, scope, iat, nbf, exp (in 1 h), jti.
func (i *Issuer) Claims(sub string, aud ...string) jwt.MapClaims {
	now := time.Now()
	b := make([]byte, 8)
	rand.Read(b)
	auds := make([]any, len(aud))
	for n, a := range aud {
		auds[n] = a
	}
	return jwt.MapClaims{
		"iss": i.URL, "sub": sub, "aud": auds, "client_id": "client-1",
		"scope": "mcp", "iat": now.Unix(), "nbf": now.Unix(),
		"exp": now.Add(time.Hour).Unix(), "jti": hex.EncodeToString(b),
	}
}

// MintOptions choose how Mint signs.
type MintOptions struct {
	// Key signs; default the RSA key (or the EC key for an ES alg).
	Key *Key
	// Alg is the header's alg; default the key's.
	Alg string
	// Kid is the header's kid; default the key's; "-" leaves it out.
	Kid string
	// Header sets or (with a nil value) removes header fields after
	// the above; typ defaults to "JWT" as Hydra's.
	Header map[string]any
}

// Mint signs claims.
func (i *Issuer) Mint(t testing.TB, claims jwt.MapClaims, o MintOptions) string {
	t.Helper()
	k := o.Key
	if k == nil {
		if strings.HasPrefix(o.Alg, "ES") {
			k = i.EC()
		} else {
			k = i.RSA()
		}
	}
	alg := o.Alg
	if alg == "" {
		alg = k.Alg
	}
	m := jwt.GetSigningMethod(alg)
	if m == nil {
		t.Fatalf("authntest: unknown alg %s", alg)
	}
	tok := jwt.NewWithClaims(m, claims)
	switch o.Kid {
	case "":
		tok.Header["kid"] = k.Kid
	case "-":
	default:
		tok.Header["kid"] = o.Kid
	}
	for h, v := range o.Header {
		if v == nil {
			delete(tok.Header, h)
		} else {
			tok.Header[h] = v
		}
	}
	s, err := tok.SignedString(k.Signer)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// NoneToken is claims with alg "none" and an empty signature.
func NoneToken(claims jwt.MapClaims) string {
	return seg(map[string]any{"alg": "none", "typ": "JWT"}) + "." + seg(claims) + "."
}

// HS256WithPublicKey is claims "signed" by HMAC-SHA256 keyed with the
// RSA key's public key (its PEM, its DER and its JWK n are the usual
// attempts; PEM is used, with the RSA key's kid) — the classic
// algorithm-confusion token.
func (i *Issuer) HS256WithPublicKey(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	k := i.RSA()
	der, err := x509.MarshalPKIXPublicKey(k.Signer.Public())
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tok.Header["kid"] = k.Kid
	s, err := tok.SignedString(pemKey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Tamper replaces token's payload with claims, keeping header and
// signature.
func Tamper(token string, claims jwt.MapClaims) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return token
	}
	return parts[0] + "." + seg(claims) + "." + parts[2]
}

func seg(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (i *Issuer) serve(w http.ResponseWriter, r *http.Request) {
	i.mu.Lock()
	down, delay := i.down, i.jwksDelay
	i.mu.Unlock()
	p := r.URL.Path
	switch {
	case p == "/jwks.json":
		i.jwksFetches.Add(1)
	case strings.HasPrefix(p, "/.well-known/") || strings.HasSuffix(p, "/.well-known/openid-configuration"):
		i.metaFetches.Add(1)
	case p == "/introspect":
		i.introspections.Add(1)
	}
	if down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	switch {
	case !i.opts.OIDCOnly && p == "/.well-known/oauth-authorization-server"+i.opts.Path,
		p == i.opts.Path+"/.well-known/openid-configuration":
		i.mu.Lock()
		iss := i.metaIssuer
		i.mu.Unlock()
		if iss == "" {
			iss = i.URL
		}
		writeJSON(w, map[string]any{
			"issuer": iss, "jwks_uri": i.JWKSURL(), "introspection_endpoint": i.IntrospectionURL(),
			"token_endpoint": i.base() + "/token", "authorization_endpoint": i.base() + "/authorize",
			"response_types_supported": []string{"code"},
		})
	case p == "/jwks.json":
		if delay > 0 {
			i.jwksInFlight.Add(1)
			defer i.jwksInFlight.Add(-1)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		writeJSON(w, i.jwks())
	case p == "/introspect" && r.Method == http.MethodPost:
		i.introspect(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (i *Issuer) jwks() map[string]any {
	i.mu.Lock()
	defer i.mu.Unlock()
	b64 := base64.RawURLEncoding.EncodeToString
	var keys []map[string]any
	for _, k := range i.published {
		j := map[string]any{"kid": k.Kid, "use": "sig", "alg": k.Alg}
		switch pub := k.Signer.Public().(type) {
		case *rsa.PublicKey:
			j["kty"] = "RSA"
			j["n"] = b64(pub.N.Bytes())
			j["e"] = b64(big.NewInt(int64(pub.E)).Bytes())
		case *ecdsa.PublicKey:
			size := (pub.Curve.Params().BitSize + 7) / 8
			raw, _ := pub.Bytes()
			j["kty"] = "EC"
			j["crv"] = pub.Curve.Params().Name
			j["x"] = b64(raw[1 : 1+size])
			j["y"] = b64(raw[1+size:])
		}
		keys = append(keys, j)
	}
	return map[string]any{"keys": keys}
}

func (i *Issuer) introspect(w http.ResponseWriter, r *http.Request) {
	n := i.inFlight.Add(1)
	defer i.inFlight.Add(-1)
	for {
		m := i.inFlightMax.Load()
		if n <= m || i.inFlightMax.CompareAndSwap(m, n) {
			break
		}
	}
	i.mu.Lock()
	delay := i.inDelay
	i.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if i.opts.IntrospectionClientID != "" {
		id, secret, ok := r.BasicAuth()
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
		if !ok || id != i.opts.IntrospectionClientID || secret != i.opts.IntrospectionSecret {
			w.Header().Set("WWW-Authenticate", `Basic realm="introspect"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	form, _ := url.ParseQuery(string(body))
	i.mu.Lock()
	ans, ok := i.opaque[form.Get("token")]
	i.mu.Unlock()
	if !ok {
		ans = map[string]any{"active": false}
	}
	writeJSON(w, ans)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
