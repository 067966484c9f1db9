package replica

import (
	"slices"
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

func TestPeerAddresses(t *testing.T) {
	got, err := PeerAddresses("https://mcpvisor-{ordinal}.mcpvisor:8443/{ordinal}", nil, 3)
	want := []string{"https://mcpvisor-0.mcpvisor:8443/0", "https://mcpvisor-1.mcpvisor:8443/1", "https://mcpvisor-2.mcpvisor:8443/2"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("template: %q %v", got, err)
	}
	list := []string{"https://127.0.0.1:1", "https://127.0.0.1:2"}
	got, err = PeerAddresses("ignored-{ordinal}", list, 2)
	if err != nil || !slices.Equal(got, list) {
		t.Fatalf("list: %q %v", got, err)
	}
	got[0] = "changed"
	if list[0] != "https://127.0.0.1:1" {
		t.Fatal("the result shares the caller's list")
	}
	for _, c := range []struct {
		template string
		list     []string
		count    int
		want     string
	}{
		{"a-{ordinal}", nil, 0, "0 replicas"},
		{"a-{ordinal}", nil, -1, "-1 replicas"},
		{"a-{ordinal}", nil, MaxOrdinal + 2, "at most"},
		{"", nil, 2, "neither a template nor a list"},
		{"https://mcpvisor-0:8443", nil, 2, "has no {ordinal}"},
		{"a-{ORDINAL}", nil, 2, "has no {ordinal}"},
		{"", list, 3, "2 listed for 3 replicas"},
		{"", []string{"a", "b", "c"}, 2, "3 listed for 2 replicas"},
		{"", []string{"a", ""}, 2, "replica 1 is empty"},
	} {
		got, err := PeerAddresses(c.template, c.list, c.count)
		if err == nil || !strings.Contains(err.Error(), c.want) || got != nil {
			t.Errorf("PeerAddresses(%q, %q, %d) = %q, %v; want an error saying %q", c.template, c.list, c.count, got, err, c.want)
		}
	}
}
