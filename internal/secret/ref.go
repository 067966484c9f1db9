// Package secret resolves secret references in configuration strings —
// ${env:NAME}, ${file:PATH}, ${keyring:NAME}, and the older ${NAME} and
// ${NAME:-default}, which mean ${env:NAME} — and keeps named secrets in
// the OS keyring or, where there is none, in a file only its owner reads.
//
// A reference stays text until the server it belongs to starts or
// connects; only then is it resolved (Resolve), and its value goes only
// where the configuration put it. Errors name the reference, never a
// value.
package secret

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Schemes of a reference.
const (
	SchemeEnv     = "env"
	SchemeFile    = "file"
	SchemeKeyring = "keyring"
	// SchemeIdentity is ${identity.sub} and ${identity.key}: the
	// identity a per-identity server's instance runs for (Sources.Identity).
	SchemeIdentity = "identity"
)

// IdentitySuffix ends a per-identity keyring reference,
// ${keyring:NAME@identity}: it reads the secret NAME/<identity key>, the
// credential of the identity the instance runs for, and nothing else.
const IdentitySuffix = "@identity"

// Identity is who a per-identity server's instance runs for, as its
// ${identity.*} and ${keyring:NAME@identity} references read it.
type Identity struct {
	// Key is the identity's key (identity.Identity.Key, or "anonymous"):
	// ${identity.key}, and the suffix of its keyring names.
	Key string
	// Subject is ${identity.sub} ("" for the anonymous identity).
	Subject string
}

// MaxFileSize bounds what a ${file:PATH} reference reads.
const MaxFileSize = 64 << 10

// Ref is one reference found in a string.
type Ref struct {
	// Text is the reference as written, e.g. "${keyring:gh-token}".
	Text string
	// Scheme is SchemeEnv, SchemeFile or SchemeKeyring.
	Scheme string
	// Name is the variable, path or keyring name.
	Name string
	// HasDefault is set for ${NAME:-default} (and ${env:NAME:-default}):
	// Default is used when the variable is unset or empty.
	HasDefault bool
	Default    string // as written; it may hold references itself
	// PerIdentity is set for ${keyring:NAME@identity}: Name is looked up
	// as NAME/<identity key>.
	PerIdentity bool
}

func (r Ref) String() string { return r.Text }

// part is a literal or a reference of a parsed string.
type part struct {
	lit string
	ref *Ref
	def []part // the parsed default of ref
}

const want = "want ${NAME}, ${NAME:-default}, ${env:NAME}, ${file:/path}, ${keyring:NAME}, ${keyring:NAME@identity}, ${identity.sub} or ${identity.key}; write $$ for a literal $"

// parse splits s into literals and references. $$ is a literal $; a $
// followed by anything but $ or { is kept as it is.
func parse(s string) ([]part, error) {
	var parts []part
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, part{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			lit.WriteByte(c)
			i++
			continue
		}
		switch s[i+1] {
		case '$':
			lit.WriteByte('$')
			i += 2
		case '{':
			end := ClosingBrace(s, i+2)
			if end < 0 {
				return nil, fmt.Errorf("unterminated %q (%s)", s[i:], want)
			}
			ref, def, err := parseRef(s[i : end+1])
			if err != nil {
				return nil, err
			}
			flush()
			parts = append(parts, part{ref: ref, def: def})
			i = end + 1
		default:
			lit.WriteByte('$')
			i++
		}
	}
	flush()
	return parts, nil
}

// parseRef parses one ${...} (text includes the braces).
func parseRef(text string) (*Ref, []part, error) {
	body := text[2 : len(text)-1]
	if body == "" {
		return nil, nil, fmt.Errorf("empty variable name in %q", text)
	}
	ref := &Ref{Text: text}
	if field, ok := strings.CutPrefix(body, SchemeIdentity+"."); ok {
		if field != "sub" && field != "key" {
			return nil, nil, fmt.Errorf("%q is not a supported reference (of the identity: ${identity.sub} or ${identity.key})", text)
		}
		ref.Scheme, ref.Name = SchemeIdentity, field
		return ref, nil, nil
	}
	scheme, rest, hasScheme := strings.Cut(body, ":")
	if hasScheme && strings.HasPrefix(rest, "-") && validVarName(scheme) {
		hasScheme = false // ${NAME:-default}
	}
	if !hasScheme {
		scheme, rest = SchemeEnv, body
	}
	ref.Scheme = scheme
	switch scheme {
	case SchemeEnv:
		name, def, hasDef := strings.Cut(rest, ":-")
		if !validVarName(name) {
			if name == "" {
				return nil, nil, fmt.Errorf("empty variable name in %q", text)
			}
			return nil, nil, fmt.Errorf("%q is not a supported reference (%s, NAME of letters, digits and _)", text, want)
		}
		ref.Name = name
		if hasDef {
			ref.HasDefault, ref.Default = true, def
			parts, err := parse(def)
			if err != nil {
				return nil, nil, err
			}
			return ref, parts, nil
		}
	case SchemeFile:
		if rest == "" {
			return nil, nil, fmt.Errorf("%q has no file path (want ${file:/absolute/path} or ${file:~/path})", text)
		}
		if !filepath.IsAbs(rest) && !strings.HasPrefix(rest, "~/") {
			return nil, nil, fmt.Errorf("%q: the path must be absolute or start with ~/", text)
		}
		ref.Name = rest
	case SchemeKeyring:
		if name, ok := strings.CutSuffix(rest, IdentitySuffix); ok {
			rest, ref.PerIdentity = name, true
		}
		if rest == "" {
			return nil, nil, fmt.Errorf("%q has no keyring name (want ${keyring:NAME}; set it with `mcpvisor secret set NAME`)", text)
		}
		if err := CheckName(rest); err != nil {
			return nil, nil, fmt.Errorf("%q: %v", text, err)
		}
		if Reserved(rest) {
			return nil, nil, fmt.Errorf("%q: %v", text, reservedError(rest))
		}
		ref.Name = rest
	default:
		return nil, nil, fmt.Errorf("%q is not a supported reference (%s)", text, want)
	}
	return ref, nil, nil
}

// ClosingBrace returns the index of the } that closes a ${ whose body
// starts at start, allowing nested ${...} in defaults and skipping $$, or
// -1: how mcpvisor's config reads a reference's extent.
func ClosingBrace(s string, start int) int {
	depth := 0
	for j := start; j < len(s); j++ {
		switch {
		case s[j] == '$' && j+1 < len(s) && s[j+1] == '$':
			j++
		case s[j] == '$' && j+1 < len(s) && s[j+1] == '{':
			depth++
			j++
		case s[j] == '}':
			if depth == 0 {
				return j
			}
			depth--
		}
	}
	return -1
}

func validVarName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_', 'A' <= r && r <= 'Z', 'a' <= r && r <= 'z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// CheckName reports whether name may name a secret: 1 to 200 letters,
// digits, '.', '_', '-' and '/' (github.GITHUB_TOKEN, oauth/linear).
func CheckName(name string) error {
	if name == "" {
		return errors.New("empty secret name")
	}
	if len(name) > 200 {
		return errors.New("secret name longer than 200 bytes")
	}
	for _, r := range name {
		switch {
		case r == '.', r == '_', r == '-', r == '/',
			'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		default:
			return fmt.Errorf("secret name %q has %q: use letters, digits, '.', '_', '-' and '/'", name, r)
		}
	}
	return nil
}

// OAuthPrefix starts the names of the records mcpvisor login keeps in the
// store (oauth/NAME: a server's tokens and client). The store takes such
// names; references and mcpvisor secret do not, so that no server's
// config can send another's tokens anywhere.
const OAuthPrefix = "oauth/"

// Reserved reports whether name is an OAuth record's.
func Reserved(name string) bool { return strings.HasPrefix(name, OAuthPrefix) }

func reservedError(name string) error {
	return fmt.Errorf("the name %s is reserved for mcpvisor's OAuth records (mcpvisor login keeps them)", name)
}

// CheckUserName is CheckName for a name people set and refer to: one not
// Reserved.
func CheckUserName(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if Reserved(name) {
		return reservedError(name)
	}
	return nil
}

// Find returns the references of s, those in defaults included, in
// order, or an error naming the first malformed one.
func Find(s string) ([]Ref, error) {
	parts, err := parse(s)
	if err != nil {
		return nil, err
	}
	var refs []Ref
	var walk func([]part)
	walk = func(ps []part) {
		for _, p := range ps {
			if p.ref != nil {
				refs = append(refs, *p.ref)
				walk(p.def)
			}
		}
	}
	walk(parts)
	return refs, nil
}

// Check reports whether s is well formed.
func Check(s string) error {
	_, err := parse(s)
	return err
}

// Literal reports whether s resolves to itself: it holds no $ at all.
func Literal(s string) bool { return !strings.Contains(s, "$") }

// Sources are where Resolve looks references up.
type Sources struct {
	// LookupEnv resolves ${env:NAME}; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Store resolves ${keyring:NAME}; nil makes such a reference an
	// error.
	Store Getter
	// Home replaces the user's home directory for ${file:~/…}; "" means
	// os.UserHomeDir.
	Home string
	// Identity resolves ${identity.*} and ${keyring:NAME@identity}: the
	// identity a per-identity server's instance runs for. nil makes
	// such a reference an error.
	Identity *Identity
}

// Getter is the part of a Store that Resolve uses.
type Getter interface {
	Get(ctx context.Context, name string) (string, error)
	Backend() string
}

// ResolveError says which reference could not be resolved, and why. It
// never holds a value.
type ResolveError struct {
	Ref string // the reference as written
	Err error
}

func (e *ResolveError) Error() string {
	return e.Ref + " could not be resolved: " + e.Err.Error()
}

func (e *ResolveError) Unwrap() error { return e.Err }

// Resolve returns s with every reference replaced by its value and $$ by
// $. The first reference that cannot be resolved is an error
// (*ResolveError) naming it.
func Resolve(ctx context.Context, s string, src Sources) (string, error) {
	if Literal(s) {
		return s, nil
	}
	parts, err := parse(s)
	if err != nil {
		return "", err
	}
	return resolveParts(ctx, parts, &src)
}

func resolveParts(ctx context.Context, parts []part, src *Sources) (string, error) {
	var b strings.Builder
	for _, p := range parts {
		if p.ref == nil {
			b.WriteString(p.lit)
			continue
		}
		v, err := resolveRef(ctx, p, src)
		if err != nil {
			return "", err
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

func resolveRef(ctx context.Context, p part, src *Sources) (string, error) {
	r := p.ref
	fail := func(err error) (string, error) { return "", &ResolveError{Ref: r.Text, Err: err} }
	switch r.Scheme {
	case SchemeEnv:
		lookup := src.LookupEnv
		if lookup == nil {
			lookup = os.LookupEnv
		}
		v, ok := lookup(r.Name)
		if r.HasDefault && (!ok || v == "") {
			return resolveParts(ctx, p.def, src)
		}
		if !ok {
			return fail(fmt.Errorf("environment variable %s is not set (use ${%s:-default} for a fallback)", r.Name, r.Name))
		}
		return v, nil
	case SchemeFile:
		v, err := readFile(r.Name, src.Home)
		if err != nil {
			return fail(err)
		}
		return v, nil
	case SchemeIdentity:
		if src.Identity == nil {
			return fail(errNoIdentity)
		}
		if r.Name == "key" {
			return src.Identity.Key, nil
		}
		return src.Identity.Subject, nil
	case SchemeKeyring:
		if src.Store == nil {
			return fail(errors.New("no secret store is available"))
		}
		name := r.Name
		if r.PerIdentity {
			if src.Identity == nil {
				return fail(errNoIdentity)
			}
			name = IdentityName(r.Name, src.Identity.Key)
			if err := CheckName(name); err != nil {
				return fail(err)
			}
		}
		v, err := src.Store.Get(ctx, name)
		switch {
		case errors.Is(err, ErrNotFound):
			return fail(fmt.Errorf("not in the keyring (%s); set it with `mcpvisor secret set %s`", src.Store.Backend(), name))
		case err != nil:
			return fail(err)
		}
		return v, nil
	}
	return fail(fmt.Errorf("unknown scheme %q", r.Scheme))
}

var errNoIdentity = errors.New(`only a server with "sharing": "per-identity" runs for an identity`)

// IdentityName is the keyring name ${keyring:name@identity} reads for the
// identity whose key is key: name/key.
func IdentityName(name, key string) string { return name + "/" + key }

// UsesIdentity reports whether s refers to the identity an instance runs
// for (${identity.sub}, ${identity.key}, ${keyring:NAME@identity}), in
// defaults included: only a per-identity server's values may. Malformed
// text reports false (Check says why).
func UsesIdentity(s string) bool {
	refs, err := Find(s)
	if err != nil {
		return false
	}
	for _, r := range refs {
		if r.Scheme == SchemeIdentity || r.PerIdentity {
			return true
		}
	}
	return false
}

// readFile reads a ${file:} reference's file: at most MaxFileSize bytes,
// less one trailing newline.
func readFile(path, home string) (string, error) {
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		if home == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("no home directory for ~/: %v", err)
			}
			home = h
		}
		path = filepath.Join(home, rest)
	}
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		switch {
		case errors.Is(err, os.ErrNotExist):
			return "", errors.New("no such file")
		case errors.Is(err, os.ErrPermission):
			return "", errors.New("permission denied reading the file")
		}
		return "", fmt.Errorf("cannot open the file: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("cannot stat the file: %v", err)
	}
	if fi.IsDir() {
		return "", errors.New("is a directory, not a file")
	}
	if !fi.Mode().IsRegular() && fi.Mode()&os.ModeNamedPipe == 0 {
		return "", fmt.Errorf("is not a regular file (%v)", fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("cannot read the file: %v", err)
	}
	if len(data) > MaxFileSize {
		return "", fmt.Errorf("the file is larger than %d KiB", MaxFileSize>>10)
	}
	s := string(data)
	if t, ok := strings.CutSuffix(s, "\n"); ok {
		s = strings.TrimSuffix(t, "\r")
	}
	return s, nil
}

// ExpandEnv expands the environment references of s (${NAME},
// ${NAME:-default}, ${env:NAME}) and $$, for settings read when the
// configuration loads (a command, a URL). A file or keyring reference
// there is an error: their values are read only when a server starts,
// and only into its environment, arguments, headers and OAuth secrets.
// Variables that are unset and have no default are listed in missing,
// and expand to "".
func ExpandEnv(s string, lookup func(string) (string, bool)) (value string, missing []string, err error) {
	if Literal(s) {
		return s, nil, nil
	}
	parts, err := parse(s)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	var walk func([]part) error
	walk = func(ps []part) error {
		for _, p := range ps {
			if p.ref == nil {
				b.WriteString(p.lit)
				continue
			}
			if p.ref.Scheme != SchemeEnv {
				return fmt.Errorf("%q is not allowed here: ${file:…}, ${keyring:…} and ${identity.…} are read only for env, args, headers and oauth secrets", p.ref.Text)
			}
			v, ok := lookup(p.ref.Name)
			if p.ref.HasDefault && (!ok || v == "") {
				if err := walk(p.def); err != nil {
					return err
				}
				continue
			}
			if !ok {
				missing = append(missing, p.ref.Name)
			}
			b.WriteString(v)
		}
		return nil
	}
	if err := walk(parts); err != nil {
		return "", nil, err
	}
	return b.String(), missing, nil
}

// Unset lists the environment variables s refers to that lookup does not
// find and that have no default in use: Resolve would fail on the first.
// Malformed text lists none.
func Unset(s string, lookup func(string) (string, bool)) []string {
	if Literal(s) {
		return nil
	}
	parts, err := parse(s)
	if err != nil {
		return nil
	}
	var out []string
	var walk func([]part)
	walk = func(ps []part) {
		for _, p := range ps {
			if p.ref == nil || p.ref.Scheme != SchemeEnv {
				continue
			}
			v, ok := lookup(p.ref.Name)
			if p.ref.HasDefault && (!ok || v == "") {
				walk(p.def)
			} else if !ok {
				out = append(out, p.ref.Name)
			}
		}
	}
	walk(parts)
	return out
}
