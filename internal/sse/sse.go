// Package sse reads an event stream (text/event-stream), as the HTML
// Living Standard's "Server-sent events" section parses one: lines end
// with CRLF, LF or a lone CR; a leading byte-order mark is skipped; a line
// starting with a colon is a comment; "data" lines are joined with LF;
// "event" names the event's type ("message" when none does); "id" sets
// the last event ID unless it holds a NUL; "retry" sets the reconnection
// time when it is all digits; other fields are ignored; an event is
// dispatched at a blank line when it has data, and one left incomplete at
// the end of the stream is dropped.
//
// It is mcpvisor's one reader of event streams: the backend's (a
// server's Streamable HTTP replies and standalone stream), the CLI's
// (mcpvisor events -f, logs -f) and the tests'.
package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"
)

// Event is one dispatched event.
type Event struct {
	// Type is the event's type: "message" unless an event field named
	// another.
	Type string
	// ID is the stream's last event ID as of this event (an id field
	// persists across events, as Last-Event-ID does).
	ID string
	// Data is the event's data, its lines joined with LF. It is valid
	// until the next call of Next.
	Data []byte
}

// ErrEventTooLarge is returned by Next for an event whose data exceeded
// the reader's bound; the event is skipped, and the next call reads on.
var ErrEventTooLarge = errors.New("event stream: event larger than the bound")

// Reader reads events from a stream. It is not safe for concurrent use.
type Reader struct {
	src        io.Reader
	buf        []byte // buf[start:end] is read from src and not yet parsed
	start, end int
	err        error // src's, once it returned one
	skipLF     bool  // the last line ended with a CR
	started    bool  // a line was returned (a byte-order mark only leads the first)
	maxEvent   int
	maxLine    int

	data      []byte
	hasData   bool
	tooLarge  bool
	typ       string
	lastID    string // as of the last blank line
	idSent    bool
	idBuf     string // the id field of the event being read
	idPending bool   // idBuf was set since the last blank line
	retry     time.Duration
	hasRetry  bool
}

// NewReader reads events from r, each with at most maxEvent bytes of data
// (an event above is skipped, and Next says so with ErrEventTooLarge);
// a line longer than maxEvent plus a field name ends the stream with an
// error, since it cannot be part of an event that fits.
func NewReader(r io.Reader, maxEvent int) *Reader {
	return &Reader{src: r, maxEvent: maxEvent, maxLine: maxEvent + 16}
}

// Next returns the next event. At the end of the stream it returns
// io.EOF (an incomplete last event is dropped); if the stream breaks, its
// error.
func (r *Reader) Next() (Event, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			return Event{}, err
		}
		if len(line) == 0 {
			if ev, ok, err := r.dispatch(); ok || err != nil {
				return ev, err
			}
			continue
		}
		r.field(line)
	}
}

// LastID is the stream's last event ID: the id field's value as of the
// last blank line (an event dispatched, or one without data), and whether
// the stream has set one (an empty one clears the ID a resumption would
// send). An id in an event the stream broke inside is not taken: that
// event was never received.
func (r *Reader) LastID() (id string, sent bool) { return r.lastID, r.idSent }

// Retry is the reconnection time the stream asked for, if it did.
func (r *Reader) Retry() (time.Duration, bool) { return r.retry, r.hasRetry }

// dispatch ends the event being read at a blank line: ok reports an event
// to return (one without data is not dispatched).
func (r *Reader) dispatch() (ev Event, ok bool, err error) {
	if r.idPending { // the standard sets the last event ID as each event ends
		r.lastID, r.idSent, r.idPending = r.idBuf, true, false
	}
	hasData, tooLarge, typ := r.hasData, r.tooLarge, r.typ
	r.hasData, r.tooLarge, r.typ = false, false, ""
	if tooLarge {
		r.data = r.data[:0]
		return Event{}, false, fmt.Errorf("%w (%d bytes)", ErrEventTooLarge, r.maxEvent)
	}
	if !hasData {
		r.data = r.data[:0]
		return Event{}, false, nil
	}
	if typ == "" {
		typ = "message"
	}
	data := r.data
	r.data = r.data[:0] // reused: Data is valid until the next call
	return Event{Type: typ, ID: r.lastID, Data: data}, true, nil
}

// field processes one non-empty line of the event being read.
func (r *Reader) field(line []byte) {
	if line[0] == ':' {
		return // a comment
	}
	name, value, found := bytes.Cut(line, []byte{':'})
	if found && len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	switch string(name) {
	case "data":
		if r.tooLarge {
			return
		}
		if r.hasData {
			r.data = append(r.data, '\n')
		}
		if len(r.data)+len(value) > r.maxEvent {
			r.tooLarge = true
			return
		}
		r.data = append(r.data, value...)
		r.hasData = true
	case "event":
		r.typ = string(value)
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			r.idBuf, r.idPending = string(value), true
		}
	case "retry":
		if ms, ok := digits(value); ok {
			r.retry, r.hasRetry = time.Duration(ms)*time.Millisecond, true
		}
	}
}

// digits is value as a base-ten number if it is all ASCII digits (and
// fits).
func digits(value []byte) (int64, bool) {
	if len(value) == 0 || len(value) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range value {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// readLine returns the next line without its end (CRLF, LF or CR),
// valid until the next call. At the end of the stream a last line
// without an end is dropped with the event it belongs to (io.EOF).
func (r *Reader) readLine() ([]byte, error) {
	scanned := r.start // buf[start:scanned] holds no line end
	for {
		if r.skipLF { // the last line ended with CR: a LF after it belongs to that end
			if r.start == r.end && r.err == nil {
				r.fill(&scanned)
				continue
			}
			if r.start < r.end && r.buf[r.start] == '\n' {
				r.start++
				scanned = r.start
			}
			r.skipLF = false
		}
		if i := indexEOL(r.buf[scanned:r.end]); i >= 0 {
			at := scanned + i
			if at-r.start > r.maxLine {
				return nil, r.overlong()
			}
			line := r.buf[r.start:at]
			r.skipLF = r.buf[at] == '\r'
			r.start = at + 1
			if !r.started {
				r.started = true
				line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
			}
			return line, nil
		}
		if r.end-r.start > r.maxLine {
			return nil, r.overlong()
		}
		if r.err != nil {
			return nil, r.err // io.EOF: what was not ended is dropped
		}
		scanned = r.end
		r.fill(&scanned)
	}
}

func (r *Reader) overlong() error {
	return fmt.Errorf("event stream: a line longer than %d bytes", r.maxLine)
}

// indexEOL is the index of the first CR or LF in b, or -1.
func indexEOL(b []byte) int {
	n := bytes.IndexByte(b, '\n')
	if n < 0 {
		n = len(b)
	}
	if c := bytes.IndexByte(b[:n], '\r'); c >= 0 {
		return c
	}
	if n == len(b) {
		return -1
	}
	return n
}

// fill reads more of the stream into buf, first moving the unread bytes
// to its front (scanned moves with them) and growing it when they fill it,
// up to what the longest line needs.
func (r *Reader) fill(scanned *int) {
	if r.start > 0 {
		copy(r.buf, r.buf[r.start:r.end])
		r.end -= r.start
		*scanned -= r.start
		r.start = 0
	}
	if r.end == len(r.buf) {
		n := min(max(2*len(r.buf), 4096), r.maxLine+2)
		if n <= len(r.buf) {
			n = len(r.buf) + 1
		}
		r.buf = append(r.buf, make([]byte, n-len(r.buf))...)
	}
	n, err := r.src.Read(r.buf[r.end:])
	r.end += n
	if err != nil {
		r.err = err
	}
}
