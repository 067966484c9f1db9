package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// resources/read on the aggregated endpoint, from a legacy session and
// from a 2026-07-28 request alike: a URI a server lists is forwarded to
// that server (counted once, in its telemetry), and one no server has is
// answered by mcpvisor with Resource not found (-32002, naming the URI),
// counted once, locally.
func TestAggregatedResourceReadRoutedAndCountedOnce(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE"}}`)
	ep := w.gw.Aggregate()
	srv := w.fleet.Get("c")
	s := ep.Open(newRecorder())
	defer ep.Close(s)
	const known, unknown = "test://static-text", "nope://nothing"
	meta := json.RawMessage(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`)
	read := func(modern bool, id int, uri string) *rpc.Message {
		if !modern {
			return ep.Handle(context.Background(), s, request(id, "resources/read", map[string]any{"uri": uri}), newRecorder())
		}
		m := request(id, "resources/read", map[string]any{"uri": uri, "_meta": meta})
		mo, bad := readModern(m)
		if bad != nil {
			t.Fatal(bad.Encode())
		}
		return ep.Stateless(context.Background(), m, mo, newRecorder())
	}
	calls := func() uint64 {
		var n uint64
		for _, c := range srv.Telemetry().Calls() {
			n += c
		}
		return n
	}
	for i, modern := range []bool{false, true} {
		before, local := calls(), w.gw.LocalRequests().Count("resources/read", telemetry.ProtocolError)
		resp := read(modern, 10*i+1, known)
		if resp.Error != nil || !strings.Contains(string(resp.Result), "contents") {
			t.Fatalf("modern %v: read of %s: %s", modern, known, resp.Encode())
		}
		if n := calls() - before; n != 1 {
			t.Fatalf("modern %v: the read reached the server's telemetry %d times, want once", modern, n)
		}
		resp = read(modern, 10*i+2, unknown)
		if resp.Error == nil || resp.Error.Code != -32002 || resp.Error.Message != "Resource not found" || rpc.Member(resp.Error.Data, "uri") == nil ||
			string(rpc.Member(resp.Error.Data, "uri")) != `"`+unknown+`"` {
			t.Fatalf("modern %v: read of %s: %s, want Resource not found naming it", modern, unknown, resp.Encode())
		}
		if n := w.gw.LocalRequests().Count("resources/read", telemetry.ProtocolError) - local; n != 1 {
			t.Fatalf("modern %v: the unknown URI's read counted %d times locally, want once", modern, n)
		}
		if n := calls() - before; n != 1 {
			t.Fatalf("modern %v: the unknown URI's read reached a server", modern)
		}
	}
}

// A 2026-07-28 request (it has an id) named like a client notification
// is answered, on a server's endpoint and on the aggregated one. (Before
// the modern request had a sender of its own, the legacy handler took it
// for the notification and answered nil, and serveStateless panicked
// making that nil modern: over stdio, the whole process.)
func TestModernRequestNamedLikeANotificationIsAnswered(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE"}}`)
	for _, method := range []string{"notifications/cancelled", "notifications/progress"} {
		for _, ep := range []Endpoint{w.gw.Single("x"), w.gw.Aggregate()} {
			m := &rpc.Message{ID: json.RawMessage(`1`), Method: method,
				Params: json.RawMessage(`{"requestId":5,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`)}
			mo, bad := readModern(m)
			if bad != nil {
				t.Fatal(bad.Encode())
			}
			resp := ep.Stateless(context.Background(), m, mo, noSink)
			if resp == nil || resp.Error == nil || resp.Error.Code != rpc.MethodNotFound || !strings.Contains(resp.Error.Message, "is a notification") {
				t.Fatalf("%T: a request named %s: %v, want mcpvisor's Method not found", ep, method, resp)
			}
		}
	}
}
