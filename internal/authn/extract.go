package authn

import (
	"net/http"
	"net/url"
	"strings"
)

// MaxTokenLen bounds the bearer token Extract accepts and Verify looks
// at; a longer one is invalid_request (Extract) or invalid_token
// (Verify).
const MaxTokenLen = 16 << 10

// Extract returns the request's bearer token (RFC 6750 §2.1): exactly one
// Authorization header with the Bearer scheme (case-insensitive).
//
//   - No Authorization header, or another scheme: "" and no error (the
//     caller answers 401 with a challenge).
//   - A token only in the URL's access_token query parameter (§2.3) is
//     ignored: "" and no error. Tokens in URLs leak into logs and history,
//     so mcpvisor never reads them.
//   - Two Authorization headers, or an Authorization header and an
//     access_token query parameter, or malformed Bearer credentials:
//     invalid_request (400, §3.1).
//
// Form-encoded body tokens (§2.2) are not read: MCP bodies are JSON.
func Extract(r *http.Request) (string, error) {
	vals := r.Header.Values("Authorization")
	if len(vals) == 0 {
		return "", nil
	}
	if len(vals) > 1 {
		return "", invalidRequest("more than one Authorization header")
	}
	if queryHasToken(r.URL) {
		return "", invalidRequest("a token in both the Authorization header and the URL")
	}
	v := vals[0]
	scheme, rest, _ := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", nil
	}
	tok := strings.TrimLeft(rest, " ")
	if tok == "" {
		return "", invalidRequest("empty Bearer credentials")
	}
	if len(tok) > MaxTokenLen {
		return "", invalidRequest("Bearer token too long")
	}
	if !isToken68(tok) {
		return "", invalidRequest("malformed Bearer credentials")
	}
	return tok, nil
}

// queryHasToken reports whether the URL's query names access_token, by
// the same parsing net/url does, and also when the query does not parse
// cleanly (a ';' or bad escape must not hide a second token).
func queryHasToken(u *url.URL) bool {
	if u == nil || u.RawQuery == "" {
		return false
	}
	q, _ := url.ParseQuery(u.RawQuery)
	if _, ok := q["access_token"]; ok {
		return true
	}
	for _, part := range strings.FieldsFunc(u.RawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		name, _, _ := strings.Cut(part, "=")
		if n, err := url.QueryUnescape(name); err == nil && n == "access_token" || name == "access_token" {
			return true
		}
	}
	return false
}

// isToken68 reports whether s is RFC 7235's token68:
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isToken68(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' {
			continue
		}
		break
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}
