package backend

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
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
	// Challenged is told the server answered a request status 401 or
	// 403 with the given WWW-Authenticate header. retry reports that a
	// new token may be accepted (it was refreshed): the request is sent
	// once more. err, if set, is why no request can succeed until the
	// user acts (a login, a step-up to more scopes).
	Challenged(ctx context.Context, status int, wwwAuthenticate string) (retry bool, err error)
}

// authState is what a connection learned of its authorization: the error
// that stops every request until the user acts, once one did.
type authState struct {
	err atomic.Pointer[error]
}

func (a *authState) set(err error) { a.err.Store(&err) }

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
	send := func(r *http.Request) (*http.Response, error) {
		tok, err := t.auth.Token(r.Context())
		if err != nil {
			t.b.auth.set(err)
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
	if code != http.StatusUnauthorized && code != http.StatusForbidden {
		return resp, nil
	}
	retry, aerr := t.auth.Challenged(r.Context(), code, resp.Header.Get("WWW-Authenticate"))
	if aerr != nil {
		t.b.auth.set(aerr)
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
	return send(again)
}

// authFailure is the error that stops the connection's requests until the
// user acts, if its authorizer reported one.
func (b *connStream) authFailure() error { return b.auth.load() }
