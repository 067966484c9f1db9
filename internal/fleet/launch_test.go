package fleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/store"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// The launcher state is launch.Flattener's, tested there
// (flattener_test.go). The tests here are of the fleet's wiring: its
// spawns run what the Flattener decides and tell it how they ended (a
// crash loop's retries among them), a reload changes the launch and
// prunes the records in the fleet's store, Server.Refresh and
// Fleet.KeepCompileCache reach the Flattener, and Options.CompileCache
// reaches the flattened starts.

// flatFleet is a fleet whose connector spawns nothing: it asks the
// fleet's Launch hook how each spawn runs, as the stdio connector does,
// records the command line, and fails the start of a command in failing.
// Its resolver answers what the test sets.
type flatFleet struct {
	f   *Fleet
	res *fakeResolver

	mu      sync.Mutex
	spawns  [][]string // command and args of each spawn
	envs    [][]string // the environment of each spawn (nil: mcpvisor's)
	failing map[string]bool
}

type fakeResolver struct {
	mu    sync.Mutex
	calls []resolveCall
	res   *launch.Resolution
	err   error
	block chan struct{} // when set, Resolve waits for it (or ctx)
}

type resolveCall struct {
	command, dir string
	form         *launch.Form
	env          []string
}

func (r *fakeResolver) Resolve(ctx context.Context, f *launch.Form, command string, env []string, dir string) (*launch.Resolution, error) {
	r.mu.Lock()
	r.calls = append(r.calls, resolveCall{command, dir, f, env})
	block, res, err := r.block, r.res, r.err
	r.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, &launch.Error{Reason: "timed out", Retry: true}
		}
	}
	return res, err
}

func (r *fakeResolver) answer(res *launch.Resolution, err error) {
	r.mu.Lock()
	r.res, r.err = res, err
	r.mu.Unlock()
}

func (r *fakeResolver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

type launchConn struct {
	lf        *flatFleet
	sc        *config.Server
	onConnect func(context.Context, Live)
}

func (c *launchConn) Connect(ctx context.Context) (lifecycle.Session, error) {
	spec := proc.Spec{Command: c.sc.Command, Args: c.sc.Args, Dir: c.sc.Cwd}
	for k, v := range c.sc.Env { // as the stdio connector builds it
		spec.Env = append(spec.Env, k+"="+v)
	}
	if spec.Env != nil {
		spec.Env = append(proc.Environ(), spec.Env...)
	}
	var started func(error)
	if hook := c.lf.f.launcher(c.sc); hook != nil {
		started = hook(&spec)
	}
	c.lf.mu.Lock()
	c.lf.spawns = append(c.lf.spawns, append([]string{spec.Command}, spec.Args...))
	c.lf.envs = append(c.lf.envs, spec.Env)
	fail := c.lf.failing[spec.Command]
	c.lf.mu.Unlock()
	var err error
	if fail {
		err = fmt.Errorf("%w: %s cannot start", lifecycle.ErrServerUnavailable, spec.Command)
	}
	if started != nil {
		started(err)
	}
	if err != nil {
		return nil, err
	}
	l := &fakeLive{done: make(chan struct{})}
	c.onConnect(ctx, l)
	return l, nil
}

// newFlatFleet makes a fleet of doc's servers with st as its store (nil:
// none).
func newFlatFleet(t *testing.T, doc string, st *store.Store) *flatFleet {
	return newFlatFleetWith(t, doc, st, Options{})
}

// newFlatFleetWith is newFlatFleet with opts (its logger, resolver and
// connector replaced).
func newFlatFleetWith(t *testing.T, doc string, st *store.Store, opts Options) *flatFleet {
	t.Helper()
	lf := &flatFleet{res: &fakeResolver{}, failing: map[string]bool{}}
	cfg := parseDoc(t, doc)
	opts.Logger, opts.Resolver = discardLogger(), lf.res
	opts.Connector = func(sc *config.Server, _ backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector {
		return &launchConn{lf: lf, sc: sc, onConnect: onConnect}
	}
	f, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	lf.f = f
	if st != nil {
		f.SetStore(st)
	}
	return lf
}

func parseDoc(t *testing.T, doc string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(doc), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (lf *flatFleet) close(t *testing.T) {
	if err := lf.f.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// start wakes the server (a lease taken and released) and returns the
// command line its spawn ran.
func (lf *flatFleet) start(t *testing.T, name string) []string {
	t.Helper()
	s := lf.f.Get(name)
	n := lf.spawnCount()
	l, err := s.Acquire(t.Context(), "")
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	l.Release()
	synctest.Wait() // the resolution a start as written begins, if any, done
	if lf.spawnCount() == n {
		t.Fatalf("%s was already running", name)
	}
	return lf.lastSpawn()
}

// sleep puts the server to sleep.
func (lf *flatFleet) sleep(t *testing.T, name string) {
	t.Helper()
	if err := lf.f.Get(name).Sleep(t.Context()); err != nil {
		t.Fatalf("sleep %s: %v", name, err)
	}
}

func (lf *flatFleet) spawnCount() int {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return len(lf.spawns)
}

func (lf *flatFleet) lastSpawn() []string {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return lf.spawns[len(lf.spawns)-1]
}

func (lf *flatFleet) lastEnv() []string {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return lf.envs[len(lf.envs)-1]
}

func (lf *flatFleet) fail(command string, on bool) {
	lf.mu.Lock()
	lf.failing[command] = on
	lf.mu.Unlock()
}

// fakeInstall is a resolution whose files are real (empty) files under
// dir.
func fakeInstall(t *testing.T, dir, version string) *launch.Resolution {
	t.Helper()
	r := &launch.Resolution{Launcher: launch.NPX, Bin: "fx-server", Package: "@fx/server", Version: version, Spec: "@fx/server",
		Command: filepath.Join(dir, "node"), Args: []string{"--no-warnings", filepath.Join(dir, "index-"+version+".js")}}
	r.Files = []string{r.Command, r.Args[1], filepath.Join(dir, "package.json")}
	for _, f := range r.Files {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

const npxServer = `{"mcpServers":{"s":{"command":"npx","args":["-y","@fx/server","--port","3"],"env":{"TOKEN":"s3cret"},"cwd":"/srv","idleTimeout":"0"}}}`

// A server never resolved starts as written, and is resolved after that
// start succeeded, in the background, with the server's command, env and
// cwd; its next start runs the resolved command line directly, the
// server's own arguments after it. A new fleet on the same store starts
// it flattened at once, resolving nothing.
func TestLaunchFlattensAfterTheFirstStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		lf := newFlatFleet(t, npxServer, st)
		res := fakeInstall(t, t.TempDir(), "1.0.0")
		lf.res.answer(res, nil)
		if ls := lf.f.Get("s").launcher(); ls == nil || ls.Flattened || ls.Name != launch.NPX || ls.Spec != "@fx/server" || !strings.Contains(ls.Reason, "not resolved yet") {
			t.Fatalf("before any start: %+v", ls)
		}
		if got := lf.start(t, "s"); !slices.Equal(got, []string{"npx", "-y", "@fx/server", "--port", "3"}) {
			t.Fatalf("first start ran %q; want the command as written", got)
		}
		if lf.res.count() != 1 {
			t.Fatalf("%d resolutions after the first start", lf.res.count())
		}
		c := lf.res.calls[0]
		if c.command != "npx" || c.dir != "/srv" || c.form.Target != "@fx/server" || !slices.Contains(c.env, "TOKEN=s3cret") {
			t.Errorf("resolved %s in %q (env has TOKEN: %v), form %+v", c.command, c.dir, slices.Contains(c.env, "TOKEN=s3cret"), c.form)
		}
		ls := lf.f.Get("s").launcher()
		if !ls.Flattened || ls.Runs != "npx → node …/server@1.0.0" || ls.Version != "1.0.0" || ls.Last != launch.StartedAsWritten || ls.Reason != "" {
			t.Fatalf("after the resolution: %+v", ls)
		}
		lf.sleep(t, "s")
		want := []string{res.Command, "--no-warnings", res.Args[1], "--port", "3"}
		if got := lf.start(t, "s"); !slices.Equal(got, want) {
			t.Fatalf("second start ran %q, want %q", got, want)
		}
		if lf.res.count() != 1 || lf.f.Get("s").launcher().Last != launch.StartedFlattened {
			t.Fatalf("%d resolutions; launch %+v", lf.res.count(), lf.f.Get("s").launcher())
		}
		lf.close(t)

		again := newFlatFleet(t, npxServer, st)
		defer again.close(t)
		if got := again.start(t, "s"); !slices.Equal(got, want) {
			t.Fatalf("a new fleet's first start ran %q, want %q", got, want)
		}
		if again.res.count() != 0 {
			t.Fatal("a new fleet resolved again what its store holds")
		}
	})
}

// A reload that changes the launch (args) runs it as written, then
// resolves the new one; "launch": "as-written" runs it as written from the
// next start, resolving nothing; "flatten" again uses what is known.
func TestLaunchFollowsTheConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		lf := newFlatFleet(t, npxServer, st)
		defer lf.close(t)
		res := fakeInstall(t, t.TempDir(), "1.0.0")
		lf.res.answer(res, nil)
		lf.start(t, "s")
		reload := func(doc string) {
			t.Helper()
			if _, err := lf.f.Reload(t.Context(), parseDoc(t, doc), false, nil); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		reload(strings.Replace(npxServer, `"3"`, `"4"`, 1))
		if got := lf.start(t, "s"); !slices.Equal(got, []string{"npx", "-y", "@fx/server", "--port", "4"}) {
			t.Fatalf("after a change of args, ran %q", got)
		}
		if lf.res.count() != 2 {
			t.Fatalf("%d resolutions; the new launch was not resolved", lf.res.count())
		}
		lf.sleep(t, "s")
		if got := lf.start(t, "s"); !slices.Equal(got[len(got)-2:], []string{"--port", "4"}) || got[0] != res.Command {
			t.Fatalf("ran %q", got)
		}
		asWritten := strings.Replace(strings.Replace(npxServer, `"3"`, `"4"`, 1), `"idleTimeout":"0"`, `"idleTimeout":"0","launch":"as-written"`, 1)
		reload(asWritten)
		if ls := lf.f.Get("s").launcher(); ls.Flattened || ls.Reason != `"launch": "as-written"` {
			t.Fatalf("as-written: %+v", ls)
		}
		lf.sleep(t, "s")
		if got := lf.start(t, "s"); got[0] != "npx" || lf.res.count() != 2 {
			t.Fatalf("as-written ran %q (%d resolutions)", got, lf.res.count())
		}
		reload(strings.Replace(npxServer, `"3"`, `"4"`, 1))
		lf.sleep(t, "s")
		if got := lf.start(t, "s"); got[0] != res.Command || lf.res.count() != 2 {
			t.Fatalf("back to flatten ran %q (%d resolutions)", got, lf.res.count())
		}
		// The record of the old launch is gone from the store.
		if st.Launch("s", launch.KeyOf(parseDoc(t, npxServer).Server("s"))) != nil {
			t.Error("the store keeps the resolution of a launch no longer configured")
		}
	})
}

// A flattened start that fails is followed by a start as written; when
// that one starts, flattening is what failed: the server runs as written
// until resolved again (after launch.ResolveRetry). When the start as
// written fails too, the failure is the server's, and flattening stays.
func TestLaunchFlattenedStartFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newFlatFleet(t, npxServer, nil)
		defer lf.close(t)
		res := fakeInstall(t, t.TempDir(), "1.0.0")
		lf.res.answer(res, nil)
		lf.start(t, "s")
		lf.sleep(t, "s")
		s := lf.f.Get("s")

		lf.fail(res.Command, true)
		lf.fail("npx", true)
		if _, err := s.Acquire(t.Context(), ""); err == nil {
			t.Fatal("a failing start succeeded")
		}
		synctest.Wait()
		if ls := s.launcher(); !strings.Contains(ls.Reason, "the flattened start failed") {
			t.Fatalf("after a flattened start failed: %+v", ls)
		}
		l, err := s.Acquire(t.Context(), "")
		if err == nil {
			l.Release()
		}
		synctest.Wait()
		if got := lf.lastSpawn(); got[0] != "npx" {
			t.Fatalf("after the flattened start failed, ran %q", got)
		}
		if ls := s.launcher(); !ls.Flattened {
			t.Fatalf("both failed, yet flattening was dropped: %+v", ls)
		}

		lf.fail("npx", false)
		time.Sleep(time.Minute) // past the crash loop's backoff
		if _, err := s.Acquire(t.Context(), ""); err == nil {
			t.Fatal("a failing flattened start succeeded")
		}
		synctest.Wait()
		time.Sleep(4 * time.Second) // the next attempt of the crash loop is due
		if got := lf.start(t, "s"); got[0] != "npx" {
			t.Fatalf("ran %q", got)
		}
		if ls := s.launcher(); ls.Flattened || !strings.Contains(ls.Reason, "where the command as written started") {
			t.Fatalf("flattening failed where as written works: %+v", ls)
		}
		lf.fail(res.Command, false)
		lf.sleep(t, "s")
		if got := lf.start(t, "s"); got[0] != "npx" || lf.res.count() != 1 {
			t.Fatalf("ran %q (%d resolutions) before launch.ResolveRetry", got, lf.res.count())
		}
		lf.sleep(t, "s")
		time.Sleep(launch.ResolveRetry)
		lf.start(t, "s")
		lf.sleep(t, "s")
		if got := lf.start(t, "s"); got[0] != res.Command || lf.res.count() != 2 {
			t.Fatalf("after launch.ResolveRetry, ran %q (%d resolutions)", got, lf.res.count())
		}
	})
}

// Server.Refresh is the Flattener's (launch: TestRefresh): it resolves
// again at once and says what the next start runs; the running process is
// left as it is, and the next start runs what it found. It refuses a
// server with nothing to resolve with an error wrapping
// launch.ErrNoLauncher, which the admin API answers with a 409.
func TestLaunchRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		lf := newFlatFleet(t, `{"mcpServers":{
			"s":{"command":"npx","args":["-y","@fx/server@latest"],"idleTimeout":"0"},
			"plain":{"command":"/usr/bin/fx-server"},
			"npmrun":{"command":"npm","args":["start"]},
			"written":{"command":"npx","args":["-y","x"],"launch":"as-written"},
			"remote":{"url":"https://example.com/mcp"}}}`, st)
		defer lf.close(t)
		dir := t.TempDir()
		lf.res.answer(fakeInstall(t, dir, "1.0.0"), nil)
		lf.start(t, "s")
		lf.sleep(t, "s")
		lf.start(t, "s")
		pid := lf.spawnCount()
		lf.res.answer(fakeInstall(t, dir, "1.1.0"), nil)
		ls, err := lf.f.Get("s").Refresh(t.Context())
		if err != nil || !ls.Flattened || ls.Version != "1.1.0" || ls.Last != launch.StartedFlattened {
			t.Fatalf("Refresh = %+v, %v", ls, err)
		}
		if lf.spawnCount() != pid || state(lf.f.Get("s")) != "running" {
			t.Fatal("Refresh touched the running process")
		}
		if raw := st.Launch("s", launch.KeyOf(lf.f.Get("s").Config())); !strings.Contains(string(raw), `"version":"1.1.0"`) {
			t.Errorf("the fleet's store holds %s", raw)
		}
		lf.sleep(t, "s")
		if got := lf.start(t, "s"); !strings.HasSuffix(got[2], "index-1.1.0.js") {
			t.Fatalf("after the refresh ran %q", got)
		}
		for _, name := range []string{"plain", "npmrun", "written", "remote"} {
			if ls, err := lf.f.Get(name).Refresh(t.Context()); !errors.Is(err, launch.ErrNoLauncher) || ls != nil {
				t.Errorf("Refresh of %s = %+v, %v; want ErrNoLauncher", name, ls, err)
			} else if lf.f.Get(name).launcher() != nil && name != "written" {
				t.Errorf("%s has a launch status", name)
			}
		}
		if lf.res.count() != 2 {
			t.Errorf("%d resolutions; want 2", lf.res.count())
		}
	})
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// A relative compile cache directory is made absolute from mcpvisor's
// working directory: node would resolve it from each server's.
func TestLaunchCompileCacheIsAbsolute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newFlatFleetWith(t, npxServer, nil, Options{CompileCache: "state/node-compile-cache"})
		defer lf.close(t)
		lf.res.answer(fakeInstall(t, t.TempDir(), "1.0.0"), nil)
		lf.start(t, "s")
		lf.sleep(t, "s")
		lf.start(t, "s")
		wd, _ := os.Getwd()
		want := "NODE_COMPILE_CACHE=" + filepath.Join(wd, "state", "node-compile-cache")
		if env := lf.lastEnv(); !slices.Contains(env, want) {
			t.Errorf("flattened start's env has no %s: %q", want, env)
		}
	})
}

// Fleet.KeepCompileCache runs the Flattener's pruner (launch:
// TestKeepCompileCache) on the fleet's background work: it bounds the
// fleet's compile cache at once — a node version idle past the policy's
// MaxIdle goes, the one in use stays — and ends with Close.
func TestKeepCompileCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cache := t.TempDir()
		write := func(rel string, age time.Duration) string {
			t.Helper()
			path := filepath.Join(cache, rel)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte("code"), 0o600); err != nil {
				t.Fatal(err)
			}
			when := time.Now().Add(-age) // the bubble's clock
			if err := os.Chtimes(path, when, when); err != nil {
				t.Fatal(err)
			}
			return path
		}
		idle := launch.DefaultPrunePolicy.MaxIdle
		old := write("v20.0.0-x64-a-0/f", idle+time.Hour)
		used := write("v22.0.0-x64-b-0/f", time.Hour)
		lf := newFlatFleetWith(t, npxServer, nil, Options{CompileCache: cache})
		lf.f.KeepCompileCache()
		synctest.Wait()
		if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("an idle node version's entry stays at start (%v)", err)
		}
		if _, err := os.Stat(used); err != nil {
			t.Errorf("the node version in use lost its entry: %v", err)
		}
		// The pruner ends with the fleet. A bounded Close makes one that
		// did not fail the test (and the bubble report it blocked)
		// rather than wait for it one pruning day after another.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := lf.f.Close(ctx); err != nil {
			t.Fatalf("the pruner did not end with the fleet: %v", err)
		}
	})
}
