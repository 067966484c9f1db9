package launch

import (
	"slices"
	"testing"
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
