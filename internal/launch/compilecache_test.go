package launch

import (
	"slices"
	"testing"
)

func TestWithCompileCache(t *testing.T) {
	const dir = "/state/node-compile-cache"
	base := make([]string, 2, 8) // room to append: a result must not write into it
	base[0], base[1] = "PATH=/usr/bin", "TOKEN=s3cret"
	got, ok := WithCompileCache(base, dir)
	if !ok || !slices.Equal(got, []string{"PATH=/usr/bin", "TOKEN=s3cret", "NODE_COMPILE_CACHE=" + dir}) {
		t.Fatalf("WithCompileCache = %q, %v", got, ok)
	}
	if other := append(base, "X=1"); got[2] != "NODE_COMPILE_CACHE="+dir || other[2] != "X=1" {
		t.Fatalf("the result shares env's array: %q / %q", got, other)
	}

	for _, env := range [][]string{
		{"PATH=/usr/bin", "NODE_COMPILE_CACHE=/home/u/.cache/node"},
		{"NODE_COMPILE_CACHE="}, // set empty: node's own reading of it stands
		{"NODE_DISABLE_COMPILE_CACHE=1", "PATH=/usr/bin"},
	} {
		if got, ok := WithCompileCache(env, dir); ok || !slices.Equal(got, env) {
			t.Errorf("WithCompileCache(%q) = %q, %v: the server's own setting must stand", env, got, ok)
		}
	}
	if got, ok := WithCompileCache(base, ""); ok || !slices.Equal(got, base) {
		t.Errorf("no directory: %q, %v", got, ok)
	}
	if got, ok := WithCompileCache(nil, dir); !ok || !slices.Equal(got, []string{"NODE_COMPILE_CACHE=" + dir}) {
		t.Errorf("nil env: %q, %v", got, ok)
	}
}

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
