package backend

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"go.uber.org/goleak"
)

// fakeModern is a modern (2026-07-28) stdio server of the tests, over any
// pair of streams: it answers server/discover as a modern server with
// caps, hands each subscriptions/listen to listen (n counts them from 1),
// and records the listens and the requests mcpvisor cancels.
type fakeModern struct {
	caps   string
	listen func(f *fakeModern, n int, id, params json.RawMessage)

	wmu sync.Mutex
	w   io.Writer

	mu        sync.Mutex
	opens     []time.Time       // when each listen came
	params    []json.RawMessage // what each listen asked
	ids       []string          // each listen's id
	cancelled []string          // ids of the requests mcpvisor cancelled
	open      map[string]bool   // ids of the listens open: neither ended nor cancelled
	overlap   bool              // a listen came while another was open
}

func (f *fakeModern) send(line string) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	_, _ = io.WriteString(f.w, line+"\n")
}

// serve answers what comes on r until it ends.
func (f *fakeModern) serve(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch m.Method {
		case "server/discover":
			f.send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"supportedVersions":["` + ModernVersion + `"],"capabilities":` + f.caps + `,"_meta":{"` + metaServerInfo + `":{"name":"fake","version":"1"}}}}`)
		case "subscriptions/listen":
			f.mu.Lock()
			f.opens = append(f.opens, time.Now())
			f.params = append(f.params, m.Params)
			f.ids = append(f.ids, string(m.ID))
			n := len(f.opens)
			f.overlap = f.overlap || len(f.open) > 0
			if f.open == nil {
				f.open = map[string]bool{}
			}
			f.open[string(m.ID)] = true
			f.mu.Unlock()
			f.listen(f, n, m.ID, m.Params)
		case "notifications/cancelled":
			id := string(rpc.CancelledRequestID(m.Params))
			f.mu.Lock()
			f.cancelled = append(f.cancelled, id)
			delete(f.open, id)
			f.mu.Unlock()
		default:
			if m.ID != nil {
				f.send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32601,"message":"Method not found"}}`)
			}
		}
	}
}

// listens reports when each listen came, and what each asked.
func (f *fakeModern) listens() ([]time.Time, []json.RawMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.opens), slices.Clone(f.params)
}

// ack acknowledges listen id, agreeing to all it asked.
func (f *fakeModern) ack(id, params json.RawMessage) {
	f.send(`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":` + string(ackParams(string(id), params)) + `}`)
}

// ackParams are the params of the acknowledgement of listen id.
func ackParams(id string, params json.RawMessage) json.RawMessage {
	return json.RawMessage(`{"_meta":{"io.modelcontextprotocol/subscriptionId":` + id + `},"notifications":` + string(rpc.Member(params, "notifications")) + `}`)
}

// end answers listen id: the server ends it.
func (f *fakeModern) end(id json.RawMessage) {
	f.mu.Lock()
	delete(f.open, string(id))
	f.mu.Unlock()
	f.send(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":` + string(id) + `}}}`)
}

// refuse answers listen id with an error, without acknowledging it.
func (f *fakeModern) refuse(id json.RawMessage) {
	f.mu.Lock()
	delete(f.open, string(id))
	f.mu.Unlock()
	f.send(`{"jsonrpc":"2.0","id":` + string(id) + `,"error":{"code":-32603,"message":"busy"}}`)
}

// endAtOnce acknowledges every listen and ends it at once.
func endAtOnce(f *fakeModern, _ int, id, params json.RawMessage) {
	f.ack(id, params)
	f.end(id)
}

// fakeModernEnv, set in a test binary's environment, makes it the fake
// modern server (main_test.go's init) with the script it names.
const fakeModernEnv = "MCPVISOR_TEST_FAKE_MODERN"

// fakeModernScripts are the listen behaviours a fake server process can
// have. "reopen": the first listen is acknowledged and ended at once; a
// later one is acknowledged and held, and a tools list change is sent on
// it, its params saying which listen it came on and what that asked.
var fakeModernScripts = map[string]func(f *fakeModern, n int, id, params json.RawMessage){
	"reopen": func(f *fakeModern, n int, id, params json.RawMessage) {
		f.ack(id, params)
		if n == 1 {
			f.end(id)
			return
		}
		f.send(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":` + string(id) + `},"listen":` + string(mustMarshal(n)) + `,"asked":` + string(rpc.Member(params, "notifications")) + `}}`)
	},
}

// runFakeModern serves as the fake modern server on stdin and stdout if
// the environment asks for it, and exits when stdin ends.
func runFakeModern() {
	script, ok := fakeModernScripts[os.Getenv(fakeModernEnv)]
	if !ok {
		return
	}
	f := &fakeModern{caps: `{"tools":{"listChanged":true},"resources":{"subscribe":true}}`, listen: script, w: os.Stdout}
	f.serve(os.Stdin)
	os.Exit(0)
}

// connectFake connects, as a stdio server, to this test binary run as the
// fake modern server with script.
func connectFake(t *testing.T, script string, hooks Hooks, onConnect func(context.Context, *Conn)) *Conn {
	t.Helper()
	rt, err := proc.Open(proc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sc := &StdioConnector{
		Name: "fake", Runtime: rt, Protocol: ProtocolModern, Logger: quiet(), Hooks: hooks, OnConnect: onConnect,
		Spec: proc.Spec{Command: exe, Env: append(proc.Environ(), testserver.MarkerEnv+"="+testserver.NewMarker(t), fakeModernEnv+"="+script)},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sc.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := s.(*Conn)
	t.Cleanup(func() { _ = c.Close() })
	if !c.Modern() {
		t.Fatal("the fake server is not modern")
	}
	return c
}

// A modern stdio server that ends mcpvisor's listen (here at once, as a
// server whose stream to mcpvisor filled up does) is listened to again,
// with the same filter and subscriptions, and the list changes it sends
// then reach the hooks. Once the listen opened again is acknowledged, the
// hooks are told that what it carries may have changed meanwhile — a list
// change of each list it watches and an update of each resource it names
// — before anything the server sends on it; the first listen tells
// nothing of the kind.
func TestModernStdioListenReopens(t *testing.T) {
	hooks := newRecorder()
	connectFake(t, "reopen", hooks, func(_ context.Context, c *Conn) { c.SetResourceSubscriptions([]string{"test://watched"}) })

	var got []*rpc.Message
	timeout := time.After(10 * time.Second)
	for real := false; !real; {
		select {
		case m := <-hooks.notes:
			got = append(got, m)
			real = m.Method == "notifications/tools/list_changed" && rpc.Member(m.Params, "listen") != nil
		case <-timeout:
			t.Fatalf("no list change on a listen opened again; the hooks got %s", methods(got))
		}
	}
	want := []string{
		"notifications/subscriptions/acknowledged", // the first listen, ended at once
		"notifications/subscriptions/acknowledged", // the second
		"notifications/tools/list_changed",         // what may have been missed between them
		"notifications/resources/updated",
		"notifications/tools/list_changed", // the server's, on the second listen
	}
	if !slices.Equal(methods(got), want) {
		t.Fatalf("the hooks got %s, want %s", methods(got), want)
	}
	if uri, _ := rpc.StringMember(got[3].Params, "uri"); uri != "test://watched" {
		t.Errorf("the update after the listen opened again: %s", got[3].Params)
	}
	real := got[4]
	if n := string(rpc.Member(real.Params, "listen")); n != "2" {
		t.Errorf("the list change came on listen %s, want 2", n)
	}
	first := rpc.Member(got[0].Params, "notifications") // the fake agrees to all a listen asks
	again := rpc.Member(real.Params, "asked")
	if !jsonEqual(first, again) || !strings.Contains(string(again), `"toolsListChanged":true`) || !strings.Contains(string(again), "test://watched") {
		t.Errorf("the listen opened again asked %s, the first %s", again, first)
	}
}

func methods(ms []*rpc.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Method)
	}
	return out
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}

// pipeConn connects to f over in-process pipes as a stdio server's Conn
// is made (the rpc connection over the server's output and input with the
// hooks, the modern handshake, then the listen), without a process; its
// goroutine ends the listen when the stream ends, as a stdio
// connection's does. In a synctest bubble, its waits run on the fake
// clock. The server's output ends when its input does, as a process's
// does when it exits on stdin EOF.
func pipeConn(t *testing.T, f *fakeModern, hooks Hooks) *Conn {
	t.Helper()
	serverIn, clientOut := io.Pipe()
	clientIn, serverOut := io.Pipe()
	f.w = serverOut
	go func() {
		f.serve(serverIn)
		_ = serverOut.Close()
	}()
	c := &Conn{name: "fake", log: quiet(), runDone: make(chan struct{}), closeReq: make(chan struct{})}
	c.rpc = rpc.NewConn(clientIn, clientOut, rpc.Options{PeerName: "server fake", Logger: quiet(), Handler: hookHandler(c, hooks)})
	go func() {
		_ = c.rpc.Run(context.Background())
		c.endListen()
		close(c.runDone)
	}()
	if modern, err := c.discover(t.Context(), ProtocolModern); err != nil || !modern {
		t.Fatalf("discover: modern %v, %v", modern, err)
	}
	c.startListen()
	return c
}

// listenLoopDone reports whether the loop of the connection's last
// listen, and every one before it, has returned.
func listenLoopDone(c *Conn) bool {
	c.lst.mu.Lock()
	done := c.lst.done
	c.lst.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

const fakeCaps = `{"tools":{"listChanged":true},"prompts":{"listChanged":true}}`

// A server that ends every listen at once is not listened to in a busy
// loop: the waits before opening it again double from listenDelay to
// listenMaxDelay; a listen that lasted listenHealthy is opened again at
// once, and the waits start again from listenDelay. (Counted on the fake
// clock; a server that had seen 100 listens would hold the next, so that
// a busy loop ends in a failure, not a hang.)
func TestModernListenBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeModern{caps: fakeCaps, listen: func(f *fakeModern, n int, id, params json.RawMessage) {
			f.ack(id, params)
			switch {
			case n > 100:
			case n == 7:
				go func() {
					time.Sleep(2 * listenHealthy)
					f.end(id)
				}()
			default:
				f.end(id)
			}
		}}
		start := time.Now()
		c := pipeConn(t, f, newRecorder())
		const watch = 2 * time.Minute
		time.Sleep(watch)
		opens, _ := f.listens()
		_ = c.Close()

		// The model: after listen i (1-based) the next comes after wait.
		var want []time.Duration
		quick := 0
		for at, i := time.Duration(0), 1; at <= watch; i++ {
			want = append(want, at)
			if i == 7 {
				at += 2 * listenHealthy
				quick = 0
				continue
			}
			at += min(listenDelay<<quick, listenMaxDelay)
			quick++
		}
		var got []time.Duration
		for _, o := range opens {
			got = append(got, o.Sub(start))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%d listens in %v at %v, want %d at %v", len(got), watch, got, len(want), want)
		}
	})
}

// holdListen acknowledges every listen and holds it.
func holdListen(f *fakeModern, _ int, id, params json.RawMessage) { f.ack(id, params) }

// The listen ends with the connection, and no later: when mcpvisor closes
// it — with the server's listens ending at once, so that the loop is
// waiting to open the next — or when the server's output ends under a
// listen it holds, the listen's goroutines have returned by the time the
// connection counts as ended, none is left, and no listen opens after,
// not even for subscriptions changed then.
func TestModernListenEndsWithConnection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen func(f *fakeModern, n int, id, params json.RawMessage)
		end    func(c *Conn, f *fakeModern)
	}{
		{"closed by mcpvisor", endAtOnce, func(c *Conn, _ *fakeModern) { _ = c.Close() }},
		{"server output ended", holdListen, func(_ *Conn, f *fakeModern) { _ = f.w.(io.Closer).Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				leaks := goleak.IgnoreCurrent()
				f := &fakeModern{caps: fakeCaps, listen: tc.listen}
				c := pipeConn(t, f, newRecorder())
				time.Sleep(time.Second) // fake: the first listens come and, with endAtOnce, end
				before, _ := f.listens()
				if len(before) == 0 {
					t.Fatal("no listen")
				}
				tc.end(c, f)
				<-c.Done()
				if !listenLoopDone(c) {
					t.Fatal("the listen outlived the connection")
				}
				c.lst.mu.Lock()
				last := c.lst.done
				c.lst.mu.Unlock()
				c.SetResourceSubscriptions([]string{"test://late"})
				c.lst.mu.Lock()
				started := c.lst.done != last
				c.lst.mu.Unlock()
				if started {
					t.Error("a listen started after the connection ended")
				}
				time.Sleep(time.Minute) // fake
				if after, _ := f.listens(); len(after) != len(before) {
					t.Errorf("%d listens after the connection ended", len(after)-len(before))
				}
				_ = c.Close()
				goleak.VerifyNone(t, leaks)
			})
		})
	}
}

// Changed subscriptions open the listen again with them, once the one
// before is cancelled: never two at once. A listen the server ends is
// opened again with the subscriptions of the moment and the same filter.
func TestModernListenReopensWithCurrentSubscriptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeModern{caps: fakeCaps, listen: func(f *fakeModern, n int, id, params json.RawMessage) {
			f.ack(id, params)
			if n == 2 {
				f.end(id)
			}
		}}
		hooks := newRecorder()
		c := pipeConn(t, f, hooks)
		defer c.Close()
		synctest.Wait()
		c.SetResourceSubscriptions([]string{"test://b", "test://a"})
		time.Sleep(time.Second) // fake: listen 2 comes, which the server ends, then 3
		opens, params := f.listens()
		if len(opens) != 3 {
			t.Fatalf("%d listens, want 3: %s", len(opens), params)
		}
		f.mu.Lock()
		cancelled, ids, overlap := slices.Clone(f.cancelled), slices.Clone(f.ids), f.overlap
		f.mu.Unlock()
		if len(cancelled) != 1 || cancelled[0] != ids[0] {
			t.Errorf("cancelled %v, want the first listen, %s", cancelled, ids[0])
		}
		if overlap {
			t.Error("two listens were open at once")
		}
		// Each listen opened after another ended — for the new
		// subscriptions, or because the server ended it — tells the hooks,
		// once acknowledged, what may have been missed in between.
		var notes []string
		for len(hooks.notes) > 0 {
			m := <-hooks.notes
			notes = append(notes, m.Method+" "+string(m.Params))
		}
		ack := "notifications/subscriptions/acknowledged "
		catchUp := []string{"notifications/tools/list_changed ", "notifications/prompts/list_changed ",
			`notifications/resources/updated {"uri":"test://a"}`, `notifications/resources/updated {"uri":"test://b"}`}
		wantNotes := slices.Concat([]string{ack + string(ackParams(ids[0], params[0])), ack + string(ackParams(ids[1], params[1]))}, catchUp,
			[]string{ack + string(ackParams(ids[2], params[2]))}, catchUp)
		if !slices.Equal(notes, wantNotes) {
			t.Errorf("the hooks got\n%s\nwant\n%s", strings.Join(notes, "\n"), strings.Join(wantNotes, "\n"))
		}
		want := `{"toolsListChanged":true,"promptsListChanged":true,"resourceSubscriptions":["test://a","test://b"]}`
		for i, p := range params {
			w := want
			if i == 0 {
				w = `{"toolsListChanged":true,"promptsListChanged":true}`
			}
			if got := rpc.Member(p, "notifications"); !jsonEqual(got, json.RawMessage(w)) {
				t.Errorf("listen %d asked %s, want %s", i+1, got, w)
			}
		}
	})
}

// A listen the server refuses with an error is opened again too, after
// listenDelay, and its acknowledgement tells the hooks what may have been
// missed.
func TestModernListenReopensAfterRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeModern{caps: `{"tools":{"listChanged":true}}`, listen: func(f *fakeModern, n int, id, params json.RawMessage) {
			if n == 1 {
				f.refuse(id)
				return
			}
			f.ack(id, params)
		}}
		hooks := newRecorder()
		start := time.Now()
		c := pipeConn(t, f, hooks)
		defer c.Close()
		time.Sleep(time.Second) // fake
		opens, _ := f.listens()
		if len(opens) != 2 || opens[1].Sub(start) != listenDelay {
			t.Fatalf("listens at %v, want a second one after %v", opens, listenDelay)
		}
		var notes []string
		for len(hooks.notes) > 0 {
			notes = append(notes, (<-hooks.notes).Method)
		}
		if want := []string{"notifications/subscriptions/acknowledged", "notifications/tools/list_changed"}; !slices.Equal(notes, want) {
			t.Errorf("the hooks got %s, want %s", notes, want)
		}
	})
}

// resubHooks records like recorder, and when the server says "resub" the
// subscriptions change at once (as a session's subscribe on another
// goroutine may, at that moment).
type resubHooks struct{ *recorder }

func (h resubHooks) Notification(c *Conn, m *rpc.Message) {
	if m.Method == "test/resub" {
		c.SetResourceSubscriptions([]string{"test://a"})
		return
	}
	h.recorder.Notification(c, m)
}

// A listen the server ends (so that mcpvisor fetches what it missed) just
// as mcpvisor opens the next for changed subscriptions: the next one's
// acknowledgement still tells the hooks what may have been missed.
func TestModernListenServerEndRacingResubscribeCatchesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeModern{caps: fakeCaps, listen: holdListen}
		hooks := resubHooks{newRecorder()}
		c := pipeConn(t, f, hooks)
		defer c.Close()
		synctest.Wait()
		f.mu.Lock()
		first := json.RawMessage(f.ids[0])
		f.mu.Unlock()
		// The subscriptions change just as the server ends listen 1.
		f.send(`{"jsonrpc":"2.0","method":"test/resub"}`)
		f.end(first)
		time.Sleep(time.Second) // fake
		var notes []string
		for len(hooks.notes) > 0 {
			notes = append(notes, (<-hooks.notes).Method)
		}
		caught := false
		for _, n := range notes {
			if n == "notifications/tools/list_changed" {
				caught = true
			}
		}
		if !caught {
			t.Errorf("the server ended listen 1, yet the listen opened after it told the hooks nothing of what may have been missed")
		}
	})
}
