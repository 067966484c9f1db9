package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Event is one entry of the event history.
type Event struct {
	// Seq numbers events in the order they were appended, increasing across
	// restarts; AppendEvent assigns it (any value given is ignored).
	Seq uint64 `json:"-"`
	// ID is the caller's name for the event (the admin event log's id,
	// which names the run of mcpvisor), kept as given.
	ID      string          `json:"id,omitempty"`
	Time    time.Time       `json:"time"`
	Server  string          `json:"server,omitempty"`
	Session string          `json:"session,omitempty"`
	Type    string          `json:"type"`
	Details json.RawMessage `json:"details,omitempty"` // kept byte for byte
}

// AppendEvent adds e to the history (Time defaults to now), dropping the
// oldest events beyond Options.MaxEvents. It costs one fsync: a caller
// with many events at hand should use AppendEvents.
func (s *Store) AppendEvent(e Event) error {
	return s.AppendEvents([]Event{e})
}

// AppendEvents appends es, in order, in one transaction.
func (s *Store) AppendEvents(es []Event) error {
	if s == nil || len(es) == 0 {
		return nil
	}
	vals := make([][]byte, len(es))
	now := time.Now()
	for i, e := range es {
		if e.Time.IsZero() {
			e.Time = now
		}
		v, err := encodeEvent(e)
		if err != nil {
			return fmt.Errorf("store: event %q: %w", e.Type, err)
		}
		vals[i] = v
	}
	max := uint64(s.opts.MaxEvents)
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		var last uint64
		for _, v := range vals {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put(seqKey(seq), v); err != nil {
				return err
			}
			last = seq
		}
		// Keys are contiguous: appended at the end, dropped from the front.
		if last <= max {
			return nil
		}
		c := b.Cursor()
		for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= last-max; k, _ = c.First() {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// Events returns the history's events whose Time is not before since (the
// zero time: all), oldest first; with limit > 0, only the newest limit of
// them. A nil or closed store, or a read error (logged), returns none.
func (s *Store) Events(since time.Time, limit int) []Event {
	if s == nil {
		return nil
	}
	var out []Event
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEvents).Cursor()
		// Newest first, so that limit stops the walk; clocks may step back,
		// so every event is checked rather than stopping at the first old one.
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if limit > 0 && len(out) >= limit {
				break
			}
			var e Event
			if len(k) != 8 || json.Unmarshal(v, &e) != nil {
				continue // unreadable entry: skip it, keep the rest
			}
			if e.Time.Before(since) {
				continue
			}
			e.Seq = binary.BigEndian.Uint64(k)
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		s.readFailed("events", err)
		return nil
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// encodeEvent writes e as JSON with Details spliced in as given:
// json.Marshal would compact it and escape HTML characters.
func encodeEvent(e Event) ([]byte, error) {
	details := e.Details
	e.Details = nil
	v, err := json.Marshal(e)
	if err != nil || len(details) == 0 {
		return v, err
	}
	if !json.Valid(details) {
		return nil, errors.New("details are not valid JSON")
	}
	v = append(v[:len(v)-1], `,"details":`...)
	v = append(v, details...)
	return append(v, '}'), nil
}

func seqKey(seq uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, seq)
	return k
}

// Defaults for EventWriterOptions.
const (
	DefaultEventBatch = 64
	DefaultEventFlush = 200 * time.Millisecond
	DefaultEventQueue = 1024
)

// EventWriterOptions tune an EventWriter. The zero value is usable.
type EventWriterOptions struct {
	// BatchSize: a batch is written, in one transaction, as soon as it
	// holds this many events (default DefaultEventBatch).
	BatchSize int
	// FlushInterval: a batch is written at most this long after its first
	// event was taken from the queue (default DefaultEventFlush).
	FlushInterval time.Duration
	// QueueSize bounds the events waiting to be written (default
	// DefaultEventQueue). Record drops an event that finds it full (the
	// disk is slow or wedged), counts it in Dropped and logs when dropping
	// begins and when writing is caught up again.
	QueueSize int
	// Logger (default the store's).
	Logger *slog.Logger
}

// EventWriter appends events to a store's history off the caller's path:
// Record queues an event and returns at once; a goroutine of the writer's
// writes them in batches, one transaction (one fsync) per batch, in the
// order they were recorded. A nil *EventWriter does nothing.
type EventWriter struct {
	s    *Store
	opts EventWriterOptions
	log  *slog.Logger
	// queue holds the events waiting, by reference: room for QueueSize
	// pointers, not QueueSize events, so that a burst leaves little
	// resident once it is written.
	queue chan *Event
	done  chan struct{} // closed when the goroutine has written its last batch

	mu     sync.Mutex // guards sending on queue against Close
	closed bool

	dropped  atomic.Uint64
	flushes  atomic.Uint64
	dropping atomic.Bool // since the last drop, nothing was written
}

// EventWriter starts a writer of s's event history; on a nil store it
// returns nil, a writer that does nothing. Close it before the store.
func (s *Store) EventWriter(opts EventWriterOptions) *EventWriter {
	if s == nil {
		return nil
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultEventBatch
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultEventFlush
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultEventQueue
	}
	log := opts.Logger
	if log == nil {
		log = s.log
	}
	w := &EventWriter{s: s, opts: opts, log: log, queue: make(chan *Event, opts.QueueSize), done: make(chan struct{})}
	go w.run()
	return w
}

// Record queues e (Time defaults to now). It never blocks: an event that
// finds the queue full, or comes after Close, is dropped and counted.
func (w *EventWriter) Record(e Event) {
	if w == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		w.dropped.Add(1)
		return
	}
	// Record is the only sender, under w.mu: with room now, the send
	// below cannot block. An event is copied to the heap only once it
	// has room — a wedged disk's dropped events cost nothing.
	if len(w.queue) == cap(w.queue) {
		w.dropped.Add(1)
		if !w.dropping.Swap(true) {
			w.log.Warn("event history: the state file is not keeping up; dropping events", "queued", w.opts.QueueSize)
		}
		return
	}
	queued := new(Event)
	*queued = e
	w.queue <- queued
}

// Dropped counts the events recorded but never written: dropped from a
// full queue, recorded after Close, or lost with a failed write.
func (w *EventWriter) Dropped() uint64 {
	if w == nil {
		return 0
	}
	return w.dropped.Load()
}

// Flushes counts the batches written.
func (w *EventWriter) Flushes() uint64 {
	if w == nil {
		return 0
	}
	return w.flushes.Load()
}

// Close stops taking events and waits, until ctx ends, for the queued ones
// to be written; it then returns ctx's error (the writer finishes in the
// background: call Close again to wait for it). Close again after it
// returned nil does nothing.
func (w *EventWriter) Close(ctx context.Context) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.queue)
	}
	w.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("event history: %d events not yet written: %w", len(w.queue), ctx.Err())
	}
}

func (w *EventWriter) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	batch := make([]Event, 0, w.opts.BatchSize)
	for {
		select {
		case e, ok := <-w.queue:
			if !ok {
				w.write(batch)
				return
			}
			batch = append(batch, *e)
			if len(batch) == 1 {
				timer.Reset(w.opts.FlushInterval)
			}
			if len(batch) < w.opts.BatchSize {
				continue
			}
		case <-timer.C:
		}
		timer.Stop()
		w.write(batch)
		clear(batch)
		batch = batch[:0]
	}
}

// write appends one batch; a failure loses it (counted, logged).
func (w *EventWriter) write(batch []Event) {
	if len(batch) == 0 {
		return
	}
	if err := w.s.AppendEvents(batch); err != nil {
		w.dropped.Add(uint64(len(batch)))
		w.log.Warn("event history: could not write events", "events", len(batch), "err", err)
		return
	}
	w.flushes.Add(1)
	if w.dropping.Swap(false) {
		w.log.Info("event history: writing again", "dropped_so_far", w.dropped.Load())
	}
}
