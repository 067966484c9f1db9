package oauthclient

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"
)

type authChallenge struct {
	scheme string
	params map[string]string
}

// parseChallenges reads RFC 9110 challenges: `Scheme k=v, k="v", Other …`.
// It is lenient: what it cannot read it skips.
func parseChallenges(h string) []authChallenge {
	var out []authChallenge
	var cur *authChallenge
	i := 0
	n := len(h)
	skipSpace := func() {
		for i < n && (h[i] == ' ' || h[i] == '\t' || h[i] == ',') {
			i++
		}
	}
	for {
		skipSpace()
		if i >= n {
			break
		}
		start := i
		for i < n && h[i] != ' ' && h[i] != '\t' && h[i] != ',' && h[i] != '=' {
			i++
		}
		tok := h[start:i]
		j := i
		for j < n && (h[j] == ' ' || h[j] == '\t') {
			j++
		}
		if j < n && h[j] == '=' && cur != nil {
			// A parameter of the current challenge (or token68 padding).
			i = j + 1
			for i < n && (h[i] == ' ' || h[i] == '\t') {
				i++
			}
			var val string
			if i < n && h[i] == '"' {
				i++
				var b strings.Builder
				for i < n && h[i] != '"' {
					if h[i] == '\\' && i+1 < n {
						i++
					}
					b.WriteByte(h[i])
					i++
				}
				i++ // closing quote
				val = b.String()
			} else {
				s := i
				for i < n && h[i] != ',' && h[i] != ' ' && h[i] != '\t' {
					i++
				}
				val = h[s:i]
			}
			cur.params[strings.ToLower(tok)] = val
			continue
		}
		// A new challenge's scheme.
		out = append(out, authChallenge{scheme: strings.ToLower(tok), params: map[string]string{}})
		cur = &out[len(out)-1]
		if j < n && h[j] == '=' { // token68 after a scheme-less start: skip it
			i = j + 1
			for i < n && h[i] != ',' {
				i++
			}
		}
	}
	return out
}

// fetchError is a discovery document that could not be had.
type fetchError struct {
	url     string
	status  int // 0 for a transport error
	err     error
	notJSON bool // a 200 answer that is not a JSON document (an HTML catch-all page, say)
}

func (e *fetchError) Error() string {
	if e.status != 0 {
		return fmt.Sprintf("GET %s: HTTP %d", e.url, e.status)
	}
	return fmt.Sprintf("GET %s: %v", e.url, e.err)
}

func (e *fetchError) Unwrap() error { return e.err }

// notFound says the document is absent (a 4xx, or a page that is not
// JSON), so the next candidate may be tried.
func (e *fetchError) notFound() bool { return e.notJSON || (e.status >= 400 && e.status < 500) }

// getJSON fetches a metadata document with the Grant's bounds.
func (g *Grant) getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return &fetchError{url: u, err: err}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := g.hc.Do(req)
	if err != nil {
		return &fetchError{url: u, err: cleanTransportError(ctx, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return &fetchError{url: u, status: resp.StatusCode}
	}
	body, err := readCapped(resp.Body)
	if err != nil {
		return &fetchError{url: u, err: cleanTransportError(ctx, err)}
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		if mt, _, _ := mime.ParseMediaType(ct); mt != "application/json" && !strings.HasSuffix(mt, "+json") {
			return &fetchError{url: u, err: fmt.Errorf("content type %q is not JSON", mt), notJSON: true}
		}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &fetchError{url: u, err: fmt.Errorf("not a JSON object: %v", err), notJSON: true}
	}
	return nil
}

var errTooLarge = fmt.Errorf("document larger than %d bytes", MaxDocumentSize)

func readCapped(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxDocumentSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxDocumentSize {
		return nil, errTooLarge
	}
	return b, nil
}

// cleanTransportError names a timeout plainly.
func cleanTransportError(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return errors.New("timed out")
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// TokenError is an error answer of a token, registration or revocation
// endpoint. It holds the OAuth error code and a sanitized description.
type TokenError struct {
	Endpoint    string
	Status      int
	Code        string // invalid_grant, invalid_client, …
	Description string
}

func (e *TokenError) Error() string {
	s := fmt.Sprintf("%s answered HTTP %d", e.Endpoint, e.Status)
	if e.Code != "" {
		s += ": " + e.Code
	}
	if e.Description != "" {
		s += ": " + e.Description
	}
	return s
}

// tokenResponse is a token endpoint's answer.
type tokenResponse struct {
	AccessToken  string          `json:"access_token"`
	TokenType    string          `json:"token_type"`
	ExpiresIn    json.Number     `json:"expires_in"`
	RefreshToken string          `json:"refresh_token"`
	Scope        string          `json:"scope"`
	IDToken      string          `json:"id_token"`
	Raw          json.RawMessage `json:"-"`
}

// clientAuth is how requests authenticate the client.
type clientAuth struct {
	id, secret, method string
	audience           string // the issuer, for private_key_jwt
}

// postForm posts an authenticated form to an AS endpoint with the bounds:
// timeout, no redirects, capped body. secrets are cut out of any error text.
func (g *Grant) postForm(ctx context.Context, endpoint string, form url.Values, ca clientAuth, secrets []string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	form = cloneValues(form)
	secrets = append(slices.Clone(secrets), ca.secret)
	var basic string
	switch ca.method {
	case AuthClientSecretBasic:
		cred := base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(ca.id) + ":" + url.QueryEscape(ca.secret)))
		basic = "Basic " + cred
		secrets = append(secrets, cred) // an echo of the header is cut out too
	case AuthClientSecretPost:
		form.Set("client_id", ca.id)
		form.Set("client_secret", ca.secret)
	case AuthPrivateKeyJWT:
		a, err := g.assertion(ca)
		if err != nil {
			return nil, 0, err
		}
		form.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
		form.Set("client_assertion", a)
		secrets = append(secrets, a)
		if form.Get("grant_type") != GrantClientCredentials && ca.id != "" {
			form.Set("client_id", ca.id)
		}
	default: // none
		if ca.id != "" {
			form.Set("client_id", ca.id)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, 0, fmt.Errorf("POST %s: %v", endpoint, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if basic != "" {
		req.Header.Set("Authorization", basic)
	}
	resp, err := g.noRedirect.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("POST %s: %v", endpoint, redact(cleanTransportError(ctx, err).Error(), secrets))
	}
	defer resp.Body.Close()
	body, err := readCapped(resp.Body)
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("POST %s: reading the answer: %v", endpoint, cleanTransportError(ctx, err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		te := &TokenError{Endpoint: endpoint, Status: resp.StatusCode}
		var e struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		if json.Unmarshal(body, &e) == nil {
			te.Code = sanitize(redact(e.Error, secrets), 64)
			te.Description = sanitize(redact(e.Description, secrets), 300)
		}
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			te.Description = "redirects are not followed for token requests"
		}
		return nil, resp.StatusCode, te
	}
	return body, resp.StatusCode, nil
}

// tokenRequest posts to the token endpoint and reads a token response.
func (g *Grant) tokenRequest(ctx context.Context, endpoint string, form url.Values, ca clientAuth, secrets []string) (*tokenResponse, error) {
	body, _, err := g.postForm(ctx, endpoint, form, ca, secrets)
	if err != nil {
		return nil, err
	}
	var tr tokenResponse
	if err := json.Unmarshal(body, &tr); err != nil {
		return nil, fmt.Errorf("token endpoint %s: answer is not a JSON token response", endpoint)
	}
	if tr.AccessToken == "" {
		return nil, fmt.Errorf("token endpoint %s: answer has no access_token", endpoint)
	}
	if tr.TokenType != "" && !strings.EqualFold(tr.TokenType, "bearer") {
		return nil, fmt.Errorf("token endpoint %s: token type %q is not Bearer", endpoint, sanitize(tr.TokenType, 32))
	}
	return &tr, nil
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// redact cuts secret values out of s.
func redact(s string, secrets []string) string {
	for _, x := range secrets {
		if len(x) >= 4 {
			s = strings.ReplaceAll(s, x, "[redacted]")
		}
	}
	return s
}

// sanitize keeps printable text, at most n runes.
func sanitize(s string, n int) string {
	var b strings.Builder
	count := 0
	for _, r := range s {
		if count >= n {
			b.WriteString("…")
			break
		}
		if !unicode.IsPrint(r) {
			r = ' '
		}
		b.WriteRune(r)
		count++
	}
	return strings.TrimSpace(b.String())
}
