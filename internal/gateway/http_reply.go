package gateway

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// postStream is the reply to one POST request — or to the requests of a
// batch — and the related Sink given to Endpoint.Handle. It starts as a
// plain JSON reply; the first related message turns it into an event
// stream, written by a goroutine of its own (the request's goroutine is
// inside Handle) that the request waits for.
type postStream struct {
	hs    *httpSession
	w     http.ResponseWriter
	ctx   context.Context
	sseOK bool
	sid   string // Mcp-Session-Id header to send (initialize)
	batch bool   // the responses are given to respond, then finishBatch
	// modern: the stream of a 2026-07-28 request: no event ids (streams
	// are not resumable), and an error reply's HTTP status says what it is.
	modern bool

	mu       sync.Mutex
	state    uint8 // psPending, psStreaming, psDone
	gone     bool  // the client went away or a write failed
	queue    [][]byte
	final    []byte        // the response, once known, while streaming
	left     int           // batch: responses not yet given to respond
	resps    [][]byte      // batch, pending: the responses known so far
	complete bool          // batch, streaming: every response is queued
	wake     chan struct{} // cap 1, while streaming
	exited   chan struct{} // closed when the writer returns

	// forwarded: the request reached a server (forwardMarker; only its
	// own goroutine reads and writes it).
	forwarded bool
}

const (
	psPending   = iota // nothing written yet
	psStreaming        // the writer goroutine owns w
	psDone             // the response is out (or being written)
)

func (p *postStream) markForwarded()     { p.forwarded = true }
func (p *postStream) wasForwarded() bool { return p.forwarded }

// response guards against an endpoint that breaks its contract.
func (h *StreamableHandler) response(m, resp *rpc.Message) *rpc.Message {
	return answered(h.log, m, resp)
}

// forgetSession drops the Mcp-Session-Id header of a failed initialize,
// unless a stream has already sent it.
func (p *postStream) forgetSession() {
	p.mu.Lock()
	if p.state == psPending {
		p.sid = ""
	}
	p.mu.Unlock()
}

// finish writes the response: as the JSON body if nothing was streamed
// and the client takes JSON, else as the stream's last event.
func (p *postStream) finish(resp *rpc.Message, jsonOK bool) {
	bp := getBuf()
	defer putBuf(bp)
	p.mu.Lock()
	if p.state == psStreaming {
		b := resp.AppendTo((*bp)[:0])
		*bp = b
		p.final = b
		p.state = psDone
		select {
		case p.wake <- struct{}{}:
		default:
		}
		p.mu.Unlock()
		<-p.exited
		return
	}
	p.state = psDone
	p.mu.Unlock()

	hdr := p.w.Header()
	if p.sid != "" {
		hdr[hdrSessionID] = []string{p.sid}
	}
	// A modern request's error is JSON whatever Accept says, so that its
	// status (404, 400) can say what it is.
	// A rate limit's refusal is JSON too: its status (429) and
	// Retry-After are what clients and balancers act on.
	limited, scopes := retryAfterOf(resp), scopeOf(resp)
	if jsonOK || (p.modern && resp.Error != nil) || limited > 0 || scopes != nil {
		b := resp.AppendTo((*bp)[:0])
		*bp = b
		hdr[hdrContentType] = hvJSON
		switch {
		case resp.Error == nil:
		case limited > 0:
			hdr["Retry-After"] = []string{strconv.Itoa(limited)}
			p.w.WriteHeader(http.StatusTooManyRequests)
		case scopes != nil:
			// A step-up: the challenge a client asks a token for.
			hdr["Www-Authenticate"] = []string{p.hs.h.guard.ScopeChallenge(scopes)}
			p.w.WriteHeader(http.StatusForbidden)
		case resp.Error.Code == rpc.LimitReached:
			// A limit of mcpvisor's, not the server's answer: 503, as
			// for a new session beyond maxSessions.
			p.w.WriteHeader(http.StatusServiceUnavailable)
		case p.modern:
			if st := modernStatus(resp.Error.Code); st != http.StatusOK {
				p.w.WriteHeader(st)
			}
		}
		p.hs.h.writeReply(p.w, b)
		return
	}
	// The client takes only event streams: one event, then the end.
	b := resp.AppendTo((*bp)[:0])
	b = sseClean(b, 0)
	n := len(b)
	b = appendSSE(b, p.streamNo(), 1, b[:n])
	*bp = b
	sseHeader(p.w)
	p.hs.h.writeReply(p.w, b[n:])
}

// modernStatus is the HTTP status of a modern request's error reply
// (streamable-http: an unknown method is 404; a header mismatch, an
// unsupported version and a missing client capability are 400).
func modernStatus(code int) int {
	switch code {
	case rpc.MethodNotFound:
		return http.StatusNotFound
	case rpc.HeaderMismatch, rpc.MissingClientCapability, rpc.UnsupportedProtocolVersion:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// bufPool holds encoding buffers.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > 1<<16 {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// Send queues a message related to the request. It fails once the
// response is known, when the client is gone or does not take event
// streams, and when EventBuffer messages are already waiting.
func (p *postStream) Send(m *rpc.Message) error {
	if !p.sseOK {
		return ErrNoStream
	}
	data := encodeEvent(m)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.state == psDone || p.gone || p.ctx.Err() != nil:
		return ErrStreamClosed
	case len(p.queue) >= p.hs.h.evBuf:
		return ErrStreamFull
	}
	if p.state == psPending {
		// A batch's responses known so far go first; if they are all
		// known (a message sent late, by a goroutine its request left
		// behind), the stream ends after them.
		for _, r := range p.resps {
			p.queue = append(p.queue, sseClean(r, 0))
		}
		p.resps = nil
		p.complete = p.batch && p.left == 0
	}
	p.queue = append(p.queue, data)
	if p.state == psPending {
		p.state = psStreaming
		p.wake = make(chan struct{}, 1)
		p.exited = make(chan struct{})
		go p.writeLoop(p.streamNo())
		return nil
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

// noEventID as a stream number: events without an id line.
const noEventID = ^uint64(0)

// streamNo numbers a new event stream of the request (its events' ids
// are stream_seq), or is noEventID for a modern request's.
func (p *postStream) streamNo() uint64 {
	if p.modern {
		return noEventID
	}
	return p.hs.streams.Add(1)
}

// writeLoop writes the event stream until the response is written or the
// client is gone.
func (p *postStream) writeLoop(stream uint64) {
	defer close(p.exited)
	w := p.w
	if p.sid != "" {
		w.Header()[hdrSessionID] = []string{p.sid}
	}
	sseHeader(w)
	w.WriteHeader(http.StatusOK)
	sw := p.hs.h.newStreamWriter(w)
	defer sw.finish()

	var tick <-chan time.Time
	if ka := p.hs.h.keepAlive; ka > 0 {
		t := time.NewTicker(ka)
		defer t.Stop()
		tick = t.C
	}
	var buf []byte
	var seq uint64
	for {
		p.mu.Lock()
		q, final, complete := p.queue, p.final, p.complete
		p.queue = nil
		p.mu.Unlock()
		if final != nil {
			q = append(q, sseClean(final, 0))
		}
		// In writes of about writeChunk bytes, as on the GET stream.
		for i := 0; i < len(q); {
			buf = buf[:0]
			for n := i; i < len(q) && (i == n || len(buf)+len(q[i]) < writeChunk); i++ {
				seq++
				buf = appendSSE(buf, stream, seq, q[i])
			}
			if err := sw.write(buf); err != nil {
				p.lost(err)
				return
			}
			if cap(buf) > 4*writeChunk {
				buf = nil
			}
		}
		if final != nil || complete {
			return
		}
		select {
		case <-p.wake:
		case <-tick:
			if err := sw.write(ssePing); err != nil {
				p.lost(err)
				return
			}
		case <-p.ctx.Done():
			p.lost(p.ctx.Err())
			return
		}
	}
}

// lost marks the stream's client as gone. The request goes on; its
// further messages are refused and its response is dropped.
func (p *postStream) lost(err error) {
	p.mu.Lock()
	p.gone = true
	p.queue = nil
	p.mu.Unlock()
	if stalled(err) {
		p.hs.h.log.Info("http: client stopped reading a POST stream; dropped it", "session", p.hs.id, "timeout", p.hs.h.writeWait)
		return
	}
	p.hs.h.log.Debug("http: POST stream ended early", "session", p.hs.id, "err", err)
}

// batchSink is the related Sink of one request of a batch: it refuses
// messages once that request's response is known.
type batchSink struct {
	p         *postStream
	done      atomic.Bool
	forwarded bool // see postStream.forwarded
}

func (s *batchSink) markForwarded()     { s.forwarded = true }
func (s *batchSink) wasForwarded() bool { return s.forwarded }

func (s *batchSink) Send(m *rpc.Message) error {
	if s.done.Load() {
		return ErrStreamClosed
	}
	return s.p.Send(m)
}

// respond gives the response to one request of a batch.
func (p *postStream) respond(resp *rpc.Message) {
	b := resp.AppendTo(nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.left--
	switch p.state {
	case psPending:
		p.resps = append(p.resps, b)
	case psStreaming:
		if !p.gone {
			p.queue = append(p.queue, sseClean(b, 0))
		}
		if p.left == 0 {
			p.complete = true
		}
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// finishBatch writes a batch's reply once every response was given to
// respond: the stream's end, or a JSON array of the responses if nothing
// was streamed and the client takes JSON, else an event stream of them.
func (p *postStream) finishBatch(jsonOK bool) {
	p.mu.Lock()
	if p.state == psStreaming {
		p.mu.Unlock()
		<-p.exited
		return
	}
	p.state = psDone
	resps := p.resps
	p.resps = nil
	p.mu.Unlock()

	var b []byte
	if jsonOK {
		b = append(b, '[')
		for i, r := range resps {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, r...)
		}
		b = append(b, ']')
		p.w.Header()[hdrContentType] = hvJSON
	} else {
		stream := p.hs.streams.Add(1)
		for i, r := range resps {
			b = appendSSE(b, stream, uint64(i+1), sseClean(r, 0))
		}
		sseHeader(p.w)
	}
	p.hs.h.writeReply(p.w, b)
}

// Writing to clients. Every write has a deadline, so that a client that
// stops reading cannot hold a goroutine, a session or a shutdown.

// writeChunk is the most written under one deadline: a slow client that
// keeps reading gets WriteTimeout for each piece.
const writeChunk = 256 << 10

// closeGrace is the time a stream is left to end cleanly once its end is
// decided (the handler closes, the session ends, a newer GET replaces
// it), at most WriteTimeout.
const closeGrace = time.Second

// ssePing is the keep-alive comment.
var ssePing = []byte(": ping\n\n")

// stalled tells whether a write failed because its client did not take it
// in time.
func stalled(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// writeReply writes b, a whole reply, in pieces of at most writeChunk
// bytes, each under a fresh WriteTimeout (the close grace once the handler
// has closed). net/http's final flush of the reply runs under the last
// deadline; it lifts the deadline before the connection's next request.
func (h *StreamableHandler) writeReply(w http.ResponseWriter, b []byte) {
	rc := http.NewResponseController(w)
	for len(b) > 0 {
		n := min(len(b), writeChunk)
		d := time.Now().Add(h.writeWait)
		if h.life.Err() != nil {
			d = time.Now().Add(h.grace)
		}
		_ = rc.SetWriteDeadline(d)
		if _, err := w.Write(b[:n]); err != nil {
			if stalled(err) {
				h.log.Info("http: client stopped reading a reply; dropped it", "timeout", h.writeWait)
			}
			return
		}
		b = b[n:]
	}
}

// streamWriter writes one event stream under deadlines: each write, and
// its flush, gets WriteTimeout, until end — called from any goroutine when
// the stream's end is decided — leaves the write in progress and every
// later one until the close grace has passed. The handler's Close ends
// every stream.
type streamWriter struct {
	h    *StreamableHandler
	w    http.ResponseWriter
	rc   *http.ResponseController
	stop func() bool // undoes the end on the handler's Close

	mu     sync.Mutex
	ending bool      // end was called
	endBy  time.Time // when end was called, plus the close grace
	done   bool      // finish was called: w is no longer ours to set deadlines on
}

func (h *StreamableHandler) newStreamWriter(w http.ResponseWriter) *streamWriter {
	s := &streamWriter{h: h, w: w, rc: http.NewResponseController(w)}
	s.stop = context.AfterFunc(h.life, s.end)
	return s
}

// write writes b, in pieces of at most writeChunk bytes, and flushes it.
func (s *streamWriter) write(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), writeChunk)
		s.deadline()
		if _, err := s.w.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return s.rc.Flush()
}

// deadline sets the deadline of the next write.
func (s *streamWriter) deadline() {
	s.mu.Lock()
	d := time.Now().Add(s.h.writeWait)
	if s.ending {
		d = s.endBy
	}
	_ = s.rc.SetWriteDeadline(d)
	s.mu.Unlock()
}

// end makes the stream's current and later writes fail once the close
// grace has passed from the first call. It may be called at any time, from
// any goroutine, more than once.
func (s *streamWriter) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ending {
		return
	}
	s.ending = true
	s.endBy = time.Now().Add(s.h.grace)
	if !s.done {
		_ = s.rc.SetWriteDeadline(s.endBy)
	}
}

// ended tells whether end was called.
func (s *streamWriter) ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ending
}

// finish is called by the stream's goroutine once it no longer writes:
// from then on end leaves the connection alone (net/http may use it for
// the next request once the handler has returned). The last deadline
// stays for net/http's final flush, which lifts it afterwards.
func (s *streamWriter) finish() {
	s.stop()
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
}

// encodeEvent encodes m for an SSE data line, in a buffer of its own.
func encodeEvent(m *rpc.Message) []byte {
	b := m.AppendTo(make([]byte, 0, 64+len(m.ID)+len(m.Method)+len(m.Params)+len(m.Result)))
	return sseClean(b, 0)
}

// sseClean replaces carriage returns from b[from:] by spaces. AppendTo
// already turned newlines into spaces; a CR can only be white space
// between JSON tokens, and it would end an SSE line.
func sseClean(b []byte, from int) []byte {
	for i := bytes.IndexByte(b[from:], '\r'); i >= 0; i = bytes.IndexByte(b[from:], '\r') {
		from += i
		b[from] = ' '
	}
	return b
}

// appendSSE appends one event: its id "<stream>_<seq>" and data, a single
// line of JSON.
func appendSSE(dst []byte, stream, seq uint64, data []byte) []byte {
	if stream != noEventID {
		dst = append(dst, "id: "...)
		dst = strconv.AppendUint(dst, stream, 10)
		dst = append(dst, '_')
		dst = strconv.AppendUint(dst, seq, 10)
		dst = append(dst, '\n')
	}
	dst = append(dst, "event: message\ndata: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

// sseHeader sets the headers of an event stream.
func sseHeader(w http.ResponseWriter) {
	hdr := w.Header()
	hdr[hdrContentType] = hvSSE
	hdr["Cache-Control"] = hvNoCache
	hdr["X-Accel-Buffering"] = hvNoBuf
}
