package link

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is the serving side: it serves the streams of the connections
// given to ServeConn with Handler.
type Server struct {
	Handler http.Handler
	Log     *slog.Logger
	// WriteTimeout bounds one write (10 s if zero).
	WriteTimeout time.Duration
	// MaxStreams bounds the streams open on one connection (1024 if
	// zero); one more is refused unserved.
	MaxStreams int

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	shutdown bool
	idle     chan struct{} // made by the shutdown; closed once no connection is left
}

// ServeConn serves nc until it ends, and returns once the handlers of
// its streams have returned.
func (s *Server) ServeConn(nc net.Conn) {
	c := &serverConn{s: s, nc: nc, streams: map[uint32]*sstream{}, asks: map[uint32]chan []byte{}}
	c.peer = &Peer{c: c}
	c.remote = nc.RemoteAddr().String()
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	// What every request's context carries, set once for the connection.
	c.ctx = context.WithValue(context.WithValue(c.ctx, peerKey{}, c.peer), http.LocalAddrContextKey, nc.LocalAddr())
	c.w = writer{conn: nc, timeout: orDefault(s.WriteTimeout, defaultWriteTimeout), fail: c.end}
	if tc, ok := nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		c.tls = &st
	}
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if s.conns == nil {
		s.conns = map[*serverConn]struct{}{}
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.idleIfDoneLocked()
		s.mu.Unlock()
	}()
	err := c.readLoop()
	c.end(err)
	c.mu.Lock()
	sts := slices.Collect(maps.Values(c.streams))
	c.mu.Unlock()
	for _, st := range sts {
		st.body.abort(err)
	}
	c.handlers.Wait()
}

// Shutdown refuses new streams on every connection, waits within ctx for
// the open ones to end, then closes the connections.
func (s *Server) Shutdown(ctx context.Context) {
	conns, idle := s.stop()
	for _, c := range conns {
		c.goaway()
	}
	select {
	case <-idle:
	case <-ctx.Done():
		s.Close()
	}
}

var errServerClosed = errors.New("link: the server closed")

// Close ends every connection; their handlers' contexts end.
func (s *Server) Close() {
	conns, _ := s.stop()
	for _, c := range conns {
		c.end(errServerClosed)
	}
}

// stop takes no new connection and returns those open, and a channel
// closed once none is left.
func (s *Server) stop() ([]*serverConn, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown = true
	if s.idle == nil {
		s.idle = make(chan struct{})
		s.idleIfDoneLocked()
	}
	return slices.Collect(maps.Keys(s.conns)), s.idle
}

// idleIfDoneLocked closes idle once the server is shut down with no
// connection left; s.mu is held.
func (s *Server) idleIfDoneLocked() {
	if s.idle == nil || len(s.conns) > 0 {
		return
	}
	select {
	case <-s.idle:
	default:
		close(s.idle)
	}
}

type serverConn struct {
	s      *Server
	nc     net.Conn
	tls    *tls.ConnectionState
	w      writer
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	streams  map[uint32]*sstream
	closing  bool // goaway sent: no new stream
	asks     map[uint32]chan []byte
	nextAsk  uint32
	handlers sync.WaitGroup
	sentOnce sync.Once // closeWhenSent's
	peer     *Peer     // the one Peer of the connection's requests
	remote   string    // the peer's address, as requests show it
}

// goaway refuses new streams, and closes the connection when none is
// open.
func (c *serverConn) goaway() {
	c.mu.Lock()
	c.closing = true
	idle := len(c.streams) == 0
	c.mu.Unlock()
	_ = c.w.send(true, func(b []byte) []byte { return appendFrame(b, fGoaway, 0, 0) })
	if idle {
		c.closeWhenSent()
	}
}

// end ends the connection: the writer first (a handler that returns as
// its context ends must not send its answer's end, as if the answer were
// whole), then the handlers' contexts, then the socket, which ends the
// read loop and so ServeConn.
func (c *serverConn) end(err error) {
	c.w.failed(err)
	c.cancel(err)
	c.nc.Close()
}

var errShutDown = errors.New("link: shut down")

// closeWhenSent closes the connection, once, when what is queued — the
// goaway, the last stream's end — is written, within the write timeout.
// Its goroutine ends with the connection, which ServeConn waits for.
func (c *serverConn) closeWhenSent() {
	c.sentOnce.Do(func() {
		go func() {
			c.w.drained(c.w.timeout)
			c.end(errShutDown)
		}()
	})
}

func (c *serverConn) readLoop() error {
	fr := frameReader{r: bufio.NewReaderSize(c.nc, 64<<10)}
	for {
		f, err := fr.read()
		if err != nil {
			return err
		}
		if err := c.handle(f); err != nil {
			if c.s.Log != nil {
				c.s.Log.Warn("link: a peer broke the protocol; its connection ends", "peer", c.remote, "err", err)
			}
			return err
		}
	}
}

func (c *serverConn) stream(id uint32) *sstream {
	c.mu.Lock()
	st := c.streams[id]
	c.mu.Unlock()
	return st
}

func (c *serverConn) handle(f frame) error {
	switch f.typ {
	case fHeaders:
		// Decoded before the lock, which every frame's lookup takes.
		head, err := decodeRequestHead(f.payload)
		c.mu.Lock()
		// Ids are the client's, odd, each used once (their heads may
		// come out of order: each caller writes its own).
		if _, open := c.streams[f.stream]; open || f.stream%2 == 0 {
			c.mu.Unlock()
			return fmt.Errorf("%w: stream %d opened twice, or even", errProtocol, f.stream)
		}
		if err != nil {
			// The frame is whole: only its request is refused, not the
			// other streams of the connection (its data frames, if any,
			// find no stream and are dropped).
			c.mu.Unlock()
			c.reset(f.stream, resetFailed, "a request head this replica does not take: "+err.Error())
			return nil
		}
		if c.closing || len(c.streams) >= orDefault(c.s.MaxStreams, 1024) {
			why := "it is shutting down"
			if !c.closing {
				why = "it has as many streams open on this connection as it takes"
			}
			c.mu.Unlock()
			c.reset(f.stream, resetRefused, why)
			return nil
		}
		st := &sstream{c: c, id: f.stream, send: newCredit()}
		st.ctx, st.cancel = context.WithCancelCause(c.ctx)
		st.body = newPipe(st.ctx.Done(), func() error { return context.Cause(st.ctx) }, st.giveWindow)
		if f.flags&flagEnd != 0 {
			st.body.close(io.EOF)
		}
		c.streams[f.stream] = st
		c.handlers.Add(1)
		c.mu.Unlock()
		go st.serve(head)
	case fData:
		st := c.stream(f.stream)
		if st == nil {
			return nil // answered already; the rest of its body is not wanted
		}
		if !st.body.write(f.payload) {
			return fmt.Errorf("%w: stream %d overflowed its window", errProtocol, f.stream)
		}
		if f.flags&flagEnd != 0 {
			st.body.close(io.EOF)
		}
	case fReset:
		if st := c.stream(f.stream); st != nil {
			st.cancel(errors.New("link: the client ended the stream"))
			st.body.abort(errors.New("link: the client ended the stream"))
		}
	case fWindow:
		var send *credit
		if st := c.stream(f.stream); st != nil {
			send = st.send
		}
		return giveCredit(f, send)
	case fAnswer:
		if len(f.payload) < 4 {
			return fmt.Errorf("%w: a short answer", errProtocol)
		}
		id := binary.BigEndian.Uint32(f.payload)
		c.mu.Lock()
		ch := c.asks[id]
		delete(c.asks, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- append([]byte(nil), f.payload[4:]...)
		}
	case fPing:
		p := append([]byte(nil), f.payload...)
		_ = c.w.send(true, func(b []byte) []byte { return appendFrame(b, fPong, 0, 0, p) })
	default:
		return fmt.Errorf("%w: frame type %d", errProtocol, f.typ)
	}
	return nil
}

func (c *serverConn) reset(id uint32, code uint32, msg string) {
	_ = c.w.send(true, func(b []byte) []byte { return appendFrame(b, fReset, 0, id, u32(code), []byte(msg)) })
}

// drop takes a served stream out; a closing connection without streams
// closes.
func (c *serverConn) drop(st *sstream) {
	c.mu.Lock()
	delete(c.streams, st.id)
	closeNow := c.closing && len(c.streams) == 0
	c.mu.Unlock()
	if closeNow {
		c.closeWhenSent()
	}
}

// Peer is the replica a request came from over a link, for its handler
// to ask a question. The requests of one connection share one Peer: two
// are the same connection if and only if they are the same pointer.
type Peer struct{ c *serverConn }

type peerKey struct{}

// PeerOf is the link a request came over, or nil.
func PeerOf(ctx context.Context) *Peer {
	p, _ := ctx.Value(peerKey{}).(*Peer)
	return p
}

// MaxQuestion is the largest question Ask sends.
const MaxQuestion = maxFrame - 5

// Ask asks the peer a question of kind and waits, within ctx, for its
// answer. A question over MaxQuestion bytes is an error, and not sent.
func (p *Peer) Ask(ctx context.Context, kind byte, question []byte) ([]byte, error) {
	if len(question) > MaxQuestion {
		// A frame the peer would take for a broken protocol, and end
		// the link with every stream on it.
		return nil, fmt.Errorf("link: a question of %d bytes, over the %d a link carries", len(question), MaxQuestion)
	}
	c := p.c
	ch := make(chan []byte, 1)
	c.mu.Lock()
	c.nextAsk++
	id := c.nextAsk
	c.asks[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.asks, id)
		c.mu.Unlock()
	}()
	if err := c.w.send(false, func(b []byte) []byte {
		return appendFrameWith(b, fAsk, 0, 0, func(b []byte) []byte {
			b = binary.BigEndian.AppendUint32(b, id)
			b = append(b, kind)
			return append(b, question...)
		})
	}); err != nil {
		return nil, fmt.Errorf("link: the peer's connection ended: %w", err)
	}
	select {
	case a := <-ch:
		return a, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-c.ctx.Done():
		return nil, fmt.Errorf("link: the peer's connection ended: %w", context.Cause(c.ctx))
	}
}

// Alive reports whether the connection the request came over is open.
func (p *Peer) Alive() bool { return p.c.ctx.Err() == nil }

// sstream is one request served.
type sstream struct {
	c      *serverConn
	id     uint32
	ctx    context.Context
	cancel context.CancelCauseFunc
	body   *pipe   // the request's body
	send   *credit // the answer's window
}

func (st *sstream) giveWindow(n int) {
	if st.ctx.Err() != nil {
		return
	}
	_ = st.c.w.send(false, func(b []byte) []byte { return appendWindow(b, st.id, n) })
}

func (st *sstream) serve(head requestHead) {
	c := st.c
	defer c.handlers.Done()
	defer st.cancel(nil)
	defer c.drop(st)
	u, err := parseURI(head.uri)
	if err != nil {
		c.reset(st.id, resetFailed, "a bad request URI")
		return
	}
	r := (&http.Request{Method: head.method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: head.header,
		Host: head.host, RemoteAddr: c.remote, RequestURI: head.uri, TLS: c.tls,
		ContentLength: head.contentLength}).WithContext(st.ctx)
	r.Body = requestBody{st.body}
	if head.contentLength == 0 {
		r.Body = http.NoBody
	}
	rw := &responseWriter{st: st, h: http.Header{}}
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler && c.s.Log != nil {
				c.s.Log.Error("link: a handler panicked", "panic", v)
			}
			c.reset(st.id, resetFailed, "the handler failed")
			return
		}
		if err := rw.push(true); err != nil && !rw.ended {
			c.reset(st.id, resetFailed, "the answer could not be sent: "+err.Error())
		}
	}()
	c.s.Handler.ServeHTTP(rw, r)
}

// responseWriter writes a stream's answer as frames: the head and what
// is written are held until a flush, the handler's return or a piece's
// worth of body, so that a whole small answer is one write.
type responseWriter struct {
	st       *sstream
	h        http.Header
	status   int
	headSent bool
	ended    bool
	buf      []byte
	err      error
}

func (rw *responseWriter) Header() http.Header { return rw.h }

func (rw *responseWriter) WriteHeader(code int) {
	if rw.status != 0 || code < 200 {
		return // informational answers are not relayed
	}
	rw.status = code
}

func (rw *responseWriter) Write(p []byte) (int, error) {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	if rw.err != nil {
		return 0, rw.err
	}
	rw.buf = append(rw.buf, p...)
	if len(rw.buf) >= 2*dataChunk {
		if err := rw.push(false); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (rw *responseWriter) Flush() { _ = rw.FlushError() }

// FlushError sends what is held (http.ResponseController's Flush).
func (rw *responseWriter) FlushError() error {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	return rw.push(false)
}

// SetWriteDeadline bounds the writes that wait for the client to take
// what was sent (http.ResponseController's).
func (rw *responseWriter) SetWriteDeadline(t time.Time) error {
	rw.st.send.setDeadline(t)
	return nil
}

// SetReadDeadline bounds the reads of the request's body.
func (rw *responseWriter) SetReadDeadline(t time.Time) error {
	rw.st.body.setDeadline(t)
	return nil
}

// push sends the head, if not yet sent, and what is held, within the
// window; end ends the answer.
func (rw *responseWriter) push(end bool) error {
	if rw.err != nil || rw.ended {
		return rw.err
	}
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	if end && !rw.headSent && rw.h["Content-Length"] == nil && bodyAllowed(rw.status) {
		// A whole answer has a length, as net/http gives one: the
		// relaying side then writes it to its client in one piece.
		rw.h["Content-Length"] = []string{strconv.Itoa(len(rw.buf))}
	}
	st := rw.st
	for {
		n := 0
		if len(rw.buf) > 0 {
			var err error
			if n, err = st.send.take(st.ctx, min(len(rw.buf), dataChunk)); err != nil {
				rw.err = err
				return err
			}
		}
		last := n == len(rw.buf)
		head := !rw.headSent
		data := rw.buf[:n]
		err := st.c.w.send(false, func(b []byte) []byte {
			if head {
				flags := byte(0)
				if end && last && n == 0 {
					flags = flagEnd
				}
				b = appendFrameWith(b, fResponse, flags, st.id, func(b []byte) []byte { return appendResponseHead(b, rw.status, rw.h) })
				if flags == flagEnd {
					return b
				}
			}
			if n > 0 || end && last {
				flags := byte(0)
				if end && last {
					flags = flagEnd
				}
				b = appendFrame(b, fData, flags, st.id, data)
			}
			return b
		})
		if err != nil {
			rw.err = err
			return err
		}
		rw.headSent = true
		rw.buf = rw.buf[n:]
		if last {
			if len(rw.buf) == 0 {
				rw.buf = rw.buf[:0:0]
			}
			rw.ended = end
			return nil
		}
	}
}

// parseURI is url.ParseRequestURI, without its cost for the usual path:
// one with no escapes.
func parseURI(uri string) (*url.URL, error) {
	path, query, _ := strings.Cut(uri, "?")
	if strings.IndexByte(path, '%') < 0 && strings.HasPrefix(path, "/") && !strings.ContainsAny(query, "#") {
		return &url.URL{Path: path, RawQuery: query}, nil
	}
	return url.ParseRequestURI(uri)
}

// bodyAllowed reports whether an answer of status has a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// requestBody is a stream's request body for its handler.
type requestBody struct{ p *pipe }

func (b requestBody) Read(p []byte) (int, error) { return b.p.Read(p) }

// Close drops the rest of the body: it is read no further.
func (b requestBody) Close() error {
	b.p.abort(errBodyClosed)
	return nil
}

var errBodyClosed = errors.New("link: the request body was closed")
