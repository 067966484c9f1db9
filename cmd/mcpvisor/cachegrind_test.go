package main

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// cgEvents are the counts of cachegrind's events that the instructions
// benchmark reports (TestBenchInstructions): instructions, and the
// first-level misses of its cache model — instruction fetches (I1mr), data
// reads (D1mr) and data writes (D1mw).
type cgEvents struct {
	Ir, I1mr, D1mr, D1mw float64
}

func (e cgEvents) add(o cgEvents) cgEvents {
	return cgEvents{e.Ir + o.Ir, e.I1mr + o.I1mr, e.D1mr + o.D1mr, e.D1mw + o.D1mw}
}

// perCall is what each of calls cost, e being the count of a run that
// made calls more calls than the run that counted base.
func (e cgEvents) perCall(base cgEvents, calls int) cgEvents {
	n := float64(calls)
	return cgEvents{(e.Ir - base.Ir) / n, (e.I1mr - base.I1mr) / n, (e.D1mr - base.D1mr) / n, (e.D1mw - base.D1mw) / n}
}

// cgCount is one cachegrind output file: the whole run's counts and each
// function's (summed over the files it appears under).
type cgCount struct {
	total cgEvents
	byFn  map[string]cgEvents
}

// parseCachegrind reads cachegrind's output format: an "events:" line
// naming the columns, then "fl=" and "fn=" lines, each followed by lines
// of a line number and that line's counts (trailing zeros may be left
// out), and a "summary:" line of the totals. Lines of callgrind's format
// (compressed names, calls) are refused. It needs the events Ir, I1mr,
// D1mr and D1mw (--cache-sim=yes), and fails on a count it cannot read or
// a summary that is not the sum of the lines.
func parseCachegrind(b []byte) (*cgCount, error) {
	c := &cgCount{byFn: map[string]cgEvents{}}
	col := map[string]int{}
	var fn string
	var sum cgEvents
	var haveSummary bool
	pick := func(counts []int64) (cgEvents, error) {
		get := func(name string) (float64, error) {
			i, ok := col[name]
			if !ok {
				return 0, fmt.Errorf("cachegrind: no %s event (run with --cache-sim=yes)", name)
			}
			if i >= len(counts) {
				return 0, nil // a trailing zero left out
			}
			return float64(counts[i]), nil
		}
		var e cgEvents
		var err error
		for _, f := range []struct {
			name string
			to   *float64
		}{{"Ir", &e.Ir}, {"I1mr", &e.I1mr}, {"D1mr", &e.D1mr}, {"D1mw", &e.D1mw}} {
			if *f.to, err = get(f.name); err != nil {
				return cgEvents{}, err
			}
		}
		return e, nil
	}
	numbers := func(fields []string) ([]int64, error) {
		out := make([]int64, len(fields))
		for i, f := range fields {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("cachegrind: count %q: %w", f, err)
			}
			out[i] = v
		}
		return out, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "events:"):
			for i, name := range strings.Fields(strings.TrimPrefix(line, "events:")) {
				col[name] = i
			}
		case strings.HasPrefix(line, "fn=("), strings.HasPrefix(line, "cfn="), strings.HasPrefix(line, "calls="),
			strings.HasPrefix(line, "fi="), strings.HasPrefix(line, "fe="):
			// Callgrind's format (compressed names, calls, inlined
			// files), which this reader would misattribute.
			return nil, fmt.Errorf("cachegrind: a line of callgrind's format: %q", line)
		case strings.HasPrefix(line, "fn="):
			fn = strings.TrimPrefix(line, "fn=")
		case strings.HasPrefix(line, "summary:"):
			counts, err := numbers(strings.Fields(strings.TrimPrefix(line, "summary:")))
			if err != nil {
				return nil, err
			}
			if c.total, err = pick(counts); err != nil {
				return nil, err
			}
			haveSummary = true
		case line[0] >= '0' && line[0] <= '9':
			if len(col) == 0 || fn == "" {
				return nil, fmt.Errorf("cachegrind: counts before the events or a function: %q", line)
			}
			fields := strings.Fields(line)
			counts, err := numbers(fields[1:]) // fields[0] is the line number
			if err != nil {
				return nil, err
			}
			e, err := pick(counts)
			if err != nil {
				return nil, err
			}
			c.byFn[fn] = c.byFn[fn].add(e)
			sum = sum.add(e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !haveSummary {
		return nil, errors.New("cachegrind: no summary line")
	}
	if sum != c.total {
		return nil, fmt.Errorf("cachegrind: the lines sum to %+v, the summary says %+v", sum, c.total)
	}
	return c, nil
}

// packageOf is the Go package of a function's symbol as cachegrind names
// it: "net/http" for "net/http.(*conn).serve", "internal/gateway" for
// mcpvisor's own, "cmd/mcpvisor" for package main's (as a test binary
// names it, or "main."). The runtime's internal packages (its maps among
// them) count as "runtime"; the compiler's generated functions
// (type:.eq…, go:struct {…} methods) as "(generated)"; the C library's (versioned or
// split by the C compiler: memcpy@@GLIBC_2.14, f.part.0) as "(C)";
// functions without a package (the runtime's assembly, such as memeqbody;
// ??? for code without symbols) as "runtime (assembly)". Cachegrind names
// the function that holds the code, so what the compiler inlined counts
// in its caller's package.
func packageOf(fn string) string {
	fn = strings.TrimPrefix(fn, "github.com/mcpvisor/mcpvisor/")
	switch {
	case strings.HasPrefix(fn, "main."):
		return "cmd/mcpvisor"
	case strings.HasPrefix(fn, "type:"), strings.HasPrefix(fn, "go:"):
		return "(generated)"
	case strings.Contains(fn, "@@"), strings.Contains(fn, ".part."), strings.Contains(fn, ".constprop."), strings.Contains(fn, ".isra."):
		return "(C)"
	}
	// A type's parameters and a method's receiver may hold more paths.
	head := fn
	if i := strings.IndexAny(fn, "[("); i >= 0 {
		head = fn[:i]
	}
	slash := strings.LastIndexByte(head, '/')
	dot := strings.IndexByte(head[slash+1:], '.')
	if dot < 0 {
		return "runtime (assembly)"
	}
	pkg := head[:slash+1+dot]
	if strings.HasPrefix(pkg, "internal/runtime/") {
		return "runtime"
	}
	return pkg
}

// perPackage is what a call costs in each package: the functions' counts
// of the run with calls more calls (more) less those of the other (less),
// per call, summed by packageOf.
func perPackage(less, more *cgCount, calls int) map[string]cgEvents {
	return perGroup(less, more, calls, packageOf)
}

// perFunction is what a call costs in each function, as perPackage.
func perFunction(less, more *cgCount, calls int) map[string]cgEvents {
	return perGroup(less, more, calls, func(fn string) string { return fn })
}

// perGroup is perPackage with functions grouped by key.
func perGroup(less, more *cgCount, calls int, key func(fn string) string) map[string]cgEvents {
	out := map[string]cgEvents{}
	for fn, e := range more.byFn {
		out[key(fn)] = out[key(fn)].add(e.perCall(less.byFn[fn], calls))
	}
	for fn, e := range less.byFn {
		if _, ok := more.byFn[fn]; !ok { // counted in the shorter run alone
			out[key(fn)] = out[key(fn)].add(cgEvents{}.perCall(e, calls))
		}
	}
	return out
}

// functionTable is a Markdown table of the top functions of a path by
// I1 misses per call, with their instructions and D1 misses: where the
// path's code misses go.
func functionTable(fns map[string]cgEvents, top int) string {
	names := slices.Collect(maps.Keys(fns))
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(fns[b].I1mr, fns[a].I1mr); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var w strings.Builder
	w.WriteString("| function | instructions | I1 misses | D1 misses |\n|---|---|---|---|\n")
	for _, fn := range names[:min(top, len(names))] {
		e := fns[fn]
		fmt.Fprintf(&w, "| %s | %.0f | %.0f | %.0f |\n", strings.TrimPrefix(fn, "github.com/mcpvisor/mcpvisor/"), e.Ir, e.I1mr, e.D1mr+e.D1mw)
	}
	return w.String()
}

// packageTable is a Markdown table of what a call costs by package on a
// path and on the path it is compared with (base): each package with a
// difference of at least 1 % of base's total in one of the three counts,
// largest first by the sum of those shares, the rest in one row, and the
// totals.
func packageTable(base, path map[string]cgEvents) string {
	var bt, pt cgEvents
	pkgs := map[string]bool{}
	for p, e := range base {
		bt, pkgs[p] = bt.add(e), true
	}
	for p, e := range path {
		pt, pkgs[p] = pt.add(e), true
	}
	// of is x's share of a base total (a total of 0: none; a
	// difference is then as large as it gets).
	of := func(x, total float64) float64 {
		if total <= 0 {
			if x == 0 {
				return 0
			}
			return 1
		}
		return math.Abs(x) / total
	}
	share := func(p string) (float64, bool) {
		d := path[p].add(cgEvents{}.perCall(base[p], 1))
		ir, i1, d1 := of(d.Ir, bt.Ir), of(d.I1mr, bt.I1mr), of(d.D1mr+d.D1mw, bt.D1mr+bt.D1mw)
		return ir + i1 + d1, ir >= 0.01 || i1 >= 0.01 || d1 >= 0.01
	}
	var shown, rest []string
	for p := range pkgs {
		if _, big := share(p); big {
			shown = append(shown, p)
		} else {
			rest = append(rest, p)
		}
	}
	slices.SortFunc(shown, func(a, b string) int {
		sa, _ := share(a)
		sb, _ := share(b)
		if sa != sb {
			if sa > sb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var w strings.Builder
	w.WriteString("| package | instructions | I1 misses | D1 misses |\n|---|---|---|---|\n")
	// Rounded first: a count per call of -0.3 is 0, not "-0".
	n := func(x float64) float64 { return math.Round(x) + 0 }
	row := func(name string, b, p cgEvents) {
		fmt.Fprintf(&w, "| %s | %.0f → %.0f (%+.0f) | %.0f → %.0f (%+.0f) | %.0f → %.0f (%+.0f) |\n", name,
			n(b.Ir), n(p.Ir), n(p.Ir-b.Ir), n(b.I1mr), n(p.I1mr), n(p.I1mr-b.I1mr),
			n(b.D1mr+b.D1mw), n(p.D1mr+p.D1mw), n(p.D1mr+p.D1mw-b.D1mr-b.D1mw))
	}
	for _, p := range shown {
		row(p, base[p], path[p])
	}
	var rb, rp cgEvents
	for _, p := range rest {
		rb, rp = rb.add(base[p]), rp.add(path[p])
	}
	row(fmt.Sprintf("the other %d packages", len(rest)), rb, rp)
	row("**all**", bt, pt)
	return w.String()
}

// cacheModel is the cache model of cachegrind's output files in dir, as
// their "desc:" lines give it (the same in every file of a run).
func cacheModel(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.out"))
	if len(files) == 0 {
		return "unknown"
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		return "unknown"
	}
	var parts []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "desc: "); ok {
			name, spec, _ := strings.Cut(v, ":")
			if name == "I1 cache" || name == "D1 cache" {
				parts = append(parts, strings.TrimSuffix(name, " cache")+" "+strings.Join(strings.Fields(spec), " "))
			}
		}
	}
	if len(parts) == 0 {
		return "unknown"
	}
	return strings.Join(parts, "; ")
}
