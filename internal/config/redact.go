package config

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/redact"
	"github.com/mcpvisor/mcpvisor/internal/secret"
)

// Redaction is what replaces a hidden value in Redacted's output
// (redact.Redaction).
const Redaction = redact.Redaction

// Redacted returns the server's command line (stdio) or URL (http) for
// display, with anything that looks like a secret replaced by Redaction
// (redact.Args, redact.Value): text that came from ${VAR} references is
// shown as the reference, not its value, also where a secret's value
// goes (--token ${GITHUB_TOKEN}); a secret flag's literal value, the
// credentials after "Bearer " or "Basic ", token-like strings and a URL's
// credentials are hidden.
//
// Env and header values are never part of it.
func (s *Server) Redacted() string {
	if s.Kind == KindHTTP {
		u := s.URL
		if s.raw != nil {
			u = s.raw.url
		}
		return redact.Value(u)
	}
	cmd, args := s.Command, s.Args
	if s.raw != nil {
		cmd, args = s.raw.command, s.raw.args
	}
	parts := []string{quoteArg(cmd)}
	for _, a := range redact.Args(args) {
		parts = append(parts, quoteArg(a))
	}
	return strings.Join(parts, " ")
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
//
// Env and header values hold secret references (${keyring:NAME}), not
// what they resolve to: whoever resolves them tells the server with
// NoteResolved, and RedactText hides those values too.
func (s *Server) RedactText(text string) string {
	for _, m := range []map[string]string{s.Env, s.Headers} {
		for _, v := range m {
			// A value with references is hidden once resolved (below);
			// its text, which names them, is no secret.
			if len(v) >= 6 && !hasReferences(v) {
				text = strings.ReplaceAll(text, v, "[redacted]")
			}
		}
	}
	resolvedMu.RLock()
	vals := s.resolved
	resolvedMu.RUnlock()
	for _, v := range vals {
		text = strings.ReplaceAll(text, v, "[redacted]")
	}
	return text
}

// hasReferences reports whether v refers to a secret (or a variable).
func hasReferences(v string) bool {
	if !strings.Contains(v, "${") {
		return false
	}
	refs, err := secret.Find(v)
	return err == nil && len(refs) > 0
}

// resolvedMu guards every Server's resolved (a Server may be copied; the
// lock is not its own).
var resolvedMu sync.RWMutex

// maxResolved bounds the values a Server remembers (a secret changed
// many times over a long run keeps only its latest values).
const maxResolved = 64

// NoteResolved records values that references of s resolved to (for a
// start, a connection), for RedactText to hide them: what a server prints
// of its secrets, or an error quotes, goes no further. Values shorter than
// 6 bytes are not recorded (hiding them would hide ordinary text). They
// are recorded by the configs that replaced s too (CarryResolved): a
// launch of s may still be resolving when a reload replaces it.
func (s *Server) NoteResolved(values ...string) {
	resolvedMu.Lock()
	defer resolvedMu.Unlock()
	for t, hops := s, 0; t != nil && hops <= maxResolved; t, hops = t.successor, hops+1 {
		t.noteLocked(values)
	}
}

func (s *Server) noteLocked(values []string) {
	for _, v := range values {
		if len(v) < 6 || slices.Contains(s.resolved, v) {
			continue
		}
		s.resolved = append(s.resolved, v)
		if n := len(s.resolved); n > maxResolved {
			s.resolved = slices.Clone(s.resolved[n-maxResolved:])
		}
	}
}

// CarryResolved makes s, the config that replaces old for the same
// server (a reload), hide what old's references resolved to and will
// resolve to: the instances launched with old keep running, and what
// they print or their errors quote is redacted with the config then in
// force.
func (s *Server) CarryResolved(old *Server) {
	if old == nil || old == s {
		return
	}
	resolvedMu.Lock()
	defer resolvedMu.Unlock()
	s.noteLocked(old.resolved)
	old.successor = s
}

// References lists the secret references in s's env, args, headers and
// oauth secrets, for display (inspect): "env.TOKEN: ${keyring:gh-token}",
// in that order of fields, keys sorted. Only the references of a value
// are listed, never its literal text, which may be a secret.
func (s *Server) References() []string {
	var out []string
	add := func(field, v string) {
		refs, err := secret.Find(v)
		if err != nil || len(refs) == 0 {
			return
		}
		texts := make([]string, len(refs))
		for i, r := range refs {
			texts[i] = r.Text
		}
		out = append(out, field+": "+strings.Join(texts, " "))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		add("env."+k, s.Env[k])
	}
	for i, a := range s.Args {
		add("args["+strconv.Itoa(i)+"]", a)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
		add("headers."+k, s.Headers[k])
	}
	if s.OAuth != nil {
		add("oauth.clientSecret", s.OAuth.ClientSecret)
		add("oauth.privateKey", s.OAuth.PrivateKey)
	}
	return out
}
