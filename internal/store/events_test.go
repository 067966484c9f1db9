package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// holdWrites takes the state file's write lock until the returned func is
// called: every write, and so the event writer's, blocks meanwhile — a
// wedged disk.
func holdWrites(t *testing.T, s *Store) (release func()) {
	t.Helper()
	held, done := make(chan struct{}), make(chan struct{})
	release2 := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.update(func(*bolt.Tx) error {
			close(held)
			<-release2
			return nil
		})
	}()
	<-held
	var once bool
	return func() {
		if !once {
			once = true
			close(release2)
			<-done
		}
	}
}

// types lists the types of the history's events.
func types(s *Store) []string {
	var out []string
	for _, e := range s.Events(time.Time{}, 0) {
		out = append(out, e.Type)
	}
	return out
}

// waitEvents waits until the history holds n events.
func waitEvents(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Events(time.Time{}, 0)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("the history holds %d events, want %d", len(s.Events(time.Time{}, 0)), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Record never waits for the disk: with the state file's write lock held
// elsewhere it returns at once, counting what the full queue drops; what
// was queued is written once the disk is free again.
func TestEventWriterNeverBlocks(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	var logged bytes.Buffer
	w := s.EventWriter(EventWriterOptions{QueueSize: 4, BatchSize: 2, FlushInterval: time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	release := holdWrites(t, s)
	defer release()

	const n = 20
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for i := range n {
			w.Record(Event{Type: fmt.Sprint("e", i)})
		}
	}()
	select {
	case <-recorded:
	case <-time.After(5 * time.Second):
		t.Fatal("Record waited for a wedged disk")
	}
	if w.Dropped() == 0 {
		t.Fatal("nothing dropped: the queue is not bounded")
	}
	release()
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := uint64(len(s.Events(time.Time{}, 0))); got+w.Dropped() != n {
		t.Fatalf("%d written + %d dropped, want %d recorded", got, w.Dropped(), n)
	}
	if log := logged.String(); strings.Count(log, "dropping events") != 1 || strings.Count(log, "writing again") != 1 {
		t.Fatalf("want one warning when dropping begins and one note when it ends:\n%s", log)
	}
}

// A batch that cannot be written is lost, counted and logged.
func TestEventWriterFailedWrite(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	w := s.EventWriter(EventWriterOptions{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	s.Close()
	w.Record(Event{Type: "a"})
	w.Record(Event{Type: "b"})
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w.Dropped() != 2 || !strings.Contains(logged.String(), "could not write events") {
		t.Fatalf("Dropped() = %d, log:\n%s", w.Dropped(), logged.String())
	}
}

// A batch is written when it holds BatchSize events, or FlushInterval
// after its first event; Close writes what is left.
func TestEventWriterBatches(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	w := s.EventWriter(EventWriterOptions{BatchSize: 5, FlushInterval: time.Hour})
	for i := range 12 {
		w.Record(Event{Type: fmt.Sprint("e", i), ID: fmt.Sprint("run-", i)})
	}
	waitEvents(t, s, 10) // two full batches; two events wait for an hour
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev := s.Events(time.Time{}, 0)
	if len(ev) != 12 || ev[11].Type != "e11" || ev[11].ID != "run-11" || ev[0].ID != "run-0" {
		t.Fatalf("after Close: %+v", ev)
	}
	if w.Flushes() != 3 {
		t.Fatalf("%d transactions for 12 events in batches of 5, want 3", w.Flushes())
	}
	w.Record(Event{Type: "late"}) // after Close: not written, not a panic
	if w.Dropped() != 1 {
		t.Fatalf("Dropped() = %d after a Record past Close", w.Dropped())
	}

	w2 := s.EventWriter(EventWriterOptions{BatchSize: 100, FlushInterval: 10 * time.Millisecond})
	defer w2.Close(context.Background())
	w2.Record(Event{Type: "soon"})
	waitEvents(t, s, 13)
}

// Close waits for the last batch at most until its context ends.
func TestEventWriterCloseBounded(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	w := s.EventWriter(EventWriterOptions{})
	release := holdWrites(t, s)
	w.Record(Event{Type: "stuck"})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close on a wedged disk: %v", err)
	}
	release()
	if err := w.Close(context.Background()); err != nil { // waits for the writer to end
		t.Fatal(err)
	}
	if got := types(s); len(got) != 1 || got[0] != "stuck" {
		t.Fatalf("history %v", got)
	}
}

// A nil store has a nil writer, which does nothing.
func TestEventWriterNil(t *testing.T) {
	var s *Store
	w := s.EventWriter(EventWriterOptions{})
	w.Record(Event{Type: "x"})
	if err := w.Close(context.Background()); err != nil || w.Dropped() != 0 {
		t.Fatalf("nil writer: %v %d", err, w.Dropped())
	}
}

// A writer holds little memory: its queue holds references to the events
// waiting, not room for DefaultEventQueue of them (120 KB), which a burst
// (a fleet's thousand servers starting and going to sleep) would make
// resident for good; and events recorded no faster than it writes are
// none of them dropped.
func TestEventWriterHoldsLittle(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{MaxEvents: 10})
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	w := s.EventWriter(EventWriterOptions{FlushInterval: time.Millisecond})
	defer w.Close(context.Background())
	held := heap() - before
	// Room for the queue's pointers and one batch (16 KB), and slack for
	// the race detector's bookkeeping.
	if limit := int64(32 << 10); held > limit {
		t.Fatalf("a writer holds %d bytes of heap, want at most %d (queue %d)", held, limit, DefaultEventQueue)
	}
	const n = 4 * DefaultEventQueue
	for i := range n {
		w.Record(Event{Type: "respawned", Server: "s", Details: json.RawMessage(`{"pid":1}`)})
		if i%64 == 63 {
			waitQueued(t, w, 0) // not faster than it writes: nothing is dropped
		}
	}
	waitQueued(t, w, 0)
	if w.Dropped() != 0 {
		t.Fatalf("%d events dropped", w.Dropped())
	}
}

// waitQueued waits until at most n events wait in w's queue.
func waitQueued(t *testing.T, w *EventWriter, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(w.queue) > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d events queued, want at most %d", len(w.queue), n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// A dropped event costs no allocation: after Close, and while a wedged
// disk keeps the queue full.
func TestEventWriterDropsWithoutAllocating(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	w := s.EventWriter(EventWriterOptions{QueueSize: 2, BatchSize: 1})
	release := holdWrites(t, s)
	defer release()
	w.Record(Event{Type: "taken"}) // by the writer, which then waits for the disk
	waitQueued(t, w, 0)
	for range cap(w.queue) {
		w.Record(Event{Type: "queued"})
	}
	if w.Dropped() != 0 || len(w.queue) != cap(w.queue) {
		t.Fatalf("%d dropped, %d queued, want none and %d", w.Dropped(), len(w.queue), cap(w.queue))
	}
	e := Event{Type: "dropped", Server: "s", Details: json.RawMessage(`{"pid":1}`)}
	if n := testing.AllocsPerRun(100, func() { w.Record(e) }); n != 0 {
		t.Fatalf("Record into a full queue: %.1f allocations", n)
	}
	release()
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { w.Record(e) }); n != 0 {
		t.Fatalf("Record after Close: %.1f allocations", n)
	}
}
