package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// These tests run the real pnpm, one of each line scripts/test-deps.sh
// installs: .deps/pnpm10 (in JavaScript, run by node) and .deps/pnpm12
// (native), against the fake registry, with a cache, store and config of
// their own.

// pnpmFixture is an npmFixture whose pnpm (of line major) is first on
// PATH, with pnpm's directories in the test's own.
type pnpmFixture struct {
	*npmFixture
	home string
}

func newPNPMFixture(t *testing.T, major string) *pnpmFixture {
	t.Helper()
	bin := filepath.Join(testserver.Deps(t, "pnpm"+major), "node_modules", ".bin")
	if _, err := os.Stat(filepath.Join(bin, "pnpm")); err != nil {
		t.Fatalf("pnpm %s is not installed: run scripts/test-deps.sh (%v)", major, err)
	}
	fx := &pnpmFixture{npmFixture: newNPMFixture(t), home: t.TempDir()}
	var env []string
	for _, kv := range fx.env {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(strings.ToLower(kv), "pnpm_") && !strings.HasPrefix(kv, "XDG_") && !strings.HasPrefix(kv, "NODE_PATH=") {
			env = append(env, kv)
		}
	}
	fx.env = append(env, "PATH="+bin+string(filepath.ListSeparator)+os.Getenv("PATH"),
		"XDG_CACHE_HOME="+filepath.Join(fx.home, "cache"), "XDG_DATA_HOME="+filepath.Join(fx.home, "data"),
		"XDG_STATE_HOME="+filepath.Join(fx.home, "state"), "XDG_CONFIG_HOME="+filepath.Join(fx.home, "config"),
		"pnpm_config_registry="+fx.reg.URL)
	return fx
}

// program is pnpm's (or pnpx's) path in the fixture.
func (fx *pnpmFixture) program(t *testing.T, name string) string {
	for _, kv := range fx.env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			return filepath.Join(filepath.SplitList(p)[0], name)
		}
	}
	t.Fatal("no PATH")
	return ""
}

func (fx *pnpmFixture) resolve(t *testing.T, command string, args ...string) (*Form, *Resolution, error) {
	t.Helper()
	return resolveIn(t, fx.env, fx.dir, fx.program(t, command), args...)
}

func (fx *pnpmFixture) asWritten(t *testing.T, command string, args ...string) {
	t.Helper()
	fx.npmFixture.asWritten(t, fx.program(t, command), args...)
}

// dlxLeftovers lists what is in pnpm's dlx cache besides its installs:
// each key directory may hold its pkg link and the install it points to,
// or nothing.
func (fx *pnpmFixture) dlxLeftovers(t *testing.T) []string {
	t.Helper()
	var out []string
	keys, _ := os.ReadDir(filepath.Join(fx.home, "cache", "pnpm", "dlx"))
	for _, k := range keys {
		kd := filepath.Join(fx.home, "cache", "pnpm", "dlx", k.Name())
		target, _ := os.Readlink(filepath.Join(kd, "pkg"))
		entries, _ := os.ReadDir(kd)
		if target == "" && len(entries) > 0 {
			// pnpm 12 leaves an empty key directory where an install
			// failed (and uses it for the next): one with no pkg link
			// holds nothing.
			out = append(out, kd)
			continue
		}
		for _, e := range entries {
			if e.Name() != "pkg" && e.Name() != filepath.Base(target) {
				out = append(out, filepath.Join(kd, e.Name()))
			}
		}
	}
	return out
}

// checkPNPM checks a resolution of @fx/server installed by pnpm dlx: the
// node pnpm's shim runs, the script in pnpm's cache, the NODE_PATH the
// shim sets, and that it runs, with the server's arguments and
// environment, without pnpm.
func (fx *pnpmFixture) checkPNPM(t *testing.T, f *Form, r *Resolution, bin, version string) {
	t.Helper()
	if r.Package != "@fx/server" || r.Version != version || r.Bin != bin || r.Launcher != PNPMDlx || r.Spec != f.Spec() {
		t.Fatalf("resolution %+v", r)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(fx.home, "cache", "pnpm", "dlx") + "/"
	if r.Command != node || len(r.Args) != 1 || !strings.HasPrefix(r.Args[0], cache) || !strings.HasSuffix(r.Args[0], "/node_modules/@fx/server/bin/index.js") {
		t.Fatalf("resolution runs %s %q; want %s and the script in pnpm's dlx cache", r.Command, r.Args, node)
	}
	if !strings.HasPrefix(r.NodePath, cache) {
		t.Fatalf("NODE_PATH %q; want the shim's, in pnpm's dlx cache", r.NodePath)
	}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	command, args := r.Argv(f)
	w := run(t, r.Environ(append(fx.env, "FIXTURE_ECHO=from env")), fx.dir, command, args)
	if w.Version != version || !slices.Equal(w.Args, f.Args) || w.Echo != "from env" {
		t.Fatalf("the flattened server says %+v; want version %s, its args %q", w, version, f.Args)
	}
	if got, want := r.String(), "pnpm dlx → node …/server@"+version; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func forEachPNPM(t *testing.T, test func(t *testing.T, fx *pnpmFixture)) {
	for _, major := range []string{"10", "12"} {
		t.Run("pnpm"+major, func(t *testing.T) {
			t.Parallel()
			test(t, newPNPMFixture(t, major))
		})
	}
}

// pnpm dlx, by every kind of spec and form: not installed, it does not
// resolve, and trying installs nothing (nor leaves anything in pnpm's
// cache, when pnpm knows the version but has not installed it); once a
// start as written installed it, it resolves to the node and script
// pnpm's shim runs, with the shim's NODE_PATH, the version reported.
func TestResolvePNPMDlx(t *testing.T) {
	forEachPNPM(t, func(t *testing.T, fx *pnpmFixture) {
		publishServer(t, fx.reg, "@fx/server", "1.0.0")
		fx.reg.Publish(t, testserver.NPMPackage{Name: "@fx/server", Version: "1.1.0", NotLatest: true,
			Bin:   map[string]string{"fx-server": "bin/index.js"},
			Files: map[string]string{"bin/index.js": testserver.NodeMCPServer("1.1.0"), "bin/package.json": `{"type":"commonjs"}`}})
		_, _, err := fx.resolve(t, "pnpm", "dlx", "@fx/server")
		wantRetry(t, err, "not installed: pnpm dlx would install @fx/server")

		// Each spec as pnpm keys it: pnpm 10 by the version it resolves
		// to, pnpm 12 by the spec as written.
		for _, line := range [][]string{
			{"pnpm", "dlx", "@fx/server", "--port", "7", "two words"},
			{"pnpm", "dlx", "--silent", "@fx/server@~1.0.0", "a"},
			{"pnpm", "dlx", "@fx/server@latest"},
			{"pnpm", "dlx", "--", "@fx/server", "--a"},
			{"pnpx", "@fx/server", "b"},
		} {
			fx.asWritten(t, line[0], line[1:]...)
			f, r, err := fx.resolve(t, line[0], line[1:]...)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			fx.checkPNPM(t, f, r, "fx-server", "1.0.0")
		}
		fx.asWritten(t, "pnpm", "dlx", "--package=@fx/server", "fx-server")
		f, r, err := fx.resolve(t, "pnpm", "dlx", "--package=@fx/server", "fx-server", "c")
		if err != nil {
			t.Fatalf("--package: %v", err)
		}
		fx.checkPNPM(t, f, r, "fx-server", "1.0.0")

		// A version pnpm knows of (its metadata is cached) but has not
		// installed: pnpm would install it, and trying leaves nothing
		// (--silent, which would hide why pnpm failed, is not passed on).
		_, _, err = fx.resolve(t, "pnpm", "dlx", "--silent", "@fx/server@1.1.0")
		wantRetry(t, err, "not installed: pnpm dlx would install @fx/server@1.1.0")
		_, _, err = fx.resolve(t, "pnpm", "dlx", "--reporter", "silent", "@fx/server@1.1.0")
		wantRetry(t, err, "not installed: pnpm dlx would install @fx/server@1.1.0")
		// An install pnpm counts as expired is one it would install
		// again: not taken.
		fx.env = append(fx.env, "npm_config_dlx_cache_max_age=0", "pnpm_config_dlx_cache_max_age=0")
		_, _, err = fx.resolve(t, "pnpm", "dlx", "@fx/server")
		wantRetry(t, err, "not installed: pnpm dlx would install @fx/server")
		fx.env = fx.env[:len(fx.env)-2]
		if l := fx.dlxLeftovers(t); len(l) != 0 {
			t.Errorf("resolving left %q in pnpm's dlx cache", l)
		}
		fx.asWritten(t, "pnpm", "dlx", "@fx/server@1.1.0")
		f, r, err = fx.resolve(t, "pnpm", "dlx", "@fx/server@1.1.0")
		if err != nil {
			t.Fatalf("1.1.0 once installed: %v", err)
		}
		fx.checkPNPM(t, f, r, "fx-server", "1.1.0")
	})
}

// Which bin runs is pnpm's choice: a package with two bins runs the one
// named like it; with none so named, pnpm refuses, and so does
// resolution, saying why; --package names one. A bin that is no Node
// script is not run directly.
func TestResolvePNPMBins(t *testing.T) {
	forEachPNPM(t, func(t *testing.T, fx *pnpmFixture) {
		script := testserver.NodeMCPServer("2.0.0")
		fx.reg.Publish(t, testserver.NPMPackage{Name: "@fx/two", Version: "2.0.0",
			Bin: map[string]string{"two": "two.js", "other": "other.js"}, Files: map[string]string{"two.js": script, "other.js": script}})
		fx.reg.Publish(t, testserver.NPMPackage{Name: "@fx/many", Version: "2.0.0",
			Bin: map[string]string{"a": "a.js", "b": "b.js"}, Files: map[string]string{"a.js": script, "b.js": script}})
		fx.reg.Publish(t, testserver.NPMPackage{Name: "@fx/shell", Version: "1.0.0",
			Bin: map[string]string{"shell": "run.sh"}, Files: map[string]string{"run.sh": "#!/bin/sh\nexec cat\n"}})
		for _, spec := range []string{"@fx/two", "@fx/shell"} {
			fx.asWritten(t, "pnpm", "dlx", spec)
		}
		fx.asWritten(t, "pnpm", "dlx", "--package=@fx/many", "a")

		_, r, err := fx.resolve(t, "pnpm", "dlx", "@fx/two")
		if err != nil || r.Bin != "two" || !strings.HasSuffix(r.Args[0], "/two.js") {
			t.Errorf("@fx/two: %+v, %v; want its bin two", r, err)
		}
		_, _, err = fx.resolve(t, "pnpm", "dlx", "@fx/many")
		wantPermanent(t, err, "has 2 bins, none named many")
		f, r, err := fx.resolve(t, "pnpm", "dlx", "--package=@fx/many", "b", "x")
		if err != nil || r.Bin != "b" || r.Package != "@fx/many" || !strings.HasSuffix(r.Args[0], "/b.js") {
			t.Errorf("--package=@fx/many b: %+v, %v", r, err)
		} else if w := run(t, r.Environ(fx.env), fx.dir, r.Command, append(r.Args, f.Args...)); w.Version != "2.0.0" || !slices.Equal(w.Args, []string{"x"}) {
			t.Errorf("--package=@fx/many b runs %+v", w)
		}
		_, _, err = fx.resolve(t, "pnpm", "dlx", "@fx/shell")
		wantPermanent(t, err, "runs no Node script")
		_, _, err = fx.resolve(t, "pnpm", "dlx", "--package=@fx/two", "--package=@fx/many", "a")
		wantPermanent(t, err, "more than one --package")
	})
}

// A pnpm that does not answer is given up on when ctx ends, its whole
// process group killed; one that fails says how.
func TestResolvePNPMBoundedAndFailing(t *testing.T) {
	dir := checkBounded(t, "pnpm", "dlx", "pkg")
	f, _ := Parse("pnpm", []string{"dlx", "pkg"})
	failing := filepath.Join(dir, "failing", "pnpm")
	if err := os.MkdirAll(filepath.Dir(failing), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho ' ERR_PNPM_CONFIG  the config is broken' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := (&Resolver{}).Resolve(t.Context(), f, failing, os.Environ(), dir)
	wantRetry(t, err, "pnpm dlx failed: ERR_PNPM_CONFIG  the config is broken")
}

// NODE_PATH as pnpm's shim sets it: NodePath (which holds what the
// launcher gave the shim) in place of any the environment has; the
// environment given is never written.
func TestResolutionEnviron(t *testing.T) {
	r := &Resolution{NodePath: "/a:/b"}
	for _, c := range []struct{ env, want []string }{
		{[]string{"X=1"}, []string{"X=1", "NODE_PATH=/a:/b"}},
		{[]string{"NODE_PATH=", "X=1"}, []string{"X=1", "NODE_PATH=/a:/b"}},
		{[]string{"NODE_PATH=/c", "X=1", "NODE_PATH=/d"}, []string{"X=1", "NODE_PATH=/a:/b"}},
	} {
		env := slices.Clone(c.env)
		if got := r.Environ(env); !slices.Equal(got, c.want) {
			t.Errorf("Environ(%q) = %q, want %q", c.env, got, c.want)
		}
		if !slices.Equal(env, c.env) {
			t.Errorf("Environ wrote its argument: %q", env)
		}
	}
	if got := (&Resolution{}).Environ([]string{"X=1", "NODE_PATH=/c"}); !slices.Equal(got, []string{"X=1", "NODE_PATH=/c"}) {
		t.Errorf("no NodePath: %q", got)
	}
}

// Shims that cannot be read are not flattened, saying why.
func TestReadShim(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ shim, says string }{
		{"#!/usr/bin/env node\nconsole.log(1)\n", "is no pnpm shim"},
		{"#!/bin/sh\nexec sh \"$basedir/../x/run.sh\" \"$@\"\n", "runs no Node script"},
		{"#!/bin/sh\nexport NODE_PATH=\"$HOME/x\"\nexec node  \"$basedir/../x/i.js\" \"$@\"\n", "sets NODE_PATH in a form that cannot be read"},
	} {
		p := filepath.Join(dir, "shim")
		if err := os.WriteFile(p, []byte(c.shim), 0o755); err != nil {
			t.Fatal(err)
		}
		_, _, err := readShim(p)
		wantPermanent(t, err, c.says)
	}
	p := filepath.Join(dir, "shim")
	os.WriteFile(p, []byte("#!/bin/sh\nif [ -z \"$NODE_PATH\" ]; then\n  export NODE_PATH=\"/n/a:/n/b\"\nelse\n  export NODE_PATH=\"/n/a:/n/b:$NODE_PATH\"\nfi\n  exec node  \"$basedir/../p/i.js\" \"$@\"\n"), 0o755)
	target, np, err := readShim(p)
	if err != nil || target != "../p/i.js" || np != "/n/a:/n/b" {
		t.Fatalf("readShim = %q, %q, %v", target, np, err)
	}
}

// A server's environment cannot make the probe install: settings that
// would put pnpm online, or give it a store to install from, in any case
// and spelling, are replaced by the probe's. Nothing is installed, and
// a package once installed still resolves with them set. The --silent
// that quiets pnpm is not passed on (pnpm would not say why it failed),
// and a NODE_PATH of the server's comes after the shim's.
func TestResolvePNPMEnvironmentCannotInstall(t *testing.T) {
	forEachPNPM(t, func(t *testing.T, fx *pnpmFixture) {
		publishServer(t, fx.reg, "@fx/server", "1.0.0")
		userStore := filepath.Join(fx.home, "data", "pnpm", "store")
		base := fx.env
		fx.env = append(slices.Clone(base), "PNPM_CONFIG_OFFLINE=false", "NPM_CONFIG_OFFLINE=false", "pnpm_config_prefer-offline=false",
			"PNPM_CONFIG_STORE_DIR="+userStore, "npm_config_store-dir="+userStore, "PNPM_CONFIG_DLX_CACHE_MAX_AGE=0")
		_, _, err := fx.resolve(t, "pnpm", "dlx", "--silent", "@fx/server")
		wantRetry(t, err, "not installed: pnpm dlx would install @fx/server")
		if links, _ := filepath.Glob(filepath.Join(fx.home, "cache", "pnpm", "dlx", "*", "pkg")); len(links) != 0 {
			t.Fatalf("resolving installed %q", links)
		}
		fx.env = base
		fx.asWritten(t, "pnpm", "dlx", "@fx/server")
		fx.env = append(slices.Clone(base), "PNPM_CONFIG_OFFLINE=false", "PNPM_CONFIG_STORE_DIR="+userStore, "NODE_PATH=/srv/np")
		f, r, err := fx.resolve(t, "pnpm", "dlx", "--silent", "@fx/server", "x")
		if err != nil {
			t.Fatalf("installed, with the settings set: %v", err)
		}
		if !strings.HasSuffix(r.NodePath, ":/srv/np") {
			t.Errorf("NODE_PATH %q; want the shim's, then the server's", r.NodePath)
		}
		fx.checkPNPM(t, f, r, "fx-server", "1.0.0")
		if l := fx.dlxLeftovers(t); len(l) != 0 {
			t.Errorf("resolving left %q in pnpm's dlx cache", l)
		}
	})
}

// Only a registry's packages are resolved: a directory, a tarball, a URL
// or a git host would be installed by the probe itself, offline or not.
func TestRegistrySpec(t *testing.T) {
	for spec, want := range map[string]bool{
		"pkg": true, "pkg@1.2.3": true, "pkg@^1": true, "pkg@latest": true, "@s/pkg": true, "@s/pkg@~1.0.0": true, "pkg@>=1 <2": true,
		"./dir": false, "/abs/dir": false, "../x": false, "~/x": false, "x.tgz": false, "/x/y.tar.gz": false, "pkg@file:../x": false,
		"https://h/x.tgz": false, "github:u/r": false, "u/r": false, "npm:pkg@1": false, "@s": false, "@/x": false, "": false,
		"pkg@link:../x": false,
	} {
		if got := registrySpec(spec); got != want {
			t.Errorf("registrySpec(%q) = %v, want %v", spec, got, want)
		}
	}
	f, _ := Parse("pnpm", []string{"dlx", "/srv/my-server"})
	_, err := (&Resolver{LookPath: func(p string) (string, error) { return "/bin/" + p, nil }}).Resolve(t.Context(), f, "pnpm", nil, "")
	wantPermanent(t, err, "only a package of a registry is")
}

// The bin pnpm links and runs: scopes taken off, unsafe names and paths
// outside the package left out before the rule picks one.
func TestPNPMBinName(t *testing.T) {
	for _, c := range []struct{ name, bin, want, says string }{
		{"@s/p", `"i.js"`, "p", ""},
		{"@s/p", `{"../x":"a.js","tool":"t.js"}`, "tool", ""},
		{"@s/p", `{"pkg":"../x.js","tool":"t.js"}`, "tool", ""},
		{"@s/p", `{"@s/tool":"t.js"}`, "tool", ""},
		{"@s/p", `{"a b":"a.js","p":"p.js","q":"q.js"}`, "p", ""},
		{"@s/p", `{"a":"a.js","b":"b.js"}`, "", "has 2 bins, none named p"},
		{"@s/p", `{"$":"d.js","tool":"t.js"}`, "", "has 2 bins, none named p"},
		{"@s/q", `{"@s/tool":"a.js","tool":"t.js"}`, "", "has 2 bins, none named q"},
		{"@s/p", `{"@s/p":"a.js","p":"t.js"}`, "", "has 2 bins, none named p"},
		{"@s/p", `{"x":"../../x.js"}`, "", "has no bin"},
		{"@s/p", `{"x":"/bin/x.js"}`, "x", ""}, // joined to the package, as pnpm joins it
		{"@s/p", `null`, "", "has no bin"},
	} {
		dir := t.TempDir()
		pkgDir := filepath.Join(dir, "node_modules", filepath.FromSlash(c.name))
		if err := os.MkdirAll(pkgDir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"dependencies":{"`+c.name+`":"1.0.0"}}`), 0o644)
		os.WriteFile(filepath.Join(pkgDir, "package.json"), []byte(`{"name":"`+c.name+`","version":"1.0.0","bin":`+c.bin+`}`), 0o644)
		got, err := pnpmBinName(dir)
		if c.says != "" {
			wantPermanent(t, err, c.says)
		} else if err != nil || got != c.want {
			t.Errorf("bin %s: %q, %v; want %q", c.bin, got, err, c.want)
		}
	}
}

// What a failed probe leaves in pnpm 10's dlx cache (named in its error)
// goes if it is nothing but directories, with its key directory if that
// is left empty; nothing else does: a directory with a file, the install
// a pkg link points to, a directory outside a dlx cache.
func TestRemoveProbeLeftover(t *testing.T) {
	root := t.TempDir()
	mk := func(parts ...string) string {
		p := filepath.Join(append([]string{root}, parts...)...)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	say := func(d string) []byte {
		return []byte(d + ":\n ERR_PNPM_NO_OFFLINE_TARBALL  missing\n\nThis error happened while installing a direct dependency of " + d + "\n")
	}
	empty := mk("cache with space", "dlx", "k1", "1a-2b")
	mk("cache with space", "dlx", "k1", "1a-2b", "node_modules", ".pnpm", "x@1", "node_modules")
	removeProbeLeftover(say(empty))
	if _, err := os.Stat(filepath.Dir(empty)); !os.IsNotExist(err) {
		t.Errorf("an empty leftover (and its key directory) stayed: %v", err)
	}

	withFile := mk("dlx", "k2", "1a-2c", "node_modules")
	os.WriteFile(filepath.Join(withFile, "lock.yaml"), nil, 0o644)
	removeProbeLeftover(say(filepath.Dir(withFile)))
	linked := mk("dlx", "k3", "1a-2d", "node_modules")
	os.Symlink("1a-2d", filepath.Join(root, "dlx", "k3", "pkg"))
	removeProbeLeftover(say(filepath.Dir(linked)))
	outside := mk("elsewhere", "k4", "1a-2e")
	removeProbeLeftover(say(outside))
	for _, d := range []string{withFile, linked, outside} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}

// The last guard: a pnpm that installed while it was asked where a
// package is (it put files in the probe's store) is not trusted, whatever
// its answer. This pnpm is a script that does so.
func TestResolvePNPMRefusesAnInstallOfTheProbe(t *testing.T) {
	dir := t.TempDir()
	pnpm := filepath.Join(dir, "pnpm")
	script := `#!/bin/sh
key="` + dir + `/cache/dlx/k"
mkdir -p "$key/d/node_modules/.bin"
ln -sfn d "$key/pkg"
echo '{"dependencies":{"@fx/server":"1.0.0"}}' > "$key/d/package.json"
mkdir -p "$npm_config_store_dir/v10/files/00" && : > "$npm_config_store_dir/v10/files/00/x"
for a; do last="$a"; done
PATH="$key/d/node_modules/.bin:$PATH" exec "$last"
`
	if err := os.WriteFile(pnpm, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f, _ := Parse("pnpm", []string{"dlx", "@fx/server"})
	_, err := (&Resolver{}).Resolve(t.Context(), f, pnpm, os.Environ(), dir)
	wantRetry(t, err, "pnpm dlx installed @fx/server while it was asked where it is")
}
