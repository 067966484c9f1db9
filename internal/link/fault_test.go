package link

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A connection idle (no streams) for longer than three ping intervals,
// but less than IdleTimeout, is alive: the next stream, however long, is
// not ended by the keepalive, which counts quiet from its opening.
func TestAnIdleGapDoesNotKillTheNextStream(t *testing.T) {
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(500 * time.Millisecond) // a tool call that takes a while
		}
		io.WriteString(w, "ok")
	}), func(tr *Transport) {
		// Pings answered within 3 intervals (300 ms) keep it: a loaded
		// machine has that much room.
		tr.PingInterval = 100 * time.Millisecond
		tr.IdleTimeout = time.Minute
	})
	resp, err := p.do(t, t.Context(), "POST", "/", "x", nil)
	if err != nil || readAll(t, resp) != "ok" {
		t.Fatalf("first: %v", err)
	}
	time.Sleep(700 * time.Millisecond) // idle: > 3 ping intervals, << IdleTimeout
	resp, err = p.do(t, t.Context(), "POST", "/slow", "x", nil)
	if err != nil {
		t.Fatalf("a request on a live, merely idle connection failed: %v", err)
	}
	readAll(t, resp)
}

// A reader that lags, never quite emptying the pipe, keeps it within the
// window: what was read is dropped from the front, not kept.
func TestThePipeIsBoundedByTheWindow(t *testing.T) {
	done := make(chan struct{})
	p := newPipe(done, func() error { return nil }, func(int) {})
	chunk := make([]byte, dataChunk)
	rb := make([]byte, dataChunk)
	// Fill to the window, then: read one chunk, write one chunk; the
	// pipe always holds window-32K..window bytes, as flow control allows.
	for range window / dataChunk {
		if !p.write(chunk) {
			t.Fatal("overflow while filling")
		}
	}
	for i := range 2000 { // 64 MB through the stream
		if n, _ := p.Read(rb); n != dataChunk {
			t.Fatalf("read %d", n)
		}
		if !p.write(chunk) {
			t.Fatalf("overflow at %d", i)
		}
	}
	if c := cap(p.buf); c > 4*window {
		t.Fatalf("the pipe holds a buffer of %d MB for a window of %d KB", c>>20, window>>10)
	}
}

// The last piece of an answer is read before its end, whatever the
// order in which the reader sees the piece, the end and the stream's
// close (Read picking the stream's end first must not drop the piece).
func TestTheLastPieceIsNeverDropped(t *testing.T) {
	lost := 0
	spin := 0
	for range 200000 {
		done := make(chan struct{})
		p := newPipe(done, func() error { return io.EOF }, func(int) {})
		got := make(chan []byte, 1)
		started := make(chan struct{})
		go func() {
			close(started)
			p.setDeadline(time.Now().Add(time.Hour)) // widens the window; without it the loss is rarer (2 in 600000 here)
			b, _ := io.ReadAll(p)
			got <- b
		}()
		<-started
		for range spin {
		}
		spin = (spin*7 + 13) % 2000
		p.write([]byte("last"))
		p.close(io.EOF)
		close(done) // cstream.ended
		if b := <-got; string(b) != "last" {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of 200000 bodies lost their last piece and read as whole", lost)
	}
}

// blockConn is a net.Conn whose writes block until released.
type blockConn struct {
	net.Conn
	mu      sync.Mutex
	release chan struct{}
	wrote   bytes.Buffer
	closed  chan struct{}
	once    sync.Once
}

func (c *blockConn) Write(b []byte) (int, error) {
	select {
	case <-c.release:
	case <-c.closed:
		return 0, net.ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wrote.Write(b)
}
func (c *blockConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *blockConn) SetWriteDeadline(time.Time) error { return nil }

// closeWhenSent closes the connection only once a write under way in
// another goroutine — the last answer's end, the goaway — is done.
func TestCloseWhenSentWaitsForTheWriteUnderWay(t *testing.T) {
	bc := &blockConn{release: make(chan struct{}), closed: make(chan struct{})}
	c := &serverConn{nc: bc, streams: map[uint32]*sstream{}}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	c.w = writer{conn: bc, timeout: time.Minute, fail: func(error) {}}
	// Another goroutine's write under way (an async reset, pong, goaway...).
	_ = c.w.send(true, func(b []byte) []byte { return append(b, "the last answer's end"...) })
	time.Sleep(20 * time.Millisecond)
	c.closeWhenSent()
	time.Sleep(50 * time.Millisecond)
	close(bc.release)
	select {
	case <-bc.closed: // after the write, if closeWhenSent waited for it
	case <-time.After(10 * time.Second):
		t.Fatal("closeWhenSent never closed the connection")
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if !strings.Contains(bc.wrote.String(), "the last answer's end") {
		t.Fatal("closeWhenSent closed the connection before the queued frames were written")
	}
}

// A dial is every waiter's: the first caller going away does not fail
// the requests waiting on the same dial.
func TestOneCallersCancelDoesNotFailAnothersDial(t *testing.T) {
	release := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go srv.ServeConn(c)
		}
	}()
	defer func() { ln.Close(); srv.Close() }()
	tr := &Transport{Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		select {
		case <-release: // a slow handshake
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}
	defer tr.Close()
	url := "http://" + ln.Addr().String() + "/"
	ctxA, cancelA := context.WithCancel(t.Context())
	go func() {
		req, _ := http.NewRequestWithContext(ctxA, "GET", url, nil)
		tr.RoundTrip(req)
	}()
	time.Sleep(20 * time.Millisecond) // A dials
	errB := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		errB <- err
	}()
	time.Sleep(20 * time.Millisecond) // B waits on A's dial
	cancelA()                         // A's client went away
	time.Sleep(20 * time.Millisecond)
	close(release)
	if err := <-errB; err != nil {
		t.Fatalf("B, whose context is live, failed with another request's cancellation: %v", err)
	}
}

// A connection never uses a stream id twice: once its ids are used up
// it takes no new stream (ErrRefused: a new connection takes them) and
// closes when its last one ends.
func TestStreamIDsNeverRepeat(t *testing.T) {
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), nil)
	resp, err := p.do(t, t.Context(), "GET", "/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	c := p.conn()
	c.mu.Lock()
	c.next = maxStreamID + 2
	c.mu.Unlock()
	if _, err := c.open(context.Background()); !errors.Is(err, ErrRefused) {
		t.Fatalf("a stream past the last id: %v, want ErrRefused", err)
	}
	<-c.done // retired with no stream open: closed
	resp, err = p.do(t, t.Context(), "GET", "/", "", nil)
	if err != nil || readAll(t, resp) != "ok" {
		t.Fatalf("the next request: %v", err)
	}
	if n := p.conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// A head's counts do not size what is made before the bytes are read:
// a 1 MB frame allocates in proportion to itself.
func TestHeadDecodingIsBounded(t *testing.T) {
	p := appendString(appendString(appendString(nil, "GET"), "/"), "h")
	p = append(p, 0) // content length
	n := maxFrame - len(p) - 8
	p = binary.AppendUvarint(p, uint64(n))
	p = append(p, make([]byte, n)...) // a million empty keys' worth of room
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _ = decodeRequestHead(p)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 8*maxFrame {
		t.Fatalf("decoding a %d-byte head allocated %d MB", len(p), got>>20)
	}
}

// SetWriteDeadline may be called from any goroutine (the gateway's
// streamWriter.end does), and a write already waiting for window sees
// the new deadline.
func TestSetWriteDeadlineFromAnotherGoroutine(t *testing.T) {
	ended := make(chan struct{})
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		go func() { // streamWriter.end, on the handler's Close
			time.Sleep(50 * time.Millisecond)
			_ = rc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		}()
		chunk := make([]byte, 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}), nil)
	resp, err := p.do(t, t.Context(), "GET", "/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() // never read: the client stalls
	start := time.Now()
	<-ended
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the write waited %v: the deadline set meanwhile (100 ms) was not seen", d.Round(time.Millisecond))
	}
}

// A key rotation's Retire, under a stream of POSTs whose bodies cannot
// be read again (as the relay makes them): none fails refused.
func TestRetireRefusesNoRequest(t *testing.T) {
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}), nil)
	stop := make(chan struct{})
	var refused, done atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// As relay makes it: the client's body, no GetBody.
				req, _ := http.NewRequestWithContext(t.Context(), "POST", p.url+"/mcp", nil)
				req.Body, req.ContentLength = io.NopCloser(strings.NewReader(`{"jsonrpc":"2.0"}`)), 17
				resp, err := p.tr.RoundTrip(req)
				if err != nil {
					refused.Add(1)
					t.Logf("a POST under Retire: %v", err)
					continue
				}
				resp.Body.Close()
				done.Add(1)
			}
		})
	}
	for range 200 {
		p.tr.Retire() // a key rotation
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if n := refused.Load(); n > 0 {
		t.Fatalf("%d of %d POSTs failed under Retire (nothing of them ran)", n, n+done.Load())
	}
}

// Shutdown of an idle connection: the goaway reaches the client before
// the connection closes, so that the client retires it rather than
// seeing it cut.
func TestTheGoawayReachesAnIdleClient(t *testing.T) {
	cut := 0
	for range 50 {
		func() {
			p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), nil)
			defer p.close()
			resp, err := p.do(t, t.Context(), "GET", "/", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			c := p.conn()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			p.srv.Shutdown(ctx)
			<-c.done
			c.mu.Lock()
			if !c.retired {
				cut++
			}
			c.mu.Unlock()
		}()
	}
	if cut > 0 {
		t.Fatalf("%d of 50 idle connections were cut without their goaway", cut)
	}
}

// Past MaxStreams open streams (long-lived event streams count), a
// new request goes over another connection.
func TestStreamsPastMaxStreamsOpenAnotherConnection(t *testing.T) {
	hold := make(chan struct{})
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/events" {
			holdStream(w, r, hold)
			return
		}
		io.WriteString(w, "ok")
	}), nil)
	defer close(hold)
	p.srv.MaxStreams = 2
	for range 2 {
		resp, err := p.do(t, t.Context(), "GET", "/events", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
	}
	resp, err := p.do(t, t.Context(), "GET", "/mcp", "", nil)
	if err != nil {
		t.Fatalf("a call beside MaxStreams open streams: %v", err)
	}
	readAll(t, resp)
}

// A peer that breaks the protocol on a stream — its body before its head,
// a reset too short to read — ends the connection, and RoundTrip with
// it, at once: not when the request's context ends.
func TestAStreamsProtocolErrorEndsTheConnection(t *testing.T) {
	for name, frame := range map[string]func(stream uint32) []byte{
		"a body before its head": func(id uint32) []byte { return appendFrame(nil, fData, flagEnd, id, []byte("body before head")) },
		"a short reset":          func(id uint32) []byte { return appendFrame(nil, fReset, 0, id, []byte{0, 1}) },
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				fr := frameReader{r: c}
				f, err := fr.read()
				if err != nil {
					return
				}
				c.Write(frame(f.stream))
				io.Copy(io.Discard, c)
			}()
			tr := &Transport{Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			}}
			defer tr.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ln.Addr().String()+"/", nil)
			errc := make(chan error, 1)
			go func() {
				_, err := tr.RoundTrip(req)
				errc <- err
			}()
			select {
			case err := <-errc:
				if err == nil || ctx.Err() != nil {
					t.Errorf("RoundTrip: %v (context: %v), want the connection's end", err, ctx.Err())
				}
			case <-time.After(10 * time.Second):
				tr.Close()
				t.Fatal("RoundTrip waits on a stream its peer broke")
			}
		})
	}
}

// Every goroutine waiting for the writer to drain is woken when it does,
// not one of them (a retired connection's close may be waited for from
// two places).
func TestDrainedWakesEveryWaiter(t *testing.T) {
	bc := &blockConn{release: make(chan struct{}), closed: make(chan struct{})}
	w := &writer{conn: bc, timeout: time.Minute, fail: func(error) {}}
	_ = w.send(true, func(b []byte) []byte { return append(b, "a frame"...) })
	results := make(chan bool, 2)
	for range 2 {
		go func() { results <- w.drained(time.Minute) }()
	}
	close(bc.release)
	for range 2 {
		select {
		case ok := <-results:
			if !ok {
				t.Fatal("drained returned false within its bound")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a second waiter was not woken when the writer drained")
		}
	}
}

// refillConn queues one more frame on w at each of its first n writes,
// and holds its write number hold until released: a connection that
// others keep writing to.
type refillConn struct {
	net.Conn
	w       *writer
	n, hold int
	release chan struct{}

	mu     sync.Mutex
	writes int
	held   chan struct{} // closed when write number hold begins
}

func (c *refillConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	k := c.writes
	c.mu.Unlock()
	if k <= c.n {
		_ = c.w.send(false, func(b []byte) []byte { return append(b, 'x') })
	}
	if k == c.hold {
		close(c.held)
		<-c.release
	}
	return len(b), nil
}
func (c *refillConn) SetWriteDeadline(time.Time) error { return nil }

// A caller that finds the connection idle writes what others queue
// meanwhile for maxRounds writes at most, then hands the rest to a
// goroutine: it returns while that goroutine's write is still blocked,
// and everything queued is written in the end.
func TestAWriterWritesForOthersAFewRoundsAtMost(t *testing.T) {
	c := &refillConn{n: 20, hold: maxRounds + 1, release: make(chan struct{}), held: make(chan struct{})}
	w := &writer{conn: c, timeout: time.Minute, fail: func(error) {}}
	c.w = w
	returned := make(chan struct{})
	go func() {
		_ = w.send(false, func(b []byte) []byte { return append(b, 'x') })
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatalf("the caller did not return while write %d (by another goroutine) was blocked", maxRounds+1)
	}
	<-c.held
	close(c.release)
	if !w.drained(10 * time.Second) {
		t.Fatal("the queue was not written after the hand-off")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writes != c.n+1 {
		t.Errorf("%d writes, want %d (one per frame queued, each while the one before was written)", c.writes, c.n+1)
	}
}
