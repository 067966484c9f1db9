package rpc

import "fmt"

// The write side of a Conn combines writes. A sender that finds no write
// in progress writes its own line at once; what other senders queued
// meanwhile is then written by a goroutine of the connection, one Write per
// batch, until the queue is empty. Under concurrent load a stdio peer thus gets many
// lines per read instead of one system call (and one wake-up) per line,
// and an uncontended sender pays nothing more than one Write.
//
// Lines keep the order in which they were queued, and a batch is one
// Write, so lines never interleave. Call does not wait for its line to be
// written (it waits for the response anyway); everything else does.

// maxQueued bounds the bytes waiting behind a write in progress. A sender
// that would go beyond it waits for the writer (honouring its cancel), so
// a peer that stops reading holds its senders instead of growing memory.
const maxQueued = 1 << 20

type writer struct {
	// Guarded by Conn.wmu.
	writing bool
	queue   []queued
	bytes   int
	flushed chan struct{} // closed once what is queued now is written; made on demand
	spare   []queued

	batch []byte // only the goroutine draining the queue touches it
}

type queued struct {
	id int64 // the Call's id, for unqueue; 0 for other lines
	bp *[]byte
	b  []byte
}

// send writes the request line b (in the pooled buffer bp, which it takes
// over) of call id, or queues it behind the write in progress and returns
// at once. It fails only if the connection has ended or cancel closed
// while the queue was full (nothing sent).
func (c *Conn) send(cancel <-chan struct{}, id int64, bp *[]byte, b []byte) error {
	return c.write(cancel, queued{id: id, bp: bp, b: b}, false)
}

// writeLine writes one whole line and returns once it is written or the
// connection has ended. b stays the caller's.
func (c *Conn) writeLine(cancel <-chan struct{}, b []byte) error {
	return c.write(cancel, queued{b: b}, true)
}

func (c *Conn) write(cancel <-chan struct{}, q queued, wait bool) error {
	w := &c.wr
	c.wmu.Lock()
	for {
		select {
		case <-c.done:
			c.wmu.Unlock()
			release(q)
			return c.Err()
		default:
		}
		if !w.writing {
			break
		}
		if w.bytes+len(q.b) <= maxQueued || len(w.queue) == 0 {
			if q.bp == nil { // the caller keeps b: queue a copy
				q.bp = getBuf()
				q.b = append(*q.bp, q.b...)
			}
			w.queue = append(w.queue, q)
			w.bytes += len(q.b)
			if !wait {
				c.wmu.Unlock()
				return nil
			}
			ch := w.flushedLocked()
			c.wmu.Unlock()
			select {
			case <-ch:
				return nil
			case <-c.done:
				select {
				case <-ch:
					return nil
				default:
					return c.Err()
				}
			}
		}
		// The queue is full: wait until the writer takes it.
		ch := w.flushedLocked()
		c.wmu.Unlock()
		select {
		case <-ch:
		case <-cancel:
			release(q)
			return errCanceled
		case <-c.done:
		}
		c.wmu.Lock()
	}
	w.writing = true
	c.wmu.Unlock()

	_, err := c.w.Write(q.b)
	release(q)
	if err != nil {
		c.writeFailed(err)
		return c.Err()
	}
	c.wmu.Lock()
	if len(w.queue) == 0 {
		c.idleLocked()
		c.wmu.Unlock()
		return nil
	}
	c.wmu.Unlock()
	// Lines were queued meanwhile. Another goroutine writes them, so that
	// this sender waits for its own line only (a Call must be free to
	// return when its context ends, and the read loop's replies must not
	// wait for other senders' lines).
	if !c.goAsync(c.drain) {
		c.wmu.Lock()
		c.dropLocked() // ended: their senders see Done
		c.wmu.Unlock()
	}
	return nil
}

// drain writes the queued lines, a batch per Write, until none is left or
// the connection ends.
func (c *Conn) drain() {
	w := &c.wr
	c.wmu.Lock()
	for len(w.queue) > 0 {
		select {
		case <-c.done:
			c.dropLocked()
			c.wmu.Unlock()
			return
		default:
		}
		batch, flushed := w.queue, w.flushed
		w.queue, w.bytes, w.flushed = w.spare[:0], 0, nil
		c.wmu.Unlock()
		buf := w.batch[:0]
		for i, x := range batch {
			buf = append(buf, x.b...)
			release(x)
			batch[i] = queued{}
		}
		_, err := c.w.Write(buf)
		if cap(buf) <= 1<<20 {
			w.batch = buf[:0]
		} else {
			w.batch = nil
		}
		if err != nil {
			c.writeFailed(err)
			return
		}
		if flushed != nil {
			close(flushed)
		}
		c.wmu.Lock()
		w.spare = batch[:0]
	}
	c.idleLocked()
	c.wmu.Unlock()
}

// idleLocked ends the write in progress with nothing queued; whoever waits
// for room may go on (unqueue may have withdrawn what filled the queue).
// Callers hold Conn.wmu.
func (c *Conn) idleLocked() {
	w := &c.wr
	w.writing = false
	if w.flushed != nil {
		close(w.flushed)
		w.flushed = nil
	}
}

// dropLocked forgets the queue once the connection has ended. Its flushed
// channel stays open: its senders wake on Done and report the end.
// Callers hold Conn.wmu.
func (c *Conn) dropLocked() {
	w := &c.wr
	for _, x := range w.queue {
		release(x)
	}
	w.queue, w.bytes, w.flushed, w.writing = nil, 0, nil, false
}

// writeFailed ends the connection after a failed Write, then drops the
// queue: the connection is ended first, so that no sender can take the
// writer's place and no waiter can mistake the drop for a write.
func (c *Conn) writeFailed(err error) {
	c.closeWith(fmt.Errorf("writing to %s: %w", c.peer, err))
	c.wmu.Lock()
	c.dropLocked()
	c.wmu.Unlock()
}

// flushedLocked is the channel closed once the lines queued now are
// written. Callers hold Conn.wmu.
func (w *writer) flushedLocked() chan struct{} {
	if w.flushed == nil {
		w.flushed = make(chan struct{})
	}
	return w.flushed
}

// unqueue withdraws the queued line of call id; false if it is not queued
// (written, being written, or never queued).
func (c *Conn) unqueue(id int64) bool {
	w := &c.wr
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for i, x := range w.queue {
		if x.id == id {
			w.bytes -= len(x.b)
			w.queue = append(w.queue[:i], w.queue[i+1:]...)
			w.queue[len(w.queue):cap(w.queue)][0] = queued{} // no stale reference to the pooled buffer
			release(x)
			return true
		}
	}
	return false
}

func release(q queued) {
	if q.bp != nil {
		putBuf(q.bp, q.b)
	}
}
