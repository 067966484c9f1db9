// Package oauthclient is mcpvisor's OAuth 2.1 client for remote MCP servers:
// discovery (RFC 9728 protected resource metadata, RFC 8414 and OpenID
// Connect authorization server metadata, with the 2025-03-26 fallbacks),
// client identity (pre-registered, Client ID Metadata Document, or Dynamic
// Client Registration), the authorization code flow with PKCE S256, RFC 8707
// resource indicators and RFC 9207 issuer checks, token refresh with
// rotation, the client credentials grant (client secret or private_key_jwt),
// scope step-up and RFC 7009 revocation.
//
// One Grant serves one configured server. It keeps the server's record
// (registrations keyed by issuer, and the current tokens) through a Store
// as opaque bytes, and never puts a token, code, verifier or secret into an
// error, a log line or the String form of an exported value.
//
// # Use by a transport
//
// Before each request to the server, call Token. ErrNeedsLogin with the
// reason "no credentials" and no challenge seen yet means: send the
// request without a token (the server may need none). On a 401 or 403,
// call ChallengedToken with the token the request carried: retry means
// send the request once more with a new Token; a *NeedsLoginError means
// the server waits for a login (Begin, then Complete with the callback's
// query); ErrScopeRetryLimit means the operation failed for good. The
// RoundTripper method does all of this for one http.Client.
//
// # Logins
//
// Begin discovers the authorization server afresh each time, so a server
// that moved to another one is followed; registrations are kept per
// issuer and never sent to another. A Flow lives FlowLifetime, is used
// once, and at most MaxFlows are kept. The redirect URI is a loopback
// http URL (the CLI's listener) or an https one.
package oauthclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Token endpoint authentication methods.
const (
	AuthNone              = "none"
	AuthClientSecretBasic = "client_secret_basic"
	AuthClientSecretPost  = "client_secret_post"
	AuthPrivateKeyJWT     = "private_key_jwt"
)

// Grants.
const (
	GrantAuthorizationCode = "authorization_code"
	GrantClientCredentials = "client_credentials"
)

// Info states.
const (
	StateLoggedIn          = "logged-in"
	StateNeedsLogin        = "needs-login"
	StateNone              = "none"
	StateClientCredentials = "client-credentials"
)

// Needs-login reasons.
const (
	ReasonNoCredentials   = "no credentials"
	ReasonRefreshRejected = "refresh token expired or revoked"
	ReasonExpired         = "access token expired"
	ReasonTokenRejected   = "access token rejected"
	ReasonASChanged       = "authorization server changed"
	ReasonScopePrefix     = "insufficient scope: " // then the scopes asked for
)

// Defaults for the HTTP bounds.
const (
	DefaultTimeout      = 10 * time.Second
	MaxDocumentSize     = 1 << 20
	DefaultFlowLifetime = 10 * time.Minute
	MaxFlows            = 16
	// MaxStepUps is how many step-up logins one scope set gets: with the
	// first login, an operation sees at most three authorizations.
	MaxStepUps = 2
)

// Settings configure one server's Grant.
type Settings struct {
	Resource          string   // the MCP server URL as configured
	ClientID          string   // pre-registered (optional)
	ClientSecret      string   // resolved value (optional)
	AuthMethod        string   // "", client_secret_basic, client_secret_post, private_key_jwt, none
	PrivateKeyPEM     []byte   // for private_key_jwt
	SigningAlgorithm  string   // "", ES256, RS256
	ClientMetadataURL string   // CIMD URL (optional)
	Scopes            []string // override (optional)
	Grant             string   // "" / "authorization_code" or "client_credentials"
	ClientName        string   // "mcpvisor"

	// Timeout bounds each discovery, registration, token and revocation
	// request, body included. Zero means DefaultTimeout.
	Timeout time.Duration
	// FlowLifetime bounds how long a begun login may wait for its
	// callback. Zero means DefaultFlowLifetime.
	FlowLifetime time.Duration
}

// String never shows the secret or the key.
func (s Settings) String() string {
	return fmt.Sprintf("oauthclient.Settings{Resource:%q ClientID:%q AuthMethod:%q Grant:%q ClientMetadataURL:%q Scopes:%q secret:%t key:%t}",
		s.Resource, s.ClientID, s.AuthMethod, s.Grant, s.ClientMetadataURL, s.Scopes, s.ClientSecret != "", len(s.PrivateKeyPEM) > 0)
}

// GoString is String, so %#v shows no secret either.
func (s Settings) GoString() string { return s.String() }

// Store persists one server's record as opaque bytes.
type Store interface {
	Load(ctx context.Context) ([]byte, error) // returns ErrNoRecord when none
	Save(ctx context.Context, data []byte) error
	Delete(ctx context.Context) error
}

// ErrNoRecord is what Store.Load answers when nothing is stored.
var ErrNoRecord = errors.New("no oauth record")

// ErrUnknownFlow is Complete's error for a flow it does not hold: never
// begun, already used, or dropped (too many flows at once).
var ErrUnknownFlow = errors.New("unknown or already used login flow")

// ErrNeedsLogin means a user must log in (again) before the server can be
// used. The concrete error is a *NeedsLoginError.
var ErrNeedsLogin = errors.New("needs login")

// ErrScopeRetryLimit means the server kept asking for more scope after
// MaxStepUps authorizations for the same scope set: a permanent failure of
// that operation, not something another login fixes.
// An operation sees at most MaxStepUps+1 authorizations.
var ErrScopeRetryLimit = errors.New("insufficient scope after repeated authorization")

// NeedsLoginError says why a login is needed.
type NeedsLoginError struct {
	Reason string   // "no credentials", "refresh token expired or revoked", "insufficient scope: a b", "authorization server changed", …
	Scope  []string // the scopes the next login asks for, when known
}

func (e *NeedsLoginError) Error() string { return "needs login: " + e.Reason }

// Is makes errors.Is(err, ErrNeedsLogin) true.
func (e *NeedsLoginError) Is(target error) bool { return target == ErrNeedsLogin }

// Flow is a begun authorization code login.
type Flow struct {
	ID      string    // pass to Complete or Cancel
	AuthURL string    // open this in a browser
	Expires time.Time // Complete fails after this
}

// Info describes a Grant's state for display. It never holds a token.
type Info struct {
	State       string    `json:"state"`
	Reason      string    `json:"reason,omitempty"`
	Issuer      string    `json:"issuer,omitempty"`
	ClientID    string    `json:"clientId,omitempty"`
	Scopes      []string  `json:"scopes,omitempty"`
	Expiry      time.Time `json:"expiry,omitzero"`
	Subject     string    `json:"subject,omitempty"`
	Refreshable bool      `json:"refreshable,omitempty"`
}

// String is a one-line summary.
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.State)
	if i.Reason != "" {
		b.WriteString(" (" + i.Reason + ")")
	}
	if i.Subject != "" {
		b.WriteString(" as " + i.Subject)
	}
	if i.Issuer != "" {
		b.WriteString(" at " + i.Issuer)
	}
	if len(i.Scopes) > 0 {
		b.WriteString(" scopes " + strings.Join(i.Scopes, " "))
	}
	if !i.Expiry.IsZero() {
		b.WriteString(" until " + i.Expiry.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// Challenge is a parsed Bearer WWW-Authenticate challenge.
type Challenge struct {
	Error            string   // invalid_token, insufficient_scope, …
	Scope            []string // scope= split on spaces
	ResourceMetadata string   // resource_metadata=
}

// ParseChallenge reads the Bearer challenge of a WWW-Authenticate value.
// A value without a Bearer challenge gives the zero Challenge.
func ParseChallenge(wwwAuthenticate string) Challenge {
	var c Challenge
	if strings.TrimSpace(wwwAuthenticate) == "" {
		return c
	}
	for _, ch := range parseChallenges(wwwAuthenticate) {
		if ch.scheme != "bearer" {
			continue
		}
		c.Error = ch.params["error"]
		c.Scope = strings.Fields(ch.params["scope"])
		c.ResourceMetadata = ch.params["resource_metadata"]
		return c
	}
	return c
}
