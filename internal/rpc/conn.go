package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Conn. The zero value is usable.
type Options struct {
	// MaxLine is the longest line accepted, in bytes, without its newline.
	// Default DefaultMaxLine (16 MiB). A longer line is skipped, not
	// fatal, and reported to OnError as a *LineTooLongError. While it is
	// skipped its top-level "id" member is looked for wherever it sits —
	// first, or last after the result as the TypeScript SDK writes it —
	// by a streaming scan that tracks nesting and strings (an "id" inside
	// the result is not taken for it) in bounded memory. If the id names
	// a pending call, that call fails at once with the *LineTooLongError;
	// if the line is a request from the peer (a top-level "method" or
	// "params" and an id), the peer gets an InvalidRequest error for it.
	MaxLine int

	// Handler receives the peer's requests and notifications, one at a
	// time, in arrival order, on the connection's read goroutine; ctx ends
	// when the connection does. It must not block on the peer: answer a
	// request from another goroutine (Reply, ReplyError) unless the answer
	// is immediate. The Message is the handler's to keep. If Handler is
	// nil, requests get a MethodNotFound error and notifications are
	// dropped.
	Handler func(ctx context.Context, m *Message)

	// Batch, if not nil, receives each line that is a JSON array — a
	// JSON-RPC batch, which MCP 2025-03-26 allows — on the read
	// goroutine, as Handler receives messages; the line is its to keep,
	// unparsed. It must not block on the peer: it answers (WriteRaw) from
	// another goroutine. If Batch is nil, such a line is refused as any
	// line that is not a JSON-RPC message: reported to OnError and
	// answered with one InvalidRequest error with a null id.
	Batch func(ctx context.Context, line []byte)

	// OnError receives protocol noise that does not end the connection:
	// lines that are not JSON-RPC (*DecodeError), lines over the limit
	// (*LineTooLongError), responses for no pending call (ErrUnknownID).
	// It runs on the read goroutine and must not block. Default: log at
	// warning level through Logger.
	OnError func(err error)

	// Logger is used when OnError is nil. Default slog.Default().
	Logger *slog.Logger

	// PeerName names the other end in errors, as in "response from server
	// exceeds 16 MiB line limit". Default "peer".
	PeerName string

	// WriteTimeout bounds how long Notify, Reply, ReplyError and Write
	// wait for their line to be written — to be queued when the queue is
	// full, then to be written — when the peer does not read. Default
	// DefaultWriteTimeout (10 s); negative: no bound, they wait as long
	// as the connection lasts. When it passes they return an error
	// wrapping ErrWriteTimeout, and their line is withdrawn if its write
	// had not started (it is then never written); a line whose write had
	// started is finished by the connection's writer, whole, if the peer
	// reads again (see write.go), and the error says so. It also bounds
	// the wait for room of the lines the connection sends on its own
	// (cancellation notices, automatic error replies): one that finds
	// none in time is dropped and reported to OnError. NotifyContext and
	// the other Context variants, and Call, are bounded by their context
	// instead.
	WriteTimeout time.Duration

	// StallTimeout, if positive, bounds each Write of the connection's
	// writer goroutine, for writers whose Write nothing interrupts (a
	// pipe in blocking mode, as a process's stdout usually is): a Write
	// that has not returned within it — a peer that stopped reading —
	// ends the connection with an error wrapping ErrWriteStalled. The
	// writer then writes in pieces of at most 256 KiB, each with the full
	// time, so that a peer that reads slowly but steadily is not cut off.
	// And once the connection has ended, for whatever reason, Run no
	// longer waits for a Write in progress: it is left to its goroutine,
	// which ends when that Write returns. 0 (the default) means no bound:
	// Run waits for the writer (see Run).
	StallTimeout time.Duration

	// FlushAtEOF makes the peer's EOF end the connection only once the
	// lines queued or posted for the peer by then are written — the
	// connection's own error replies to its last lines and what Post
	// queued among them — or a write fails, or WriteTimeout passes (with
	// a negative WriteTimeout, until Close or the end of Run's context):
	// a peer that closes its output after its last request still reads
	// the answers already on their way. Without it the EOF ends the
	// connection at once and what is queued is dropped.
	FlushAtEOF bool
}

// Conn is one newline-delimited JSON-RPC 2.0 connection over a byte
// stream: every message is one line of JSON. It is symmetric: it sends
// requests (Call) and receives the peer's (Handler), so it serves both the
// stdio backends and mcpvisor's own stdio front.
//
// A Conn reads only inside Run. It ends, once, at the first of: Close, the
// end of Run's context, the peer closing its output (EOF), a read or write
// error. At the end every pending call fails with an error wrapping
// ErrClosed and the cause, Done is closed, Err reports why, and the reader
// and writer are closed if they are io.Closers (for a child process:
// closing its stdin, the first step of a polite stop).
//
// All methods are safe for concurrent use. A sender that finds the
// connection idle writes its line itself if the writer takes writes that
// cannot block (a pipe or socket in the runtime's poller, as a child's
// stdin is), and hands what does not fit at once to a goroutine of the
// connection; otherwise senders queue their lines and that goroutine
// writes them, whole and in order, many in one Write when they pile up
// (see write.go). So lines never interleave and a sender is never stuck in
// a Write: every send is bounded by its context (Call, the Context
// variants) or by Options.WriteTimeout. A connection whose peer stops
// reading holds only its own senders, never another connection's.
type Conn struct {
	r       io.Reader
	w       io.Writer
	handler func(context.Context, *Message)
	batch   func(context.Context, []byte)
	onError func(error)
	maxLine int
	peer    string

	writeTimeout time.Duration // > 0, or < 0 for none
	flushAtEOF   bool
	raw          *rawWriter    // non-blocking writes to w, if it takes them (inline.go)
	stall        time.Duration // Options.StallTimeout
	stallTimer   *time.Timer   // armed while the writer is in a Write, if stall > 0
	wstate       atomic.Int32  // if stall > 0: wIdle, wWriting or wAbandoned
	tmu          sync.Mutex    // guards timers
	timers       []*time.Timer // stopped, for reuse

	wmu     sync.Mutex // guards wr but for wr.batch
	wr      writer
	done    chan struct{}
	nextID  atomic.Int64
	running atomic.Bool

	mu        sync.Mutex
	pending   map[int64]chan<- result // nil once closed
	err       error                   // why the connection ended; nil while open
	cancelRun context.CancelCauseFunc
	// Goroutines of the connection (its writer, and those waiting for
	// room for its own lines): how many, and a channel closed when none
	// is left, made when someone waits.
	asyncN    int
	asyncIdle chan struct{}
	asyncRuns int // goroutines of goAsync started, ever (for tests)

	invalid, overlong, unknown atomic.Int64
}

// result is what a pending call receives: the response or why there is none.
type result struct {
	msg *Message
	err error
}

// NewConn returns a connection that reads messages from r and writes them
// to w. It does nothing until Run; Call, Notify and the rest may be used
// before Run starts, but no response is read without it.
func NewConn(r io.Reader, w io.Writer, opts Options) *Conn {
	c := &Conn{
		r:       r,
		w:       w,
		handler: opts.Handler,
		batch:   opts.Batch,
		onError: opts.OnError,
		maxLine: opts.MaxLine,
		peer:    opts.PeerName,
		done:    make(chan struct{}),
		pending: make(map[int64]chan<- result),

		writeTimeout: opts.WriteTimeout,
		flushAtEOF:   opts.FlushAtEOF,
	}
	if c.writeTimeout == 0 {
		c.writeTimeout = DefaultWriteTimeout
	}
	c.raw = newRawWriter(w)
	if opts.StallTimeout > 0 {
		c.stall = opts.StallTimeout
		c.stallTimer = time.AfterFunc(time.Hour, c.stalled)
		c.stallTimer.Stop()
	}
	if c.maxLine <= 0 {
		c.maxLine = DefaultMaxLine
	}
	if c.peer == "" {
		c.peer = "peer"
	}
	if c.onError == nil {
		log := opts.Logger
		if log == nil {
			log = slog.Default()
		}
		c.onError = func(err error) { log.Warn("json-rpc protocol error", "peer", c.peer, "err", err) }
	}
	return c
}

var errRunning = errors.New("rpc: Run called twice")

// Run reads and dispatches messages until the connection ends, then
// returns Err(). Responses go to the pending calls; requests and
// notifications go to Options.Handler, whose context is derived from ctx
// and ends with the connection. The end of ctx ends the connection (the
// cause wrapped in the error).
//
// Run returns once its read has returned. Close unblocks that read only if
// the reader is an io.Closer (a pipe is); otherwise Run returns at the
// reader's next EOF or error (for a child's stdout: when the child exits),
// discarding what it reads meanwhile. Run also waits for the connection's
// writer and the goroutines that queue its own lines: they stop writing at
// the end, but a Write in progress returns only when the writer gives up —
// at once if the writer is an io.Closer (a pipe is; it is closed at the
// end), else when the peer reads or fails. With Options.StallTimeout, Run
// does not wait for a Write in progress once the connection has ended.
// Calling Run twice is an error.
func (c *Conn) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errRunning
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c.mu.Lock()
	if c.err != nil {
		cancel(c.err)
	} else {
		c.cancelRun = cancel
	}
	c.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { c.closeWith(context.Cause(ctx)) })
	defer stop()

	c.read(hctx)
	<-c.asyncDone()
	return c.Err()
}

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil while the connection is open, then why it ended: an
// error wrapping ErrClosed and the cause — nothing more after Close, an
// error wrapping io.EOF when the peer closed its output, the read or write
// error, or the cause of Run's context.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection (see Conn) and returns nil. It does not wait
// for Run to return. Closing twice is a no-op.
func (c *Conn) Close() error {
	c.closeWith(nil)
	return nil
}

func (c *Conn) closeWith(cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = &closedError{cause: cause}
	pending := c.pending
	c.pending = nil
	cancel := c.cancelRun
	close(c.done)
	c.mu.Unlock()

	for _, ch := range pending {
		ch <- result{err: c.err}
	}
	if cancel != nil {
		cancel(c.err)
	}
	if rc, ok := c.r.(io.Closer); ok {
		_ = rc.Close()
	}
	if wc, ok := c.w.(io.Closer); ok {
		_ = wc.Close()
	}
	if c.stall > 0 {
		c.abandonWrite()
	}
}

// Stats counts protocol noise since the connection was made.
type Stats struct {
	InvalidLines     int64 // lines that were not JSON-RPC 2.0 messages
	OverlongLines    int64 // lines over the limit, skipped
	UnknownResponses int64 // responses that matched no pending call
}

// Stats returns the connection's noise counters.
func (c *Conn) Stats() Stats {
	return Stats{
		InvalidLines:     c.invalid.Load(),
		OverlongLines:    c.overlong.Load(),
		UnknownResponses: c.unknown.Load(),
	}
}

// Call sends a request and waits for its response. The request gets a
// fresh integer id, unique on this connection (a relay maps the client's
// id to it, and restores the client's id on the response it forwards).
// params is sent as it is (see Message.AppendTo); nil sends none.
//
// A response is returned as it came, with err nil, whether it carries a
// result or an error (msg.Error). err is non-nil only when there is no
// response: the connection ended first (an error wrapping ErrClosed and
// the cause), the response was unreadable (a *DecodeError or a
// *LineTooLongError naming this call's id), or ctx ended first.
//
// Call returns ctx.Err() as soon as ctx ends, whatever the state of its
// request's line: Call never waits in a Write (it writes only what the
// peer's pipe takes at once, and a goroutine of the connection writes the
// rest), so a peer that stops reading cannot hold it past ctx. If ctx ends
// before the line's write has started (waiting for room in a full queue,
// or queued behind other lines), the line is withdrawn and nothing is
// sent. If it ends after, Call forgets the call (a late
// response is reported as an unknown id) and queues for the peer
// notifications/cancelled {requestId, reason}, written after the
// request's line, which the connection's writer finishes whole — except
// for "initialize", which MCP does not allow to be cancelled. If the
// response arrived first, it is returned instead.
func (c *Conn) Call(ctx context.Context, method string, params json.RawMessage) (*Message, error) {
	p, err := c.Start(ctx, method, params)
	if err != nil {
		return nil, err
	}
	m, _, err := p.Wait(ctx, nil)
	return m, err
}

// Waiter is a request sent whose response is yet to be waited for: a
// Pending, or a wrapper of one.
type Waiter interface {
	Wait(ctx context.Context, interrupt <-chan struct{}) (m *Message, interrupted bool, err error)
}

// Pending is a request Start sent, whose response is waited for with
// Wait.
type Pending struct {
	c      *Conn
	id     int64
	ch     chan result
	t      ticket
	method string
}

// Start sends a request and returns it pending: Call, with the wait left
// to the caller — who may stop waiting (Wait's interrupt) and wait again
// later, from another goroutine. ctx bounds the send; each Wait takes the
// ctx that bounds the request.
func (c *Conn) Start(ctx context.Context, method string, params json.RawMessage) (*Pending, error) {
	return c.StartAbort(ctx, nil, method, params)
}

// StartAbort is Start bounded by abort (nil: never) as well as by ctx:
// when abort is closed before the request could be queued, it returns
// context.Canceled.
func (c *Conn) StartAbort(ctx context.Context, abort <-chan struct{}, method string, params json.RawMessage) (*Pending, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if isClosed(abort) {
		return nil, context.Canceled
	}
	id := c.nextID.Add(1)
	ch := make(chan result, 1)
	c.mu.Lock()
	if c.pending == nil {
		c.mu.Unlock()
		return nil, c.Err()
	}
	c.pending[id] = ch
	c.mu.Unlock()

	bp := getBuf()
	b := append(*bp, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":`...)
	b = appendString(b, method)
	if len(params) != 0 {
		b = append(b, `,"params":`...)
		b = appendRaw(b, params)
	}
	b = append(b, "}\n"...)
	t, ok, err := c.inline(bp, b, false)
	if !ok {
		t, err = c.enqueue(nil, ctx.Done(), abort, bp, b, false)
	}
	p := &Pending{c: c, id: id, ch: ch, t: t, method: method}
	if err != nil {
		if !c.forget(id) {
			// Failed meanwhile: the connection ended. Its result waits
			// in ch.
			return p, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if isClosed(abort) {
			return nil, context.Canceled
		}
		return nil, err
	}
	return p, nil
}

// isClosed reports whether ch (nil: never) is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Wait waits for the response of p, bounded by ctx: when ctx ends first
// the request is withdrawn (never sent, if it is still queued) or the peer
// is told it is cancelled, and Wait returns ctx's error. When interrupt
// (nil: never) is closed first, Wait returns with interrupted true and p
// still pending: its response goes to a later Wait. Waits of one Pending
// must not overlap, and none follows one that was not interrupted.
func (p *Pending) Wait(ctx context.Context, interrupt <-chan struct{}) (m *Message, interrupted bool, err error) {
	select {
	case r := <-p.ch:
		return r.msg, false, r.err
	case <-interrupt:
		return nil, true, nil
	case <-ctx.Done():
		m, err = p.end(context.Cause(ctx), ctx.Err())
		return m, false, err
	}
}

// end ends p's wait for a reason of the caller's (cause): withdrawn if
// still queued, else the peer is told, and the wait's error is err — or,
// if the response came meanwhile, it is returned instead.
func (p *Pending) end(cause, err error) (*Message, error) {
	c := p.c
	if !c.forget(p.id) {
		r := <-p.ch
		return r.msg, r.err
	}
	// Still queued: withdrawn, never sent. Else it is being written
	// or was: the peer is told.
	if !c.withdraw(p.t.seq) && p.method != "initialize" {
		c.sendCancelled(p.id, cause)
	}
	return nil, err
}

// CallAbort is Call bounded by abort as well as by ctx: when abort (nil:
// never) is closed first, the request is withdrawn or the peer told,
// with cause's error (nil cause: context.Canceled), and CallAbort returns
// context.Canceled. A caller
// whose requests end for reasons of their own (a timeout, a cancel) needs
// no context derived from ctx per request with it.
func (c *Conn) CallAbort(ctx context.Context, abort <-chan struct{}, cause func() error, method string, params json.RawMessage) (*Message, error) {
	p, err := c.StartAbort(ctx, abort, method, params)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-p.ch:
		return r.msg, r.err
	case <-ctx.Done():
		return p.end(context.Cause(ctx), ctx.Err())
	case <-abort:
		why := error(context.Canceled)
		if cause != nil {
			why = cause()
		}
		return p.end(why, context.Canceled)
	}
}

// forget removes a pending call; false means it was already answered or
// failed, and its result is in its channel.
func (c *Conn) forget(id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[id]; !ok {
		return false
	}
	delete(c.pending, id)
	return true
}

// take removes and returns the pending call with the given raw id.
func (c *Conn) take(rawID []byte) (chan<- result, bool) {
	id, ok := parseOurID(rawID)
	if !ok {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.pending[id]
	if ok {
		delete(c.pending, id)
	}
	return ch, ok
}

// parseOurID reads an id this side could have sent: a positive integer,
// as a number or as a string of digits (some peers echo ids as strings).
func parseOurID(raw []byte) (int64, bool) {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		raw = raw[1 : len(raw)-1]
	}
	if len(raw) == 0 || len(raw) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range raw {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func (c *Conn) sendCancelled(id int64, cause error) {
	b := append([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`), strconv.AppendInt(nil, id, 10)...)
	if cause != nil {
		b = append(b, `,"reason":`...)
		b = appendString(b, cause.Error())
	}
	b = append(b, "}}\n"...)
	c.post("cancellation of request", strconv.AppendInt(nil, id, 10), b)
}

// Flush waits until the connection's writer has nothing left to write —
// every line queued (cancellation notices and automatic error replies
// included) written, withdrawn, or dropped at the end of the connection —
// or ctx ends (ctx.Err()). A relay calls it before closing the stream, so
// that a cancellation it has just sent is not lost to the close.
func (c *Conn) Flush(ctx context.Context) error {
	select {
	case <-c.asyncDone():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// goAsync runs f on a goroutine of its own that Run and Flush wait for,
// unless the connection has ended (false).
func (c *Conn) goAsync(f func()) bool {
	if !c.asyncBegin() {
		return false
	}
	go c.runAsync(f)
	return true
}

// asyncBegin counts a goroutine of the connection about to start, unless
// the connection has ended (false). Counted under mu, so that none starts
// after the end, once Run may be waiting.
func (c *Conn) asyncBegin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	c.asyncN++
	c.asyncRuns++
	return true
}

func (c *Conn) runAsync(f func()) {
	defer c.asyncEnd()
	f()
}

// asyncEnd counts the end of a goroutine of goAsync.
func (c *Conn) asyncEnd() {
	c.mu.Lock()
	if c.asyncN--; c.asyncN == 0 && c.asyncIdle != nil {
		close(c.asyncIdle)
		c.asyncIdle = nil
	}
	c.mu.Unlock()
}

// asyncDone is closed once no goroutine of goAsync is left.
func (c *Conn) asyncDone() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asyncN == 0 {
		return closedChan
	}
	if c.asyncIdle == nil {
		c.asyncIdle = make(chan struct{})
	}
	return c.asyncIdle
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Notify sends a notification. It returns once the line is written, or
// the connection has ended (an error wrapping ErrClosed), or
// Options.WriteTimeout has passed (an error wrapping ErrWriteTimeout; see
// Options.WriteTimeout for what becomes of the line).
func (c *Conn) Notify(method string, params json.RawMessage) error {
	return c.Write(&Message{Method: method, Params: params})
}

// NotifyContext is Notify bounded by ctx instead of Options.WriteTimeout:
// when ctx ends first it returns an error wrapping ctx.Err(), having
// withdrawn the line if its write had not started (nothing is sent) or
// left it to the connection's writer, which finishes it, if it had. An
// ended ctx sends nothing and returns ctx.Err().
func (c *Conn) NotifyContext(ctx context.Context, method string, params json.RawMessage) error {
	return c.WriteContext(ctx, &Message{Method: method, Params: params})
}

// Reply answers the peer's request id with result (nil sends {}). It is
// bounded like Notify.
func (c *Conn) Reply(id, result json.RawMessage) error {
	if len(id) == 0 {
		return errors.New("rpc: Reply needs the request's id")
	}
	return c.Write(&Message{ID: id, Result: result})
}

// ReplyContext is Reply bounded by ctx, like NotifyContext.
func (c *Conn) ReplyContext(ctx context.Context, id, result json.RawMessage) error {
	if len(id) == 0 {
		return errors.New("rpc: Reply needs the request's id")
	}
	return c.WriteContext(ctx, &Message{ID: id, Result: result})
}

// ReplyError answers the peer's request id with an error; data may be nil.
// It is bounded like Notify.
func (c *Conn) ReplyError(id json.RawMessage, code int, message string, data json.RawMessage) error {
	if len(id) == 0 {
		return errors.New("rpc: ReplyError needs the request's id")
	}
	return c.Write(&Message{ID: id, Error: &Error{Code: code, Message: message, Data: data}})
}

// ReplyErrorContext is ReplyError bounded by ctx, like NotifyContext.
func (c *Conn) ReplyErrorContext(ctx context.Context, id json.RawMessage, code int, message string, data json.RawMessage) error {
	if len(id) == 0 {
		return errors.New("rpc: ReplyError needs the request's id")
	}
	return c.WriteContext(ctx, &Message{ID: id, Error: &Error{Code: code, Message: message, Data: data}})
}

// Write sends m as it is (see Message.AppendTo): a relay forwards a
// response by setting its ID back to the client's and writing it. m must
// have a method or an id. Write returns once the line is written, or the
// connection has ended (an error wrapping ErrClosed), or
// Options.WriteTimeout has passed (an error wrapping ErrWriteTimeout: the
// line is withdrawn if its write had not started, else finished by the
// connection's writer). A write error ends the connection.
func (c *Conn) Write(m *Message) error {
	if m.Method == "" && len(m.ID) == 0 {
		return errNoMethodNorID
	}
	return c.write(nil, m, c.timeoutErr)
}

// Post queues m for the peer and returns at once, as the connection
// queues its own automatic error replies: the line is written in order
// with the rest, unless the connection ends first; if the queue is full,
// a goroutine of the connection waits for room, at most WriteTimeout, and
// a line that finds none is dropped and reported to OnError. Unlike
// Write, it can be called on the read goroutine (a Handler) without
// waiting for the peer, and with Options.FlushAtEOF the peer's EOF waits
// for what was posted before it.
func (c *Conn) Post(m *Message) error {
	if m.Method == "" && len(m.ID) == 0 {
		return errNoMethodNorID
	}
	c.post("reply", m.ID, append(m.AppendTo(nil), '\n'))
	return nil
}

// WriteContext is Write bounded by ctx instead of Options.WriteTimeout,
// like NotifyContext.
func (c *Conn) WriteContext(ctx context.Context, m *Message) error {
	if m.Method == "" && len(m.ID) == 0 {
		return errNoMethodNorID
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.write(ctx.Done(), m, ctx.Err)
}

var errNoMethodNorID = errors.New("rpc: message has neither a method nor an id")

// WriteRaw sends v, one JSON value, as a line as it is — the array that
// answers a batch (Options.Batch) — bounded as Write is. v must not hold
// a newline (compact JSON never does).
func (c *Conn) WriteRaw(v json.RawMessage) error {
	if len(bytes.TrimSpace(v)) == 0 {
		return errors.New("rpc: WriteRaw of an empty value")
	}
	if bytes.IndexByte(v, '\n') >= 0 {
		return errors.New("rpc: WriteRaw of a value that spans lines")
	}
	bp := getBuf()
	return c.writeBuf(nil, bp, append(append(*bp, v...), '\n'), c.timeoutErr)
}

// write sends m and waits until it is written, the connection ends, or
// done is ready — or, if done is nil, Options.WriteTimeout passes (unless
// it is negative); then the error wraps cause(). The timer for the write
// timeout is taken only if the line is not written at once.
func (c *Conn) write(done <-chan struct{}, m *Message, cause func() error) error {
	bp := getBuf()
	return c.writeBuf(done, bp, append(m.AppendTo(*bp), '\n'), cause)
}

// writeBuf is write of the line b, in the pooled buffer bp.
func (c *Conn) writeBuf(done <-chan struct{}, bp *[]byte, b []byte, cause func() error) error {
	t, ok, err := c.inline(bp, b, true)
	if err != nil || (ok && t.flushed == closedChan) {
		return err
	}
	var stop <-chan time.Time
	if done == nil && c.writeTimeout > 0 {
		tm := c.timer()
		defer c.putTimer(tm)
		stop = tm.C
	}
	if !ok {
		if t, err = c.enqueue(stop, done, nil, bp, b, true); err != nil {
			return c.writeErr(err, cause)
		}
	}
	return c.writeErr(c.await(t, stop, done), cause)
}

// writeErr turns the stops of write side into the errors of senders.
func (c *Conn) writeErr(err error, cause func() error) error {
	switch err {
	case errStopped:
		return &writeError{peer: c.peer, cause: cause()}
	case errInFlight:
		return &writeError{peer: c.peer, cause: cause(), started: true}
	}
	return err
}

// timeoutErr is the cause of a send that Options.WriteTimeout stopped.
func (c *Conn) timeoutErr() error {
	return fmt.Errorf("%w after %v", ErrWriteTimeout, c.writeTimeout)
}

// read is the read loop.
func (c *Conn) read(ctx context.Context) {
	lr := newLineReader(c.r, c.maxLine)
	for {
		line, owned, over, err := lr.next()
		select {
		case <-c.done:
			if err != nil {
				return
			}
			continue // ended: drain until the reader gives up
		default:
		}
		switch {
		case err == io.EOF:
			if c.flushAtEOF {
				c.awaitQueued()
			}
			c.closeWith(fmt.Errorf("%s closed its output: %w", c.peer, err))
			return
		case err != nil:
			c.closeWith(fmt.Errorf("reading from %s: %w", c.peer, err))
			return
		case over != nil:
			c.overlong.Add(1)
			c.skipped(over)
		default:
			c.dispatch(ctx, line, owned)
		}
	}
}

// dispatch handles one line.
func (c *Conn) dispatch(ctx context.Context, line []byte, owned bool) {
	if len(bytes.TrimLeft(line, " \t\r\n")) == 0 {
		return
	}
	if c.batch != nil && bytes.TrimLeft(line, " \t\r\n")[0] == '[' {
		if !owned {
			line = bytes.Clone(line)
		}
		c.batch(ctx, line)
		return
	}
	env, derr := parseEnvelope(line)
	if derr != nil {
		c.invalid.Add(1)
		c.undeliverable(derr.ID, derr.Request, derr.Code, derr.Reason, derr)
		return
	}
	if !owned {
		line = bytes.Clone(line) // the one copy: the message owns its bytes
	}
	m := env.message(line)
	switch {
	case m.IsResponse():
		ch, ok := c.take(m.ID)
		if !ok {
			c.unknown.Add(1)
			c.onError(fmt.Errorf("%w %s from %s", ErrUnknownID, m.ID, c.peer))
			return
		}
		ch <- result{msg: m}
	case c.handler != nil:
		c.handler(ctx, m)
	case m.IsRequest():
		c.post("error reply to request", m.ID, errorLine(m.ID, MethodNotFound, "method not found: "+m.Method))
	}
}

// skipped handles a line over the limit.
func (c *Conn) skipped(over *overlong) {
	id, req := over.id, over.request
	kind := "line"
	switch {
	case req:
		kind = "request"
	case over.response || id != nil:
		kind = "response"
	}
	err := &LineTooLongError{Kind: kind, Peer: c.peer, Limit: c.maxLine, Size: over.size, ID: id}
	c.undeliverable(id, req, InvalidRequest, "request exceeds "+byteSize(c.maxLine)+" line limit", err)
}

// undeliverable deals with a line that cannot be delivered as a message:
// err goes to OnError; then, if the line names one of our pending calls,
// that call fails with err, and if it is a request of the peer's, the peer
// gets an error reply (code, msg). Reporting first means that whoever sees
// the failure or the reply can count on the report having been made.
func (c *Conn) undeliverable(id []byte, request bool, code int, msg string, err error) {
	c.onError(err)
	switch {
	case id == nil:
	case request:
		if id[0] != 'n' {
			c.post("error reply to request", id, errorLine(id, code, msg))
		}
	default:
		if ch, ok := c.take(id); ok {
			ch <- result{err: err}
		}
	}
}

func errorLine(id []byte, code int, msg string) []byte {
	m := Message{ID: id, Error: &Error{Code: code, Message: msg}}
	return append(m.AppendTo(nil), '\n')
}

// Write buffers: a pool of line buffers; big ones are not kept.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(bp *[]byte, b []byte) {
	if cap(b) > 1<<20 {
		return
	}
	*bp = b[:0]
	bufPool.Put(bp)
}
