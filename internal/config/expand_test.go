package config

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/secret"
)

func TestExpand(t *testing.T) {
	env := envOf(map[string]string{"HOME": "/home/u", "EMPTY": "", "TOKEN": "s3cret", "DOLLAR": "$X"})
	tests := []struct {
		in, want string
		missing  []string
		err      string
	}{
		{in: "plain", want: "plain"},
		{in: "${HOME}/docs", want: "/home/u/docs"},
		{in: "a${HOME}b${TOKEN}c", want: "a/home/ubs3cretc"},
		{in: "${UNSET:-fallback}", want: "fallback"},
		{in: "${HOME:-fallback}", want: "/home/u"},
		{in: "${EMPTY:-fallback}", want: "fallback"},
		{in: "${EMPTY}", want: ""},
		{in: "${UNSET:-}", want: ""},
		{in: "${UNSET:-${HOME}/x}", want: "/home/u/x"},
		{in: "${UNSET:-${ALSO_UNSET:-deep}}", want: "deep"},
		{in: "${HOME:-${ALSO_UNSET}}", want: "/home/u"}, // unused default: no error
		{in: "${UNSET:-a:-b}", want: "a:-b"},
		{in: "${UNSET:-{x}}", want: "{x}"}, // the first } closes: default "{x", then a literal }
		{in: "$$", want: "$"},
		{in: "$${HOME}", want: "${HOME}"},
		{in: "$$$${HOME}", want: "$${HOME}"},
		{in: "price: 5$ and $HOME", want: "price: 5$ and $HOME"},
		{in: "end$", want: "end$"},
		{in: "${DOLLAR}", want: "$X"}, // values are not expanded again
		{in: "${UNSET}", want: "", missing: []string{"UNSET"}},
		{in: "${A}${B:-${C}}", want: "", missing: []string{"A", "C"}},
		{in: "${", err: `unterminated "${"`},
		{in: "x ${HOME", err: `unterminated "${HOME"`},
		{in: "${}", err: `empty variable name in "${}"`},
		{in: "${1X}", err: `"${1X}" is not a supported reference`},
		{in: "${A-b}", err: `"${A-b}" is not a supported reference`},
		{in: "${A:=b}", err: `"${A:=b}" is not a supported reference`},
		{in: "${UNSET:-${}", err: "unterminated"},
	}
	for _, tt := range tests {
		got, err := expand(tt.in, env)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("expand(%q) error = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got.value != tt.want || !reflect.DeepEqual(got.missing, tt.missing) {
			t.Errorf("expand(%q) = %q missing %q err %v, want %q missing %q", tt.in, got.value, got.missing, err, tt.want, tt.missing)
		}
	}
}

// TestExpandEverywhere checks expansion in each field that allows it, and
// not in the others.
func TestExpandEverywhere(t *testing.T) {
	env := envOf(map[string]string{"BIN": "/opt/bin", "DIR": "/srv", "TOKEN": "tok", "HOST": "h.example"})
	cfg := mustParse(t, `{
		"stateDir": "${DIR}/state",
		"mcpServers": {
			"local": {"command": "${BIN}/server", "args": ["--root", "${DIR}", "--cost=5$$", "${MISSING:-x}"],
			          "env": {"API_TOKEN": "${TOKEN}", "LITERAL": "$$HOME", "${NOT}": "kept"}, "cwd": "${DIR}/work", "tools": {"deny": ["${y}"]}},
			"remote": {"url": "https://${HOST}/mcp?k=${TOKEN}", "headers": {"Authorization": "Bearer ${TOKEN}"}}
		}
	}`, LoadOptions{LookupEnv: env})
	if cfg.StateDir != "/srv/state" {
		t.Errorf("stateDir %q", cfg.StateDir)
	}
	l := cfg.Server("local")
	eq(t, "command", l.Command, "/opt/bin/server")
	// args, env and headers keep their references, resolved at start.
	eq(t, "args", l.Args, []string{"--root", "${DIR}", "--cost=5$$", "${MISSING:-x}"})
	eq(t, "resolved args", resolveAll(t, l.Args, env), []string{"--root", "/srv", "--cost=5$", "x"})
	eq(t, "env", l.Env, map[string]string{"API_TOKEN": "${TOKEN}", "LITERAL": "$$HOME", "${NOT}": "kept"})
	eq(t, "resolved env", resolveAll(t, []string{l.Env["API_TOKEN"], l.Env["LITERAL"], l.Env["${NOT}"]}, env), []string{"tok", "$HOME", "kept"})
	eq(t, "cwd", l.Cwd, "/srv/work")
	eq(t, "tools are patterns, not expanded", l.Tools.Deny, []string{"${y}"})
	r := cfg.Server("remote")
	eq(t, "url", r.URL, "https://h.example/mcp?k=tok")
	eq(t, "headers", r.Headers, map[string]string{"Authorization": "Bearer ${TOKEN}"})
	eq(t, "resolved headers", resolveAll(t, []string{r.Headers["Authorization"]}, env), []string{"Bearer tok"})
}

func resolveAll(t *testing.T, in []string, env func(string) (string, bool)) []string {
	t.Helper()
	out := make([]string, len(in))
	for i, s := range in {
		v, err := secret.Resolve(context.Background(), s, secret.Sources{LookupEnv: env})
		if err != nil {
			t.Fatalf("resolving %q: %v", s, err)
		}
		out[i] = v
	}
	return out
}

// TestUnsetReferenceWarns: an unset variable in a value resolved at start
// is no load error but a warning (validate shows it), and an error with
// Strict.
func TestUnsetReferenceWarns(t *testing.T) {
	doc := `{"mcpServers": {"a": {"url": "https://h/", "headers": {"Authorization": "Bearer ${TOKEN}", "X": "${env:ALSO:-d}"}},
		"b": {"command": "x", "env": {"K": "${keyring:github.TOKEN}", "F": "${file:/run/k}"}, "args": ["${HOME:-${NOPE}}"]}}}`
	cfg := mustParse(t, doc, LoadOptions{LookupEnv: envOf(map[string]string{"HOME": "/h"})})
	want := "config.json: mcpServers.a.headers.Authorization: environment variable TOKEN is not set: the server fails to start unless it is set then (use ${TOKEN:-default} for a fallback)"
	if len(cfg.Warnings) != 1 || cfg.Warnings[0] != want {
		t.Errorf("warnings %q, want [%q]", cfg.Warnings, want)
	}
	_, err := Parse([]byte(doc), "config.json", LoadOptions{Strict: true, LookupEnv: envOf(nil)})
	if err == nil || !strings.Contains(err.Error(), "environment variable TOKEN is not set") {
		t.Errorf("strict: %v", err)
	}
}
