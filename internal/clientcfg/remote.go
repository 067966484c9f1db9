package clientcfg

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpvisor/mcpvisor/internal/redact"
)

// Launch is a package launcher's command line understood: the packages
// named with --package, the launcher's first positional argument (the
// package run, or with Packages the bin run) and the arguments after it.
type Launch struct {
	Packages []string
	Target   string
	Args     []string
}

// LaunchParser reads a package launcher's command line (npx, npm exec,
// pnpm dlx, pnpx, bunx, yarn dlx) as internal/launch.Parse does: nil and
// no error when command (a base name: "npx") is no launcher, an error
// when it is one in a form not understood. It is given, not imported:
// internal/launch imports internal/config, which imports this package.
type LaunchParser func(command string, args []string) (*Launch, error)

// mcpRemotePackage is the package of mcp-remote, the stdio proxy to a
// remote server (github.com/geelen/mcp-remote).
const mcpRemotePackage = "mcp-remote"

// TakeOverMCPRemote turns the entries that run mcp-remote through a
// package launcher (npx [-y] mcp-remote[@version] URL [--header "K: V"]…
// [--transport …]) into the remote server they reach: mcpvisor connects
// to it itself, and no Node process runs for it. The entry's Notes say
// so; an entry that cannot be taken over so (a flag mcpvisor cannot
// honour, a malformed argument) stays a local server, its Notes saying
// why. parse reads the launchers (see LaunchParser).
func (f *File) TakeOverMCPRemote(parse LaunchParser) {
	for _, s := range f.Servers {
		if s.Blocked != "" || s.Remote() || s.Command == "" || s.IsConnect() {
			continue
		}
		l, err := parse(launcherName(s.Command), s.Args)
		if err != nil {
			if slices.ContainsFunc(s.Args, func(a string) bool { return strings.Contains(a, mcpRemotePackage) }) {
				s.note(s.FieldPath("args"), "runs mcp-remote, but not taken over as a remote server: "+err.Error())
			}
			continue
		}
		if l == nil {
			continue
		}
		spec := l.Target
		if len(l.Packages) > 0 {
			if l.Target != mcpRemotePackage {
				continue
			}
			spec = l.Packages[0]
		}
		if packageName(spec) != mcpRemotePackage {
			continue
		}
		r, why := readMCPRemote(l.Args, s.Env)
		if why != "" {
			s.note(s.FieldPath("args"), "runs mcp-remote, but stays a local server: "+why)
			continue
		}
		orig := *s
		orig.Notes = nil
		s.launched = &orig
		args := s.FieldPath("args")
		s.Command, s.Args, s.Env, s.Cwd = "", nil, nil, ""
		s.URL, s.Headers, s.Transport = r.url, r.headers, r.transport
		s.setField("url", args)
		s.setField("headers", args)
		if r.oauth != nil {
			s.OAuth = r.oauth
		}
		if len(r.deny) > 0 {
			if s.Tools == nil {
				s.Tools = &Tools{}
			}
			s.Tools.Deny = append(s.Tools.Deny, r.deny...)
		}
		// mcp-remote signs in when the server asks; with an
		// Authorization header, mcpvisor never does
		s.Login = !s.authorized()
		s.note(s.At, "taken over as a remote server (saves one Node process)")
		for _, n := range r.notes {
			s.note(args, n)
		}
	}
}

// launcherName is the base name of a command, as launchers are told
// apart: C:\Program Files\nodejs\npx.cmd is npx.
func launcherName(command string) string {
	base := filepath.Base(strings.ReplaceAll(command, `\`, "/"))
	lower := strings.ToLower(base)
	for _, ext := range []string{".cmd", ".exe", ".ps1", ".bat"} {
		if strings.HasSuffix(lower, ext) {
			return base[:len(base)-len(ext)]
		}
	}
	return base
}

// packageName is a package spec's name: mcp-remote@0.1.29 is
// mcp-remote.
func packageName(spec string) string {
	if strings.HasPrefix(spec, "@") {
		if i := strings.Index(spec[1:], "@"); i >= 0 {
			return spec[:i+1]
		}
		return spec
	}
	name, _, _ := strings.Cut(spec, "@")
	return name
}

// mcpRemote is what an mcp-remote command line says of the server.
type mcpRemote struct {
	url, transport string
	headers        []KV
	oauth          *OAuth
	deny           []string
	notes          []string
}

// headerNameRE is mcp-remote's header name.
var headerNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// readMCPRemote reads mcp-remote's arguments (args: what follows the
// package; mcpvisor's syntax) and env, the environment it was given, or
// says why the server cannot be taken over.
func readMCPRemote(args []string, env []KV) (r *mcpRemote, why string) {
	r = &mcpRemote{}
	used := map[string]bool{}
	positional := 0
	static := false
	port := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		flag, val, hasVal := strings.Cut(a, "=")
		if !strings.HasPrefix(a, "-") || a == "-" {
			flag, hasVal = "", false
		}
		value := func() (string, bool) {
			if hasVal {
				return val, true
			}
			if i+1 >= len(args) {
				return "", false
			}
			i++
			return args[i], true
		}
		switch flag {
		case "":
			positional++
			switch {
			case positional == 1:
				r.url = a
			case positional == 2 && isPort(a):
				port = a
			default:
				return nil, fmt.Sprintf("%q is neither a flag, the URL nor the callback port", redact.Value(a))
			}
		case "--header":
			h, ok := value()
			if !ok {
				return nil, "--header has no value"
			}
			name, v, ok := strings.Cut(h, ":")
			name = strings.TrimSpace(name)
			if !ok || !headerNameRE.MatchString(name) {
				return nil, "a --header is not \"Name: value\""
			}
			r.headers = append(r.headers, KV{name, substitute(strings.TrimLeft(v, " \t"), env, used)})
		case "--transport":
			t, _ := value()
			switch t {
			case "http-first", "http-only":
				r.transport = TransportHTTP
				if t == "http-first" {
					r.notes = append(r.notes, "--transport http-first: mcpvisor connects with Streamable HTTP only (no fallback to SSE)")
				}
			case "sse-first", "sse-only":
				r.transport = TransportSSE
				if t == "sse-first" {
					r.notes = append(r.notes, "--transport sse-first: mcpvisor connects with SSE only (no fallback to Streamable HTTP)")
				}
			default:
				return nil, fmt.Sprintf("--transport %q is not one of http-first, sse-first, http-only, sse-only", t)
			}
		case "--allow-http", "--debug", "--silent":
			if hasVal {
				return nil, a + " takes no value"
			}
		case "--host":
			if _, ok := value(); !ok {
				return nil, "--host has no value"
			}
			port += " host"
		case "--auth-timeout":
			if _, ok := value(); !ok {
				return nil, "--auth-timeout has no value"
			}
			r.notes = append(r.notes, "--auth-timeout not carried over: mcpvisor login has its own --timeout")
		case "--ignore-tool":
			p, ok := value()
			if !ok {
				return nil, "--ignore-tool has no value"
			}
			// mcp-remote's pattern: * is any text, the rest literal.
			r.deny = append(r.deny, strings.ReplaceAll(toolPattern(p), `\*`, "*"))
		case "--static-oauth-client-info":
			v, ok := value()
			if !ok {
				return nil, "--static-oauth-client-info has no value"
			}
			if why := r.clientInfo(v); why != "" {
				return nil, why
			}
			static = true
		case "--static-oauth-client-metadata":
			v, ok := value()
			if !ok {
				return nil, "--static-oauth-client-metadata has no value"
			}
			if why := r.clientMetadata(v); why != "" {
				return nil, why
			}
		case "--resource":
			return nil, "--resource: mcpvisor has no resource override (it asks for the resource the server's metadata names)"
		default:
			return nil, fmt.Sprintf("%s is a flag mcpvisor does not know: it cannot tell what it changes", flag)
		}
	}
	switch lower := strings.ToLower(r.url); {
	case r.url == "":
		return nil, "no server URL"
	case !strings.HasPrefix(lower, "https://") && !strings.HasPrefix(lower, "http://"):
		return nil, fmt.Sprintf("the server URL %q is not http(s)", redact.Value(r.url))
	}
	if port != "" {
		if static {
			// a pre-registered client's redirect URI has that port
			return nil, "a pre-registered client (--static-oauth-client-info) with a fixed callback port or host: mcpvisor login listens on a port of its own, which the authorization server would refuse"
		}
		r.notes = append(r.notes, "the callback port (or --host) not carried over: mcpvisor login listens on a loopback port of its own")
	}
	for _, kv := range env {
		if !used[kv.Key] {
			return nil, fmt.Sprintf("env %s changes what mcp-remote does, which mcpvisor cannot carry", kv.Key)
		}
	}
	if r.transport == "" {
		r.transport = TransportHTTP
		if strings.HasSuffix(strings.TrimRight(strings.SplitN(r.url, "?", 2)[0], "/"), "/sse") {
			r.transport = TransportSSE
		}
	}
	return r, ""
}

func isPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n < 65536
}

// clientInfo reads --static-oauth-client-info's JSON: a pre-registered
// client.
func (r *mcpRemote) clientInfo(v string) string {
	if strings.HasPrefix(v, "@") {
		return "--static-oauth-client-info reads a file, which mcpvisor does not: put its client_id in oauth.clientId of mcpvisor's config by hand"
	}
	var info map[string]any
	if err := json.Unmarshal([]byte(v), &info); err != nil {
		return "--static-oauth-client-info is not a JSON object"
	}
	if r.oauth == nil {
		r.oauth = &OAuth{}
	}
	for _, k := range sortedKeys(info) {
		s, ok := info[k].(string)
		switch {
		case k == "client_id" && ok:
			r.oauth.ClientID = s
		case k == "client_secret" && ok:
			r.oauth.ClientSecret = s
		default:
			return fmt.Sprintf("--static-oauth-client-info's %q has no counterpart in mcpvisor's config", k)
		}
	}
	if r.oauth.ClientID == "" {
		return "--static-oauth-client-info has no client_id"
	}
	return ""
}

// clientMetadata reads --static-oauth-client-metadata's JSON: the
// metadata of the client registered; only its scope has a counterpart.
func (r *mcpRemote) clientMetadata(v string) string {
	if strings.HasPrefix(v, "@") {
		return "--static-oauth-client-metadata reads a file, which mcpvisor does not"
	}
	var md map[string]any
	if err := json.Unmarshal([]byte(v), &md); err != nil {
		return "--static-oauth-client-metadata is not a JSON object"
	}
	for _, k := range sortedKeys(md) {
		s, ok := md[k].(string)
		if k != "scope" || !ok {
			return fmt.Sprintf("--static-oauth-client-metadata's %q has no counterpart in mcpvisor's config", k)
		}
		if r.oauth == nil {
			r.oauth = &OAuth{}
		}
		r.oauth.Scopes = strings.Fields(s)
	}
	return ""
}

// substitute does mcp-remote's expansion of a header value: ${NAME} is
// the variable of its environment. The entry's env gave it NAME: the
// header gets env's value as written (a literal stays a literal, a
// reference a reference); else NAME came from the client's environment,
// and the header references ${NAME} of mcpvisor's. v and the result are
// in mcpvisor's syntax; the names substituted are marked in used.
func substitute(v string, env []KV, used map[string]bool) string {
	raw := unescape(v) // what mcp-remote saw, ${NAME} left or written
	var b strings.Builder
	for {
		i := strings.Index(raw, "${")
		j := strings.IndexByte(raw[max(i, 0):], '}')
		if i < 0 || j < 0 {
			b.WriteString(strings.ReplaceAll(raw, "$", "$$"))
			return b.String()
		}
		b.WriteString(strings.ReplaceAll(raw[:i], "$", "$$"))
		inner := raw[i+2 : i+j]
		name, _, _ := strings.Cut(inner, ":-")
		if k := slices.IndexFunc(env, func(kv KV) bool { return kv.Key == name }); k >= 0 {
			b.WriteString(env[k].Value)
			used[name] = true
		} else {
			b.WriteString("${" + inner + "}")
		}
		raw = raw[i+j+1:]
	}
}

// unescape turns a literal of mcpvisor's syntax into its text: $$ is $.
func unescape(v string) string { return strings.ReplaceAll(v, "$$", "$") }

// authorized reports whether the entry sends an Authorization header:
// mcpvisor then never signs in to the server.
func (s *Server) authorized() bool {
	return slices.ContainsFunc(s.Headers, func(h KV) bool { return strings.EqualFold(h.Key, "Authorization") })
}

// signIn settles Login once an entry is read: a remote entry that sends
// an Authorization header is not signed in to, whatever else it says.
func (s *Server) signIn(at string) {
	if s.Login && s.Remote() && s.authorized() {
		s.Login = false
		s.note(at, "mcpvisor sends its Authorization header and does not sign in to it (the client's sign-in settings are kept in oauth)")
	}
}
