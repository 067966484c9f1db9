package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// recordedInit initializes a session on h without a network and
// returns its id.
func recordedInit(t *testing.T, h *StreamableHandler) string {
	t.Helper()
	rec := serveRecorded(h, "POST", "", httpInit)
	sid := rec.Header().Get("Mcp-Session-Id")
	if rec.Code != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s", rec.Code, rec.Body)
	}
	return sid
}

const recordedPing = `{"jsonrpc":"2.0","id":1,"method":"ping"}`

// recordedStream opens sid's GET stream on h until the returned stop is
// called; stop returns once the stream's handler has returned. ended
// reports whether it returned before stop (the server ended it).
func recordedStream(t *testing.T, h *StreamableHandler, sid string) (stop func(), ended func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := httptest.NewRequestWithContext(ctx, "GET", "/mcp", nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	synctest.Wait()
	if !hasGET(h, sid) {
		t.Fatalf("session %s has no GET stream open", sid)
	}
	return func() { cancel(); <-done }, func() bool {
		synctest.Wait()
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// At the bound an initialize evicts the least recently active session:
// a request's end and a GET stream's opening are activity, a stream's
// staying open is not. The evicted session's next request gets 404, its
// GET stream ends, and the endpoint closes it once.
func TestSessionLimitEvictsLeastRecentlyActive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHTTPFake()
		h := NewStreamableHandler(f, HTTPOptions{MaxSessions: 3})
		defer h.Close()
		step := func() { time.Sleep(time.Second) }
		a := recordedInit(t, h)
		step()
		b := recordedInit(t, h)
		step()
		c := recordedInit(t, h)
		step()
		if rec := serveRecorded(h, "POST", a, recordedPing); rec.Code != 200 {
			t.Fatalf("ping a: %d", rec.Code)
		}
		step()
		// Least recently active: b, then c, then a.
		d := recordedInit(t, h)
		if rec := serveRecorded(h, "POST", b, recordedPing); rec.Code != http.StatusNotFound {
			t.Fatalf("b, the least recently active, after an initialize at the bound: %d, want 404", rec.Code)
		}
		if got := <-f.closedCh; got.ID != b {
			t.Fatalf("the endpoint closed %q, want b %q", got.ID, b)
		}
		step()
		stopC, cEnded := recordedStream(t, h, c) // c is active now, then idle with its stream open
		step()
		if rec := serveRecorded(h, "POST", d, recordedPing); rec.Code != 200 {
			t.Fatalf("ping d: %d", rec.Code)
		}
		step()
		e := recordedInit(t, h) // a is the least recently active now
		if rec := serveRecorded(h, "POST", a, recordedPing); rec.Code != http.StatusNotFound {
			t.Fatalf("a after the second eviction: %d, want 404", rec.Code)
		}
		if cEnded() {
			t.Fatal("c's stream ended while a was evicted")
		}
		step()
		recordedInit(t, h) // c: its stream's opening is older than d's ping
		if !cEnded() {
			t.Fatal("c, evicted, still has its GET stream")
		}
		stopC()
		for _, sid := range []string{d, e} {
			if rec := serveRecorded(h, "POST", sid, recordedPing); rec.Code != 200 {
				t.Fatalf("%s after the evictions: %d, want 200", sid, rec.Code)
			}
		}
		if n := f.closed.Load(); n != 3 {
			t.Fatalf("the endpoint closed %d sessions, want 3 (each evicted one once)", n)
		}
		if n := h.limit.Evictions(EvictLimit); n != 3 {
			t.Fatalf("%d evictions counted, want 3", n)
		}
		if rec := serveRecorded(h, "DELETE", c, ""); rec.Code != http.StatusNotFound {
			t.Fatalf("DELETE of an evicted session: %d, want 404", rec.Code)
		}
		if n := f.closed.Load(); n != 3 {
			t.Fatalf("a DELETE after the eviction closed the session again: %d closes", n)
		}
	})
}

// holdRecorded runs a wait call of ms on sid in the background, returning
// once it is in flight; the returned wait gives its reply.
func holdRecorded(t *testing.T, h *StreamableHandler, sid string, ms int) (wait func() *httptest.ResponseRecorder) {
	t.Helper()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		done <- serveRecorded(h, "POST", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"wait","arguments":{"ms":%d}}}`, ms))
	}()
	synctest.Wait()
	if activeOf(h, sid) != 1 {
		t.Fatalf("the call on %s is not in flight", sid)
	}
	return func() *httptest.ResponseRecorder { return <-done }
}

// A session with a request in flight is never evicted, however long ago
// it was last active; with every session busy, an initialize and a
// listen are refused with 503 and a JSON-RPC error naming the bound;
// once a request ends its session can be evicted again. A listen, which
// is a request in flight, is never evicted either.
func TestSessionLimitNeverEvictsARequestInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHTTPFake()
		h := NewStreamableHandler(f, HTTPOptions{MaxSessions: 2})
		defer h.Close()
		a := recordedInit(t, h)
		time.Sleep(time.Second)
		b := recordedInit(t, h)
		time.Sleep(time.Second)
		waitA := holdRecorded(t, h, a, 60_000) // a, the oldest, is busy
		time.Sleep(time.Second)
		c := recordedInit(t, h)
		if rec := serveRecorded(h, "POST", b, recordedPing); rec.Code != http.StatusNotFound {
			t.Fatalf("b, idle: %d, want 404 (evicted in place of a, busy)", rec.Code)
		}
		waitC := holdRecorded(t, h, c, 30_000)
		rec := serveRecorded(h, "POST", "", httpInit)
		var m rpc.Message
		if rec.Code != http.StatusServiceUnavailable || json.Unmarshal(rec.Body.Bytes(), &m) != nil || m.Error == nil ||
			m.Error.Code != rpc.LimitReached || !strings.Contains(m.Error.Message, "maxSessions is 2") {
			t.Fatalf("an initialize with every session busy: %d %s, want 503 and a LimitReached error naming maxSessions 2", rec.Code, rec.Body)
		}
		listen := `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` + modernMeta(`{}`) + `}}`
		req := httptest.NewRequest("POST", "/mcp", strings.NewReader(listen))
		for k, v := range modernHeaders("subscriptions/listen", "") {
			req.Header.Set(k, v)
		}
		req.Header.Set("Accept", httpAccept)
		lrec := httptest.NewRecorder()
		h.ServeHTTP(lrec, req)
		if lrec.Code != http.StatusServiceUnavailable {
			t.Fatalf("a listen with every session busy: %d %s, want 503", lrec.Code, lrec.Body)
		}
		if got := waitC(); got.Code != 200 || !strings.Contains(got.Body.String(), "waited") {
			t.Fatalf("c's call, held through a refused initialize: %d %s", got.Code, got.Body)
		}
		// c's call ended 30 s in: c is idle, a still busy.
		recordedInit(t, h)
		if rec := serveRecorded(h, "POST", c, recordedPing); rec.Code != http.StatusNotFound {
			t.Fatalf("c, idle again: %d, want 404", rec.Code)
		}
		if got := waitA(); got.Code != 200 || !strings.Contains(got.Body.String(), "waited") {
			t.Fatalf("a's call, held through three admissions at the bound: %d %s", got.Code, got.Body)
		}
		if rec := serveRecorded(h, "POST", a, recordedPing); rec.Code != 200 {
			t.Fatalf("a after its call: %d, want 200", rec.Code)
		}
	})
}

// Two admissions at the bound never evict the same place, the places
// held never exceed the bound, a place is never evicted with a request
// in flight, and every place evicted is ended once: many goroutines
// admit, act and leave at once (run with -race).
func TestSessionLimitConcurrentAdmissions(t *testing.T) {
	const bound, workers, rounds = 8, 32, 300
	l := NewSessionLimit(bound)
	l.SetLogger(nil)
	var held atomic.Int64 // places admitted and not yet left or evicted
	var over, busyEvicted, twice atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range rounds {
				o := &countingOwner{held: &held, busy: &busyEvicted, twice: &twice}
				o.p.init(l, o, true)
				if !l.admit(&o.p) {
					continue
				}
				if held.Add(1) > bound {
					over.Add(1)
				}
				o.p.exit() // the initialize ends
				for range rng.IntN(4) {
					if o.p.enter() {
						o.p.exit()
					}
				}
				if rng.IntN(2) == 0 {
					o.leave()
				}
			}
		})
	}
	wg.Wait()
	if n := over.Load(); n != 0 {
		t.Errorf("the places held exceeded the bound %d times", n)
	}
	if n := busyEvicted.Load(); n != 0 {
		t.Errorf("%d places evicted with a request in flight", n)
	}
	if n := twice.Load(); n != 0 {
		t.Errorf("%d places evicted twice, or evicted and left", n)
	}
	if got, want := int64(l.Open()), held.Load(); got != want {
		t.Errorf("the limit counts %d places, %d are held", got, want)
	}
}

// countingOwner holds a place in TestSessionLimitConcurrentAdmissions.
type countingOwner struct {
	p                 Place
	ended             atomic.Bool
	held, busy, twice *atomic.Int64
}

func (o *countingOwner) evict() {
	if o.p.state.Load()&placeReqMask != 0 {
		o.busy.Add(1)
	}
	if o.ended.Swap(true) {
		o.twice.Add(1)
	}
	o.held.Add(-1)
}

// leave leaves the place unless it was evicted. It counts itself out
// before its place can be taken over.
func (o *countingOwner) leave() {
	o.held.Add(-1)
	if !o.p.close() {
		o.held.Add(1) // claimed by an eviction: its evict counts it out
		return
	}
	if o.ended.Swap(true) {
		o.twice.Add(1)
	}
	o.p.leave()
}

// Clients initializing at once at the bound of one handler, too few to
// keep every session busy (each may have two: the initialize it sent, and
// the one whose answer it read before the handler counted it out): every
// initialize is admitted, the handler never holds more sessions than the
// bound, and the endpoint closes each evicted session once.
func TestSessionLimitConcurrentInitializes(t *testing.T) {
	const bound, clients, each = 8, 3, 100
	s := newHTTPTestServer(t, HTTPOptions{MaxSessions: bound})
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range each {
				resp, err := s.srv.Client().Post(s.url, "application/json", strings.NewReader(httpInit))
				if err != nil || resp.StatusCode != 200 {
					refused.Add(1)
				}
				if err == nil {
					resp.Body.Close()
				}
				if n := s.h.Sessions(); n > bound {
					t.Errorf("%d sessions held, over the bound of %d", n, bound)
				}
			}
		})
	}
	wg.Wait()
	if n := refused.Load(); n != 0 {
		t.Fatalf("%d initializes refused", n)
	}
	if got, want := int(s.fake.closed.Load()), clients*each-s.h.Sessions(); got != want {
		t.Fatalf("the endpoint closed %d sessions, want %d (each evicted one once)", got, want)
	}
	if got, want := s.h.limit.Evictions(EvictLimit), uint64(clients*each-bound); got != want {
		t.Fatalf("%d evictions counted, want %d", got, want)
	}
}

// A session that has sent nothing since initialize — notifications/
// initialized and a GET stream are not something sent — is closed a
// minute after it, with the default options; a request or a response
// after initialize makes it an ordinary session, idle-expired after the
// session timeout.
func TestUnusedSessionExpiresAfterAMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHTTPFake()
		h := NewStreamableHandler(f, HTTPOptions{})
		defer h.Close()
		initialized := `{"jsonrpc":"2.0","method":"notifications/initialized"}`
		silent := recordedInit(t, h)
		serveRecorded(h, "POST", silent, initialized)
		streaming := recordedInit(t, h)
		serveRecorded(h, "POST", streaming, initialized)
		stopStream, streamEnded := recordedStream(t, h, streaming)
		asked := recordedInit(t, h)
		serveRecorded(h, "POST", asked, initialized)
		if rec := serveRecorded(h, "POST", asked, recordedPing); rec.Code != 200 {
			t.Fatalf("ping: %d", rec.Code)
		}
		answered := recordedInit(t, h)
		serveRecorded(h, "POST", answered, `{"jsonrpc":"2.0","id":"s-1","result":{}}`) // a response to a server request

		if n := sessionsIn(h, UnusedSessionTimeout-time.Second); n != 4 {
			t.Fatalf("%d sessions a second before the minute, want 4", n)
		}
		sessionsIn(h, 2*time.Second)
		for sid, want := range map[string]int{silent: 404, streaming: 404, asked: 200, answered: 200} {
			if rec := serveRecorded(h, "POST", sid, recordedPing); rec.Code != want {
				t.Errorf("a second after the minute: %d, want %d", rec.Code, want)
			}
		}
		if !streamEnded() {
			t.Error("the unused session's GET stream is still open")
		}
		stopStream()
		if n := h.limit.Evictions(EvictUnused); n != 2 {
			t.Errorf("%d unused sessions counted, want 2", n)
		}
		if n := sessionsIn(h, DefaultSessionTimeout-time.Second); n != 2 {
			t.Fatalf("%d sessions a second before the session timeout, want 2", n)
		}
		if n := sessionsIn(h, 2*time.Second); n != 0 {
			t.Fatalf("%d sessions after the session timeout, want 0", n)
		}
		if n := h.limit.Evictions(EvictIdle); n != 2 {
			t.Errorf("%d idle sessions counted, want 2", n)
		}
		if n := f.closed.Load(); n != 4 {
			t.Errorf("the endpoint closed %d sessions, want 4", n)
		}
	})
}

// sessionsIn reports h's sessions once d has passed (in a synctest
// bubble) and everything due by then is done.
func sessionsIn(h *StreamableHandler, d time.Duration) int {
	time.Sleep(d)
	synctest.Wait()
	return h.Sessions()
}

// Evictions are logged once per burst, with their count: nothing while
// the burst goes on, one line 10 s after its last eviction; a burst that
// goes on for minutes gets a line a minute, counting the evictions since
// the line before.
func TestEvictionsLoggedOncePerBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logged testserver.Buffer
		l := NewSessionLimit(1)
		l.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
		h := NewStreamableHandler(newHTTPFake(), HTTPOptions{SessionLimit: l})
		defer h.Close()
		for range 50 {
			recordedInit(t, h)
		}
		time.Sleep(evictQuiet - time.Millisecond)
		synctest.Wait()
		if n := len(logLines(&logged)); n != 0 {
			t.Fatalf("%d lines logged during the burst, want none yet", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if lines := logLines(&logged); len(lines) != 1 || !strings.Contains(lines[0], "limit=49") || !strings.Contains(lines[0], "maxSessions=1") {
			t.Fatalf("after the burst: %q, want one line counting 49 evictions at maxSessions 1", lines)
		}

		// A flood that goes on: an eviction every 5 s for 3 minutes.
		for range 36 {
			recordedInit(t, h)
			time.Sleep(5 * time.Second)
		}
		time.Sleep(evictQuiet)
		synctest.Wait()
		lines := logLines(&logged)[1:]
		if len(lines) < 3 || len(lines) > 4 {
			t.Fatalf("a 3-minute burst logged %d lines, want 3 or 4 (one a minute): %q", len(lines), lines)
		}
		total := 0
		for _, line := range lines {
			var n int
			if _, err := fmt.Sscanf(line[strings.Index(line, "limit=")+len("limit="):], "%d", &n); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			total += n
		}
		if total != 36 {
			t.Fatalf("the lines count %d evictions, want 36", total)
		}
	})
}

// logLines are the lines written to b.
func logLines(b *testserver.Buffer) []string {
	s := strings.TrimSpace(b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// An evicted session ends as a deleted one does, once: its GET stream
// ends, its per-session server's instance stops, its resource
// subscription goes, its next request gets 404 — with the fleet and
// servers behind the handler, on the default options but the bound.
func TestEvictedSessionEndsAsDeleteDoes(t *testing.T) {
	w := newWorld(t, `{"p":{"command":"$FIXTURE","sharing":"per-session"},"c":{"command":"$CONFORMANCE","protocol":"legacy"}}`)
	for _, how := range []string{"evicted", "deleted"} {
		t.Run(how, func(t *testing.T) {
			s := gatewayHTTP(t, w.gw.Aggregate(), HTTPOptions{MaxSessions: 1})
			sid := s.initialize()
			s.h.mu.RLock()
			key := s.h.sessions[sid].sess.Key()
			s.h.mu.RUnlock()
			const uri = "test://watched-resource"
			for i, call := range []string{
				`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"p__pid","arguments":{}}}`,
				`{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"` + uri + `"}}`,
			} {
				resp := s.do("POST", sid, call, nil)
				if m := decodeBody(t, resp); resp.StatusCode != 200 || m.Error != nil {
					t.Fatalf("request %d: %d %s", i, resp.StatusCode, m.Encode())
				}
			}
			if n := w.fleet.Get("p").Status().Sessions; n != 1 {
				t.Fatalf("%d per-session instances, want the session's", n)
			}
			if subs := w.gw.interests.Subscribers(w.fleet.Get("c"), uri); len(subs) != 1 || subs[0] != key {
				t.Fatalf("subscribers %v, want the session %s", subs, key)
			}
			get, _ := s.openGET(sid, "")
			defer get.Body.Close()
			// The answers are out before the handler counts the
			// requests out.
			waitFor(t, "the session's requests to be counted out", func() bool { return requestsOf(s.h, sid) == 0 })

			switch how {
			case "evicted":
				s.initialize() // at the bound of 1
			case "deleted":
				if st := s.status("DELETE", sid, "", nil); st != http.StatusNoContent {
					t.Fatalf("DELETE: %d", st)
				}
			}
			if b, err := io.ReadAll(get.Body); err != nil {
				t.Fatalf("the GET stream: %v after %q", err, b)
			}
			waitFor(t, "the per-session instance to stop", func() bool { return w.fleet.Get("p").Status().Sessions == 0 })
			if subs := w.gw.interests.Subscribers(w.fleet.Get("c"), uri); len(subs) != 0 {
				t.Fatalf("subscribers %v after the session ended", subs)
			}
			if w.gw.reg.sessionByKey(key) != nil {
				t.Fatal("the gateway still has the session")
			}
			if st := s.status("POST", sid, recordedPing, nil); st != http.StatusNotFound {
				t.Fatalf("a request of the %s session: %d, want 404", how, st)
			}
			if st := s.status("DELETE", sid, "", nil); st != http.StatusNotFound {
				t.Fatalf("DELETE of the %s session: %d, want 404", how, st)
			}
		})
	}
}

// A socket session (the stdio front in a place of AdmitConn) is under the
// same rule: with a request in flight it is not evicted, and an
// admission at the bound is refused naming maxSessions; idle, it is
// evicted to make room, its client told so in a notifications/message
// before its connection ends, and Serve returns ErrSessionEvicted.
func TestSocketSessionEvictedIsTold(t *testing.T) {
	l := NewSessionLimit(1)
	l.SetLogger(nil)
	p, err := l.AdmitConn()
	if err != nil {
		t.Fatal(err)
	}
	inR, stdin := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- StdioOptions{Place: p}.Serve(context.Background(), newHTTPFake(), inR, outW)
		outW.Close()
	}()
	defer stdin.Close()
	out := bufio.NewReader(outR)
	roundTrip := func(line string) string {
		t.Helper()
		io.WriteString(stdin, line+"\n")
		got, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return got
	}
	roundTrip(httpInit)
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait","arguments":{"ms":300}}}`+"\n")
	waitFor(t, "the call to be in flight", func() bool { return p.state.Load()&placeReqMask == 1 })
	if _, err := l.AdmitConn(); !errors.Is(err, ErrSessionLimit) || !strings.Contains(err.Error(), "maxSessions is 1") {
		t.Fatalf("an admission while the only session has a call in flight: %v, want ErrSessionLimit naming maxSessions 1", err)
	}
	if got, _ := out.ReadString('\n'); !strings.Contains(got, "waited") {
		t.Fatalf("the call held through the refused admission: %q", got)
	}
	waitFor(t, "the call to end", func() bool { return p.state.Load()&placeReqMask == 0 })
	next, err := l.AdmitConn()
	if err != nil {
		t.Fatalf("an admission with the session idle: %v", err)
	}
	defer next.Release()
	notice, err := out.ReadString('\n')
	m, derr := rpc.Decode([]byte(notice))
	if err != nil || derr != nil || m.Method != "notifications/message" || !strings.Contains(string(m.Params), `"level":"error"`) ||
		!strings.Contains(string(m.Params), "maxSessions (1)") {
		t.Fatalf("the evicted session's client got %q (%v), want a notifications/message naming maxSessions (1)", notice, err)
	}
	if rest, err := io.ReadAll(out); err != nil || len(rest) != 0 {
		t.Fatalf("after the notice: %q %v, want the end of the output", rest, err)
	}
	if err := <-served; !errors.Is(err, ErrSessionEvicted) {
		t.Fatalf("Serve: %v, want ErrSessionEvicted", err)
	}
	p.Release() // as the socket's server does once the connection closed: nothing more to give back
	if n := l.Open(); n != 1 {
		t.Fatalf("%d places held, want the new session's", n)
	}
}

// benchOwner is a place's holder in the benchmarks: evicting it does
// nothing more.
type benchOwner struct{ p Place }

func (*benchOwner) evict() {}

// fullLimit is a limit of n places, all held by idle sessions.
func fullLimit(b *testing.B, n int) (*SessionLimit, []*benchOwner) {
	l := NewSessionLimit(n)
	l.SetLogger(nil)
	held := make([]*benchOwner, n)
	for i := range held {
		o := &benchOwner{}
		o.p.init(l, o, true)
		if !l.admit(&o.p) {
			b.Fatal("not admitted under the bound")
		}
		o.p.exit()
		held[i] = o
	}
	return l, held
}

// What an admission at the bound costs: it evicts the least recently
// active session, with requests coming and going on others meanwhile
// (each makes its heap entry stale); O(log n) in the sessions held, not
// a scan — compare n=1000 with n=100000.
func BenchmarkSessionAdmitAtBound(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			l, held := fullLimit(b, n)
			rng := rand.New(rand.NewPCG(1, 2))
			b.ResetTimer()
			for i := range b.N {
				if o := held[rng.IntN(n)]; o.p.enter() { // a request elsewhere
					o.p.exit()
				}
				o := &benchOwner{}
				o.p.init(l, o, true)
				if !l.admit(&o.p) {
					b.Fatal("refused with idle sessions")
				}
				o.p.exit()
				held[i%n] = o
			}
		})
	}
}

// What an admission refused at the bound costs when every session has a
// request in flight: after the first search parks them all, nothing.
func BenchmarkSessionAdmitAllBusy(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			l, held := fullLimit(b, n)
			for _, o := range held {
				o.p.enter()
			}
			b.ResetTimer()
			for range b.N {
				var o benchOwner
				o.p.init(l, &o, true)
				if l.admit(&o.p) {
					b.Fatal("admitted with every session busy")
				}
			}
		})
	}
}

// The baseline of BenchmarkSessionAdmitAtBound: what finding the least
// recently active idle session by a scan of them all would cost.
func BenchmarkSessionScanBaseline(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			_, held := fullLimit(b, n)
			b.ResetTimer()
			for range b.N {
				var oldest *benchOwner
				for _, o := range held {
					if o.p.state.Load()&placeReqMask == 0 && (oldest == nil || o.p.last.Load() < oldest.p.last.Load()) {
						oldest = o
					}
				}
				oldest.p.touch()
			}
		})
	}
}
