// Package identity is who a request comes from, as mcpvisor verified it:
// the subject of an access token the configured issuer signed (team
// identity, `auth` in the config), or the local user at the other end of
// the stdio front or the connect socket. Everything that decides or
// records per person — the policy, the audit, the rate limits, a
// per-identity server's instance — reads it from here, and never from
// what a client says about itself (clientInfo, headers).
package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// Kind is how an identity was established.
type Kind string

const (
	// Token: a bearer token the configured issuer signed (or its
	// introspection endpoint vouched for).
	Token Kind = "token"
	// Local: the local user running the client, from the operating
	// system (the stdio front's process, the connect socket's peer).
	Local Kind = "local"
	// Static: the configured static bearer token (an admin credential).
	Static Kind = "static"
	// Peer: another replica of this deployment, reaching a server this
	// replica runs for it (a server placed on one replica). Its client's
	// request was decided, limited and audited on that replica: this
	// one serves it as it is. Only the peer
	// interface makes such an identity, for a request signed with the
	// key the replicas share, to a server this replica runs for the
	// deployment under its own configuration.
	Peer Kind = "peer"
)

// PeerReplica is the identity of replica ordinal's connections to the
// servers this replica runs for the deployment.
func PeerReplica(ordinal int) *Identity {
	return (&Identity{Kind: Peer, Issuer: "mcpvisor", Subject: "replica-" + strconv.Itoa(ordinal), UID: -1}).Finish()
}

// Decided reports whether id's requests were decided elsewhere (a peer
// replica's): no policy, scope, rate limit or audit applies here.
func (id *Identity) Decided() bool { return id != nil && id.Kind == Peer }

// Identity is a verified identity. It never changes after it is made and
// is safe to share between goroutines.
type Identity struct {
	Kind Kind
	// Issuer and Subject are the token's iss and sub; for a local user,
	// Issuer is "local" and Subject the user name (or the uid, when the
	// name is unknown).
	Issuer  string
	Subject string
	// ClientID is the OAuth client the token was issued to (client_id,
	// else azp); "" for a local user. Never a client's self-declared
	// clientInfo.
	ClientID string
	// Groups are the token's groups claim (strings), if any.
	Groups []string
	// Scopes are the token's scopes (scope, else scp).
	Scopes []string
	// Claims are every claim of the token, as decoded JSON.
	Claims map[string]any
	// Expiry is when the token expires; zero for a local user.
	Expiry time.Time
	// UID is the local user's id; -1 for a token.
	UID int

	key string
}

// Finish computes what is derived from the fields; call it once, after
// setting them and before sharing the identity.
func (id *Identity) Finish() *Identity {
	sum := sha256.Sum256([]byte(string(id.Kind) + "\x00" + id.Issuer + "\x00" + id.Subject))
	id.key = hex.EncodeToString(sum[:12])
	return id
}

// Key is a stable short name of the identity (issuer and subject, not the
// client): the same person has the same key across tokens and clients. It
// is safe in file names and logs. A nil identity's key is "".
func (id *Identity) Key() string {
	if id == nil {
		return ""
	}
	return id.key
}

// Name is how the identity shows in logs and the audit: the subject, or
// "" for nil.
func (id *Identity) Name() string {
	if id == nil {
		return ""
	}
	return id.Subject
}

// Same reports whether a and b are the same person by the same client: a
// legacy session initialized by one may be used only by the same.
func Same(a, b *Identity) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.key == b.key && a.ClientID == b.ClientID
}

// HasScopes reports whether id holds every scope of want.
func (id *Identity) HasScopes(want []string) bool {
	for _, w := range want {
		found := false
		if id != nil {
			for _, s := range id.Scopes {
				if s == w {
					found = true
					break
				}
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// LocalUser is the identity of local user uid, named name ("" if
// unknown).
func LocalUser(uid int, name string) *Identity {
	if name == "" {
		name = strconv.Itoa(uid)
	}
	return (&Identity{Kind: Local, Issuer: "local", Subject: name, UID: uid}).Finish()
}

type ctxKey struct{}

// NewContext returns ctx carrying id.
func NewContext(ctx context.Context, id *Identity) context.Context {
	if id == nil {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the identity ctx carries, or nil.
func FromContext(ctx context.Context) *Identity {
	id, _ := ctx.Value(ctxKey{}).(*Identity)
	return id
}
