package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/store"
)

// Entry is a kept event with its id, "EPOCH-N": N counts up from 1 in the
// order the log received the events, so a client can resume after the last
// it saw; EPOCH names this log (this run of mcpvisor), so an id from an
// earlier run is recognised as such. Events restored from an earlier run
// keep the id they had there.
type Entry struct {
	ID  string `json:"id"`
	seq uint64 // the entry's place in the log, restored entries included
	fleet.Event
}

// EventLog keeps the most recent lifecycle events in memory, counts every
// event it was given (for /metrics), and feeds live subscribers.
type EventLog struct {
	mu      sync.Mutex
	max     int
	epoch   string
	entries []kept
	pos     uint64 // the last entry's seq
	base    uint64 // the seq before this run's first event
	last    uint64 // this run's events so far
	// counts places each server's counts of this run's events in tally:
	// one slice for every server, not an object each.
	counts  map[string]int32
	tally   []eventCounts
	subs    map[*subscription]struct{}
	persist func(store.Event)
	closed  bool
	done    chan struct{} // closed by Close
}

type eventKey struct{ server, typ string }

// eventCounts are one server's counts of this run's events: those of the
// types /metrics lists for every server (eventTypes) in place, by index,
// any other type in more — one small object per server, not a map entry
// per (server, type).
// (uint32: lifecycle events of one server; four billion of them in a run
// is out of reach.)
type eventCounts struct {
	n    []uint32 // by eventTypes' index, once an event is counted
	more map[string]uint64
}

// add counts one event of type typ.
func (c *eventCounts) add(typ string) {
	if i := slices.Index(eventTypes, typ); i >= 0 {
		if c.n == nil {
			c.n = make([]uint32, len(eventTypes))
		}
		c.n[i]++
		return
	}
	if c.more == nil {
		c.more = map[string]uint64{}
	}
	c.more[typ]++
}

// kept is an event as the log keeps it: its details as the JSON they are
// persisted and sent as, decoded only when the event is read (entry) —
// a thousand kept events cost a thousand small byte slices, not a
// thousand maps of boxed values. id is "" for this run's events, whose
// id is the epoch and their number in the run.
type kept struct {
	seq                  uint64
	id                   string
	time                 int64 // Unix ns (keptTime); 0: none
	server, session, typ string
	details              json.RawMessage
}

// entry is k as the log's readers get it.
func (l *EventLog) entry(k kept) Entry {
	e := Entry{ID: k.id, seq: k.seq, Event: fleet.Event{Time: eventTime(k.time), Server: k.server, Session: k.session, Type: event.Kind(k.typ)}}
	if e.ID == "" {
		e.ID = l.epoch + "-" + strconv.FormatUint(k.seq-l.base, 10)
	}
	if len(k.details) != 0 {
		// Numbers stay as written (json.Number): an integer is not
		// rounded through a float64.
		d := json.NewDecoder(bytes.NewReader(k.details))
		d.UseNumber()
		_ = d.Decode(&e.Details) // an object, else none
	}
	return e
}

// keptTime is t as a kept event holds it: Unix ns, 0 for the zero time.
func keptTime(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// eventTime is a kept event's time, in the local zone (an event restored
// from the store shows the same instant in it, whatever offset it was
// written with).
func eventTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

type subscription struct {
	ch     chan Entry
	lagged bool // closed because it fell behind
}

// RestoreEventLog keeps at most max events (default 1000), starting with
// history: events persisted by earlier runs of mcpvisor, oldest first (as
// store.Events returns them), of which it keeps the newest max. They are
// listed and replayed like this run's, with the ids they had (one
// persisted without an id gets "s-<its store sequence number>"), and a
// client can resume after any of them still kept; they are not counted in
// /metrics, which counts this run's events. This run's epoch is unlike any
// of theirs, so ids stay unique across runs.
func RestoreEventLog(max int, history []store.Event) *EventLog {
	if max <= 0 {
		max = 1000
	}
	l := &EventLog{max: max, counts: map[string]int32{}, subs: map[*subscription]struct{}{}, done: make(chan struct{})}
	if len(history) > max {
		history = history[len(history)-max:]
	}
	epochs := map[string]bool{}
	for _, h := range history {
		id := h.ID
		if _, err := parseEventID(id); err != nil {
			id = "s-" + strconv.FormatUint(h.Seq, 10)
		}
		epoch, _, _ := strings.Cut(id, "-")
		epochs[epoch] = true
		l.pos++
		l.entries = append(l.entries, kept{seq: l.pos, id: id, time: keptTime(h.Time), server: h.Server, session: h.Session, typ: h.Type, details: h.Details})
	}
	l.base = l.pos
	now := epochClock().UnixNano()
	for l.epoch = strconv.FormatInt(now, 36); epochs[l.epoch]; now++ {
		l.epoch = strconv.FormatInt(now, 36) // a clock that went back to a past run's start
	}
	return l
}

// epochClock names a log's run; tests replace it.
var epochClock = time.Now

// PersistTo passes every event the log adds from now on to record, with
// its id and in the log's order; record must not block
// (store.EventWriter.Record does not).
func (l *EventLog) PersistTo(record func(store.Event)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.persist = record
}

// Add records an event (fleet.Options.OnEvent; one without a time gets
// the present one), passes it to every subscriber and to the PersistTo
// recorder. It never blocks: a subscriber whose buffer is full is dropped
// (its channel closes) and may resume from the log.
func (l *EventLog) Add(e fleet.Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last++
	l.pos++
	entry := Entry{ID: l.epoch + "-" + strconv.FormatUint(l.last, 10), seq: l.pos, Event: e}
	var details json.RawMessage
	if len(e.Details) != 0 {
		details, _ = json.Marshal(e.Details)
	}
	if len(l.entries) == l.max {
		// Full: the oldest makes room, in place (the slice never grows
		// past max, nor is it copied).
		copy(l.entries, l.entries[1:])
		l.entries = l.entries[:l.max-1]
	}
	l.entries = append(l.entries, kept{seq: l.pos, time: keptTime(e.Time), server: e.Server, session: e.Session, typ: string(e.Type), details: details})
	i, ok := l.counts[e.Server]
	if !ok {
		i = int32(len(l.tally))
		l.tally = append(l.tally, eventCounts{})
		l.counts[e.Server] = i
	}
	l.tally[i].add(string(e.Type))
	if l.persist != nil {
		l.persist(store.Event{ID: entry.ID, Time: e.Time, Server: e.Server, Session: e.Session, Type: string(e.Type), Details: details})
	}
	for s := range l.subs {
		select {
		case s.ch <- entry:
		default:
			s.lagged = true
			close(s.ch)
			delete(l.subs, s)
		}
	}
}

// Events returns the kept events, oldest first.
func (l *EventLog) Events() []Entry {
	if l == nil {
		return []Entry{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Entry, 0, len(l.entries))
	for _, k := range l.entries {
		out = append(out, l.entry(k))
	}
	return out
}

// Count returns how many kept events have type typ, for server (any server
// when "").
func (l *EventLog) Count(server, typ string) int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, k := range l.entries {
		if k.typ == typ && (server == "" || k.server == server) {
			n++
		}
	}
	return n
}

// Subscribe returns the kept events after the event with id after (all
// kept ones when after is "", or the id of an event of another run that
// is no longer kept), and a channel of
// every event from then on, with room for buf of them. The channel closes
// when the log is closed, or when the subscriber falls buf events behind
// (lagged then reports true); cancel ends the subscription. A malformed
// id is an error.
func (l *EventLog) Subscribe(after string, buf int) (replay []Entry, events <-chan Entry, lagged func() bool, cancel func(), err error) {
	var id eventID
	if after != "" {
		var err error
		if id, err = parseEventID(after); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	s := &subscription{ch: make(chan Entry, buf)}
	l.mu.Lock()
	defer l.mu.Unlock()
	var from uint64
	switch {
	case after == "":
	case id.epoch == l.epoch:
		from = l.base + id.seq
	default: // an earlier run's, restored and still kept, or not
		for _, k := range l.entries {
			if k.id == after {
				from = k.seq
				break
			}
		}
	}
	for _, k := range l.entries {
		if k.seq > from {
			replay = append(replay, l.entry(k))
		}
	}
	if l.closed {
		close(s.ch)
	} else {
		l.subs[s] = struct{}{}
	}
	lagged = func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return s.lagged
	}
	cancel = func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, ok := l.subs[s]; ok {
			delete(l.subs, s)
			close(s.ch)
		}
	}
	return replay, s.ch, lagged, cancel, nil
}

type eventID struct {
	epoch string
	seq   uint64
}

func parseEventID(s string) (eventID, error) {
	epoch, n, ok := strings.Cut(s, "-")
	seq, err := strconv.ParseUint(n, 10, 64)
	if !ok || epoch == "" || err != nil {
		return eventID{}, fmt.Errorf("bad event id %q: want the id of an event", s)
	}
	return eventID{epoch, seq}, nil
}

// Close ends every subscription, now and later; events are still kept and
// counted. mcpvisor closes the log when its servers have stopped, so that
// live streams end and the HTTP server can shut down.
func (l *EventLog) Close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		close(l.done)
	}
	l.closed = true
	for s := range l.subs {
		close(s.ch)
		delete(l.subs, s)
	}
}

// Done is closed when the log is closed.
func (l *EventLog) Done() <-chan struct{} { return l.done }

// counted returns every (server, type) count, for /metrics.
func (l *EventLog) counted() map[eventKey]uint64 {
	out := map[eventKey]uint64{}
	if l == nil {
		return out
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for server, i := range l.counts {
		c := &l.tally[i]
		for i, n := range c.n {
			if n != 0 {
				out[eventKey{server, eventTypes[i]}] = uint64(n)
			}
		}
		for typ, n := range c.more {
			out[eventKey{server, typ}] = n
		}
	}
	return out
}

// wantsStream tells whether a GET /api/events asks for the live stream:
// an EventSource (Accept: text/event-stream) or ?follow.
func wantsStream(r *http.Request) bool {
	if r.URL.Query().Has("follow") {
		return true
	}
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, "text/event-stream") {
			return true
		}
	}
	return false
}

// Stream tuning, and a test's hold on a stream before each live event.
var (
	streamBuffer     = 256              // events a stream may fall behind before it is dropped
	streamKeepalive  = 15 * time.Second // comment line sent on a quiet stream
	streamCloseGrace = time.Second      // left to a stream to end cleanly once the log closes
	streamHold       = func() {}
)

// streamEvents serves the events as Server-Sent Events: the kept ones
// after Last-Event-ID (or ?after=ID; all kept ones when neither is given,
// or when the id is of an earlier run of mcpvisor), then every new one,
// until the client leaves or the log closes. Each event's SSE id is its log
// id and its SSE event name its type. A client too slow to keep up gets an
// "event: lagged" and the stream ends; it reconnects with Last-Event-ID to
// get what it missed, as far as the log still keeps it. The stream is
// served by liveStream, which says how it ends.
func (h *Handler) streamEvents(w http.ResponseWriter, r *http.Request) {
	if h.log == nil {
		http.Error(w, "no event log", http.StatusNotFound)
		return
	}
	// An EventSource resends whatever id it last saw and gives up for good
	// on an error status: an id it cannot have had from this log (another
	// version's, say) is treated as another run's. ?after is typed by a
	// person, who is told.
	after := r.URL.Query().Get("after")
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		after = last
		if _, err := parseEventID(last); err != nil {
			after = "0-0"
		}
	}
	replay, events, lagged, cancel, err := h.log.Subscribe(after, streamBuffer)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	defer cancel()
	first := func(w io.Writer) error {
		for _, e := range replay {
			if err := writeEvent(w, e); err != nil {
				return err
			}
		}
		return nil
	}
	h.liveStream(w, r, h.log.Done(), first, func(ctx context.Context) (piece, bool) {
		select {
		case <-ctx.Done():
			return nil, true
		case e, ok := <-events:
			streamHold()
			switch {
			case ok:
				return func(w io.Writer) error { return writeEvent(w, e) }, true
			case lagged():
				return func(w io.Writer) error {
					_, err := fmt.Fprint(w, "event: lagged\ndata: {}\n\n")
					return err
				}, false
			}
			return nil, false
		}
	})
}

// A piece is one part of a live stream, written by liveStream.
type piece func(w io.Writer) error

// liveStream serves a Server-Sent Events response: first at once, then
// each piece next gives, until next says that was the last, the client
// leaves, a write to it fails, or done or the handler's Close ends it.
// next waits for a piece until its context ends, and then gives none:
// a stream quiet for streamKeepalive gets a comment line. Each piece is
// written under a deadline of Options.WriteTimeout: a client that stops
// reading is dropped then, and at once (after streamCloseGrace) when done
// closes or the handler is closed, so that it cannot hold up mcpvisor's
// shutdown.
func (h *Handler) liveStream(w http.ResponseWriter, r *http.Request, done <-chan struct{}, first piece, next func(context.Context) (p piece, more bool)) {
	rc := http.NewResponseController(w)
	h.streams.Add(1)
	defer h.streams.Add(-1)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ended := func() bool {
		select {
		case <-done:
		case <-h.closed:
		default:
			return false
		}
		return true
	}

	// A write blocked on a client that stopped reading ends soon after
	// the stream is ended: a deadline is the only way to reach it. It
	// leaves a stream that is not blocked the time to end cleanly. The
	// handler checks for the end after setting each deadline of its own.
	stop, unblocked := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(unblocked)
		select {
		case <-done:
		case <-h.closed:
		case <-stop:
			return
		}
		_ = rc.SetWriteDeadline(time.Now().Add(streamCloseGrace))
		cancel()
	}()
	// The last deadline stays for net/http's final flush of the response,
	// which a client that stopped reading could otherwise hold forever;
	// net/http clears it before the connection serves another request.
	defer func() {
		close(stop)
		<-unblocked
	}()
	// send writes one piece under a fresh deadline and flushes it.
	send := func(p piece) error {
		if err := rc.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout)); err != nil {
			return err
		}
		if ended() {
			return errStreamEnded
		}
		if err := p(w); err != nil {
			return err
		}
		return rc.Flush()
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if send(first) != nil {
		return
	}
	for {
		quiet, endQuiet := context.WithTimeout(ctx, streamKeepalive)
		p, more := next(quiet)
		endQuiet()
		if ctx.Err() != nil {
			return
		}
		if p == nil && more {
			p = keepalive
		}
		if p != nil && send(p) != nil || !more {
			return
		}
	}
}

func keepalive(w io.Writer) error {
	_, err := fmt.Fprint(w, ": keepalive\n\n")
	return err
}

var errStreamEnded = errors.New("stream ended")

func writeEvent(w io.Writer, e Entry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", e.ID, sseField(string(e.Type)), data)
	return err
}

// sseField keeps a value on one SSE line.
func sseField(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}
