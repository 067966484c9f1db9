package gateway

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// Was a defect: a call in flight when a reload removes its server is counted
// on the removed *fleet.Server's telemetry, which /metrics (admin's
// callMetrics over Fleet.Servers()) never reads again: the request is in
// no exported series — neither a server's nor mcpvisor_gateway_requests_total.
func TestADrainedCallIsInAnExportedSeries(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"},"b":{"command":"$FIXTURE","requestTimeout":"500ms"}}`)
	ep := w.gw.Single("b")
	out := newRecorder()
	s := ep.Open(out)
	defer ep.Close(s)
	done := make(chan *rpc.Message, 1)
	go func() {
		done <- ep.Handle(t.Context(), s, &rpc.Message{ID: json.RawMessage(`1`), Method: "tools/call",
			Params: json.RawMessage(`{"name":"progress","arguments":{"steps":100000,"intervalMs":50},"_meta":{"progressToken":"p"}}`)}, out)
	}()
	waitFor(t, "the call in flight", func() bool { return inFlight(w.gw) == 1 })
	w.reloadTo(t, `{"a":{"command":"$FIXTURE"}}`)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the drain did not cut the call")
	}
	var exported uint64
	for _, st := range w.fleet.CallTelemetry() { // what admin's /metrics reads
		c := st.Tel.Calls()
		for _, n := range c {
			exported += n
		}
	}
	w.gw.LocalRequests().Each(func(_ string, _ telemetry.Outcome, n uint64) { exported += n })
	if exported != 1 {
		t.Fatalf("the drained call is counted %d times in the series /metrics exports, want 1", exported)
	}
}
