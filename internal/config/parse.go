package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/secret"
)

// parser walks a decoded document, collecting every problem.
type parser struct {
	file     string
	strict   bool
	lookup   func(string) (string, bool)
	problems []Problem
	warnings []string
	// serversKey is the key of the server object: "mcpServers", or a
	// client's own (see foreign).
	serversKey string
	// paths maps paths of a client's file read by foreign to the fields
	// they come from, where those differ.
	paths map[string]string
	// clientMetadataURL is the top-level oauth.clientMetadataUrl: the
	// default of every remote server's.
	clientMetadataURL string
}

func (p *parser) errorf(at, format string, args ...any) {
	at = p.mapPath(at)
	p.problems = append(p.problems, Problem{File: p.file, Path: at, Message: fmt.Sprintf(format, args...)})
}

// warnf records a warning, or an error when strict.
func (p *parser) warnf(at, format string, args ...any) {
	if p.strict {
		p.errorf(at, format, args...)
		return
	}
	p.warnings = append(p.warnings, Problem{File: p.file, Path: p.mapPath(at), Message: fmt.Sprintf(format, args...)}.String())
}

// join appends an object key to a JSON path: a.b for plain keys, a["b c"]
// for keys with other characters (server names may contain dots).
func join(base, key string) string {
	if !plainKey(key) {
		return base + "[" + strconv.Quote(key) + "]"
	}
	if base == "" {
		return key
	}
	return base + "." + key
}

func index(base string, i int) string { return base + "[" + strconv.Itoa(i) + "]" }

func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if !isNameRune(r) || r == '.' {
			return false
		}
	}
	return true
}

func isNameRune(r rune) bool {
	return r == '_' || r == '-' || r == '.' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
}

// validName reports whether s is a valid server name or prefix: non-empty,
// letters, digits, '_', '.' and '-' only, and not "." or ".." (names
// become URL path segments, where those two mean another path, and
// tool-name prefixes).
func validName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !isNameRune(r) {
			return false
		}
	}
	return true
}

func pathMatch(pattern string) (bool, error) { return path.Match(pattern, "") }

// fields calls fn for each key of an object, last occurrence winning, and
// warns about duplicates.
func (p *parser) fields(n *node, at string, fn func(key string, v *node, at string)) {
	last := make(map[string]int, len(n.keys))
	for i, k := range n.keys {
		if _, dup := last[k]; dup {
			p.warnf(join(at, k), "defined more than once; the last one is used")
		}
		last[k] = i
	}
	for i, k := range n.keys {
		if last[k] == i {
			fn(k, n.vals[i], join(at, k))
		}
	}
}

// object walks an object whose keys fn handles (returning false for keys it
// does not know, which are reported as unknown). null is absent.
func (p *parser) object(n *node, at string, known []string, fn func(key string, v *node, at string) bool) {
	if n.kind == kindNull {
		return
	}
	if n.kind != kindObject {
		p.errorf(at, "must be an object, not %s", n.kind)
		return
	}
	p.fields(n, at, func(key string, v *node, fat string) {
		if !fn(key, v, fat) {
			p.unknown(fat, key, known)
		}
	})
}

func (p *parser) unknown(at, key string, known []string) {
	msg := "unknown field"
	if !p.strict {
		msg += ", ignored"
	}
	if s := suggest(key, known); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	p.warnf(at, "%s", msg)
}

// suggest returns the known name closest to key, if it is close.
func suggest(key string, known []string) string {
	best, bestD := "", 3
	lk := strings.ToLower(key)
	for _, k := range known {
		d := editDistance(lk, strings.ToLower(k))
		if d < bestD && d*3 <= len(k)+1 {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (p *parser) str(v *node, at string) (string, bool) {
	switch v.kind {
	case kindNull:
		return "", false
	case kindString:
		return v.str, true
	case kindNumber:
		p.errorf(at, "must be a string, not a number (write \"%s\")", v.num)
	case kindBool:
		p.errorf(at, "must be a string, not a boolean (write \"%t\")", v.b)
	default:
		p.errorf(at, "must be a string, not %s", v.kind)
	}
	return "", false
}

// strings parses an array of strings; ok is false when absent or invalid.
func (p *parser) strings(v *node, at string) ([]string, bool) {
	switch v.kind {
	case kindNull:
		return nil, false
	case kindArray:
	case kindString:
		p.errorf(at, "must be an array of strings, not a string (write [%s])", strconv.Quote(v.str))
		return nil, false
	default:
		p.errorf(at, "must be an array of strings, not %s", v.kind)
		return nil, false
	}
	out := make([]string, 0, len(v.vals))
	ok := true
	for i, e := range v.vals {
		if e.kind == kindNull {
			p.errorf(index(at, i), "must be a string, not null")
			ok = false
			continue
		}
		s, good := p.str(e, index(at, i))
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

// stringMap parses an object of strings (env, headers) into sorted keys
// and values; null values are errors.
func (p *parser) stringMap(v *node, at string, checkKey func(key, at string) bool) (keys []string, m map[string]string) {
	m = map[string]string{}
	p.object(v, at, nil, func(key string, v *node, kat string) bool {
		if !checkKey(key, kat) {
			return true
		}
		if v.kind == kindNull {
			p.errorf(kat, "must be a string, not null")
			return true
		}
		if s, ok := p.str(v, kat); ok {
			m[key] = s
		}
		return true
	})
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, m
}

// expand expands ${VAR} references in s found at path at. Unset variables
// are errors, or warnings when soft (a disabled server).
func (p *parser) expand(s, at string, soft bool) (string, bool) {
	e, err := expand(s, p.lookup)
	if err != nil {
		p.errorf(at, "%v", err)
		return s, false
	}
	for _, name := range e.missing {
		msg := fmt.Sprintf("environment variable %s is not set (use ${%s:-default} for a fallback)", name, name)
		if soft {
			p.warnf(at, "%s; the server is disabled", msg)
		} else {
			p.errorf(at, "%s", msg)
		}
	}
	return e.value, len(e.missing) == 0
}

// reference checks the secret references of s, a value resolved when
// its server starts (env, args, headers, oauth secrets), at path at, and
// returns s as it is. An environment variable it needs that is unset now
// is a warning: the server fails to start unless it is set by then.
func (p *parser) reference(s, at string, disabled bool) string {
	if err := secret.Check(s); err != nil {
		p.errorf(at, "%v", err)
		return s
	}
	for _, name := range secret.Unset(s, p.lookup) {
		msg := fmt.Sprintf("environment variable %s is not set: the server fails to start unless it is set then (use ${%s:-default} for a fallback)", name, name)
		if disabled {
			msg += "; the server is disabled"
		}
		p.warnf(at, "%s", msg)
	}
	return s
}

var topLevelNames = []string{"listen", "stateDir", "pageSize", "maxSessions", "holdTimeout", "oauth", "auth", "policy", "audit", "rateLimits", "replicas", "defaults", "mcpServers"}

// serverOnlyNames are server fields that are not settings.
var serverOnlyNames = []string{"command", "args", "env", "cwd", "url", "headers", "type", "transport", "disabled", "oauth"}

func (p *parser) config(root *node) *Config {
	cfg := &Config{Listen: DefaultListen, MaxSessions: DefaultMaxSessions, HoldTimeout: DefaultHoldTimeout}
	base := builtinSettings().overlay(p.envSettings())
	if root.kind != kindObject {
		p.errorf("", "the configuration must be a JSON object, not %s", root.kind)
		return cfg
	}
	// defaults apply to every server wherever they appear in the file.
	for i := len(root.keys) - 1; i >= 0; i-- {
		if root.keys[i] == "defaults" {
			base = base.overlay(p.defaults(root.vals[i], "defaults"))
			break
		}
	}
	// so does the default oauth.clientMetadataUrl.
	for i := len(root.keys) - 1; i >= 0; i-- {
		if root.keys[i] == "oauth" {
			p.topOAuth(root.vals[i], "oauth")
			break
		}
	}
	cfg.OAuthClientMetadataURL = p.clientMetadataURL
	sawServers := false
	p.fields(root, "", func(key string, v *node, at string) {
		switch key {
		case "defaults", "oauth": // done above
		case "$schema":
		case "listen":
			if s, ok := p.str(v, at); ok {
				if err := checkListen(s); err != nil {
					p.errorf(at, "%q is not a listen address: %v", s, err)
				} else {
					cfg.Listen = s
				}
			}
		case "stateDir":
			if s, ok := p.str(v, at); ok {
				cfg.StateDir, _ = p.expand(s, at, false)
			}
		case "pageSize":
			if n := p.integer(v, at); n != nil {
				if *n < 0 {
					p.errorf(at, "%d is negative: use 0 for whole lists in one page", *n)
				} else {
					cfg.PageSize = *n
				}
			}
		case "maxSessions":
			if n := p.integer(v, at); n != nil {
				if *n < 1 {
					p.errorf(at, "%d is not a positive number of sessions", *n)
				} else {
					cfg.MaxSessions = *n
				}
			}
		case "auth":
			cfg.Auth = p.auth(v, at)
		case "policy":
			cfg.Policy = p.policy(v, at)
		case "audit":
			cfg.Audit = p.audit(v, at)
		case "rateLimits":
			cfg.RateLimits = p.rateLimits(v, at)
		case "replicas":
			cfg.Replicas = p.replicas(v, at)
		case "holdTimeout":
			if d := p.duration(v, at); d != nil {
				if *d <= 0 {
					p.errorf(at, "%v is not a positive duration: a held call needs a bound", *d)
				} else {
					cfg.HoldTimeout = *d
				}
			}
		case p.serversKey:
			sawServers = true
			p.object(v, at, nil, func(name string, v *node, at string) bool {
				if srv := p.server(name, v, at, base); srv != nil {
					cfg.Servers = append(cfg.Servers, srv)
				}
				return true
			})
		default:
			p.unknown(at, key, topLevelNames)
		}
	})
	if len(cfg.Servers) == 0 && len(p.problems) == 0 {
		if sawServers {
			p.warnf(p.serversKey, "no servers configured")
		} else {
			p.warnf("", "no \"mcpServers\" object: no servers configured")
		}
	}
	slices.SortFunc(cfg.Servers, func(a, b *Server) int { return strings.Compare(a.Name, b.Name) })
	p.checkTeam(cfg)
	p.checkReplicas(cfg)
	return cfg
}

func checkListen(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want host:port, e.g. %q", DefaultListen)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// envSettings reads the environment overrides of the built-in defaults.
func (p *parser) envSettings() settings {
	var s settings
	read := func(name string) *time.Duration {
		v, ok := p.lookup(name)
		v = strings.TrimSpace(v)
		if !ok || v == "" {
			return nil
		}
		var d time.Duration
		if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) {
			if math.Abs(f) > float64(math.MaxInt64)/float64(time.Second) {
				p.problems = append(p.problems, Problem{File: "environment", Path: name,
					Message: fmt.Sprintf("%q seconds is out of range", v)})
				return nil
			}
			d = time.Duration(f * float64(time.Second))
		} else if d, err = time.ParseDuration(v); err != nil {
			p.problems = append(p.problems, Problem{File: "environment", Path: name,
				Message: fmt.Sprintf("%q is not a number of seconds", v)})
			return nil
		}
		if d < 0 {
			p.problems = append(p.problems, Problem{File: "environment", Path: name,
				Message: fmt.Sprintf("%q is negative; use 0 or more seconds (0 disables)", v)})
			return nil
		}
		return &d
	}
	s.idleTimeout = read(EnvIdleTimeout)
	s.startGrace = read(EnvStartGrace)
	return s
}

func (p *parser) defaults(v *node, at string) settings {
	var s settings
	p.object(v, at, settingNames, func(key string, v *node, at string) bool {
		if slices.Contains(serverOnlyNames, key) {
			p.errorf(at, "%q belongs to a server, not to defaults", key)
			return true
		}
		return p.settingsField(&s, key, v, at)
	})
	return s
}

// transportNames maps what clients write in "type"/"transport" (lower
// case, without '-' and '_') to a transport.
var transportNames = map[string]string{
	"stdio":          TransportStdio,
	"http":           TransportStreamableHTTP,
	"streamablehttp": TransportStreamableHTTP,
	"sse":            TransportSSE,
}

func (p *parser) transport(v *node, at string) string {
	s, ok := p.str(v, at)
	if !ok {
		return ""
	}
	norm := strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s))
	t, ok := transportNames[norm]
	if !ok {
		p.errorf(at, "%q is not a transport (valid: \"stdio\", \"http\", \"streamable-http\", \"sse\")", s)
	}
	return t
}

var serverNames = append(slices.Clone(serverOnlyNames), settingNames...)

// serverKeys are one server's own keys as written, each with the path
// it was found at ("" when absent), before they are resolved.
type serverKeys struct {
	own                            settings
	command, cwd, rawURL           *string
	args                           []string
	envKeys, headerKeys            []string
	env, headers                   map[string]string
	disabled                       bool
	typ, transport                 string
	typAt, transportAt, argsAt     string
	envAt, headersAt, cwdAt, urlAt string
	commandAt                      string
	limitsAt                       []string
	oauth                          *node
	oauthAt                        string
}

// server parses and resolves one server; nil when it is too broken to
// describe.
func (p *parser) server(name string, v *node, at string, base settings) *Server {
	if !validName(name) {
		if name == "" {
			p.errorf(at, "server name is empty")
		} else {
			p.errorf(at, "%q is not a valid server name: use only letters, digits, '_', '.' and '-' (and not \".\" or \"..\" alone)", name)
		}
	}
	if v.kind != kindObject {
		p.errorf(at, "must be an object, not %s", v.kind)
		return nil
	}
	errsBefore := len(p.problems)
	f := p.serverFields(v, at)
	srv := &Server{Name: name, Disabled: f.disabled}
	base.overlay(f.own).apply(srv)
	p.serverKind(srv, &f, at, errsBefore)
	switch srv.Kind {
	case KindStdio:
		p.localServer(srv, &f)
	case KindHTTP:
		p.remoteServer(srv, &f)
	}
	return srv
}

// serverFields reads a server object's keys: its own (command, url, …)
// into f, the settings it may override into f.own.
func (p *parser) serverFields(v *node, at string) (f serverKeys) {
	optStr := func(v *node, at string) *string {
		if s, ok := p.str(v, at); ok {
			return &s
		}
		return nil
	}
	p.object(v, at, serverNames, func(key string, v *node, at string) bool {
		switch key {
		case "command":
			f.command, f.commandAt = optStr(v, at), at
		case "args":
			f.args, _ = p.strings(v, at)
			f.argsAt = at
		case "env":
			f.envKeys, f.env = p.stringMap(v, at, func(k, at string) bool {
				if k == "" || strings.ContainsAny(k, "=\x00") {
					p.errorf(at, "%q is not a valid environment variable name", k)
					return false
				}
				return true
			})
			f.envAt = at
		case "cwd":
			f.cwd, f.cwdAt = optStr(v, at), at
		case "url":
			f.rawURL, f.urlAt = optStr(v, at), at
		case "headers":
			f.headerKeys, f.headers = p.stringMap(v, at, func(k, at string) bool {
				if !validHeaderName(k) {
					p.errorf(at, "%q is not a valid HTTP header name", k)
					return false
				}
				return true
			})
			f.headersAt = at
		case "type":
			f.typ, f.typAt = p.transport(v, at), at
		case "transport":
			f.transport, f.transportAt = p.transport(v, at), at
		case "disabled":
			if b := p.boolean(v, at); b != nil {
				f.disabled = *b
			}
		case "oauth":
			f.oauth, f.oauthAt = v, at
		default:
			if key == "limits" || key == "maxIdleMemory" {
				f.limitsAt = append(f.limitsAt, at)
			}
			return p.settingsField(&f.own, key, v, at)
		}
		return true
	})
	return f
}

// serverKind sets srv's kind and transport from command or url and the
// transport declared (type or transport), and says what contradicts.
func (p *parser) serverKind(srv *Server, f *serverKeys, at string, errsBefore int) {
	declared, declaredAt := f.typ, f.typAt
	if f.transport != "" {
		if f.typ != "" && f.typ != f.transport {
			p.errorf(f.transportAt, "says %q but type says %q", f.transport, f.typ)
		}
		declared, declaredAt = f.transport, f.transportAt
	}
	switch {
	case f.command != nil && f.rawURL != nil:
		p.errorf(at, "both command and url are set; a server is either local (command) or remote (url)")
	case f.command == nil && f.rawURL == nil:
		if !p.hasErrorAt(errsBefore, f.commandAt, f.urlAt) {
			p.errorf(at, "missing \"command\" (to run a local server) or \"url\" (for a remote one)")
		}
	case f.command != nil:
		srv.Kind, srv.Transport = KindStdio, TransportStdio
		if declared != "" && declared != TransportStdio {
			p.errorf(declaredAt, "%q needs url, but this server has command", declared)
		}
	default:
		srv.Kind, srv.Transport = KindHTTP, TransportStreamableHTTP
		if declared == TransportSSE {
			srv.Transport = TransportSSE
		} else if declared == TransportStdio {
			p.errorf(declaredAt, "\"stdio\" needs command, but this server has url")
		}
	}
}

// localServer resolves a local server's command, args, env and cwd
// (variables expanded; a disabled server's unset ones are no error).
func (p *parser) localServer(srv *Server, f *serverKeys) {
	soft := f.disabled
	for _, at := range []string{f.headersAt, f.oauthAt} {
		if at != "" {
			p.warnf(at, "ignored for a local server (command)")
		}
	}
	cmd, ok := p.expand(*f.command, f.commandAt, soft)
	srv.Command = cmd
	if strings.TrimSpace(*f.command) == "" {
		p.errorf(f.commandAt, "is empty")
	} else if ok && strings.TrimSpace(cmd) == "" {
		p.errorf(f.commandAt, "is empty after expansion")
	}
	args := f.args
	if len(args) == 0 {
		args = nil // "args": [] is no args, as none is (a reload compares them)
	}
	// Args and env values keep their references, resolved at each
	// start (secret.Resolve); those of the identity an instance runs for
	// only in a per-identity server's.
	forIdentity := func(v, at string) {
		if srv.Sharing != SharingPerIdentity && secret.UsesIdentity(v) {
			p.errorf(at, "%s", identityOnly)
		}
	}
	for i, a := range args {
		p.reference(a, index(f.argsAt, i), soft)
		forIdentity(a, index(f.argsAt, i))
	}
	srv.Args = args
	if cmd != *f.command {
		srv.raw = &rawLaunch{command: *f.command, args: args}
	}
	if len(f.env) > 0 {
		srv.Env = make(map[string]string, len(f.env))
		for _, k := range f.envKeys {
			srv.Env[k] = p.reference(f.env[k], join(f.envAt, k), soft)
			forIdentity(f.env[k], join(f.envAt, k))
		}
	}
	if f.cwd != nil {
		srv.Cwd, _ = p.expand(*f.cwd, f.cwdAt, soft)
	}
}

// identityOnly is the error of a reference to the identity in a server
// that runs for none.
const identityOnly = `refers to the identity an instance runs for (${identity.sub}, ${identity.key}, ${keyring:NAME@identity}): only a server with "sharing": "per-identity" has one`

// remoteServer resolves a remote server's url and headers; what only a
// local server uses is warned of as ignored.
func (p *parser) remoteServer(srv *Server, f *serverKeys) {
	soft := f.disabled
	for _, at := range append([]string{f.argsAt, f.envAt, f.cwdAt}, f.limitsAt...) {
		if at != "" {
			p.warnf(at, "ignored for a remote server (url)")
		}
	}
	srv.Limits = nil // mcpvisor runs no process of it
	u, ok := p.expand(*f.rawURL, f.urlAt, soft)
	srv.URL = u
	if u != *f.rawURL {
		srv.raw = &rawLaunch{url: *f.rawURL}
	}
	if ok {
		if err := checkURL(u); err != nil {
			p.errorf(f.urlAt, "%v", err)
		}
	}
	authorization := false
	if len(f.headers) > 0 {
		srv.Headers = make(map[string]string, len(f.headers))
		for _, k := range f.headerKeys {
			hv := p.reference(f.headers[k], join(f.headersAt, k), soft)
			if srv.Sharing != SharingPerIdentity && secret.UsesIdentity(hv) {
				p.errorf(join(f.headersAt, k), "%s", identityOnly)
			}
			if strings.ContainsAny(hv, "\r\n\x00") {
				p.errorf(join(f.headersAt, k), "contains a line break or NUL")
			}
			srv.Headers[k] = hv
			authorization = authorization || strings.EqualFold(k, "Authorization")
		}
	}
	switch {
	case authorization && f.oauth != nil && f.oauth.kind != kindNull:
		p.warnf(f.oauthAt, "ignored: the server has an Authorization header, and a server with one never does OAuth")
	case authorization:
	case f.oauth != nil:
		srv.OAuth = p.oauth(f.oauth, f.oauthAt, soft)
	case p.clientMetadataURL != "":
		srv.OAuth = &OAuthConfig{Grant: GrantAuthorizationCode, ClientMetadataURL: p.clientMetadataURL}
	}
}

// hasErrorAt reports whether an error was recorded at one of paths since
// problem number since.
func (p *parser) hasErrorAt(since int, paths ...string) bool {
	for _, pr := range p.problems[since:] {
		if pr.Path != "" && slices.Contains(paths, pr.Path) {
			return true
		}
	}
	return false
}

// checkURL accepts absolute http and https URLs. Its messages never
// include the URL, which may hold a secret.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("must be an http:// or https:// URL")
	}
	if u.Host == "" {
		return fmt.Errorf("has no host")
	}
	return nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}
