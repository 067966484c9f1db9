package authn

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// introspect verifies an opaque token by RFC 7662: the endpoint must
// call it active, and what it returns passes the checks a JWT does: iss
// (when given) exactly the issuer, aud an accepted audience, exp present
// and not past (with Skew), nbf/iat not in the future.
func (v *Verifier) introspect(ctx context.Context, token string) (*identity.Identity, *Error) {
	in := v.opts.Introspection
	if in == nil {
		return nil, invalidToken("token is not a JWT", nil)
	}
	endpoint := in.URL
	if endpoint == "" {
		v.mu.Lock()
		m := v.meta
		v.mu.Unlock()
		if m == nil {
			// Discovery happens with the key fetch.
			if err := v.refresh(ctx, true); err != nil && err != errRateLimited {
				return nil, v.unavailable(err)
			}
			v.mu.Lock()
			m = v.meta
			v.mu.Unlock()
		}
		if m == nil {
			return nil, unavailable("issuer metadata unavailable", RetryInterval, nil)
		}
		if m.IntrospectionEndpoint == "" {
			return nil, unavailable("issuer has no introspection endpoint", RefetchInterval,
				errorf("issuer metadata names no introspection_endpoint"))
		}
		if err := checkEndpoint("introspection_endpoint", m.IntrospectionEndpoint); err != nil {
			return nil, unavailable("issuer has no usable introspection endpoint", RefetchInterval, err)
		}
		endpoint = m.IntrospectionEndpoint
	}
	if v.ctx.Err() != nil {
		return nil, unavailable("verifier closed", RetryInterval, nil)
	}
	t := time.NewTimer(FetchWait)
	select {
	case v.introSem <- struct{}{}:
		t.Stop()
	case <-t.C:
		return nil, unavailable("introspection busy", time.Second, errorf("%d introspections under way for %v", MaxIntrospections, FetchWait))
	case <-ctx.Done():
		t.Stop()
		return nil, unavailable("introspection not attempted", time.Second, ctx.Err())
	}
	defer func() { <-v.introSem }()
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, unavailable("introspection failed", RetryInterval, errorf("introspection request: %v", err))
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if in.ClientID != "" {
		// RFC 6749 §2.3.1: form-encode id and secret before Basic.
		req.SetBasicAuth(url.QueryEscape(in.ClientID), url.QueryEscape(in.ClientSecret))
	}
	body, status, err := v.do(req)
	if err != nil {
		// A transport error names the URL, never the form (the token).
		return nil, unavailable("introspection failed", RetryInterval, errorf("introspection %s: %v", endpoint, redact(err, token)))
	}
	if status != http.StatusOK {
		return nil, unavailable("introspection failed", RetryInterval, errorf("introspection %s: status %d", endpoint, status))
	}
	var claims map[string]any
	if err := json.Unmarshal(body, &claims); err != nil || claims == nil {
		return nil, unavailable("introspection failed", RetryInterval, errorf("introspection %s: answer is not a JSON object", endpoint))
	}
	if active, _ := claims["active"].(bool); !active {
		return nil, invalidToken("token is not active", nil)
	}
	if iss, ok := claims["iss"]; ok && iss != v.opts.Issuer {
		return nil, invalidToken("token from another issuer", nil)
	}
	now := time.Now()
	expF, ok := claims["exp"].(float64)
	if !ok {
		return nil, invalidToken("token lacks a required claim", nil)
	}
	exp := unixTime(expF)
	if !now.Before(exp.Add(v.opts.Skew)) {
		return nil, invalidToken("token expired", nil)
	}
	if nbf, ok := claims["nbf"].(float64); ok && now.Add(v.opts.Skew).Before(unixTime(nbf)) {
		return nil, invalidToken("token not valid yet", nil)
	}
	if iat, ok := claims["iat"].(float64); ok && now.Add(v.opts.Skew).Before(unixTime(iat)) {
		return nil, invalidToken("token issued in the future", nil)
	}
	if tt, ok := claims["token_type"].(string); ok && tt != "" && !strings.EqualFold(tt, "bearer") && !strings.EqualFold(tt, "access_token") {
		return nil, invalidToken("token is not an access token", nil)
	}
	if tu, ok := claims["token_use"].(string); ok && tu != "" && tu != "access_token" {
		return nil, invalidToken("token is not an access token", nil)
	}
	return v.identity(claims, exp)
}

func unixTime(f float64) time.Time {
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9))
}

type redacted struct{ msg string }

func (r redacted) Error() string { return r.msg }

// redact returns err with every occurrence of token replaced.
func redact(err error, token string) error {
	s := err.Error()
	if token == "" || !strings.Contains(s, token) {
		return redacted{s}
	}
	return redacted{strings.ReplaceAll(s, token, "[token]")}
}
