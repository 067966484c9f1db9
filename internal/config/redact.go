package config

import (
	"math"
	"regexp"
	"strings"
)

// Redaction is what replaces a hidden value in Redacted's output.
const Redaction = "[REDACTED]"

// Redacted returns the server's command line (stdio) or URL (http) for
// display, with anything that looks like a secret replaced by Redaction:
//
//   - text that came from ${VAR} references is shown as the reference, not
//     its value;
//   - the value of a flag named like a secret (--token=…, --api-key …,
//     --password …, -e GITHUB_TOKEN=…, "Authorization: …");
//   - the credentials after "Bearer " or "Basic ";
//   - long high-entropy strings and well-known token shapes (ghp_…, sk-…,
//     xoxb-…, JWTs, UUIDs);
//   - in URLs, a password in the user info, query values named like a
//     secret or looking like tokens, and path segments that look like
//     tokens.
//
// Env and header values are never part of it.
func (s *Server) Redacted() string {
	if s.Kind == KindHTTP {
		u := s.URL
		if s.raw != nil {
			u = s.raw.url
		}
		return redactURL(u)
	}
	cmd, args := s.Command, s.Args
	if s.raw != nil {
		cmd, args = s.raw.command, s.raw.args
	}
	parts := []string{quoteArg(cmd)}
	for _, a := range RedactArgs(args) {
		parts = append(parts, quoteArg(a))
	}
	return strings.Join(parts, " ")
}

// RedactArgs returns a copy of args with secret-looking values replaced by
// Redaction (see Server.Redacted).
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	secretNext := false
	for i, a := range args {
		if secretNext && !strings.HasPrefix(a, "-") {
			out[i] = Redaction
			secretNext = false
			continue
		}
		secretNext = false
		out[i], secretNext = redactArg(a)
	}
	return out
}

// redactArg redacts one argument; next reports that the following argument
// is the value of a secret flag.
func redactArg(a string) (_ string, next bool) {
	if strings.HasPrefix(a, "-") && len(a) > 1 {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		dashes := a[:len(a)-len(strings.TrimLeft(a, "-"))]
		if secretName(name) {
			if hasVal {
				return dashes + name + "=" + Redaction, false
			}
			return a, true
		}
		if hasVal {
			return dashes + name + "=" + redactValue(val), false
		}
		return a, false
	}
	return redactValue(a), false
}

var (
	authSchemeRE = regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)\S+`)
	// headerRE matches "Name: value" (as given to --header flags).
	headerRE = regexp.MustCompile(`^([A-Za-z0-9_-]+)(:\s*)(.+)$`)
	// assignRE matches NAME=value (as given to -e flags).
	assignRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$`)
	uuidRE   = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// redactValue redacts a free-standing value.
func redactValue(v string) string {
	switch {
	case strings.Contains(v, "://"):
		return redactURL(v)
	case authSchemeRE.MatchString(v):
		return authSchemeRE.ReplaceAllString(v, "${1}${2}"+Redaction)
	}
	if m := headerRE.FindStringSubmatch(v); m != nil && secretName(m[1]) {
		return m[1] + m[2] + Redaction
	}
	if m := assignRE.FindStringSubmatch(v); m != nil {
		if secretName(m[1]) {
			return m[1] + "=" + Redaction
		}
		return m[1] + "=" + redactValue(m[2])
	}
	if tokenLike(v) {
		return Redaction
	}
	return v
}

// redactURL hides credentials in a URL without re-encoding it (so ${VAR}
// references stay readable).
func redactURL(u string) string {
	rest, frag, hasFrag := strings.Cut(u, "#")
	rest, query, hasQuery := strings.Cut(rest, "?")
	scheme, hier, ok := strings.Cut(rest, "://")
	if !ok {
		scheme, hier = "", rest
	}
	authority, p, hasPath := strings.Cut(hier, "/")
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		user, _, hasPass := strings.Cut(authority[:at], ":")
		if hasPass {
			authority = user + ":" + Redaction + authority[at:]
		} else {
			authority = Redaction + authority[at:]
		}
	}
	var b strings.Builder
	if ok {
		b.WriteString(scheme + "://")
	}
	b.WriteString(authority)
	if hasPath {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			if tokenLike(s) {
				segs[i] = Redaction
			}
		}
		b.WriteString("/" + strings.Join(segs, "/"))
	}
	if hasQuery {
		params := strings.Split(query, "&")
		for i, kv := range params {
			k, v, has := strings.Cut(kv, "=")
			if has && (secretName(k) || tokenLike(v)) {
				params[i] = k + "=" + Redaction
			}
		}
		b.WriteString("?" + strings.Join(params, "&"))
	}
	if hasFrag {
		if tokenLike(frag) || strings.Contains(frag, "=") {
			frag = Redaction
		}
		b.WriteString("#" + frag)
	}
	return b.String()
}

// Words that mark a flag, variable, header or parameter name as secret:
// secretParts anywhere in the lower-cased name, secretWords as a whole word
// (words split at anything but letters and digits).
var (
	secretParts = []string{"token", "secret", "passw", "apikey", "credential", "authorization", "bearer", "privatekey", "accesskey", "cookie", "signature"}
	secretWords = []string{"key", "pwd", "pass", "pat", "auth", "sig", "session"}
)

func secretName(name string) bool {
	lower := strings.ToLower(name)
	squashed := strings.NewReplacer("-", "", "_", "", ".", "").Replace(lower)
	for _, p := range secretParts {
		if strings.Contains(squashed, p) {
			return true
		}
	}
	for _, w := range strings.FieldsFunc(lower, func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
	}) {
		for _, s := range secretWords {
			if w == s {
				return true
			}
		}
	}
	return false
}

// tokenPrefixes start well-known credential formats.
var tokenPrefixes = []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "sk-", "sk_live_", "sk_test_", "rk_live_", "xoxb-", "xoxp-", "xoxa-", "xoxs-", "AKIA", "ASIA", "AIza", "ya29.", "eyJ", "hf_", "npm_", "pypi-", "lin_api_"}

// tokenLike reports whether s looks like a credential: a known token
// prefix, a UUID, or a long string of token characters with a long
// alphanumeric run mixing letters and digits and high entropy.
func tokenLike(s string) bool {
	if len(s) < 16 || strings.ContainsAny(s, " \t\n") {
		return false
	}
	for _, p := range tokenPrefixes {
		if strings.HasPrefix(s, p) && len(s) >= len(p)+12 {
			return true
		}
	}
	if uuidRE.MatchString(s) {
		return true
	}
	if len(s) < 20 {
		return false
	}
	run, longest, letters, digits := 0, 0, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
			letters = true
			run++
		case '0' <= c && c <= '9':
			digits = true
			run++
		case strings.IndexByte("_-+/=~.", c) >= 0:
			run = 0
		default:
			return false
		}
		longest = max(longest, run)
	}
	return letters && digits && longest >= 16 && entropy(s) >= 3.5
}

// entropy is the Shannon entropy of s in bits per byte.
func entropy(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / float64(len(s))
			h -= p * math.Log2(p)
		}
	}
	return h
}

// quoteArg quotes an argument for display when it is empty or holds
// whitespace, quotes or shell operators. ${VAR} references stay unquoted:
// this is for reading, not for pasting into a shell.
func quoteArg(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\n'\"\\`;&|<>()*?!#") {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// RedactText replaces, in text a server wrote (its stderr), every value of
// its environment and headers long enough to be a secret (6 bytes or
// more) by [redacted]: what it prints of its own configuration goes no
// further than mcpvisor's log.
func (s *Server) RedactText(text string) string {
	for _, m := range []map[string]string{s.Env, s.Headers} {
		for _, v := range m {
			if len(v) >= 6 {
				text = strings.ReplaceAll(text, v, "[redacted]")
			}
		}
	}
	return text
}
