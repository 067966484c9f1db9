package launch

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// These tests run the real npm (npx and npm exec on PATH, npm 7 or later)
// against a fake registry on 127.0.0.1 (testserver.NPMRegistry) with an
// npm cache of their own, and against the npm servers scripts/test-deps.sh
// installs into .deps/npm.

// resolveBound bounds one resolution in these tests.
const resolveBound = 90 * time.Second

// npmFixture is a fake registry with @fx/server published, an npm cache
// and a working directory with no npm project in it.
type npmFixture struct {
	reg        *testserver.NPMRegistry
	cache, dir string
	env        []string
}

func newNPMFixture(t *testing.T) *npmFixture {
	t.Helper()
	reg := testserver.NewNPMRegistry(t)
	publishServer(t, reg, "@fx/server", "1.0.0")
	fx := &npmFixture{reg: reg, cache: t.TempDir(), dir: t.TempDir()}
	fx.env = reg.Env(fx.cache)
	return fx
}

// publishServer publishes an MCP server package with one bin, fx-server.
func publishServer(t *testing.T, reg *testserver.NPMRegistry, name, version string) {
	reg.Publish(t, testserver.NPMPackage{Name: name, Version: version,
		Bin:   map[string]string{"fx-server": "bin/index.js"},
		Files: map[string]string{"bin/index.js": testserver.NodeMCPServer(version), "bin/package.json": `{"type":"commonjs"}`}})
}

// asWritten runs command args as written (which installs what it runs),
// its stdin closed, so that the server it starts exits at once.
func (fx *npmFixture) asWritten(t *testing.T, command string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), resolveBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, command, args...)
	cmd.Env, cmd.Dir = fx.env, fx.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %q: %v\n%s", command, args, err, out)
	}
}

func resolveIn(t *testing.T, env []string, dir, command string, args ...string) (*Form, *Resolution, error) {
	t.Helper()
	f, err := Parse(command, args)
	if err != nil || f == nil {
		t.Fatalf("Parse(%s %q) = %v, %v", command, args, f, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), resolveBound)
	defer cancel()
	r, err := (&Resolver{}).Resolve(ctx, f, command, env, dir)
	return f, r, err
}

func (fx *npmFixture) resolve(t *testing.T, command string, args ...string) (*Form, *Resolution, error) {
	t.Helper()
	return resolveIn(t, fx.env, fx.dir, command, args...)
}

// whoami runs the resolved command line and calls the fixture's tool: what
// it says of itself.
type whoami struct {
	Version string   `json:"version"`
	Args    []string `json:"args"`
	ViaNpm  bool     `json:"viaNpm"`
	Echo    string   `json:"echo"`
}

func run(t *testing.T, env []string, dir, command string, args []string) whoami {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, command, args...)
	cmd.Env, cmd.Dir = env, dir
	cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"whoami"}}` + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", command, args, err, out)
	}
	var reply struct {
		Result struct {
			Content []struct{ Text string } `json:"content"`
		} `json:"result"`
	}
	var w whoami
	if err := json.Unmarshal(out, &reply); err != nil || len(reply.Result.Content) == 0 {
		t.Fatalf("%s %q answered %s", command, args, out)
	}
	if err := json.Unmarshal([]byte(reply.Result.Content[0].Text), &w); err != nil {
		t.Fatalf("%s %q answered %s", command, args, out)
	}
	return w
}

func wantRetry(t *testing.T, err error, says string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || !e.Retry || !strings.Contains(e.Reason, says) {
		t.Fatalf("error %v; want one to retry that says %q", err, says)
	}
}

func wantPermanent(t *testing.T, err error, says string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Retry || !strings.Contains(e.Reason, says) {
		t.Fatalf("error %v; want a permanent one that says %q", err, says)
	}
}

// checkFixture checks a resolution of @fx/server installed in npm's npx
// cache: node and the bin's script there, and that it runs, with the
// server's arguments and environment, without npm.
func (fx *npmFixture) checkFixture(t *testing.T, f *Form, r *Resolution, version string) {
	t.Helper()
	if r.Package != "@fx/server" || r.Version != version || r.Bin != "fx-server" || r.Launcher != f.Launcher || r.Spec != f.Spec() {
		t.Fatalf("resolution %+v", r)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	script := r.Args[len(r.Args)-1]
	if r.Command != node || !strings.HasPrefix(script, filepath.Join(fx.cache, "_npx")+"/") || !strings.HasSuffix(script, "/node_modules/@fx/server/bin/index.js") {
		t.Fatalf("resolution runs %s %q; want %s and the script in the npx cache", r.Command, r.Args, node)
	}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	command, args := r.Argv(f)
	w := run(t, append(fx.env, "FIXTURE_ECHO=from env"), fx.dir, command, args)
	if w.Version != version || w.ViaNpm || !slices.Equal(w.Args, f.Args) || w.Echo != "from env" {
		t.Fatalf("the flattened server says %+v; want version %s, its args %q, not through npm", w, version, f.Args)
	}
}

// A package in npm's npx cache, by every kind of spec: not installed, it
// does not resolve (nothing is installed by trying); once a start as
// written installed it, it resolves to node and its bin, the version
// reported. When the registry moves on, a name, a range or a tag no
// longer resolves (npx would install the new version), a pinned version
// still does.
func TestResolveNpxCache(t *testing.T) {
	fx := newNPMFixture(t)
	specs := []string{"@fx/server", "@fx/server@^1.0.0", "@fx/server@latest", "@fx/server@1.0.0"}
	for _, spec := range specs {
		_, _, err := fx.resolve(t, "npx", "-y", spec)
		wantRetry(t, err, "not installed: npm would install @fx/server@1.0.0")
	}
	// npm makes its npx directories as it looks, but installs nothing.
	filepath.WalkDir(filepath.Join(fx.cache, "_npx"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() || d != nil && d.Name() == "node_modules" {
			t.Errorf("resolving installed something: %s", path)
		}
		return nil
	})
	for _, spec := range specs {
		fx.asWritten(t, "npx", "-y", spec)
		f, r, err := fx.resolve(t, "npx", "-y", spec, "--port", "7", "two words")
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		fx.checkFixture(t, f, r, "1.0.0")
		if got := r.String(); got != "npx → node …/server@1.0.0" {
			t.Errorf("String() = %q", got)
		}
	}
	publishServer(t, fx.reg, "@fx/server", "1.1.0")
	for _, spec := range specs[:3] {
		_, _, err := fx.resolve(t, "npx", "-y", spec)
		wantRetry(t, err, "not installed: npm would install @fx/server@1.1.0 (it has @fx/server@1.0.0)")
	}
	f, r, err := fx.resolve(t, "npx", "--yes", "@fx/server@1.0.0")
	if err != nil {
		t.Fatalf("a pinned version: %v", err)
	}
	fx.checkFixture(t, f, r, "1.0.0")
}

// npm exec and npx -p forms, and a user's .npmrc that omits where packages
// came from from its lockfiles (npm then counts what it has as missing:
// the second, dry-run question finds it).
func TestResolveNPMExecForms(t *testing.T) {
	fx := newNPMFixture(t)
	fx.env = append(fx.env, "npm_config_omit_lockfile_registry_resolved=true")
	fx.asWritten(t, "npx", "-y", "@fx/server")
	fx.asWritten(t, "npx", "-y", "-p", "@fx/server", "fx-server")
	for _, line := range [][]string{
		{"npx", "-y", "@fx/server", "a"},
		{"npm", "exec", "--yes", "--", "@fx/server", "--a"},
		{"npm", "x", "-y", "@fx/server", "b"},
		{"npx", "--yes", "-p", "@fx/server", "fx-server", "c"},
		{"npm", "exec", "-y", "--package=@fx/server", "--", "fx-server", "-c"},
	} {
		f, r, err := fx.resolve(t, line[0], line[1:]...)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		fx.checkFixture(t, f, r, "1.0.0")
	}
}

// The npm servers of .deps/npm, run from that project (npm finds them
// there, with no registry): the package's bin has another name than the
// package; a bin named on its own; npm exec; a range.
func TestResolveLocalProject(t *testing.T) {
	dir := testserver.Deps(t, "npm")
	env := os.Environ()
	for _, c := range []struct {
		line []string
		pkg  string
		bin  string
	}{
		{[]string{"npx", "-y", "@modelcontextprotocol/server-everything"}, "server-everything", "mcp-server-everything"},
		{[]string{"npx", "mcp-server-everything"}, "server-everything", "mcp-server-everything"},
		{[]string{"npx", "-y", "@modelcontextprotocol/server-memory@^2026.8.0"}, "server-memory", "mcp-server-memory"},
		{[]string{"npx", "-p", "@modelcontextprotocol/server-memory", "mcp-server-memory"}, "server-memory", "mcp-server-memory"},
		{[]string{"npm", "exec", "-y", "--", "@modelcontextprotocol/server-filesystem", "/tmp"}, "server-filesystem", "mcp-server-filesystem"},
		{[]string{"npm", "x", "--package=@modelcontextprotocol/server-memory", "--", "mcp-server-memory"}, "server-memory", "mcp-server-memory"},
	} {
		f, r, err := resolveIn(t, env, dir, c.line[0], c.line[1:]...)
		if err != nil {
			t.Fatalf("%q: %v", c.line, err)
		}
		script, err := filepath.EvalSymlinks(filepath.Join(dir, "node_modules", ".bin", c.bin))
		if err != nil {
			t.Fatal(err)
		}
		if r.Package != "@modelcontextprotocol/"+c.pkg || r.Version != "2026.8.31" || r.Bin != c.bin || r.Args[len(r.Args)-1] != script {
			t.Errorf("%q: %+v; want %s in %s", c.line, r, c.bin, script)
		}
		if err := r.Check(); err != nil {
			t.Error(err)
		}
		_ = f
	}
}

// Which bin runs is npm's choice: a package with two bins runs the one
// named like it; with none so named, npm refuses, and so does resolution,
// saying why; -p names one. A bin that is no Node script is not run
// directly; one whose #! line passes Node options keeps them.
func TestResolveBins(t *testing.T) {
	fx := newNPMFixture(t)
	script := testserver.NodeMCPServer("2.0.0")
	fx.reg.Publish(t, testserver.NPMPackage{Name: "@fx/two", Version: "2.0.0",
		Bin: map[string]string{"two": "two.js", "other": "other.js"}, Files: map[string]string{"two.js": script, "other.js": script}})
	fx.reg.Publish(t, testserver.NPMPackage{Name: "@fx/many", Version: "2.0.0",
		Bin: map[string]string{"a": "a.js", "b": "b.js"}, Files: map[string]string{"a.js": script, "b.js": script}})
	fx.reg.Publish(t, testserver.NPMPackage{Name: "@fx/shell", Version: "1.0.0",
		Bin: map[string]string{"shell": "run.sh"}, Files: map[string]string{"run.sh": "#!/bin/sh\nexec cat\n"}})
	fx.reg.Publish(t, testserver.NPMPackage{Name: "@fx/opts", Version: "1.0.0",
		Bin: map[string]string{"opts": "opts.js"}, Files: map[string]string{"opts.js": strings.Replace(script, "#!/usr/bin/env node", "#!/usr/bin/env -S node --no-warnings --stack-size=2000", 1)}})
	for _, spec := range []string{"@fx/two", "@fx/shell", "@fx/opts"} {
		fx.asWritten(t, "npx", "-y", spec)
	}
	fx.asWritten(t, "npx", "-y", "-p", "@fx/many", "a")

	_, r, err := fx.resolve(t, "npx", "-y", "@fx/two")
	if err != nil || r.Bin != "two" || !strings.HasSuffix(r.Args[0], "/two.js") {
		t.Errorf("@fx/two: %+v, %v; want its bin two", r, err)
	}
	_, _, err = fx.resolve(t, "npx", "-y", "@fx/many")
	wantRetry(t, err, "could not determine executable to run")
	f, r, err := fx.resolve(t, "npx", "-y", "-p", "@fx/many", "b")
	if err != nil || r.Bin != "b" || r.Package != "@fx/many" || !strings.HasSuffix(r.Args[0], "/b.js") {
		t.Errorf("-p @fx/many b: %+v, %v", r, err)
	} else if w := run(t, fx.env, fx.dir, r.Command, append(r.Args, f.Args...)); w.Version != "2.0.0" || w.ViaNpm {
		t.Errorf("-p @fx/many b runs %+v", w)
	}
	_, _, err = fx.resolve(t, "npx", "-y", "@fx/shell")
	wantPermanent(t, err, "runs sh, not Node: only Node scripts are run directly")
	f, r, err = fx.resolve(t, "npx", "-y", "@fx/opts", "x")
	if err != nil || !slices.Equal(r.Args[:2], []string{"--no-warnings", "--stack-size=2000"}) || filepath.Base(r.Command) != "node" {
		t.Fatalf("@fx/opts: %+v, %v; want node with the #! line's options", r, err)
	}
	if w := run(t, fx.env, fx.dir, r.Command, append(r.Args, f.Args...)); !slices.Equal(w.Args, []string{"x"}) {
		t.Errorf("@fx/opts runs with args %q", w.Args)
	}
}

// The files of a resolution gone, or its package.json broken: Check says
// which, and resolving again fails, saying why, instead of running
// something else.
func TestResolveDamagedInstall(t *testing.T) {
	fx := newNPMFixture(t)
	fx.asWritten(t, "npx", "-y", "@fx/server")
	_, r, err := fx.resolve(t, "npx", "-y", "@fx/server")
	if err != nil {
		t.Fatal(err)
	}
	pkgJSON := r.Files[2]
	if filepath.Base(pkgJSON) != "package.json" || !strings.HasSuffix(filepath.Dir(pkgJSON), "/@fx/server") {
		t.Fatalf("files %q", r.Files)
	}
	if err := os.WriteFile(pkgJSON, []byte(`{"name": "@fx/server", "version":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fx.resolve(t, "npx", "-y", "@fx/server"); err == nil {
		t.Fatal("a broken package.json resolved")
	} else if e := new(Error); !errors.As(err, &e) || !e.Retry {
		t.Fatalf("a broken package.json: %v; want an error to retry", err)
	} else {
		t.Logf("a broken package.json: %v", err)
	}
	script := r.Args[len(r.Args)-1]
	if err := os.Remove(script); err != nil {
		t.Fatal(err)
	}
	if err := r.Check(); err == nil || !strings.Contains(err.Error(), script) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Check after the script was removed: %v", err)
	}
	if _, _, err := fx.resolve(t, "npx", "-y", "@fx/server"); err == nil {
		t.Fatal("a removed bin resolved")
	}
}

// npm missing, or unable to start: an error that says so, to retry.
// bunx and yarn dlx: never resolved, saying why (pnpm dlx missing: as
// npx missing).
func TestResolveWithoutNPM(t *testing.T) {
	f, _ := Parse("npx", []string{"-y", "pkg"})
	missing := &Resolver{LookPath: func(string) (string, error) { return "", exec.ErrNotFound }}
	_, err := missing.Resolve(t.Context(), f, "npx", os.Environ(), "")
	wantRetry(t, err, "npx is not installed")

	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Fatal(err)
	}
	// npx is a Node script: with no node on its PATH it cannot start.
	_, err = (&Resolver{}).Resolve(t.Context(), f, npx, []string{"PATH=" + t.TempDir(), "HOME=" + t.TempDir()}, t.TempDir())
	wantRetry(t, err, "npx failed: ")

	for _, line := range []string{"pnpm dlx pkg", "pnpx pkg"} {
		w := strings.Fields(line)
		f, err := Parse(w[0], w[1:])
		if err != nil {
			t.Fatal(err)
		}
		_, err = missing.Resolve(t.Context(), f, w[0], nil, "")
		wantRetry(t, err, w[0]+" is not installed")
	}

	found := &Resolver{LookPath: func(p string) (string, error) { return "/bin/" + p, nil }}
	for _, c := range []struct{ line, says string }{
		{"bunx pkg", "bunx is not flattened"},
		{"yarn dlx pkg", "yarn dlx is not flattened"},
	} {
		w := strings.Fields(c.line)
		f, err := Parse(w[0], w[1:])
		if err != nil {
			t.Fatal(err)
		}
		_, err = found.Resolve(t.Context(), f, w[0], nil, "")
		wantPermanent(t, err, c.says)
		_, err = missing.Resolve(t.Context(), f, w[0], nil, "")
		wantRetry(t, err, w[0]+" is not installed")
	}
}

// A package manager that does not answer is given up on when ctx ends,
// its whole process group killed.
func TestResolveBounded(t *testing.T) {
	checkBounded(t, "npx", "-y", "pkg")
}

// checkBounded resolves the command line program args with a program that
// never answers (and leaves a child behind): Resolve returns once its ctx
// ends, and every process of the program is gone. It returns the
// program's directory.
func checkBounded(t *testing.T, program string, args ...string) string {
	t.Helper()
	marker := testserver.NewMarker(t)
	dir := t.TempDir()
	slow := filepath.Join(dir, program)
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nsleep 60 &\nsleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, _ := Parse(program, args)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := (&Resolver{}).Resolve(ctx, f, slow, append(os.Environ(), testserver.MarkerEnv+"="+marker), dir)
	wantRetry(t, err, "did not answer in time")
	if took := time.Since(start); took > 300*time.Millisecond+probeWaitDelay+2*time.Second {
		t.Errorf("Resolve returned %v after its context ended", took)
	}
	testserver.WaitGone(t, marker, 5*time.Second)
	return dir
}
