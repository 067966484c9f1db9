package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// envOf is a LookupEnv over a fixed map.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

var noEnv = envOf(nil)

func mustParse(t *testing.T, data string, opts LoadOptions) *Config {
	t.Helper()
	if opts.LookupEnv == nil {
		opts.LookupEnv = noEnv
	}
	cfg, err := Parse([]byte(data), "config.json", opts)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

func parseErr(t *testing.T, data string, opts LoadOptions) *Error {
	t.Helper()
	if opts.LookupEnv == nil {
		opts.LookupEnv = noEnv
	}
	cfg, err := Parse([]byte(data), "config.json", opts)
	if err == nil {
		t.Fatalf("Parse succeeded (%d servers, warnings %q), want an error", len(cfg.Servers), cfg.Warnings)
	}
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("error is %T (%v), want *Error", err, err)
	}
	return cerr
}

func TestDefaults(t *testing.T) {
	cfg := mustParse(t, `{"mcpServers": {"a": {"command": "srv"}}}`, LoadOptions{})
	if cfg.Listen != DefaultListen || cfg.StateDir != "" || cfg.File != "config.json" || cfg.PageSize != 0 {
		t.Errorf("listen %q stateDir %q file %q pageSize %d", cfg.Listen, cfg.StateDir, cfg.File, cfg.PageSize)
	}
	if cfg := mustParse(t, `{"pageSize": 50, "mcpServers": {"a": {"command": "srv"}}}`, LoadOptions{}); cfg.PageSize != 50 {
		t.Errorf("pageSize %d, want 50", cfg.PageSize)
	}
	if cfg.MaxSessions != DefaultMaxSessions || cfg.Server("a").MaxInstances != DefaultMaxInstances {
		t.Errorf("maxSessions %d, maxInstances %d: want the defaults", cfg.MaxSessions, cfg.Server("a").MaxInstances)
	}
	limits := mustParse(t, `{"maxSessions": 10, "defaults": {"maxInstances": 4}, "mcpServers": {"a": {"command": "srv"}, "b": {"command": "srv", "maxInstances": 2}}}`, LoadOptions{})
	if limits.MaxSessions != 10 || limits.Server("a").MaxInstances != 4 || limits.Server("b").MaxInstances != 2 {
		t.Errorf("maxSessions %d, maxInstances a %d b %d: want 10, 4, 2", limits.MaxSessions, limits.Server("a").MaxInstances, limits.Server("b").MaxInstances)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings: %q", cfg.Warnings)
	}
	got := cfg.Server("a")
	want := &Server{
		Name: "a", Kind: KindStdio, Transport: TransportStdio, Command: "srv",
		Prefix: "a", Sharing: SharingShared, Placement: PlacementEvery, Protocol: ProtocolAuto, MaxInstances: DefaultMaxInstances,
		IdleTimeout: 180 * time.Second, StartGrace: 60 * time.Second,
		InitTimeout: 30 * time.Second, RequestTimeout: 60 * time.Second,
		StdinWait: 2 * time.Second, TermWait: 10 * time.Second,
		Restart: RestartConfig{
			Policy: lifecycle.RestartOnFailure, MaxAttempts: 5, HealthyPeriod: 5 * time.Minute,
			Backoff: lifecycle.Backoff{Initial: time.Second, Max: 32 * time.Second, Multiplier: 2, Jitter: 0.2},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("server:\n got %+v\nwant %+v", got, want)
	}
}

// "protocol" takes auto, legacy or modern, in defaults and per server; a
// typo is refused naming the field and the valid values.
func TestProtocolSetting(t *testing.T) {
	cfg := mustParse(t, `{"defaults":{"protocol":"auto"},"mcpServers":{"a":{"command":"srv"},"b":{"command":"srv","protocol":"modern"}}}`, LoadOptions{})
	if cfg.Server("a").Protocol != ProtocolAuto || cfg.Server("b").Protocol != ProtocolModern {
		t.Fatalf("protocol a %q b %q", cfg.Server("a").Protocol, cfg.Server("b").Protocol)
	}
	_, err := Parse([]byte(`{"mcpServers":{"a":{"command":"srv","protocol":"modrn"}}}`), "c.json", LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "mcpServers.a.protocol") || !strings.Contains(err.Error(), `"modern"`) {
		t.Fatalf("error %v", err)
	}
}

// "launch" takes flatten (the default) or as-written, in defaults and per
// server; anything else is refused naming the field and the valid values.
// A change of it is a setting (the process is kept; its next start
// follows it).
func TestLaunchSetting(t *testing.T) {
	cfg := mustParse(t, `{"mcpServers":{"a":{"command":"npx"},"b":{"command":"npx","launch":"as-written"},"c":{"command":"npx","launch":"flatten"}}}`, LoadOptions{})
	if cfg.Server("a").AsWritten || !cfg.Server("b").AsWritten || cfg.Server("c").AsWritten {
		t.Fatalf("as written: a %v b %v c %v", cfg.Server("a").AsWritten, cfg.Server("b").AsWritten, cfg.Server("c").AsWritten)
	}
	cfg = mustParse(t, `{"defaults":{"launch":"as-written"},"mcpServers":{"a":{"command":"npx"},"b":{"command":"npx","launch":"flatten"}}}`, LoadOptions{})
	if !cfg.Server("a").AsWritten || cfg.Server("b").AsWritten {
		t.Fatalf("with defaults as-written: a %v b %v", cfg.Server("a").AsWritten, cfg.Server("b").AsWritten)
	}
	for doc, want := range map[string]string{
		`{"mcpServers":{"a":{"command":"npx","launch":"asis"}}}`:                  `c.json: mcpServers.a.launch: "asis" is not a launch mode (valid: "flatten", "as-written")`,
		`{"defaults":{"launch":"As-Written"},"mcpServers":{"a":{"command":"x"}}}`: `c.json: defaults.launch: "As-Written" is not a launch mode (valid: "flatten", "as-written")`,
		`{"mcpServers":{"a":{"command":"npx","launch":false}}}`:                   `c.json: mcpServers.a.launch: must be a string, not a boolean (write "false")`,
	} {
		if _, err := Parse([]byte(doc), "c.json", LoadOptions{}); err == nil || err.Error() != want {
			t.Errorf("%s: error %v, want %s", doc, err, want)
		}
	}
	old := mustParse(t, `{"mcpServers":{"a":{"command":"npx","args":["-y","pkg"]}}}`, LoadOptions{})
	now := mustParse(t, `{"mcpServers":{"a":{"command":"npx","args":["-y","pkg"],"launch":"as-written"}}}`, LoadOptions{})
	if c := CompareServer(old.Server("a"), now.Server("a")); c.Action != ActionUpdated || !slices.Equal(c.Fields, []string{"launch"}) {
		t.Errorf("a change of launch: %+v", c)
	}
	if old.Server("a").LaunchHash() != now.Server("a").LaunchHash() {
		t.Error("the launch mode changed the launch hash (the cached lists)")
	}
}

// "holdTimeout" sets the bound of a held call; it must be positive.
func TestHoldTimeoutSetting(t *testing.T) {
	if cfg := mustParse(t, `{"mcpServers":{"a":{"command":"srv"}}}`, LoadOptions{}); cfg.HoldTimeout != DefaultHoldTimeout {
		t.Fatalf("default %v", cfg.HoldTimeout)
	}
	if cfg := mustParse(t, `{"holdTimeout":"90s","mcpServers":{"a":{"command":"srv"}}}`, LoadOptions{}); cfg.HoldTimeout != 90*time.Second {
		t.Fatalf("set %v", cfg.HoldTimeout)
	}
	_, err := Parse([]byte(`{"holdTimeout":"0s","mcpServers":{"a":{"command":"srv"}}}`), "c.json", LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "holdTimeout") {
		t.Fatalf("error %v", err)
	}
}

func TestLayering(t *testing.T) {
	s := time.Second
	tests := []struct {
		name  string
		env   map[string]string
		json  string
		check func(t *testing.T, srv *Server)
	}{
		{"env overrides built-in idle and grace", map[string]string{EnvIdleTimeout: "600", EnvStartGrace: "5"},
			`{"mcpServers": {"a": {"command": "x"}}}`,
			func(t *testing.T, srv *Server) {
				eq(t, "idle", srv.IdleTimeout, 600*s)
				eq(t, "grace", srv.StartGrace, 5*s)
			}},
		{"env accepts fractions, durations and 0", map[string]string{EnvIdleTimeout: "0", EnvStartGrace: "1.5"},
			`{"mcpServers": {"a": {"command": "x"}}}`,
			func(t *testing.T, srv *Server) {
				eq(t, "idle", srv.IdleTimeout, 0)
				eq(t, "grace", srv.StartGrace, 1500*time.Millisecond)
			}},
		{"env duration string, empty value ignored", map[string]string{EnvIdleTimeout: "2m", EnvStartGrace: " "},
			`{"mcpServers": {"a": {"command": "x"}}}`,
			func(t *testing.T, srv *Server) {
				eq(t, "idle", srv.IdleTimeout, 2*time.Minute)
				eq(t, "grace", srv.StartGrace, DefaultStartGrace)
			}},
		{"defaults override env", map[string]string{EnvIdleTimeout: "600", EnvStartGrace: "5"},
			`{"defaults": {"idleTimeout": "3m"}, "mcpServers": {"a": {"command": "x"}}}`,
			func(t *testing.T, srv *Server) {
				eq(t, "idle", srv.IdleTimeout, 3*time.Minute)
				eq(t, "grace", srv.StartGrace, 5*s) // env still applies to what defaults leave alone
			}},
		{"server overrides defaults", map[string]string{EnvIdleTimeout: "600"},
			`{"mcpServers": {"a": {"command": "x", "idleTimeout": 0}}, "defaults": {"idleTimeout": "3m", "requestTimeout": 5}}`,
			func(t *testing.T, srv *Server) {
				eq(t, "idle", srv.IdleTimeout, 0)
				eq(t, "request", srv.RequestTimeout, 5*s)
			}},
		{"nested fields layer one by one",
			nil,
			`{"defaults": {"restart": {"policy": "always", "backoff": {"initial": "2s", "jitter": 0}}, "stop": {"stdinWait": "1s"}},
			  "mcpServers": {"a": {"command": "x", "restart": {"maxAttempts": -1, "backoff": {"max": "10s"}}, "stop": {"termWait": 3}}}}`,
			func(t *testing.T, srv *Server) {
				eq(t, "policy", srv.Restart.Policy, lifecycle.RestartAlways)
				eq(t, "maxAttempts", srv.Restart.MaxAttempts, -1)
				eq(t, "backoff", srv.Restart.Backoff, lifecycle.Backoff{Initial: 2 * s, Max: 10 * s, Multiplier: 2, Jitter: 0})
				eq(t, "healthy", srv.Restart.HealthyPeriod, 5*time.Minute)
				eq(t, "stdinWait", srv.StdinWait, 1*s)
				eq(t, "termWait", srv.TermWait, 3*s)
			}},
		{"maxAttempts 0 means 5; max below initial is raised", nil,
			`{"defaults": {"restart": {"backoff": {"initial": "1m"}}}, "mcpServers": {"a": {"command": "x", "restart": {"maxAttempts": 0}}}}`,
			func(t *testing.T, srv *Server) {
				eq(t, "maxAttempts", srv.Restart.MaxAttempts, 5)
				eq(t, "initial", srv.Restart.Backoff.Initial, time.Minute)
				eq(t, "max", srv.Restart.Backoff.Max, time.Minute)
			}},
		{"other settings", nil,
			`{"defaults": {"eager": true, "pin": true, "sharing": "per-session", "prefix": "", "tools": {"deny": ["rm*"]}},
			  "mcpServers": {"a": {"command": "x", "eager": false, "tools": {"allow": ["read_*"]}}}}`,
			func(t *testing.T, srv *Server) {
				eq(t, "eager", srv.Eager, false)
				eq(t, "pin from defaults", srv.Pin, true)
				eq(t, "sharing", srv.Sharing, SharingPerSession)
				eq(t, "prefix", srv.Prefix, "")
				eq(t, "tools", srv.Tools, Filter{Allow: []string{"read_*"}, Deny: []string{"rm*"}})
			}},
		{"client capabilities: all by default, none, or a few", nil,
			`{"defaults": {"clientCapabilities": []}, "mcpServers": {"a": {"command": "x", "clientCapabilities": ["elicitation", "roots"]}}}`,
			func(t *testing.T, srv *Server) {
				eq(t, "clientCapabilities", srv.ClientCapabilities, []string{"elicitation", "roots"})
				if srv.Declares("sampling") || !srv.Declares("roots") {
					t.Errorf("declares sampling %v, roots %v", srv.Declares("sampling"), srv.Declares("roots"))
				}
				if all := (&Server{}); !all.Declares("sampling") {
					t.Error("a server configured with none declares nothing by default")
				}
				if none := (&Server{ClientCapabilities: []string{}}); none.Declares("roots") {
					t.Error("an empty list declares roots")
				}
			}},
		{"prefix set per server; fractional seconds", nil,
			`{"mcpServers": {"a": {"command": "x", "prefix": "fs", "initTimeout": 0.25, "startGrace": "1m30s"}}}`,
			func(t *testing.T, srv *Server) {
				eq(t, "prefix", srv.Prefix, "fs")
				eq(t, "init", srv.InitTimeout, 250*time.Millisecond)
				eq(t, "grace", srv.StartGrace, 90*s)
			}},
		{"null is absent", nil,
			`{"defaults": {"idleTimeout": "1m"}, "mcpServers": {"a": {"command": "x", "idleTimeout": null, "prefix": null, "cwd": null}}}`,
			func(t *testing.T, srv *Server) {
				eq(t, "idle", srv.IdleTimeout, time.Minute)
				eq(t, "prefix", srv.Prefix, "a")
				eq(t, "cwd", srv.Cwd, "")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, tt.json, LoadOptions{LookupEnv: envOf(tt.env)})
			tt.check(t, cfg.Server("a"))
		})
	}
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestPolicy(t *testing.T) {
	cfg := mustParse(t, `{"mcpServers": {
		"a": {"command": "x"},
		"b": {"command": "x", "initTimeout": 0, "restart": {"policy": "never", "healthyPeriod": 0, "maxAttempts": 2}}}}`, LoadOptions{})
	a := cfg.Server("a").Policy()
	if a.Restart != lifecycle.RestartOnFailure || a.MaxAttempts != 5 || a.HealthyPeriod != 5*time.Minute ||
		a.InitTimeout != 30*time.Second || a.Backoff.Jitter != 0.2 || a.Backoff.Max != 32*time.Second {
		t.Errorf("a: %+v", a)
	}
	b := cfg.Server("b").Policy()
	if b.Restart != lifecycle.RestartNever || b.MaxAttempts != 2 || b.HealthyPeriod >= 0 || b.InitTimeout >= 0 {
		t.Errorf("b: %+v (want never, 2 attempts, negative healthy period and init timeout)", b)
	}
}

// TestErrors checks each invalid input yields a problem at exactly the
// given path whose message contains want.
func TestErrors(t *testing.T) {
	tests := []struct {
		name, json string
		env        map[string]string
		path, want string
	}{
		{"not an object", `[1]`, nil, "", "the configuration must be a JSON object, not an array"},
		{"servers not an object", `{"mcpServers": []}`, nil, "mcpServers", "must be an object, not an array"},
		{"server not an object", `{"mcpServers": {"a": "npx"}}`, nil, "mcpServers.a", "must be an object, not a string"},
		{"bad duration", `{"mcpServers": {"files": {"command": "x", "idleTimeout": "10 minutes"}}}`, nil,
			"mcpServers.files.idleTimeout", `"10 minutes" is not a duration (use e.g. "90s" or "10m", or a number of seconds)`},
		{"duration of wrong type", `{"mcpServers": {"a": {"command": "x", "startGrace": true}}}`, nil,
			"mcpServers.a.startGrace", "must be a duration, not a boolean"},
		{"negative duration string", `{"defaults": {"requestTimeout": "-1s"}, "mcpServers": {"a": {"command": "x"}}}`, nil,
			"defaults.requestTimeout", `"-1s" is negative`},
		{"negative duration number", `{"mcpServers": {"a": {"command": "x", "stop": {"termWait": -3}}}}`, nil,
			"mcpServers.a.stop.termWait", "-3 is negative"},
		{"huge duration", `{"mcpServers": {"a": {"command": "x", "initTimeout": 1e300}}}`, nil,
			"mcpServers.a.initTimeout", "out of range"},
		{"missing command and url", `{"mcpServers": {"a": {"args": ["x"]}}}`, nil,
			"mcpServers.a", `missing "command" (to run a local server) or "url" (for a remote one)`},
		{"null command", `{"mcpServers": {"a": {"command": null}}}`, nil, "mcpServers.a", `missing "command"`},
		{"both command and url", `{"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}`, nil,
			"mcpServers.a", "both command and url are set"},
		{"empty command", `{"mcpServers": {"a": {"command": " "}}}`, nil, "mcpServers.a.command", "is empty"},
		{"command empty after expansion", `{"mcpServers": {"a": {"command": "${E}"}}}`, map[string]string{"E": ""},
			"mcpServers.a.command", "is empty after expansion"},
		{"command not a string", `{"mcpServers": {"a": {"command": ["npx"]}}}`, nil, "mcpServers.a.command", "must be a string, not an array"},
		{"args a string", `{"mcpServers": {"a": {"command": "x", "args": "-y"}}}`, nil,
			"mcpServers.a.args", `must be an array of strings, not a string (write ["-y"])`},
		{"arg a number", `{"mcpServers": {"a": {"command": "x", "args": ["a", 2]}}}`, nil,
			"mcpServers.a.args[1]", `must be a string, not a number (write "2")`},
		{"env value a number", `{"mcpServers": {"a": {"command": "x", "env": {"PORT": 8080}}}}`, nil,
			"mcpServers.a.env.PORT", `must be a string, not a number (write "8080")`},
		{"env value null", `{"mcpServers": {"a": {"command": "x", "env": {"PORT": null}}}}`, nil,
			"mcpServers.a.env.PORT", "must be a string, not null"},
		{"env name with =", `{"mcpServers": {"a": {"command": "x", "env": {"A=B": "c"}}}}`, nil,
			`mcpServers.a.env["A=B"]`, `"A=B" is not a valid environment variable name`},
		{"env not an object", `{"mcpServers": {"a": {"command": "x", "env": ["A=B"]}}}`, nil,
			"mcpServers.a.env", "must be an object, not an array"},
		{"header name", `{"mcpServers": {"a": {"url": "http://h/", "headers": {"Bad Header": "v"}}}}`, nil,
			`mcpServers.a.headers["Bad Header"]`, "is not a valid HTTP header name"},
		{"header value line break", `{"mcpServers": {"a": {"url": "http://h/", "headers": {"X": "a\nb"}}}}`, nil,
			"mcpServers.a.headers.X", "contains a line break"},
		{"disabled not a bool", `{"mcpServers": {"a": {"command": "x", "disabled": "true"}}}`, nil,
			"mcpServers.a.disabled", "must be a boolean, not a string (write true without quotes)"},
		{"eager a number", `{"mcpServers": {"a": {"command": "x", "eager": 1}}}`, nil, "mcpServers.a.eager", "must be a boolean, not a number"},
		{"pin a string", `{"defaults": {"pin": "yes"}, "mcpServers": {"a": {"command": "x"}}}`, nil, "defaults.pin", "must be a boolean, not a string"},
		{"url scheme", `{"mcpServers": {"a": {"url": "ftp://h/"}}}`, nil, "mcpServers.a.url", "must be an http:// or https:// URL"},
		{"url without host", `{"mcpServers": {"a": {"url": "https:///mcp"}}}`, nil, "mcpServers.a.url", "has no host"},
		{"url relative", `{"mcpServers": {"a": {"url": "mcp.example.com/mcp"}}}`, nil, "mcpServers.a.url", "must be an http:// or https:// URL"},
		{"unknown transport", `{"mcpServers": {"a": {"command": "x", "type": "websocket"}}}`, nil,
			"mcpServers.a.type", `"websocket" is not a transport (valid: "stdio", "http", "streamable-http", "sse")`},
		{"stdio type with url", `{"mcpServers": {"a": {"type": "stdio", "url": "http://h/"}}}`, nil,
			"mcpServers.a.type", `"stdio" needs command, but this server has url`},
		{"http type with command", `{"mcpServers": {"a": {"transport": "sse", "command": "x"}}}`, nil,
			"mcpServers.a.transport", `"sse" needs url, but this server has command`},
		{"type and transport disagree", `{"mcpServers": {"a": {"url": "http://h/", "type": "http", "transport": "sse"}}}`, nil,
			"mcpServers.a.transport", `says "sse" but type says "streamable-http"`},
		{"bad server name", `{"mcpServers": {"my server": {"command": "x"}}}`, nil,
			`mcpServers["my server"]`, `"my server" is not a valid server name: use only letters, digits, '_', '.' and '-'`},
		{"slash in server name", `{"mcpServers": {"a/b": {"command": "x"}}}`, nil, `mcpServers["a/b"]`, "is not a valid server name"},
		{"dot server name", `{"mcpServers": {".": {"command": "x"}}}`, nil, `mcpServers["."]`, `"." is not a valid server name`},
		{"dot-dot server name", `{"mcpServers": {"..": {"command": "x"}}}`, nil, `mcpServers[".."]`, `".." is not a valid server name`},
		{"empty server name", `{"mcpServers": {"": {"command": "x"}}}`, nil, `mcpServers[""]`, "server name is empty"},
		{"dotted name path", `{"mcpServers": {"a.b": {"command": "x", "eager": 1}}}`, nil, `mcpServers["a.b"].eager`, "must be a boolean"},
		{"bad prefix", `{"mcpServers": {"a": {"command": "x", "prefix": "a b"}}}`, nil,
			"mcpServers.a.prefix", `"a b" is not a valid prefix`},
		{"unknown sharing", `{"mcpServers": {"a": {"command": "x", "sharing": "global"}}}`, nil,
			"mcpServers.a.sharing", `"global" is not a sharing mode (valid: "shared", "per-session", "per-identity")`},
		{"unknown client capability", `{"mcpServers": {"a": {"command": "x", "clientCapabilities": ["roots", "tasks"]}}}`, nil,
			"mcpServers.a.clientCapabilities[1]", `"tasks" is not a client capability mcpvisor carries (valid: "roots", "sampling", "elicitation")`},
		{"client capability twice", `{"defaults": {"clientCapabilities": ["roots", "roots"]}, "mcpServers": {"a": {"command": "x"}}}`, nil,
			"defaults.clientCapabilities[1]", `"roots" is listed twice`},
		{"client capabilities not a list", `{"mcpServers": {"a": {"command": "x", "clientCapabilities": "roots"}}}`, nil,
			"mcpServers.a.clientCapabilities", "must be an array"},
		{"unknown restart policy", `{"defaults": {"restart": {"policy": "sometimes"}}, "mcpServers": {"a": {"command": "x"}}}`, nil,
			"defaults.restart.policy", `"sometimes" is not a restart policy (valid: "on-failure", "never", "always")`},
		{"restart policy type", `{"mcpServers": {"a": {"command": "x", "restart": {"policy": false}}}}`, nil,
			"mcpServers.a.restart.policy", "must be a string, not a boolean"},
		{"fractional maxAttempts", `{"mcpServers": {"a": {"command": "x", "restart": {"maxAttempts": 2.5}}}}`, nil,
			"mcpServers.a.restart.maxAttempts", "2.5 is not a whole number"},
		{"maxAttempts string", `{"mcpServers": {"a": {"command": "x", "restart": {"maxAttempts": "5"}}}}`, nil,
			"mcpServers.a.restart.maxAttempts", "must be a whole number, not a string"},
		{"jitter above 1", `{"mcpServers": {"a": {"command": "x", "restart": {"backoff": {"jitter": 1.5}}}}}`, nil,
			"mcpServers.a.restart.backoff.jitter", "1.5 is outside 0..1"},
		{"jitter negative", `{"mcpServers": {"a": {"command": "x", "restart": {"backoff": {"jitter": -0.1}}}}}`, nil,
			"mcpServers.a.restart.backoff.jitter", "-0.1 is outside 0..1"},
		{"multiplier below 1", `{"mcpServers": {"a": {"command": "x", "restart": {"backoff": {"multiplier": 0.5}}}}}`, nil,
			"mcpServers.a.restart.backoff.multiplier", "0.5 is less than 1"},
		{"backoff initial zero", `{"mcpServers": {"a": {"command": "x", "restart": {"backoff": {"initial": 0}}}}}`, nil,
			"mcpServers.a.restart.backoff.initial", "must be more than 0"},
		{"healthyPeriod bad", `{"mcpServers": {"a": {"command": "x", "restart": {"healthyPeriod": "5 min"}}}}`, nil,
			"mcpServers.a.restart.healthyPeriod", `"5 min" is not a duration`},
		{"restart not an object", `{"mcpServers": {"a": {"command": "x", "restart": "always"}}}`, nil,
			"mcpServers.a.restart", "must be an object, not a string"},
		{"bad glob", `{"mcpServers": {"a": {"command": "x", "tools": {"deny": ["ok", "[a-"]}}}}`, nil,
			"mcpServers.a.tools.deny[1]", `"[a-" is not a valid pattern`},
		{"allow not an array", `{"mcpServers": {"a": {"command": "x", "tools": {"allow": "read_*"}}}}`, nil,
			"mcpServers.a.tools.allow", "must be an array of strings, not a string"},
		{"listen", `{"listen": "7331", "mcpServers": {"a": {"command": "x"}}}`, nil, "listen", `"7331" is not a listen address`},
		{"listen port", `{"listen": "localhost:http", "mcpServers": {"a": {"command": "x"}}}`, nil, "listen", `port "http" is not a number`},
		{"pageSize negative", `{"pageSize": -5, "mcpServers": {"a": {"command": "x"}}}`, nil, "pageSize", "-5 is negative"},
		{"maxSessions zero", `{"maxSessions": 0, "mcpServers": {"a": {"command": "x"}}}`, nil, "maxSessions", "0 is not a positive number of sessions"},
		{"maxInstances negative", `{"mcpServers": {"a": {"command": "x", "maxInstances": -1}}}`, nil, "mcpServers.a.maxInstances", "-1 is not a positive number of instances"},
		{"pageSize fraction", `{"pageSize": 2.5, "mcpServers": {"a": {"command": "x"}}}`, nil, "pageSize", "2.5 is not a whole number"},
		{"server field in defaults", `{"defaults": {"env": {}}, "mcpServers": {"a": {"command": "x"}}}`, nil,
			"defaults.env", `"env" belongs to a server, not to defaults`},
		{"keyring reference without a name", `{"mcpServers": {"a": {"url": "https://h/", "headers": {"Authorization": "Bearer ${keyring:}"}}}}`, nil,
			"mcpServers.a.headers.Authorization", `"${keyring:}" has no keyring name`},
		{"OAuth record reference", `{"mcpServers": {"a": {"command": "x", "env": {"K": "${keyring:oauth/linear}"}}}}`, nil,
			"mcpServers.a.env.K", `"${keyring:oauth/linear}": the name oauth/linear is reserved for mcpvisor's OAuth records`},
		{"OAuth record reference in a header", `{"mcpServers": {"a": {"url": "https://h/", "headers": {"X": "${H:-${keyring:oauth/b}}"}}}}`, nil,
			"mcpServers.a.headers.X", `is reserved for mcpvisor's OAuth records`},
		{"keyring reference in command", `{"mcpServers": {"a": {"command": "${keyring:bin}"}}}`, nil,
			"mcpServers.a.command", `"${keyring:bin}" is not allowed here`},
		{"file reference in url", `{"mcpServers": {"a": {"url": "https://h/${file:/k}"}}}`, nil,
			"mcpServers.a.url", `"${file:/k}" is not allowed here`},
		{"relative file reference", `{"mcpServers": {"a": {"command": "x", "env": {"K": "${file:k.txt}"}}}}`, nil,
			"mcpServers.a.env.K", `"${file:k.txt}": the path must be absolute or start with ~/`},
		{"unset variable in cwd", `{"mcpServers": {"a": {"command": "x", "cwd": "${WORK}/x"}}}`, nil,
			"mcpServers.a.cwd", "environment variable WORK is not set"},
		{"unset variable in stateDir", `{"stateDir": "${STATE}", "mcpServers": {"a": {"command": "x"}}}`, nil,
			"stateDir", "environment variable STATE is not set"},
		{"malformed reference", `{"mcpServers": {"a": {"command": "x", "args": ["${A B}"]}}}`, nil,
			"mcpServers.a.args[0]", `"${A B}" is not a supported reference`},
		{"env override", `{"mcpServers": {"a": {"command": "x"}}}`, map[string]string{EnvIdleTimeout: "ten"},
			EnvIdleTimeout, `"ten" is not a number of seconds`},
		{"env override too large", `{"mcpServers": {"a": {"command": "x"}}}`, map[string]string{EnvIdleTimeout: "1e30"},
			EnvIdleTimeout, `"1e30" seconds is out of range`},
		{"env override negative", `{"mcpServers": {"a": {"command": "x"}}}`, map[string]string{EnvStartGrace: "-4"},
			EnvStartGrace, `"-4" is negative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := parseErr(t, tt.json, LoadOptions{LookupEnv: envOf(tt.env)})
			for _, p := range e.Problems {
				if p.Path == tt.path && strings.Contains(p.Message, tt.want) {
					wantFile := "config.json"
					if strings.HasPrefix(tt.path, "MCP_") {
						wantFile = "environment"
					}
					if p.File != wantFile {
						t.Errorf("problem file = %q, want %q", p.File, wantFile)
					}
					if !strings.Contains(e.Error(), p.String()) {
						t.Errorf("Error() %q does not include %q", e.Error(), p.String())
					}
					return
				}
			}
			t.Errorf("no problem at %q containing %q; got:\n%v", tt.path, tt.want, e)
		})
	}
}

func TestErrorFormat(t *testing.T) {
	e := parseErr(t, `{"mcpServers": {"files": {"command": "x", "idleTimeout": "10 minutes"}}}`, LoadOptions{})
	want := `config.json: mcpServers.files.idleTimeout: "10 minutes" is not a duration (use e.g. "90s" or "10m", or a number of seconds)`
	if e.Error() != want {
		t.Errorf("Error() =\n%s\nwant\n%s", e.Error(), want)
	}
}

// TestAllProblemsCollected checks that problems in different places are
// all reported, in document order, with defaults first.
func TestAllProblemsCollected(t *testing.T) {
	e := parseErr(t, `{
		"mcpServers": {
			"a": {"command": "x", "idleTimeout": "soon"},
			"b": {"url": "gopher://h"},
			"c d": {}
		},
		"listen": "nowhere",
		"defaults": {"sharing": "all"}
	}`, LoadOptions{})
	var got []string
	for _, p := range e.Problems {
		got = append(got, p.Path)
	}
	want := []string{"defaults.sharing", "mcpServers.a.idleTimeout", "mcpServers.b.url", `mcpServers["c d"]`, `mcpServers["c d"]`, "listen"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("paths = %q, want %q\n%v", got, want, e)
	}
	if !strings.HasPrefix(e.Error(), "config.json: 6 problems:\n  config.json: defaults.sharing: ") {
		t.Errorf("Error() = %q", e.Error())
	}
}

func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		name, json string
		line, col  int
		want       string
	}{
		{"trailing comma", "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"},\n  }\n}", 4, 3, "invalid character '}'"},
		{"missing colon", "{\"listen\" \"x\"}", 1, 11, "invalid character '\"' after object key"},
		{"truncated", "{\n  \"mcpServers\": {", 2, 18, "unexpected end of file"},
		{"two values", "{}\n{}", 2, 2, "after the top-level value"},
		{"empty", "  \n", 1, 1, "the file is empty"},
		{"comment", "{\n  // servers\n}", 2, 3, "invalid character '/'"},
		{"bad literal", "{\"a\": tru}", 1, 10, "invalid character '}' in literal true"},
		{"bad escape", "{\n\"a\": \"x\\q\"}", 2, 9, "invalid character 'q' in string escape code"},
		{"bad number", "{\"a\": -}", 1, 8, "in numeric literal"},
		{"unclosed string", "{\"a\": \"x", 1, 9, "unexpected end of file"},
		{"wrong closer", "{\"a\": {\"b\": 1]}", 1, 14, "invalid character ']'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := parseErr(t, tt.json, LoadOptions{})
			if len(e.Problems) != 1 {
				t.Fatalf("problems: %v", e)
			}
			p := e.Problems[0]
			if p.Line != tt.line || p.Column != tt.col || !strings.Contains(p.Message, tt.want) || p.Path != "" {
				t.Errorf("got %d:%d %q (path %q), want %d:%d containing %q", p.Line, p.Column, p.Message, p.Path, tt.line, tt.col, tt.want)
			}
			if prefix := "config.json:" + strconv.Itoa(tt.line) + ":" + strconv.Itoa(tt.col) + ": "; !strings.HasPrefix(e.Error(), prefix) {
				t.Errorf("Error() = %q, want prefix %q", e.Error(), prefix)
			}
		})
	}
}

func TestBOM(t *testing.T) {
	cfg := mustParse(t, "\xef\xbb\xbf{\"mcpServers\": {\"a\": {\"command\": \"x\"}}}", LoadOptions{})
	if len(cfg.Servers) != 1 {
		t.Fatalf("servers: %d", len(cfg.Servers))
	}
}

func TestWarnings(t *testing.T) {
	const doc = `{
		"$schema": "https://example.com/schema.json",
		"globalShortcut": "Ctrl+Space",
		"defaults": {"idleTimout": "1m"},
		"mcpServers": {
			"a": {"command": "x", "comand": "y", "headers": {"X": "1"}, "tools": {"allow": []}, "restart": {"backof": {}}},
			"b": {"url": "https://h/mcp", "args": ["x"], "env": {"A": "b"}, "cwd": "/"},
			"b": {"url": "https://h/mcp"},
			"c": {"command": "x", "disabled": true, "args": ["${NOT_SET}"]}
		}
	}`
	wantPaths := map[string]string{
		"globalShortcut":              "unknown field, ignored",
		"defaults.idleTimout":         `unknown field, ignored; did you mean "idleTimeout"?`,
		"mcpServers.a.comand":         `unknown field, ignored; did you mean "command"?`,
		"mcpServers.a.headers":        "ignored for a local server (command)",
		"mcpServers.a.tools.allow":    `an empty allow list exposes no tools (use ["*"] for all)`,
		"mcpServers.a.restart.backof": `unknown field, ignored; did you mean "backoff"?`,
		"mcpServers.b":                "defined more than once; the last one is used",
		"mcpServers.c.args[0]":        "environment variable NOT_SET is not set: the server fails to start unless it is set then (use ${NOT_SET:-default} for a fallback); the server is disabled",
	}
	cfg := mustParse(t, doc, LoadOptions{})
	if len(cfg.Warnings) != len(wantPaths) {
		t.Errorf("got %d warnings, want %d:\n%s", len(cfg.Warnings), len(wantPaths), strings.Join(cfg.Warnings, "\n"))
	}
	for path, msg := range wantPaths {
		want := "config.json: " + path + ": " + msg
		found := false
		for _, w := range cfg.Warnings {
			found = found || w == want
		}
		if !found {
			t.Errorf("missing warning %q in\n%s", want, strings.Join(cfg.Warnings, "\n"))
		}
	}
	// The last "b" won: no args/env/cwd warnings for the first one.
	for _, w := range cfg.Warnings {
		if strings.Contains(w, "remote server") {
			t.Errorf("warning from the overridden duplicate: %s", w)
		}
	}
	if a := cfg.Server("a"); a.Tools.Allow == nil || a.Tools.Allowed("anything") || a.Headers != nil {
		t.Errorf("a: allow %#v headers %v", a.Tools.Allow, a.Headers)
	}

	// Strict: every warning becomes an error, with the same path.
	e := parseErr(t, doc, LoadOptions{Strict: true})
	if len(e.Problems) != len(wantPaths) {
		t.Errorf("strict: got %d problems, want %d:\n%v", len(e.Problems), len(wantPaths), e)
	}
	for _, p := range e.Problems {
		if _, ok := wantPaths[p.Path]; !ok {
			t.Errorf("strict: unexpected problem %s", p)
		}
		if strings.Contains(p.Message, "ignored;") || strings.HasSuffix(p.Message, ", ignored") {
			t.Errorf("strict message still says ignored: %s", p)
		}
	}

	// Ignored fields of the other kind on an http server.
	cfg = mustParse(t, `{"mcpServers": {"b": {"url": "https://h/mcp", "args": ["x"], "env": {"A": "b"}, "cwd": "/"}}}`, LoadOptions{})
	for _, f := range []string{"args", "env", "cwd"} {
		want := "config.json: mcpServers.b." + f + ": ignored for a remote server (url)"
		if !contains(cfg.Warnings, want) {
			t.Errorf("missing %q in %q", want, cfg.Warnings)
		}
	}
	if b := cfg.Server("b"); b.Args != nil || b.Env != nil || b.Cwd != "" {
		t.Errorf("remote server kept stdio fields: %+v", b)
	}
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// TestErrorCarriesWarnings checks an invalid config still reports its
// warnings: a misspelt field explains the error it causes.
func TestErrorCarriesWarnings(t *testing.T) {
	e := parseErr(t, `{"mcpServers": {"a": {"comand": "npx"}}}`, LoadOptions{})
	if len(e.Problems) != 1 || e.Problems[0].Path != "mcpServers.a" {
		t.Errorf("problems: %v", e)
	}
	want := []string{`config.json: mcpServers.a.comand: unknown field, ignored; did you mean "command"?`}
	if !reflect.DeepEqual(e.Warnings, want) {
		t.Errorf("warnings = %q, want %q", e.Warnings, want)
	}
}

func TestNoServers(t *testing.T) {
	for _, doc := range []string{`{}`, `{"mcpServers": {}}`} {
		cfg := mustParse(t, doc, LoadOptions{})
		if len(cfg.Servers) != 0 || len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "no servers configured") {
			t.Errorf("%s: servers %d warnings %q", doc, len(cfg.Servers), cfg.Warnings)
		}
	}
}

func TestTransports(t *testing.T) {
	tests := []struct {
		server          string
		kind, transport string
	}{
		{`{"command": "x"}`, KindStdio, TransportStdio},
		{`{"command": "x", "type": "stdio"}`, KindStdio, TransportStdio},
		{`{"url": "https://h/mcp"}`, KindHTTP, TransportStreamableHTTP},
		{`{"url": "https://h/mcp", "type": "http"}`, KindHTTP, TransportStreamableHTTP},
		{`{"url": "https://h/mcp", "type": "streamable-http"}`, KindHTTP, TransportStreamableHTTP},
		{`{"url": "https://h/mcp", "type": "streamableHttp"}`, KindHTTP, TransportStreamableHTTP},
		{`{"url": "https://h/mcp", "transport": "Streamable_HTTP"}`, KindHTTP, TransportStreamableHTTP},
		{`{"url": "https://h/sse", "type": "sse"}`, KindHTTP, TransportSSE},
		{`{"url": "http://127.0.0.1:8080/sse", "type": "sse", "transport": "sse"}`, KindHTTP, TransportSSE},
	}
	for _, tt := range tests {
		cfg := mustParse(t, `{"mcpServers": {"s": `+tt.server+`}}`, LoadOptions{})
		s := cfg.Server("s")
		if s.Kind != tt.kind || s.Transport != tt.transport {
			t.Errorf("%s: kind %q transport %q, want %q %q", tt.server, s.Kind, s.Transport, tt.kind, tt.transport)
		}
	}
}

func TestServersSortedAndNames(t *testing.T) {
	cfg := mustParse(t, `{"mcpServers": {"zeta": {"command": "z"}, "Alpha_1": {"command": "a"}, "my.server-2": {"command": "m"}}}`, LoadOptions{})
	var names []string
	for _, s := range cfg.Servers {
		names = append(names, s.Name)
	}
	if want := []string{"Alpha_1", "my.server-2", "zeta"}; !reflect.DeepEqual(names, want) {
		t.Errorf("names = %q, want %q", names, want)
	}
	if cfg.Server("my.server-2").Prefix != "my.server-2" || cfg.Server("nope") != nil {
		t.Error("Server lookup")
	}
}

// TestClaudeDesktopConfig parses a config in the format desktop clients
// write: only command, args and env, plus the client's own keys.
func TestClaudeDesktopConfig(t *testing.T) {
	const doc = `{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "/Users/username/Desktop",
        "/Users/username/Downloads"
      ]
    },
    "github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
      "env": {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_0123456789abcdefghijklmnopqrstuvwxyz"
      }
    },
    "brave-search": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-brave-search"],
      "env": { "BRAVE_API_KEY": "BSA1234567890abcdefghij" }
    },
    "python-tool": {
      "command": "C:\\Program Files\\Python312\\python.exe",
      "args": ["-m", "mcp_server_time", "--local-timezone=America/New_York"]
    }
  }
}`
	cfg := mustParse(t, doc, LoadOptions{Strict: true})
	if len(cfg.Servers) != 4 || len(cfg.Warnings) != 0 {
		t.Fatalf("servers %d, warnings %q", len(cfg.Servers), cfg.Warnings)
	}
	fs := cfg.Server("filesystem")
	if fs.Kind != KindStdio || fs.Command != "npx" || len(fs.Args) != 4 || fs.Args[3] != "/Users/username/Downloads" {
		t.Errorf("filesystem: %+v", fs)
	}
	gh := cfg.Server("github")
	if gh.Env["GITHUB_PERSONAL_ACCESS_TOKEN"] != "ghp_0123456789abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("github env: %v", gh.Env)
	}
	if py := cfg.Server("python-tool"); py.Command != `C:\Program Files\Python312\python.exe` {
		t.Errorf("python command %q", py.Command)
	}
	for _, s := range cfg.Servers {
		if s.IdleTimeout != DefaultIdleTimeout || s.Prefix != s.Name || s.Sharing != SharingShared {
			t.Errorf("%s: defaults not applied: %+v", s.Name, s)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(f, []byte(`{"mcpServers": {"a": {"command": "x", "eager": 1}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(f, LoadOptions{LookupEnv: noEnv})
	if err == nil || !strings.HasPrefix(err.Error(), f+": mcpServers.a.eager: ") {
		t.Errorf("Load error = %v", err)
	}
	_, err = Load(filepath.Join(dir, "missing.json"), LoadOptions{})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestLoadUsesProcessEnvByDefault(t *testing.T) {
	t.Setenv("MCPVISOR_TEST_CMD", "from-env")
	t.Setenv(EnvIdleTimeout, "42")
	cfg, err := Parse([]byte(`{"mcpServers": {"a": {"command": "${MCPVISOR_TEST_CMD}"}}}`), "c.json", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Server("a"); s.Command != "from-env" || s.IdleTimeout != 42*time.Second {
		t.Errorf("command %q idle %v", s.Command, s.IdleTimeout)
	}
}

// "args": [] is no args, as leaving them out is: adding or removing it
// changes nothing a reload would restart the server for.
func TestEmptyArgsAreNoArgs(t *testing.T) {
	without := mustParse(t, `{"mcpServers":{"a":{"command":"srv"}}}`, LoadOptions{}).Server("a")
	empty := mustParse(t, `{"mcpServers":{"a":{"command":"srv","args":[]}}}`, LoadOptions{}).Server("a")
	if c := CompareServer(without, empty); c.Action != ActionUnchanged || len(c.Fields) != 0 {
		t.Fatalf(`adding "args": [] is a change: %+v`, c)
	}
	if empty.Args != nil {
		t.Fatalf(`"args": [] parsed as %#v, want nil`, empty.Args)
	}
}

// The client capabilities a server may be declared are part of its
// launch hash when set (its cached lists are those of its declaration),
// in any order; absent, the hash is what it was without the setting.
func TestLaunchHashClientCapabilities(t *testing.T) {
	base := Server{Kind: KindStdio, Command: "x"}
	some := base
	some.ClientCapabilities = []string{"roots", "sampling"}
	other := base
	other.ClientCapabilities = []string{"sampling", "roots"}
	none := base
	none.ClientCapabilities = []string{}
	if base.LaunchHash() == some.LaunchHash() || some.LaunchHash() != other.LaunchHash() || none.LaunchHash() == base.LaunchHash() || none.LaunchHash() == some.LaunchHash() {
		t.Errorf("hashes: absent %s, roots+sampling %s, sampling+roots %s, none %s", base.LaunchHash(), some.LaunchHash(), other.LaunchHash(), none.LaunchHash())
	}
	// A change of the setting drains the server (its process keeps what
	// it was declared); absent and [] are different settings.
	if c := CompareServer(&base, &none); c.Action != ActionRestarted || !slices.Contains(c.Fields, "clientCapabilities") {
		t.Errorf("absent to []: %+v", c)
	}
	if c := CompareServer(&some, &other); c.Action == ActionRestarted {
		t.Errorf("the same capabilities in another order: %+v", c)
	}
}
