package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// GET /api/servers, encoded one server at a time, is byte for byte what
// the whole Servers indented at once is (what it was before it was
// streamed): for no servers (a null list), one, and a mixed fleet —
// running with clients, new, per-session, remote, a package launcher,
// limits, a legacy protocol — with collisions (HTML-escaped) and held
// calls.
func TestServersStreamedAsIndented(t *testing.T) {
	mixed := `"a":{"command":"x","limits":{"memory":"64MiB","pids":32,"cpu":0.5},"maxIdleMemory":"32MiB"},
		"b":{"command":"npx","args":["-y","@scope/server@^1.2"],"env":{"K":"v"}},
		"c":{"command":"c","sharing":"per-session","idleTimeout":"0","protocol":"legacy"},
		"d":{"url":"https://example.com/mcp"},
		"e":{"command":"y","args":["<&>"]},
		"off":{"command":"z","disabled":true}`
	for _, tc := range []struct {
		name, servers string
		collisions    []string
		held          map[string]int
	}{
		{"none", ``, nil, nil},
		{"one", `"a":{"command":"x"}`, nil, nil},
		{"mixed", mixed, []string{`x: "a" (also <b> & c)`}, map[string]int{"a": 2, "c": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := liveFleet(t, tc.servers)
			if tc.servers != "" {
				for _, name := range []string{"a", "c"} {
					if s := f.Get(name); s != nil {
						l, err := s.Acquire(t.Context(), "")
						if err != nil {
							t.Fatal(err)
						}
						l.Release()
					}
				}
			}
			opts := Options{}
			if tc.collisions != nil {
				opts.Collisions = func() []string { return tc.collisions }
			}
			if tc.held != nil {
				opts.HeldCalls = func() map[string]int { return tc.held }
			}
			srv := httptest.NewServer(New(f, nil, opts))
			defer srv.Close()
			got := getJSON(t, srv.URL+"/api/servers", http.StatusOK, nil)

			want := Snapshot(f, nil)
			want.Collisions, want.HeldCalls = tc.collisions, tc.held
			b, err := json.MarshalIndent(want, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if got != string(b)+"\n" {
				t.Fatalf("streamed:\n%s\nindented at once:\n%s", got, b)
			}
			if tc.name == "mixed" && (!strings.Contains(got, `"state": "running"`) || !strings.Contains(got, `\u003c`)) {
				t.Fatalf("the mixed fleet has no running server or nothing to escape:\n%s", got)
			}
		})
	}
}

// peakWriter is a ResponseWriter that keeps nothing of what it is sent
// and, at each write, measures the live heap beyond base: the most a
// reply holds at once while it is written.
type peakWriter struct {
	h          http.Header
	base, peak uint64
	n          int
}

func (w *peakWriter) Header() http.Header { return w.h }
func (w *peakWriter) WriteHeader(int)     {}
func (w *peakWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if m.HeapAlloc > w.base {
		w.peak = max(w.peak, m.HeapAlloc-w.base)
	}
	return len(b), nil
}

// What GET /api/servers holds at once while it writes its reply does not
// grow with the fleet: for 3,000 servers (a reply of over a megabyte) it
// stays a small part of the reply, where encoding the whole reply at
// once held all of it, and more.
func TestServersReplyHoldsABoundedPart(t *testing.T) {
	const n = 3000
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"server-%04d":{"command":"x","args":["--flag","value"]}`, i)
	}
	h := New(liveFleet(t, sb.String()), nil, Options{})
	req := httptest.NewRequest(http.MethodGet, "/api/servers", nil)
	for range 2 { // the second time, with whatever the first left pooled
		w := &peakWriter{h: http.Header{}}
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		w.base = m.HeapAlloc
		h.ServeHTTP(w, req)
		if w.n < 1e6 {
			t.Fatalf("a reply of %d bytes for %d servers, want over a megabyte", w.n, n)
		}
		t.Logf("%d servers: a reply of %d bytes, at most %d bytes live beyond the fleet while written", n, w.n, w.peak)
		if w.peak > uint64(w.n)/8 {
			t.Fatalf("%d bytes live while writing a reply of %d bytes, want at most an eighth of it", w.peak, w.n)
		}
	}
}
