package guard

import (
	"context"
	"net/http"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// Replicas: a request one replica forwards to the replica that owns what
// it names arrives on the owner's peer interface, over mutual TLS from
// the key the replicas share, with the identity the first replica
// verified, signed with that key. The peer interface checks both and
// marks the request's context Vouched; the guard then admits it with that
// identity and checks nothing else: its token, Host and Origin were the
// first replica's to check, and the client's token is not forwarded.
// Nothing a client sends can set the mark: only the peer interface's code
// puts it in a context.

type vouchedKey struct{}

// vouched is what a peer vouched for.
type vouched struct{ id *identity.Identity }

// Vouched returns ctx marked as a request a peer replica admitted for id
// (nil: a request that needed no identity).
func Vouched(ctx context.Context, id *identity.Identity) context.Context {
	return context.WithValue(ctx, vouchedKey{}, vouched{id})
}

// admitVouched admits r if a peer vouched for it: r carrying the
// identity the peer verified.
func admitVouched(r *http.Request) (*http.Request, bool) {
	v, ok := r.Context().Value(vouchedKey{}).(vouched)
	if !ok {
		return nil, false
	}
	return r.WithContext(identity.NewContext(r.Context(), v.id)), true
}
