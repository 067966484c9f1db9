package backend

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Authorizer supplies the OAuth access token of a remote server
// (HTTPConnector.Auth): the fleet's grant of the server, which logs in,
// refreshes and steps up. The connection only asks it for a token and tells
// it what the server answered.
type Authorizer interface {
	// Token is the access token to send, "" to send none (nothing is
	// known of the server's authorization yet: it may need none). An
	// error means no request can be authorized now (a login is needed):
	// the request is not sent.
	Token(ctx context.Context) (string, error)
	// Challenged is told the server answered a request sent with token
	// used ("" for none) status 401 or 403 with the given
	// WWW-Authenticate header. retry reports that a new token may be
	// accepted (it was refreshed): the request is sent once more. err,
	// if set, is why no request can succeed until the user acts (a
	// login, a step-up to more scopes).
	Challenged(ctx context.Context, used string, status int, wwwAuthenticate string) (retry bool, err error)
}

// Connecting is an Authorizer that is told each connection's start,
// before its first request: it finds its settings then (the fleet's
// grant resolves its secret references), and an error fails the start.
type Connecting interface {
	Connecting(ctx context.Context) error
}

// AnswerError is an error of the authorizer that a request it stops is
// answered with as this JSON-RPC error (the fleet's "needs a login",
// which names the command to run): the connection goes on.
type AnswerError interface {
	error
	RPCError() *rpc.Error
}

// authState is what a connection learned of its authorization: the error
// that stops every request until the user acts, once one did.
type authState struct {
	err atomic.Pointer[error]
}

func (a *authState) set(err error) { a.err.Store(&err) }

func (a *authState) clear() {
	if a.err.Load() != nil {
		a.err.Store(nil)
	}
}

func (a *authState) load() error {
	if p := a.err.Load(); p != nil {
		return *p
	}
	return nil
}

// authorize sets the request's Authorization header from the authorizer
// (the server's own host only: headerTransport's caller checked), and on
// a 401 or 403 tells the authorizer, sending the request once more when it
// says a new token may do. A client's own Authorization header never gets
// here: requests to a server are made by mcpvisor, with the headers of
// its config.
func (t *headerTransport) authorize(r *http.Request) (*http.Response, error) {
	// note keeps what stops requests: the connection's, for its failure
	// (classify), and the request's own, for its answer (call).
	note := func(err error) {
		t.b.auth.set(err)
		if st, ok := r.Context().Value(callKey{}).(*callState); ok {
			st.authErr.Store(&err)
		}
	}
	var used string
	send := func(r *http.Request) (*http.Response, error) {
		tok, err := t.auth.Token(r.Context())
		used = tok
		if err != nil {
			note(err)
			return nil, err
		}
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		} else {
			r.Header.Del("Authorization")
		}
		return t.base.RoundTrip(r)
	}
	resp, err := send(r)
	if err != nil {
		return nil, err
	}
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		t.b.auth.clear() // authorized again (a login, a step-up)
	}
	if code != http.StatusUnauthorized && code != http.StatusForbidden {
		return resp, nil
	}
	retry, aerr := t.auth.Challenged(r.Context(), used, code, resp.Header.Get("WWW-Authenticate"))
	if aerr != nil && code == http.StatusForbidden {
		if st, ok := r.Context().Value(callKey{}).(*callState); ok {
			// This request wants more than the token allows (a step-up):
			// it alone is answered with the authorizer's error. The 403
			// is not handed on — the transport would end the connection
			// for it — and the connection, whose other requests are
			// authorized, goes on.
			st.authErr.Store(&aerr)
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
			resp.Body.Close()
			return nil, aerr
		}
	}
	if aerr != nil {
		note(aerr)
	}
	if !retry || aerr != nil {
		return resp, nil
	}
	again := r.Clone(r.Context())
	if r.Body != nil && r.Body != http.NoBody {
		if r.GetBody == nil {
			return resp, nil // the body cannot be sent twice
		}
		body, err := r.GetBody()
		if err != nil {
			return resp, nil
		}
		again.Body = body
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	resp, err = send(again)
	if err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if a, ok := t.auth.(interface{ Accepted(token string) }); ok {
			a.Accepted(used) // the new token works
		}
	}
	return resp, err
}

// authAnswer is the JSON-RPC error a request the authorizer stopped is
// answered with, nil if it stopped none or its error has no answer of its
// own.
func (st *callState) authAnswer() *rpc.Error {
	p := st.authErr.Load()
	if p == nil {
		return nil
	}
	var ae AnswerError
	if errors.As(*p, &ae) {
		return ae.RPCError()
	}
	// The authorizer could not tell (its authorization server did not
	// answer, say): this request fails, the connection goes on.
	return &rpc.Error{Code: rpc.BackendUnavailable, Message: "mcpvisor could not authorize the request: " + (*p).Error()}
}

// userMustAct reports whether an authorizer's error is one only the user
// can end (a login, more scope): a connection it failed is not started
// again on its own. Any other (an authorization server that does not
// answer) is retried.
func userMustAct(err error) bool {
	var ae AnswerError
	return errors.As(err, &ae) || errors.Is(err, lifecycle.ErrAuthRequired)
}

// authFailure is the error that stops the connection's requests until the
// user acts, if its authorizer reported one.
func (b *connStream) authFailure() error { return b.auth.load() }
