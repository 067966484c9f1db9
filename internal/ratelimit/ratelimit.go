// Package ratelimit limits the calls of each identity, and of each
// identity to each tool, with token buckets (golang.org/x/time/rate).
//
// A call is allowed only when both its buckets have a token, and then it
// takes one from each; a call refused by either takes none. Memory is
// bounded: a bucket that is full again is the same as no bucket and is
// dropped (past the first 256), and past MaxKeys buckets of a kind the least recently used one
// goes (which, when it is not yet full, forgives that key what it owed).
package ratelimit

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Rate is a token bucket: PerSecond tokens a second, Burst at most
// (0: max(1, ceil(PerSecond))). A zero PerSecond is no limit.
type Rate struct {
	PerSecond float64
	Burst     int
}

func (r Rate) unlimited() bool { return r.PerSecond <= 0 }

func (r Rate) burst() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return max(1, int(r.PerSecond+0.999999))
}

// Limits are the two limits: PerIdentity on all the calls of an
// identity, PerTool on its calls to one tool of one server.
type Limits struct {
	PerIdentity, PerTool Rate
}

// Scopes, as Allow names the limit that refused.
const (
	ScopeIdentity = "identity"
	ScopeTool     = "tool"
)

// anonymous is the key of the calls of no identity: all of them share
// one bucket. (No identity key has a NUL in it.)
const anonymous = "\x00anonymous"

// keepIdle is how many buckets are kept even when full: dropping and
// making again the bucket of a key that calls steadily, below its rate,
// would cost more than it keeps.
const keepIdle = 256

// DefaultMaxKeys bounds the buckets of each kind.
const DefaultMaxKeys = 100_000

// Stats are a Limiter's counters.
type Stats struct {
	// LimitedIdentity and LimitedTool count the calls refused by each
	// limit.
	LimitedIdentity, LimitedTool uint64
	// Identities and Tools are how many buckets are kept now.
	Identities, Tools int
	// Evicted counts buckets dropped, not yet full, to stay within
	// MaxKeys.
	Evicted uint64
}

type toolKey struct{ identity, server, tool string }

// bucket is a token bucket in a least-recently-used list.
type bucket[K comparable] struct {
	key        K
	lim        *rate.Limiter
	prev, next *bucket[K]
}

// buckets are the buckets of one kind, most recently used first.
type buckets[K comparable] struct {
	m          map[K]*bucket[K]
	head, tail *bucket[K]
}

func (b *buckets[K]) unlink(e *bucket[K]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		b.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		b.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (b *buckets[K]) pushFront(e *bucket[K]) {
	e.next = b.head
	if b.head != nil {
		b.head.prev = e
	}
	b.head = e
	if b.tail == nil {
		b.tail = e
	}
}

func (b *buckets[K]) remove(e *bucket[K]) {
	b.unlink(e)
	delete(b.m, e.key)
}

// get is k's bucket, made if missing, now the most recently used;
// evicted reports that a bucket not yet full was dropped to make room.
func (b *buckets[K]) get(k K, r Rate, maxKeys int) (e *bucket[K], evicted bool) {
	if e = b.m[k]; e != nil {
		if b.head != e {
			b.unlink(e)
			b.pushFront(e)
		}
		return e, false
	}
	if len(b.m) >= maxKeys && b.tail != nil {
		b.remove(b.tail)
		evicted = true
	}
	e = &bucket[K]{key: k, lim: rate.NewLimiter(rate.Limit(r.PerSecond), r.burst())}
	b.m[k] = e
	b.pushFront(e)
	return e, evicted
}

// sweep drops up to n of the least recently used buckets that are full
// again at now (they are the same as none).
func (b *buckets[K]) sweep(now time.Time, n int) {
	for ; n > 0 && b.tail != nil && len(b.m) > keepIdle; n-- {
		e := b.tail
		if e.lim.TokensAt(now) < float64(e.lim.Burst()) {
			return
		}
		b.remove(e)
	}
}

// reset sets r on every bucket, keeping their tokens (nil r: drops them
// all).
func (b *buckets[K]) reset(now time.Time, r Rate) {
	if r.unlimited() {
		b.m = map[K]*bucket[K]{}
		b.head, b.tail = nil, nil
		return
	}
	for _, e := range b.m {
		e.lim.SetLimitAt(now, rate.Limit(r.PerSecond))
		e.lim.SetBurstAt(now, r.burst())
	}
}

// Limiter applies Limits. It is safe for concurrent use.
type Limiter struct {
	// MaxKeys bounds the buckets of each kind (0: DefaultMaxKeys); set
	// it before the first Allow.
	MaxKeys int

	mu       sync.Mutex
	limits   Limits
	identity buckets[string]
	tool     buckets[toolKey]

	limitedIdentity, limitedTool, evicted atomic.Uint64
}

// New is a Limiter of l.
func New(l Limits) *Limiter {
	return &Limiter{
		limits:   l,
		identity: buckets[string]{m: map[string]*bucket[string]{}},
		tool:     buckets[toolKey]{m: map[toolKey]*bucket[toolKey]{}},
	}
}

// Allow reports whether the identity with key identityKey ("": the
// anonymous one) may call tool of server now; if not, retryAfter is when
// it may, and scope the limit that refused (ScopeIdentity, ScopeTool). A
// nil Limiter allows everything.
func (l *Limiter) Allow(identityKey, server, tool string) (ok bool, retryAfter time.Duration, scope string) {
	if l == nil {
		return true, 0, ""
	}
	if identityKey == "" {
		identityKey = anonymous
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	maxKeys := l.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	// Two idle buckets of each kind go with each call: more than calls
	// can make.
	l.identity.sweep(now, 2)
	l.tool.sweep(now, 2)
	// Both buckets are looked at before either is taken from: under l.mu
	// nothing else touches them, so a token seen is a token taken, and a
	// refused call takes none. (This is Reserve and Cancel without the
	// Reservation each would allocate.)
	var id, tl *rate.Limiter
	if r := l.limits.PerIdentity; !r.unlimited() {
		b, ev := l.identity.get(identityKey, r, maxKeys)
		if ev {
			l.evicted.Add(1)
		}
		id = b.lim
		if d := wait(id, now); d > 0 {
			l.limitedIdentity.Add(1)
			return false, d, ScopeIdentity
		}
	}
	if r := l.limits.PerTool; !r.unlimited() {
		b, ev := l.tool.get(toolKey{identityKey, server, tool}, r, maxKeys)
		if ev {
			l.evicted.Add(1)
		}
		tl = b.lim
		if d := wait(tl, now); d > 0 {
			l.limitedTool.Add(1)
			return false, d, ScopeTool
		}
	}
	if id != nil {
		id.AllowN(now, 1)
	}
	if tl != nil {
		tl.AllowN(now, 1)
	}
	return true, 0, ""
}

// wait is how long until lim has a token at now (0: it has one).
func wait(lim *rate.Limiter, now time.Time) time.Duration {
	tokens := lim.TokensAt(now)
	if tokens >= 1 {
		return 0
	}
	return time.Duration(float64(time.Second) * (1 - tokens) / float64(lim.Limit()))
}

// SetLimits changes the limits (a reload). The buckets of a limit that is
// unchanged are kept as they are; those of a changed one keep their
// tokens under the new rate and burst; those of a limit now off go.
func (l *Limiter) SetLimits(n Limits) {
	if l == nil {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if n.PerIdentity != l.limits.PerIdentity {
		l.identity.reset(now, n.PerIdentity)
	}
	if n.PerTool != l.limits.PerTool {
		l.tool.reset(now, n.PerTool)
	}
	l.limits = n
}

// Limits are l's limits now.
func (l *Limiter) Limits() Limits {
	if l == nil {
		return Limits{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limits
}

// Stats are l's counters now.
func (l *Limiter) Stats() Stats {
	if l == nil {
		return Stats{}
	}
	l.mu.Lock()
	ids, tools := len(l.identity.m), len(l.tool.m)
	l.mu.Unlock()
	return Stats{
		LimitedIdentity: l.limitedIdentity.Load(), LimitedTool: l.limitedTool.Load(),
		Identities: ids, Tools: tools, Evicted: l.evicted.Load(),
	}
}

// RetryAfter is d as a Retry-After header's value: whole seconds, rounded
// up, at least 1.
func RetryAfter(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}

// Exhausted reports how long until the identity with key identityKey
// ("": the anonymous one) has a token under its per-identity limit: 0
// when it has one now, has no bucket yet, or there is no such limit. It
// takes nothing and makes no bucket: a front sheds a flood with it before
// reading a request, and the call's Allow does the counting.
func (l *Limiter) Exhausted(identityKey string) time.Duration {
	if l == nil {
		return 0
	}
	if identityKey == "" {
		identityKey = anonymous
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limits.PerIdentity.unlimited() {
		return 0
	}
	e := l.identity.m[identityKey]
	if e == nil {
		return 0
	}
	d := wait(e.lim, now)
	if d > 0 {
		l.limitedIdentity.Add(1)
	}
	return d
}
