package gateway

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// postStream is the reply to one POST request and the related Sink given
// to Endpoint.Handle. It starts as a plain JSON reply; the first related
// message turns it into an event stream, written by a goroutine of its own
// (the request's goroutine is inside Handle) that the request waits for.
type postStream struct {
	hs    *httpSession
	w     http.ResponseWriter
	ctx   context.Context
	sseOK bool
	sid   string // Mcp-Session-Id header to send (initialize)

	mu     sync.Mutex
	state  uint8 // psPending, psStreaming, psDone
	gone   bool  // the client went away or a write failed
	queue  [][]byte
	final  []byte        // the response, once known, while streaming
	wake   chan struct{} // cap 1, while streaming
	exited chan struct{} // closed when the writer returns
}

const (
	psPending   = iota // nothing written yet
	psStreaming        // the writer goroutine owns w
	psDone             // the response is out (or being written)
)

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
	p.queue = append(p.queue, data)
	if p.state == psPending {
		p.state = psStreaming
		p.wake = make(chan struct{}, 1)
		p.exited = make(chan struct{})
		go p.writeLoop(p.hs.streams.Add(1))
		return nil
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
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
	if jsonOK {
		b := resp.AppendTo((*bp)[:0])
		*bp = b
		hdr[hdrContentType] = hvJSON
		_, _ = p.w.Write(b)
		return
	}
	// The client takes only event streams: one event, then the end.
	b := resp.AppendTo((*bp)[:0])
	b = sseClean(b, 0)
	n := len(b)
	b = appendSSE(b, p.hs.streams.Add(1), 1, b[:n])
	*bp = b
	sseHeader(p.w)
	_, _ = p.w.Write(b[n:])
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
	rc := http.NewResponseController(w)

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
		q, final := p.queue, p.final
		p.queue = nil
		p.mu.Unlock()
		buf = buf[:0]
		for _, data := range q {
			seq++
			buf = appendSSE(buf, stream, seq, data)
		}
		if final != nil {
			seq++
			buf = appendSSE(buf, stream, seq, sseClean(final, 0))
		}
		if len(buf) != 0 {
			if _, err := w.Write(buf); err != nil {
				p.lost(err)
				return
			}
			if err := rc.Flush(); err != nil {
				p.lost(err)
				return
			}
		}
		if final != nil {
			return
		}
		select {
		case <-p.wake:
		case <-tick:
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				p.lost(err)
				return
			}
			if err := rc.Flush(); err != nil {
				p.lost(err)
				return
			}
		case <-p.ctx.Done():
			p.lost(p.ctx.Err())
			return
		}
	}
}

// lost marks the stream's client as gone.
func (p *postStream) lost(err error) {
	p.mu.Lock()
	p.gone = true
	p.queue = nil
	p.mu.Unlock()
	p.hs.h.log.Debug("http: POST stream ended early", "session", p.hs.id, "err", err)
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
	dst = append(dst, "id: "...)
	dst = strconv.AppendUint(dst, stream, 10)
	dst = append(dst, '_')
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, "\nevent: message\ndata: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

// parseEventID parses "<stream>_<seq>".
func parseEventID(id string) (stream, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "_")
	if !found {
		return 0, 0, false
	}
	stream, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return stream, seq, err1 == nil && err2 == nil
}

// sseHeader sets the headers of an event stream.
func sseHeader(w http.ResponseWriter) {
	hdr := w.Header()
	hdr[hdrContentType] = hvSSE
	hdr["Cache-Control"] = hvNoCache
	hdr["X-Accel-Buffering"] = hvNoBuf
}
