package gateway

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// subscriptions/listen (2026-07-28, basic/patterns/subscriptions): a modern
// client's one long-lived request whose stream carries the change
// notifications it opted into, each tagged with the listen request's id.

const metaSubscriptionID = "io.modelcontextprotocol/subscriptionId"

// listenFilter is the notifications a listener opted into.
type listenFilter struct {
	ToolsListChanged      bool     `json:"toolsListChanged,omitempty"`
	PromptsListChanged    bool     `json:"promptsListChanged,omitempty"`
	ResourcesListChanged  bool     `json:"resourcesListChanged,omitempty"`
	ResourceSubscriptions []string `json:"resourceSubscriptions,omitempty"`
}

// wants reports whether the filter opted into notification method.
func (f *listenFilter) wants(method string) bool {
	switch method {
	case fleet.Tools.ListChanged():
		return f.ToolsListChanged
	case fleet.Prompts.ListChanged():
		return f.PromptsListChanged
	case fleet.Resources.ListChanged(), fleet.Templates.ListChanged():
		return f.ResourcesListChanged
	}
	return false
}

// listener is one open subscriptions/listen request.
type listener struct {
	server string // "" for the aggregated endpoint: every server's changes
	filter listenFilter
	id     json.RawMessage // the listen request's id: the subscription's
	out    Sink            // the request's stream
	// mu is held while the acknowledgement is sent: nothing goes before it.
	mu sync.Mutex
}

// notify sends the listener notification method, tagged with its id.
func (l *listener) notify(method string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	params := append(append([]byte(`{"_meta":{"`+metaSubscriptionID+`":`), l.id...), "}}"...)
	_ = l.out.Send(&rpc.Message{Method: method, Params: params})
}

// listen serves a subscriptions/listen request on the endpoint of server
// ("" for the aggregated one): it acknowledges what it will deliver —
// list changes, not resource subscriptions, which mcpvisor does not carry
// to modern clients — then delivers those until ctx ends (the client
// closes the stream, the front shuts down), and answers with the
// subscription's end.
func (g *Gateway) listen(ctx context.Context, server string, m *rpc.Message, related Sink) *rpc.Message {
	var p struct {
		Notifications *listenFilter `json:"notifications"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil || p.Notifications == nil {
		return errorResponse(m.ID, rpc.InvalidParams, "Invalid params: subscriptions/listen needs params.notifications, an object naming the notifications to deliver")
	}
	l := &listener{server: server, filter: *p.Notifications, id: m.ID, out: related}
	l.filter.ResourceSubscriptions = nil // not honored: left out of the acknowledgement
	ack := mustJSON(map[string]any{
		"notifications": l.filter,
		"_meta":         map[string]json.RawMessage{metaSubscriptionID: m.ID},
	})
	l.mu.Lock()
	g.mu.Lock()
	if g.listeners == nil {
		g.listeners = map[*listener]bool{}
	}
	g.listeners[l] = true
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.listeners, l)
		g.mu.Unlock()
	}()
	// The acknowledgement goes first: registered before it, a change that
	// comes meanwhile waits for it, and is delivered after it, not lost.
	err := related.Send(&rpc.Message{Method: "notifications/subscriptions/acknowledged", Params: ack})
	l.mu.Unlock()
	if err != nil {
		return errorResponse(m.ID, rpc.InternalError, "subscriptions/listen needs a stream for its notifications: "+err.Error())
	}
	<-ctx.Done()
	res := mustJSON(map[string]any{"resultType": "complete", "_meta": map[string]json.RawMessage{metaSubscriptionID: m.ID}})
	return resultResponse(m.ID, res)
}

// tellListeners sends the list-change notification method from server to
// every listener that sees the server and opted into it.
func (g *Gateway) tellListeners(server, method string) {
	g.mu.Lock()
	var to []*listener
	for l := range g.listeners {
		if (l.server == "" || l.server == server) && l.filter.wants(method) {
			to = append(to, l)
		}
	}
	g.mu.Unlock()
	for _, l := range to {
		l.notify(method)
	}
}
