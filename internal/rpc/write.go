package rpc

import (
	"errors"
	"fmt"
	"time"
)

// The write side of a Conn. No sender is ever blocked in a Write: when
// its context ends or its WriteTimeout passes it returns, even if the peer
// has stopped reading (a child whose stdin pipe is full).
//
// A sender that finds the connection idle — nothing queued, nothing being
// written — writes its line itself when the connection's writer can take
// a write that does not block: a pipe or socket in the runtime's poller
// (an *os.File from os.Pipe, a net.Conn; see inline.go). That write takes
// what the kernel's buffer has room for, at once; whatever does not fit
// goes, first in the queue, to the connection's writer goroutine, and the
// sender waits for it like any other queued line (it can no longer be
// withdrawn). So an uncontended sender costs one system call and no
// goroutine, and the bound is kept without a deadline on the writer.
//
// Otherwise a sender queues its line, and the connection's writer — a
// goroutine of the connection, started when a line is queued and none is
// running, ending when the queue is empty — writes what is queued, one
// Write per batch. Under concurrent load a stdio peer gets many lines per
// read instead of one system call (and one wake-up) per line.
//
// Lines keep the order in which they were queued, and a batch is one
// Write, so lines never interleave. A sender that gives up while its line
// is still queued withdraws it: it is never written. A line the writer
// has taken, or whose write its sender began, cannot be withdrawn — part
// of it may be in the pipe — so the writer finishes it: the stream stays
// framed, and the line reaches the peer if it reads again before the
// connection ends. Nothing is written once the connection has ended. A
// write error ends the connection.
//
// Call does not wait for its line to be written (it waits for the
// response anyway); everything else does, within its bound.

// DefaultWriteTimeout is the default Options.WriteTimeout: 10 s.
const DefaultWriteTimeout = 10 * time.Second

// maxQueued bounds the bytes waiting behind a write in progress. A sender
// that would go beyond it waits for room (within its bound), so a peer
// that stops reading holds its senders instead of growing memory. A line
// longer than that is queued alone.
const maxQueued = 1 << 20

type writer struct {
	// Guarded by Conn.wmu.
	writing bool // the writer goroutine runs
	queue   []queued
	bytes   int
	seq     uint64        // the last line's number
	flushed chan struct{} // closed once the lines queued now are written; made on demand
	room    chan struct{} // closed once the queue shrinks; made on demand
	spare   []queued

	batch []byte // only the writer goroutine touches it
}

type queued struct {
	seq uint64  // 0: the rest of a line its sender began; never withdrawn
	bp  *[]byte // the pooled buffer holding b
	b   []byte
	off int // b[off:] is left to write
}

// ticket is a line handed to the write side: its number, for withdraw (0
// if it cannot be withdrawn), and, if its sender waits for it, the channel
// closed once it is written (closedChan if it already is).
type ticket struct {
	seq     uint64
	flushed <-chan struct{}
}

// enqueue queues the line b and starts the writer if it is idle. b is in
// the pooled buffer bp, which enqueue takes over. While the queue is full
// it waits for room, until stop, done or abort is ready (errStopped: nothing
// queued) or the connection ends (its Err). wait asks for the ticket's
// flushed channel.
func (c *Conn) enqueue(stop <-chan time.Time, done, abort <-chan struct{}, bp *[]byte, b []byte, wait bool) (ticket, error) {
	w := &c.wr
	c.wmu.Lock()
	for {
		select {
		case <-c.done:
			c.wmu.Unlock()
			putBuf(bp, b)
			return ticket{}, c.Err()
		default:
		}
		if w.bytes+len(b) <= maxQueued || len(w.queue) == 0 {
			break
		}
		room := w.roomLocked()
		c.wmu.Unlock()
		select {
		case <-room:
		case <-stop:
			putBuf(bp, b)
			return ticket{}, errStopped
		case <-done:
			putBuf(bp, b)
			return ticket{}, errStopped
		case <-abort:
			putBuf(bp, b)
			return ticket{}, errStopped
		case <-c.done:
		}
		c.wmu.Lock()
	}
	w.seq++
	w.queue = append(w.queue, queued{seq: w.seq, bp: bp, b: b})
	w.bytes += len(b)
	t := ticket{seq: w.seq}
	if wait {
		t.flushed = w.flushedLocked()
	}
	start := !w.writing
	w.writing = true
	c.wmu.Unlock()
	if start {
		c.startWriter()
	}
	return t, nil
}

// startWriter starts the writer goroutine for what is queued; the caller
// has set wr.writing. If the connection has ended the queue is dropped
// (its senders see Done).
func (c *Conn) startWriter() {
	if !c.asyncBegin() {
		c.wmu.Lock()
		c.dropLocked()
		c.wmu.Unlock()
		return
	}
	go c.runWriter()
}

// runWriter is the writer goroutine. It counts its own end (asyncEnd)
// unless a stalled Write was abandoned, which counted it then.
func (c *Conn) runWriter() {
	if c.drain() {
		c.asyncEnd()
	}
}

// inline writes the line b (in the pooled buffer bp) itself if the
// connection is idle and its writer takes writes that do not block (see
// inline.go). ok is false if it did not try: b is still the caller's, to
// enqueue. Otherwise b is taken over and either written whole (t.flushed
// is closedChan), or written in part, its rest queued first for the
// writer goroutine (t.seq is 0: it cannot be withdrawn; t.flushed is set
// if wait), or err is the end of the connection. inline never blocks.
func (c *Conn) inline(bp *[]byte, b []byte, wait bool) (t ticket, ok bool, err error) {
	if c.raw == nil {
		return ticket{}, false, nil
	}
	w := &c.wr
	c.wmu.Lock()
	if w.writing || len(w.queue) > 0 {
		c.wmu.Unlock()
		return ticket{}, false, nil
	}
	select {
	case <-c.done:
		c.wmu.Unlock()
		putBuf(bp, b)
		return ticket{}, true, c.Err()
	default:
	}
	w.writing = true // the write side is this sender's until it hands over
	c.wmu.Unlock()

	n, werr := c.raw.write(b)
	if werr != nil {
		putBuf(bp, b)
		c.writeFailed(werr)
		return ticket{}, true, c.Err()
	}
	c.wmu.Lock()
	if n == len(b) {
		putBuf(bp, b)
		// Lines queued meanwhile go to the writer goroutine.
		start := len(w.queue) > 0
		if !start {
			w.writing = false
			if w.flushed != nil { // made for lines withdrawn since
				close(w.flushed)
				w.flushed = nil
			}
		}
		c.wmu.Unlock()
		if start {
			c.startWriter()
		}
		return ticket{flushed: closedChan}, true, nil
	}
	select {
	case <-c.done:
		putBuf(bp, b)
		c.dropLocked()
		c.wmu.Unlock()
		return ticket{}, true, c.Err()
	default:
	}
	// The rest goes before anything queued meanwhile.
	w.queue = append(w.queue, queued{})
	copy(w.queue[1:], w.queue)
	w.queue[0] = queued{bp: bp, b: b, off: n}
	w.bytes += len(b) - n
	if wait {
		t.flushed = w.flushedLocked()
	}
	c.wmu.Unlock()
	c.startWriter()
	return t, true, nil
}

// errStopped: the sender gave up (its stop or done channel was ready).
var errStopped = errors.New("rpc: write stopped")

// await waits until the line of ticket t is written (nil), the
// connection ends (its Err), or stop or done is ready. In the last case
// the line is withdrawn if it is still queued (errStopped) and left to the
// writer if it is being written (errInFlight); nil if it was written
// meanwhile.
func (c *Conn) await(t ticket, stop <-chan time.Time, done <-chan struct{}) error {
	select {
	case <-t.flushed:
		return nil
	case <-c.done:
		select {
		case <-t.flushed:
			return nil
		default:
			return c.Err()
		}
	case <-stop:
	case <-done:
	}
	if c.withdraw(t.seq) {
		return errStopped
	}
	select {
	case <-t.flushed:
		return nil
	default:
	}
	select {
	case <-c.done:
		return c.Err()
	default:
		return errInFlight
	}
}

var errInFlight = errors.New("rpc: line in flight")

// drain is the writer: it writes the queued lines, a batch per Write,
// until none is left or the connection ends. It returns false if a Write
// of it was abandoned (see Options.StallTimeout).
func (c *Conn) drain() (counted bool) {
	counted = true
	w := &c.wr
	c.wmu.Lock()
	for len(w.queue) > 0 {
		select {
		case <-c.done:
			c.dropLocked()
			c.wmu.Unlock()
			return counted
		default:
		}
		batch, flushed := w.queue, w.flushed
		w.queue, w.bytes, w.flushed = w.spare[:0], 0, nil
		w.roomMadeLocked()
		c.wmu.Unlock()
		var buf []byte
		if len(batch) == 1 {
			buf = batch[0].b[batch[0].off:] // one line: written from its own buffer, no copy
		} else {
			buf = w.batch[:0]
			for _, x := range batch {
				buf = append(buf, x.b[x.off:]...)
			}
		}
		var err error
		if c.stall > 0 {
			var left bool
			if left, err = c.writeWatched(buf); left {
				counted = false
			}
		} else {
			_, err = c.w.Write(buf)
		}
		if len(batch) > 1 {
			if cap(buf) <= 1<<20 {
				w.batch = buf[:0]
			} else {
				w.batch = nil
			}
		}
		for i, x := range batch {
			putBuf(x.bp, x.b)
			batch[i] = queued{}
		}
		if err != nil {
			c.writeFailed(err)
			return counted
		}
		if flushed != nil {
			close(flushed)
		}
		c.wmu.Lock()
		w.spare = batch[:0]
	}
	w.writing = false
	if w.flushed != nil { // made for lines withdrawn since
		close(w.flushed)
		w.flushed = nil
	}
	c.wmu.Unlock()
	return counted
}

// The states of the writer's Write, if Options.StallTimeout is set.
const (
	wIdle      = iota
	wWriting   // in a Write, the stall timer armed
	wAbandoned // the connection ended during the Write: Run no longer waits for it
)

// stallPiece is the most written under one StallTimeout.
const stallPiece = 256 << 10

// writeWatched writes b in pieces of at most stallPiece bytes, each under
// the stall timer, until the connection ends. left reports that it ended
// during a Write and stopped counting the writer (abandonWrite).
func (c *Conn) writeWatched(b []byte) (left bool, err error) {
	for len(b) > 0 {
		n := min(len(b), stallPiece)
		// Writing, then the end checked: an end that comes after the
		// check sees the Write and abandons it.
		c.wstate.Store(wWriting)
		select {
		case <-c.done:
			return !c.wstate.CompareAndSwap(wWriting, wIdle), c.Err()
		default:
		}
		c.stallTimer.Reset(c.stall)
		_, err = c.w.Write(b[:n])
		if !c.wstate.CompareAndSwap(wWriting, wIdle) {
			return true, err
		}
		c.stallTimer.Stop()
		if err != nil {
			return false, err
		}
		b = b[n:]
	}
	return false, nil
}

// stalled runs when the writer has been in one Write for StallTimeout.
func (c *Conn) stalled() {
	if c.wstate.Load() == wWriting {
		c.closeWith(fmt.Errorf("%w: %s has not taken a write for %v", ErrWriteStalled, c.peer, c.stall))
	}
}

// abandonWrite, at the end of the connection, stops counting the writer
// as a goroutine that Run waits for if it is in a Write.
func (c *Conn) abandonWrite() {
	if c.wstate.CompareAndSwap(wWriting, wAbandoned) {
		c.stallTimer.Stop()
		c.asyncEnd()
	}
}

// dropLocked forgets the queue once the connection has ended. Its flushed
// channel stays open: its senders wake on Done and report the end.
// Callers hold Conn.wmu.
func (c *Conn) dropLocked() {
	w := &c.wr
	for _, x := range w.queue {
		putBuf(x.bp, x.b)
	}
	w.queue, w.bytes, w.flushed, w.writing = nil, 0, nil, false
	w.roomMadeLocked()
}

// writeFailed ends the connection after a failed Write, then drops the
// queue: the connection is ended first, so that no sender can start
// another writer and no waiter can mistake the drop for a write.
func (c *Conn) writeFailed(err error) {
	c.closeWith(fmt.Errorf("writing to %s: %w", c.peer, err))
	c.wmu.Lock()
	c.dropLocked()
	c.wmu.Unlock()
}

// awaitQueued waits until the lines posted now have found room in the
// queue and the lines queued then are written (or nothing is queued or
// being written), the connection ends, or the write timeout passes
// (Options.FlushAtEOF).
func (c *Conn) awaitQueued() {
	var stop <-chan time.Time
	if c.writeTimeout > 0 {
		t := c.timer()
		defer c.putTimer(t)
		stop = t.C
	}
	select {
	case <-c.asyncDone(): // posts waiting for room (post)
	case <-c.done:
		return
	case <-stop:
		return
	}
	w := &c.wr
	c.wmu.Lock()
	if !w.writing && len(w.queue) == 0 {
		c.wmu.Unlock()
		return
	}
	flushed := w.flushedLocked()
	c.wmu.Unlock()
	select {
	case <-flushed:
	case <-c.done:
	case <-stop:
	}
}

// flushedLocked is the channel closed once the lines queued now are
// written. Callers hold Conn.wmu.
func (w *writer) flushedLocked() chan struct{} {
	if w.flushed == nil {
		w.flushed = make(chan struct{})
	}
	return w.flushed
}

// roomLocked is the channel closed once the queue shrinks. Callers hold
// Conn.wmu.
func (w *writer) roomLocked() chan struct{} {
	if w.room == nil {
		w.room = make(chan struct{})
	}
	return w.room
}

// roomMadeLocked wakes the senders waiting for room. Callers hold
// Conn.wmu.
func (w *writer) roomMadeLocked() {
	if w.room != nil {
		close(w.room)
		w.room = nil
	}
}

// withdraw removes line seq from the queue; false if it is not queued
// (being written, written, or dropped at the end) or seq is 0.
func (c *Conn) withdraw(seq uint64) bool {
	if seq == 0 {
		return false
	}
	w := &c.wr
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for i, x := range w.queue {
		if x.seq == seq {
			w.bytes -= len(x.b)
			w.queue = append(w.queue[:i], w.queue[i+1:]...)
			w.queue[len(w.queue):cap(w.queue)][0] = queued{} // no stale reference to the pooled buffer
			putBuf(x.bp, x.b)
			w.roomMadeLocked()
			return true
		}
	}
	return false
}

// post queues a line the connection sends on its own behalf — a
// cancellation notice, an automatic error reply — without waiting for it
// to be written, so that neither a cancelled Call nor the read loop waits
// for the peer. If the queue is full, a goroutine of the connection waits
// for room, at most the write timeout; a line that finds none is dropped
// and reported to OnError (an error wrapping ErrWriteTimeout). A line
// queued is written like any other, in order, unless the connection ends
// first. what and id name the line in that report.
func (c *Conn) post(what string, id []byte, line []byte) {
	bp := getBuf()
	b := append(*bp, line...)
	if _, ok, _ := c.inline(bp, b, false); ok {
		return // written or handed to the writer, or the connection has ended
	}
	if _, err := c.enqueue(nil, closedChan, nil, bp, b, false); err != errStopped {
		return // queued, or the connection has ended
	}
	name := what + " " + string(id) // id may alias the read buffer
	c.goAsync(func() {
		bp := getBuf()
		b := append(*bp, line...)
		var stop <-chan time.Time
		if c.writeTimeout > 0 {
			t := c.timer()
			defer c.putTimer(t)
			stop = t.C
		}
		if _, err := c.enqueue(stop, nil, nil, bp, b, false); err == errStopped {
			c.onError(fmt.Errorf("rpc: %s to %s dropped: %w", name, c.peer, c.timeoutErr()))
		}
	})
}

// timer returns a timer of the connection's write timeout, started; give
// it back with putTimer. The connection keeps a few stopped timers for
// reuse, so a write costs no allocation for its bound. (They are the
// connection's own, not a global pool's: a timer made in a synctest
// bubble must not serve another.)
func (c *Conn) timer() *time.Timer {
	c.tmu.Lock()
	var t *time.Timer
	if n := len(c.timers); n > 0 {
		t = c.timers[n-1]
		c.timers = c.timers[:n-1]
	}
	c.tmu.Unlock()
	if t == nil {
		return time.NewTimer(c.writeTimeout)
	}
	t.Reset(c.writeTimeout)
	return t
}

// putTimer stops t and keeps it for reuse. Since Go 1.23 a stopped timer's
// channel holds no stale tick, so the next user cannot see one.
func (c *Conn) putTimer(t *time.Timer) {
	t.Stop()
	c.tmu.Lock()
	if len(c.timers) < 4 {
		c.timers = append(c.timers, t)
	}
	c.tmu.Unlock()
}
