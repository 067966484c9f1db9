package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/store"
)

// flat is a Flattener whose starts spawn nothing: each start asks the
// Flattener's hook how it runs, as the stdio connector does, records the
// command line and the environment, fails the start of a command in
// failing, and tells the hook's outcome function how it ended. Its
// resolver answers what the test sets; its background work runs on
// goroutines close cancels and waits for.
type flat struct {
	fl  *Flattener
	res *fakeResolver
	cfg *config.Config // the config in force

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	bgMu   sync.Mutex
	closed bool

	mu      sync.Mutex
	spawns  [][]string // command and args of each spawn
	envs    [][]string // the environment of each spawn (nil: mcpvisor's)
	failing map[string]bool
}

type fakeResolver struct {
	mu    sync.Mutex
	calls []resolveCall
	res   *Resolution
	err   error
	block chan struct{} // when set, Resolve waits for it (or ctx)
}

type resolveCall struct {
	command, dir string
	form         *Form
	env          []string
}

func (r *fakeResolver) Resolve(ctx context.Context, f *Form, command string, env []string, dir string) (*Resolution, error) {
	r.mu.Lock()
	r.calls = append(r.calls, resolveCall{command, dir, f, env})
	block, res, err := r.block, r.res, r.err
	r.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, &Error{Reason: "timed out", Retry: true}
		}
	}
	return res, err
}

func (r *fakeResolver) answer(res *Resolution, err error) {
	r.mu.Lock()
	r.res, r.err = res, err
	r.mu.Unlock()
}

func (r *fakeResolver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newFlat makes the Flattener of doc's servers with st as its store
// (nil: none).
func newFlat(t *testing.T, doc string, st *store.Store) *flat {
	return newFlatWith(t, doc, st, Options{})
}

// newFlatWith is newFlat with opts (its logger, resolver, store, Go and
// Environ replaced: Environ is proc.Environ, as the fleet's).
func newFlatWith(t *testing.T, doc string, st *store.Store, opts Options) *flat {
	t.Helper()
	h := &flat{res: &fakeResolver{}, cfg: parseDoc(t, doc), failing: map[string]bool{}}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	opts.Logger, opts.Resolver, opts.Go, opts.Environ = discardLogger(), h.res, h.goFn, proc.Environ
	if st != nil {
		opts.Store = st
	}
	fl, err := NewFlattener(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.fl = fl
	return h
}

func (h *flat) goFn(fn func(context.Context)) bool {
	h.bgMu.Lock()
	defer h.bgMu.Unlock()
	if h.closed {
		return false
	}
	h.wg.Go(func() { fn(h.ctx) })
	return true
}

// close ends the background work, and fails the test when it does not
// end within a minute of its context's end.
func (h *flat) close(t *testing.T) {
	t.Helper()
	h.bgMu.Lock()
	h.closed = true
	h.bgMu.Unlock()
	h.cancel()
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the background work did not end with its context")
	}
}

func parseDoc(t *testing.T, doc string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(doc), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
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

func (h *flat) server(name string) *config.Server { return h.cfg.Server(name) }

// try starts the server once, as its connector would, and returns how
// the start ended; what it begins in the background, if anything, is
// done when it returns.
func (h *flat) try(t *testing.T, name string) error {
	t.Helper()
	sc := h.server(name)
	spec := Spawn{Command: sc.Command, Args: sc.Args, Dir: sc.Cwd}
	for k, v := range sc.Env { // as the stdio connector builds it
		spec.Env = append(spec.Env, k+"="+v)
	}
	if spec.Env != nil {
		spec.Env = append(proc.Environ(), spec.Env...)
	}
	var started func(error)
	if hook := h.fl.Hook(sc, func() *config.Server { return h.server(name) }); hook != nil {
		started = hook(&spec)
	}
	h.mu.Lock()
	h.spawns = append(h.spawns, append([]string{spec.Command}, spec.Args...))
	h.envs = append(h.envs, spec.Env)
	fail := h.failing[spec.Command]
	h.mu.Unlock()
	var err error
	if fail {
		err = fmt.Errorf("%s cannot start", spec.Command)
	}
	if started != nil {
		started(err)
	}
	synctest.Wait() // the resolution a start as written begins, if any, done
	return err
}

// start starts the server, which must start, and returns the command
// line its spawn ran.
func (h *flat) start(t *testing.T, name string) []string {
	t.Helper()
	if err := h.try(t, name); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return h.lastSpawn()
}

func (h *flat) status(name string) *Status { return h.fl.Status(h.server(name)) }

func (h *flat) refresh(t *testing.T, name string) (*Status, error) {
	return h.fl.Refresh(t.Context(), func() *config.Server { return h.server(name) })
}

func (h *flat) spawnCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.spawns)
}

func (h *flat) lastSpawn() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.spawns[len(h.spawns)-1]
}

func (h *flat) lastEnv() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.envs[len(h.envs)-1]
}

func (h *flat) fail(command string, on bool) {
	h.mu.Lock()
	h.failing[command] = on
	h.mu.Unlock()
}

// fakeInstall is a resolution whose files are real (empty) files under
// dir.
func fakeInstall(t *testing.T, dir, version string) *Resolution {
	t.Helper()
	r := &Resolution{Launcher: NPX, Bin: "fx-server", Package: "@fx/server", Version: version, Spec: "@fx/server",
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
// server's own arguments after it. A new Flattener on the same store
// starts it flattened at once, resolving nothing.
func TestFlattensAfterTheFirstStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		h := newFlat(t, npxServer, st)
		res := fakeInstall(t, t.TempDir(), "1.0.0")
		h.res.answer(res, nil)
		if ls := h.status("s"); ls == nil || ls.Flattened || ls.Name != NPX || ls.Spec != "@fx/server" || !strings.Contains(ls.Reason, "not resolved yet") {
			t.Fatalf("before any start: %+v", ls)
		}
		if got := h.start(t, "s"); !slices.Equal(got, []string{"npx", "-y", "@fx/server", "--port", "3"}) {
			t.Fatalf("first start ran %q; want the command as written", got)
		}
		if h.res.count() != 1 {
			t.Fatalf("%d resolutions after the first start", h.res.count())
		}
		c := h.res.calls[0]
		if c.command != "npx" || c.dir != "/srv" || c.form.Target != "@fx/server" || !slices.Contains(c.env, "TOKEN=s3cret") {
			t.Errorf("resolved %s in %q (env has TOKEN: %v), form %+v", c.command, c.dir, slices.Contains(c.env, "TOKEN=s3cret"), c.form)
		}
		ls := h.status("s")
		if !ls.Flattened || ls.Runs != "npx → node …/server@1.0.0" || ls.Version != "1.0.0" || ls.Last != StartedAsWritten || ls.Reason != "" {
			t.Fatalf("after the resolution: %+v", ls)
		}
		want := []string{res.Command, "--no-warnings", res.Args[1], "--port", "3"}
		if got := h.start(t, "s"); !slices.Equal(got, want) {
			t.Fatalf("second start ran %q, want %q", got, want)
		}
		if h.res.count() != 1 || h.status("s").Last != StartedFlattened {
			t.Fatalf("%d resolutions; launch %+v", h.res.count(), h.status("s"))
		}
		h.close(t)

		again := newFlat(t, npxServer, st)
		defer again.close(t)
		if got := again.start(t, "s"); !slices.Equal(got, want) {
			t.Fatalf("a new Flattener's first start ran %q, want %q", got, want)
		}
		if again.res.count() != 0 {
			t.Fatal("a new Flattener resolved again what its store holds")
		}
	})
}

// A resolution that waits does not hold up the starts: they run as
// written meanwhile, and the status says it resolves.
func TestNeverWaitsForAResolution(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFlat(t, npxServer, nil)
		defer h.close(t)
		h.res.block = make(chan struct{})
		h.res.answer(fakeInstall(t, t.TempDir(), "1.0.0"), nil)
		h.start(t, "s")
		if ls := h.status("s"); !ls.Resolving || ls.Flattened || ls.Reason != "resolving" {
			t.Fatalf("while resolving: %+v", ls)
		}
		if got := h.start(t, "s"); got[0] != "npx" {
			t.Fatalf("a start while resolving ran %q", got)
		}
		if h.res.count() != 1 {
			t.Fatalf("%d resolutions begun; want the one", h.res.count())
		}
		close(h.res.block)
		synctest.Wait()
		if got := h.start(t, "s"); got[0] == "npx" {
			t.Fatalf("after the resolution, a start ran %q", got)
		}
	})
}

// A resolution that fails leaves the server as written, saying why (the
// config's secrets redacted). One that may succeed later (not installed)
// is tried again after a start as written, once ResolveRetry has passed;
// one that cannot (no Node bin) never, until the launch changes or a
// refresh.
func TestResolutionFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFlat(t, npxServer, nil)
		defer h.close(t)
		h.res.answer(nil, &Error{Reason: "not installed: npm would install @fx/server@1.0.0", Retry: true})
		h.start(t, "s")
		if ls := h.status("s"); ls.Flattened || ls.Reason != "not installed: npm would install @fx/server@1.0.0" {
			t.Fatalf("after a failed resolution: %+v", ls)
		}
		h.res.answer(nil, &Error{Reason: "npm failed: 401 from https://u:s3cret@registry.example/", Retry: true})
		time.Sleep(ResolveRetry)
		h.start(t, "s")
		if ls := h.status("s"); strings.Contains(ls.Reason, "s3cret") || !strings.Contains(ls.Reason, "401 from") {
			t.Fatalf("a reason quoting a secret of the config's env: %q", ls.Reason)
		}
		h.start(t, "s")
		if h.res.count() != 2 {
			t.Fatalf("resolved again at once: %d", h.res.count())
		}
		time.Sleep(ResolveRetry)
		h.res.answer(nil, &Error{Reason: "bin x runs sh, not Node"})
		h.start(t, "s")
		if h.res.count() != 3 || h.status("s").Reason != "bin x runs sh, not Node" {
			t.Fatalf("after %v: %d resolutions, %+v", ResolveRetry, h.res.count(), h.status("s"))
		}
		for range 2 {
			time.Sleep(ResolveRetry)
			if got := h.start(t, "s"); got[0] != "npx" {
				t.Fatalf("ran %q", got)
			}
		}
		if h.res.count() != 3 {
			t.Fatalf("a failure not to retry was retried: %d", h.res.count())
		}
	})
}

// A start that finds a file of the resolution gone starts as written,
// saying why, and resolves again after it.
func TestFilesGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFlat(t, npxServer, nil)
		defer h.close(t)
		dir := t.TempDir()
		old := fakeInstall(t, dir, "1.0.0")
		h.res.answer(old, nil)
		h.start(t, "s")
		if got := h.start(t, "s"); got[0] != old.Command {
			t.Fatalf("ran %q", got)
		}
		if err := os.Remove(old.Args[1]); err != nil {
			t.Fatal(err)
		}
		newer := fakeInstall(t, dir, "1.1.0")
		h.res.answer(newer, nil)
		if got := h.start(t, "s"); got[0] != "npx" {
			t.Fatalf("with the bin gone, ran %q", got)
		}
		if h.res.count() != 2 {
			t.Fatalf("%d resolutions; want one again after the start as written", h.res.count())
		}
		if got := h.start(t, "s"); got[2] != newer.Args[1] {
			t.Fatalf("after resolving again, ran %q", got)
		}
	})
}

// A flattened start that fails is followed by a start as written; when
// that one starts, flattening is what failed: the server runs as written
// until resolved again (after ResolveRetry). When the start as written
// fails too, the failure is the server's, and flattening stays.
func TestFlattenedStartFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFlat(t, npxServer, nil)
		defer h.close(t)
		res := fakeInstall(t, t.TempDir(), "1.0.0")
		h.res.answer(res, nil)
		h.start(t, "s")

		h.fail(res.Command, true)
		h.fail("npx", true)
		if err := h.try(t, "s"); err == nil {
			t.Fatal("a failing start succeeded")
		}
		if ls := h.status("s"); !strings.Contains(ls.Reason, "the flattened start failed") {
			t.Fatalf("after a flattened start failed: %+v", ls)
		}
		h.try(t, "s")
		if got := h.lastSpawn(); got[0] != "npx" {
			t.Fatalf("after the flattened start failed, ran %q", got)
		}
		if ls := h.status("s"); !ls.Flattened {
			t.Fatalf("both failed, yet flattening was dropped: %+v", ls)
		}

		h.fail("npx", false)
		if err := h.try(t, "s"); err == nil {
			t.Fatal("a failing flattened start succeeded")
		}
		if got := h.start(t, "s"); got[0] != "npx" {
			t.Fatalf("ran %q", got)
		}
		if ls := h.status("s"); ls.Flattened || !strings.Contains(ls.Reason, "where the command as written started") {
			t.Fatalf("flattening failed where as written works: %+v", ls)
		}
		h.fail(res.Command, false)
		if got := h.start(t, "s"); got[0] != "npx" || h.res.count() != 1 {
			t.Fatalf("ran %q (%d resolutions) before ResolveRetry", got, h.res.count())
		}
		time.Sleep(ResolveRetry)
		h.start(t, "s")
		if got := h.start(t, "s"); got[0] != res.Command || h.res.count() != 2 {
			t.Fatalf("after ResolveRetry, ran %q (%d resolutions)", got, h.res.count())
		}
	})
}

// Refresh resolves again at once and says what the next start runs; it
// starts nothing. A package it finds not installed is resolved after the
// next start as written (which installs it). It refuses a server with
// nothing to resolve, and reports a command line it does not flatten.
func TestRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		h := newFlat(t, `{"mcpServers":{
			"s":{"command":"npx","args":["-y","@fx/server@latest"],"idleTimeout":"0"},
			"call":{"command":"npx","args":["-c","fx-server --x"]},
			"plain":{"command":"/usr/bin/fx-server"},
			"npmrun":{"command":"npm","args":["start"]},
			"written":{"command":"npx","args":["-y","x"],"launch":"as-written"},
			"remote":{"url":"https://example.com/mcp"}}}`, st)
		defer h.close(t)
		dir := t.TempDir()
		h.res.answer(fakeInstall(t, dir, "1.0.0"), nil)
		h.start(t, "s")
		h.start(t, "s")
		pid := h.spawnCount()
		h.res.answer(fakeInstall(t, dir, "1.1.0"), nil)
		ls, err := h.refresh(t, "s")
		if err != nil || !ls.Flattened || ls.Version != "1.1.0" || ls.Last != StartedFlattened {
			t.Fatalf("Refresh = %+v, %v", ls, err)
		}
		if h.spawnCount() != pid {
			t.Fatal("Refresh started a process")
		}
		if got := h.start(t, "s"); !strings.HasSuffix(got[2], "index-1.1.0.js") {
			t.Fatalf("after the refresh ran %q", got)
		}
		h.res.answer(nil, &Error{Reason: "not installed: npm would install @fx/server@1.2.0", Retry: true})
		if ls, err := h.refresh(t, "s"); err != nil || ls.Flattened || !strings.Contains(ls.Reason, "npm would install") {
			t.Fatalf("Refresh of a version not installed = %+v, %v", ls, err)
		}
		if raw := st.Launch("s", KeyOf(h.server("s"))); !strings.Contains(string(raw), "npm would install") {
			t.Errorf("the store holds %s", raw)
		}
		// The next start runs as written (installing it), and resolves.
		h.res.answer(fakeInstall(t, dir, "1.2.0"), nil)
		if got := h.start(t, "s"); got[0] != "npx" {
			t.Fatalf("after a refresh found it not installed, ran %q", got)
		}
		if ls := h.status("s"); !ls.Flattened || ls.Version != "1.2.0" {
			t.Fatalf("after the start as written: %+v", ls)
		}
		if ls, err := h.refresh(t, "call"); err != nil || ls.Flattened || !strings.Contains(ls.Reason, "-c is not followed") {
			t.Errorf("Refresh of npx -c = %+v, %v", ls, err)
		}
		for _, name := range []string{"plain", "npmrun", "written", "remote"} {
			if ls, err := h.refresh(t, name); !errors.Is(err, ErrNoLauncher) || ls != nil {
				t.Errorf("Refresh of %s = %+v, %v; want ErrNoLauncher", name, ls, err)
			} else if h.status(name) != nil && name != "written" {
				t.Errorf("%s has a launch status", name)
			}
		}
		if h.res.count() != 4 {
			t.Errorf("%d resolutions; want 4", h.res.count())
		}
	})
}

// A refresh of pnpm dlx resolves nothing at once (pnpm would answer from
// what it last fetched, which a flattened server never makes it fetch
// again): it says why, its next start runs pnpm as written, and the
// resolution follows that start; the record, persisted, survives a new
// Flattener on the same store.
func TestRefreshPNPM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		const doc = `{"mcpServers":{"p":{"command":"pnpm","args":["dlx","@fx/server"],"idleTimeout":"0"}}}`
		h := newFlat(t, doc, st)
		dir := t.TempDir()
		res := fakeInstall(t, dir, "1.0.0")
		res.Launcher, res.NodePath = PNPMDlx, "/cache/dlx/k/d/node_modules/.pnpm/node_modules"
		h.res.answer(res, nil)
		h.start(t, "p")
		if got := h.start(t, "p"); got[0] != res.Command || !slices.Contains(h.lastEnv(), "NODE_PATH="+res.NodePath) {
			t.Fatalf("the flattened start ran %q with NODE_PATH %v", got, slices.Contains(h.lastEnv(), "NODE_PATH="+res.NodePath))
		}
		n := h.res.count()
		newer := fakeInstall(t, dir, "1.1.0")
		newer.Launcher = PNPMDlx
		h.res.answer(newer, nil)
		ls, err := h.refresh(t, "p")
		if err != nil || ls.Flattened || !strings.Contains(ls.Reason, "the next start runs pnpm dlx as written") || ls.Resolving {
			t.Fatalf("Refresh = %+v, %v", ls, err)
		}
		if h.res.count() != n {
			t.Fatal("Refresh of pnpm dlx resolved at once")
		}
		h.close(t)

		again := newFlat(t, doc, st)
		defer again.close(t)
		again.res.answer(newer, nil)
		if got := again.start(t, "p"); got[0] != "pnpm" {
			t.Fatalf("the start after the refresh ran %q; want pnpm as written", got)
		}
		if ls := again.status("p"); !ls.Flattened || ls.Version != "1.1.0" || again.res.count() != 1 {
			t.Fatalf("after the start as written: %+v, %d resolutions", ls, again.res.count())
		}
	})
}

// A flattened start gives node the compile cache (NODE_COMPILE_CACHE),
// on top of the server's own environment, or of mcpvisor's when the
// config sets none; a start as written gives none, and a server whose
// environment sets the cache or turns it off keeps its own setting. The
// status says which.
func TestGivesNodeTheCompileCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cache = "/state/node-compile-cache"
		doc := `{"mcpServers":{
			"s":{"command":"npx","args":["-y","@fx/server"],"env":{"TOKEN":"s3cret"},"idleTimeout":"0"},
			"bare":{"command":"npx","args":["-y","@fx/server"],"idleTimeout":"0"},
			"own":{"command":"npx","args":["-y","@fx/server"],"env":{"NODE_DISABLE_COMPILE_CACHE":"1"},"idleTimeout":"0"}}}`
		h := newFlatWith(t, doc, nil, Options{CompileCache: cache})
		defer h.close(t)
		h.res.answer(fakeInstall(t, t.TempDir(), "1.0.0"), nil)
		has := func(env []string) bool { return slices.Contains(env, "NODE_COMPILE_CACHE="+cache) }
		for _, name := range []string{"s", "bare", "own"} {
			h.start(t, name) // as written, then resolved
			if env := h.lastEnv(); has(env) || slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "NODE_COMPILE_CACHE=") }) {
				t.Errorf("%s: a start as written was given the compile cache", name)
			}
			h.start(t, name)
		}
		h.mu.Lock()
		envS, envBare, envOwn := h.envs[1], h.envs[3], h.envs[5]
		h.mu.Unlock()
		if !has(envS) || !slices.Contains(envS, "TOKEN=s3cret") {
			t.Errorf("s's flattened start: compile cache %v, its own env kept %v", has(envS), slices.Contains(envS, "TOKEN=s3cret"))
		}
		if !has(envBare) || !slices.ContainsFunc(envBare, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
			t.Errorf("bare's flattened start: compile cache %v, mcpvisor's environment (PATH) given %v", has(envBare), len(envBare) > 1)
		}
		if has(envOwn) || !slices.Contains(envOwn, "NODE_DISABLE_COMPILE_CACHE=1") {
			t.Errorf("own's flattened start overrode the server's setting: %q", envOwn)
		}
		for name, want := range map[string][2]string{"s": {cache, ""}, "bare": {cache, ""}, "own": {"", "NODE_DISABLE_COMPILE_CACHE"}} {
			if ls := h.status(name); !ls.Flattened || ls.CompileCache != want[0] || ls.CompileCacheSetBy != want[1] {
				t.Errorf("%s: status compile cache %q set by %q, want %q", name, ls.CompileCache, ls.CompileCacheSetBy, want)
			}
		}
	})
}

// A Flattener without a compile cache directory changes no flattened
// start's environment.
func TestWithoutACompileCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFlat(t, npxServer, nil)
		defer h.close(t)
		h.res.answer(fakeInstall(t, t.TempDir(), "1.0.0"), nil)
		h.start(t, "s")
		h.start(t, "s")
		if env := h.lastEnv(); slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "NODE_COMPILE_CACHE") }) {
			t.Errorf("flattened start's env: %q", env)
		}
		if ls := h.status("s"); !ls.Flattened || ls.CompileCache != "" || ls.CompileCacheSetBy != "" {
			t.Errorf("status: %+v", ls)
		}
	})
}

// mcpvisor's own environment decides for a server whose config says
// nothing of the cache: it is what the server inherits.
func TestCompileCacheSetInMcpvisorsEnvironment(t *testing.T) {
	t.Setenv("NODE_COMPILE_CACHE", "/home/u/.cache/node")
	synctest.Test(t, func(t *testing.T) {
		h := newFlatWith(t, `{"mcpServers":{"bare":{"command":"npx","args":["-y","@fx/server"],"idleTimeout":"0"}}}`, nil,
			Options{CompileCache: "/state/node-compile-cache"})
		defer h.close(t)
		h.res.answer(fakeInstall(t, t.TempDir(), "1.0.0"), nil)
		h.start(t, "bare")
		h.start(t, "bare")
		if env := h.lastEnv(); env != nil && !slices.Contains(env, "NODE_COMPILE_CACHE=/home/u/.cache/node") ||
			slices.Contains(env, "NODE_COMPILE_CACHE=/state/node-compile-cache") {
			t.Errorf("flattened start's env overrides mcpvisor's NODE_COMPILE_CACHE: %q", env)
		}
		if ls := h.status("bare"); ls.CompileCache != "" || ls.CompileCacheSetBy != "NODE_COMPILE_CACHE" {
			t.Errorf("status: compile cache %q set by %q", ls.CompileCache, ls.CompileCacheSetBy)
		}
	})
}

// A relative compile cache directory is made absolute from mcpvisor's
// working directory: node would resolve it from each server's.
func TestCompileCacheIsAbsolute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFlatWith(t, npxServer, nil, Options{CompileCache: "state/node-compile-cache"})
		defer h.close(t)
		h.res.answer(fakeInstall(t, t.TempDir(), "1.0.0"), nil)
		h.start(t, "s")
		h.start(t, "s")
		wd, _ := os.Getwd()
		want := "NODE_COMPILE_CACHE=" + filepath.Join(wd, "state", "node-compile-cache")
		if env := h.lastEnv(); !slices.Contains(env, want) {
			t.Errorf("flattened start's env has no %s: %q", want, env)
		}
	})
}

// compileCacheEnv gives the directory unless the config's env names
// either variable (with any value, empty included), builds on mcpvisor's
// environment when the spawn has none, and never writes into the env it
// is given.
func TestCompileCacheEnvOfAServer(t *testing.T) {
	const dir = "/state/node-compile-cache"
	fl := &Flattener{compileCache: dir, environ: proc.Environ}
	set := "NODE_COMPILE_CACHE=" + dir
	base := make([]string, 2, 8) // room to append: the result must not write into it
	base[0], base[1] = "PATH=/usr/bin", "TOKEN=s3cret"
	got := fl.compileCacheEnv(&config.Server{}, base)
	if !slices.Equal(got, []string{"PATH=/usr/bin", "TOKEN=s3cret", set}) {
		t.Fatalf("compileCacheEnv = %q", got)
	}
	if other := append(base, "X=1"); got[2] != set || other[2] != "X=1" {
		t.Fatalf("the result shares env's array: %q / %q", got, other)
	}
	if got := fl.compileCacheEnv(&config.Server{}, nil); !slices.Contains(got, set) || !slices.ContainsFunc(got, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		t.Errorf("no env: %q, want mcpvisor's with the cache", got)
	}
	for _, env := range []map[string]string{
		{"NODE_COMPILE_CACHE": "/home/u/.cache/node"},
		{"NODE_COMPILE_CACHE": ""}, // set empty: node's own reading of it stands
		{"NODE_DISABLE_COMPILE_CACHE": "1"},
	} {
		sc := &config.Server{Env: env}
		if got := fl.compileCacheEnv(sc, base); !slices.Equal(got, base) {
			t.Errorf("config env %v: %q; the server's own setting must stand", env, got)
		}
		if d, by := fl.compileCacheOf(sc); d != "" || by == "" {
			t.Errorf("config env %v: status %q set by %q", env, d, by)
		}
	}
	if got := (&Flattener{}).compileCacheEnv(&config.Server{}, base); !slices.Equal(got, base) {
		t.Errorf("no cache directory: %q", got)
	}
}

// KeepCompileCache bounds the compile cache at once and every
// compileCachePruneEvery after, until the context of Options.Go ends: a
// node version idle past the policy's MaxIdle goes, the one in use stays.
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
		idle := DefaultPrunePolicy.MaxIdle
		old := write("v20.0.0-x64-a-0/f", idle+time.Hour)
		used := write("v22.0.0-x64-b-0/f", time.Hour)
		h := newFlatWith(t, npxServer, nil, Options{CompileCache: cache})
		h.fl.KeepCompileCache()
		synctest.Wait()
		if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("an idle node version's entry stays at start (%v)", err)
		}
		if _, err := os.Stat(used); err != nil {
			t.Errorf("the node version in use lost its entry: %v", err)
		}
		// Its entry made idle too, the next prune, a day on, removes it.
		stale := time.Now().Add(-idle - time.Hour)
		if err := os.Chtimes(used, stale, stale); err != nil {
			t.Fatal(err)
		}
		time.Sleep(compileCachePruneEvery - time.Second)
		synctest.Wait()
		if _, err := os.Stat(used); err != nil {
			t.Fatalf("pruned before compileCachePruneEvery: %v", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if _, err := os.Stat(used); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("not pruned again after compileCachePruneEvery (%v)", err)
		}
		// The pruner ends with its context. A bounded close makes one
		// that did not fail the test (and the bubble report it blocked)
		// rather than wait for it one pruning day after another.
		h.close(t)
	})
}
