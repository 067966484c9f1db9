package replica

import (
	"strings"
	"testing"
)

func TestOrdinalFromName(t *testing.T) {
	for _, c := range []struct {
		name string
		want int // -1: an error
	}{
		{"mcpvisor-0", 0},
		{"mcpvisor-2", 2},
		{"a-b-3", 3},
		{"mcpvisor-9999", 9999},
		{"m-10", 10},
		{"x--y-7", 7},
		{"x-", -1},
		{"x-01", -1},
		{"x-00", -1},
		{"x", -1},
		{"x--1", -1},
		{"-1", -1},
		{"-", -1},
		{"", -1},
		{"x-+1", -1},
		{"x-1a", -1},
		{"x-1 ", -1},
		{"x-10000", -1},
		{"x-99999999999999999999", -1},
		{"x-٣", -1}, // a digit, but not an ASCII one
	} {
		got, err := OrdinalFromName(c.name)
		switch {
		case c.want >= 0 && (err != nil || got != c.want):
			t.Errorf("OrdinalFromName(%q) = %d, %v; want %d", c.name, got, err, c.want)
		case c.want < 0 && err == nil:
			t.Errorf("OrdinalFromName(%q) = %d, no error", c.name, got)
		case c.want < 0 && !strings.Contains(err.Error(), `"`+c.name+`"`):
			t.Errorf("OrdinalFromName(%q): %v does not name it", c.name, err)
		}
	}
}
