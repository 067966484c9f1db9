package config

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/clientcfg"
	"github.com/mcpvisor/mcpvisor/internal/jsonc"
	"github.com/mcpvisor/mcpvisor/internal/policy"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Server kinds.
const (
	KindStdio = "stdio" // a local process speaking MCP over stdin/stdout
	KindHTTP  = "http"  // a remote server reached by URL
)

// Transports. A stdio server always has TransportStdio; an http server has
// TransportStreamableHTTP unless its type says "sse" (the older HTTP+SSE
// transport).
const (
	TransportStdio          = "stdio"
	TransportStreamableHTTP = "streamable-http"
	TransportSSE            = "sse"
)

// Protocol eras of a server: how mcpvisor finds which MCP it speaks.
const (
	// ProtocolAuto, the default, finds the era: a stdio server is
	// initialized (earlier revisions), probed with server/discover (MCP
	// 2026-07-28) on a second process when a modern client first needs
	// it — a dual-era server then serves each client in its own era — and
	// on the same process if it refuses initialize; a remote one is probed
	// with server/discover first and falls back to initialize on any other
	// answer or none. The era found is kept with the server's lists, so a
	// known server is not probed again.
	ProtocolAuto = "auto"
	// ProtocolLegacy initializes at once, never probing: for a server that
	// misbehaves when asked anything before initialize, or whose tools ask
	// for input with requests even in the modern revision.
	ProtocolLegacy = "legacy"
	// ProtocolModern requires the server to answer server/discover as a
	// 2026-07-28 server.
	ProtocolModern = "modern"
)

// CarriedCapabilities are the client capabilities whose requests mcpvisor
// carries from a server to a client: the server asks, the client answers.
var CarriedCapabilities = []string{"roots", "sampling", "elicitation"}

// Declares reports whether mcpvisor may declare the client capability
// name to s's server ("clientCapabilities").
func (s *Server) Declares(name string) bool {
	return s.ClientCapabilities == nil || slices.Contains(s.ClientCapabilities, name)
}

// PerSession reports whether s gives each client session its own
// connection (Sharing is SharingPerSession).
func (s *Server) PerSession() bool { return s.Sharing == SharingPerSession }

// Sharing modes.
const (
	// SharingShared serves every client session from one connection.
	SharingShared = "shared"
	// SharingPerSession gives each client session its own connection (its
	// own process for a stdio server), closed when the session ends.
	SharingPerSession = "per-session"
	// SharingPerIdentity gives each identity its own connection, shared
	// by that identity's sessions and requests (bounded by maxInstances,
	// ended when idle).
	SharingPerIdentity = "per-identity"
)

// Launch modes of a stdio server ("launch").
const (
	// LaunchFlatten runs a package launcher's command line (npx, npm
	// exec, …) as the program the launcher would run, resolved once
	// with the user's package manager: the default.
	LaunchFlatten = "flatten"
	// LaunchAsWritten runs the command line as written.
	LaunchAsWritten = "as-written"
)

// Built-in defaults (DESIGN.md, "Defaults"). Restart defaults follow the
// lifecycle package except the backoff jitter, which is on here.
const (
	DefaultListen         = "127.0.0.1:7331"
	DefaultIdleTimeout    = 180 * time.Second
	DefaultStartGrace     = 60 * time.Second
	DefaultInitTimeout    = 30 * time.Second
	DefaultRequestTimeout = 60 * time.Second
	// DefaultMaxInstances bounds the instances of a per-session server.
	DefaultMaxInstances = 32
	// DefaultMaxSessions bounds the client sessions of the HTTP front.
	DefaultMaxSessions = 1000
	// DefaultHoldTimeout bounds a call held for a modern client's retry.
	DefaultHoldTimeout   = 5 * time.Minute
	DefaultStdinWait     = 2 * time.Second
	DefaultTermWait      = 10 * time.Second
	DefaultBackoffJitter = 0.2
)

// Environment variables that replace the built-in idle timeout and spawn
// grace period (a number of seconds, or a duration such as "90s"). The
// config's defaults and per-server settings override them.
const (
	EnvIdleTimeout = "MCP_PROCESS_IDLE_TIMEOUT_SECONDS"
	EnvStartGrace  = "MCP_PROCESS_SPAWN_GRACE_PERIOD_SECONDS"
)

// LoadOptions tune Load and Parse.
type LoadOptions struct {
	// Strict turns every warning (unknown fields, duplicate keys, fields
	// ignored for the server's kind, …) into an error.
	Strict bool
	// LookupEnv resolves ${VAR} references and the EnvIdleTimeout and
	// EnvStartGrace overrides. Nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// Config is a loaded, validated configuration.
type Config struct {
	// File is the name the configuration was loaded under, as used in
	// messages.
	File string
	// Listen is the address of the HTTP front (default DefaultListen).
	Listen string
	// StateDir is where persisted state lives; "" means the caller's
	// default. ${VAR} references are expanded.
	StateDir string
	// PageSize is how many tools, prompts, resources or templates one
	// page of the aggregated endpoint's lists holds; 0 (the default)
	// returns each list whole, in one page.
	PageSize int
	// MaxSessions bounds the client sessions held at once — HTTP and
	// mcpvisor connect ones — and 2026-07-28 subscriptions/listen
	// streams with them (default DefaultMaxSessions). At the bound a new
	// one evicts the least recently active session with no request in
	// flight; it is refused, with HTTP 503 and a JSON-RPC error naming
	// the limit, only when there is none (gateway.SessionLimit).
	MaxSessions int
	// HoldTimeout bounds how long a server's call stays held for a
	// 2026-07-28 client's retry with the input the server asked for
	// (default DefaultHoldTimeout); then the call is cancelled.
	HoldTimeout time.Duration
	// OAuthClientMetadataURL is the top-level oauth.clientMetadataUrl,
	// the default of every remote server's (already applied to their
	// OAuth).
	OAuthClientMetadataURL string
	// Auth makes mcpvisor an OAuth resource server (nil: the loopback
	// guard and the optional static token, as without it).
	Auth *AuthConfig
	// Policy is the rules every request is decided by, in order (nil:
	// everything is allowed).
	Policy []PolicyRule
	// Compiled is Policy compiled (nil without rules, or with errors).
	Compiled *policy.Policy
	// Audit, when set, records every call and every denial.
	Audit *AuditConfig
	// RateLimits, when set, bounds each identity's requests.
	RateLimits *LimitsConfig
	// Replicas, when set, makes this mcpvisor one of several replicas.
	Replicas *ReplicasConfig
	// Version is a digest of the bytes the configuration was parsed
	// from: replicas that read the same file have the same.
	Version string
	// Servers holds every configured server, disabled ones included,
	// sorted by name.
	Servers []*Server
	// Warnings are problems that do not stop the configuration from
	// working, formatted like Problem.String.
	Warnings []string
}

// Server returns the server with the given name, or nil.
func (c *Config) Server(name string) *Server {
	i, ok := slices.BinarySearchFunc(c.Servers, name, func(s *Server, n string) int {
		return strings.Compare(s.Name, n)
	})
	if !ok {
		return nil
	}
	return c.Servers[i]
}

// Server is one configured MCP server with every setting resolved: built-in
// defaults, then the environment overrides, then the config's defaults, then
// the server's own settings, field by field. Strings that allow ${VAR}
// references hold their expanded values.
//
// Durations of 0 disable the thing they bound: IdleTimeout 0 never puts the
// server to sleep, StartGrace 0 gives no grace, InitTimeout and
// RequestTimeout 0 mean no deadline, StdinWait and TermWait 0 mean no wait
// before the next stop step (proc.Spec spells that as a negative value),
// and Restart.HealthyPeriod 0 resets the count of failures in a row only
// when the server answers. Policy maps
// these onto lifecycle's conventions.
type Server struct {
	Name      string
	Kind      string // KindStdio or KindHTTP
	Transport string // TransportStdio, TransportStreamableHTTP or TransportSSE

	// stdio servers.
	Command string
	Args    []string
	Env     map[string]string // added to mcpvisor's environment; never shown
	Cwd     string

	// http servers.
	URL     string
	Headers map[string]string // never shown
	// OAuth is the server's "oauth" object, or the top-level
	// clientMetadataUrl alone when it has none; nil when neither is set,
	// and for a server with an Authorization header (never OAuth).
	OAuth *OAuthConfig

	Disabled bool
	// Eager starts the server when mcpvisor starts instead of on first use.
	Eager bool
	// Pin holds back a tool whose definition is new or changed since the
	// operator last approved the server's tools (the first set learned is
	// approved as it is): it is not listed and not callable until
	// approved. A setting: a reload applies it in place.
	Pin bool
	// AsWritten runs a package launcher's command line (npx, npm exec, …)
	// as written instead of flattening it to the program the launcher
	// would run ("launch": "as-written"; the default, "flatten",
	// flattens: package launch). A setting: a reload applies it at the
	// server's next start.
	AsWritten bool
	// Prefix goes before this server's tool, prompt and resource names on
	// the aggregated endpoint (the gateway adds the separator). Defaults to
	// the server name; "" means no prefix.
	Prefix  string
	Tools   Filter
	Sharing string // SharingShared or SharingPerSession
	// Via, when set, is the replica this one reaches the server through
	// (ThroughPeer): the server is placed on that one.
	Via *Via
	// Placement is where the server runs among replicas: PlacementEvery
	// (each runs it on demand) or PlacementOne (one process in the
	// deployment, on its owner replica).
	Placement string
	// ClientCapabilities are the client capabilities mcpvisor may declare
	// to the server, of CarriedCapabilities ("clientCapabilities"; nil:
	// all of them). A shared instance is declared them all; a session's
	// own instance, those of them its client declared; a modern server's
	// request, those of them its client declared. A server's request for
	// another is answered Method not found, whoever its client is.
	ClientCapabilities []string
	Protocol           string // ProtocolAuto, ProtocolLegacy or ProtocolModern
	// MaxInstances bounds the instances of a per-session server, one per
	// client session (default DefaultMaxInstances), those of ended
	// sessions still stopping included; beyond it a session's request
	// waits, within its start bound, for one of those to be gone, else
	// gets an error naming the limit — never a new process.
	MaxInstances int

	IdleTimeout    time.Duration
	StartGrace     time.Duration
	InitTimeout    time.Duration
	RequestTimeout time.Duration
	StdinWait      time.Duration
	TermWait       time.Duration

	Restart RestartConfig

	// Limits are the resource limits of each of its process trees and
	// its maxIdleMemory; nil when none is set (a remote server never has
	// any).
	Limits *Limits

	// resolved are values its references resolved to (NoteResolved),
	// guarded by resolvedMu.
	resolved []string
	// successor is the config that replaced this one for the same server
	// (CarryResolved), guarded by resolvedMu: what is noted here later is
	// noted there too.
	successor *Server

	// raw is the text before ${VAR} expansion, for display (values that
	// came from the environment are never shown); nil when expanding
	// changed nothing, as in most configs.
	raw *rawLaunch
}

// rawLaunch is a server's command and args, or URL, as written.
type rawLaunch struct {
	command string
	args    []string
	url     string
}

// RestartConfig is the restart part of a server's settings, resolved.
type RestartConfig struct {
	Policy lifecycle.Restart
	// MaxAttempts is the number of runs in a row that may fail before
	// answering anything while the server is restarted on its own (0 in
	// the file means 5); negative means unlimited (lifecycle.Policy).
	MaxAttempts int
	// Backoff has every field resolved (Max is never below Initial). It
	// spaces the attempts of a crash loop only (lifecycle.Policy.RetryDelay).
	Backoff lifecycle.Backoff
	// HealthyPeriod is how long a connection must stay up for the count of
	// failures in a row to reset even if it answered nothing (one that
	// answered resets it at once); 0 means never.
	HealthyPeriod time.Duration
}

// Policy returns the lifecycle policy for this server, without callbacks
// or logger.
func (s *Server) Policy() lifecycle.Policy {
	p := lifecycle.Policy{
		Restart:       s.Restart.Policy,
		MaxAttempts:   s.Restart.MaxAttempts,
		Backoff:       s.Restart.Backoff,
		HealthyPeriod: s.Restart.HealthyPeriod,
		InitTimeout:   s.InitTimeout,
	}
	if p.MaxAttempts == 0 { // not produced by Parse; keep lifecycle's meaning
		p.MaxAttempts = lifecycle.DefaultMaxAttempts
	}
	if p.HealthyPeriod == 0 {
		p.HealthyPeriod = -1 // never reset
	}
	if p.InitTimeout == 0 {
		p.InitTimeout = -1 // no deadline
	}
	return p
}

// LaunchHash identifies how the server is reached: a SHA-256 (hex) over its
// kind, transport, command, cwd and url after expansion, its args, env,
// headers and oauth object as written — secret references as text, never
// their values: a changed secret takes effect at the server's next start
// (`mcpvisor restart NAME` applies it now), and no value is hashed into
// what is persisted —, the protocol era setting (which decides whether its era
// is probed), and the client capabilities it may be declared, when set. Any change to those changes the hash, so it keys caches of
// what the server offers (its tools, its era); settings such as timeouts
// do not affect it.
func (s *Server) LaunchHash() string {
	h := sha256.New()
	field := func(v string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(v)))
		h.Write(n[:])
		h.Write([]byte(v))
	}
	field("mcpvisor launch v1")
	field(s.Kind)
	field(s.Transport)
	field(s.Command)
	list(h, field, s.Args)
	sortedMap(h, field, s.Env)
	field(s.Cwd)
	field(s.URL)
	sortedMap(h, field, s.Headers)
	field(s.Protocol)
	if o := s.OAuth; o != nil {
		// Absent, nothing is added: the hash is what it was before OAuth.
		field("oauth")
		for _, v := range []string{o.ClientID, o.ClientSecret, o.TokenEndpointAuthMethod, o.PrivateKey,
			o.SigningAlgorithm, o.ClientMetadataURL, o.Grant} {
			field(v)
		}
		list(h, field, o.Scopes)
	}
	if s.ClientCapabilities != nil {
		// What a server lists may depend on what it was declared: its
		// cached lists are those of its declaration. (Absent, nothing is
		// added, and the hash is what it was before the setting.)
		caps := slices.Sorted(slices.Values(s.ClientCapabilities))
		field("clientCapabilities")
		list(h, field, caps)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func list(h hash.Hash, field func(string), l []string) {
	field(fmt.Sprint(len(l)))
	for _, v := range l {
		field(v)
	}
}

func sortedMap(h hash.Hash, field func(string), m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	field(fmt.Sprint(len(keys)))
	for _, k := range keys {
		field(k)
		field(m[k])
	}
}

// Filter chooses which of a server's tools are exposed. Patterns use
// path.Match syntax (*, ?, [...]) against the server's own tool name,
// before any prefix is added.
type Filter struct {
	// Allow, when not nil, exposes only tools matching one of its
	// patterns; an empty non-nil list exposes none.
	Allow []string
	// Deny hides tools matching any of its patterns, after Allow.
	Deny []string
}

// Allowed reports whether the tool passes the filter: it matches Allow (or
// Allow is nil) and matches nothing in Deny.
func (f Filter) Allowed(tool string) bool {
	if f.Allow != nil && !matchAny(f.Allow, tool) {
		return false
	}
	return !matchAny(f.Deny, tool)
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok { // patterns are validated by Parse
			return true
		}
	}
	return false
}

// Problem is one thing wrong with a configuration.
type Problem struct {
	// File is the configuration's name, or "environment" for a bad
	// override variable.
	File string
	// Path is the JSON path of the offending value (mcpServers.files.args[2],
	// mcpServers["my server"]), or "" for the whole document.
	Path string
	// Line and Column (1-based) locate syntax errors; 0 otherwise.
	Line, Column int
	Message      string
}

// String formats the problem as "file: path: message", or
// "file:line:col: message" for syntax errors.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", p.Line, p.Column)
	}
	b.WriteString(": ")
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Error is returned by Load and Parse for an invalid configuration. It
// lists every problem found, and the warnings, which often explain an
// error (a misspelt field is a warning, the missing field it was meant to
// be an error).
type Error struct {
	File     string
	Problems []Problem
	Warnings []string
}

func (e *Error) Error() string {
	var b strings.Builder
	if len(e.Problems) == 1 {
		return e.Problems[0].String()
	}
	fmt.Fprintf(&b, "%s: %d problems:", e.File, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Load reads and parses the configuration file at path; messages name the
// file as path.
func Load(path string, opts LoadOptions) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path, opts)
}

// ReadFile reads the configuration file at path, for Parse: Load in two
// steps, for a caller that keeps the bytes (to tell a changed file from
// an unchanged one).
func ReadFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return data, nil
}

// Parse parses a configuration held in data; name is used in messages. It
// returns an *Error listing every problem when the configuration is
// invalid.
func Parse(data []byte, name string, opts LoadOptions) (*Config, error) {
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	p := &parser{file: name, strict: opts.Strict, lookup: lookup, serversKey: "mcpServers"}
	data = trimBOM(data)
	var root *node
	if isTOML(name) {
		var perr *Problem
		if root, perr = p.foreign(data, clientcfg.FormatCodex); perr != nil {
			return nil, &Error{File: name, Problems: []Problem{*perr}}
		}
	} else {
		var serr *syntaxError
		if root, serr = decodeTree(data); serr != nil {
			// Comments and trailing commas (JSONC) are allowed in the
			// files of the clients that allow them (VS Code, Zed), not in
			// mcpvisor's own: blanked with spaces, they leave every offset
			// where it was.
			r, jerr := decodeTree(jsonc.Standardize(data))
			if _, ok := foreignFormat(r); jerr == nil && ok {
				root, serr = r, nil
			} else if jerr != nil && looksForeign(data) {
				serr = jerr // a JSONC file's own mistake, past its comments
			}
		}
		if serr != nil {
			line, col := jsonc.LineCol(data, int(serr.offset))
			return nil, &Error{File: name, Problems: []Problem{{File: name, Line: line, Column: col, Message: serr.msg}}}
		}
		if f, ok := foreignFormat(root); ok {
			var perr *Problem
			if root, perr = p.foreign(data, f); perr != nil {
				return nil, &Error{File: name, Problems: []Problem{*perr}}
			}
		}
	}
	cfg := p.config(root)
	if len(p.problems) > 0 {
		return nil, &Error{File: name, Problems: p.problems, Warnings: p.warnings}
	}
	cfg.File = name
	cfg.Version = versionOf(data)
	cfg.Warnings = p.warnings
	return cfg, nil
}

func trimBOM(data []byte) []byte {
	if len(data) >= 3 && data[0] == 0xEF && data[1] == 0xBB && data[2] == 0xBF {
		return data[3:]
	}
	return data
}
