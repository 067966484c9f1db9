package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Token endpoint authentication methods ("tokenEndpointAuthMethod").
const (
	AuthClientSecretBasic = "client_secret_basic"
	AuthClientSecretPost  = "client_secret_post"
	AuthPrivateKeyJWT     = "private_key_jwt"
	AuthNone              = "none"
)

// Grants ("grant").
const (
	GrantAuthorizationCode = "authorization_code"
	GrantClientCredentials = "client_credentials"
)

// OAuthConfig is a remote server's "oauth" object: how mcpvisor, as
// the server's OAuth client, registers and gets tokens. A remote server
// without one still does OAuth when it answers 401 with discoverable
// metadata (discovery, then dynamic registration); one with an
// Authorization header never does.
type OAuthConfig struct {
	// ClientID is a pre-registered client's id ("" registers
	// dynamically, or uses ClientMetadataURL).
	ClientID string
	// ClientSecret is a confidential client's secret as written: a
	// literal or a secret reference (${keyring:NAME}), resolved when the
	// server connects. Never shown.
	ClientSecret string
	// TokenEndpointAuthMethod is one of AuthClientSecretBasic,
	// AuthClientSecretPost, AuthPrivateKeyJWT, AuthNone, or "" to choose
	// from the server's metadata.
	TokenEndpointAuthMethod string
	// PrivateKey is the PEM key for AuthPrivateKeyJWT as written, usually
	// a reference (${file:/path/key.pem}), resolved when the server
	// connects. Never shown.
	PrivateKey string
	// SigningAlgorithm is "ES256" or "RS256" ("": from the key's type).
	SigningAlgorithm string
	// Scopes replace the scopes the server's challenge or metadata
	// names; nil means those.
	Scopes []string
	// ClientMetadataURL is the https URL of the client's Client ID
	// Metadata Document: the server's own, else the top level's.
	ClientMetadataURL string
	// Grant is GrantAuthorizationCode (the default) or
	// GrantClientCredentials.
	Grant string
}

var oauthNames = []string{"clientId", "clientSecret", "tokenEndpointAuthMethod", "privateKey", "signingAlgorithm", "scopes", "clientMetadataUrl", "grant"}

var (
	authMethods = []string{AuthClientSecretBasic, AuthClientSecretPost, AuthPrivateKeyJWT, AuthNone}
	grants      = []string{GrantAuthorizationCode, GrantClientCredentials}
	signingAlgs = []string{"ES256", "RS256"}
)

// oneOf checks that s is one of valid.
func (p *parser) oneOf(s, at string, valid []string) bool {
	if slices.Contains(valid, s) {
		return true
	}
	q := make([]string, len(valid))
	for i, v := range valid {
		q[i] = fmt.Sprintf("%q", v)
	}
	p.errorf(at, "%q is not one of %s", s, strings.Join(q, ", "))
	return false
}

// topOAuth reads the top-level "oauth" object.
func (p *parser) topOAuth(v *node, at string) {
	p.object(v, at, []string{"clientMetadataUrl"}, func(key string, v *node, at string) bool {
		if key != "clientMetadataUrl" {
			return false
		}
		if s, ok := p.str(v, at); ok && p.checkMetadataURL(s, at) {
			p.clientMetadataURL = s
		}
		return true
	})
}

// checkMetadataURL checks a Client ID Metadata Document URL: https, with
// a host and a path (the URL is the client's id).
func (p *parser) checkMetadataURL(s, at string) bool {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		p.errorf(at, "%q is not a valid URL", s)
	case u.Scheme != "https":
		p.errorf(at, "%q must be an https:// URL (it is the client's id)", s)
	case u.Host == "":
		p.errorf(at, "%q has no host", s)
	case u.Path == "" || u.Path == "/":
		p.errorf(at, "%q has no path: a client metadata document's URL needs one", s)
	case u.Fragment != "" || u.User != nil:
		p.errorf(at, "%q must have no fragment and no credentials", s)
	default:
		return true
	}
	return false
}

// oauth reads a remote server's "oauth" object (null: none).
func (p *parser) oauth(v *node, at string, disabled bool) *OAuthConfig {
	if v.kind == kindNull {
		return nil
	}
	o := &OAuthConfig{Grant: GrantAuthorizationCode, ClientMetadataURL: p.clientMetadataURL}
	var secretAt, keyAt, algAt, methodAt string
	p.object(v, at, oauthNames, func(key string, v *node, kat string) bool {
		switch key {
		case "clientId":
			if s, ok := p.str(v, kat); ok {
				if strings.TrimSpace(s) == "" {
					p.errorf(kat, "is empty")
				}
				o.ClientID = s
			}
		case "clientSecret":
			if s, ok := p.str(v, kat); ok {
				o.ClientSecret, secretAt = p.reference(s, kat, disabled), kat
				p.noIdentityRef(s, kat, "the OAuth client is the server's")
			}
		case "privateKey":
			if s, ok := p.str(v, kat); ok {
				o.PrivateKey, keyAt = p.reference(s, kat, disabled), kat
				p.noIdentityRef(s, kat, "the OAuth client is the server's")
			}
		case "tokenEndpointAuthMethod":
			if s, ok := p.str(v, kat); ok && p.oneOf(s, kat, authMethods) {
				o.TokenEndpointAuthMethod, methodAt = s, kat
			}
		case "signingAlgorithm":
			if s, ok := p.str(v, kat); ok && p.oneOf(s, kat, signingAlgs) {
				o.SigningAlgorithm, algAt = s, kat
			}
		case "grant":
			if s, ok := p.str(v, kat); ok && p.oneOf(s, kat, grants) {
				o.Grant = s
			}
		case "clientMetadataUrl":
			if s, ok := p.str(v, kat); ok && p.checkMetadataURL(s, kat) {
				o.ClientMetadataURL = s
			}
		case "scopes":
			if l, ok := p.strings(v, kat); ok {
				for i, sc := range l {
					if sc == "" || strings.ContainsAny(sc, " \t\r\n\"\\") {
						p.errorf(index(kat, i), "%q is not a scope (no spaces, quotes or backslashes)", sc)
					}
				}
				o.Scopes = l
			}
		default:
			return false
		}
		return true
	})
	if v.kind != kindObject {
		return nil
	}
	switch o.TokenEndpointAuthMethod {
	case AuthPrivateKeyJWT:
		if o.PrivateKey == "" {
			p.errorf(methodAt, "%q needs privateKey (a PEM key, e.g. \"${file:/path/key.pem}\")", AuthPrivateKeyJWT)
		}
		if secretAt != "" {
			p.warnf(secretAt, "ignored: %q signs with privateKey", AuthPrivateKeyJWT)
		}
	case AuthNone:
		if secretAt != "" {
			p.errorf(secretAt, "a client that authenticates with %q has no secret", AuthNone)
		}
		if keyAt != "" {
			p.errorf(keyAt, "a client that authenticates with %q has no key", AuthNone)
		}
	case "":
		if o.PrivateKey != "" {
			o.TokenEndpointAuthMethod = AuthPrivateKeyJWT // the key says how
		}
	default: // client_secret_basic, client_secret_post
		if keyAt != "" {
			p.warnf(keyAt, "ignored: %q authenticates with clientSecret", o.TokenEndpointAuthMethod)
		}
	}
	if algAt != "" && o.TokenEndpointAuthMethod != AuthPrivateKeyJWT {
		p.warnf(algAt, "ignored: only %q signs", AuthPrivateKeyJWT)
	}
	if (o.ClientSecret != "" || o.PrivateKey != "") && o.ClientID == "" {
		p.errorf(at, "clientSecret and privateKey need clientId: they are a pre-registered client's")
	}
	if o.Grant == GrantClientCredentials {
		if o.ClientID == "" {
			p.errorf(at, "grant %q needs clientId (a pre-registered client)", GrantClientCredentials)
		}
		if o.TokenEndpointAuthMethod == AuthNone {
			p.errorf(methodAt, "grant %q needs a client that authenticates, not %q", GrantClientCredentials, AuthNone)
		}
	}
	return o
}
