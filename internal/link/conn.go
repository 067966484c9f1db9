package link

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// writer writes frames on a connection for any number of goroutines.
// Whoever queues frames on an idle connection writes them, and with them
// whatever other callers queue while that write is under way: one system
// call carries many frames under load, and none waits for a goroutine of
// the connection's to be woken. A caller writes for the others a few
// rounds at most, then hands the rest to a goroutine.
type writer struct {
	conn    net.Conn
	timeout time.Duration // of one write; past it the connection is dead
	fail    func(error)   // ends the connection after a failed write

	mu      sync.Mutex
	buf     []byte // queued
	spare   []byte
	writing bool
	err     error         // sticky: the connection failed
	idle    chan struct{} // closed (and dropped) when a flush ends: drained's wait
}

// maxRounds is how many writes a caller makes for others before it hands
// the queue to a goroutine.
const maxRounds = 4

// send queues what fill appends to the write buffer and, if no write is
// under way, writes it: in this goroutine, or in a new one when async
// (a caller that must not block on the network: the read loop). It
// returns the connection's failure, if it had one before.
func (w *writer) send(async bool, fill func([]byte) []byte) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.buf = fill(w.buf)
	if w.writing {
		w.mu.Unlock()
		return nil
	}
	w.writing = true
	if async {
		w.mu.Unlock()
		go w.flush(0)
		return nil
	}
	w.mu.Unlock()
	w.flush(maxRounds)
	return nil
}

// flush writes the queue until it is empty, the writing side being the
// caller's (writing set); after rounds writes (0: no bound) it hands what
// is left to a goroutine.
func (w *writer) flush(rounds int) {
	var err error
	w.mu.Lock()
	for n := 0; len(w.buf) > 0; n++ {
		if rounds > 0 && n == rounds {
			w.mu.Unlock()
			go w.flush(0)
			return
		}
		b := w.buf
		w.buf = w.spare[:0]
		w.mu.Unlock()
		_ = w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
		_, err = w.conn.Write(b)
		w.mu.Lock()
		if cap(b) <= 1<<20 {
			w.spare = b[:0]
		}
		if err != nil {
			if w.err == nil {
				w.err = err
			}
			w.buf = nil
			break
		}
	}
	w.writing = false
	w.wakeIdle()
	w.mu.Unlock()
	if err != nil {
		w.fail(err)
	}
}

// wakeIdle wakes every drained waiting, with w.mu held.
func (w *writer) wakeIdle() {
	if w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
}

// drained waits, at most bound, until nothing is queued or being
// written; false if the bound passed first.
func (w *writer) drained(bound time.Duration) bool {
	t := time.NewTimer(bound)
	defer t.Stop()
	for {
		w.mu.Lock()
		if !w.writing && len(w.buf) == 0 || w.err != nil {
			w.mu.Unlock()
			return true
		}
		if w.idle == nil {
			w.idle = make(chan struct{})
		}
		idle := w.idle
		w.mu.Unlock()
		select {
		case <-idle:
		case <-t.C:
			return false
		}
	}
}

// failed marks the writer failed (the connection ended).
func (w *writer) failed(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.buf = nil
	w.wakeIdle()
	w.mu.Unlock()
}

// pipe is one direction of a stream's body, as received: what the peer
// sent and the reader has not taken, bounded by the window. Taking bytes
// gives the peer window back, half a window at a time.
type pipe struct {
	mu       sync.Mutex
	buf      []byte
	off      int
	err      error // what Read returns once buf is taken: io.EOF at the end
	taken    int   // taken since the peer was last given window
	deadline time.Time
	wake     chan struct{} // cap 1: something changed
	done     <-chan struct{}
	doneErr  func() error
	give     func(n int) // gives the peer n bytes of window
}

func newPipe(done <-chan struct{}, doneErr func() error, give func(int)) *pipe {
	return &pipe{wake: make(chan struct{}, 1), done: done, doneErr: doneErr, give: give}
}

// write adds p (copied); it reports false if p overflows the window.
func (p *pipe) write(b []byte) bool {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return true // ended here: the peer had not heard yet
	}
	if len(p.buf)-p.off+len(b) > window {
		p.mu.Unlock()
		return false
	}
	if p.off > 0 && len(p.buf)+len(b) > cap(p.buf) {
		// Move what is left to the front rather than grow: the buffer
		// stays within the window however long the stream.
		n := copy(p.buf, p.buf[p.off:])
		p.buf, p.off = p.buf[:n], 0
	}
	p.buf = append(p.buf, b...)
	p.mu.Unlock()
	p.signal()
	return true
}

// close ends the pipe with err (io.EOF: the body is whole) once what it
// holds is read; the first close counts.
func (p *pipe) close(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.signal()
}

// abort ends the pipe with err at once, dropping what it holds.
func (p *pipe) abort(err error) {
	p.mu.Lock()
	if p.err == nil || p.err == io.EOF {
		p.err = err
	}
	p.buf, p.off = nil, 0
	p.mu.Unlock()
	p.signal()
}

func (p *pipe) signal() { notify(p.wake) }

func (p *pipe) setDeadline(t time.Time) {
	p.mu.Lock()
	p.deadline = t
	p.mu.Unlock()
	p.signal()
}

func (p *pipe) Read(b []byte) (int, error) {
	var timer bound
	defer timer.stop()
	for {
		p.mu.Lock()
		if p.off < len(p.buf) {
			n := copy(b, p.buf[p.off:])
			p.off += n
			p.taken += n
			give := 0
			if p.taken >= window/2 || p.off == len(p.buf) && p.err == nil && p.taken >= window/8 {
				give, p.taken = p.taken, 0
			}
			p.mu.Unlock()
			if give > 0 {
				p.give(give)
			}
			return n, nil
		}
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return 0, err
		}
		deadline := p.deadline
		p.mu.Unlock()
		expired, err := timer.until(deadline)
		if err != nil {
			return 0, err
		}
		select {
		case <-p.wake:
		case <-p.done:
			// The stream ended: unfinished, an error; whole (its end
			// already here), what is left is read first.
			p.mu.Lock()
			if p.err == nil {
				p.err = p.doneErr()
				p.buf, p.off = nil, 0
			}
			p.mu.Unlock()
		case <-expired:
		}
	}
}

// credit is one direction of a stream's flow control, as sent: the bytes
// the peer will still take.
type credit struct {
	mu       sync.Mutex
	n        int
	deadline time.Time     // of a wait for it (zero: none)
	wake     chan struct{} // cap 1
}

func newCredit() *credit { return &credit{n: window, wake: make(chan struct{}, 1)} }

// add gives back n bytes; false if that makes more than the window (the
// peer gave back what it was never sent).
func (c *credit) add(n int) bool {
	c.mu.Lock()
	c.n += n
	ok := c.n <= window
	c.mu.Unlock()
	notify(c.wake)
	return ok
}

// giveCredit gives a window frame's bytes to send, a stream's credit (nil:
// the stream has ended, and the frame is dropped).
func giveCredit(f frame, send *credit) error {
	n, err := windowOf(f)
	if err != nil {
		return err
	}
	if send != nil && !send.add(n) {
		return fmt.Errorf("%w: stream %d given more than its window", errProtocol, f.stream)
	}
	return nil
}

// windowOf is a window frame's increment: 1 to window bytes.
func windowOf(f frame) (int, error) {
	if len(f.payload) != 4 {
		return 0, fmt.Errorf("%w: a window frame of %d bytes", errProtocol, len(f.payload))
	}
	n := binary.BigEndian.Uint32(f.payload)
	if n == 0 || n > window {
		return 0, fmt.Errorf("%w: a window increment of %d", errProtocol, n)
	}
	return int(n), nil
}

// setDeadline bounds the waits for credit, from any goroutine; one under
// way sees it at once.
func (c *credit) setDeadline(t time.Time) {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	notify(c.wake)
}

// take waits, within ctx and the deadline, until the peer takes bytes,
// and takes up to want of them.
func (c *credit) take(ctx context.Context, want int) (int, error) {
	var timer bound
	defer timer.stop()
	for {
		c.mu.Lock()
		if c.n > 0 {
			n := min(c.n, want)
			c.n -= n
			c.mu.Unlock()
			return n, nil
		}
		deadline := c.deadline
		c.mu.Unlock()
		expired, err := timer.until(deadline)
		if err != nil {
			return 0, err
		}
		select {
		case <-c.wake:
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		case <-expired:
		}
	}
}

// appendWindow appends a window frame giving n bytes on stream.
func appendWindow(b []byte, stream uint32, n int) []byte {
	b = binary.BigEndian.AppendUint32(b, 4)
	b = append(b, fWindow, 0)
	b = binary.BigEndian.AppendUint32(b, stream)
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// appendFrameWith appends a frame whose payload fill appends.
func appendFrameWith(b []byte, typ, flags byte, stream uint32, fill func([]byte) []byte) []byte {
	at := len(b)
	b = appendFrame(b, typ, flags, stream)
	b = fill(b)
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-headerLen))
	return b
}

// notify wakes whoever waits on ch (cap 1), or leaves a wake-up there.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// bound is a wait's deadline, its timer made once and reused.
type bound struct{ t *time.Timer }

// until is what fires at deadline (nil: none), or the error of a
// deadline passed.
func (b *bound) until(deadline time.Time) (<-chan time.Time, error) {
	if deadline.IsZero() {
		return nil, nil
	}
	d := time.Until(deadline)
	if d <= 0 {
		return nil, os.ErrDeadlineExceeded
	}
	if b.t == nil {
		b.t = time.NewTimer(d)
	} else {
		b.t.Reset(d)
	}
	return b.t.C, nil
}

func (b *bound) stop() {
	if b.t != nil {
		b.t.Stop()
	}
}
