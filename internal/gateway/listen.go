package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/revision"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// subscriptions/listen (2026-07-28, basic/patterns/subscriptions): a modern
// client's one long-lived request whose stream carries the change
// notifications it opted into, each tagged with the listen request's id.

const metaSubscriptionID = revision.MetaSubscriptionID

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
	case catalog.Tools.ListChanged():
		return f.ToolsListChanged
	case catalog.Prompts.ListChanged():
		return f.PromptsListChanged
	case catalog.Resources.ListChanged(), catalog.Templates.ListChanged():
		return f.ResourcesListChanged
	}
	return false
}

// listener is one open subscriptions/listen request.
type listener struct {
	srv    *fleet.Server // nil for the aggregated endpoint: every server's changes
	filter listenFilter
	id     json.RawMessage // the listen request's id: the subscription's
	out    Sink            // the request's stream
	// mu orders what the stream gets: the acknowledgement first; what
	// comes before it waits in early (a few resource updates at most).
	mu    sync.Mutex
	acked bool
	early []*rpc.Message
	// lost is closed when a notification could not be delivered (the
	// stream full): the listen ends, and its client, listening again,
	// fetches what it missed.
	lost     chan struct{}
	lostOnce sync.Once
}

// maxEarly bounds the notifications kept for a listener until its
// acknowledgement is out.
const maxEarly = 64

// notify sends the listener notification method, tagged with its id.
func (l *listener) notify(method string) { _ = l.send(method, nil) }

// dropped ends the listen: a notification of it was lost.
func (l *listener) dropped() { l.lostOnce.Do(func() { close(l.lost) }) }

// send sends the listener notification method with params (an object, or
// nil), its _meta tagged with the subscription's id.
func (l *listener) send(method string, params json.RawMessage) error {
	meta := map[string]json.RawMessage{}
	if old := rpc.Member(params, "_meta"); old != nil {
		_ = json.Unmarshal(old, &meta)
	}
	meta[metaSubscriptionID] = l.id
	n := &rpc.Message{Method: method, Params: rpc.SetMember(params, "_meta", mustJSON(meta))}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.acked {
		if len(l.early) >= maxEarly {
			l.dropped()
			return ErrStreamFull
		}
		l.early = append(l.early, n)
		return nil
	}
	err := l.out.Send(n)
	if errors.Is(err, ErrStreamFull) {
		l.dropped()
	}
	return err
}

// ack sends the acknowledgement, then what came before it.
func (l *listener) ack(params json.RawMessage) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.out.Send(&rpc.Message{Method: "notifications/subscriptions/acknowledged", Params: params}); err != nil {
		return err
	}
	l.acked = true
	for _, n := range l.early {
		_ = l.out.Send(n)
	}
	l.early = nil
	return nil
}

// listen serves a subscriptions/listen request on the endpoint of srv
// (nil for the aggregated one): it acknowledges what it will deliver — the
// list changes asked for, and the resource subscriptions a shared server
// took (resolve finds the server of a URI; mcpvisor subscribes on the
// listener's behalf, and the server stays awake while it is subscribed) —
// then delivers those until ctx ends (the client closes the stream, the
// front shuts down) or one cannot be delivered (the stream is full: the
// client, listening again, fetches what it missed), and answers with the
// subscription's end.
func (g *Gateway) listen(ctx context.Context, srv *fleet.Server, m *rpc.Message, mo *Modern, related Sink, resolve func(context.Context, string) *fleet.Server) *rpc.Message {
	var p struct {
		Notifications *listenFilter `json:"notifications"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil || p.Notifications == nil {
		return errorResponse(m.ID, rpc.InvalidParams, "Invalid params: subscriptions/listen needs params.notifications, an object naming the notifications to deliver")
	}
	l := &listener{srv: srv, filter: *p.Notifications, id: m.ID, out: related, lost: make(chan struct{})}
	uris := l.filter.ResourceSubscriptions
	l.filter.ResourceSubscriptions = nil // those a server took are added back
	if len(uris) > 0 {
		// A session of the listener's own holds its subscriptions: the
		// fleet replays them to a restarted server and keeps it awake,
		// and their updates come to the session's sink — this stream.
		ls := NewSession(SinkFunc(func(n *rpc.Message) error {
			if n.Method != "notifications/resources/updated" {
				return ErrNoStream // list changes come by tellListeners
			}
			return l.send(n.Method, n.Params)
		}))
		ls.listener = true
		// Its subscriptions are the client's requests, decided, limited
		// and audited as the client's identity.
		ls.SetIdentity(identity.FromContext(ctx))
		if mo != nil {
			ls.adoptIdentity(mo) // its subscriptions are the client's requests
		}
		g.reg.open(ls, srv)
		defer g.closeSession(ls)
		for _, uri := range uris {
			srv := resolve(ctx, uri)
			if srv == nil || srv.Config().PerSession() {
				continue // no server has it, or each session has its own
			}
			sub := &rpc.Message{ID: json.RawMessage(`0`), Method: "resources/subscribe", Params: mustJSON(map[string]string{"uri": uri})}
			if resp := g.forwardSubscription(ctx, ls, srv, sub, uri, noSink); resp.Error == nil {
				l.filter.ResourceSubscriptions = append(l.filter.ResourceSubscriptions, uri)
			}
		}
	}
	ack := mustJSON(map[string]any{
		"notifications": l.filter,
		"_meta":         map[string]json.RawMessage{metaSubscriptionID: m.ID},
	})
	g.listeners.add(l)
	defer g.listeners.remove(l)
	// The acknowledgement goes first: registered before it, a change that
	// comes meanwhile waits for it, and is delivered after it, not lost.
	if err := l.ack(ack); err != nil {
		return errorResponse(m.ID, rpc.InternalError, "subscriptions/listen needs a stream for its notifications: "+err.Error())
	}
	select {
	case <-ctx.Done():
	case <-l.lost:
		g.log.Warn("a subscriptions/listen stream was ended: its client did not take a notification in time", "server", endpointName(srv))
	}
	res := mustJSON(map[string]any{"resultType": "complete", "_meta": map[string]json.RawMessage{metaSubscriptionID: m.ID}})
	return resultResponse(m.ID, res)
}

// tellListeners sends the list-change notification method from srv to
// every listener that sees the server and opted into it.
func (g *Gateway) tellListeners(srv *fleet.Server, method string) {
	for _, l := range g.listeners.of(srv, method) {
		l.notify(method)
	}
}

// listenerSet is the open subscriptions/listen requests. Its methods are
// the only code that touches it.
type listenerSet struct {
	mu sync.Mutex
	m  map[*listener]bool
}

func (ls *listenerSet) add(l *listener) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.m == nil {
		ls.m = map[*listener]bool{}
	}
	ls.m[l] = true
}

func (ls *listenerSet) remove(l *listener) {
	ls.mu.Lock()
	delete(ls.m, l)
	ls.mu.Unlock()
}

// of lists the listeners that see srv and opted into the list-change
// notification method.
func (ls *listenerSet) of(srv *fleet.Server, method string) []*listener {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var to []*listener
	for l := range ls.m {
		if (l.srv == nil || l.srv == srv) && l.filter.wants(method) {
			to = append(to, l)
		}
	}
	return to
}
