package gateway

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// registry is the gateway's record of who asks what: the legacy sessions
// open on its endpoints, what the modern requests running a per-session
// server's instance of their own declared, and the client requests in
// flight on each server connection with everything tied to them — their
// progress tokens, the requests relayed to their clients, the requests
// abandoned and ended lately. Its methods are the only code that reads or
// writes these tables (and the fields of sessState, call, outReq and
// modernReq their comments say it guards), each under mu, so the
// invariants between them are kept here alone:
//   - a call is in its session's inFlight from register to endCall, and
//     in its calls (by client id) until then or until a later call of the
//     same id takes its place there; it is in calls (by connection) and
//     tokens (by our progress token) from addCall to endCall;
//   - an outgoing request is in outReqs and in its session's outReqs
//     together, from addOutReq to the one take that removes it from both
//     and ends its wait (answered);
//   - a session's calls end, and its outgoing requests are taken, when
//     it closes (closeSession), after which no call of it registers.
//
// Nothing here blocks while mu is held, nor calls out of the package;
// capsOf runs its caller's read under it, which must not block either.
type registry struct {
	mu sync.Mutex
	// sessions are the legacy sessions open, byKey the same by key.
	sessions map[*Session]*sessState
	byKey    map[string]*Session
	// ownCaps are the capabilities the modern requests that run a
	// per-session server's instance of their own declared, by request
	// key, while they run (SessionCapabilities).
	ownCaps map[string]json.RawMessage
	calls   map[fleet.Conn][]*call // in flight, oldest first
	// abandoned are requests that ended unanswered, per connection.
	abandoned map[fleet.Conn][]abandonedCall
	// recent are the requesters whose requests ended on a connection
	// within linger, per connection: a server may still send lines of
	// theirs.
	recent   map[fleet.Conn][]abandonedCall
	recentGC time.Time     // when recent was last swept
	linger   time.Duration // how long a requester's ended request counts as recent
	// legacyActed: when a legacy client last acted on each connection
	// (see noteLegacyLocked); legacyGC, when it was last swept.
	legacyActed map[fleet.Conn]time.Time
	legacyGC    time.Time
	tokens      map[string]*call   // our progress token → call
	outReqs     map[string]*outReq // our id of a server→client request → where it came from
}

func newRegistry() *registry {
	return &registry{
		sessions:  map[*Session]*sessState{},
		byKey:     map[string]*Session{},
		ownCaps:   map[string]json.RawMessage{},
		calls:     map[fleet.Conn][]*call{},
		abandoned: map[fleet.Conn][]abandonedCall{},
		recent:    map[fleet.Conn][]abandonedCall{},
		linger:    defaultLinger,
		tokens:    map[string]*call{},
		outReqs:   map[string]*outReq{},
	}
}

// Sessions.

// open opens s on the endpoint of srv (nil for the aggregated one).
func (t *registry) open(s *Session, srv *fleet.Server) {
	t.mu.Lock()
	t.sessions[s] = &sessState{srv: srv, calls: map[string]*call{}, outReqs: map[string]*outReq{}}
	t.byKey[s.Key()] = s
	t.mu.Unlock()
}

// closeSession takes s out of the tables: it is closed, no call of it
// registers after, and its outgoing requests are taken (their waits
// ended). It returns s's state (nil if s was not open), its calls in
// flight, the requests taken, and, if it had calls, a channel closed when
// the last ends.
func (t *registry) closeSession(s *Session) (st *sessState, calls []*call, reqs []*outReq, idle chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st = t.sessions[s]
	delete(t.sessions, s)
	delete(t.byKey, s.Key())
	if st == nil || st.closed {
		return nil, nil, nil, nil
	}
	st.closed = true
	for c := range st.inFlight { // by id, a repeated id's earlier call is not in calls
		calls = append(calls, c)
	}
	for id, r := range st.outReqs {
		reqs = append(reqs, r)
		delete(t.outReqs, id)
		r.answered()
	}
	clear(st.outReqs)
	if len(st.inFlight) > 0 {
		st.idle = make(chan struct{})
		idle = st.idle
	}
	return st, calls, reqs, idle
}

// sessionByKey is the open session keyed key, or nil.
func (t *registry) sessionByKey(key string) *Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byKey[key]
}

// sessionsFor lists the sessions that see srv: the aggregated ones and
// those of srv's own endpoint.
func (t *registry) sessionsFor(srv *fleet.Server) []*Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*Session
	for s, st := range t.sessions {
		if st.serves(srv) {
			out = append(out, s)
		}
	}
	return out
}

// sees reports whether s is open on an endpoint that serves srv.
func (t *registry) sees(s *Session, srv *fleet.Server) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.sessions[s]
	return st != nil && st.serves(srv)
}

// setCaps records what legacy session s declared at initialize, and, when
// protocol is not "", the revision it negotiated.
func (t *registry) setCaps(s *Session, caps map[string]json.RawMessage, protocol string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.sessions[s]; st != nil {
		st.caps = caps
		if protocol != "" {
			st.protocol = protocol
		}
	}
}

// protocolOf is the revision legacy session s negotiated ("" before its
// initialize, or once closed).
func (t *registry) protocolOf(s *Session) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.sessions[s]; st != nil {
		return st.protocol
	}
	return ""
}

// declared is what the sender keyed key declared of the capabilities in
// names: a modern request's own instance's (modern), its _meta's; a
// legacy session's, its initialize's; none for a session no longer open.
func (t *registry) declared(key string, modern bool, names []string) map[string]json.RawMessage {
	caps := map[string]json.RawMessage{}
	t.mu.Lock()
	defer t.mu.Unlock()
	if modern {
		own := t.ownCaps[key]
		for _, name := range names {
			if v := rpc.Member(own, name); v != nil {
				caps[name] = v
			}
		}
		return caps
	}
	if s := t.byKey[key]; s != nil {
		if st := t.sessions[s]; st != nil {
			for _, name := range names {
				if v, ok := st.caps[name]; ok {
					caps[name] = v
				}
			}
		}
	}
	return caps
}

// declares reports whether legacy session s declared capability capName
// at initialize (a session that never initialized declared none).
func (t *registry) declares(s *Session, capName string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.sessions[s]
	return st != nil && t.declaresLocked(legacySender(s), st, capName)
}

// declaresLocked reports whether the client of w (its legacy session's
// state st, if known) declared capName: a legacy session at initialize, a
// modern request in its _meta. t.mu is held.
func (t *registry) declaresLocked(w sender, st *sessState, capName string) bool {
	if r := w.req; r != nil {
		return rpc.Member(r.mo.Caps, capName) != nil
	}
	if st == nil {
		return false
	}
	_, ok := st.caps[capName]
	return ok
}

// anyDeclares reports whether a legacy session open on an endpoint that
// serves srv declared capName.
func (t *registry) anyDeclares(srv *fleet.Server, capName string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, st := range t.sessions { // legacy sessions: modern requests are in no table
		if _, ok := st.caps[capName]; ok && st.serves(srv) {
			return true
		}
	}
	return false
}

// capsOf reads the capabilities of c's legacy session with read, under
// t.mu (read must not block).
func (t *registry) capsOf(c *call, read func(map[string]json.RawMessage)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	read(c.st.caps)
}

// Calls in flight.

// register makes f's call its sender's, from the start, before its server
// is reached: a cancellation or the session's end that comes while the
// server starts or restarts cancels it there, and it never runs. It
// returns the client's answer if the sender has ended (f has then ended
// too).
func (t *registry) register(f *flight, srv *fleet.Server) *rpc.Message {
	c, w := f.c, f.from
	t.mu.Lock()
	if r := w.req; r != nil {
		// A modern request is in no table, and its calls need none:
		// nothing finds them by id (a client cancels a modern request
		// by ending it — its HTTP request, or over stdio through the
		// front's own registry of modern requests) and nothing waits
		// for them to end.
		if r.closed {
			t.mu.Unlock()
			return f.senderEnded()
		}
		if srv.Config().PerSession() {
			r.private = true             // the request's own instance, ended with it
			t.ownCaps[r.key] = r.mo.Caps // what it is declared (SessionCapabilities)
		}
		t.mu.Unlock()
		return nil
	}
	st := t.sessions[w.sess]
	if st == nil || st.closed {
		t.mu.Unlock()
		return f.senderEnded()
	}
	c.st = st
	st.calls[f.key] = c     // a client's later request under the same id takes it
	if st.inFlight == nil { // made at its first call: a session that only opens costs none
		st.inFlight = map[*call]struct{}{}
	}
	st.inFlight[c] = struct{}{}
	if f.tr != nil {
		f.tr.protocol = st.protocol
	}
	t.mu.Unlock()
	return nil
}

// endModern closes modern request r: no call of it registers after. It
// reports whether r ran a per-session server's instance of its own.
func (t *registry) endModern(r *modernReq) (private bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.closed = true
	private, r.private = r.private, false
	if private {
		delete(t.ownCaps, r.key)
	}
	return private
}

// addCall puts c, registered and about to be sent on conn, in conn's calls
// in flight and under its progress token.
func (t *registry) addCall(c *call, conn fleet.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.conn = conn
	t.calls[conn] = append(t.calls[conn], c)
	if c.ourTok != "" {
		t.tokens[c.ourTok] = c
	}
}

// endCall takes c, keyed by its client's id, out of the gateway's tables
// as it ended at now (read before the lock every call contends for).
func (t *registry) endCall(c *call, key string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := c.st; st != nil { // a legacy session's
		if st.calls[key] == c {
			delete(st.calls, key)
		}
		delete(st.inFlight, c)
		if st.idle != nil && len(st.inFlight) == 0 {
			close(st.idle)
			st.idle = nil
		}
	}
	if c.conn == nil {
		return // ended before it reached its server
	}
	t.noteRecentAtLocked(c.conn, c.from, now)
	// Taken out in place (every reader holds t.mu), the order kept.
	list := t.calls[c.conn]
	for i, x := range list {
		if x == c {
			copy(list[i:], list[i+1:])
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		delete(t.calls, c.conn)
	} else {
		t.calls[c.conn] = list
	}
	if c.ourTok != "" {
		delete(t.tokens, c.ourTok)
	}
}

// callOf is legacy session s's call in flight whose client id is id, or
// nil.
func (t *registry) callOf(s *Session, id json.RawMessage) *call {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.sessions[s]; st != nil {
		return st.calls[string(id)]
	}
	return nil
}

// progressOf is the call whose progress token (ours) is id, on conn, and
// the client's token of it now (nil: none, for a held call's round that
// asked for no progress); nil if there is none.
func (t *registry) progressOf(conn fleet.Conn, id string) (*call, json.RawMessage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.tokens[id]
	if c == nil || c.conn != conn {
		return nil, nil
	}
	return c, c.token
}

// retoken makes tok (nil: none) the client's progress token of c, for a
// held call's later round.
func (t *registry) retoken(c *call, tok json.RawMessage) {
	t.mu.Lock()
	c.token = tok
	t.mu.Unlock()
}

// modernOf is c's modern request's _meta now (a held call's later rounds
// replace it), nil for a legacy session's call.
func (t *registry) modernOf(c *call) *Modern {
	t.mu.Lock()
	defer t.mu.Unlock()
	return c.from.modern()
}

// nextRound makes mo the _meta of r's held call's next round.
func (t *registry) nextRound(r *modernReq, mo *Modern) {
	t.mu.Lock()
	r.mo = mo
	t.mu.Unlock()
}

// newestCallOf is legacy session s's newest request in flight on conn, or
// nil.
func (t *registry) newestCallOf(conn fleet.Conn, s *Session) *call {
	return t.taskCallOf(conn, s, "")
}

// taskCallOf is legacy session s's request in flight on conn that waits
// for the result of the task the server knows as up (its tasks/result),
// the newest if several; else (or with up "") s's newest request there;
// else nil.
func (t *registry) taskCallOf(conn fleet.Conn, s *Session, up string) *call {
	t.mu.Lock()
	defer t.mu.Unlock()
	var newest *call
	list := t.calls[conn]
	for i := len(list) - 1; i >= 0; i-- {
		c := list[i]
		if c.from.sess != s {
			continue
		}
		if up == "" || c.task == up {
			return c
		}
		if newest == nil {
			newest = c
		}
	}
	return newest
}

// inFlight is the newest request in flight on conn and the number of
// client sessions whose requests the server may still be serving there:
// those in flight, and those that ended unanswered (cancelled, timed out)
// within their request timeout — a server may go on with a request it was
// told to drop. A modern client's held call counts while it is held, its
// round answered or not: the server may still ask for more in it.
func (t *registry) inFlight(conn fleet.Conn) (*call, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[sender]bool{}
	now := time.Now()
	for _, a := range t.abandoned[conn] {
		if now.Before(a.until) {
			seen[a.from] = true
		}
	}
	list := t.calls[conn]
	for _, c := range list {
		seen[c.from] = true
	}
	if len(list) == 0 {
		return nil, len(seen)
	}
	return list[len(list)-1], len(seen)
}

// inFlightDeclares reports whether the client of a request in flight on
// conn, or of one lately abandoned there, declared capName.
func (t *registry) inFlightDeclares(conn fleet.Conn, capName string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.calls[conn] {
		if t.declaresLocked(c.from, c.st, capName) {
			return true
		}
	}
	now := time.Now()
	for _, a := range t.abandoned[conn] {
		if now.Before(a.until) && t.declaresLocked(a.from, t.sessions[a.from.sess], capName) {
			return true
		}
	}
	return false
}

// sessionCall stands for legacy session s when a server asks it
// something outside any of its requests: its session stream, no timeout
// of a request; nil if s is not open, or its stream would not reach its
// client now (an HTTP session with no GET stream open: the request would
// wait there, and the server with it, until the client opens one).
func (t *registry) sessionCall(s *Session) *call {
	if so, ok := s.Out().(interface{ StreamOpen() bool }); ok && !so.StreamOpen() {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.sessions[s]
	if st == nil || st.closed {
		return nil
	}
	return &call{from: legacySender(s), st: st, related: s.Out()}
}

// Requests to clients.

// addOutReq makes r, under ours, pending for the client of c: an error if
// c's session has closed (r's wait is then ended).
func (t *registry) addOutReq(c *call, ours string, r *outReq) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.st.closed {
		r.answered()
		return errSessionClosed
	}
	t.outReqs[ours] = r
	c.st.outReqs[ours] = r
	return nil
}

func (t *registry) takeOutReq(id string) *outReq { return t.takeOutReqOf(nil, id) }

// takeOutReqOf removes and returns the pending request id if it was sent
// to session s (any session when s is nil); otherwise it leaves it pending
// and returns nil.
func (t *registry) takeOutReqOf(s *Session, id string) *outReq {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.outReqs[id]
	if r != nil && s != nil && r.sess != s {
		return nil
	}
	if r != nil {
		t.takeLocked(id, r)
	}
	return r
}

// takeLocked removes outgoing request r, pending as id, from both tables,
// and ends its wait. t.mu is held.
func (t *registry) takeLocked(id string, r *outReq) {
	delete(t.outReqs, id)
	if st := t.sessions[r.sess]; st != nil {
		delete(st.outReqs, id)
	}
	r.answered()
}

// withdraw takes the outgoing request that conn's server sent as
// backendID, if one is pending (the server withdrew it), and ends its
// wait; ours is its id as its client knows it.
func (t *registry) withdraw(conn fleet.Conn, backendID json.RawMessage) (ours string, r *outReq) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, x := range t.outReqs {
		if x.conn == conn && string(x.backendID) == string(backendID) {
			ours, r = k, x
			break
		}
	}
	if r != nil {
		t.takeLocked(ours, r)
	}
	return ours, r
}

// answered ends r's wait on the client: its call's timeout runs again,
// afresh.
func (r *outReq) answered() {
	if r.call != nil {
		// The timeout restarts before the wait ends: a timer that fires
		// in between sees the wait and runs again.
		r.call.touch()
		r.call.waiting.Add(-1)
	}
}

// What attributes a server's lines and requests to a requester.

// abandon records that w's request on conn ended unanswered, so that for
// its timeout the server's requests are not attributed to another sender
// by what is in flight. Expired records of every connection are dropped.
func (t *registry) abandon(conn fleet.Conn, w sender, timeout time.Duration) {
	if timeout <= 0 {
		timeout = time.Minute
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	sweep(t.abandoned, now)
	t.abandoned[conn] = append(t.abandoned[conn], abandonedCall{from: w, until: now.Add(timeout)})
}

// noteRecentAtLocked records that a request of w on conn ended at now (see
// recent): at most two records per connection, of the two requesters
// whose requests there ended last; expired ones swept at most once per
// linger. t.mu is held.
func (t *registry) noteRecentAtLocked(conn fleet.Conn, w sender, now time.Time) {
	if now.Sub(t.recentGC) > t.linger {
		t.recentGC = now
		sweep(t.recent, now)
	}
	if w.legacyClient() {
		t.noteLegacyLocked(conn, now)
	}
	// Only whether one requester or several were active matters: the two
	// latest are kept, each with its latest end.
	w = w.requester()
	list := t.recent[conn]
	for i := range list {
		if list[i].from == w {
			// now was read before t.mu: a later end may have been here first.
			if until := now.Add(t.linger); until.After(list[i].until) {
				list[i].until = until
			}
			return
		}
	}
	rec := abandonedCall{from: w, until: now.Add(t.linger)}
	switch {
	case len(list) < 2:
		t.recent[conn] = append(list, rec)
	case list[0].until.Before(list[1].until):
		list[0] = rec
	default:
		list[1] = rec
	}
}

// activeSessions counts the requesters (see sender.requester) whose
// requests are in flight on conn, ended unanswered within their timeout,
// or ended within linger.
func (t *registry) activeSessions(conn fleet.Conn) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[sender]bool{}
	now := time.Now()
	for _, l := range [][]abandonedCall{t.abandoned[conn], t.recent[conn]} {
		for _, a := range l {
			if now.Before(a.until) {
				seen[a.from.requester()] = true
			}
		}
	}
	for _, c := range t.calls[conn] {
		seen[c.from.requester()] = true
	}
	return len(seen)
}

// rootsAsked records that a client told conn's server its roots changed:
// the server may now ask for roots on its own (for that client), and such
// a request is no modern call's.
func (t *registry) rootsAsked(conn fleet.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.noteLegacyLocked(conn, time.Now())
}

// noteLegacyLocked records that a legacy client acted on conn at now —
// a request of its ended there, or it told the server its roots changed —
// sweeping the records older than the linger at most once per linger.
// t.mu is held.
func (t *registry) noteLegacyLocked(conn fleet.Conn, now time.Time) {
	if t.legacyActed == nil {
		t.legacyActed = map[fleet.Conn]time.Time{}
	}
	if now.Sub(t.legacyGC) > t.linger {
		t.legacyGC = now
		for c, at := range t.legacyActed {
			if now.Sub(at) >= t.linger {
				delete(t.legacyActed, c) // a connection that ended is not kept
			}
		}
	}
	if now.After(t.legacyActed[conn]) { // now may have been read before t.mu
		t.legacyActed[conn] = now
	}
}

// legacyLately reports whether a legacy client acted on conn within the
// linger (noteLegacyLocked): the server may be asking for roots on its own
// for that client (a legacy client's roots are its session's), so such a
// request is no modern call's.
func (t *registry) legacyLately(conn fleet.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.legacyActed[conn]
	return ok && time.Since(at) < t.linger
}

// sweep drops the records of m that have expired by now.
func sweep(m map[fleet.Conn][]abandonedCall, now time.Time) {
	for k, list := range m {
		kept := list[:0]
		for _, a := range list {
			if now.Before(a.until) {
				kept = append(kept, a)
			}
		}
		if len(kept) == 0 {
			delete(m, k)
		} else {
			m[k] = kept
		}
	}
}
