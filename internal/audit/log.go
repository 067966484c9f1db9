package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxSize  = 100 << 20
	DefaultMaxFiles = 5
	DefaultQueue    = 4096
	// RingSize is how many of the last records the Log keeps in memory
	// for /api/audit.
	RingSize = 1000
)

var (
	// dropLogEvery bounds how often drops are logged: once per interval,
	// with the count since the last time, however many there are.
	dropLogEvery = 10 * time.Second
	// retryEvery is how often a writer that failed tries its file again
	// while no record comes to try it with.
	retryEvery = time.Second
)

// Options configure a Log.
type Options struct {
	// File is where the lines go: "-" for stdout, else a file's path
	// (made 0600, its directories 0700 if missing).
	File string
	// MaxSize is the size past which the file is rotated: file becomes
	// file.1, file.1 file.2, … up to file.MaxFiles, the oldest dropped
	// (0: DefaultMaxSize, DefaultMaxFiles).
	MaxSize  int64
	MaxFiles int
	// Queue is how many records may wait for the writer (0:
	// DefaultQueue); past it, records are dropped (and counted).
	Queue int
	// FailClosed makes Accepting false while the queue is full or the
	// writer fails: the gateway then refuses requests rather than serve
	// them unaudited.
	FailClosed bool
	// Arguments is how arguments are written: ArgsOmit, ArgsRedact,
	// ArgsDigest ("" too) or ArgsFull.
	Arguments string
	// Logger hears of drops and write errors (nil: none).
	Logger *slog.Logger

	// out replaces the file (tests).
	out output
}

// Stats are a Log's counters. Every record given to Add is, in the end,
// exactly one of Written, Dropped (the queue was full, or the Log closed
// before it was written) or Failed (the writer could not write it).
type Stats struct {
	Written, Dropped, Failed uint64
	// Queued is how many records wait for the writer now.
	Queued int
}

// Log is an audit log. Its methods are safe for concurrent use, and a nil
// *Log does nothing: Add returns true, Accepting true, Handler answers
// 404 "audit is not configured".
type Log struct {
	queue      chan Record
	stop       chan struct{} // closed by Close
	abort      chan struct{} // closed when Close's ctx ended
	done       chan struct{} // closed when the writer ends
	closeOnce  sync.Once
	abortOnce  sync.Once
	failClosed bool
	args       string
	log        *slog.Logger
	out        output

	closed               atomic.Bool
	adding               atomic.Int64 // Adds under way
	failing              atomic.Bool
	written, failed      atomic.Uint64
	dropped              atomic.Uint64
	lastDropLog, dropLog atomic.Int64 // when drops were last logged, and the count then

	mu        sync.Mutex // guards what follows
	seq       uint64
	ring      []entry // RingSize, a circle from head
	head, n   int
	followers map[*follower]struct{}
	ended     bool
}

// Open opens the log described by o and starts its writer; Close stops it.
func Open(o Options) (*Log, error) {
	if err := CheckArguments(o.Arguments); err != nil {
		return nil, err
	}
	if o.Arguments == "" {
		o.Arguments = ArgsDigest
	}
	if o.MaxSize < 0 || o.MaxFiles < 0 || o.Queue < 0 {
		return nil, fmt.Errorf("audit: max size %d, max files %d, queue %d: none may be negative", o.MaxSize, o.MaxFiles, o.Queue)
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.MaxFiles == 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if o.Queue == 0 {
		o.Queue = DefaultQueue
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	out := o.out
	switch {
	case out != nil:
	case o.File == "":
		return nil, errors.New(`audit file: none given (a path, or "-" for stdout)`)
	case o.File == "-":
		out = stdoutOutput{}
	default:
		f := &fileOutput{path: o.File, maxSize: o.MaxSize, maxFiles: o.MaxFiles}
		if err := f.reopen(); err != nil {
			return nil, err
		}
		out = f
	}
	l := &Log{
		queue: make(chan Record, o.Queue), stop: make(chan struct{}), abort: make(chan struct{}), done: make(chan struct{}),
		failClosed: o.FailClosed, args: o.Arguments, log: o.Logger, out: out,
		ring: make([]entry, RingSize), followers: map[*follower]struct{}{},
	}
	go l.run()
	return l, nil
}

// Add queues rec for the writer and returns true, or, when the queue is
// full or the Log closed, drops it (counted, and logged at most once per
// interval) and returns false. It never blocks. A zero rec.Time is now.
func (l *Log) Add(rec Record) bool { return l.add(rec, true) }

// Offer is Add for a caller that writes rec elsewhere when it is not
// taken: a record refused is not counted as dropped.
func (l *Log) Offer(rec Record) bool { return l.add(rec, false) }

func (l *Log) add(rec Record, count bool) bool {
	if l == nil {
		return true
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	refuse := func() bool {
		if count {
			l.drop()
		}
		return false
	}
	if l.closed.Load() {
		return refuse()
	}
	// adding lets the writer, closing, wait for an Add that saw the Log
	// open and has yet to send: every record is written or counted. (An
	// Add that comes once it is closed stops at the look above.)
	l.adding.Add(1)
	defer l.adding.Add(-1)
	if l.closed.Load() {
		return refuse()
	}
	select {
	case l.queue <- rec:
		return true
	default:
		return refuse()
	}
}

// drop counts one dropped record, and logs the drops when the last time
// was dropLogEvery ago.
func (l *Log) drop() {
	total := l.dropped.Add(1)
	now := time.Now().UnixNano()
	last := l.lastDropLog.Load()
	if last != 0 && now-last < int64(dropLogEvery) {
		return
	}
	if !l.lastDropLog.CompareAndSwap(last, now) {
		return // another caller logs these
	}
	before := l.dropLog.Swap(int64(total))
	l.log.Warn("audit: records dropped: the queue is full or the log closed", "dropped", int64(total)-before, "dropped_total", total)
}

// Accepting reports whether requests may be served: always, unless the
// Log is fail-closed, and then only while its queue has room and its
// writer is not failing.
func (l *Log) Accepting() bool {
	if l == nil || !l.failClosed {
		return true
	}
	return !l.closed.Load() && !l.failing.Load() && len(l.queue) < cap(l.queue)
}

// FailClosed reports whether l refuses requests while it cannot take
// their lines (Options.FailClosed).
func (l *Log) FailClosed() bool { return l != nil && l.failClosed }

// Stats are l's counters now.
func (l *Log) Stats() Stats {
	if l == nil {
		return Stats{}
	}
	return Stats{Written: l.written.Load(), Dropped: l.dropped.Load(), Failed: l.failed.Load(), Queued: len(l.queue)}
}

// Close writes what is queued, within ctx, then stops the writer, closes
// the file and ends the followers' streams. What ctx leaves unwritten is
// counted dropped, and ctx's error returned; the writer then ends as soon
// as the write it is in (if any) returns.
func (l *Log) Close(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.stop)
	})
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		l.abortOnce.Do(func() { close(l.abort) })
		return fmt.Errorf("audit: closing: %w", ctx.Err())
	}
}

// run is the writer.
func (l *Log) run() {
	defer close(l.done)
	defer l.endFollowers()
	defer func() {
		if total, before := l.dropped.Load(), l.dropLog.Load(); int64(total) > before {
			l.log.Warn("audit: records dropped: the queue is full or the log closed", "dropped", int64(total)-before, "dropped_total", total)
		}
	}()
	defer func() {
		if err := l.out.close(); err != nil {
			l.log.Warn("audit: closing the file", "err", err)
		}
	}()
	var retry <-chan time.Time
	for {
		select {
		case <-l.abort: // Close gave up: what is queued is dropped
			for {
				select {
				case <-l.queue:
					l.dropped.Add(1)
				default:
					if l.settled() {
						return
					}
				}
			}
		default:
		}
		if l.failing.Load() && retry == nil {
			retry = time.After(retryEvery)
		}
		select {
		case rec := <-l.queue:
			l.write(&rec)
		case <-retry:
			retry = nil
			if err := l.out.reopen(); err == nil {
				l.failing.Store(false)
			}
		case <-l.stop:
			select {
			case rec := <-l.queue:
				l.write(&rec) // then the next, or the abort, at the top
			default:
				if l.settled() {
					return // all written
				}
			}
		}
	}
}

// settled reports, once the Log is closed, that no Add is between its
// look at closed and its send, and the queue is empty: no record can come
// any more. An Add never blocks, so the wait is short.
func (l *Log) settled() bool {
	if l.adding.Load() > 0 {
		runtime.Gosched()
		return false
	}
	return len(l.queue) == 0
}

// write writes one record, keeps it in the ring and gives it to the
// followers.
func (l *Log) write(rec *Record) {
	l.mu.Lock()
	l.seq++
	seq := l.seq
	l.mu.Unlock()
	line, err := rec.Line(seq, l.args)
	if err != nil { // cannot happen: every field encodes
		l.failed.Add(1)
		l.log.Warn("audit: encoding a record", "err", err)
		return
	}
	err = l.out.write(line)
	// Published before it is counted: a reader who saw it counted finds
	// it in the ring.
	l.publish(entry{seq: seq, server: rec.Server, identity: rec.Identity, outcome: rec.Outcome, line: line})
	if err != nil {
		l.failed.Add(1)
		if !l.failing.Swap(true) {
			l.log.Error("audit: writing failed; records are lost until it works again", "err", err)
		}
	} else {
		l.written.Add(1)
		if l.failing.Swap(false) {
			l.log.Info("audit: writing works again")
		}
	}
}

// output is where lines go.
type output interface {
	write(line []byte) error
	// reopen opens the output again after a failure.
	reopen() error
	close() error
}

type stdoutOutput struct{}

func (stdoutOutput) write(b []byte) error { _, err := os.Stdout.Write(b); return err }
func (stdoutOutput) reopen() error        { return nil }
func (stdoutOutput) close() error         { return nil }

// fileOutput is a file rotated past maxSize.
type fileOutput struct {
	path     string
	maxSize  int64
	maxFiles int
	f        *os.File
	size     int64
}

func (o *fileOutput) reopen() error {
	if o.f != nil {
		o.f.Close()
		o.f = nil
	}
	if err := os.MkdirAll(filepath.Dir(o.path), 0o700); err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	f, err := os.OpenFile(o.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Mode().Perm() != 0o600 {
		err = f.Chmod(0o600) // an older file, made by another hand
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("audit file: %w", err)
	}
	o.f, o.size = f, fi.Size()
	return nil
}

func (o *fileOutput) write(b []byte) error {
	if o.f != nil && o.size > 0 && o.size+int64(len(b)) > o.maxSize {
		if err := o.rotate(); err != nil {
			return err
		}
	}
	if o.f == nil {
		if err := o.reopen(); err != nil {
			return err
		}
	}
	n, err := o.f.Write(b)
	o.size += int64(n)
	if err != nil {
		o.f.Close() // opened again for the next record
		o.f = nil
	}
	return err
}

// rotate shifts path.i to path.i+1 (the last dropped), path to path.1,
// and opens a new path.
func (o *fileOutput) rotate() error {
	o.f.Close()
	o.f = nil
	for i := o.maxFiles - 1; i >= 1; i-- {
		err := os.Rename(o.path+"."+strconv.Itoa(i), o.path+"."+strconv.Itoa(i+1))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("audit file: rotating: %w", err)
		}
	}
	if err := os.Rename(o.path, o.path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("audit file: rotating: %w", err)
	}
	return o.reopen()
}

func (o *fileOutput) close() error {
	if o.f == nil {
		return nil
	}
	err := o.f.Close()
	o.f = nil
	return err
}
