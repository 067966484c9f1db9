package clientcfg

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	pathpkg "path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/mcpvisor/mcpvisor/internal/jsonc"
	"github.com/mcpvisor/mcpvisor/internal/secret"
)

// KV is one environment variable or header, as written.
type KV struct{ Key, Value string }

// Note is something about one field of a file: At is its path (servers.x.envFile).
type Note struct {
	At  string
	Msg string
}

func (n Note) String() string {
	if n.At == "" {
		return n.Msg
	}
	return n.At + ": " + n.Msg
}

// Transports of a Server.
const (
	TransportStdio = "stdio"
	TransportHTTP  = "http" // Streamable HTTP
	TransportSSE   = "sse"
)

// Server is one server entry of a client's file in the common form.
// Strings are in mcpvisor's syntax: ${NAME} and ${NAME:-default} expand,
// $$ is a literal $ (a client that expands nothing has its $ doubled;
// VS Code's ${env:NAME} becomes ${NAME} and ${userHome} ${HOME}).
type Server struct {
	Name string
	// At is the entry's path in its file: servers.x, mcp_servers.x,
	// projects["/p"].mcpServers.x.
	At string
	// Transport is TransportStdio (Command set) or TransportHTTP or
	// TransportSSE (URL set).
	Transport string
	Command   string
	Args      []string
	Env       []KV
	Cwd       string
	URL       string
	Headers   []KV
	// OAuth is what the client's entry says of signing in to a remote
	// server (Claude Code's oauth, Codex's scopes), in mcpvisor's terms:
	// nil for nothing.
	OAuth *OAuth
	// Login is set when the client signed in to the server itself (an
	// oauth key, mcp-remote): mcpvisor now does, with mcpvisor login.
	Login bool
	// Notes are what the user is told of the entry when it is imported
	// or taken over: how it was carried over (mcp-remote taken over as a
	// remote server, an oauth key mapped) and what of it has no
	// counterpart.
	Notes    []Note
	Disabled bool
	// Tools is the client's filter of the server's tools (Codex's
	// enabled_tools and disabled_tools, the "tools" of mcpvisor's own
	// config), as mcpvisor's tools {allow, deny}: nil for none.
	Tools *Tools
	// RequestTimeout and InitTimeout are the client's timeouts for this
	// server as mcpvisor durations ("90s"): "" for none.
	RequestTimeout, InitTimeout string
	// ClientOnly lists the fields that keep the entry with the client:
	// they change what the server may do or see (a sandbox, an env file,
	// variables passed on from the client's environment, a sign-in, a
	// field mcpvisor does not know) and mcpvisor cannot carry them. Such
	// an entry is neither imported nor taken over.
	ClientOnly []Note
	// Unsupported lists the fields of the entry mcpvisor does not take,
	// each with its path: they are neither imported nor served.
	Unsupported []Note
	// Blocked says why mcpvisor cannot run the server at all (a value
	// only the client can fill in, an extension's server): "" when it
	// can.
	Blocked string
	// clientSide are the fields the client applies on its own side of
	// the launch (tool filters, timeouts): an entry install-client
	// writes per server keeps them.
	clientSide []rawField
	// fields maps a common field (command, args, env, cwd, url, headers)
	// to its path in the file when that is not At.field.
	fields map[string]string
	// launched is the entry as written when it ran a launcher of
	// mcp-remote (see File.TakeOverMCPRemote): the same server as it.
	launched *Server
}

// OAuth is a remote server's sign-in settings, as mcpvisor's config's
// oauth object holds them.
type OAuth struct {
	ClientID string
	// ClientSecret is in mcpvisor's syntax, as other values.
	ClientSecret string
	Scopes       []string
}

func (o *OAuth) entry() jsonc.Ordered {
	var e jsonc.Ordered
	if o == nil {
		return nil
	}
	if o.ClientID != "" {
		e = append(e, jsonc.Field{Key: "clientId", Value: o.ClientID})
	}
	if o.ClientSecret != "" {
		e = append(e, jsonc.Field{Key: "clientSecret", Value: o.ClientSecret})
	}
	if len(o.Scopes) > 0 {
		e = append(e, jsonc.Field{Key: "scopes", Value: o.Scopes})
	}
	return e
}

func (s *Server) note(at, msg string) { s.Notes = append(s.Notes, Note{At: at, Msg: msg}) }

// setHeader sets a header, replacing one of the same name (header names
// are case-insensitive).
func (s *Server) setHeader(k, v string) {
	for i := range s.Headers {
		if strings.EqualFold(s.Headers[i].Key, k) {
			s.Headers[i] = KV{k, v}
			return
		}
	}
	s.Headers = append(s.Headers, KV{k, v})
}

// FieldPath returns the path in the file of one of the common fields.
func (s *Server) FieldPath(field string) string {
	if p, ok := s.fields[field]; ok {
		return p
	}
	return join(s.At, field)
}

// Tools is a filter of a server's tools, in mcpvisor's terms: patterns
// (path.Match) of the server's own tool names.
type Tools struct {
	// Allow, when not nil, exposes only the tools it matches.
	Allow []string
	// Deny hides the tools it matches, after Allow.
	Deny []string
}

// String writes the filter as mcpvisor's config does.
func (t *Tools) String() string {
	if t == nil {
		return "none"
	}
	b, _ := jsonc.Encode(t.entry(), "", "")
	return b
}

func (t *Tools) entry() jsonc.Ordered {
	var o jsonc.Ordered
	if t.Allow != nil {
		o = append(o, jsonc.Field{Key: "allow", Value: t.Allow})
	}
	if len(t.Deny) > 0 {
		o = append(o, jsonc.Field{Key: "deny", Value: t.Deny})
	}
	return o
}

// SameTools reports whether two filters let the same tools through (as
// written: the same patterns in any order).
func SameTools(a, b *Tools) bool {
	norm := func(t *Tools) (allow, deny []string, all bool) {
		if t == nil {
			return nil, nil, true
		}
		allow, deny = slices.Clone(t.Allow), slices.Clone(t.Deny)
		slices.Sort(allow)
		slices.Sort(deny)
		return slices.Compact(allow), slices.Compact(deny), t.Allow == nil
	}
	aa, ad, aall := norm(a)
	ba, bd, ball := norm(b)
	return aall == ball && slices.Equal(aa, ba) && slices.Equal(ad, bd)
}

// toolPattern is a pattern that matches the tool name exactly.
func toolPattern(name string) string {
	var b strings.Builder
	for _, r := range name {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// rawField is a field of a client's entry kept as it was written: JSON
// for a JSON file, the decoded value for a TOML one.
type rawField struct {
	Key  string
	JSON json.RawMessage
	TOML any
}

// LeftToClient says why the entry stays with the client ("" when it
// need not): its ClientOnly fields, with their paths, or Blocked.
func (s *Server) LeftToClient() string {
	if s.Blocked != "" {
		return s.Blocked
	}
	var l []string
	for _, n := range s.ClientOnly {
		l = append(l, n.String())
	}
	return strings.Join(l, "; ")
}

func (s *Server) clientOnly(at, msg string) {
	s.ClientOnly = append(s.ClientOnly, Note{At: at, Msg: msg})
}

// Remote reports whether the server is reached by URL.
func (s *Server) Remote() bool { return s.URL != "" }

// File is a client configuration file read.
type File struct {
	Format  Format
	Servers []*Server
	// Problems are values of the wrong type, each naming its field; the
	// server they belong to is Blocked.
	Problems []Note
}

// Server returns the server named name, or nil.
func (f *File) Server(name string) *Server {
	for _, s := range f.Servers {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// varSyntax is how a client's strings reference variables.
type varSyntax uint8

const (
	varsNone   varSyntax = iota // no expansion: every $ is literal
	varsClaude                  // ${NAME}, ${NAME:-default}: mcpvisor's own
	varsVSCode                  // ${env:NAME}, ${userHome}, ${input:id}, ${workspaceFolder}, …
	varsMine                    // mcpvisor's config: its references, ${file:…} and ${keyring:…} too
)

// varsOf is the syntax of a format's files when the client is not known.
func varsOf(f Format) varSyntax {
	switch f {
	case FormatVSCode, FormatVSCodeSettings:
		return varsVSCode
	case FormatZed, FormatCodex:
		return varsNone
	}
	return varsClaude
}

// Read reads mcpvisor's own config (format FormatMCPServers), or a client
// file of another format (config's foreign files): mcpvisor's settings
// are known, its tools filters read, and its references (${file:…},
// ${keyring:…}) kept as references.
func Read(data []byte, f Format) (*File, error) {
	v := varsOf(f)
	if f == FormatMCPServers {
		v = varsMine
	}
	return read(data, f, v, "", "")
}

// ReadIn reads a file of format f whose client is unknown (a file named
// on the command line) that belongs to the project directory project (""
// for none): see Client.ReadIn. Being possibly a client's, its
// ${env:…}, ${file:…} and ${keyring:…} are text.
func ReadIn(data []byte, f Format, project string) (*File, error) {
	return read(data, f, varsOf(f), "", project)
}

// ReadIn reads one of the client's files in format f that belongs to the
// project directory project ("" for a user's file): clients run a
// project's servers in the project's directory, so an entry without a cwd
// gets project as its cwd (Claude Code's ~/.claude.json gives each
// project's servers the project's directory, whatever project is).
func (c *Client) ReadIn(data []byte, f Format, project string) (*File, error) {
	v := c.vars
	if f == FormatMCPServers && c.Format == FormatClaudeUser {
		v = varsClaude
	}
	return read(data, f, v, c.Name, project)
}

// ProjectDir returns the project directory a client file at path belongs
// to, told from its place in the project (.mcp.json, .cursor/mcp.json,
// .vscode/mcp.json, .zed/settings.json, .codex/config.toml), or "": also
// when that is home, the user's own (~/.cursor/mcp.json, ~/.codex).
func ProjectDir(path, home string) string {
	dir := projectDir(path)
	if dir != "" && home != "" && strings.TrimRight(strings.ReplaceAll(dir, `\`, "/"), "/") == strings.TrimRight(strings.ReplaceAll(home, `\`, "/"), "/") {
		return ""
	}
	return dir
}

func projectDir(path string) string {
	slash := strings.ReplaceAll(path, `\`, "/")
	dir, base := pathpkg.Split(slash)
	parent := pathpkg.Base(pathpkg.Clean(dir))
	cut := func(n int) string {
		return strings.TrimRight(path[:len(path)-n], `/\`)
	}
	switch {
	case base == ".mcp.json":
		return cut(len(base))
	case base == "mcp.json" && (parent == ".cursor" || parent == ".vscode"),
		base == "settings.json" && parent == ".zed",
		base == "config.toml" && parent == ".codex":
		return cut(len(base) + len(parent) + 1)
	}
	return ""
}

// Error is a file that cannot be read: a syntax error (Line and Column
// set) or a top level that is not what the format wants.
type Error struct {
	Line, Column int
	Msg          string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Msg)
	}
	return e.Msg
}

func read(data []byte, f Format, vars varSyntax, client, project string) (*File, error) {
	if f == FormatCodex {
		file, err := readCodex(data)
		if err == nil {
			for _, s := range file.Servers {
				inProject(s, project)
			}
		}
		return file, err
	}
	root, err := jsonc.Parse(data)
	if err != nil {
		var se *jsonc.SyntaxError
		if errors.As(err, &se) {
			return nil, &Error{Line: se.Line, Column: se.Column, Msg: se.Msg}
		}
		return nil, err
	}
	if root.Kind != jsonc.Object {
		return nil, &Error{Msg: fmt.Sprintf("the file holds %s, not a JSON object", root.Kind)}
	}
	r := &reader{file: &File{Format: f}, vars: vars, format: f, client: client, project: project,
		mine: client == "" && f == FormatMCPServers, data: data}
	switch f {
	case FormatVSCodeSettings:
		if mcp := root.Get("mcp"); mcp != nil && r.isObject(mcp, "mcp") {
			r.servers(mcp.Get("servers"), "mcp.servers")
		}
	case FormatClaudeUser:
		r.servers(root.Get("mcpServers"), "mcpServers")
		if projects := root.Get("projects"); projects != nil && r.isObject(projects, "projects") {
			for _, m := range projects.Members {
				if r.isObject(m.Value, join("projects", m.Key)) {
					r.project = m.Key // Claude Code runs them there
					r.servers(m.Value.Get("mcpServers"), join(join("projects", m.Key), "mcpServers"))
					r.project = project
				}
			}
		}
	default:
		r.servers(root.Get(f.serversKey()), f.serversKey())
		if r.mine {
			r.defaultTools(root)
		}
	}
	return r.file, nil
}

// inProject gives a local server of a project's file the project's
// directory as its cwd when it names none.
func inProject(s *Server, project string) {
	if project != "" && s.Cwd == "" && !s.Remote() && s.Command != "" && s.Blocked == "" {
		s.Cwd = strings.ReplaceAll(project, "$", "$$")
	}
}

type reader struct {
	file   *File
	format Format
	vars   varSyntax
	// client is the client's name, "" when unknown.
	client string
	// project is the project directory of the servers read, if any.
	project string
	// mine: the file may be mcpvisor's own config, whose settings are
	// known.
	mine bool
	data []byte
}

// mcpvisorSettings are the per-server settings of mcpvisor's config
// (internal/config's settingNames) but tools, which is read.
var mcpvisorSettings = []string{"idleTimeout", "startGrace", "initTimeout", "requestTimeout", "eager", "pin", "prefix", "sharing", "protocol", "launch", "maxInstances", "stop", "restart", "limits", "maxIdleMemory"}

// defaultTools gives the servers without tools of their own the tools of
// mcpvisor's "defaults", field by field as mcpvisor does.
func (r *reader) defaultTools(root *jsonc.Value) {
	d := root.Get("defaults")
	if d == nil || d.Kind != jsonc.Object || d.Get("tools") == nil {
		return
	}
	s := &Server{}
	r.tools(s, d.Get("tools"), "defaults.tools")
	if s.Tools == nil {
		return
	}
	for _, srv := range r.file.Servers {
		if srv.Tools == nil {
			srv.Tools = &Tools{}
		}
		if srv.Tools.Allow == nil {
			srv.Tools.Allow = s.Tools.Allow
		}
		if srv.Tools.Deny == nil {
			srv.Tools.Deny = s.Tools.Deny
		}
	}
}

// tools reads mcpvisor's tools {allow, deny}.
func (r *reader) tools(s *Server, v *jsonc.Value, at string) {
	if !r.isObject(v, at) {
		return
	}
	t := &Tools{}
	for _, m := range v.Members {
		fat := join(at, m.Key)
		switch m.Key {
		case "allow":
			t.Allow = r.strs(m.Value, fat, nil)
		case "deny":
			t.Deny = r.strs(m.Value, fat, nil)
		default:
			r.problem(fat, "unknown field (allow, deny)")
		}
	}
	s.Tools = t
}

func (r *reader) problem(at, format string, args ...any) {
	r.file.Problems = append(r.file.Problems, Note{At: at, Msg: fmt.Sprintf(format, args...)})
}

func (r *reader) isObject(v *jsonc.Value, at string) bool {
	if v.Kind == jsonc.Null {
		return false
	}
	if v.Kind != jsonc.Object {
		r.problem(at, "must be an object, not %s", v.Kind)
		return false
	}
	return true
}

func (r *reader) servers(v *jsonc.Value, at string) {
	if v == nil || !r.isObject(v, at) {
		return
	}
	for _, m := range v.Members {
		if i := slices.IndexFunc(r.file.Servers, func(s *Server) bool { return s.At == join(at, m.Key) }); i >= 0 {
			r.file.Servers = slices.Delete(r.file.Servers, i, i+1) // the last one counts, as in every client
		}
		r.file.Servers = append(r.file.Servers, r.server(m.Key, m.Value, join(at, m.Key)))
	}
}

func (r *reader) server(name string, v *jsonc.Value, at string) *Server {
	s := &Server{Name: name, At: at}
	if v.Kind != jsonc.Object {
		r.problem(at, "must be an object, not %s", v.Kind)
		s.Blocked = "not an object"
		return s
	}
	before := len(r.file.Problems)
	defer inProject(s, r.project)
	launch := false // a command or url is given, if empty
	for _, m := range v.Members {
		fat := join(at, m.Key)
		switch m.Key {
		case "command", "url", "serverUrl":
			launch = true
		}
		switch m.Key {
		case "command":
			if r.format == FormatZed && m.Value.Kind == jsonc.Object { // Zed before 2025-06-27: command {path, args, env}
				r.zedCommand(s, m.Value, fat)
				continue
			}
			s.Command = r.str(m.Value, fat, s)
		case "args":
			s.Args = r.strs(m.Value, fat, s)
		case "env":
			s.Env = r.kvs(m.Value, fat, s, r.format == FormatVSCode || r.format == FormatVSCodeSettings)
		case "cwd":
			s.Cwd = r.str(m.Value, fat, s)
		case "url", "serverUrl":
			s.URL = r.str(m.Value, fat, s)
			if m.Key != "url" {
				s.setField("url", fat)
			}
		case "headers":
			s.Headers = r.kvs(m.Value, fat, s, false)
		case "type", "transport":
			t := r.str(m.Value, fat, nil)
			switch strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(t)) {
			case "stdio":
				s.Transport = TransportStdio
			case "http", "streamablehttp":
				s.Transport = TransportHTTP
			case "sse":
				s.Transport = TransportSSE
			default:
				r.problem(fat, "%q is not a transport mcpvisor knows (stdio, http, sse)", t)
			}
		case "disabled":
			if m.Value.Kind != jsonc.Bool {
				r.problem(fat, "must be a boolean, not %s", m.Value.Kind)
			} else {
				s.Disabled = m.Value.Bool
			}
		case "enabled":
			if r.format != FormatZed {
				s.unsupported(fat, "not a field of this client's entries; not imported")
			} else if m.Value.Kind != jsonc.Bool {
				r.problem(fat, "must be a boolean, not %s", m.Value.Kind)
			} else {
				s.Disabled = !m.Value.Bool
			}
		case "source":
			if r.format == FormatZed && m.Value.Kind == jsonc.String && m.Value.Str == "extension" {
				s.Blocked = "a Zed extension's server: Zed runs it, mcpvisor cannot"
			} else if r.format != FormatZed {
				s.clientOnly(fat, unsupportedWhy(r.format, m.Key))
			}
		case "remote":
			if m.Value.Kind == jsonc.Bool && !m.Value.Bool {
				continue
			}
			s.clientOnly(fat, "runs the server on Zed's remote host, which mcpvisor cannot")
		case "settings":
			if m.Value.Kind == jsonc.Object && len(m.Value.Members) == 0 {
				continue // Zed's migrations leave an empty one
			}
			s.unsupported(fat, unsupportedWhy(r.format, m.Key))
		case "timeout":
			// Zed: seconds; Claude Code: milliseconds; a tool call's.
			unit := time.Duration(0)
			switch {
			case r.format == FormatZed:
				unit = time.Second
			case r.format == FormatClaudeUser || r.client == "claude-code" || r.client == "" && r.format == FormatMCPServers:
				unit = time.Millisecond
			}
			if unit == 0 || m.Value.Kind != jsonc.Number {
				s.clientOnly(fat, unsupportedWhy(r.format, "?"))
				continue
			}
			n, err := strconv.ParseFloat(m.Value.Str, 64)
			if err != nil || n < 0 {
				r.problem(fat, "must be a number of %s, not %s", map[bool]string{true: "seconds", false: "milliseconds"}[unit == time.Second], m.Value.Str)
				continue
			}
			s.RequestTimeout = duration(n, unit)
			s.keepClientSide(m.Key, jsonc.Standardize(r.data[m.Value.Start:m.Value.End]), nil)
		case "dev":
			s.unsupported(fat, unsupportedWhy(r.format, m.Key))
		case "oauth":
			r.oauth(s, m.Value, fat)
		case "envFile", "sandbox", "sandboxEnabled", "headersHelper":
			s.clientOnly(fat, unsupportedWhy(r.format, m.Key))
		case "tools":
			if r.mine {
				r.tools(s, m.Value, fat)
				continue
			}
			s.clientOnly(fat, unsupportedWhy(r.format, m.Key))
		default:
			if r.mine && slices.Contains(mcpvisorSettings, m.Key) {
				s.unsupported(fat, "an mcpvisor setting; not imported")
				continue
			}
			s.clientOnly(fat, unsupportedWhy(r.format, m.Key))
		}
	}
	if s.Command == "" && s.URL == "" && s.Blocked == "" {
		switch {
		case launch:
			s.Transport = TransportStdio // an empty command, for mcpvisor to report
		case r.format == FormatZed:
			s.Blocked = "a Zed extension's server (no command or url): Zed runs it, mcpvisor cannot"
		case len(r.file.Problems) == before:
			r.problem(at, "has neither command nor url")
		}
	}
	if s.Transport == "" {
		s.Transport = TransportStdio
		if s.Command == "" && s.URL != "" {
			s.Transport = TransportHTTP
		}
	}
	if len(r.file.Problems) > before && s.Blocked == "" {
		s.Blocked = "invalid: " + r.file.Problems[before].String()
	}
	if s.Login && !s.Remote() {
		s.clientOnly(join(at, "oauth"), "a sign-in for a server that has no url, which mcpvisor cannot carry")
	}
	s.signIn(at)
	return s
}

// oauth reads Claude Code's oauth {clientId, callbackPort}: the client
// signed in to the server, which mcpvisor now does itself.
func (r *reader) oauth(s *Server, v *jsonc.Value, at string) {
	if !r.isObject(v, at) {
		return
	}
	s.Login = true
	for _, m := range v.Members {
		fat := join(at, m.Key)
		switch m.Key {
		case "clientId":
			if id := r.str(m.Value, fat, nil); id != "" {
				if s.OAuth == nil {
					s.OAuth = &OAuth{}
				}
				s.OAuth.ClientID = id
			}
		case "callbackPort":
			s.note(fat, "not carried over: mcpvisor login listens on a loopback port of its own")
		default:
			s.clientOnly(fat, unsupportedWhy(r.format, "?"))
		}
	}
}

// unsupportedWhy explains why a field is not taken.
func unsupportedWhy(f Format, key string) string {
	switch key {
	case "envFile":
		return "the server gets the variables of an env file, which mcpvisor does not read (put them in env to take the server over)"
	case "inputs":
		return "mcpvisor cannot prompt for inputs"
	case "dev":
		return "VS Code's development mode (watch, debug) is not supported"
	case "sandbox", "sandboxEnabled":
		return "VS Code runs the server in its sandbox (files, network), which mcpvisor cannot; its limits (memory, pids, cpu) are another thing"
	case "headersHelper":
		return "the client runs a command that makes the headers, which mcpvisor cannot"
	case "settings":
		return "a Zed extension's settings are not supported"
	case "tools":
		return "the client's own tool settings, which mcpvisor cannot carry"
	}
	return "a field mcpvisor does not know: it cannot tell what it changes"
}

// keepClientSide remembers a field the client applies on its side of
// the launch.
func (s *Server) keepClientSide(key string, js []byte, toml any) {
	s.clientSide = append(s.clientSide, rawField{Key: key, JSON: json.RawMessage(js), TOML: toml})
}

// duration writes n units as an mcpvisor duration.
func duration(n float64, unit time.Duration) string {
	d := time.Duration(n * float64(unit))
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

func (s *Server) unsupported(at, msg string) {
	s.Unsupported = append(s.Unsupported, Note{At: at, Msg: msg})
}

func (s *Server) setField(field, at string) {
	if s.fields == nil {
		s.fields = map[string]string{}
	}
	s.fields[field] = at
}

func (r *reader) zedCommand(s *Server, v *jsonc.Value, at string) {
	for _, m := range v.Members {
		fat := join(at, m.Key)
		switch m.Key {
		case "path":
			s.Command = r.str(m.Value, fat, s)
			s.setField("command", fat)
		case "args":
			s.Args = r.strs(m.Value, fat, s)
			s.setField("args", fat)
		case "env":
			s.Env = r.kvs(m.Value, fat, s, false)
			s.setField("env", fat)
		default:
			s.clientOnly(fat, unsupportedWhy(r.format, m.Key))
		}
	}
}

func (r *reader) str(v *jsonc.Value, at string, s *Server) string {
	if v.Kind != jsonc.String {
		if v.Kind != jsonc.Null {
			r.problem(at, "must be a string, not %s", v.Kind)
		}
		return ""
	}
	if s == nil {
		return v.Str
	}
	return r.value(v.Str, at, s)
}

func (r *reader) strs(v *jsonc.Value, at string, s *Server) []string {
	if v.Kind == jsonc.Null {
		return nil
	}
	if v.Kind != jsonc.Array {
		r.problem(at, "must be an array of strings, not %s", v.Kind)
		return nil
	}
	out := []string{}
	for i, e := range v.Elems {
		out = append(out, r.str(e, at+"["+strconv.Itoa(i)+"]", s))
	}
	return out
}

// kvs reads an object of strings; numbers are taken as written when
// numbers is set (VS Code's env allows them), and null (VS Code: unset
// the variable) is unsupported.
func (r *reader) kvs(v *jsonc.Value, at string, s *Server, numbers bool) []KV {
	if v.Kind == jsonc.Null {
		return nil
	}
	if v.Kind != jsonc.Object {
		r.problem(at, "must be an object of strings, not %s", v.Kind)
		return nil
	}
	var out []KV
	for _, m := range v.Members {
		fat := join(at, m.Key)
		switch {
		case m.Value.Kind == jsonc.Number && numbers:
			out = append(out, KV{m.Key, m.Value.Str})
		case m.Value.Kind == jsonc.Null && numbers:
			s.clientOnly(fat, "null unsets a variable the server would inherit; mcpvisor cannot")
		default:
			out = append(out, KV{m.Key, r.str(m.Value, fat, s)})
		}
	}
	return out
}

// vscodeVar matches a VS Code variable reference.
var vscodeVar = regexp.MustCompile(`\$\{([^}]*)\}`)

// value turns a string of the client's syntax into mcpvisor's, blocking
// the server on references only the client can resolve.
func (r *reader) value(s, at string, srv *Server) string {
	switch r.vars {
	case varsNone:
		return strings.ReplaceAll(s, "$", "$$")
	case varsMine:
		return s
	case varsClaude:
		return claudeValue(s, func() { srv.note(at, keptAsText) })
	}
	return vscodeVar.ReplaceAllStringFunc(s, func(ref string) string {
		body := ref[2 : len(ref)-1]
		switch {
		case strings.HasPrefix(body, "env:") && envName(strings.TrimPrefix(body, "env:")):
			return "${" + strings.TrimPrefix(body, "env:") + "}"
		case strings.HasPrefix(body, "env:"):
			srv.block(at, fmt.Sprintf("uses %s, which names no variable mcpvisor can pass on", ref))
		case body == "userHome":
			return "${HOME}"
		case strings.HasPrefix(body, "input:"):
			srv.block(at, fmt.Sprintf("uses %s, which the client prompts for and mcpvisor cannot; put the value (or a ${NAME} of mcpvisor's environment) in mcpvisor's config by hand", ref))
		default:
			srv.block(at, fmt.Sprintf("uses %s, which only the client knows", ref))
		}
		return ref
	})
}

// keptAsText is the note of a value whose mcpvisor-only reference was
// written as text.
const keptAsText = "kept as text: mcpvisor references are not taken from client files"

// mcpvisorSchemes are the reference schemes only mcpvisor's own syntax
// has: a client file holding ${file:…} means that text.
var mcpvisorSchemes = []string{"env:", "file:", "keyring:"}

// claudeValue turns a string of Claude's syntax (${NAME},
// ${NAME:-default}) into mcpvisor's: ${NAME} and ${NAME:-default} stay
// references, while ${env:…}, ${file:…} and ${keyring:…}, which Claude's
// syntax does not have, become text ($$), so that a client file never
// makes mcpvisor read a file or a secret; kept is called for each.
func claudeValue(s string, kept func()) string {
	if !strings.Contains(s, "${") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			i++
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteString("$$")
			i += 2
			continue
		case '{':
		default:
			b.WriteByte('$')
			i++
			continue
		}
		end := secret.ClosingBrace(s, i+2)
		if end < 0 {
			b.WriteString(s[i:])
			break
		}
		body := s[i+2 : end]
		name, def, hasDef := strings.Cut(body, ":-")
		switch {
		case envName(name) && hasDef:
			b.WriteString("${" + name + ":-" + claudeValue(def, kept) + "}")
		case slices.ContainsFunc(mcpvisorSchemes, func(p string) bool { return strings.HasPrefix(body, p) }):
			b.WriteString(strings.ReplaceAll(s[i:end+1], "$", "$$"))
			kept()
		default:
			b.WriteString(s[i : end+1])
		}
		i = end + 1
	}
	return b.String()
}

func (s *Server) block(at, msg string) {
	if s.Blocked == "" {
		s.Blocked = at + ": " + msg
	}
}

// join appends a key to a path: a.b, or a["b c"] for keys that are not
// plain names.
func join(base, key string) string {
	plain := key != ""
	for _, c := range key {
		if !(c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return base + "[" + strconv.Quote(key) + "]"
	case base == "":
		return key
	}
	return base + "." + key
}

// readCodex reads Codex's config.toml.
func readCodex(data []byte) (*File, error) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, col := de.Position()
			return nil, &Error{Line: line, Column: col, Msg: de.Error()}
		}
		return nil, &Error{Msg: err.Error()}
	}
	f := &File{Format: FormatCodex}
	servers, ok := doc["mcp_servers"]
	if !ok {
		return f, nil
	}
	table, ok := servers.(map[string]any)
	if !ok {
		f.Problems = append(f.Problems, Note{At: "mcp_servers", Msg: "must be a table"})
		return f, nil
	}
	for _, name := range sortedKeys(table) {
		at := join("mcp_servers", name)
		s := &Server{Name: name, At: at}
		f.Servers = append(f.Servers, s)
		entry, ok := table[name].(map[string]any)
		if !ok {
			f.Problems = append(f.Problems, Note{At: at, Msg: "must be a table"})
			s.Blocked = "not a table"
			continue
		}
		c := codexServer{f: f, s: s}
		for _, k := range sortedKeys(entry) {
			c.key(k, entry[k], join(at, k))
		}
		s.Transport = TransportStdio
		switch {
		case s.Command == "" && s.URL == "" && s.Blocked == "":
			f.Problems = append(f.Problems, Note{At: at, Msg: "has neither command nor url"})
			s.Blocked = "invalid: has neither command nor url"
		case s.Command == "" && s.URL != "":
			s.Transport = TransportHTTP
		}
		if s.Login && !s.Remote() && s.Blocked == "" {
			s.clientOnly(at, "a sign-in for a server that has no url, which mcpvisor cannot carry")
		}
		s.signIn(at)
	}
	return f, nil
}

// envName reports whether name can be referenced as ${name}.
func envName(name string) bool {
	if name == "" || '0' <= name[0] && name[0] <= '9' {
		return false
	}
	for _, c := range name {
		if !(c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// codexServer reads one server table of Codex's config into s; its
// problems go to f.
type codexServer struct {
	f *File
	s *Server
}

// bad records that the value at at is not what it must be; the first
// such problem blocks the server.
func (c codexServer) bad(at, want string) {
	c.f.Problems = append(c.f.Problems, Note{At: at, Msg: "must be " + want})
	if c.s.Blocked == "" {
		c.s.Blocked = "invalid: " + at + ": must be " + want
	}
}

// codexEscape keeps a Codex value's '$' literal in mcpvisor's config,
// which expands ${NAME}: Codex does not.
func codexEscape(v string) string { return strings.ReplaceAll(v, "$", "$$") }

// strs reads an array of strings, each through conv.
func (c codexServer) strs(v any, at string, conv func(string) string) ([]string, bool) {
	list, ok := v.([]any)
	if !ok {
		c.bad(at, "an array of strings")
		return nil, false
	}
	out := []string{}
	for i, e := range list {
		str, ok := e.(string)
		if !ok {
			c.bad(at+"["+strconv.Itoa(i)+"]", "a string")
		}
		out = append(out, conv(str))
	}
	return out, true
}

// key reads one key k of the server's table, its value v found at fat.
func (c codexServer) key(k string, v any, fat string) {
	s := c.s
	switch k {
	case "command", "cwd", "url":
		str, ok := v.(string)
		if !ok {
			c.bad(fat, "a string")
			return
		}
		switch k {
		case "command":
			s.Command = codexEscape(str)
		case "cwd":
			s.Cwd = codexEscape(str)
		case "url":
			s.URL = codexEscape(str)
		}
	case "args":
		s.Args, _ = c.strs(v, fat, codexEscape)
	case "env", "http_headers":
		t, ok := v.(map[string]any)
		if !ok {
			c.bad(fat, "a table of strings")
			return
		}
		var kvs []KV
		for _, ek := range sortedKeys(t) {
			str, ok := t[ek].(string)
			if !ok {
				c.bad(join(fat, ek), "a string")
			}
			kvs = append(kvs, KV{ek, codexEscape(str)})
		}
		if k == "env" {
			s.Env = kvs
			return
		}
		for _, kv := range kvs {
			s.setHeader(kv.Key, kv.Value)
		}
		s.setField("headers", fat)
	case "enabled":
		b, ok := v.(bool)
		if !ok {
			c.bad(fat, "a boolean")
			return
		}
		s.Disabled = !b
	case "env_vars":
		s.clientOnly(fat, "variables passed on from Codex's environment, which the server would not get from mcpvisor's (put them in env to take the server over)")
	case "default_tools_approval_mode", "tools":
		s.clientOnly(fat, "Codex's approval of tool calls, which mcpvisor cannot carry")
	case "startup_timeout_sec", "startup_timeout_ms", "tool_timeout_sec":
		n, ok := tomlNumber(v)
		if !ok || n < 0 {
			c.bad(fat, "a number, 0 or more")
			return
		}
		switch k {
		case "startup_timeout_sec":
			s.InitTimeout = duration(n, time.Second)
		case "startup_timeout_ms":
			s.InitTimeout = duration(n, time.Millisecond)
		default:
			s.RequestTimeout = duration(n, time.Second)
		}
		s.keepClientSide(k, nil, v)
	case "enabled_tools", "disabled_tools":
		pats, ok := c.strs(v, fat, toolPattern)
		if !ok {
			return
		}
		if s.Tools == nil {
			s.Tools = &Tools{}
		}
		if k == "enabled_tools" {
			s.Tools.Allow = pats
		} else {
			s.Tools.Deny = pats
		}
		s.keepClientSide(k, nil, v)
	case "required", "supports_parallel_tool_calls":
		s.keepClientSide(k, nil, v)
	case "name": // legacy, Codex ignores it
	default:
		if !c.signInKey(k, v, fat) {
			s.clientOnly(fat, unsupportedWhy(FormatCodex, k))
		}
	}
}

// signInKey reads the keys of how Codex signs in to a remote server (a
// bearer token, headers from its environment, OAuth), reporting whether
// k is one of them.
func (c codexServer) signInKey(k string, v any, fat string) bool {
	s := c.s
	switch k {
	case "bearer_token_env_var":
		name, ok := v.(string)
		if !ok || !envName(name) {
			c.bad(fat, "the name of an environment variable")
			return true
		}
		s.setHeader("Authorization", "Bearer ${"+name+"}")
		s.setField("headers", fat)
	case "bearer_token":
		tok, ok := v.(string)
		if !ok {
			c.bad(fat, "a string")
			return true
		}
		s.setHeader("Authorization", "Bearer "+codexEscape(tok))
		s.setField("headers", fat)
	case "env_http_headers":
		t, ok := v.(map[string]any)
		if !ok {
			c.bad(fat, "a table of environment variable names")
			return true
		}
		for _, h := range sortedKeys(t) {
			name, ok := t[h].(string)
			if !ok || !envName(name) {
				c.bad(join(fat, h), "the name of an environment variable")
				continue
			}
			s.setHeader(h, "${"+name+"}")
		}
		s.setField("headers", fat)
	case "scopes":
		scopes, ok := c.strs(v, fat, func(s string) string { return s })
		if !ok {
			return true
		}
		if s.OAuth == nil {
			s.OAuth = &OAuth{}
		}
		s.OAuth.Scopes = scopes
		s.Login = true
	case "oauth_resource":
		if _, ok := v.(string); !ok {
			c.bad(fat, "a string")
			return true
		}
		s.Login = true
		s.note(fat, "not carried over: mcpvisor has no resource override; it asks for the resource the server's metadata names")
	case "oauth":
		t, ok := v.(map[string]any)
		if !ok {
			c.bad(fat, "a table")
			return true
		}
		s.Login = true
		for _, ok := range sortedKeys(t) {
			switch ok {
			case "client_id":
				id, isStr := t[ok].(string)
				if !isStr {
					c.bad(join(fat, ok), "a string")
					continue
				}
				if s.OAuth == nil {
					s.OAuth = &OAuth{}
				}
				s.OAuth.ClientID = id
			default:
				s.clientOnly(join(fat, ok), unsupportedWhy(FormatCodex, ok))
			}
		}
	default:
		return false
	}
	return true
}

func tomlNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
