package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// The legacy session, made by an initialize (see initialize): its GET
// stream of messages related to no request, its DELETE, and the
// handler's table of sessions with their expiry.

// httpSession is one Mcp-Session-Id. It is the Sink the endpoint got from
// Open: messages related to no request are numbered and kept in a ring,
// and the GET stream, when one is open, writes them out.
type httpSession struct {
	h       *StreamableHandler
	id      string
	sess    *Session
	version string // the protocol revision negotiated at initialize

	// place is the session's under the handler's SessionLimit: its
	// requests in flight, its GET stream, its activity.
	place   Place
	streams atomic.Uint64 // POST streams numbered so far

	mu        sync.Mutex
	closed    bool
	ring      []outEvent // len EventBuffer once used; nil before and after
	start, n  int        // ring[start] is the oldest of n events
	seq       uint64     // the last event's number
	delivered uint64     // the last event written to a GET stream
	get       *getStream // the open GET stream, if any
}

// outEvent is one message for the GET stream, encoded for an SSE data
// line.
type outEvent struct {
	seq  uint64
	data []byte
}

// serveGET opens the session's stream for messages related to no request.
func (h *StreamableHandler) serveGET(w http.ResponseWriter, r *http.Request) {
	if _, sseOK := accepts(r.Header[hdrAccept]); !sseOK {
		h.gw.refusedHTTP(telemetry.RefusedNotAcceptable)
		plainError(w, http.StatusNotAcceptable, "Not Acceptable: Accept must allow text/event-stream")
		return
	}
	if !h.checkVersion(w, r) {
		return
	}
	sid, ok := h.requireSessionID(w, r)
	if !ok {
		return
	}
	stream, after, resume := uint64(0), uint64(0), false
	if v := r.Header[hdrLastEventID]; len(v) != 0 && v[0] != "" {
		var ok bool
		stream, after, ok = parseEventID(v[0])
		if !ok {
			h.gw.refusedHTTP(telemetry.RefusedLastEventID)
			plainError(w, http.StatusBadRequest, "Bad Request: malformed Last-Event-ID")
			return
		}
		resume = true
	}
	hs := h.acquireStream(r, sid)
	if hs == nil {
		h.gw.refusedHTTP(telemetry.RefusedUnknownSession)
		sessionNotFound(w)
		return
	}
	defer hs.place.exitStream()
	if resume && stream != 0 {
		// A POST stream: its request ended with its connection.
		sseHeader(w)
		w.WriteHeader(http.StatusOK)
		return
	}
	hs.serveStream(w, r, after, resume)
}

// checkVersion rejects a GET or DELETE whose MCP-Protocol-Version is not
// one of a session's: the modern revision has neither (405), an unknown
// one is refused (400).
func (h *StreamableHandler) checkVersion(w http.ResponseWriter, r *http.Request) bool {
	switch e, v := era(r); e {
	case eraModern:
		h.gw.refusedHTTP(telemetry.RefusedMethod)
		w.Header()["Allow"] = []string{"POST"}
		plainError(w, http.StatusMethodNotAllowed, "Method Not Allowed: MCP "+modernVersion+" has no "+r.Method+" on the MCP endpoint")
		return false
	case eraUnknown:
		h.gw.refusedHTTP(telemetry.RefusedVersion)
		rpcError(w, http.StatusBadRequest, nil, rpc.InvalidRequest,
			"Bad Request: unsupported MCP-Protocol-Version "+strconv.Quote(v)+" (supported: "+strings.Join(supportedVersions, ", ")+")")
		return false
	}
	return true
}

// parseEventID parses "<stream>_<seq>".
func parseEventID(id string) (stream, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "_")
	if !found {
		return 0, 0, false
	}
	stream, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return stream, seq, err1 == nil && err2 == nil
}

// acquireStream is acquire for a GET stream, which keeps the session
// from expiring but not from eviction: the caller ends it with
// hs.place.exitStream.
func (h *StreamableHandler) acquireStream(r *http.Request, sid string) *httpSession {
	return h.lookup(r, sid, (*Place).enterStream)
}

// getStream is the control of one GET request's stream.
type getStream struct {
	wake chan struct{} // cap 1: there are new events
	stop chan struct{} // closed: replaced by a newer GET, or the session ended
	sw   *streamWriter
}

// end stops the stream: at once if it waits for events, within the close
// grace if it is blocked in a write. Callers hold the session's mu, once.
func (g *getStream) end() {
	close(g.stop)
	g.sw.end()
}

// serveStream runs the session's GET stream until the client goes away, a
// newer GET replaces it, the session ends or the handler closes. It starts
// after event number after if resume, else after the last event already
// written to a stream. A client that does not take a write within
// WriteTimeout has stopped reading: its session is closed (see
// HTTPOptions.WriteTimeout).
func (hs *httpSession) serveStream(w http.ResponseWriter, r *http.Request, after uint64, resume bool) {
	h := hs.h
	sw := h.newStreamWriter(w)
	defer sw.finish()
	g := &getStream{wake: make(chan struct{}, 1), stop: make(chan struct{}), sw: sw}
	after, ok := hs.attach(g, after, resume)
	if !ok {
		h.gw.refusedHTTP(telemetry.RefusedUnknownSession)
		sessionNotFound(w)
		return
	}
	defer hs.detach(g)

	sseHeader(w)
	w.WriteHeader(http.StatusOK)
	// A first write, so that proxies pass the headers on at once.
	if err := sw.write([]byte(": ok\n\n")); err != nil {
		hs.streamFailed(g, err)
		return
	}

	var tick <-chan time.Time
	if h.keepAlive > 0 {
		t := time.NewTicker(h.keepAlive)
		defer t.Stop()
		tick = t.C
	}
	var evs []outEvent
	var buf []byte
	sent := after
	for {
		hs.mu.Lock()
		evs = hs.eventsAfter(evs[:0], sent)
		hs.mu.Unlock()
		// Events go out in writes of about writeChunk bytes, so that a
		// full ring is never copied whole.
		for i := 0; i < len(evs); {
			buf = buf[:0]
			for n := i; i < len(evs) && (i == n || len(buf)+len(evs[i].data) < writeChunk); i++ {
				buf = appendSSE(buf, 0, evs[i].seq, evs[i].data)
			}
			if err := sw.write(buf); err != nil {
				hs.streamFailed(g, err)
				return
			}
			if cap(buf) > 4*writeChunk {
				buf = nil // one large event's
			}
			sent = evs[i-1].seq
			hs.mu.Lock()
			if sent > hs.delivered {
				hs.delivered = sent
			}
			hs.mu.Unlock()
		}
		clear(evs) // let delivered data go
		select {
		case <-g.wake:
		case <-tick:
			if err := sw.write(ssePing); err != nil {
				hs.streamFailed(g, err)
				return
			}
		case <-g.stop:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// attach makes g the session's GET stream, ending the one it replaces,
// and returns the number of the event it starts after: after if resume
// (and the session has numbered that many), else the last event already
// written to a stream. false if the session has ended.
func (hs *httpSession) attach(g *getStream, after uint64, resume bool) (uint64, bool) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.closed {
		return 0, false
	}
	if old := hs.get; old != nil {
		old.end()
		hs.h.log.Debug("http: GET stream replaced by a newer one", "session", hs.id)
	}
	hs.get = g
	if !resume || after > hs.seq {
		after = hs.delivered
	}
	return after, true
}

// detach takes g out of the session, unless a newer GET stream has
// replaced it.
func (hs *httpSession) detach(g *getStream) {
	hs.mu.Lock()
	if hs.get == g {
		hs.get = nil
	}
	hs.mu.Unlock()
}

// eventsAfter appends the kept events numbered after seq to dst.
func (hs *httpSession) eventsAfter(dst []outEvent, seq uint64) []outEvent {
	for i := 0; i < hs.n; i++ {
		if ev := hs.ring[(hs.start+i)%len(hs.ring)]; ev.seq > seq {
			dst = append(dst, ev)
		}
	}
	return dst
}

// streamFailed handles a failed write of GET stream g: a client that did
// not take it in time, unless the stream was being ended anyway, has
// stopped reading, and its session is closed; any other failure (the
// client went away) ends the stream only.
func (hs *httpSession) streamFailed(g *getStream, err error) {
	if !stalled(err) || g.sw.ended() {
		hs.h.log.Debug("http: GET stream ended", "session", hs.id, "err", err)
		return
	}
	hs.h.log.Info("http: client stopped reading its GET stream; closing the session", "session", hs.id, "timeout", hs.h.writeWait)
	hs.h.dropSession(hs)
}

// StreamOpen reports whether the session's GET stream is open: whether
// a message sent now reaches the client now, not when it next opens one.
func (hs *httpSession) StreamOpen() bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.get != nil && !hs.closed
}

// Send queues m for the session's GET stream. It never blocks on the
// network: a full ring drops its oldest event.
func (hs *httpSession) Send(m *rpc.Message) error {
	data := encodeEvent(m)
	hs.mu.Lock()
	if hs.closed {
		hs.mu.Unlock()
		return ErrSessionClosed
	}
	if hs.ring == nil {
		hs.ring = make([]outEvent, hs.h.evBuf)
	}
	hs.seq++
	ev := outEvent{seq: hs.seq, data: data}
	if hs.n == len(hs.ring) {
		if old := hs.ring[hs.start]; old.seq > hs.delivered {
			hs.h.dropped.Add(1)
			hs.h.log.Debug("http: session buffer full, dropped a message", "session", hs.id)
		}
		hs.ring[hs.start] = ev
		hs.start = (hs.start + 1) % len(hs.ring)
	} else {
		hs.ring[(hs.start+hs.n)%len(hs.ring)] = ev
		hs.n++
	}
	if g := hs.get; g != nil {
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
	hs.mu.Unlock()
	return nil
}

// serveDELETE ends a session.
func (h *StreamableHandler) serveDELETE(w http.ResponseWriter, r *http.Request) {
	if !h.checkVersion(w, r) {
		return
	}
	sid, ok := h.requireSessionID(w, r)
	if !ok {
		return
	}
	h.mu.Lock()
	hs := h.sessions[sid]
	if hs != nil && !identity.Same(hs.sess.Identity(), identity.FromContext(r.Context())) {
		hs = nil // another identity's: not found, and left alone
	}
	if hs != nil {
		delete(h.sessions, sid)
	}
	h.mu.Unlock()
	if hs == nil || !hs.place.close() {
		// Unknown, or being closed already (evicted, expired).
		h.gw.refusedHTTP(telemetry.RefusedUnknownSession)
		sessionNotFound(w)
		return
	}
	h.log.Debug("http: session deleted", "session", sid)
	h.closeSession(hs)
	w.WriteHeader(http.StatusNoContent)
}

// HasSession reports whether id names a session the handler serves.
func (h *StreamableHandler) HasSession(id string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	_, ok := h.sessions[id]
	return ok
}

// register makes a new session visible; false if the handler is closed.
func (h *StreamableHandler) register(hs *httpSession) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.sessions[hs.id] = hs
	if h.timeout > 0 {
		// A new session is due UnusedSessionTimeout from now at the
		// latest: the sweep looks then, if not before.
		h.armLocked(time.Now(), h.unused)
	}
	return true
}

// minSweep is the least time between two sweeps: expiries due within it
// of each other are made by one sweep (a flood's sessions fall due
// together, and each sweep looks at every session).
const minSweep = 250 * time.Millisecond

// armLocked sets the sweep's timer to fire in d from now, unless it is
// set to fire sooner. h.mu is held.
func (h *StreamableHandler) armLocked(now time.Time, d time.Duration) {
	d = max(d, minSweep)
	due := now.Add(d)
	if !h.timerDue.IsZero() && !due.Before(h.timerDue) {
		return
	}
	h.timerDue = due
	if h.timer == nil {
		h.timer = time.AfterFunc(d, h.sweep)
	} else {
		h.timer.Reset(d)
	}
}

// sweep closes the sessions due (see HTTPOptions.SessionTimeout) and sets
// the timer for the next one due. One timer serves all sessions of the
// handler.
func (h *StreamableHandler) sweep() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.sweeps.Add(1)
	defer h.sweeps.Done()
	now := time.Now()
	var expired []*httpSession
	var why []EvictReason
	next := time.Duration(-1)
	for id, hs := range h.sessions {
		reason, wait := hs.due(now)
		if wait < 0 {
			delete(h.sessions, id)
			expired = append(expired, hs)
			why = append(why, reason)
			continue
		}
		if next < 0 || wait < next {
			next = wait
		}
	}
	h.timerDue = time.Time{}
	if next >= 0 {
		h.armLocked(now, next)
	}
	h.mu.Unlock()
	var n [numEvictReasons]int
	for i, hs := range expired {
		h.log.Debug("http: session expired", "session", hs.id, "reason", why[i].String())
		h.closeSession(hs)
		n[why[i]]++
	}
	for r, k := range n {
		h.limit.counted(EvictReason(r), k)
	}
}

// due tells whether the session is due to close now (wait < 0: it is
// claimed for closing, for reason), else in how long the sweep should
// look at it again (see HTTPOptions.SessionTimeout).
func (hs *httpSession) due(now time.Time) (reason EvictReason, wait time.Duration) {
	h, p := hs.h, &hs.place
	s := p.state.Load()
	if s&(placeClosed|placeReqMask) != 0 {
		// Busy, or being closed by another path (which forgets it).
		return 0, h.timeout
	}
	wait = h.timeout
	if s&placeSent == 0 && h.unused > 0 {
		if wait = hs.sess.Created.Add(h.unused).Sub(now); wait <= 0 {
			if p.claim(true) {
				return EvictUnused, -1
			}
			return 0, minSweep // it just became busy
		}
	}
	if s&placeStreamMask == 0 {
		idle := time.Duration(p.lim.now() - p.last.Load())
		d := h.timeout - idle
		if d <= 0 {
			if p.claim(false) {
				return EvictIdle, -1
			}
			return 0, minSweep
		}
		wait = min(wait, d)
	}
	return 0, wait
}

// evict ends the session to make room for another (SessionLimit): as a
// DELETE would, its next request gets 404.
func (hs *httpSession) evict() {
	hs.h.log.Debug("http: session evicted to make room", "session", hs.id)
	hs.h.forget(hs)
	hs.h.closeSession(hs)
}

// dropSession closes hs and forgets it, unless it is already gone.
func (h *StreamableHandler) dropSession(hs *httpSession) {
	hs.place.close()
	h.forget(hs)
	h.closeSession(hs)
}

// forget takes hs out of the map, if it is there.
func (h *StreamableHandler) forget(hs *httpSession) {
	h.mu.Lock()
	if h.sessions[hs.id] == hs {
		delete(h.sessions, hs.id)
	}
	h.mu.Unlock()
}

// closeSession ends hs (already out of the map, or never in it): its GET
// stream ends, its Sink refuses messages, the endpoint closes it, and
// its place is given back (unless an admission took it over). The first
// call does it; later ones do nothing.
func (h *StreamableHandler) closeSession(hs *httpSession) {
	hs.mu.Lock()
	if hs.closed {
		hs.mu.Unlock()
		return
	}
	hs.closed = true
	if hs.get != nil {
		hs.get.end()
		hs.get = nil
	}
	hs.ring, hs.start, hs.n = nil, 0, 0
	hs.mu.Unlock()
	h.ep.Close(hs.sess)
	hs.place.leave()
}
