package link

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pair is a Server on a loopback listener and a Transport to it.
type pair struct {
	srv  *Server
	tr   *Transport
	ln   net.Listener
	url  string
	done sync.WaitGroup
	// conns counts the connections the listener accepted.
	conns atomic.Int64
}

func newPair(t *testing.T, h http.Handler, tune func(*Transport)) *pair {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{srv: &Server{Handler: h}, ln: ln, url: "http://" + ln.Addr().String()}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		var conns sync.WaitGroup
		defer conns.Wait()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			conns.Go(func() { p.srv.ServeConn(c) })
		}
	}()
	p.tr = &Transport{Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}
	if tune != nil {
		tune(p.tr)
	}
	t.Cleanup(p.close)
	return p
}

// holdStream answers r's head at once and holds its stream open until
// hold is closed or the request ends.
func holdStream(w http.ResponseWriter, r *http.Request, hold <-chan struct{}) {
	w.(http.Flusher).Flush()
	select {
	case <-hold:
	case <-r.Context().Done():
	}
}

// conn is the transport's one connection (any, if it has several).
func (p *pair) conn() *clientConn {
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	for c := range p.tr.all {
		return c
	}
	return nil
}

func (p *pair) close() {
	p.tr.Close()
	p.ln.Close()
	p.srv.Close()
	p.done.Wait()
}

// doAsync makes a request in a goroutine; its answer's body, or its
// error's text, comes on the channel.
func (p *pair) doAsync(t *testing.T, method, path, body string) <-chan string {
	res := make(chan string, 1)
	go func() {
		resp, err := p.do(t, t.Context(), method, path, body, nil)
		if err != nil {
			res <- err.Error()
			return
		}
		res <- readAll(t, resp)
	}()
	return res
}

func (p *pair) do(t *testing.T, ctx context.Context, method, path, body string, h http.Header) (*http.Response, error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	return p.tr.RoundTrip(req)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return string(b)
}

// A request arrives whole — method, path and query, host, headers,
// length, body — and its answer comes back whole: status, headers, body.
func TestRoundTrip(t *testing.T) {
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("body: %v", err)
		}
		w.Header().Set("X-Echo", r.Header.Get("X-In"))
		w.Header()["Multi"] = []string{"a", "b"}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s %s?%s host=%s len=%d tls=%v body=%s", r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.ContentLength, r.TLS != nil, b)
	}), nil)
	resp, err := p.do(t, t.Context(), "POST", "/servers/x/mcp?a=1", `{"jsonrpc":"2.0"}`, http.Header{"X-In": {"v"}})
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, resp)
	want := fmt.Sprintf(`POST /servers/x/mcp?a=1 host=%s len=17 tls=false body={"jsonrpc":"2.0"}`, p.ln.Addr())
	if resp.StatusCode != 201 || got != want || resp.Header.Get("X-Echo") != "v" || len(resp.Header["Multi"]) != 2 {
		t.Fatalf("answer: %d %v %q, want 201 and %q", resp.StatusCode, resp.Header, got, want)
	}
	// No body, and an answer with no body.
	p.srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != http.NoBody {
			t.Errorf("a GET's body: %T, want http.NoBody", r.Body)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	resp, err = p.do(t, t.Context(), "GET", "/x", "", nil)
	if err != nil || resp.StatusCode != 204 || readAll(t, resp) != "" {
		t.Fatalf("a GET: %v %v", resp, err)
	}
}

// Many concurrent exchanges over the one connection: each answer is its
// own request's, never another's.
func TestConcurrentStreamsKeepTheirOwnAnswers(t *testing.T) {
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if len(b)%3 == 0 {
			time.Sleep(time.Duration(len(b)%5) * time.Millisecond) // reorder answers
		}
		w.Header().Set("X-Req", r.Header.Get("X-Req"))
		w.Write(b)
	}), nil)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 50 {
				id := fmt.Sprintf("%d-%d", g, i)
				body := strings.Repeat(id+";", 1+(g*i)%200)
				resp, err := p.do(t, t.Context(), "POST", "/", body, http.Header{"X-Req": {id}})
				if err != nil {
					t.Errorf("%s: %v", id, err)
					return
				}
				if got := readAll(t, resp); got != body || resp.Header.Get("X-Req") != id {
					t.Errorf("%s: got another answer (%s, %d bytes)", id, resp.Header.Get("X-Req"), len(got))
					return
				}
			}
		})
	}
	wg.Wait()
	if n := p.conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1 kept", n)
	}
}

// Bodies larger than the window go both ways whole (flow control).
func TestLargeBodies(t *testing.T) {
	big := make([]byte, 3<<20+123)
	rand.Read(big)
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(b, big) {
			t.Errorf("the request body: %d bytes, %v", len(b), err)
		}
		for i := 0; i < len(big); i += 7000 {
			w.Write(big[i:min(i+7000, len(big))])
		}
	}), nil)
	req, _ := http.NewRequestWithContext(t.Context(), "POST", p.url+"/", io.NopCloser(bytes.NewReader(big)))
	req.ContentLength = -1
	resp, err := p.tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != string(big) {
		t.Fatalf("the answer: %d bytes, want %d", len(got), len(big))
	}
}

// A stream's answer is relayed as it is flushed, not when it ends.
func TestStreamsAreRelayedAsTheyCome(t *testing.T) {
	next := make(chan struct{})
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}), nil)
	resp, err := p.do(t, t.Context(), "GET", "/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		br.ReadString('\n')
		next <- struct{}{} // the handler waits: the event came before the end
	}
}

// A client that does not read its stream holds that stream only: other
// exchanges over the connection go on, and the stalled handler's writes
// end at their deadline.
func TestASlowReaderHoldsOnlyItsStream(t *testing.T) {
	stalled := make(chan error, 1)
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			chunk := make([]byte, 64<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					stalled <- err
					return
				}
			}
		}
		io.WriteString(w, "ok")
	}), nil)
	big, err := p.do(t, t.Context(), "GET", "/big", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Body.Close()
	for range 20 {
		resp, err := p.do(t, t.Context(), "GET", "/small", "", nil)
		if err != nil || readAll(t, resp) != "ok" {
			t.Fatalf("a small exchange beside a stalled stream: %v", err)
		}
	}
	select {
	case err := <-stalled:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the stalled write: %v, want a deadline exceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled write never ended at its deadline")
	}
}

// A client that goes away ends its handler's context, and the stream.
func TestCancelReachesTheHandler(t *testing.T) {
	started, ended := make(chan struct{}), make(chan error, 1)
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		ended <- r.Context().Err()
	}), nil)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := p.do(t, ctx, "POST", "/", "x", nil)
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled round trip: %v", err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end")
	}
}

// Shutdown lets the open stream finish, refuses new ones unserved, and
// closes the connection; a new request then dials (here: refused).
func TestShutdownFinishesStreamsAndRefusesNew(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{}, 1)
	var served atomic.Int64
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Path == "/hold" {
			started <- struct{}{}
			<-release
		}
		io.WriteString(w, "done")
	}), nil)
	held := p.doAsync(t, "POST", "/hold", "x")
	<-started
	p.ln.Close() // no new connection: the next dial is refused
	shut := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.srv.Shutdown(ctx)
		close(shut)
	}()
	// The goaway reaches the client: a request after it is not served.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := p.do(t, t.Context(), "POST", "/new", "y", nil)
		if err != nil {
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != "dial" {
				if !errors.Is(err, ErrRefused) {
					t.Fatalf("a request after the shutdown began: %v, want refused or a failed dial", err)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("requests still served after the shutdown began")
		}
	}
	if n := served.Load(); n != 1 {
		// Requests made before the goaway arrived are served, and that
		// is right; but none after: the loop ends at the first refusal.
		t.Logf("%d served before the goaway arrived", n-1)
	}
	close(release)
	if got := <-held; got != "done" {
		t.Fatalf("the held request: %q, want done", got)
	}
	select {
	case <-shut:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return once the streams ended")
	}
}

// A peer that dies mid-answer fails the streams open on it, at once.
func TestADeadPeerFailsItsStreams(t *testing.T) {
	started := make(chan struct{})
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	}), nil)
	resp, err := p.do(t, t.Context(), "GET", "/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	p.srv.Close()
	_, err = io.ReadAll(resp.Body)
	if err == nil {
		t.Fatal("the body of a stream whose peer died read to its end")
	}
}

// A peer that stops answering (the connection open, nothing read) is
// found dead within three ping intervals.
func TestASilentPeerIsDeadWithinTheBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	tr := &Transport{PingInterval: 100 * time.Millisecond, Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}
	defer tr.Close()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://"+ln.Addr().String()+"/", strings.NewReader("x"))
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		errc <- err
	}()
	c := <-accepted
	defer c.Close()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "answered nothing") {
			t.Fatalf("a round trip to a silent peer: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("found dead after %v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a round trip to a silent peer never ended")
	}
}

// Ask reaches the replica that sent the request, and each of many
// questions at once gets its own answer.
func TestAsk(t *testing.T) {
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer := PeerOf(r.Context())
		if peer == nil || !peer.Alive() {
			t.Error("no live peer in a linked request's context")
			return
		}
		a, err := peer.Ask(r.Context(), 7, []byte(r.URL.Path))
		if err != nil {
			t.Errorf("ask: %v", err)
		}
		w.Write(a)
	}), func(tr *Transport) {
		tr.Answer = func(kind byte, q []byte) []byte { return fmt.Appendf(nil, "%d:%s yes", kind, q) }
	})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			path := fmt.Sprintf("/q%d", i)
			resp, err := p.do(t, t.Context(), "POST", path, "x", nil)
			if err != nil {
				t.Error(err)
				return
			}
			if got := readAll(t, resp); got != "7:"+path+" yes" {
				t.Errorf("%s: the answer %q", path, got)
			}
		})
	}
	wg.Wait()
}

// An Ask the peer does not answer ends with its context, and with the
// connection; the peer is then no longer Alive.
func TestAskIsBounded(t *testing.T) {
	asked := make(chan *Peer, 1)
	results := make(chan error, 2)
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer := PeerOf(r.Context())
		if r.URL.Path == "/bounded" {
			ctx, cancel := context.WithTimeout(r.Context(), 100*time.Millisecond)
			defer cancel()
			_, err := peer.Ask(ctx, 1, nil)
			results <- err
			return
		}
		asked <- peer
		_, err := peer.Ask(context.Background(), 1, nil)
		results <- err
	})}
	defer srv.Close()
	client, server := net.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.ServeConn(server)
	}()
	// A raw client: opens two streams and answers no question.
	go io.Copy(io.Discard, client)
	head := func(id uint32, path string) []byte {
		return appendFrameWith(nil, fHeaders, flagEnd, id, func(b []byte) []byte {
			return appendRequestHead(b, &http.Request{Method: "POST", URL: &url.URL{Path: path}, Host: "h", Header: http.Header{}, Body: http.NoBody})
		})
	}
	client.Write(head(1, "/bounded"))
	if err := <-results; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an unanswered Ask with a deadline: %v", err)
	}
	client.Write(head(3, "/unbounded"))
	peer := <-asked
	client.Close()
	if err := <-results; err == nil || !strings.Contains(err.Error(), "connection ended") {
		t.Errorf("an unanswered Ask as the connection ends: %v", err)
	}
	<-served
	if peer.Alive() {
		t.Error("the peer of an ended connection is Alive")
	}
}

// A peer that breaks the protocol loses its connection; the server
// goes on serving others.
func TestProtocolErrorsEndTheConnection(t *testing.T) {
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), nil)
	for name, b := range map[string][]byte{
		"a frame too large":    appendFrame(nil, fData, 0, 1)[:0:0],
		"an unknown type":      appendFrame(nil, 99, 0, 1),
		"an even stream":       appendFrameWith(nil, fHeaders, flagEnd, 2, func(b []byte) []byte { return appendString(appendString(appendString(b, "GET"), "/"), "h") }),
		"a short window frame": appendFrame(nil, fWindow, 0, 1, []byte{1}),
		"a window of nothing":  appendWindow(nil, 1, 0),
		"a window too large":   appendWindow(nil, 1, window+1),
	} {
		if name == "a frame too large" {
			b = []byte{0x7f, 0xff, 0xff, 0xff, fData, 0, 0, 0, 0, 1}
		}
		c, err := net.Dial("tcp", p.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(b)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("%s: the connection did not end: %v", name, err)
		}
		c.Close()
	}
	resp, err := p.do(t, t.Context(), "GET", "/", "", nil)
	if err != nil || readAll(t, resp) != "ok" {
		t.Fatalf("serving after protocol errors: %v", err)
	}
}

// Retire sends new requests over a new connection and closes the old
// one once its stream ends.
func TestRetireMovesToANewConnection(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{}, 1)
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			started <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}), nil)
	held := make(chan error, 1)
	go func() {
		resp, err := p.do(t, t.Context(), "GET", "/hold", "", nil)
		if err == nil {
			readAll(t, resp)
		}
		held <- err
	}()
	<-started
	p.tr.Retire()
	resp, err := p.do(t, t.Context(), "GET", "/", "", nil)
	if err != nil || readAll(t, resp) != "ok" {
		t.Fatalf("after Retire: %v", err)
	}
	if n := p.conns.Load(); n != 2 {
		t.Fatalf("%d connections after Retire, want 2", n)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the stream open at Retire: %v", err)
	}
}

// A stream the peer refused unserved (shutting down) is sent once more
// over a new connection when its body was whole in the first piece; one
// whose body was streamed is not (its start is gone), nor is a second
// refusal.
func TestARefusedStreamIsSentAgainOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "served %d bytes", len(b))
	})}
	defer srv.Close()
	// refuse is how many connections, from now, refuse their streams.
	var refuse atomic.Int64
	var conns sync.WaitGroup
	defer conns.Wait()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if refuse.Add(-1) >= 0 {
				conns.Go(func() {
					defer c.Close()
					fr := frameReader{r: c}
					for {
						f, err := fr.read()
						if err != nil {
							return
						}
						if f.typ == fHeaders {
							c.Write(appendFrame(nil, fReset, 0, f.stream, u32(resetRefused), []byte("refused")))
						}
					}
				})
				continue
			}
			conns.Go(func() { srv.ServeConn(c) })
		}
	}()
	var dials atomic.Int64
	tr := &Transport{Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}
	defer tr.Close()
	do := func(body io.Reader) (string, error) {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://"+ln.Addr().String()+"/", body)
		if body != nil && req.ContentLength == 0 {
			req.ContentLength = -1
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return "", err
		}
		return readAll(t, resp), nil
	}

	refuse.Store(1)
	if got, err := do(strings.NewReader("small")); err != nil || got != "served 5 bytes" {
		t.Fatalf("a small request refused once: %q %v, want it served over a second connection", got, err)
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
	tr.Retire()
	refuse.Store(2)
	if _, err := do(strings.NewReader("small")); !errors.Is(err, ErrRefused) {
		t.Errorf("a request refused twice: %v, want ErrRefused", err)
	}
	tr.Retire()
	refuse.Store(1)
	big := bytes.Repeat([]byte("b"), 3*dataChunk)
	if _, err := do(io.NopCloser(bytes.NewReader(big))); !errors.Is(err, ErrRefused) {
		t.Errorf("a streamed request refused: %v, want ErrRefused (not sent again)", err)
	}
}

// A head this side does not take (one that does not decode, or has more
// values than a head may) refuses its request alone: the connection's
// other streams go on. A request whose header is too large to relay is
// refused before it is sent, saying so.
func TestABadHeadRefusesItsRequestAlone(t *testing.T) {
	hold := make(chan struct{})
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/events" {
			holdStream(w, r, hold)
			io.WriteString(w, "end")
			return
		}
		io.WriteString(w, "ok")
	}), nil)
	events, err := p.do(t, t.Context(), "GET", "/events", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Body.Close()
	h := http.Header{}
	for i := range maxHeaderValues + 1 {
		h.Set(fmt.Sprintf("X-H%d", i), "1")
	}
	if _, err := p.do(t, t.Context(), "GET", "/mcp", "", h); !IsHeadTooLarge(err) {
		t.Errorf("a request of %d header values: %v, want refused as too large", maxHeaderValues+1, err)
	}
	// A head that does not decode, written on the connection as a peer
	// of another version might.
	c := p.conn()
	st, err := c.open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c.w.send(false, func(b []byte) []byte { return appendFrame(b, fHeaders, flagEnd, st.id, []byte{0xff}) })
	<-st.head
	if st.headErr == nil || !strings.Contains(st.headErr.Error(), "does not take") {
		t.Errorf("a head that does not decode: %v, want its stream refused", st.headErr)
	}
	close(hold)
	if got := readAll(t, events); got != "end" {
		t.Errorf("the other stream: %q, want its whole answer", got)
	}
	if n := p.conns.Load(); n != 1 {
		t.Errorf("%d connections, want the one, kept", n)
	}
}

// A request that finds its connection retired or ended as it opens a
// stream is refused unserved (and so sent again over another).
func TestOpeningOnAnEndedConnectionIsRefused(t *testing.T) {
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), nil)
	c, err := p.tr.conn(t.Context(), strings.TrimPrefix(p.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	p.tr.Retire() // no stream open: it closes
	if _, err := c.open(t.Context()); !errors.Is(err, ErrRefused) {
		t.Fatalf("open on a retired connection: %v, want ErrRefused", err)
	}
	<-c.done
	if _, err := c.open(t.Context()); !errors.Is(err, ErrRefused) {
		t.Fatalf("open on an ended connection: %v, want ErrRefused", err)
	}
}

// The requests of one connection share one Peer (what a handler may key
// by, to send a connection's questions together), and those of another
// connection have another.
func TestPeerIsTheConnection(t *testing.T) {
	peers := make(chan *Peer, 3)
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peers <- PeerOf(r.Context())
	}), nil)
	for i := range 3 {
		if i == 2 {
			p.tr.Retire() // the next request goes over a new connection
		}
		resp, err := p.do(t, t.Context(), "GET", "/", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	a, b, c := <-peers, <-peers, <-peers
	if a == nil || a != b {
		t.Errorf("two requests of one connection: peers %p and %p, want one", a, b)
	}
	if c == nil || c == a {
		t.Errorf("a request of another connection: peer %p, the first's %p; want another", c, a)
	}
	if n := p.conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// A question too large for a frame is refused where it is asked, never
// sent: the link, which a peer's oversized frame would end, goes on.
func TestAskTooLargeIsNotSent(t *testing.T) {
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer := PeerOf(r.Context())
		if _, err := peer.Ask(r.Context(), 7, make([]byte, MaxQuestion+1)); err == nil || !strings.Contains(err.Error(), "over the") {
			t.Errorf("an oversized question: %v, want refused", err)
		}
		a, err := peer.Ask(r.Context(), 7, make([]byte, MaxQuestion))
		if err != nil {
			t.Errorf("the largest question: %v", err)
		}
		fmt.Fprint(w, len(a))
	}), func(tr *Transport) {
		tr.Answer = func(kind byte, q []byte) []byte { return []byte{byte(len(q) >> 16)} }
	})
	resp, err := p.do(t, t.Context(), "POST", "/", "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "1" {
		t.Errorf("the answer %q, want the largest question answered", got)
	}
}

// Shutdowns called at once all return when the last stream ends, with no
// context to cut them (each waits for the server to be idle, not for a
// wake-up another may take); one with no connection returns at once.
func TestConcurrentShutdownsAllReturn(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{}, 1)
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		io.WriteString(w, "done")
	}), nil)
	held := p.doAsync(t, "POST", "/hold", "x")
	<-started
	const n = 4
	shut := make(chan struct{}, n)
	for range n {
		go func() {
			p.srv.Shutdown(context.Background())
			shut <- struct{}{}
		}()
	}
	close(release)
	if got := <-held; got != "done" {
		t.Errorf("the held stream: %q, want it finished", got)
	}
	for i := range n {
		select {
		case <-shut:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d shutdowns never returned", n-i, n)
		}
	}
	idle := &Server{}
	idle.Shutdown(context.Background()) // no connection: at once
}
