package launch

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Each launcher form Parse understands: what runs, with which arguments,
// and the command line the probe runs (the confirm and shell options
// replaced by the probe's, put last among the launcher's options).
func TestParse(t *testing.T) {
	probe := []string{"P"}
	cases := []struct {
		command  string
		args     []string
		launcher string
		packages []string
		target   string
		rest     []string
		probe    []string // nil: not checked
	}{
		{"npx", []string{"-y", "@modelcontextprotocol/server-everything"}, NPX, nil, "@modelcontextprotocol/server-everything", nil,
			[]string{"P", "@modelcontextprotocol/server-everything"}},
		{"/usr/local/bin/npx", []string{"--yes", "@scope/pkg@^1.2.0", "/srv/docs", "--flag", "-x"}, NPX, nil, "@scope/pkg@^1.2.0", []string{"/srv/docs", "--flag", "-x"},
			[]string{"P", "@scope/pkg@^1.2.0", "/srv/docs", "--flag", "-x"}},
		{"npx", []string{"pkg@latest", "a"}, NPX, nil, "pkg@latest", []string{"a"}, []string{"P", "pkg@latest", "a"}},
		{"npx", []string{"--yes=true", "pkg@1.2.3"}, NPX, nil, "pkg@1.2.3", nil, []string{"P", "pkg@1.2.3"}},
		{"npx", []string{"-y", "--", "pkg", "--port", "3"}, NPX, nil, "pkg", []string{"--port", "3"}, []string{"P", "--", "pkg", "--port", "3"}},
		{"npx", []string{"-p", "@scope/pkg", "-p=other@2", "the-bin", "x"}, NPX, []string{"@scope/pkg", "other@2"}, "the-bin", []string{"x"},
			[]string{"-p", "@scope/pkg", "-p=other@2", "P", "the-bin", "x"}},
		{"npx", []string{"--package=@scope/pkg", "--package", "b", "--", "bin", "--", "-z"}, NPX, []string{"@scope/pkg", "b"}, "bin", []string{"--", "-z"}, nil},
		{"npx", []string{"--no-install", "pkg"}, NPX, nil, "pkg", nil, []string{"P", "pkg"}},
		{"npx", []string{"-q", "--registry", "https://r.example/", "--prefer-offline", "--cache=/c", "pkg"}, NPX, nil, "pkg", nil,
			[]string{"-q", "--registry", "https://r.example/", "--prefer-offline", "--cache=/c", "P", "pkg"}},
		{"npx", []string{"--shell", "bash", "-y", "pkg"}, NPX, nil, "pkg", nil, []string{"P", "pkg"}},
		{"npx", []string{"--no-color", "--loglevel=silent", "pkg"}, NPX, nil, "pkg", nil, nil},
		{"npm", []string{"exec", "-y", "--", "@scope/pkg", "--a", "b"}, NPMExec, nil, "@scope/pkg", []string{"--a", "b"},
			[]string{"exec", "P", "--", "@scope/pkg", "--a", "b"}},
		{"npm", []string{"x", "--package=@scope/pkg", "--yes", "--", "bin"}, NPMExec, []string{"@scope/pkg"}, "bin", nil,
			[]string{"x", "--package=@scope/pkg", "P", "--", "bin"}},
		{"npm", []string{"exec", "pkg", "arg"}, NPMExec, nil, "pkg", []string{"arg"}, []string{"exec", "P", "pkg", "arg"}},
		{"npm", []string{"exec", "-p", "--", "pkg"}, NPMExec, nil, "pkg", nil, nil}, // npm's -p is --parseable
		{"pnpm", []string{"dlx", "@scope/pkg@1", "a"}, PNPMDlx, nil, "@scope/pkg@1", []string{"a"}, nil},
		{"pnpx", []string{"--package=a", "--package", "b", "bin"}, PNPMDlx, []string{"a", "b"}, "bin", nil, nil},
		{"bunx", []string{"--bun", "pkg", "-x"}, Bunx, nil, "pkg", []string{"-x"}, nil},
		{"bun", []string{"x", "-p", "pkg", "bin"}, Bunx, []string{"pkg"}, "bin", nil, nil},
		{"yarn", []string{"dlx", "-q", "pkg", "a"}, YarnDlx, nil, "pkg", []string{"a"}, nil},
	}
	for _, c := range cases {
		name := c.command + " " + strings.Join(c.args, " ")
		f, err := Parse(c.command, c.args)
		if err != nil || f == nil {
			t.Errorf("%s: %v, %v", name, f, err)
			continue
		}
		if f.Launcher != c.launcher || !slices.Equal(f.Packages, c.packages) || f.Target != c.target || !slices.Equal(f.Args, c.rest) {
			t.Errorf("%s: %s packages %q target %q args %q", name, f.Launcher, f.Packages, f.Target, f.Args)
		}
		if c.probe != nil {
			if got := f.probeArgs(probe...); !slices.Equal(got, c.probe) {
				t.Errorf("%s: probe args %q, want %q", name, got, c.probe)
			}
		}
	}
}

// Not launchers: nil, no error. Launchers in forms not flattened: an
// error that names the part.
func TestParseRefuses(t *testing.T) {
	for _, c := range [][]string{
		{"node", "server.js"}, {"/usr/bin/python3", "-m", "x"}, {"npm", "start"}, {"npm"}, {"pnpm", "install"},
		{"bun", "run", "x"}, {"yarn", "start"}, {"uvx", "mcp-server-fetch"}, {"npxx", "-y", "pkg"},
	} {
		if f, err := Parse(c[0], c[1:]); f != nil || err != nil {
			t.Errorf("%q: %v, %v; want nothing", c, f, err)
		}
	}
	for _, c := range []struct {
		line []string
		want string
	}{
		{[]string{"npx"}, "no package to run"},
		{[]string{"npx", "-y"}, "no package to run"},
		{[]string{"npx", "-y", "--"}, "no package to run"},
		{[]string{"npx", "-c", "mcp-server --x"}, "-c is not followed when flattening (it runs a shell command line)"},
		{[]string{"npx", "--call=x"}, "--call=x is not followed"},
		{[]string{"npx", "-w", "a", "pkg"}, "it runs in workspaces"},
		{[]string{"npx", "--workspaces", "pkg"}, "it runs in workspaces"},
		{[]string{"npx", "--version"}, "it runs no package"},
		{[]string{"npx", "-h"}, "it runs no package"},
		{[]string{"npx", "--frobnicate", "pkg"}, "unknown npm option --frobnicate"},
		{[]string{"npx", "-yq", "pkg"}, "unknown npm option -yq"},
		{[]string{"npx", "--ignore-existing", "pkg"}, "was removed from npx"},
		{[]string{"npx", "-n", "--x", "pkg"}, "was removed from npx"},
		{[]string{"npx", "--registry"}, "--registry has no value"},
		{[]string{"npx", "-p"}, "-p has no value"},
		{[]string{"npx", "--package="}, "names no package"},
		{[]string{"npx", "--no-color", "pkg"}, "right before the package"},
		{[]string{"npm", "exec", "pkg", "--port", "3"}, `put "--" before the package`},
		{[]string{"npm", "--yes", "exec", "pkg"}, "npm's options before exec"},
		{[]string{"npm", "exec"}, "no package to run"},
		{[]string{"pnpm", "dlx", "-c", "x y"}, "-c is not followed"},
		{[]string{"pnpm", "--silent", "dlx", "x"}, "pnpm's options before dlx"},
		{[]string{"bunx", "--weird", "x"}, "unknown option --weird"},
		{[]string{"yarn", "dlx", "-p"}, "-p has no value"},
		{[]string{"yarn", "-q", "dlx", "x"}, "yarn's options before dlx"},
	} {
		f, err := Parse(c.line[0], c.line[1:])
		var nu *NotUnderstood
		if f != nil || !errors.As(err, &nu) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, %v; want a NotUnderstood saying %q", c.line, f, err, c.want)
		}
	}
}

func TestIsLauncher(t *testing.T) {
	for _, c := range []string{"npx", "/usr/bin/npx", "npm", "pnpm", "pnpx", "bunx", "bun", "yarn"} {
		if !IsLauncher(c) {
			t.Errorf("%s is a launcher", c)
		}
	}
	for _, c := range []string{"node", "uvx", "npx.js", "/opt/npm/bin/node", ""} {
		if IsLauncher(c) {
			t.Errorf("%s is no launcher", c)
		}
	}
	if n := testing.AllocsPerRun(100, func() { IsLauncher("/usr/local/bin/npx") }); n != 0 {
		t.Errorf("IsLauncher allocates %v times", n)
	}
}

func TestUnquoteSh(t *testing.T) {
	for in, want := range map[string]string{
		`'mcp-server-everything'`: "mcp-server-everything",
		`'it'\''s'`:               "it's",
		`plain`:                   "plain",
		`''`:                      "",
	} {
		if got, ok := unquoteSh(in); !ok || got != want {
			t.Errorf("unquoteSh(%s) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{`'open`, `a b`, `$(x)`, `'a' b`} {
		if got, ok := unquoteSh(in); ok {
			t.Errorf("unquoteSh(%s) = %q; want a refusal", in, got)
		}
	}
}

// Key: every launch field, and what mcpvisor's environment says about
// where npm and pnpm look, changes it; the rest of that environment does not.
func TestKey(t *testing.T) {
	base := func() (string, []string, map[string]string, string, []string) {
		return "npx", []string{"-y", "pkg"}, map[string]string{"TOKEN": "s3cret"}, "/srv", []string{"PATH=/usr/bin", "HOME=/root", "TERM=xterm"}
	}
	c, a, e, d, in := base()
	k := Key(c, a, e, d, in)
	if len(k) != 64 || strings.Contains(k, "s3cret") {
		t.Fatalf("key %q", k)
	}
	same := Key(c, a, map[string]string{"TOKEN": "s3cret"}, d, []string{"TERM=dumb", "HOME=/root", "SHLVL=3", "PATH=/usr/bin"})
	if same != k {
		t.Error("the key changed with variables npm does not read, or with their order")
	}
	for name, other := range map[string]string{
		"command":         Key("/usr/local/bin/npx", a, e, d, in),
		"args":            Key(c, []string{"-y", "pkg@2"}, e, d, in),
		"split args":      Key(c, []string{"-y pkg"}, e, d, in),
		"env value":       Key(c, a, map[string]string{"TOKEN": "other"}, d, in),
		"env name":        Key(c, a, map[string]string{"TOKEN2": "s3cret"}, d, in),
		"dir":             Key(c, a, e, "/", in),
		"PATH":            Key(c, a, e, d, []string{"PATH=/opt/bin:/usr/bin", "HOME=/root"}),
		"npm_config_*":    Key(c, a, e, d, append(in, "npm_config_cache=/c")),
		"NPM_CONFIG_*":    Key(c, a, e, d, append(in, "NPM_CONFIG_REGISTRY=https://r/")),
		"pnpm_config_*":   Key(c, a, e, d, append(in, "pnpm_config_registry=https://r/")),
		"XDG_CACHE_HOME":  Key(c, a, e, d, append(in, "XDG_CACHE_HOME=/c")),
		"XDG_DATA_HOME":   Key(c, a, e, d, append(in, "XDG_DATA_HOME=/d")),
		"XDG_CONFIG_HOME": Key(c, a, e, d, append(in, "XDG_CONFIG_HOME=/e")),
		"NODE_PATH":       Key(c, a, e, d, append(in, "NODE_PATH=/n")),
	} {
		if other == k {
			t.Errorf("a change of %s left the key as it was", name)
		}
	}
}
