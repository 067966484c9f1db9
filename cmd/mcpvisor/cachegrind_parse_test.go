package main

import (
	"strings"
	"testing"
)

// A cachegrind output file as valgrind 3.19 writes it with
// --cache-sim=yes: two functions, one under two files, a line with its
// trailing zeros left out.
const cachegrindSample = `desc: I1 cache:         32768 B, 64 B, 8-way associative
desc: D1 cache:         49152 B, 64 B, 12-way associative
desc: LL cache:         109051904 B, 64 B, 26-way associative
cmd: ./serve
events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw 
fl=a.go
fn=github.com/mcpvisor/mcpvisor/internal/gateway.(*Gateway).begin
10 100 5 0 40 3 0 20 2 0
11 50
fl=b.go
fn=net/http.(*conn).serve
1 30 1 0 10 1 0 5 1 0
fl=c.go
fn=github.com/mcpvisor/mcpvisor/internal/gateway.(*Gateway).begin
12 20 1 0 4 1 0 2 1 0
summary: 200 7 0 54 5 0 27 4 0
`

func TestParseCachegrind(t *testing.T) {
	c, err := parseCachegrind([]byte(cachegrindSample))
	if err != nil {
		t.Fatal(err)
	}
	if want := (cgEvents{Ir: 200, I1mr: 7, D1mr: 5, D1mw: 4}); c.total != want {
		t.Errorf("total %+v, want %+v", c.total, want)
	}
	begin := c.byFn["github.com/mcpvisor/mcpvisor/internal/gateway.(*Gateway).begin"]
	if want := (cgEvents{Ir: 170, I1mr: 6, D1mr: 4, D1mw: 3}); begin != want {
		t.Errorf("begin %+v, want %+v (summed over its two files)", begin, want)
	}

	for _, bad := range []struct{ name, text, want string }{
		{"no cache model", strings.Replace(cachegrindSample, "events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw", "events: Ir", 1), "no I1mr event"},
		{"no summary", strings.Replace(cachegrindSample, "summary:", "#", 1), "no summary"},
		{"a bad count", strings.Replace(cachegrindSample, "11 50", "11 5x", 1), `count "5x"`},
		{"a summary that is not the sum", strings.Replace(cachegrindSample, "summary: 200", "summary: 201", 1), "the lines sum to"},
		{"counts before a function", "events: Ir I1mr D1mr D1mw\n1 2 3 4 5\nsummary: 2 3 4 5\n", "counts before"},
		{"callgrind's compressed names", strings.Replace(cachegrindSample, "fn=net/http.(*conn).serve", "fn=(2) net/http.(*conn).serve", 1), "callgrind's format"},
		{"callgrind's calls", strings.Replace(cachegrindSample, "11 50", "calls=1 0\n11 50", 1), "callgrind's format"},
	} {
		if _, err := parseCachegrind([]byte(bad.text)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want one saying %q", bad.name, err, bad.want)
		}
	}
}

func TestPackageOf(t *testing.T) {
	for fn, want := range map[string]string{
		"net/http.(*conn).serve": "net/http",
		"github.com/mcpvisor/mcpvisor/internal/gateway.(*Gateway).begin":                   "internal/gateway",
		"github.com/mcpvisor/mcpvisor/cmd/mcpvisor.trimAfter.func1":                        "cmd/mcpvisor",
		"github.com/mcpvisor/mcpvisor/internal/gateway.(*ServerRouter).ServeNamed":         "internal/gateway",
		"main.(*daemonFront).wrap.func1":                                                   "cmd/mcpvisor",
		"runtime.mallocgc":                                                                 "runtime",
		"internal/runtime/maps.(*Map).getWithKeySmall":                                     "runtime",
		"internal/sync.(*HashTrieMap[go.shape.interface {},go.shape.*net/http.conn]).Load": "internal/sync",
		"encoding/json.(*decodeState).object":                                              "encoding/json",
		"type:.eq.net/http.Header":                                                         "(generated)",
		"memeqbody":                                                                        "runtime (assembly)",
		"???":                                                                              "runtime (assembly)",
		"sync/atomic.(*Int64).Add":                                                         "sync/atomic",
		"go:struct { io.Reader; io.WriterTo }.Read":                                        "(generated)",
		"memcpy@@GLIBC_2.14":                                                               "(C)",
		"dfs_traversal.part.0":                                                             "(C)",
	} {
		if got := packageOf(fn); got != want {
			t.Errorf("packageOf(%q) = %q, want %q", fn, got, want)
		}
	}
}

func TestPackageTable(t *testing.T) {
	base := map[string]cgEvents{"encoding/json": {Ir: 900, I1mr: 90, D1mr: 9, D1mw: 1}, "runtime": {Ir: 100, I1mr: 10, D1mr: 5, D1mw: 5}, "tiny": {Ir: 1}}
	path := map[string]cgEvents{"internal/gateway": {Ir: 300, I1mr: 60, D1mr: 10}, "runtime": {Ir: 100, I1mr: 10, D1mr: 5, D1mw: 5}, "tiny": {Ir: 2}}
	got := packageTable(base, path)
	for _, want := range []string{
		"| encoding/json | 900 → 0 (-900) | 90 → 0 (-90) | 10 → 0 (-10) |",
		"| internal/gateway | 0 → 300 (+300) | 0 → 60 (+60) | 0 → 10 (+10) |",
		"| the other 2 packages | 101 → 102 (+1) | 10 → 10 (+0) | 10 → 10 (+0) |",
		"| **all** | 1001 → 402 (-599) | 100 → 70 (-30) | 20 → 20 (+0) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "encoding/json") > strings.Index(got, "internal/gateway") {
		t.Errorf("the largest difference is not first:\n%s", got)
	}
}

// perPackage is per call, by package, of the longer run less the shorter,
// with a function counted in one of the runs alone added or taken away.
func TestPerPackage(t *testing.T) {
	less := &cgCount{byFn: map[string]cgEvents{
		"net/http.(*conn).serve": {Ir: 100, I1mr: 10},
		"net/http.startup":       {Ir: 40}, // the shorter run's alone
	}}
	more := &cgCount{byFn: map[string]cgEvents{
		"net/http.(*conn).serve": {Ir: 300, I1mr: 30, D1mr: 4},
		"github.com/mcpvisor/mcpvisor/internal/gateway.(*Gateway).begin": {Ir: 50, D1mw: 2}, // the longer run's alone
	}}
	got := perPackage(less, more, 2)
	want := map[string]cgEvents{
		"net/http":         {Ir: (300 - 100 - 40) / 2, I1mr: 10, D1mr: 2},
		"internal/gateway": {Ir: 25, D1mw: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("packages %v, want %v", got, want)
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %+v, want %+v", p, got[p], w)
		}
	}
}

// A path whose base has no misses at all, and differences under one half
// either way, make a table without NaNs or a "-0".
func TestPackageTableEdges(t *testing.T) {
	base := map[string]cgEvents{"a": {Ir: 100}}
	path := map[string]cgEvents{"a": {Ir: 99.7, I1mr: 0.4}, "b": {Ir: 10, I1mr: 3}}
	got := packageTable(base, path)
	for _, bad := range []string{"NaN", "-0)", "Inf"} {
		if strings.Contains(got, bad) {
			t.Errorf("the table holds %q:\n%s", bad, got)
		}
	}
	if !strings.Contains(got, "| b | 0 → 10 (+10) | 0 → 3 (+3) | 0 → 0 (+0) |") {
		t.Errorf("the table lacks b's row:\n%s", got)
	}
	if !strings.Contains(got, "| a | 100 → 100 (+0) | 0 → 0 (+0) | 0 → 0 (+0) |") {
		t.Errorf("the table lacks a's row (its I1 misses, from none, count as a large difference):\n%s", got)
	}
}

// functionTable lists the top functions by I1 misses (ties by name), with
// the module's path left off.
func TestFunctionTable(t *testing.T) {
	fns := map[string]cgEvents{
		"runtime.selectgo": {Ir: 700, I1mr: 55, D1mr: 10, D1mw: 4},
		"github.com/mcpvisor/mcpvisor/internal/rpc.skipString": {Ir: 8000, I1mr: 22, D1mr: 11},
		"b.tie":          {I1mr: 22},
		"net/http.small": {Ir: 5, I1mr: 1},
	}
	got := functionTable(fns, 3)
	want := "| function | instructions | I1 misses | D1 misses |\n|---|---|---|---|\n" +
		"| runtime.selectgo | 700 | 55 | 14 |\n" +
		"| b.tie | 0 | 22 | 0 |\n" +
		"| internal/rpc.skipString | 8000 | 22 | 11 |\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := functionTable(fns, 10); strings.Count(got, "\n") != 2+len(fns) {
		t.Errorf("top 10 of %d functions:\n%s", len(fns), got)
	}
}
