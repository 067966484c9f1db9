package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// unknownNamed is the routers' unknown-server handler in these tests: a
// 404 whose body names the server asked for.
var unknownNamed = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, "no server "+r.PathValue("name"))
})

// routerWorld is a router over a gateway of kept servers (their
// resources/read held until k.hold is closed), with the session limit
// limit. The router closes when the test ends, before the fleet.
type routerWorld struct {
	t     *testing.T
	r     *ServerRouter
	g     *Gateway
	f     *fleet.Fleet
	k     *keptServers
	limit *SessionLimit
}

// keptE is a third kept server.
const keptE = `"e":{"command":"fake-e","idleTimeout":"1h"}`

// newRouterWorld is a routerWorld of the kept servers servers (a JSON
// object's members), a and c if none.
func newRouterWorld(t *testing.T, servers ...string) *routerWorld {
	t.Helper()
	if len(servers) == 0 {
		servers = []string{keptA, keptC}
	}
	k := newKeptServers(t)
	g, f := cachedWorld(t, `{`+strings.Join(servers, ",")+`}`, k.connector(), nil, io.Discard, nil)
	limit := NewSessionLimit(10)
	limit.SetLogger(nil)
	r := NewServerRouter(g, HTTPOptions{SessionLimit: limit}, unknownNamed)
	t.Cleanup(r.Close)
	return &routerWorld{t: t, r: r, g: g, f: f, k: k, limit: limit}
}

// do sends the router a request for the server name, in session sid
// ("": none), and returns the answer.
func (w *routerWorld) do(method, name, sid, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "/servers/"+name+"/mcp", strings.NewReader(body))
	req.Header.Set("Accept", httpAccept)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	rec := httptest.NewRecorder()
	w.r.ServeNamed(rec, req, name)
	return rec
}

// open opens a session on the server name's endpoint.
func (w *routerWorld) open(name string) string {
	w.t.Helper()
	rec := w.do("POST", name, "", httpInit)
	sid := rec.Header().Get("Mcp-Session-Id")
	if rec.Code != http.StatusOK || sid == "" {
		w.t.Fatalf("initialize on %s: %d %s", name, rec.Code, rec.Body)
	}
	return sid
}

// ping reports the status of a ping in session sid on the server name's
// endpoint, and whether the unknown handler answered it.
func (w *routerWorld) ping(name, sid string) (int, bool) {
	rec := w.do("POST", name, sid, recordedPing)
	return rec.Code, rec.Body.String() == "no server "+name
}

// served fails the test unless session sid of the server name is served.
func (w *routerWorld) served(name, sid, when string) {
	w.t.Helper()
	if code, unknown := w.ping(name, sid); code != http.StatusOK || unknown {
		w.t.Fatalf("%s: a ping in the session of %s got %d (unknown server: %v), want it served", when, name, code, unknown)
	}
}

// gone fails the test unless a ping in session sid of the server name
// gets the unknown server's 404.
func (w *routerWorld) gone(name, sid, when string) {
	w.t.Helper()
	if code, unknown := w.ping(name, sid); code != http.StatusNotFound || !unknown {
		w.t.Fatalf("%s: a ping in the session of %s got %d (unknown server: %v), want the unknown server's 404", when, name, code, unknown)
	}
}

// stream opens session sid's GET stream on the server name's endpoint;
// ended (which waits for the bubble to settle) reports whether the
// router's side ended it. The stream is stopped when the test ends.
func (w *routerWorld) stream(name, sid string) (ended func() bool) {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := httptest.NewRequestWithContext(ctx, "GET", "/servers/"+name+"/mcp", nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		w.r.ServeNamed(httptest.NewRecorder(), req, name)
	}()
	w.t.Cleanup(func() { cancel(); <-done })
	ended = func() bool {
		synctest.Wait()
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	if ended() {
		w.t.Fatalf("the GET stream of a session of %s ended at once", name)
	}
	return ended
}

// held starts a resources/read in session sid of the server name, which
// the kept server holds until k.hold is closed; the channel gets its
// answer.
func (w *routerWorld) held(name, sid string) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		out <- w.do("POST", name, sid, `{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"test://x"}}`)
	}()
	synctest.Wait() // it waits in the server
	return out
}

// reload applies the mcpServers servers (a JSON object's members) to the
// fleet and, as serve does, syncs the router once they are served. It
// returns once they are, with the channels closed once each removed
// server's drain has ended, by name; reloaded gets the reload's error
// once its drains have ended.
func (w *routerWorld) reload(servers string) (removed map[string]<-chan struct{}, reloaded <-chan error) {
	w.t.Helper()
	cfg, err := config.Parse([]byte(`{"defaults":{"prefix":""},"mcpServers":{`+servers+`}}`), "test.json", config.LoadOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	applied := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := w.f.Reload(context.Background(), cfg, false, func(ap fleet.Applied) {
			w.r.Sync(ap.Removed)
			removed = ap.Removed
			close(applied)
		})
		done <- err
	}()
	<-applied
	return removed, done
}

// handlerOf is the router's handler of the server name now (nil: none).
func (w *routerWorld) handlerOf(name string) *StreamableHandler {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.byName[name]
}

// retiring is how many handlers of removed servers the router still has.
func (w *routerWorld) retiring() int {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	n := 0
	for _, hs := range w.r.gone {
		n += len(hs)
	}
	return n
}

// isClosed reports whether h was closed.
func isClosed(h *StreamableHandler) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.closed
}

// A server's handler is made on its first request, and serves every
// session of it; a name no server has gets the unknown handler, the name
// given to it as the path value, and no handler.
func TestServerRouterMakesAHandlerOnFirstRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newRouterWorld(t)
		if h := w.handlerOf("a"); h != nil {
			t.Fatal("a handler made before any request")
		}
		rec := w.do("POST", "nope", "", httpInit)
		if rec.Code != http.StatusNotFound || rec.Body.String() != "no server nope" {
			t.Fatalf("an unknown server: %d %q, want the unknown handler's 404 naming it", rec.Code, rec.Body)
		}
		if w.handlerOf("nope") != nil {
			t.Fatal("a handler made for an unknown server")
		}
		one := w.open("a")
		h := w.handlerOf("a")
		if h == nil || !h.HasSession(one) {
			t.Fatal("the first request made no handler, or another one served it")
		}
		two := w.open("a")
		if w.handlerOf("a") != h || !h.HasSession(two) {
			t.Fatal("a second session of a got another handler")
		}
		if w.handlerOf("c") != nil {
			t.Fatal("a request to a made a handler for c")
		}
		// Through ServeHTTP, the name is the path value.
		req := httptest.NewRequest("POST", "/servers/a/mcp", strings.NewReader(recordedPing))
		req.Header.Set("Accept", httpAccept)
		req.Header.Set("Mcp-Session-Id", one)
		req.SetPathValue("name", "a")
		got := httptest.NewRecorder()
		w.r.ServeHTTP(got, req)
		if got.Code != http.StatusOK {
			t.Fatalf("a ping through ServeHTTP: %d %s", got.Code, got.Body)
		}
	})
}

// A removed server's handler still serves the sessions it has until the
// server's drain has ended and RetiredGrace more — however long the
// drain takes — while a new session (or a session it does not have) gets
// the unknown server's 404 at once. Then the handler is closed: its
// sessions end, their requests get the 404.
func TestServerRouterRetiresARemovedServersHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newRouterWorld(t)
		sid := w.open("c")
		old := w.handlerOf("c")
		ended := w.stream("c", sid)
		read := w.held("c", sid) // the drain waits for it

		removed, reloaded := w.reload(keptA)
		if rec := w.do("POST", "c", "", httpInit); rec.Code != http.StatusNotFound || rec.Body.String() != "no server c" {
			t.Fatalf("a new session on the removed server: %d %q, want the unknown server's 404", rec.Code, rec.Body)
		}
		w.gone("c", "another", "a session the removed server's handler does not have")
		if w.handlerOf("c") != nil || w.retiring() != 1 {
			t.Fatalf("after the removal: handler %v, %d retiring, want none and 1", w.handlerOf("c"), w.retiring())
		}
		w.served("c", sid, "right after the removal")

		time.Sleep(5 * RetiredGrace) // the drain has not ended
		synctest.Wait()
		w.served("c", sid, "while the drain goes on")
		if ended() || isClosed(old) {
			t.Fatal("the removed server's handler was closed before its drain ended")
		}

		close(w.k.hold)
		if rec := <-read; rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"result"`) {
			t.Fatalf("the read the drain waited for: %d %s", rec.Code, rec.Body)
		}
		<-removed["c"]
		drained := time.Now()
		synctest.Wait()
		time.Sleep(RetiredGrace - time.Nanosecond)
		synctest.Wait()
		if ended() || isClosed(old) {
			t.Fatalf("the removed server's handler was closed %v after its drain, before RetiredGrace", time.Since(drained))
		}
		w.served("c", sid, "within RetiredGrace of the drain's end")

		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if !ended() || !isClosed(old) || w.retiring() != 0 {
			t.Fatalf("RetiredGrace after the drain: stream ended %v, handler closed %v, %d retiring; want ended, closed, none", ended(), isClosed(old), w.retiring())
		}
		w.gone("c", sid, "after the handler's retirement")
		if err := <-reloaded; err != nil {
			t.Fatal(err)
		}
	})
}

// Close, while the handlers of removed servers wait for their drains or
// for RetiredGrace after it, ends them at once: it returns, with no time
// passed, once every handler is closed — the retiring ones included —
// and their sessions ended. Nothing the router started outlives it.
func TestServerRouterCloseEndsRetiringHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newRouterWorld(t, keptA, keptC, keptE)
		sidA, sidC, sidE := w.open("a"), w.open("c"), w.open("e")
		live, draining, grace := w.handlerOf("a"), w.handlerOf("c"), w.handlerOf("e")
		endedA, endedC, endedE := w.stream("a", sidA), w.stream("c", sidC), w.stream("e", sidE)
		read := w.held("c", sidC) // c's drain waits for it
		removed, reloaded := w.reload(keptA)
		<-removed["e"] // e's drain has ended: its handler waits out RetiredGrace
		synctest.Wait()
		w.served("c", sidC, "after the removal")
		w.served("e", sidE, "after the removal")
		if w.retiring() != 2 {
			t.Fatalf("%d handlers retiring, want 2", w.retiring())
		}

		start := time.Now()
		w.r.Close()
		if d := time.Since(start); d != 0 {
			t.Fatalf("Close took %v: it waited for a drain or for RetiredGrace", d)
		}
		// Close has returned: no waiting for anything here.
		for name, h := range map[string]*StreamableHandler{"a": live, "c": draining, "e": grace} {
			if !isClosed(h) {
				t.Errorf("Close returned with the handler of %s open", name)
			}
		}
		if n := w.retiring(); n != 0 {
			t.Errorf("Close returned with %d handlers retiring", n)
		}
		if !endedA() || !endedC() || !endedE() {
			t.Fatalf("after Close: streams ended: a %v, c %v, e %v; want all", endedA(), endedC(), endedE())
		}
		if rec := <-read; rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"error"`) {
			t.Fatalf("the read in flight at Close: %d %s, want it cancelled", rec.Code, rec.Body)
		}
		w.gone("a", sidA, "after Close")
		if rec := w.do("POST", "a", "", httpInit); rec.Code != http.StatusNotFound || w.handlerOf("a") != nil {
			t.Fatalf("a new session after Close: %d %s, want the unknown server's 404 and no handler", rec.Code, rec.Body)
		}
		w.r.Sync(nil) // a reload after Close changes nothing
		w.r.Close()   // nor does Close again
		if err := <-reloaded; err != nil {
			t.Fatal(err)
		}
	})
}

// A server removed and added again under its name is another server: its
// first request makes it a fresh handler, while the sessions of the
// removed one's handler, which drains, still reach that one.
func TestServerRouterReaddedServerGetsAFreshHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newRouterWorld(t)
		oldSid := w.open("c")
		old := w.handlerOf("c")
		read := w.held("c", oldSid)
		removed, reloaded := w.reload(keptA)
		_, added := w.reload(keptA + `,` + keptC)
		if err := <-added; err != nil {
			t.Fatal(err)
		}

		newSid := w.open("c")
		fresh := w.handlerOf("c")
		if fresh == nil || fresh == old {
			t.Fatal("the server added again was given the removed one's handler")
		}
		if fresh.HasSession(oldSid) || !old.HasSession(oldSid) || old.HasSession(newSid) {
			t.Fatal("the sessions are not each on its own server's handler")
		}
		w.served("c", oldSid, "the removed server's session, the name added again")
		w.served("c", newSid, "the added server's session")

		close(w.k.hold)
		<-read
		<-removed["c"]
		time.Sleep(RetiredGrace)
		synctest.Wait()
		if !isClosed(old) || isClosed(fresh) {
			t.Fatalf("after the drain and RetiredGrace: the removed server's handler closed %v, the added one's %v", isClosed(old), isClosed(fresh))
		}
		if code, unknown := w.ping("c", oldSid); code != http.StatusNotFound || unknown {
			t.Fatalf("the removed server's session after its retirement: %d (unknown server: %v), want the added server's handler's 404", code, unknown)
		}
		w.served("c", newSid, "after the removed server's handler retired")
		if err := <-reloaded; err != nil {
			t.Fatal(err)
		}
	})
}

// A reload that removes a server while its handler is being made (after
// the server was found by name) leaves no handler without a server: the
// initialize that made it is answered with the removed server's refusal,
// opens no session and holds no place of the session limit, and the
// handler, if one was kept, retires with the server.
func TestServerRouterServerRemovedWhileItsHandlerIsMade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newRouterWorld(t)
		var removed map[string]<-chan struct{}
		w.r.lookedUp = func(name string) {
			w.r.lookedUp = nil // once
			cfg, err := config.Parse([]byte(`{"defaults":{"prefix":""},"mcpServers":{`+keptA+`}}`), "test.json", config.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// The router's lock is held here: the reload's Sync comes
			// after, as it would once the request let go of it.
			if _, err := w.f.Reload(context.Background(), cfg, false, func(ap fleet.Applied) { removed = ap.Removed }); err != nil {
				t.Fatal(err)
			}
		}
		var rec *httptest.ResponseRecorder
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("the initialize on the server removed meanwhile panicked: %v", p)
				}
			}()
			rec = w.do("POST", "c", "", httpInit)
		}()
		if removed == nil {
			t.Fatal("the seam was not reached: no reload ran")
		}
		if rec != nil && (rec.Header().Get("Mcp-Session-Id") != "" || !strings.Contains(rec.Body.String(), "server c was removed")) {
			t.Errorf("the initialize on the server removed meanwhile: %d %s (session %q), want the removed server's refusal and no session", rec.Code, rec.Body, rec.Header().Get("Mcp-Session-Id"))
		}
		if h := w.handlerOf("c"); h != nil && h.ep == nil {
			t.Error("a handler without a server is kept for c")
		}
		if n := w.limit.Open(); n != 0 {
			t.Errorf("%d places of the session limit held, want none", n)
		}

		w.r.Sync(removed)
		<-removed["c"]
		time.Sleep(RetiredGrace)
		synctest.Wait()
		if h, n := w.handlerOf("c"), w.retiring(); h != nil || n != 0 {
			t.Errorf("after the removal's drain and RetiredGrace: handler %v, %d retiring; want none", h, n)
		}
		if rec := w.do("POST", "c", "", httpInit); rec.Code != http.StatusNotFound || rec.Body.String() != "no server c" {
			t.Errorf("a new session on the removed server: %d %q, want the unknown server's 404", rec.Code, rec.Body)
		}
		if n := w.limit.Open(); n != 0 {
			t.Errorf("%d places of the session limit held after the handler retired, want none", n)
		}
	})
}
