package gateway

import "github.com/mcpvisor/mcpvisor/internal/fleet"

// outboxLimit bounds what may wait for one server connection: a server that
// stops reading gets no more than this queued towards it.
const outboxLimit = 256

// outbox holds what the clients send to one server connection without
// waiting for an answer — notifications, answers to its requests — in
// order. One goroutine drains it while it is not empty, so that a server
// that stops reading its input holds up only its own outbox, never a
// front's read loop nor another server. Each send is bounded by the
// connection's write timeout.
type outbox struct {
	q       []func()
	running bool
}

// post queues f to run, in order, on conn's outbox; it reports false (and
// f does not run) when the outbox is full.
func (g *Gateway) post(conn fleet.Conn, f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ob := g.outboxes[conn]
	if ob == nil {
		ob = &outbox{}
		g.outboxes[conn] = ob
	}
	if len(ob.q) >= outboxLimit {
		return false
	}
	ob.q = append(ob.q, f)
	if !ob.running {
		ob.running = true
		go g.drain(conn, ob)
	}
	return true
}

func (g *Gateway) drain(conn fleet.Conn, ob *outbox) {
	for {
		g.mu.Lock()
		if len(ob.q) == 0 {
			ob.running = false
			delete(g.outboxes, conn)
			g.mu.Unlock()
			return
		}
		f := ob.q[0]
		ob.q[0] = nil
		ob.q = ob.q[1:]
		g.mu.Unlock()
		f()
	}
}
