package authn

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

var errRateLimited = errorf("refetch rate-limited")

// key returns the JWKS key for a token's kid and alg. An unknown kid (or,
// without a kid, no single fitting key) refetches the JWKS if the last
// fetch is at least RefetchInterval old, else is refused at once.
func (v *Verifier) key(ctx context.Context, kid, alg string) (any, *Error) {
	v.mu.Lock()
	keys, at := v.keys, v.keysAt
	v.mu.Unlock()
	if at.IsZero() {
		// Never fetched (or every fetch failed): the issuer is needed.
		if err := v.refresh(ctx, true); err != nil {
			return nil, v.unavailable(err)
		}
		v.mu.Lock()
		keys = v.keys
		v.mu.Unlock()
	} else if time.Since(at) > RefreshInterval {
		v.refresh(ctx, false)
	}
	if k, ok := pick(keys, kid, alg); ok {
		return k, nil
	} else if k != nil {
		return nil, k.(*Error)
	}
	err := v.refresh(ctx, true)
	if err == errRateLimited {
		return nil, invalidToken("token signed by an unknown key", nil)
	}
	if err != nil {
		return nil, v.unavailable(err)
	}
	v.mu.Lock()
	keys = v.keys
	v.mu.Unlock()
	if k, ok := pick(keys, kid, alg); ok {
		return k, nil
	} else if k != nil {
		return nil, k.(*Error)
	}
	return nil, invalidToken("token signed by an unknown key", nil)
}

// pick finds the key: (key, true); (*Error, false) when a key has the kid
// but does not fit alg; (nil, false) when none is known.
func pick(keys []jwk, kid, alg string) (any, bool) {
	var found *jwk
	n := 0
	for i := range keys {
		k := &keys[i]
		if kid != "" {
			if k.kid == kid {
				if !k.fits(alg) {
					return invalidToken("token algorithm does not fit its key", nil), false
				}
				return k.key, true
			}
			continue
		}
		if k.fits(alg) {
			found = k
			n++
		}
	}
	if kid == "" && n == 1 {
		return found.key, true
	}
	return nil, false
}

func (v *Verifier) unavailable(err error) *Error {
	v.mu.Lock()
	retry := time.Until(v.next)
	v.mu.Unlock()
	if err == errRateLimited {
		return unavailable("issuer keys unavailable", retry, nil)
	}
	return unavailable("issuer unavailable", retry, err)
}

// refresh fetches the issuer's metadata (if not had yet) and its JWKS, at
// most once per RefetchInterval (RetryInterval after a failure), one
// fetch at a time. With wait, it waits for the fetch — its own or one
// under way — at most FetchWait (and ctx); without, it only starts one.
// It returns errRateLimited when no fetch may start and none is under
// way.
func (v *Verifier) refresh(ctx context.Context, wait bool) error {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return errorf("verifier closed")
	}
	f := v.inflight
	if f == nil {
		now := time.Now()
		if now.Before(v.next) {
			v.mu.Unlock()
			return errRateLimited
		}
		v.next = now.Add(RefetchInterval)
		f = &fetch{done: make(chan struct{})}
		v.inflight = f
		v.wg.Add(1)
		go v.run(f)
	}
	v.mu.Unlock()
	if !wait {
		return nil
	}
	t := time.NewTimer(FetchWait)
	defer t.Stop()
	select {
	case <-f.done:
		return f.err
	case <-t.C:
		return errorf("issuer slower than %v", FetchWait)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (v *Verifier) run(f *fetch) {
	defer v.wg.Done()
	ctx, cancel := context.WithTimeout(v.ctx, FetchTimeout)
	defer cancel()
	keys, err := v.fetchKeys(ctx)
	v.mu.Lock()
	if err == nil {
		v.keys, v.keysAt = keys, time.Now()
	} else {
		v.next = time.Now().Add(RetryInterval)
	}
	v.inflight = nil
	f.err = err
	v.mu.Unlock()
	close(f.done)
	if err != nil {
		v.log.Warn("authn: fetching the issuer's keys failed", "issuer", v.opts.Issuer, "err", err)
	} else {
		v.log.Debug("authn: issuer keys fetched", "issuer", v.opts.Issuer, "keys", len(keys))
	}
}

func (v *Verifier) fetchKeys(ctx context.Context) ([]jwk, error) {
	jwksURL := v.opts.JWKSURL
	if jwksURL == "" {
		m, err := v.metadata(ctx)
		if err != nil {
			return nil, err
		}
		if m.JWKSURI == "" {
			return nil, errorf("issuer metadata has no jwks_uri")
		}
		if err := checkEndpoint("jwks_uri", m.JWKSURI); err != nil {
			return nil, err
		}
		jwksURL = m.JWKSURI
	}
	body, status, err := v.get(ctx, jwksURL)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, errorf("JWKS %s: status %d", jwksURL, status)
	}
	keys, err := parseJWKS(body)
	if err != nil {
		return nil, errorf("JWKS %s: %v", jwksURL, err)
	}
	return keys, nil
}

// metadata discovers the issuer's metadata once: RFC 8414's
// /.well-known/oauth-authorization-server{path}, then OpenID Connect's
// {issuer}/.well-known/openid-configuration. The document's issuer must
// equal the configured one exactly. Called only by a fetch (one at a
// time, rate-bounded).
func (v *Verifier) metadata(ctx context.Context) (*asMetadata, error) {
	v.mu.Lock()
	m := v.meta
	v.mu.Unlock()
	if m != nil {
		return m, nil
	}
	u, _ := url.Parse(v.opts.Issuer)
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	origin := u.Scheme + "://" + u.Host
	urls := []string{
		origin + "/.well-known/oauth-authorization-server" + path,
		origin + path + "/.well-known/openid-configuration",
	}
	var errs []string
	for _, mu := range urls {
		body, status, err := v.get(ctx, mu)
		if err != nil {
			return nil, err // unreachable: the other URL is the same host
		}
		if status != http.StatusOK {
			errs = append(errs, mu+": status "+http.StatusText(status))
			continue
		}
		var doc asMetadata
		if err := json.Unmarshal(body, &doc); err != nil {
			errs = append(errs, mu+": not JSON")
			continue
		}
		if doc.Issuer != v.opts.Issuer {
			// RFC 8414 §3.3: a different issuer is an attack or a
			// misconfiguration; never use the document.
			return nil, errorf("%s names issuer %q, not %q", mu, doc.Issuer, v.opts.Issuer)
		}
		v.mu.Lock()
		v.meta = &doc
		v.mu.Unlock()
		return &doc, nil
	}
	return nil, errorf("no issuer metadata: %s", strings.Join(errs, "; "))
}

func (v *Verifier) get(ctx context.Context, u string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	return v.do(req)
}

func (v *Verifier) do(req *http.Request) ([]byte, int, error) {
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocument+1))
	if err != nil {
		return nil, 0, errorf("%s: reading: %v", req.URL.Redacted(), err)
	}
	if len(body) > maxDocument {
		return nil, 0, errorf("%s: answer larger than %d bytes", req.URL.Redacted(), maxDocument)
	}
	return body, resp.StatusCode, nil
}

// Prefetch discovers the issuer's metadata and fetches its JWKS now,
// waiting at most FetchWait (and ctx), so that a misconfigured or
// unreachable issuer shows at startup or in a health check rather than
// at the first request. It is rate-bounded like any fetch: nil if keys
// are already held and no fetch may start yet.
func (v *Verifier) Prefetch(ctx context.Context) error {
	err := v.refresh(ctx, true)
	if err == nil {
		// A prefetch is no request's: the first token signed by a key
		// the issuer makes after it (some make their signing key at
		// their first token) may fetch again at once.
		v.mu.Lock()
		v.next = time.Time{}
		v.mu.Unlock()
	}
	if err == errRateLimited {
		v.mu.Lock()
		have := !v.keysAt.IsZero()
		v.mu.Unlock()
		if have {
			return nil
		}
	}
	if err != nil {
		return v.unavailable(err)
	}
	return nil
}
