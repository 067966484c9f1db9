package oauthclient

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// RoundTripper returns a transport that authorizes requests to the
// server's origin with the Grant's token (never requests to another
// host, such as a redirect elsewhere), and answers challenges: after a
// 401 or 403 that Challenged says to retry, the request is sent once
// more with the new token. When a login is needed it fails the request
// with an error wrapping *NeedsLoginError (errors.Is ErrNeedsLogin).
// Without any record it sends the request without a token, so a server
// that needs none works and one that does answers the 401 that starts
// discovery. base nil means http.DefaultTransport.
func (g *Grant) RoundTripper(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	origin := ""
	if u, err := url.Parse(g.s.Resource); err == nil {
		origin = strings.ToLower(u.Scheme + "://" + u.Host)
	}
	return &authTransport{g: g, base: base, origin: origin}
}

type authTransport struct {
	g      *Grant
	base   http.RoundTripper
	origin string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.ToLower(req.URL.Scheme+"://"+req.URL.Host) != t.origin {
		return t.base.RoundTrip(req)
	}
	ctx := req.Context()
	// Keep the body for one retry.
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			b, err := io.ReadAll(req.Body)
			req.Body.Close()
			if err != nil {
				return nil, err
			}
			body = b
		}
	}
	send := func(tok string) (*http.Response, error) {
		r := req.Clone(ctx)
		switch {
		case body != nil:
			r.Body = io.NopCloser(bytes.NewReader(body))
		case req.GetBody != nil && req.Body != nil && req.Body != http.NoBody:
			b, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			r.Body = b
		}
		r.Header.Del("Authorization")
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		return t.base.RoundTrip(r)
	}
	tok, err := t.g.Token(ctx)
	if err != nil {
		var nl *NeedsLoginError
		if !errors.As(err, &nl) || nl.Reason != ReasonNoCredentials {
			return nil, err
		}
		tok = "" // let the server say what it wants
	}
	for attempt := 0; ; attempt++ {
		resp, err := send(tok)
		if err != nil || (resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden) {
			return resp, err
		}
		retry, cerr := t.g.ChallengedToken(ctx, tok, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		if cerr != nil {
			drain(resp)
			return nil, cerr
		}
		if !retry || attempt > 0 {
			return resp, nil
		}
		drain(resp)
		if tok, err = t.g.Token(ctx); err != nil {
			return nil, fmt.Errorf("after a %d: %w", resp.StatusCode, err)
		}
	}
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}
