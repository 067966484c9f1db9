package catalog

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// TestCachedListsMemory measures what 1,000 servers' tool lists cost their
// catalogs when they are held in memory: 20 tools each, as learned, the
// items shared by every server (what is measured is the cache's own). The
// rest of what a dormant server costs is internal/fleet's
// TestDormantMemory; this is logged, not asserted.
func TestCachedListsMemory(t *testing.T) {
	const n = 1000
	tools := make([]json.RawMessage, 20)
	for i := range tools {
		tools[i] = json.RawMessage(fmt.Sprintf(`{"name":"tool_%d","description":"does thing %d","inputSchema":{"type":"object"}}`, i, i))
	}
	cats := make([]*Catalog, n)
	for i := range cats {
		cats[i], _ = newTestCatalog(t, nil)
	}
	before := testserver.LiveHeap()
	for _, c := range cats {
		c.lists.put(Tools, tools)
	}
	per := float64(testserver.LiveHeap()-before) / n
	runtime.KeepAlive(cats)
	runtime.KeepAlive(tools)
	t.Logf("%d servers' tools lists of 20 shared cached items: %.0f bytes of heap per server", n, per)
}
