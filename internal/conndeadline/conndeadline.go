// Package conndeadline keeps the deadlines of a listener's connections
// with one goroutine for all of them, instead of a runtime timer each.
//
// A deadline set on a net.Conn (SetReadDeadline, SetWriteDeadline) arms
// or moves the runtime poller's timer of that connection. An HTTP/1.x
// server sets several a request — net/http's idle, header and
// whole-request bounds, a handler's body and reply bounds — and each
// change of a timer locks the timer heap of a P; while timers are armed,
// every scheduling round of the runtime reads the clock as well. Under
// load that costs a relay several percent of its CPU per request (issue
// 30, part 4). Deadlines are nearly always lifted or moved before they
// fire, so here setting one only records it, in an atomic word of the
// connection, and one sweeper goroutine, woken by a single timer at the
// earliest deadline it knows of, makes the deadlines that passed take
// effect: it sets that direction's real deadline in the past, so that the
// read or write in progress, or the next one, fails with
// os.ErrDeadlineExceeded, exactly as the runtime's timer would have made
// it fail. A deadline already in the past when set, or earlier than the
// sweeper's next look and passed, takes effect before its set returns;
// one that passes while the sweeper is late (its timer fired, the sweep
// not yet run) takes effect at that sweep.
//
// What a connection's user sees is a net.Conn's deadline contract, with
// the sweeper's latency added to when a deadline takes effect: a
// goroutine's wake-up, and, since a sweep looks at every connection, at
// least sweepGap per connection between two sweeps (10 µs: 10 ms with a
// thousand connections), which bounds the sweeper's CPU to about 1 %
// however many deadlines pass one after another. Setting a deadline no
// earlier than the sweeper's next look only records it: no timer, no
// clock read (TestSetChangesNothingUntilItPasses). One earlier reads the
// clock once, to see whether it has passed, and wakes the sweeper; a
// time without a monotonic reading is measured on the clock as well.
// Moving a deadline later costs the sweeper nothing until the earlier
// one it planned for comes.
//
// Wrap the listener beneath any TLS layer, as a net.Conn of the network:
// net/http recognises a *tls.Conn by its type.
package conndeadline

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Listener wraps a net.Listener: the connections it accepts have their
// deadlines kept by its sweeper. Close the Listener (it closes the
// wrapped one) or call Stop to end the sweeper; the connections then keep
// the deadlines that took effect, and new deadlines are set on the
// connections themselves.
type Listener struct {
	net.Listener
	base time.Time // deadlines are kept as nanoseconds since base (monotonic)

	mu     sync.Mutex // guards conns; taken before a Conn's mu
	conns  map[*Conn]struct{}
	sweeps int // made so far (tests)

	// Test seams, nil in use: scanned runs between a sweep's look and
	// its nextWake; beforeRecord in set, before the word is recorded.
	scanned, beforeRecord func()

	// nextWake is when the sweeper's timer fires, as nanoseconds since
	// base; a deadline set earlier wakes it. 0: it is sweeping or stopped
	// (no wake needed: it looks again before it sleeps).
	nextWake atomic.Int64
	stopped  atomic.Bool   // set under mu when the sweeper ends: deadlines are then the connections' own
	wake     chan struct{} // cap 1
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// NewListener returns ln with its connections' deadlines kept by one
// sweeper goroutine, which runs until Close or Stop.
func NewListener(ln net.Listener) *Listener {
	l := newListener(ln)
	go l.sweep()
	return l
}

// newListener is a Listener whose sweeper is not started (tests set
// their seams first).
func newListener(ln net.Listener) *Listener {
	return &Listener{Listener: ln, base: time.Now(), conns: map[*Conn]struct{}{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// Accept accepts a connection of the wrapped listener.
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.track(nc), nil
}

// track wraps nc, its deadlines kept by l's sweeper (unless it stopped).
func (l *Listener) track(nc net.Conn) *Conn {
	c := &Conn{Conn: nc, l: l}
	l.mu.Lock()
	if !l.stopped.Load() {
		l.conns[c] = struct{}{}
	}
	l.mu.Unlock()
	return c
}

// Close closes the wrapped listener and ends the sweeper.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.Stop()
	return err
}

// Stop ends the sweeper and waits for it. Deadlines set from then on are
// the connections' own (runtime timers); those recorded and not yet in
// effect are handed to the connections as they are.
func (l *Listener) Stop() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}

// Conn is an accepted connection whose deadlines its Listener keeps.
type Conn struct {
	net.Conn
	l *Listener

	// mu orders a deadline's taking effect (the sweeper sets the real
	// one in the past) with its replacement by a set that finds it in
	// effect (settle), and with the hand-over at Stop.
	mu     sync.Mutex
	rd, wd deadline
	closed atomic.Bool
}

// A deadline word: the deadline in nanoseconds since the Listener's base,
// shifted left by one, 0 for none; the low bit set when the sweeper, or a
// deadline set in the past, made the real deadline of that direction one
// in the past. Only a set under Conn.mu (settle) clears that bit, and
// with it the real deadline.
type deadline struct{ w atomic.Int64 }

const inEffect = 1

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline records the read deadline t (the zero time: none).
func (c *Conn) SetReadDeadline(t time.Time) error {
	return c.set(&c.rd, t, c.Conn.SetReadDeadline)
}

// SetWriteDeadline records the write deadline t (the zero time: none).
func (c *Conn) SetWriteDeadline(t time.Time) error {
	return c.set(&c.wd, t, c.Conn.SetWriteDeadline)
}

// Close closes the connection; its Listener forgets it.
func (c *Conn) Close() error {
	c.closed.Store(true)
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite half-closes the connection, if the wrapped one can (net/http
// uses it for a graceful close).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// ReadFrom passes net/http's copy of a file to the wrapped connection,
// which may send it with sendfile or splice.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// set records t as d's deadline. A deadline in the past (such as
// net/http's "long ago", which interrupts a read in progress) takes
// effect at once. A set reads the clock only when the deadline is
// earlier than the sweeper's next look, which it then wakes.
func (c *Conn) set(d *deadline, t time.Time, real func(time.Time) error) error {
	l := c.l
	if c.closed.Load() {
		return real(t) // the wrapped connection's error
	}
	v, past := l.word(t)
	if past || l.stopped.Load() {
		return c.settle(d, t, real)
	}
	if l.beforeRecord != nil {
		l.beforeRecord()
	}
	old := d.w.Load()
	if old&inEffect != 0 || !d.w.CompareAndSwap(old, v) {
		return c.settle(d, t, real) // the sweeper made old take effect
	}
	// Stopped meanwhile: the sweeper may have handed the deadlines over
	// before this one was recorded.
	if l.stopped.Load() {
		return c.settle(d, t, real)
	}
	if v != 0 {
		if nw := l.nextWake.Load(); nw == 0 || ns(v) < nw {
			// Earlier than the sweeper planned for (or it is looking): it
			// may have passed already.
			if ns(v) <= int64(time.Since(l.base)) {
				return c.settle(d, t, real)
			}
			l.wakeUp()
		}
	}
	return nil
}

// word is t as a deadline word (0: none), or past if t is before base.
func (l *Listener) word(t time.Time) (v int64, past bool) {
	if t.IsZero() {
		return 0, false
	}
	if t.Before(l.base) {
		return 0, true
	}
	var n int64
	if t == t.Round(0) {
		// No monotonic reading (time.Unix, a parsed time): measured on
		// the wall clock now, as the runtime measures it, not against
		// base's, which may have stepped since.
		since, until := time.Since(l.base), time.Until(t)
		if until <= 0 {
			return 0, true
		}
		if until > time.Duration(ns(never))-since {
			return 0, false // as good as none (below)
		}
		n = int64(since + until)
	} else {
		n = int64(t.Sub(l.base))
	}
	if n <= 0 {
		return 0, true
	}
	if n > ns(never) { // about 146 years after base: as good as none
		return 0, false
	}
	return n << 1, false
}

// settle sets d to t under c.mu, as the sweeper makes deadlines take
// effect: a deadline that took effect is lifted (its read or write has
// failed, or ended in the same instant), and t, if in the past, takes
// effect at once. Once the sweeper has stopped, t is the connection's
// own.
func (c *Conn) settle(d *deadline, t time.Time, real func(time.Time) error) error {
	l := c.l
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.stopped.Load() {
		d.w.Store(0)
		return real(t)
	}
	v, past := l.word(t)
	if past || v != 0 && ns(v) <= int64(time.Since(l.base)) {
		d.w.Store(inEffect)
		return real(t)
	}
	var err error
	if d.w.Load()&inEffect != 0 {
		err = real(time.Time{})
	}
	d.w.Store(v)
	if v != 0 && ns(v) < l.nextWake.Load() {
		l.wakeUp()
	}
	return err
}

// ns is the deadline of a word, in nanoseconds since base.
func ns(w int64) int64 { return w >> 1 }

func (l *Listener) wakeUp() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// sweepGap is the least time between two sweeps per connection a sweep
// looks at: about a hundred times what looking at one costs.
const sweepGap = 10 * time.Microsecond

// sweep is the sweeper.
func (l *Listener) sweep() {
	defer close(l.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer l.handOver()
	for {
		l.nextWake.Store(0) // looking: a deadline set now is seen by the look below
		next, n := l.sweepOnce()
		if l.scanned != nil {
			l.scanned()
		}
		// Sleep until next, unless a deadline earlier than that came
		// meanwhile: it either sees nextWake (and wakes the sweeper) or
		// is seen by this second look.
		l.nextWake.Store(next)
		if n2 := l.earliest(); n2 < next {
			next = n2
			l.nextWake.Store(next)
		}
		notBefore := int64(time.Since(l.base)) + int64(n)*int64(sweepGap)
		if next != never {
			t.Reset(time.Duration(max(next, notBefore) - int64(time.Since(l.base))))
		}
		select {
		case <-l.stop:
			return
		case <-t.C:
		case <-l.wake:
			// An earlier deadline: looked for once the gap has passed.
			t.Stop()
			if d := time.Duration(notBefore - int64(time.Since(l.base))); d > 0 {
				t.Reset(d)
				select {
				case <-l.stop:
					return
				case <-t.C:
				}
			}
		}
	}
}

// handOver ends the sweeper's keeping: each deadline recorded and not in
// effect is set on its connection itself, and every deadline set from
// now on goes to the connection.
func (l *Listener) handOver() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped.Store(true)
	for c := range l.conns {
		c.mu.Lock()
		for _, read := range []bool{true, false} {
			d, real := c.dir(read)
			if w := d.w.Load(); w != 0 && w&inEffect == 0 {
				_ = real(l.base.Add(time.Duration(ns(w))))
			}
			d.w.Store(0)
		}
		c.mu.Unlock()
	}
	clear(l.conns)
}

// dir is c's read or write deadline, and the wrapped connection's setter.
func (c *Conn) dir(read bool) (*deadline, func(time.Time) error) {
	if read {
		return &c.rd, c.Conn.SetReadDeadline
	}
	return &c.wd, c.Conn.SetWriteDeadline
}

// never is a nextWake that no deadline is later than.
const never = int64(^uint64(0) >> 1)

// sweepOnce makes every deadline that passed take effect, and returns
// the earliest one still to come (never if none) and how many
// connections it looked at.
func (l *Listener) sweepOnce() (next int64, conns int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweeps++
	now := int64(time.Since(l.base))
	next = never
	past := l.base.Add(-time.Second) // before base: in the past, whatever the wall clock does
	for c := range l.conns {
		for _, d := range []*deadline{&c.rd, &c.wd} {
			w := d.w.Load()
			if w == 0 || w&inEffect != 0 {
				continue
			}
			if ns(w) > now {
				next = min(next, ns(w))
				continue
			}
			c.mu.Lock()
			if d.w.CompareAndSwap(w, w|inEffect) {
				if d == &c.rd {
					_ = c.Conn.SetReadDeadline(past)
				} else {
					_ = c.Conn.SetWriteDeadline(past)
				}
			}
			c.mu.Unlock()
		}
	}
	return next, len(l.conns)
}

// earliest is the earliest deadline recorded and not in effect.
func (l *Listener) earliest() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := never
	for c := range l.conns {
		for _, d := range []*deadline{&c.rd, &c.wd} {
			if w := d.w.Load(); w != 0 && w&inEffect == 0 {
				next = min(next, ns(w))
			}
		}
	}
	return next
}
