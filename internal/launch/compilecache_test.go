package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
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
// entries was written within MaxIdle, whole; then the entries written
// longest ago while the rest exceed MaxBytes; then directories left empty.
// What is within both bounds stays, and a link is neither followed nor
// removed.
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
	for _, gone := range []string{oldA, oldB, filepath.Dir(oldA), c1} {
		if exists(gone) {
			t.Errorf("%s stays", gone)
		}
	}
	for _, kept := range []string{c2, c3, c4, link, outside} {
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
