package telemetry

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

func toolList(names ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(names))
	for i, n := range names {
		out[i] = json.RawMessage(fmt.Sprintf(`{"name":%q,"inputSchema":{"type":"object"}}`, n))
	}
	return out
}

// ops indexes Ops by method/tool/error type.
func ops(s *Server) map[string]HistogramSnapshot {
	m := map[string]HistogramSnapshot{}
	for _, o := range s.Ops() {
		k := o.Method + "|" + o.Tool + "|" + o.ErrorType
		if _, dup := m[k]; dup {
			panic("duplicate series " + k)
		}
		m[k] = o.Hist
	}
	return m
}

// An observation lands in the first bucket whose bound is at least it
// (Prometheus's le), a bound itself included; the buckets are cumulative,
// the count the +Inf bucket, the sum in seconds.
func TestHistogramBuckets(t *testing.T) {
	h := NewHistogram([]float64{0.01, 0.1, 1})
	for _, d := range []time.Duration{0, 10 * time.Millisecond, 11 * time.Millisecond, time.Second, 2 * time.Second, -time.Second} {
		h.Observe(d)
	}
	s := h.Snapshot()
	want := []uint64{3, 4, 5, 6} // ≤0.01: 0, 10ms, -1s(→0); ≤0.1: 11ms; ≤1: 1s; +Inf: 2s
	for i, w := range want {
		if s.Cumulative[i] != w {
			t.Fatalf("cumulative %v, want %v", s.Cumulative, want)
		}
	}
	if s.Count != 6 || s.Sum < 3.020 || s.Sum > 3.022 {
		t.Fatalf("count %d sum %v, want 6 and 3.021", s.Count, s.Sum)
	}
}

// Calls are counted by outcome, and in the duration histogram by method,
// tool and error type: a tool the server lists by its name, any other
// (and a call made while no list is known) under _OTHER; an unknown
// method under _OTHER; a protocol error by its JSON-RPC code when it is
// one of JSON-RPC's own, else _OTHER.
func TestRecordLabels(t *testing.T) {
	s := NewServer()
	tools := toolList("echo", "sleep", Other)
	rec := func(method, tool string, o Outcome, code int, ms int) {
		s.Record(Call{Method: method, Tool: []byte(tool), Tools: tools, Outcome: o, Code: code, Duration: time.Duration(ms) * time.Millisecond, Sent: 10, Received: 100})
	}
	rec("tools/call", "echo", OK, 0, 5)
	rec("tools/call", "echo", OK, 0, 50)
	rec("tools/call", "echo", ToolError, 0, 5)
	rec("tools/call", "sleep", Timeout, 0, 300)
	rec("tools/call", "nope", ProtocolError, -32602, 1)
	rec("tools/call", "other-unknown", ProtocolError, -32099, 1)
	rec("tools/call", Other, OK, 0, 1) // a listed tool named like the fold is folded
	rec("resources/read", "", Cancelled, 0, 1)
	rec("vendor/thing", "", Unavailable, 0, 1)
	s.Record(Call{Method: "tools/call", Tool: []byte("echo"), Outcome: OK}) // no list known
	want := map[string]uint64{
		"tools/call|echo|":           2,
		"tools/call|echo|tool_error": 1,
		"tools/call|sleep|timeout":   1,
		"tools/call|_OTHER|-32602":   1,
		"tools/call|_OTHER|_OTHER":   1,
		"tools/call|_OTHER|":         2,
		"resources/read||cancelled":  1,
		"_OTHER||unavailable":        1,
	}
	got := ops(s)
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", keys(got), want)
	}
	for k, n := range want {
		if got[k].Count != n {
			t.Errorf("%s: %d calls, want %d", k, got[k].Count, n)
		}
	}
	if h := got["tools/call|echo|"]; h.Cumulative[0] != 1 || h.Cumulative[2] != 2 { // 5 ms ≤ 0.01; 50 ms ≤ 0.05
		t.Errorf("echo buckets %v", h.Cumulative)
	}
	c := s.CallCounts()
	if c != (CallCounts{OK: 4, ToolError: 1, ProtocolError: 2, Timeout: 1, Cancelled: 1, Unavailable: 1}) {
		t.Errorf("calls %+v", c)
	}
	if sent, recv := s.Bytes(); sent != 90 || recv != 900 {
		t.Errorf("bytes %d/%d, want 90/900", sent, recv)
	}
}

func keys(m map[string]HistogramSnapshot) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A new tool list (learned again) keeps the counts of the tools it still
// has, adds the new ones and drops the gone ones, whose later calls fold
// into _OTHER.
func TestRecordToolListChanges(t *testing.T) {
	s := NewServer()
	s.Record(Call{Method: "tools/call", Tool: []byte("a"), Tools: toolList("a", "b")})
	s.Record(Call{Method: "tools/call", Tool: []byte("b"), Tools: toolList("a", "b")})
	next := toolList("a", "c")
	s.Record(Call{Method: "tools/call", Tool: []byte("a"), Tools: next})
	s.Record(Call{Method: "tools/call", Tool: []byte("b"), Tools: next})
	s.Record(Call{Method: "tools/call", Tool: []byte("c"), Tools: next})
	got := ops(s)
	if got["tools/call|a|"].Count != 2 || got["tools/call|c|"].Count != 1 || got["tools/call|_OTHER|"].Count != 1 {
		t.Fatalf("series %v", got)
	}
	if _, ok := got["tools/call|b|"]; ok {
		t.Fatal("a tool no longer listed still has a series")
	}
}

// Record is safe to call concurrently: calls from many goroutines, on
// tools whose list is replaced meanwhile, are all counted (run with
// -race).
func TestRecordConcurrent(t *testing.T) {
	s := NewServer()
	var wg sync.WaitGroup
	const workers, each = 8, 500
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				tools := toolList("x", "y")
				if i%2 == 0 {
					tools = toolList("x")
				}
				s.Record(Call{Method: "tools/call", Tool: []byte("x"), Tools: tools, Outcome: Outcome(w % int(NumOutcomes)), Duration: time.Millisecond})
				s.Record(Call{Method: "tools/list", Duration: time.Millisecond})
			}
		})
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 {
			_ = s.Ops()
			_ = s.Calls()
		}
	}()
	wg.Wait()
	var total uint64
	for _, n := range s.Calls() {
		total += n
	}
	if total != 2*workers*each {
		t.Fatalf("%d calls counted, want %d", total, 2*workers*each)
	}
	var x uint64
	for _, o := range s.Ops() {
		if o.Method == "tools/call" {
			x += o.Hist.Count
		}
	}
	if x != workers*each {
		t.Fatalf("%d tools/call observed, want %d", x, workers*each)
	}
}

// Once its series exist, Record allocates nothing.
func TestRecordAllocs(t *testing.T) {
	s := NewServer()
	tools := toolList("echo")
	c := Call{Method: "tools/call", Tool: []byte("echo"), Tools: tools, Duration: time.Millisecond}
	l := Call{Method: "tools/list", Duration: time.Millisecond}
	s.Record(c)
	s.Record(l)
	if n := testing.AllocsPerRun(100, func() { s.Record(c); s.Record(l) }); n != 0 {
		t.Fatalf("%v allocations per Record", n)
	}
}

func BenchmarkRecord(b *testing.B) {
	s := NewServer()
	c := Call{Method: "tools/call", Tool: []byte("echo"), Tools: toolList("echo", "sleep"), Duration: time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		s.Record(c)
	}
}

// A label a client's request could make is one of a bounded set: a method
// of MCP's or Other; a tool the server lists or Other (a name with bytes
// to escape is not one a client's raw request can match).
func TestLabelsBounded(t *testing.T) {
	for method, want := range map[string]string{"tools/call": "tools/call", "ping": "ping", "x/" + strings.Repeat("y", 100): Other, "": Other} {
		if got := MethodLabel(method); got != want {
			t.Errorf("MethodLabel(%.20q) = %q, want %q", method, got, want)
		}
	}
	s := NewServer()
	tools := toolList("echo", Other)
	for tool, want := range map[string]string{"echo": "echo", "nope": Other, Other: Other, "": Other} {
		if got := s.ToolLabel([]byte(tool), tools); got != want {
			t.Errorf("ToolLabel(%q) = %q, want %q", tool, got, want)
		}
	}
	if got := s.ToolLabel([]byte("echo"), nil); got != Other {
		t.Errorf("ToolLabel without a list = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.ToolLabel([]byte("echo"), tools) }); n != 0 {
		t.Errorf("ToolLabel allocates %v", n)
	}
}

// Local counts by folded method and outcome, concurrently, without
// allocating; every series is listed, from zero.
func TestLocal(t *testing.T) {
	var l Local
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				l.Record("ping", OK)
				l.Record("x/"+strings.Repeat("y", 10), ProtocolError)
			}
		})
	}
	wg.Wait()
	if l.Count("ping", OK) != 400 || l.Count(Other, ProtocolError) != 400 || l.Count("x/other", ProtocolError) != 400 {
		t.Fatalf("ping %d, other %d", l.Count("ping", OK), l.Count(Other, ProtocolError))
	}
	series, last := 0, ""
	l.Each(func(method string, o Outcome, n uint64) {
		if method < last {
			t.Errorf("%q after %q", method, last)
		}
		last = method
		series++
	})
	if series != (len(Methods)+1)*int(NumOutcomes) {
		t.Errorf("%d series", series)
	}
	if n := testing.AllocsPerRun(100, func() { l.Record("tools/list", OK) }); n != 0 {
		t.Errorf("Record allocates %v", n)
	}
}

// Local counts HTTP refusals by reason, every reason listed from zero in
// the order of its label, without allocating.
func TestLocalRefusals(t *testing.T) {
	var l Local
	l.RecordRefusal(RefusedUnauthorized)
	l.RecordRefusal(RefusedUnknownSession)
	l.RecordRefusal(RefusedUnknownSession)
	if l.Refusals(RefusedUnauthorized) != 1 || l.Refusals(RefusedUnknownSession) != 2 || l.Refusals(RefusedForbidden) != 0 {
		t.Fatalf("unauthorized %d, session_not_found %d", l.Refusals(RefusedUnauthorized), l.Refusals(RefusedUnknownSession))
	}
	got := map[string]uint64{}
	last := ""
	l.EachRefusal(func(reason string, n uint64) {
		if reason < last {
			t.Errorf("%q after %q", reason, last)
		}
		last = reason
		got[reason] = n
	})
	if len(got) != int(NumRefusals) || got["unauthorized"] != 1 || got["session_not_found"] != 2 {
		t.Errorf("refusals %v", got)
	}
	for r := range NumRefusals {
		if r.String() != refusalNames[r] || r.String() == "" {
			t.Errorf("reason %d: %q", r, r.String())
		}
	}
	if l.Count(Other, ProtocolError) != 0 {
		t.Error("a refusal by reason moved a method series")
	}
	if n := testing.AllocsPerRun(100, func() { l.RecordRefusal(RefusedMethod) }); n != 0 {
		t.Errorf("RecordRefusal allocates %v", n)
	}
}

// What a server that started but served no client costs (most of a
// fleet: learned, then dormant): its spawn in a word, its call metrics
// not yet made. A call makes them; readers see zeros before.
func TestStartedServerMemory(t *testing.T) {
	servers := make([]*Server, 1000)
	per := testserver.HeapPer(servers, func(i int) *Server {
		s := NewServer()
		s.ObserveSpawn(time.Duration(i) * time.Millisecond)
		return s
	})
	t.Logf("a server that started once: %.0f bytes", per)
	if per > 64 {
		t.Errorf("a server that started once costs %.0f bytes of heap, want ≤ 64", per)
	}

	s := servers[0]
	if c, ops := s.Calls(), s.Ops(); c != ([NumOutcomes]uint64{}) || len(ops) != 0 || s.CallCounts() != (CallCounts{}) {
		t.Fatalf("before any call: calls %v, ops %v", c, ops)
	}
	if sent, received := s.Bytes(); sent != 0 || received != 0 {
		t.Fatalf("before any call: bytes %d, %d", sent, received)
	}
	if s.Spawns().Count != 1 {
		t.Fatal("the spawn was not counted")
	}
	if l := s.ToolLabel([]byte("echo"), toolList("echo")); l != "echo" {
		t.Fatalf("ToolLabel before any call: %q", l)
	}
	s.Record(Call{Method: "ping", Outcome: Timeout, Sent: 3, Received: 4, Duration: time.Second})
	if c := s.Calls(); c[Timeout] != 1 || len(s.Ops()) != 1 {
		t.Fatalf("after a call: calls %v, ops %v", c, s.Ops())
	}
	if sent, received := s.Bytes(); sent != 3 || received != 4 {
		t.Fatalf("after a call: bytes %d, %d", sent, received)
	}
}
