package gateway

import (
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The bound on client sessions, and the room made at it.
//
// A SessionLimit counts places. Each of these holds one while it is open:
// a legacy HTTP session (of every StreamableHandler that shares the
// limit), a session of the daemon's socket (a mcpvisor connect client),
// and a 2026-07-28 subscriptions/listen stream.
//
// At the bound an admission makes room instead of refusing: it evicts the
// least recently active session that has no request in flight, and
// refuses (503 over HTTP, naming the limit) only when there is none —
// when every place is a session with a request in flight, or a listen.
//
//   - A session's activity is the start and the end of each of its
//     requests and other messages (a POST, a line on the socket), and the
//     opening and the end of its GET stream. An open GET stream — or an
//     open socket connection — is no activity while it stays open: a
//     session whose only activity is an open stream is idle from the
//     moment the stream opened, so that a flood that holds a stream per
//     session cannot pin the table. (Every go-sdk and TypeScript SDK
//     client holds one: counted as activity, it would rank a client that
//     connected a minute ago and did nothing since above one that called
//     a tool a second ago.)
//   - A session with a request in flight is never evicted (an open GET
//     stream is no request in flight).
//   - A listen is never evicted: it is a request in flight — its client's
//     live interest, which no 404 would make it renew as it renews a
//     session (a graceful end tells a 2026-07-28 client its subscription
//     is over) — but its admission makes room as any other does.
//   - An evicted HTTP session ends as a DELETE ends it — its GET stream
//     ends, its per-session server instances stop, its subscriptions and
//     log level go — and its next request gets 404, which tells its
//     client to initialize again. An evicted socket session is told so
//     (see StdioOptions.Place) and its connection closes.
//
// Which session is least recently active is kept in a heap ordered by
// activity, updated lazily: a request changes only its session's atomics
// (no lock shared by all sessions is taken per request), and an
// admission at the bound corrects the entries it meets at the heap's top
// as it looks for the oldest — O(log n) for each correction, and each is
// owed to activity since the entry was last placed. A session the search
// finds with a request in flight is parked, out of the heap, until that
// request ends (its end puts it back): each is looked at once per request
// in flight, and an admission with every session busy is refused without
// looking at any.
//
// Evictions — to make room (EvictLimit), and the expiries of the HTTP
// front (EvictUnused, EvictIdle) — are counted by reason, and logged at
// most once per burst (see evictLog).
type SessionLimit struct {
	max   atomic.Int64
	epoch time.Time // activity times are nanoseconds since

	mu   sync.Mutex
	n    int      // places held
	idle []*Place // the places that may be evicted, a min-heap by key

	evictions [numEvictReasons]atomic.Uint64
	log       evictLog
}

// NewSessionLimit returns a bound of max sessions; 0 or negative means
// DefaultMaxSessions. Its evictions are logged to slog.Default until
// SetLogger.
func NewSessionLimit(max int) *SessionLimit {
	l := &SessionLimit{epoch: time.Now()}
	l.log.log = slog.Default()
	l.SetMax(max)
	return l
}

// SetLogger sets where the limit's evictions are logged (nil: nowhere).
// Call before use.
func (l *SessionLimit) SetLogger(log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l.log.log = log
}

// SetMax changes the bound (0 or negative: DefaultMaxSessions) for the
// admissions after it; places already held beyond a lower bound stay
// held (each admission then evicts one, as at the bound). Safe to call
// while sessions open and close.
func (l *SessionLimit) SetMax(max int) {
	if max <= 0 {
		max = DefaultMaxSessions
	}
	l.max.Store(int64(max))
}

// Max is the bound.
func (l *SessionLimit) Max() int { return int(l.max.Load()) }

// Open reports the places held (sessions and listens, open or being
// opened): a daemon that exits when unused counts them as clients.
func (l *SessionLimit) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// EvictReason is why a session was closed without its client asking.
type EvictReason uint8

const (
	// EvictLimit: evicted to make room for another at the bound.
	EvictLimit EvictReason = iota
	// EvictUnused: an HTTP session that sent nothing since initialize,
	// closed after UnusedSessionTimeout.
	EvictUnused
	// EvictIdle: an HTTP session idle for HTTPOptions.SessionTimeout.
	EvictIdle
	numEvictReasons
)

var evictNames = [numEvictReasons]string{"limit", "unused", "idle"}

// String is the reason's label in /metrics: limit, unused or idle.
func (r EvictReason) String() string {
	if r < numEvictReasons {
		return evictNames[r]
	}
	return "EvictReason(" + strconv.Itoa(int(r)) + ")"
}

// Evictions reports how many sessions were closed for r.
func (l *SessionLimit) Evictions(r EvictReason) uint64 {
	if r >= numEvictReasons {
		return 0
	}
	return l.evictions[r].Load()
}

// EachEviction calls fn with every reason's label and count, in the
// order of the labels, zero counts included.
func (l *SessionLimit) EachEviction(fn func(reason string, n uint64)) {
	for _, r := range [...]EvictReason{EvictIdle, EvictLimit, EvictUnused} {
		fn(r.String(), l.evictions[r].Load())
	}
}

// counted counts n sessions closed for r, and logs them (evictLog).
func (l *SessionLimit) counted(r EvictReason, n int) {
	if n <= 0 {
		return
	}
	l.evictions[r].Add(uint64(n))
	if r != EvictIdle { // an idle expiry is routine: counted, not logged
		l.log.add(r, n, l.Max())
	}
}

// Flush logs the evictions not yet logged at once, instead of at the end
// of their burst.
func (l *SessionLimit) Flush() { l.log.flush() }

// ErrSessionLimit: every place under the bound is held by a session with
// a request in flight, or by a listen: nothing can be evicted.
var ErrSessionLimit = errors.New("gateway: session limit reached")

// limitMessage is the refusal's text, naming the bound.
func (l *SessionLimit) limitMessage() string {
	return "too many sessions: maxSessions is " + strconv.Itoa(l.Max()) +
		" (client sessions — HTTP and mcpvisor connect — and subscriptions/listen streams open at once), and each has a request in flight;" +
		" try again when one has ended, or raise maxSessions in the config"
}

// limitError is the error of an admission refused at the bound.
type limitError struct{ msg string }

func (e *limitError) Error() string        { return e.msg }
func (e *limitError) Is(target error) bool { return target == ErrSessionLimit }

// Place state bits: requests in flight and open streams are counters,
// sent and closed flags.
const (
	placeReq        = 1
	placeReqMask    = 1<<24 - 1
	placeStream     = 1 << 24
	placeStreamMask = (1<<24 - 1) << 24
	placeSent       = 1 << 60 // a request or a response came after initialize
	placeClosed     = 1 << 61 // claimed for closing: no request may begin
	placeParked     = 1 << 62 // out of the heap until its requests end
)

// evictee is what holds a place that may be evicted.
type evictee interface {
	// evict ends the holder, whose place was claimed (placeClosed) and
	// taken by another: called once, with no lock of the limit's held.
	evict()
}

// Place is one place under a SessionLimit: a session's (HTTP or socket)
// or a listen's. The HTTP front's are inside its sessions; the daemon's
// socket takes one per connection with AdmitConn and hands it to the
// stdio front (StdioOptions.Place).
type Place struct {
	lim   *SessionLimit
	owner evictee // nil: never evicted (a listen)
	state atomic.Uint64
	last  atomic.Int64 // activity: ns since lim.epoch, never decreasing

	// Under lim.mu:
	key  int64 // last as the heap last saw it
	idx  int32 // in lim.idle; -1 when not there
	held bool  // the place is taken (admitted, not yet left)
}

// init readies p, with one request in flight if busy, as activity now.
func (p *Place) init(l *SessionLimit, owner evictee, busy bool) {
	p.lim, p.owner, p.idx = l, owner, -1
	if busy {
		p.state.Store(placeReq)
	}
	p.last.Store(l.now())
}

// now is the time in the limit's activity clock.
func (l *SessionLimit) now() int64 { return int64(time.Since(l.epoch)) }

// touchAt records activity at t (the limit's clock), unless later
// activity is recorded already.
func (p *Place) touchAt(t int64) {
	for {
		old := p.last.Load()
		if t <= old || p.last.CompareAndSwap(old, t) {
			return
		}
	}
}

// enter begins a request: false if the place was claimed for closing.
func (p *Place) enter() bool { return p.add(placeReq) }

// add adds n (a request or a stream) to the place's state: false if the
// place was claimed for closing.
func (p *Place) add(n uint64) bool {
	for {
		s := p.state.Load()
		if s&placeClosed != 0 {
			return false
		}
		if p.state.CompareAndSwap(s, s+n) {
			return true
		}
	}
}

// exit ends a request that entered, as activity now. The last request of
// a parked place puts it back in the heap.
func (p *Place) exit() {
	p.touchAt(p.lim.now())
	if s := p.state.Add(^uint64(placeReq - 1)); s&(placeParked|placeReqMask) == placeParked {
		p.lim.unpark(p)
	}
}

// enterStream opens a stream (a GET stream), as activity now: false if
// the place was claimed for closing.
func (p *Place) enterStream() bool {
	if !p.add(placeStream) {
		return false
	}
	p.touch()
	return true
}

// exitStream ends a stream that entered, as activity now.
func (p *Place) exitStream() {
	p.touchAt(p.lim.now())
	p.state.Add(^uint64(placeStream - 1))
}

// markSent records that the session sent a request or a response.
func (p *Place) markSent() {
	if p.state.Load()&placeSent == 0 {
		p.state.Or(placeSent)
	}
}

// claim marks the place for closing if it has no request in flight (and
// no stream open, unless streams): false if it has, or is claimed.
func (p *Place) claim(streams bool) bool {
	for {
		s := p.state.Load()
		if s&placeClosed != 0 || s&placeReqMask != 0 || !streams && s&placeStreamMask != 0 {
			return false
		}
		if p.state.CompareAndSwap(s, s|placeClosed) {
			return true
		}
	}
}

// close marks the place for closing, requests in flight or not: false if
// it was already.
func (p *Place) close() bool {
	return p.state.Or(placeClosed)&placeClosed == 0
}

// admit takes a place for p (init'ed). At the bound it evicts the least
// recently active session with no request in flight to make room; with
// none, it fails. p's place is held until leave.
func (l *SessionLimit) admit(p *Place) bool {
	l.mu.Lock()
	var victim *Place
	evict := false
	if l.n >= int(l.max.Load()) {
		victim, evict = l.victimLocked()
		if victim == nil {
			l.mu.Unlock()
			return false
		}
	} else {
		l.n++
	}
	p.held = true
	if p.owner != nil {
		p.key = p.last.Load()
		l.push(p)
	}
	l.mu.Unlock()
	if evict {
		l.counted(EvictLimit, 1)
		victim.owner.evict()
	}
	return true
}

// leave gives p's place back, unless an admission took it over (an
// eviction). Safe to call more than once.
func (p *Place) leave() {
	l := p.lim
	l.mu.Lock()
	if p.held {
		p.held = false
		l.n--
		if p.idx >= 0 {
			l.remove(p)
		}
	}
	l.mu.Unlock()
}

// victimLocked finds the place an admission at the bound takes over:
// one already being closed for another reason (evict false: its closer
// ends it), else the least recently active with no request in flight,
// claimed (evict true). nil if every place has a request in flight.
//
// The heap's keys are activity as last seen, never later than the truth:
// an entry whose place was active since is re-keyed and sifted down; the
// top, once its key is true, is the least recently active. A place with
// a request in flight is parked (see park).
func (l *SessionLimit) victimLocked() (*Place, bool) {
	for len(l.idle) > 0 {
		v := l.idle[0]
		s := v.state.Load()
		switch {
		case s&placeClosed != 0:
		case v.last.Load() != v.key:
			v.key = v.last.Load()
			l.down(0)
			continue
		case s&placeReqMask != 0:
			l.park(v)
			continue
		case !v.state.CompareAndSwap(s, s|placeClosed):
			continue
		default:
			l.remove(v)
			v.held = false
			return v, true
		}
		// Being closed already: its place is taken over.
		l.remove(v)
		v.held = false
		return v, false
	}
	return nil, false
}

// park takes v, found with a request in flight, out of the heap until
// its last request ends (exit calls unpark) — unless that end came
// before v was marked, when v goes back at once. l.mu is held.
func (l *SessionLimit) park(v *Place) {
	l.remove(v)
	if old := v.state.Or(placeParked); old&placeReqMask == 0 {
		v.state.And(^uint64(placeParked))
		v.key = v.last.Load()
		l.push(v)
	}
}

// unpark puts p, parked, back in the heap once its requests have ended,
// unless it is no longer held or is being closed.
func (l *SessionLimit) unpark(p *Place) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := p.state.And(^uint64(placeParked))
	if s&placeParked != 0 && s&placeClosed == 0 && p.held && p.idx < 0 {
		p.key = p.last.Load()
		l.push(p)
	}
}

// The heap of l.idle, by key; each place knows its index.

func (l *SessionLimit) push(p *Place) {
	p.idx = int32(len(l.idle))
	l.idle = append(l.idle, p)
	l.up(int(p.idx))
}

func (l *SessionLimit) remove(p *Place) {
	i, last := int(p.idx), len(l.idle)-1
	if i != last {
		l.swap(i, last)
	}
	l.idle[last] = nil
	l.idle = l.idle[:last]
	p.idx = -1
	if i != last {
		l.down(i)
		l.up(i)
	}
}

func (l *SessionLimit) swap(i, j int) {
	l.idle[i], l.idle[j] = l.idle[j], l.idle[i]
	l.idle[i].idx, l.idle[j].idx = int32(i), int32(j)
}

func (l *SessionLimit) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if l.idle[parent].key <= l.idle[i].key {
			return
		}
		l.swap(i, parent)
		i = parent
	}
}

func (l *SessionLimit) down(i int) {
	n := len(l.idle)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && l.idle[r].key < l.idle[c].key {
			c = r
		}
		if l.idle[i].key <= l.idle[c].key {
			return
		}
		l.swap(i, c)
		i = c
	}
}

// AdmitConn takes a place for a session served on a connection of its own
// (the daemon's socket), under the rule of SessionLimit: at the bound it
// evicts a session to make room, and fails with an error wrapping
// ErrSessionLimit, naming the bound, only if it cannot. The session is
// the place's holder: it counts its requests and its activity there and
// ends when the place's Evicted channel closes (the stdio front does both
// with StdioOptions.Place). Its connection's opening is activity; its
// staying open is not (as a GET stream's). Release gives the place back.
func (l *SessionLimit) AdmitConn() (*Place, error) {
	p := &Place{}
	p.init(l, connEvictee{make(chan struct{})}, false)
	p.state.Store(placeStream)
	if !l.admit(p) {
		return nil, &limitError{l.limitMessage()}
	}
	return p, nil
}

// Evicted is closed when the place was taken from its session to make
// room for another (a place of AdmitConn; nil for any other).
func (p *Place) Evicted() <-chan struct{} {
	if c, ok := p.owner.(connEvictee); ok {
		return c.gone
	}
	return nil
}

// Release gives back a place of AdmitConn. Safe to call more than once.
func (p *Place) Release() { p.leave() }

// connEvictee is the holder of a place of AdmitConn: gone is closed when
// the place is evicted.
type connEvictee struct{ gone chan struct{} }

func (c connEvictee) evict() { close(c.gone) }

// admitListen takes a place for a subscriptions/listen stream: never
// evicted, it makes room as any admission does; false at the bound if it
// cannot. leave gives it back.
func (l *SessionLimit) admitListen() (*Place, bool) {
	p := &Place{}
	p.init(l, nil, true)
	return p, l.admit(p)
}

// UnusedSessionTimeout is how long after initialize an HTTP session that
// has sent nothing since is closed (HTTPOptions.SessionTimeout if
// shorter).
const UnusedSessionTimeout = time.Minute

// Bounds of evictLog's bursts.
const (
	evictQuiet = 10 * time.Second
	evictSpan  = time.Minute
)

// evictLog logs evictions once per burst, with their count: a burst is a
// run of evictions each within evictQuiet (10 s) of the one before. Its
// one line comes evictQuiet after its last eviction — or, while it goes
// on, evictSpan (1 minute) after its first, and the next line counts
// those after: at most one line a minute, however long a flood.
type evictLog struct {
	log *slog.Logger

	mu  sync.Mutex
	cur *evictBurst // nil between bursts
}

type evictBurst struct {
	since time.Time
	n     [numEvictReasons]int
	max   int // maxSessions at the last eviction
	timer *time.Timer
}

// add counts n evictions for r in the current burst, or begins one.
func (e *evictLog) add(r EvictReason, n, max int) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.cur
	if b == nil {
		b = &evictBurst{since: now}
		b.timer = time.AfterFunc(evictQuiet, func() { e.end(b) })
		e.cur = b
	} else if now.Sub(b.since) < evictSpan-evictQuiet {
		b.timer.Reset(evictQuiet)
	}
	b.n[r] += n
	b.max = max
}

// end logs burst b, if it is still the current one.
func (e *evictLog) end(b *evictBurst) {
	e.mu.Lock()
	if e.cur != b {
		e.mu.Unlock()
		return
	}
	e.cur = nil
	b.timer.Stop()
	e.mu.Unlock()
	e.log.Warn("client sessions evicted: to make room at maxSessions (limit), or unused since initialize (unused)",
		"limit", b.n[EvictLimit], "unused", b.n[EvictUnused], "maxSessions", b.max, "since", b.since)
}

// flush ends the current burst at once.
func (e *evictLog) flush() {
	e.mu.Lock()
	b := e.cur
	e.mu.Unlock()
	if b != nil {
		e.end(b)
	}
}

// touch records activity now.
func (p *Place) touch() { p.touchAt(p.lim.now()) }
