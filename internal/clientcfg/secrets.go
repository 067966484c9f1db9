package clientcfg

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpvisor/mcpvisor/internal/redact"
	"github.com/mcpvisor/mcpvisor/internal/secret"
)

// SecretSetter stores a secret's value under a name (internal/secret's
// Store does): import --move-secrets puts the literal secrets of the
// entries it imports there.
type SecretSetter interface {
	Set(ctx context.Context, name, value string) error
}

// Secret is a literal secret of an entry: the name it is stored under,
// the field that held it, and its value. String and the error texts
// that name it never show the value.
type Secret struct {
	// Name is the secret store's name: SERVER.ENV_KEY,
	// SERVER.header.Header, SERVER.argN (N: the argument's index) or
	// SERVER.oauth.clientSecret.
	Name string
	// At is the field that held it, as mcpvisor's config names it
	// (env.KEY, headers.Header, args[N], oauth.clientSecret).
	At    string
	value string
}

// Value is the secret's value, as the server gets it.
func (s Secret) Value() string { return s.value }

// String names the secret, never its value.
func (s Secret) String() string { return s.Name }

// GoString names the secret, never its value.
func (s Secret) GoString() string { return "clientcfg.Secret{" + s.Name + "}" }

// Reference is the reference that replaces the secret in a config.
func (s Secret) Reference() string { return "${keyring:" + s.Name + "}" }

// LiteralSecrets lists the literal secrets of the entry (for server,
// its name in mcpvisor's config): env values and header values named
// like secrets or looking like one (redact's detectors), the values of
// secret flags (--api-key …, --token=…, -e TOKEN=…) and token-shaped
// args (ghp_…, github_pat_…, sk-…, xoxb-…, Bearer …), and a literal
// oauth client secret. Values that hold a reference (${NAME},
// ${keyring:NAME}, …) are not secrets of the file and are left.
func (s *Server) LiteralSecrets(server string) []Secret {
	return s.secrets(server, false, nil)
}

// MoveSecretsAvoiding returns a copy of the entry with its literal
// secrets (LiteralSecrets) replaced by ${keyring:NAME} references, and
// the secrets, for the caller to store each under its Name. No secret
// gets a name inUse reports (one the store holds, one another entry
// took; nil: none): such a name gets a suffix, -2, -3…, so that storing
// never overwrites a secret.
func (s *Server) MoveSecretsAvoiding(server string, inUse func(name string) bool) (*Server, []Secret) {
	c := s.clone()
	return c, c.secrets(server, true, inUse)
}

// clone copies the entry and what it holds that MoveSecretsAvoiding
// changes.
func (s *Server) clone() *Server {
	c := *s
	c.Env, c.Headers, c.Args = slices.Clone(s.Env), slices.Clone(s.Headers), slices.Clone(s.Args)
	if s.OAuth != nil {
		o := *s.OAuth
		c.OAuth = &o
	}
	return &c
}

// SecretLookup reads a stored secret by name (the secret store serve
// reads); ok is false when it cannot.
type SecretLookup func(name string) (value string, ok bool)

// SameServer reports whether known, a server of mcpvisor's config, is
// the client's entry s: the same launch (SameLaunch), or the launch
// known makes once its ${keyring:NAME} references are read from stored
// (import --move-secrets wrote it so). An entry holding another secret
// than the one stored is another server (another account): with stored
// nil, or a secret that cannot be read, an entry whose secrets mcpvisor
// holds by reference is never the same server.
func SameServer(known, s *Server, stored SecretLookup) bool {
	if SameLaunch(known, s) {
		return true
	}
	if stored == nil || len(s.LiteralSecrets(known.Name)) == 0 {
		return false
	}
	resolved, ok := known.withStored(stored)
	return ok && SameLaunch(resolved, s)
}

// withStored returns a copy of the entry with the ${keyring:NAME}
// references of its env, headers and args replaced by the stored values
// (as literal text), and whether it had any and all could be read.
func (s *Server) withStored(stored SecretLookup) (*Server, bool) {
	c := s.clone()
	c.launched = nil
	found, ok := false, true
	sub := func(v *string) {
		if !strings.Contains(*v, "${keyring:") {
			return
		}
		var b strings.Builder
		t := *v
		for i := 0; i < len(t); {
			switch {
			case strings.HasPrefix(t[i:], "$$"):
				b.WriteString("$$")
				i += 2
				continue
			case !strings.HasPrefix(t[i:], "${"):
				b.WriteByte(t[i])
				i++
				continue
			}
			end := secret.ClosingBrace(t, i+2)
			if end < 0 {
				b.WriteString(t[i:])
				break
			}
			if name, isKeyring := strings.CutPrefix(t[i+2:end], "keyring:"); isKeyring {
				found = true
				val, got := stored(name)
				if !got {
					ok = false
				}
				b.WriteString(strings.ReplaceAll(val, "$", "$$"))
			} else {
				b.WriteString(t[i : end+1])
			}
			i = end + 1
		}
		*v = b.String()
	}
	for i := range c.Env {
		sub(&c.Env[i].Value)
	}
	for i := range c.Headers {
		sub(&c.Headers[i].Value)
	}
	for i := range c.Args {
		sub(&c.Args[i])
	}
	return c, found && ok
}

// maxSuffix bounds the names tried for a secret whose name is in use (a
// store that cannot tell says every name may be): past it, storing the
// secret finds the name held, and stops the import.
const maxSuffix = 100

// schemeRE is an HTTP credential with its scheme: Bearer tok.
var schemeRE = regexp.MustCompile(`(?i)^(bearer|basic|token)(\s+)(\S+)$`)

func (s *Server) secrets(server string, move bool, inUse func(string) bool) []Secret {
	var out []Secret
	taken := map[string]bool{}
	add := func(name, at, text string) string {
		name = keyringName(name)
		for n, i := name, 2; taken[name] || inUse != nil && i <= maxSuffix && inUse(name); i++ {
			name = n + "-" + strconv.Itoa(i)
		}
		taken[name] = true
		sec := Secret{Name: name, At: at, value: unescape(text)}
		out = append(out, sec)
		return sec.Reference()
	}
	// whole moves v wholly, or but its scheme (Bearer ${keyring:…}).
	whole := func(name, at, v string) string {
		if m := schemeRE.FindStringSubmatch(v); m != nil {
			return m[1] + m[2] + add(name, at, m[3])
		}
		return add(name, at, v)
	}
	set := func(dst *string, v string) {
		if move {
			*dst = v
		}
	}
	for i := range s.Env {
		kv := &s.Env[i]
		if secretValue(kv.Key, kv.Value) {
			set(&kv.Value, whole(server+"."+kv.Key, join("env", kv.Key), kv.Value))
		}
	}
	for i := range s.Headers {
		kv := &s.Headers[i]
		if secretValue(kv.Key, kv.Value) {
			set(&kv.Value, whole(server+".header."+kv.Key, join("headers", kv.Key), kv.Value))
		}
	}
	secretNext := false
	for i := range s.Args {
		a := &s.Args[i]
		name, at := server+".arg"+strconv.Itoa(i), "args["+strconv.Itoa(i)+"]"
		next := secretNext
		secretNext = false
		if hasRef(*a) || *a == "" || strings.Contains(*a, "://") {
			continue
		}
		if next && !strings.HasPrefix(*a, "-") {
			set(a, whole(name, at, *a))
			continue
		}
		if strings.HasPrefix(*a, "-") {
			flag, val, hasVal := strings.Cut(*a, "=")
			if redact.SecretName(strings.TrimLeft(flag, "-")) {
				if !hasVal {
					secretNext = true
				} else if val != "" {
					set(a, flag+"="+whole(name, at, val))
				}
			}
			continue
		}
		if k, val, ok := strings.Cut(*a, "="); ok && envName(k) {
			if redact.SecretName(k) && val != "" {
				set(a, k+"="+whole(name, at, val))
			}
			continue
		}
		if m := schemeRE.FindStringSubmatch(*a); m != nil || redact.Value(*a) == redact.Redaction {
			set(a, whole(name, at, *a))
		}
	}
	if s.OAuth != nil && s.OAuth.ClientSecret != "" && !hasRef(s.OAuth.ClientSecret) {
		set(&s.OAuth.ClientSecret, add(server+".oauth.clientSecret", "oauth.clientSecret", s.OAuth.ClientSecret))
	}
	return out
}

// URLSecrets lists the fields whose URL holds what looks like a secret
// (a password, a token parameter: redact's detectors), which
// MoveSecrets leaves: url, args[N].
func (s *Server) URLSecrets() []string {
	var at []string
	if s.URL != "" && redact.Value(s.URL) != s.URL {
		at = append(at, "url")
	}
	for i, a := range s.Args {
		if strings.Contains(a, "://") && redact.Value(a) != a {
			at = append(at, "args["+strconv.Itoa(i)+"]")
		}
	}
	return at
}

// secretValue reports whether an env or header value is a literal
// secret: named like one, or looking like one, and no reference.
func secretValue(key, v string) bool {
	if v == "" || hasRef(v) {
		return false
	}
	return redact.SecretName(key) || redact.Value(v) != v
}

// hasRef reports whether v, in mcpvisor's syntax, holds a reference
// (${…}; $$ is a literal $).
func hasRef(v string) bool {
	for i := 0; i+1 < len(v); i++ {
		if v[i] != '$' {
			continue
		}
		if v[i+1] == '$' {
			i++
			continue
		}
		if v[i+1] == '{' {
			return true
		}
	}
	return false
}

// keyringName makes name a valid secret name: letters, digits, '.', '_',
// '-' and '/'; anything else becomes '_'.
func keyringName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '_' || r == '-' || r == '/' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' {
			return r
		}
		return '_'
	}, name)
}
