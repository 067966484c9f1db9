package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
)

// benchFleet is a gateway over n dormant servers of 20 tools each (the
// fixture's sizes: a description and an input schema with two
// properties), their lists cached on disk, prefixed by their names.
func benchFleet(b *testing.B, n int) *Gateway {
	tools := map[string][]json.RawMessage{}
	var servers strings.Builder
	servers.WriteString("{")
	for i := range n {
		name := fmt.Sprintf("s%04d", i)
		if i > 0 {
			servers.WriteString(",")
		}
		fmt.Fprintf(&servers, `%q:{"command":"fake","prefix":%q}`, name, name)
		for j := range 20 {
			tools[name] = append(tools[name], json.RawMessage(fmt.Sprintf(`{"name":"tool%02d","description":"Tool %d of the server: does one thing, and says what it did.","inputSchema":{"type":"object","properties":{"text":{"type":"string","description":"what to work on"},"count":{"type":"integer","minimum":1}},"required":["text"]}}`, j, j)))
		}
	}
	servers.WriteString("}")
	g, _ := cachedWorld(b, servers.String(), refusing(&atomic.Int32{}), tools, io.Discard, nil)
	return g
}

// BenchmarkAggregateRebuild builds the aggregated tools table of 200
// servers from their lists on disk, as the first request after an
// invalidation or an idle drop does, and lists it; BenchmarkAggregateList
// lists the kept table: the baseline in the same run.
// go test -run '^$' -bench 'BenchmarkAggregate(Rebuild|List)$' ./internal/gateway/
func BenchmarkAggregateRebuild(b *testing.B) { benchAggregate(b, true) }

func BenchmarkAggregateList(b *testing.B) { benchAggregate(b, false) }

func benchAggregate(b *testing.B, rebuild bool) {
	g := benchFleet(b, 200)
	ep := g.Aggregate()
	s := ep.Open(newRecorder())
	defer ep.Close(s)
	listTools(b, ep, s, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if rebuild {
			g.agg.invalidate()
		}
		listTools(b, ep, s, i+1)
	}
}
