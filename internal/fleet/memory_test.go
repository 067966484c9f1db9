package fleet

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/config"
)

// TestDormantMemory measures what 1,000 configured, dormant servers cost
// mcpvisor: heap after GC per server, without their lists (what a cached
// tools list held in memory adds is the catalog's TestCachedListsMemory).
// Target ≤ 2 KB per server, lists aside.
func TestDormantMemory(t *testing.T) {
	const n = 1000
	measure := func(servers int) (heap uint64) {
		var sb strings.Builder
		sb.WriteString(`{"mcpServers":{`)
		for i := range servers {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `"s%04d":{"command":"/usr/bin/mcp-server-%d","args":["--port","%d"]}`, i, i, i)
		}
		sb.WriteString(`}}`)
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		cfg, err := config.Parse([]byte(sb.String()), "mem.json", config.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f, err := New(cfg, Options{Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(f)
		runtime.KeepAlive(cfg)
		return after.HeapAlloc - before.HeapAlloc
	}
	// Other tests' goroutines still winding down allocate too, so a
	// single measurement can read high: the least of three is the fleet's.
	bare := measure(n)
	for range 2 {
		bare = min(bare, measure(n))
	}
	per := float64(bare) / n
	t.Logf("%d dormant servers: %.0f bytes of heap per server (config, fleet entry, supervisor, lists cache)", n, per)
	if per > 2048 {
		t.Errorf("%.0f bytes per dormant server, target ≤ 2048", per)
	}
}
