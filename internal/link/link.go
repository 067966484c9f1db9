// Package link relays HTTP exchanges between mcpvisor replicas over one
// kept connection per peer: the forwarding hop of a request whose
// session or state another replica owns.
//
// A forwarded request is small and its answer usually is too, so what a
// hop costs is what surrounds them: a second HTTP server parsing text
// headers, a client transport handing each exchange between three
// goroutines, a write and a read per message and side. A link is a
// frame protocol instead. The replica that received the request
// (Transport) writes it as frames — binary headers, the body, an end —
// on a connection it keeps to the owner; the owner (Server) reads them
// and serves the request with the same http.Handler its peer interface
// serves over HTTP, through a ResponseWriter that writes frames back. A
// whole exchange is one write each way, and under load writes that wait
// for one another go out as one: whoever finds the connection idle writes
// what every caller queued meanwhile.
//
// Streams (an event stream's answer, a large body) are flow-controlled
// per stream, so that a client reading slowly holds its own stream and
// never the connection; a cancelled request resets its stream. The
// owner may ask the replica that received a request a question (its
// rate limit, whether it took an audit line): Ask.
//
// The connection is whatever Dial returns: mcpvisor's replicas use
// mutual TLS under the shared key, with the ALPN protocol Proto on the
// peer listener beside HTTP/1.1 (http.Server.TLSNextProto). The package
// trusts its peer as far as framing goes — a peer that breaks the
// framing loses the connection; a request head this side does not take
// loses its stream alone — and leaves authorization to the handler.
package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Proto is the ALPN protocol of a link.
const Proto = "mcpvisor-link/1"

// Frame types.
const (
	fHeaders  byte = iota + 1 // client → server: a request's head; opens a stream
	fData                     // either way: body bytes
	fResponse                 // server → client: the answer's head
	fReset                    // either way: the stream ends, unfinished
	fWindow                   // either way: the receiver took n more bytes
	fAsk                      // server → client, stream 0: a question
	fAnswer                   // client → server, stream 0: its answer
	_                         // reserved (a message without an answer, once)
	fGoaway                   // server → client: no new streams
	fPing                     // client → server
	fPong                     // server → client
)

// flagEnd ends a stream's direction: no body follows the head, or this
// is the body's last piece.
const flagEnd byte = 1

const (
	headerLen = 10
	// maxFrame bounds a frame's payload; a peer sending more breaks the
	// protocol.
	maxFrame = 1 << 20
	// dataChunk is the largest data frame written.
	dataChunk = 32 << 10
	// window is each stream's flow-control window, each way: what one
	// side may send that the other has not taken.
	window = 256 << 10
)

// Reset codes.
const (
	resetCancel  uint32 = iota // the client went away, or the stream was abandoned
	resetRefused               // the server takes no new stream: nothing of it ran
	resetFailed                // the server failed to answer
)

// ErrRefused is a request the owner refused before serving any of it (it
// is shutting down): nothing ran, and it can be sent again.
var ErrRefused = errors.New("link: the peer refused the stream before serving any of it")

// errProtocol is a peer breaking the frame protocol: the connection ends.
var errProtocol = errors.New("link: protocol error")

// appendFrame appends a frame's header and payload to b.
func appendFrame(b []byte, typ, flags byte, stream uint32, payload ...[]byte) []byte {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = append(b, typ, flags)
	b = binary.BigEndian.AppendUint32(b, stream)
	for _, p := range payload {
		b = append(b, p...)
	}
	return b
}

// frame is one read frame; its payload is valid until the next read.
type frame struct {
	typ, flags byte
	stream     uint32
	payload    []byte
}

// frameReader reads frames from r.
type frameReader struct {
	r   io.Reader
	hdr [headerLen]byte
	buf []byte
}

func (fr *frameReader) read() (frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(fr.hdr[:4])
	if n > maxFrame {
		return frame{}, fmt.Errorf("%w: a frame of %d bytes", errProtocol, n)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n, max(int(n), 4096))
	}
	p := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	return frame{typ: fr.hdr[4], flags: fr.hdr[5], stream: binary.BigEndian.Uint32(fr.hdr[6:]), payload: p}, nil
}

// Heads: strings and headers as uvarint lengths and bytes.

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendHeader(b []byte, h http.Header) []byte {
	b = binary.AppendUvarint(b, uint64(len(h)))
	for k, vs := range h {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return b
}

// decoder reads what the append functions wrote; the first failure
// sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: a bad number", errProtocol)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: a string past its frame", errProtocol)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// maxHeaderValues bounds the values of one head, all keys together: a
// peer's counts size what is made before the bytes are read.
const maxHeaderValues = 512

func (d *decoder) header() http.Header {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) || n > maxHeaderValues {
		d.fail()
		return nil
	}
	h := make(http.Header, n)
	total := uint64(0)
	for range n {
		k := d.string()
		m := d.uvarint()
		total += m
		if d.err != nil || m > uint64(len(d.b)) || total > maxHeaderValues {
			d.fail()
			return nil
		}
		vs := make([]string, m)
		for i := range vs {
			vs[i] = d.string()
		}
		h[k] = vs
	}
	return h
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: a bad header", errProtocol)
	}
}

// requestHead is a request's head on the wire.
type requestHead struct {
	method, uri, host string
	contentLength     int64 // -1: unknown
	header            http.Header
}

// errHeadTooLarge is a request whose head a link does not carry: more
// header values than maxHeaderValues, or more bytes than a frame.
var errHeadTooLarge = errors.New("link: the request's header is too large to relay")

// checkHead reports whether h fits a head.
func checkHead(h http.Header) error {
	values, size := 0, 0
	for k, vs := range h {
		values += len(vs)
		size += len(k) + 8
		for _, v := range vs {
			size += len(v) + 4
		}
	}
	if values > maxHeaderValues || size > maxFrame-64<<10 {
		return fmt.Errorf("%w (%d values, %d bytes)", errHeadTooLarge, values, size)
	}
	return nil
}

// IsHeadTooLarge reports whether err is a request refused for the size
// of its header.
func IsHeadTooLarge(err error) bool { return errors.Is(err, errHeadTooLarge) }

func appendRequestHead(b []byte, r *http.Request) []byte {
	b = appendString(b, r.Method)
	b = appendString(b, r.URL.RequestURI())
	b = appendString(b, r.Host)
	cl := r.ContentLength
	if r.Body == nil || r.Body == http.NoBody {
		cl = 0
	}
	b = binary.AppendVarint(b, cl)
	return appendHeader(b, r.Header)
}

func decodeRequestHead(p []byte) (requestHead, error) {
	d := decoder{b: p}
	h := requestHead{method: d.string(), uri: d.string(), host: d.string()}
	if d.err == nil {
		v, n := binary.Varint(d.b)
		if n <= 0 {
			d.err = fmt.Errorf("%w: a bad length", errProtocol)
		} else {
			h.contentLength, d.b = v, d.b[n:]
		}
	}
	h.header = d.header()
	if d.err == nil && (h.method == "" || !strings.HasPrefix(h.uri, "/")) {
		d.err = fmt.Errorf("%w: a request without a method or a path", errProtocol)
	}
	return h, d.err
}

func appendResponseHead(b []byte, status int, h http.Header) []byte {
	b = binary.AppendUvarint(b, uint64(status))
	return appendHeader(b, h)
}

func decodeResponseHead(p []byte) (int, http.Header, error) {
	d := decoder{b: p}
	status := d.uvarint()
	h := d.header()
	if d.err == nil && (status < 100 || status > 999) {
		d.err = fmt.Errorf("%w: status %d", errProtocol, status)
	}
	return int(status), h, d.err
}

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
