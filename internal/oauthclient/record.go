package oauthclient

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// record is what the Store keeps for one server: the registrations, keyed
// by the issuer of the authorization server that made them, and the
// current tokens, which name their issuer.
type record struct {
	V       int                   `json:"v"`
	Clients map[string]*clientReg `json:"clients,omitempty"`
	Tokens  *tokenSet             `json:"tokens,omitempty"`
	// PreIssuer binds the configured (pre-registered) client id to the
	// issuer it was first used with.
	PreIssuer   string `json:"pre_issuer,omitempty"`
	PreClientID string `json:"pre_client_id,omitempty"`
}

// clientReg is a dynamically registered client.
type clientReg struct {
	ClientID     string   `json:"client_id"`
	ClientSecret string   `json:"client_secret,omitempty"`
	AuthMethod   string   `json:"auth_method,omitempty"`
	RedirectURIs []string `json:"redirect_uris,omitempty"`
}

// Client kinds.
const (
	kindPre  = "pre-registered"
	kindCIMD = "cimd"
	kindDCR  = "dcr"
	kindCC   = "client-credentials"
)

type tokenSet struct {
	Issuer             string    `json:"issuer"`
	ClientID           string    `json:"client_id"`
	ClientKind         string    `json:"client_kind"`
	AuthMethod         string    `json:"auth_method,omitempty"`
	TokenEndpoint      string    `json:"token_endpoint"`
	RevocationEndpoint string    `json:"revocation_endpoint,omitempty"`
	Resource           string    `json:"resource"`
	Access             string    `json:"access_token"`
	Refresh            string    `json:"refresh_token,omitempty"`
	Expiry             time.Time `json:"expiry,omitzero"`
	Obtained           time.Time `json:"obtained"`
	Scopes             []string  `json:"scopes,omitempty"`
	Subject            string    `json:"subject,omitempty"`
}

func (r *record) clone() *record {
	if r == nil {
		return &record{V: 1}
	}
	b, _ := json.Marshal(r)
	var out record
	_ = json.Unmarshal(b, &out)
	return &out
}

// subjectOf decodes, for display only and without verification, the
// sub/email/preferred_username of an id_token or a JWT access token.
func subjectOf(jwts ...string) string {
	for _, t := range jwts {
		parts := strings.Split(t, ".")
		if len(parts) != 3 {
			continue
		}
		b, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			continue
		}
		var c struct {
			Sub               string `json:"sub"`
			Email             string `json:"email"`
			PreferredUsername string `json:"preferred_username"`
		}
		if json.Unmarshal(b, &c) != nil {
			continue
		}
		for _, s := range []string{c.PreferredUsername, c.Email, c.Sub} {
			if s = sanitize(s, 120); s != "" {
				return s
			}
		}
	}
	return ""
}
