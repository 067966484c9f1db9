package gateway

import (
	"encoding/json"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// The aggregated list serves each item as its server sent it, in its
// order, with only the name replaced where a prefix renames it — not
// decoded and encoded again, which sorted its keys.
func TestAggregatedItemsKeepTheServersBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		item := `{"name":"echo","description":"says it back","inputSchema":{"type":"object","properties":{"z":{},"a":{}}},"annotations":{"title":"Echo"}}`
		tools := map[string][]json.RawMessage{"p": {json.RawMessage(item)}, "plain": {json.RawMessage(strings.Replace(item, `"echo"`, `"echo2"`, 1))}}
		g, _ := cachedWorld(t, `{"p":{"command":"fake-p","prefix":"p"},"plain":{"command":"fake-plain"}}`, refusing(&atomic.Int32{}), tools, io.Discard, nil)
		ep := g.Aggregate()
		s := ep.Open(newRecorder())
		defer ep.Close(s)
		var res struct{ Tools []json.RawMessage }
		if err := json.Unmarshal([]byte(listTools(t, ep, s, 1)), &res); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"p__echo": strings.Replace(item, `"echo"`, `"p__echo"`, 1),
			"echo2":   strings.Replace(item, `"echo"`, `"echo2"`, 1),
		}
		if len(res.Tools) != len(want) {
			t.Fatalf("listed %d tools, want %d: %s", len(res.Tools), len(want), res.Tools)
		}
		for _, got := range res.Tools {
			name, _ := rpc.StringMember(got, "name")
			if string(got) != want[name] {
				t.Errorf("%s listed as\n%s\nwant\n%s", name, got, want[name])
			}
		}
	})
}
