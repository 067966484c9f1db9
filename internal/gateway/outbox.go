package gateway

import (
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

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

// outboxes are the outboxes of the server connections something waits
// for. Their methods are the only code that touches them.
type outboxes struct {
	mu sync.Mutex
	m  map[fleet.Conn]*outbox
}

// post queues f to run, in order, on conn's outbox; it reports false (and
// f does not run) when the outbox is full.
func (o *outboxes) post(conn fleet.Conn, f func()) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob := o.m[conn]
	if ob == nil {
		if o.m == nil {
			o.m = map[fleet.Conn]*outbox{}
		}
		ob = &outbox{}
		o.m[conn] = ob
	}
	if len(ob.q) >= outboxLimit {
		return false
	}
	ob.q = append(ob.q, f)
	if !ob.running {
		ob.running = true
		go o.drain(conn, ob)
	}
	return true
}

// drain runs what conn's outbox holds, in order, until it is empty.
func (o *outboxes) drain(conn fleet.Conn, ob *outbox) {
	for {
		o.mu.Lock()
		if len(ob.q) == 0 {
			ob.running = false
			delete(o.m, conn)
			o.mu.Unlock()
			return
		}
		f := ob.q[0]
		ob.q[0] = nil
		ob.q = ob.q[1:]
		o.mu.Unlock()
		f()
	}
}
