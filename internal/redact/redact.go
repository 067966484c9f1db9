// Package redact decides what of a server's configuration is a secret and
// how it is shown instead (DESIGN decision 9): env and header values are
// never shown, arguments and URLs are shown with what looks like a secret
// in them replaced by Redaction, and ${VAR} references, which are not
// secrets, are shown as written. inspect, validate, the admin API
// (config.Server.Redacted) and the diffs of client files (Files) all show
// configuration through it. It knows nothing of servers or clients: only
// strings, and the JSON and TOML files that hold them.
package redact

import (
	"math"
	"regexp"
	"strings"
)

// Redaction is what replaces a hidden value.
const Redaction = "[REDACTED]"

// Args returns a copy of args, a command's arguments, with what looks
// like a secret in them replaced by Redaction:
//
//   - the value of a flag named like a secret (--token=…, --api-key …,
//     --password …, -e GITHUB_TOKEN=…, "Authorization: …"), but for the
//     ${VAR} references in it (Secret);
//   - the credentials after "Bearer " or "Basic " (references kept);
//   - long high-entropy strings and well-known token shapes (ghp_…, sk-…,
//     xoxb-…, JWTs, UUIDs);
//   - in URLs, a password in the user info, query values named like a
//     secret or looking like tokens, and path segments that look like
//     tokens (Value).
func Args(args []string) []string {
	out := make([]string, len(args))
	secretNext := false
	for i, a := range args {
		if secretNext && !strings.HasPrefix(a, "-") {
			out[i] = Secret(a)
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
		if SecretName(name) {
			if hasVal {
				return dashes + name + "=" + Secret(val), false
			}
			return a, true
		}
		if hasVal {
			return dashes + name + "=" + Value(val), false
		}
		return a, false
	}
	return Value(a), false
}

var (
	authSchemeRE = regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)(\S+)`)
	// headerRE matches "Name: value" (as given to --header flags).
	headerRE = regexp.MustCompile(`^([A-Za-z0-9_-]+)(:\s*)(.+)$`)
	// assignRE matches NAME=value (as given to -e flags).
	assignRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$`)
	uuidRE   = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// refRE matches a variable reference: mcpvisor's ${NAME} and
// ${NAME:-default}, and the clients' ${env:NAME}, ${input:id}, ….
var refRE = regexp.MustCompile(`\$\{[^}]*\}`)

// Secret returns, for display, a value that is secret by where it
// is: an env or header value, the value of a flag or parameter named like
// a secret. It is Redaction, but for the ${VAR} references it holds: a
// reference is not a secret and says where the value comes from, so it is
// shown as written (its default, in ${NAME:-default}, as Redaction), and
// the text around it as an argument would be (Value). Thus
// "Bearer ${TOKEN}" and "${HOME}/.cache" show as written, "ghp_…",
// "hunter2" and "Bearer ghp_…" as Redaction. An empty value stays empty.
func Secret(v string) string {
	refs := refRE.FindAllStringIndex(v, -1)
	if len(refs) == 0 {
		if v == "" {
			return ""
		}
		return Redaction
	}
	var b strings.Builder
	last := 0
	for _, r := range refs {
		b.WriteString(Value(v[last:r[0]]))
		ref := v[r[0]:r[1]]
		if name, def, ok := strings.Cut(ref[2:len(ref)-1], ":-"); ok && def != "" {
			ref = "${" + name + ":-" + Redaction + "}"
		}
		b.WriteString(ref)
		last = r[1]
	}
	b.WriteString(Value(v[last:]))
	return b.String()
}

// Value returns a free-standing value (an argument, a URL, any
// string of a configuration file that is not secret by its place) for
// display, with what looks like a secret in it replaced by Redaction: a URL's credentials, the credentials after
// "Bearer " or "Basic ", the value of NAME=… or "Name: …" when the name
// is a secret's, token-like strings, the default of a ${NAME:-default}.
func Value(v string) string {
	if strings.Contains(v, ":-") {
		v = refRE.ReplaceAllStringFunc(v, func(ref string) string {
			if name, def, ok := strings.Cut(ref[2:len(ref)-1], ":-"); ok {
				return "${" + name + ":-" + Value(def) + "}"
			}
			return ref
		})
	}
	switch {
	case strings.Contains(v, "://"):
		return redactURL(v)
	case authSchemeRE.MatchString(v):
		return authSchemeRE.ReplaceAllStringFunc(v, func(m string) string {
			s := authSchemeRE.FindStringSubmatch(m)
			return s[1] + s[2] + Secret(s[3])
		})
	}
	if m := headerRE.FindStringSubmatch(v); m != nil && SecretName(m[1]) {
		return m[1] + m[2] + Secret(m[3])
	}
	if m := assignRE.FindStringSubmatch(v); m != nil {
		if SecretName(m[1]) {
			return m[1] + "=" + Secret(m[2])
		}
		return m[1] + "=" + Value(m[2])
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
		user, pass, hasPass := strings.Cut(authority[:at], ":")
		if hasPass {
			authority = user + ":" + Secret(pass) + authority[at:]
		} else {
			authority = Secret(user) + authority[at:]
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
			switch {
			case has && SecretName(k):
				params[i] = k + "=" + Secret(v)
			case has && tokenLike(v):
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

// SecretName reports whether a flag, variable, header, parameter or
// field name names a secret (token, API_KEY, x-api-key, password,
// Authorization, …).
func SecretName(name string) bool {
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
