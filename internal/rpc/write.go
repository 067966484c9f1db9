package rpc

import "fmt"

// The write side of a Conn combines writes. A sender that finds no write
// in progress becomes the writer: it writes its own line at once, then
// everything other senders queued meanwhile, in one Write per batch, until
// the queue is empty. Under concurrent load a stdio peer thus gets many
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

	batch []byte // the writer's own: only the sender that is writing touches it
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
	c.wmu.Lock()
	for err == nil && len(w.queue) > 0 {
		batch, flushed := w.queue, w.flushed
		w.queue, w.bytes, w.flushed = w.spare[:0], 0, nil
		c.wmu.Unlock()
		buf := w.batch[:0]
		for i, x := range batch {
			buf = append(buf, x.b...)
			release(x)
			batch[i] = queued{}
		}
		_, err = c.w.Write(buf)
		if cap(buf) <= 1<<20 {
			w.batch = buf[:0]
		} else {
			w.batch = nil
		}
		if err == nil && flushed != nil {
			close(flushed)
		}
		c.wmu.Lock()
		w.spare = batch[:0]
	}
	w.writing = false
	if err != nil {
		for _, x := range w.queue {
			release(x)
		}
		w.queue, w.bytes = nil, 0
	} else if w.flushed != nil {
		// Nothing is queued (unqueue withdrew what was): whoever waits
		// for room may go on.
		close(w.flushed)
		w.flushed = nil
	}
	c.wmu.Unlock()
	if err != nil {
		c.closeWith(fmt.Errorf("writing to %s: %w", c.peer, err))
		return c.Err()
	}
	return nil
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
