package link

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Transport is the sending side: an http.RoundTripper that relays each
// request over the link to the peer its URL's host names, one kept
// connection per peer, dialed on first use.
type Transport struct {
	// Dial connects to a peer: a connection ready for frames (its TLS
	// handshake done, Proto negotiated), or an error. It must bound
	// itself: its context does not end when the request that caused it
	// does (others may wait on the same dial).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Answer answers the peer's question (Server's Ask) of kind; nil
	// answers every question with nothing. It runs on the connection's
	// read loop: it must not block.
	Answer func(kind byte, question []byte) []byte
	// WriteTimeout bounds one write (10 s if zero); PingInterval is how
	// often a connection with streams open and nothing read is pinged
	// (10 s if zero): one that reads nothing for two intervals more is
	// dead. IdleTimeout closes a connection without streams (90 s if
	// zero).
	WriteTimeout, PingInterval, IdleTimeout time.Duration

	mu      sync.Mutex
	conns   map[string]*clientConn // the one new streams go to, per peer
	dialing map[string]*dial
	all     map[*clientConn]struct{} // every open one, retired or not
	closed  bool
	wg      sync.WaitGroup
}

type dial struct {
	done chan struct{}
	err  error
}

func (t *Transport) writeTimeout() time.Duration {
	return orDefault(t.WriteTimeout, defaultWriteTimeout)
}
func (t *Transport) pingInterval() time.Duration { return orDefault(t.PingInterval, 10*time.Second) }
func (t *Transport) idleTimeout() time.Duration  { return orDefault(t.IdleTimeout, 90*time.Second) }

// orDefault is v when set (positive), else def.
func orDefault[T ~int | ~int64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// defaultWriteTimeout bounds one write when none is set.
const defaultWriteTimeout = 10 * time.Second

var errTransportClosed = errors.New("link: the transport is closed")

// conn is the connection new streams to addr go to, dialed if need be.
func (t *Transport) conn(ctx context.Context, addr string) (*clientConn, error) {
	t.mu.Lock()
	for {
		if t.closed {
			t.mu.Unlock()
			return nil, errTransportClosed
		}
		if c := t.conns[addr]; c != nil {
			t.mu.Unlock()
			return c, nil
		}
		d := t.dialing[addr]
		if d == nil {
			break
		}
		t.mu.Unlock()
		select {
		case <-d.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if d.err != nil {
			return nil, d.err
		}
		t.mu.Lock()
	}
	if t.conns == nil {
		t.conns, t.dialing, t.all = map[string]*clientConn{}, map[string]*dial{}, map[*clientConn]struct{}{}
	}
	d := &dial{done: make(chan struct{})}
	t.dialing[addr] = d
	t.mu.Unlock()

	// The dial is every waiter's, not the first caller's alone: its end
	// does not end the dial, which Dial bounds itself.
	nc, err := t.Dial(context.WithoutCancel(ctx), addr)
	t.mu.Lock()
	delete(t.dialing, addr)
	if err == nil && t.closed {
		nc.Close()
		err = errTransportClosed
	}
	if err != nil {
		d.err = err
		t.mu.Unlock()
		close(d.done)
		return nil, err
	}
	c := &clientConn{t: t, addr: addr, nc: nc, streams: map[uint32]*cstream{}, next: 1, done: make(chan struct{})}
	c.w = writer{conn: nc, timeout: t.writeTimeout(), fail: c.fail}
	c.lastRead.Store(time.Now().UnixNano())
	c.idleSince = time.Now()
	t.conns[addr] = c
	t.all[c] = struct{}{}
	t.wg.Add(2)
	t.mu.Unlock()
	close(d.done)
	go c.readLoop()
	go c.keepalive()
	return c, nil
}

// forget takes c out of the transport (it ended).
func (t *Transport) forget(c *clientConn) {
	t.mu.Lock()
	if t.conns[c.addr] == c {
		delete(t.conns, c.addr)
	}
	delete(t.all, c)
	t.mu.Unlock()
}

// retire makes c take no new stream.
func (t *Transport) retire(c *clientConn) {
	t.mu.Lock()
	if t.conns[c.addr] == c {
		delete(t.conns, c.addr)
	}
	t.mu.Unlock()
}

// Retire makes every connection open take no new stream and close once
// its streams end: what is sent next goes over a new connection (one
// made under new keys).
func (t *Transport) Retire() {
	t.mu.Lock()
	cs := slices.Collect(maps.Keys(t.all))
	clear(t.conns)
	t.mu.Unlock()
	for _, c := range cs {
		c.retire()
	}
}

// spawn runs f in a goroutine Close waits for, and reports true; once
// Close has begun it runs nothing and reports false (a goroutine counted
// after Close's wait began could outlive it).
func (t *Transport) spawn(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

// Close ends every connection (their streams fail) and waits for their
// goroutines.
func (t *Transport) Close() {
	t.mu.Lock()
	t.closed = true
	cs := slices.Collect(maps.Keys(t.all))
	t.mu.Unlock()
	for _, c := range cs {
		c.fail(errTransportClosed)
	}
	t.wg.Wait()
}

// RoundTrip relays req to the peer at req.URL.Host. A stream refused
// unserved — its connection retired as it opened, or the peer, shutting
// down, refusing it — is sent once more over a new connection when the
// whole body was in its first piece: nothing of it ran, and it is all
// still here.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if err := checkHead(req.Header); err != nil {
		closeBody(req)
		return nil, err
	}
	// The body: whole in the first write when it is small (the usual
	// request), else its first piece, and the rest streamed.
	var first []byte
	end := req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0
	if !end {
		bp := chunkBufs.Get().(*[]byte)
		defer chunkBufs.Put(bp)
		var err error
		if first, end, err = readChunk(req.Body, (*bp)[:0]); err != nil {
			closeBody(req)
			return nil, fmt.Errorf("link: reading the request body: %w", err)
		}
	}
	for attempt := 0; ; attempt++ {
		resp, streaming, err := t.roundTrip(ctx, req, first, end)
		if errors.Is(err, ErrRefused) && !streaming && attempt == 0 && ctx.Err() == nil {
			continue
		}
		if !streaming {
			closeBody(req)
		}
		return resp, err
	}
}

// roundTrip sends req's head and first (the body's first piece; end: the
// whole body) on a new stream and waits for the answer's head. streaming
// says a goroutine took req.Body to send its rest (and closes it): the
// request cannot be sent again.
func (t *Transport) roundTrip(ctx context.Context, req *http.Request, first []byte, end bool) (*http.Response, bool, error) {
	c, err := t.conn(ctx, req.URL.Host)
	if err != nil {
		return nil, false, err
	}
	st, err := c.open(ctx)
	if err != nil {
		return nil, false, err
	}
	if len(first) > 0 {
		_, _ = st.send.take(ctx, len(first)) // within the window: no wait
	}
	flags := byte(0)
	if end && len(first) == 0 {
		flags = flagEnd
	}
	err = c.w.send(false, func(b []byte) []byte {
		b = appendFrameWith(b, fHeaders, flags, st.id, func(b []byte) []byte { return appendRequestHead(b, req) })
		if len(first) > 0 {
			f := byte(0)
			if end {
				f = flagEnd
			}
			b = appendFrame(b, fData, f, st.id, first)
		}
		return b
	})
	if err != nil {
		st.finish(err, false)
		return nil, false, err
	}
	streaming := false
	if !end {
		streaming = true
		if !t.spawn(func() { st.sendBody(req.Body) }) {
			closeBody(req) // closed meanwhile: the stream fails with its connection
		}
	}
	select {
	case <-st.head:
	case <-ctx.Done():
		st.finish(context.Cause(ctx), true)
		<-st.head
	}
	if st.headErr != nil {
		return nil, streaming, st.headErr
	}
	resp := &http.Response{Status: strconv.Itoa(st.status) + " " + http.StatusText(st.status), StatusCode: st.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: st.header, Body: st, ContentLength: -1, Request: req}
	if v := st.header.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			resp.ContentLength = n
		}
	}
	return resp, streaming, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// readChunk reads into b's room (up to cap(b) bytes) from r: what it
// read and whether r ended.
func readChunk(r io.Reader, b []byte) ([]byte, bool, error) {
	for len(b) < cap(b) {
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err == io.EOF {
			return b, true, nil
		}
		if err != nil {
			return b, false, err
		}
	}
	return b, false, nil
}

// chunkBufs hold a request body's first piece until it is queued (the
// writer copies it).
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, dataChunk); return &b }}

// clientConn is one connection to a peer.
type clientConn struct {
	t    *Transport
	addr string
	nc   net.Conn
	w    writer

	mu        sync.Mutex
	streams   map[uint32]*cstream
	next      uint32
	retired   bool // takes no new stream; closes when it has none
	idleSince time.Time
	err       error // why it ended
	done      chan struct{}

	lastRead atomic.Int64 // unix nanoseconds of the last frame read
	closing  atomic.Bool  // closeDrained is under way
}

var errConnRetired = errors.New("link: connection retired")

// maxStreamID is the last stream id a connection uses.
const maxStreamID = 1<<31 - 1

// open makes a new stream.
func (c *clientConn) open(ctx context.Context) (*cstream, error) {
	c.mu.Lock()
	if c.err != nil || c.retired {
		err := c.err
		c.mu.Unlock()
		// Nothing was sent: the next try goes over another connection.
		if err == nil {
			return nil, fmt.Errorf("%w: its connection was retired as it opened", ErrRefused)
		}
		return nil, fmt.Errorf("%w: its connection ended as it opened (%v)", ErrRefused, err)
	}
	if c.next > maxStreamID {
		// Ids are never used twice on a connection: a new one takes
		// the next streams.
		c.mu.Unlock()
		c.retire()
		return nil, fmt.Errorf("%w: the connection used all its stream ids", ErrRefused)
	}
	if len(c.streams) == 0 {
		// Quiet while idle is no sign of a dead peer: count from now.
		c.lastRead.Store(time.Now().UnixNano())
	}
	id := c.next
	c.next += 2
	st := &cstream{c: c, id: id, head: make(chan struct{}), send: newCredit(), done: make(chan struct{})}
	st.body = newPipe(st.done, st.doneErr, st.giveWindow)
	c.streams[id] = st
	c.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { st.finish(context.Cause(ctx), true) })
	st.mu.Lock()
	st.stop = stop
	st.mu.Unlock()
	return st, nil
}

// drop takes a finished stream out.
func (c *clientConn) drop(st *cstream) {
	c.mu.Lock()
	delete(c.streams, st.id)
	closeNow := c.retired && len(c.streams) == 0 && c.err == nil
	if len(c.streams) == 0 {
		c.idleSince = time.Now()
	}
	c.mu.Unlock()
	if closeNow {
		c.closeDrained()
	}
}

// closeDrained closes a retired connection once what is queued on it —
// an answer to a question, a window — is written, within the write
// timeout.
func (c *clientConn) closeDrained() {
	if c.closing.Swap(true) {
		return // under way
	}
	if !c.t.spawn(func() {
		c.w.drained(c.t.writeTimeout())
		c.fail(errConnRetired)
	}) {
		c.fail(errConnRetired) // the transport closed: no wait
	}
}

func (c *clientConn) stream(id uint32) *cstream {
	c.mu.Lock()
	st := c.streams[id]
	c.mu.Unlock()
	return st
}

// retire takes no new stream and closes once none is open.
func (c *clientConn) retire() {
	c.t.retire(c)
	c.mu.Lock()
	c.retired = true
	closeNow := len(c.streams) == 0 && c.err == nil
	c.mu.Unlock()
	if closeNow {
		c.closeDrained()
	}
}

// fail ends the connection: every open stream fails with err.
func (c *clientConn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	sts := slices.Collect(maps.Values(c.streams))
	clear(c.streams)
	c.mu.Unlock()
	c.t.forget(c)
	c.w.failed(err)
	c.nc.Close()
	close(c.done)
	for _, st := range sts {
		st.finish(fmt.Errorf("link to %s: %w", c.addr, err), false)
	}
}

func (c *clientConn) readLoop() {
	defer c.t.wg.Done()
	fr := frameReader{r: bufio.NewReaderSize(c.nc, 64<<10)}
	for {
		f, err := fr.read()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			c.fail(err)
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		if err := c.handle(f); err != nil {
			c.fail(err)
			return
		}
	}
}

func (c *clientConn) handle(f frame) error {
	switch f.typ {
	case fResponse:
		st := c.stream(f.stream)
		if st == nil {
			return nil // reset here; the peer had not heard
		}
		status, h, err := decodeResponseHead(f.payload)
		if err != nil {
			return err
		}
		st.gotHead(status, h, nil)
		if f.flags&flagEnd != 0 {
			st.body.close(io.EOF)
			st.ended()
		}
	case fData:
		st := c.stream(f.stream)
		if st == nil {
			return nil
		}
		select {
		case <-st.head:
		default:
			return fmt.Errorf("%w: stream %d's body came before its head", errProtocol, f.stream)
		}
		if !st.body.write(f.payload) {
			return fmt.Errorf("%w: stream %d overflowed its window", errProtocol, f.stream)
		}
		if f.flags&flagEnd != 0 {
			st.body.close(io.EOF)
			st.ended()
		}
	case fReset:
		if len(f.payload) < 4 {
			return fmt.Errorf("%w: a short reset", errProtocol)
		}
		st := c.stream(f.stream)
		if st == nil {
			return nil
		}
		code := binary.BigEndian.Uint32(f.payload)
		var err error
		switch code {
		case resetRefused:
			// The peer takes no new stream here (it shuts down, or has
			// too many): the next goes over a new connection.
			c.retire()
			err = fmt.Errorf("%w (%s)", ErrRefused, f.payload[4:])
		default:
			err = fmt.Errorf("link: the peer ended the stream: %s", f.payload[4:])
		}
		st.finish(err, false)
	case fWindow:
		var send *credit
		if st := c.stream(f.stream); st != nil {
			send = st.send
		}
		return giveCredit(f, send)
	case fAsk:
		if len(f.payload) < 5 {
			return fmt.Errorf("%w: a short question", errProtocol)
		}
		id, kind := f.payload[:4], f.payload[4]
		var answer []byte
		if c.t.Answer != nil {
			answer = c.t.Answer(kind, f.payload[5:])
		}
		_ = c.w.send(true, func(b []byte) []byte { return appendFrame(b, fAnswer, 0, 0, id, answer) })
	case fGoaway:
		c.retire()
	case fPong:
	default:
		return fmt.Errorf("%w: frame type %d", errProtocol, f.typ)
	}
	return nil
}

// keepalive pings a connection that has streams open and reads nothing,
// ends one that then reads nothing for two intervals more, and closes
// one without streams for IdleTimeout.
func (c *clientConn) keepalive() {
	defer c.t.wg.Done()
	every := c.t.pingInterval()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return
		case now := <-tick.C:
			c.mu.Lock()
			open, idleSince := len(c.streams), c.idleSince
			idle := open == 0 && now.Sub(idleSince) >= c.t.idleTimeout()
			if idle {
				c.retired = true // no stream opens between this and the close
			}
			c.mu.Unlock()
			if idle {
				c.t.retire(c)
				c.fail(errors.New("link: idle"))
				return
			}
			if open == 0 {
				continue
			}
			quiet := now.Sub(time.Unix(0, c.lastRead.Load()))
			if quiet >= 3*every {
				c.fail(fmt.Errorf("link: the peer answered nothing for %v", quiet.Round(time.Millisecond)))
				return
			}
			if quiet >= every {
				_ = c.w.send(true, func(b []byte) []byte { return appendFrame(b, fPing, 0, 0, make([]byte, 8)) })
			}
		}
	}
}

// cstream is one request relayed and its answer.
type cstream struct {
	c    *clientConn
	id   uint32
	send *credit // the request body's window
	body *pipe   // the answer's body
	stop func() bool

	once    sync.Once
	head    chan struct{} // closed once the answer's head or the failure is known
	status  int
	header  http.Header
	headErr error

	mu   sync.Mutex
	err  error         // why it ended, if it did
	done chan struct{} // closed when it ended
}

func (st *cstream) gotHead(status int, h http.Header, err error) {
	st.once.Do(func() {
		st.status, st.header, st.headErr = status, h, err
		close(st.head)
	})
}

func (st *cstream) doneErr() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err
}

// ended: the answer came whole.
func (st *cstream) ended() {
	st.mu.Lock()
	if st.err == nil {
		st.err = io.EOF
		close(st.done)
	}
	stop := st.stop
	st.mu.Unlock()
	if stop != nil {
		stop()
	}
	st.c.drop(st)
}

// finish ends the stream unfinished with err, resetting it at the peer
// if reset (this side gave up on it).
func (st *cstream) finish(err error, reset bool) {
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		return
	}
	st.err = err
	close(st.done)
	stop := st.stop
	st.mu.Unlock()
	if stop != nil {
		stop()
	}
	st.gotHead(0, nil, err)
	st.body.abort(err)
	st.c.drop(st)
	if reset {
		msg := []byte("cancelled")
		_ = st.c.w.send(true, func(b []byte) []byte { return appendFrame(b, fReset, 0, st.id, u32(resetCancel), msg) })
	}
}

func (st *cstream) giveWindow(n int) {
	select {
	case <-st.done:
		return
	default:
	}
	_ = st.c.w.send(false, func(b []byte) []byte { return appendWindow(b, st.id, n) })
}

// Read reads the answer's body.
func (st *cstream) Read(b []byte) (int, error) { return st.body.Read(b) }

var errAnswerClosed = errors.New("link: the answer's body was closed")

// Close abandons what is left of the answer.
func (st *cstream) Close() error {
	st.finish(errAnswerClosed, true)
	return nil
}

// sendBody streams the rest of a request body, within the window, until
// it ends or the stream does.
func (st *cstream) sendBody(body io.ReadCloser) {
	defer body.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-st.done:
			cancel()
			body.Close() // unblocks a read
		case <-ctx.Done():
		}
	}()
	buf := make([]byte, dataChunk)
	for {
		n, rerr := body.Read(buf)
		p := buf[:n]
		for len(p) > 0 || rerr == io.EOF {
			m := 0
			if len(p) > 0 {
				var err error
				if m, err = st.send.take(ctx, len(p)); err != nil {
					return
				}
			}
			flags := byte(0)
			if rerr == io.EOF && m == len(p) {
				flags = flagEnd
			}
			chunk := p[:m]
			if err := st.c.w.send(false, func(b []byte) []byte { return appendFrame(b, fData, flags, st.id, chunk) }); err != nil {
				return
			}
			p = p[m:]
			if flags == flagEnd {
				return
			}
		}
		if rerr != nil {
			st.finish(fmt.Errorf("link: reading the request body: %w", rerr), true)
			return
		}
	}
}
