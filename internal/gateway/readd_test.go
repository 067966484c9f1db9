package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// reloadTo applies the config whose mcpServers are servers to w's fleet,
// waiting a moment at most for the drains it causes (they go on).
func (w *world) reloadTo(t *testing.T, servers string) {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"mcpServers":`+servers+`}`), "test.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cfg.Servers {
		s.Env = map[string]string{testserver.MarkerEnv: w.marker}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := w.fleet.Reload(ctx, cfg, false, nil); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
}

// A server removed and added again under the same name is another server:
// the sessions still open on the removed one's endpoint (which drains)
// and those of the new one's get what their own server sends, never the
// other's — neither its list changes nor its resource updates, on a
// session or on a subscriptions/listen stream.
func TestAReAddedServersSessionsAreNotTheOldOnes(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"},"b":{"command":"$FIXTURE"}}`)
	oldA := w.fleet.Get("a")
	oldEp := w.gw.Single("a")
	outOld := newRecorder()
	sOld := oldEp.Open(outOld)
	defer oldEp.Close(sOld)
	listenOld := newRecorder()
	stopOld := w.listenOn(t, "a", listenOld)
	defer stopOld()

	w.reloadTo(t, `{"b":{"command":"/bin/true"}}`)
	w.reloadTo(t, `{"a":{"command":"/bin/true"},"b":{"command":"/bin/true"}}`)
	newA := w.fleet.Get("a")
	if newA == nil || newA == oldA {
		t.Fatalf("the re-added server is %p, the removed one %p", newA, oldA)
	}
	newEp := w.gw.Single("a")
	outNew := newRecorder()
	sNew := newEp.Open(outNew)
	defer newEp.Close(sNew)
	listenNew := newRecorder()
	stopNew := w.listenOn(t, "a", listenNew)
	defer stopNew()

	// The new server's changes and updates reach the new endpoint's
	// session and listener only.
	w.gw.ListsChanged(newA, []catalog.ListKind{catalog.Tools})
	w.gw.interests.Subscribe(newA, sNew.Key(), bookInstance(newA, legacySender(sNew)), "test://x")
	update := &rpc.Message{Method: "notifications/resources/updated", Params: json.RawMessage(`{"uri":"test://x"}`)}
	w.gw.Notification(fleet.Source{Server: newA}, update)
	outNew.next(t, "notifications/tools/list_changed", 5*time.Second)
	outNew.next(t, "notifications/resources/updated", 5*time.Second)
	listenNew.next(t, "notifications/tools/list_changed", 5*time.Second)
	// And the old one's, told after, reach the old endpoint's only.
	w.gw.ListsChanged(oldA, []catalog.ListKind{catalog.Prompts})
	outOld.next(t, "notifications/prompts/list_changed", 5*time.Second)
	listenOld.next(t, "notifications/prompts/list_changed", 5*time.Second)

	if n := outOld.count("notifications/tools/list_changed") + listenOld.count("notifications/tools/list_changed"); n != 0 {
		t.Fatalf("the removed server's session and listener got %d of the new server's list changes", n)
	}
	if n := outOld.count("notifications/resources/updated"); n != 0 {
		t.Fatalf("the removed server's session got %d of the new server's resource updates", n)
	}
	if n := outNew.count("notifications/prompts/list_changed") + listenNew.count("notifications/prompts/list_changed"); n != 0 {
		t.Fatalf("the new server's session and listener got %d of the removed server's list changes", n)
	}
}

// listenOn opens a modern subscriptions/listen for tool and prompt list
// changes on the endpoint of server, its stream out; it returns once the
// listen is acknowledged, and the function that ends it.
func (w *world) listenOn(t *testing.T, server string, out *recorder) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ep := w.gw.Single(server).(*single)
	m := request(90, "subscriptions/listen", map[string]any{"notifications": map[string]any{"toolsListChanged": true, "promptsListChanged": true}})
	go func() {
		defer close(done)
		w.gw.listen(ctx, ep.endpointServer(), m, nil, out, ep.resourceServer)
	}()
	out.next(t, "notifications/subscriptions/acknowledged", 5*time.Second)
	return func() { cancel(); <-done }
}

// A call held for a modern client's next round on a server's endpoint is
// that server's: once the server is removed and another added under its
// name, the held call's requestState shown on the new endpoint does not
// resume it (it would answer with the removed server's call) — it is
// refused as ended.
func TestAHeldCallIsNotResumedOnAReAddedServer(t *testing.T) {
	w := newMRTRWorldConfig(t, `{"c":{"command":"$CONFORMANCE","protocol":"legacy","prefix":""},"b":{"command":"/bin/true"}}`)
	command := w.fleet.Get("c").Config().Command
	serve := func() *mrtrWorld {
		h := NewStreamableHandler(w.gw.Single("c"), HTTPOptions{})
		srv := httptest.NewServer(h)
		t.Cleanup(func() { h.Close(); srv.Close() })
		return &mrtrWorld{world: w.world, url: srv.URL}
	}
	old := serve()
	key, _, state := inputRequired(t, old.call("1", "", `{"elicitation":{}}`))

	w.reloadTo(t, `{"b":{"command":"/bin/true"}}`)
	c := `"c":{"command":` + mustJSONString(command) + `,"protocol":"legacy","prefix":""}`
	w.reloadTo(t, `{`+c+`,"b":{"command":"/bin/true"}}`)
	m := serve().call("2", `,"requestState":`+mustJSONString(state)+`,"inputResponses":{`+mustJSONString(key)+`:`+acceptUser+`}`, `{"elicitation":{}}`)
	if m.Error == nil || !strings.Contains(m.Error.Message, "ended") {
		t.Fatalf("the removed server's held call, resumed on the new server's endpoint: %s", m.Encode())
	}
}
