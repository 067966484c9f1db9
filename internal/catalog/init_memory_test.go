package catalog

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A server's cached initialize result keeps only its own bytes, not the
// message it came in (the whole JSON-RPC response, or a larger read
// buffer): what a dormant server keeps of it is the result's size.
func TestCachedInitKeepsOnlyTheResult(t *testing.T) {
	const n = 1000
	var key [32]byte // a launch hash
	caches := make([]*lists, n)
	before := testserver.LiveHeap()
	for i := range caches {
		msg := make([]byte, 4096) // the message, or the buffer it was read into
		res := fmt.Appendf(msg[:100], `{"protocolVersion":"2025-06-18","serverInfo":{"name":"s%04d"}}`, i)
		caches[i] = &lists{}
		if !caches[i].putInit(json.RawMessage(res[100:]), key, 0) {
			t.Fatal("a first initialize result was not to be persisted")
		}
	}
	per := float64(testserver.LiveHeap()-before) / n
	runtime.KeepAlive(caches)
	t.Logf("a cached initialize result of 62 bytes: %.0f bytes", per)
	if per > 256 {
		t.Fatalf("a cached initialize result of 62 bytes keeps %.0f bytes of heap, want ≤ 256", per)
	}
	const seven = `{"protocolVersion":"2025-06-18","serverInfo":{"name":"s0007"}}`
	if got := string(caches[7].init); got != seven {
		t.Fatalf("cached %s", got)
	}
	if !caches[7].putInit(json.RawMessage(seven), key, 0) {
		t.Fatal("the same result again, never written, was not to be persisted")
	}
	_, seq, ok := caches[7].initToWrite(key)
	if !ok {
		t.Fatal("a result never written is not to be written")
	}
	caches[7].initWritten(seq, key)
	if caches[7].putInit(json.RawMessage(seven), key, 0) {
		t.Fatal("the same result again, written, was to be persisted again")
	}
}

// A result learned at a generation the lists have left (the server was
// relaunched since) is not kept.
func TestPutInitOfAnEarlierGenerationKeepsNothing(t *testing.T) {
	c := &lists{}
	var key [32]byte
	if !c.putInit(json.RawMessage(`{"protocolVersion":"2025-11-25"}`), key, 0) {
		t.Fatal("a first result is not to be written")
	}
	c.relaunched(func() {})
	if c.putInit(json.RawMessage(`{"protocolVersion":"2025-06-18"}`), key, 0) || c.init != `{"protocolVersion":"2025-11-25"}` {
		t.Fatalf("a result of the generation before the relaunch was kept: %s", c.init)
	}
	if !c.putInit(json.RawMessage(`{"protocolVersion":"2025-06-18"}`), key, 1) || c.init != `{"protocolVersion":"2025-06-18"}` {
		t.Fatalf("a result of the current generation was not kept: %s", c.init)
	}
}
