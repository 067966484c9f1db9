// Package logbuf keeps the recent stderr lines of each configured server
// in memory, across the restarts of its processes, for
// GET /api/servers/{name}/logs and mcpvisor logs.
//
// A Buffer holds one server's lines, each numbered by a sequence number
// that counts up from 1 without gaps, and bounded by a number of lines and
// of bytes. Writers never wait for readers: a reader (a follower) asks for
// the lines after the last sequence number it saw, with After or Wait, and
// when the buffer has already discarded some of them it is told how many
// (Page.Dropped) rather than silently missing them.
//
// A Buffer is closed when its server is no longer configured
// (Registry.Remove): its followers get the lines still to come to them,
// then ErrClosed, and it takes no more lines.
package logbuf

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Default bounds of a Buffer.
const (
	DefaultLines = 1000
	DefaultBytes = 256 << 10
)

// Entry is one kept line.
type Entry struct {
	// Seq numbers the buffer's lines from 1, in the order Add took them;
	// Add sets it.
	Seq uint64 `json:"seq"`
	// Time is when the line was written (Add sets the present time when
	// it is zero).
	Time time.Time `json:"time"`
	Line string    `json:"line"`
	// PID is the process that wrote it (the tree's leader), if known.
	PID int `json:"pid,omitempty"`
	// Session names the client session of a per-session server's
	// process, if any.
	Session string `json:"session,omitempty"`
	// Origin tells the buffer's owner which of its writers wrote the
	// line (the fleet: which instance of the server, so that a failed
	// start quotes its own launch's lines, not those of a process that
	// drains beside it); not served.
	Origin uint64 `json:"-"`
}

// Options bound a Buffer: it keeps at most MaxLines lines and MaxBytes
// bytes (the bytes of each line and its session key), whichever is reached
// first, discarding the oldest lines. Zero or negative means the default
// (DefaultLines, DefaultBytes).
type Options struct {
	MaxLines int
	MaxBytes int
}

// Page is the result of one read of a Buffer.
type Page struct {
	// Entries are the lines read, oldest first.
	Entries []Entry
	// Dropped counts the lines the read would have reached that the
	// buffer no longer keeps (see each read for which).
	Dropped uint64
	// Last is the sequence number of the newest line the buffer had
	// taken when it was read (0: none yet): a follower continues with
	// Wait(ctx, Last), and misses nothing in between.
	Last uint64
}

// ErrClosed is what Wait returns once a follower has every line of a
// closed buffer: there will be no more.
var ErrClosed = errors.New("logbuf: buffer closed")

// Buffer keeps one server's recent lines. It is safe for concurrent use;
// Add never waits for a reader.
//
// The lines are kept encoded, back to back in one byte slice (see
// appendRecord), not as Entries: a dormant server's line or two cost one
// small allocation instead of a ring of 80-byte Entries beside a string
// each. A read decodes the lines it returns.
type Buffer struct {
	id uint64 // numbers the buffer among this process's (Epoch)

	mu sync.Mutex
	// data holds the kept lines, oldest first, from off on; data[:off]
	// is the room of discarded lines, reused (the kept lines moved to
	// the front) when a line would not fit otherwise.
	data []byte
	off  int
	last uint64 // seq of the newest line; 0 before the first
	// wake is closed by the next Add, or by Close; nil while nobody
	// waits.
	wake chan struct{}
	// droppedSec and droppedNsec are the time of the newest discarded
	// line.
	droppedSec  int64
	droppedNsec int32
	n           int32 // lines kept
	bytes       int32 // bytes kept (lines and session keys, as bounded)
	maxLines    int32
	maxBytes    int32
	// closed is set by Close, once; Add then drops its line.
	closed bool
}

// buffers numbers the buffers of this process, for their epochs.
var buffers atomic.Uint64

// runEpoch names this run of mcpvisor in the epochs of its buffers: when
// it started, in nanoseconds, base 36.
var runEpoch = strconv.FormatInt(time.Now().UnixNano(), 36)

// New returns an empty Buffer bounded by opts.
func New(opts Options) *Buffer {
	if opts.MaxLines <= 0 {
		opts.MaxLines = DefaultLines
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultBytes
	}
	return &Buffer{
		id:       buffers.Add(1),
		maxLines: int32(min(opts.MaxLines, math.MaxInt32)),
		maxBytes: int32(min(opts.MaxBytes, math.MaxInt32)),
	}
}

// Epoch names this buffer among every buffer of every run of mcpvisor
// (it has no "-"): a sequence number means something only with the epoch
// of the buffer that gave it, since another buffer of the same server (a
// later run, or one made after Registry.Remove) numbers its lines from 1
// again.
func (b *Buffer) Epoch() string { return runEpoch + "." + strconv.FormatUint(b.id, 36) }

// Add keeps e as the newest line, numbered by the next sequence number,
// and discards the oldest lines beyond the bounds. A line longer than the
// byte bound is kept cut to it. Add never waits for a reader: it is safe to
// call from the goroutine that reads a process's stderr. A closed buffer
// drops e: a line of a process still exiting when its server was removed
// wakes nobody and is not numbered.
//
// The buffer keeps e.Time to the nanosecond, in the local time zone (as
// time.Now gives it) and without its monotonic clock reading.
func (b *Buffer) Add(e Entry) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	maxBytes := int(b.maxBytes)
	e.Line = cut(e.Line, maxBytes-min(len(e.Session), maxBytes))
	size := len(e.Line) + len(e.Session)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for b.n > 0 && (b.n == b.maxLines || int(b.bytes)+size > maxBytes) {
		old, next := decode(b.data, b.off, false)
		b.bytes -= int32(old.size)
		b.droppedSec, b.droppedNsec = old.Time.Unix(), int32(old.Time.Nanosecond())
		b.off = next
		b.n--
	}
	if b.n == 0 {
		b.data, b.off = b.data[:0], 0
	} else if b.off > 0 && len(b.data)+recordMax(e) > cap(b.data) {
		kept := b.data[b.off:]
		if len(kept)+recordMax(e) <= cap(b.data) {
			// The discarded room makes room enough: move the kept
			// lines to the front rather than grow.
			b.data = b.data[:copy(b.data, kept)]
		} else {
			// Grow for what is kept, not for the discarded room too:
			// the append below moves the kept lines to an array sized
			// from them (append's growth), so a busy buffer holds about
			// its bound, not twice it.
			b.data = kept[:len(kept):len(kept)]
		}
		b.off = 0
	}
	b.data = appendRecord(b.data, e)
	b.last++
	b.n++
	b.bytes += int32(size)
	b.wakeAll()
}

// A line is kept as a record: the length of the rest (uvarint), then its
// time (Unix seconds, varint, and nanoseconds, uvarint), PID (varint),
// Origin (uvarint), the length of its session key (uvarint), the session
// key and the line. Its sequence number is not kept: the kept lines are
// numbered consecutively up to last.

// recordMax bounds the length of e's record.
func recordMax(e Entry) int {
	return 6*binary.MaxVarintLen64 + len(e.Session) + len(e.Line)
}

// appendRecord appends e's record to data.
func appendRecord(data []byte, e Entry) []byte {
	var h [5 * binary.MaxVarintLen64]byte
	head := binary.AppendVarint(h[:0], e.Time.Unix())
	head = binary.AppendUvarint(head, uint64(e.Time.Nanosecond()))
	head = binary.AppendVarint(head, int64(e.PID))
	head = binary.AppendUvarint(head, e.Origin)
	head = binary.AppendUvarint(head, uint64(len(e.Session)))
	data = binary.AppendUvarint(data, uint64(len(head)+len(e.Session)+len(e.Line)))
	data = append(data, head...)
	data = append(data, e.Session...)
	return append(data, e.Line...)
}

// record is a decoded record: the entry (Seq unset; Line and Session
// only if asked for) and the bytes it counts against the bound.
type record struct {
	Entry
	size int
}

// decode decodes the record at data[i:], with its line and session key
// if strs, and returns it and where the next one starts. The buffer wrote
// data, so it is well formed.
func decode(data []byte, i int, strs bool) (record, int) {
	n, k := binary.Uvarint(data[i:])
	i += k
	next := i + int(n)
	sec, k := binary.Varint(data[i:])
	i += k
	nsec, k := binary.Uvarint(data[i:])
	i += k
	pid, k := binary.Varint(data[i:])
	i += k
	origin, k := binary.Uvarint(data[i:])
	i += k
	sl, k := binary.Uvarint(data[i:])
	i += k
	r := record{Entry: Entry{Time: time.Unix(sec, int64(nsec)), PID: int(pid), Origin: origin}, size: next - i}
	if strs {
		r.Session = string(data[i : i+int(sl)])
		r.Line = string(data[i+int(sl) : next])
	}
	return r, next
}

// wakeAll wakes every Wait waiting; b.mu is held.
func (b *Buffer) wakeAll() {
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
}

// Close closes the buffer: Add drops every line from then on, and Wait
// ends with ErrClosed once it has no more lines to give, waking the
// followers waiting now. The lines kept can still be read. Close may be
// called more than once, and concurrently with every other method.
func (b *Buffer) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.wakeAll()
}

// cut returns s cut to at most n bytes, at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// skip is where the i-th kept line's record (0 is the oldest) starts.
func (b *Buffer) skip(i int) int {
	at := b.off
	for range i {
		n, k := binary.Uvarint(b.data[at:])
		at += k + int(n)
	}
	return at
}

// page returns the kept lines from the i-th (0 is the oldest) on.
func (b *Buffer) page(i int, dropped uint64) Page {
	p := Page{Entries: make([]Entry, int(b.n)-i), Dropped: dropped, Last: b.last}
	seq := b.discarded() + uint64(i)
	for k, at := 0, b.skip(i); k < len(p.Entries); k++ {
		var r record
		r, at = decode(b.data, at, true)
		seq++
		r.Seq = seq
		p.Entries[k] = r.Entry
	}
	return p
}

// discarded counts the lines discarded so far: all came before the oldest
// kept one.
func (b *Buffer) discarded() uint64 { return b.last - uint64(b.n) }

// Tail returns the newest n kept lines (none when n <= 0). Dropped counts
// the lines among the newest n written that are no longer kept.
func (b *Buffer) Tail(n int) Page {
	n = max(n, 0)
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := int(b.n)
	var dropped uint64
	if n > kept {
		dropped = min(uint64(n-kept), b.discarded())
	}
	return b.page(kept-min(n, kept), dropped)
}

// Since returns the kept lines whose Time is not before t. Dropped is
// 0 when no discarded line was written at or after t; otherwise the buffer
// cannot tell how many of its discarded lines were, and Dropped counts
// them all (every one came before the first line returned).
func (b *Buffer) Since(t time.Time) Page {
	b.mu.Lock()
	defer b.mu.Unlock()
	var dropped uint64
	if b.discarded() > 0 && !time.Unix(b.droppedSec, int64(b.droppedNsec)).Before(t) {
		dropped = b.discarded()
	}
	p := Page{Dropped: dropped, Last: b.last}
	seq := b.discarded()
	for at := b.off; at < len(b.data); {
		start := at
		var r record
		r, at = decode(b.data, at, false)
		seq++
		if !r.Time.Before(t) {
			r, _ = decode(b.data, start, true)
			r.Seq = seq
			p.Entries = append(p.Entries, r.Entry)
		}
	}
	return p
}

// After returns the kept lines numbered after seq. Dropped counts the
// lines after seq that are no longer kept: those a follower that had seen
// seq has missed.
func (b *Buffer) After(seq uint64) Page {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.after(seq)
}

func (b *Buffer) after(seq uint64) Page {
	first := b.discarded() + 1 // the oldest kept line's seq
	switch {
	case seq >= b.last:
		return Page{Last: b.last}
	case seq+1 < first:
		return b.page(0, first-seq-1)
	}
	return b.page(int(seq+1-first), 0)
}

// Wait is After(seq) once the buffer has a line numbered after seq: it
// returns at once if it has, else when Add takes one, or with ctx's error
// when ctx ends first. On a closed buffer it never waits: it returns the
// lines after seq if there are any, else an empty page (Last set) and
// ErrClosed, so that a follower gets every line the buffer took, then
// learns that there will be no more.
func (b *Buffer) Wait(ctx context.Context, seq uint64) (Page, error) {
	for {
		b.mu.Lock()
		if b.last > seq {
			p := b.after(seq)
			b.mu.Unlock()
			return p, nil
		}
		if b.closed {
			p := Page{Last: b.last}
			b.mu.Unlock()
			return p, ErrClosed
		}
		if b.wake == nil {
			b.wake = make(chan struct{})
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return Page{}, ctx.Err()
		}
	}
}

// Registry holds a Buffer for each server name. The zero Registry is ready
// to use, with the default bounds; it is safe for concurrent use.
type Registry struct {
	opts Options
	mu   sync.Mutex
	bufs map[string]*Buffer
}

// NewRegistry returns a Registry whose buffers are bounded by opts.
func NewRegistry(opts Options) *Registry { return &Registry{opts: opts} }

// Get returns the buffer of the server name, made empty on first use: the
// writer's side (the fleet, as it builds a process's launch). A reader
// uses Lookup.
func (r *Registry) Get(name string) *Buffer {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bufs[name]
	if b == nil {
		if r.bufs == nil {
			r.bufs = map[string]*Buffer{}
		}
		b = New(r.opts)
		r.bufs[name] = b
	}
	return b
}

// Lookup returns the buffer of the server name, or nil when it has none
// (its server never had a process to keep lines of, or was removed). It
// never makes one: a reader uses it, so that it cannot bring back, open and
// empty, the buffer of a server a reload has just removed — nobody would
// write to it or close it, and its followers would never be told that the
// server is gone. The writer's side uses Get.
func (r *Registry) Lookup(name string) *Buffer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bufs[name]
}

// Remove forgets the buffer of the server name (one no longer
// configured) and closes it: its followers get the lines they have not
// yet seen, then ErrClosed, and the lines its processes still write are
// dropped. A later Get makes a new one, with another epoch. Whoever holds
// the old buffer may still read the lines it kept.
func (r *Registry) Remove(name string) {
	r.mu.Lock()
	b := r.bufs[name]
	delete(r.bufs, name)
	r.mu.Unlock()
	if b != nil {
		b.Close()
	}
}
