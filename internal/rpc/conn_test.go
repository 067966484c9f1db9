package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestCallResponse(t *testing.T) {
	c, p := startConn(t, Options{})
	got := callAsync(context.Background(), c, "tools/call", `{"name":"echo","arguments":{"x":1}}`)

	req := p.read()
	if !req.IsRequest() || req.Method != "tools/call" || string(req.Params) != `{"name":"echo","arguments":{"x":1}}` {
		t.Fatalf("request = %+v", req)
	}
	const body = `{"content":[{"type":"text","text":"hi"}],"x-unknown":{"kept":true}}`
	p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + body + `}`)

	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.msg.IsResponse() || string(r.msg.Result) != body || r.msg.Error != nil {
		t.Fatalf("response = %+v", r.msg)
	}
	if n := c.pendingLen(); n != 0 {
		t.Fatalf("%d calls still pending", n)
	}
}

func TestCallErrorResponseIsAResponse(t *testing.T) {
	c, p := startConn(t, Options{})
	got := callAsync(context.Background(), c, "tools/call", `{}`)
	req := p.read()
	p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"error":{"code":-32602,"message":"unknown tool","data":{"tool":"x"}}}`)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	e := r.msg.Error
	if e == nil || e.Code != InvalidParams || e.Message != "unknown tool" || string(e.Data) != `{"tool":"x"}` {
		t.Fatalf("error = %+v", e)
	}
}

func TestOutOfOrderResponses(t *testing.T) {
	c, p := startConn(t, Options{})
	calls := make([]<-chan result, 3)
	ids := make([]string, 3)
	for i := range calls {
		calls[i] = callAsync(context.Background(), c, "m", fmt.Sprintf(`{"n":%d}`, i))
	}
	params := map[string]string{}
	for range calls {
		req := p.read()
		params[string(req.ID)] = string(req.Params)
	}
	i := 0
	for id := range params {
		ids[i] = id
		i++
	}
	for j := len(ids) - 1; j >= 0; j-- { // answer in another order
		p.send(`{"jsonrpc":"2.0","id":` + ids[j] + `,"result":` + params[ids[j]] + `}`)
	}
	for i, ch := range calls {
		r := <-ch
		if r.err != nil || string(r.msg.Result) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("call %d got %v %s", i, r.err, r.msg.Result)
		}
	}
}

func TestConcurrentCalls(t *testing.T) {
	c := echoPair(t)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				want := fmt.Sprintf(`{"g":%d,"i":%d}`, g, i)
				m, err := c.Call(context.Background(), "echo", json.RawMessage(want))
				if err != nil {
					errs <- err
					return
				}
				if string(m.Result) != want {
					errs <- fmt.Errorf("got %s, want %s", m.Result, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := c.pendingLen(); n != 0 {
		t.Fatalf("%d calls still pending", n)
	}
}

func TestResponseIDAsString(t *testing.T) {
	c, p := startConn(t, Options{})
	got := callAsync(context.Background(), c, "m", "")
	req := p.read()
	if req.Params != nil {
		t.Fatalf("params = %s, want none", req.Params)
	}
	if _, err := strconv.Atoi(string(req.ID)); err != nil {
		t.Fatalf("our id %s is not a JSON integer", req.ID)
	}
	p.send(`{"jsonrpc":"2.0","id":"` + string(req.ID) + `","result":{}}`)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if string(r.msg.ID) != `"`+string(req.ID)+`"` {
		t.Fatalf("response id = %s: the raw id must be kept", r.msg.ID)
	}
}

func TestCancelSendsCancelledAndForgets(t *testing.T) {
	sink := make(errSink, 10)
	c, p := startConn(t, Options{OnError: sink.onError})
	ctx, cancel := context.WithCancel(context.Background())
	got := callAsync(ctx, c, "tools/call", `{"name":"slow"}`)
	req := p.read()
	cancel()
	r := <-got
	if !errors.Is(r.err, context.Canceled) || r.msg != nil {
		t.Fatalf("Call = %v, %v; want context.Canceled", r.msg, r.err)
	}
	if n := c.pendingLen(); n != 0 {
		t.Fatalf("%d calls still pending after cancel", n)
	}
	note := p.read()
	if note.Method != "notifications/cancelled" || !note.IsNotification() {
		t.Fatalf("after cancel the peer got %+v", note)
	}
	if id := CancelledRequestID(note.Params); string(id) != string(req.ID) {
		t.Fatalf("requestId = %s, want %s", id, req.ID)
	}
	if reason := field(note.Params, "reason"); string(reason) != `"context canceled"` {
		t.Fatalf("reason = %s", reason)
	}

	// The late answer is noise, not a crash.
	p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{}}`)
	p.send(`{"jsonrpc":"2.0","method":"sync"}`) // a line after it: the first was handled
	if err := sink.next(t); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("late response reported as %v", err)
	}
}

func TestInitializeIsNotCancelled(t *testing.T) {
	c, p := startConn(t, Options{Handler: func(context.Context, *Message) {}})
	ctx, cancel := context.WithCancel(context.Background())
	got := callAsync(ctx, c, "initialize", `{}`)
	p.read()
	cancel()
	if r := <-got; !errors.Is(r.err, context.Canceled) {
		t.Fatal(r.err)
	}
	// The next line the peer sees is the next call, not a cancellation.
	got = callAsync(context.Background(), c, "ping", "")
	if m := p.read(); m.Method != "ping" {
		t.Fatalf("peer got %s after a cancelled initialize", m.Method)
	}
	c.Close()
	<-got
}

func TestCallWithEndedContextSendsNothing(t *testing.T) {
	c, _ := startConn(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Call(ctx, "m", nil); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// blockingWriter holds its first Write until released.
type blockingWriter struct {
	started, release chan struct{}
	once             sync.Once
	buf              bytes.Buffer
	mu               sync.Mutex
}

func (w *blockingWriter) Write(b []byte) (int, error) {
	w.once.Do(func() {
		close(w.started)
		<-w.release
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

// A call waiting for its turn to be written (another holds the writer,
// stuck in the peer's pipe) that ends — its context cancelled, or its
// abort closed (CallAbort) — returns context.Canceled, and nothing of it
// is written.
func TestCancelWhileWaitingForWriteTurn(t *testing.T) {
	for _, how := range []string{"context", "abort"} {
		t.Run(how, func(t *testing.T) {
			w := &blockingWriter{started: make(chan struct{}), release: make(chan struct{})}
			r, peerW := io.Pipe()
			c := NewConn(r, w, Options{})
			ran := make(chan error, 1)
			go func() { ran <- c.Run(context.Background()) }()

			first := callAsync(context.Background(), c, "first", "")
			<-w.started // first holds the write turn, stuck in the peer's pipe
			ctx, cancel := context.WithCancel(context.Background())
			abort := make(chan struct{})
			second := make(chan error, 1)
			go func() {
				_, err := c.CallAbort(ctx, abort, nil, "second", nil)
				second <- err
			}()
			if how == "context" {
				cancel()
			} else {
				close(abort)
			}
			if err := <-second; !errors.Is(err, context.Canceled) {
				t.Fatalf("second = %v, want context.Canceled while the turn is held", err)
			}
			cancel()
			close(w.release)
			peerW.Close()
			if r := <-first; !errors.Is(r.err, ErrClosed) {
				t.Fatalf("first = %v", r.err)
			}
			<-ran
			w.mu.Lock()
			defer w.mu.Unlock()
			if s := w.buf.String(); strings.Contains(s, "second") || strings.Contains(s, "cancelled") {
				t.Fatalf("wrote %q: nothing of a call ended before its write may go out", s)
			}
		})
	}
}

func TestCallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, p := startConn(t, Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		got := callAsync(ctx, c, "tools/call", `{}`)
		p.read()
		r := <-got // the fake clock runs once every goroutine waits
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("Call = %v", r.err)
		}
		if d := time.Since(start); d != 30*time.Second {
			t.Fatalf("Call returned after %v", d)
		}
		note := p.read()
		if reason := field(note.Params, "reason"); string(reason) != `"context deadline exceeded"` {
			t.Fatalf("cancellation %s", note.Params)
		}
	})
}

func TestClosePendingFailsWithErrClosed(t *testing.T) {
	c, p := startConn(t, Options{})
	got := callAsync(context.Background(), c, "m", "")
	p.read()
	c.Close()
	c.Close() // twice is fine
	r := <-got
	if !errors.Is(r.err, ErrClosed) || r.msg != nil {
		t.Fatalf("pending call got %v, %v", r.msg, r.err)
	}
	<-c.Done()
	if err := c.Err(); !errors.Is(err, ErrClosed) || err.Error() != "rpc: connection closed" {
		t.Fatalf("Err() = %v", err)
	}
	if _, err := c.Call(context.Background(), "m", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Call after Close = %v", err)
	}
	if err := c.Notify("n", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Notify after Close = %v", err)
	}
}

func TestPeerEOFFailsPending(t *testing.T) {
	c, p := startConn(t, Options{PeerName: "server"})
	got := callAsync(context.Background(), c, "m", "")
	p.read()
	p.out.Close()
	r := <-got
	if !errors.Is(r.err, ErrClosed) || !errors.Is(r.err, io.EOF) {
		t.Fatalf("pending call got %v; want ErrClosed and io.EOF", r.err)
	}
	if want := "rpc: connection closed: server closed its output: EOF"; r.err.Error() != want {
		t.Fatalf("error %q, want %q", r.err, want)
	}
	<-c.Done()
	// Our side of the stream is closed too: the peer reads EOF.
	if _, err := p.in.ReadByte(); err != io.EOF {
		t.Fatalf("peer read after end: %v", err)
	}
}

func TestRunContextEndsConn(t *testing.T) {
	connR, peerW := io.Pipe()
	peerR, connW := io.Pipe()
	defer peerW.Close()
	defer peerR.Close()
	c := NewConn(connR, connW, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	cancel()
	err := <-ran
	if !errors.Is(err, ErrClosed) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if err := c.Run(context.Background()); err == nil {
		t.Fatal("second Run succeeded")
	}
}

func TestHandlerContextEndsWithConn(t *testing.T) {
	ctxs := make(chan context.Context, 1)
	c, p := startConn(t, Options{Handler: func(ctx context.Context, m *Message) { ctxs <- ctx }})
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	ctx := <-ctxs
	if ctx.Err() != nil {
		t.Fatal("handler context ended early")
	}
	c.Close()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), ErrClosed) {
		t.Fatalf("cause = %v", context.Cause(ctx))
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestWriteErrorEndsConn(t *testing.T) {
	r, peerW := io.Pipe()
	defer peerW.Close()
	c := NewConn(r, failWriter{}, Options{PeerName: "server"})
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background()) }()
	_, err := c.Call(context.Background(), "m", nil)
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "writing to server: broken pipe") {
		t.Fatalf("Call = %v", err)
	}
	if err := <-ran; !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v", err)
	}
}

func TestInvalidLinesContinue(t *testing.T) {
	sink := make(errSink, 10)
	c, p := startConn(t, Options{OnError: sink.onError})
	got := callAsync(context.Background(), c, "m", "")
	req := p.read()

	p.send(`this is a log line on stdout`)
	p.send(``)      // blank lines are nothing
	p.send("   \r") // nor is white space
	p.send(`[{"jsonrpc":"2.0","id":1,"method":"a"}]`)
	p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{}}`)

	if r := <-got; r.err != nil {
		t.Fatalf("call after noise: %v", r.err)
	}
	var de *DecodeError
	if err := sink.next(t); !errors.As(err, &de) || de.Code != ParseError {
		t.Fatalf("log line reported as %v", err)
	}
	if err := sink.next(t); !errors.As(err, &de) || de.Code != InvalidRequest {
		t.Fatalf("batch reported as %v", err)
	}
	if s := c.Stats(); s.InvalidLines != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestInvalidResponseFailsItsCall(t *testing.T) {
	sink := make(errSink, 10)
	c, p := startConn(t, Options{OnError: sink.onError})
	bad := callAsync(context.Background(), c, "a", "")
	reqA := p.read()
	good := callAsync(context.Background(), c, "b", "")
	reqB := p.read()

	// Truncated JSON whose start names call a; then a response without
	// "jsonrpc" for call b... answered properly after.
	p.send(`{"jsonrpc":"2.0","id":` + string(reqA.ID) + `,"result":{"content":[`)
	p.send(`{"jsonrpc":"2.0","id":` + string(reqB.ID) + `,"result":{}}`)

	var de *DecodeError
	if r := <-bad; !errors.As(r.err, &de) || de.Code != ParseError {
		t.Fatalf("call a = %v, want its parse error", r.err)
	}
	if r := <-good; r.err != nil {
		t.Fatalf("call b = %v", r.err)
	}
	if err := sink.next(t); !errors.As(err, &de) {
		t.Fatalf("reported %v", err)
	}
}

func TestOverlongLineFailsOnlyItsRequest(t *testing.T) {
	sink := make(errSink, 10)
	c, p := startConn(t, Options{OnError: sink.onError, PeerName: "server"})
	big := callAsync(context.Background(), c, "tools/call", `{"name":"big"}`)
	reqBig := p.read()
	small := callAsync(context.Background(), c, "tools/call", `{"name":"small"}`)
	reqSmall := p.read()

	huge := strings.Repeat("x", DefaultMaxLine)
	p.send(`{"jsonrpc":"2.0","id":` + string(reqBig.ID) + `,"result":{"content":[{"type":"text","text":"` + huge + `"}]}}`)
	p.send(`{"jsonrpc":"2.0","id":` + string(reqSmall.ID) + `,"result":{"ok":true}}`)

	r := <-big
	var tl *LineTooLongError
	if !errors.As(r.err, &tl) || !errors.Is(r.err, ErrLineTooLong) {
		t.Fatalf("big call = %v", r.err)
	}
	if want := "response from server exceeds 16 MiB line limit"; r.err.Error() != want {
		t.Fatalf("error %q, want %q", r.err, want)
	}
	if tl.Size <= DefaultMaxLine || string(tl.ID) != string(reqBig.ID) {
		t.Fatalf("error detail %+v", tl)
	}
	if r := <-small; r.err != nil || string(r.msg.Result) != `{"ok":true}` {
		t.Fatalf("small call = %v, %v", r.msg, r.err)
	}
	if err := sink.next(t); !errors.As(err, &tl) {
		t.Fatalf("reported %v", err)
	}
	if s := c.Stats(); s.OverlongLines != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestOverlongLinesWithoutPendingID(t *testing.T) {
	sink := make(errSink, 10)
	c, p := startConn(t, Options{OnError: sink.onError, MaxLine: 1000, Handler: func(context.Context, *Message) {}})
	pad := strings.Repeat("y", 2000)

	// No id in sight: only reported.
	p.send(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + pad + `"}}`)
	// A request of the peer's: it gets an error reply with its own id.
	p.send(`{"jsonrpc":"2.0","id":"srv-1","method":"sampling/createMessage","params":{"p":"` + pad + `"}}`)
	reply := p.read()
	if string(reply.ID) != `"srv-1"` || reply.Error == nil || reply.Error.Code != InvalidRequest ||
		reply.Error.Message != "request exceeds 1000-byte line limit" {
		t.Fatalf("reply to overlong request = %+v %+v", reply, reply.Error)
	}
	var tl *LineTooLongError
	if err := sink.next(t); !errors.As(err, &tl) || tl.Kind != "request" || tl.ID != nil {
		t.Fatalf("first reported %v", err)
	}
	if err := sink.next(t); !errors.As(err, &tl) || tl.Kind != "request" || string(tl.ID) != `"srv-1"` {
		t.Fatalf("second reported %v", err)
	}
	// The connection still works.
	got := callAsync(context.Background(), c, "ping", "")
	req := p.read()
	p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{}}`)
	if r := <-got; r.err != nil {
		t.Fatal(r.err)
	}
}

func TestUnknownResponseID(t *testing.T) {
	sink := make(errSink, 10)
	c, p := startConn(t, Options{OnError: sink.onError})
	p.send(`{"jsonrpc":"2.0","id":999,"result":{}}`)
	p.send(`{"jsonrpc":"2.0","id":"not-ours","error":{"code":-32600,"message":"?"}}`)
	got := callAsync(context.Background(), c, "m", "")
	req := p.read()
	p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{}}`)
	if r := <-got; r.err != nil {
		t.Fatal(r.err)
	}
	for range 2 {
		if err := sink.next(t); !errors.Is(err, ErrUnknownID) {
			t.Fatalf("reported %v", err)
		}
	}
	if s := c.Stats(); s.UnknownResponses != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestIncomingRequestsAndReply(t *testing.T) {
	var c *Conn
	handled := make(chan *Message, 10)
	c, p := startConn(t, Options{Handler: func(ctx context.Context, m *Message) {
		handled <- m
		if m.IsRequest() {
			go func() { // answer off the read goroutine, as documented
				if m.Method == "roots/list" {
					_ = c.ReplyError(m.ID, MethodNotFound, "no roots", json.RawMessage(`{"why":"none"}`))
					return
				}
				_ = c.Reply(m.ID, m.Params)
			}()
		}
	}})

	p.send(`{"jsonrpc":"2.0","id":"abc","method":"sampling/createMessage","params":{"messages":[]}}`)
	if m := <-handled; m.Method != "sampling/createMessage" || string(m.ID) != `"abc"` {
		t.Fatalf("handler got %+v", m)
	}
	if r := p.read(); string(r.ID) != `"abc"` || string(r.Result) != `{"messages":[]}` {
		t.Fatalf("reply %+v", r)
	}

	p.send(`{"jsonrpc":"2.0","id":7.0,"method":"roots/list"}`)
	<-handled
	r := p.read()
	if string(r.ID) != `7.0` || r.Error == nil || r.Error.Message != "no roots" || string(r.Error.Data) != `{"why":"none"}` {
		t.Fatalf("error reply %+v (id must come back byte for byte)", r)
	}
}

func TestNotificationsGoToHandlerInOrder(t *testing.T) {
	got := make(chan *Message, 100)
	_, p := startConn(t, Options{Handler: func(_ context.Context, m *Message) { got <- m }})
	for i := range 50 {
		p.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":%d}}`, i))
	}
	for i := range 50 {
		m := <-got
		if !m.IsNotification() || m.Method != "notifications/progress" || m.ID != nil {
			t.Fatalf("got %+v", m)
		}
		if v := field(m.Params, "progress"); string(v) != strconv.Itoa(i) {
			t.Fatalf("notification %d carries progress %s: order lost", i, v)
		}
	}
}

func TestNoHandlerRepliesMethodNotFound(t *testing.T) {
	_, p := startConn(t, Options{})
	p.send(`{"jsonrpc":"2.0","method":"notifications/x"}`) // dropped
	p.send(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`)
	r := p.read()
	if string(r.ID) != "5" || r.Error == nil || r.Error.Code != MethodNotFound {
		t.Fatalf("reply %+v", r)
	}
}

func TestConcurrentWritesNeverInterleave(t *testing.T) {
	c, p := startConn(t, Options{})
	const writers, each = 16, 25
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Sizes from tiny to over the reader's 64 KiB buffer.
				pad := strings.Repeat(string(rune('a'+g)), (g*each+i)*397%70_000)
				params := fmt.Sprintf(`{"g":%d,"i":%d,"pad":"%s"}`, g, i, pad)
				if err := c.Notify("n", json.RawMessage(params)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	seen := map[string]bool{}
	for range writers * each {
		m := p.read() // fails the test on any line that does not parse
		var v struct {
			G, I int
			Pad  string
		}
		if err := json.Unmarshal(m.Params, &v); err != nil {
			t.Fatal(err)
		}
		if strings.Trim(v.Pad, string(rune('a'+v.G))) != "" {
			t.Fatalf("line of writer %d carries another writer's bytes", v.G)
		}
		seen[fmt.Sprint(v.G, "/", v.I)] = true
	}
	wg.Wait()
	if len(seen) != writers*each {
		t.Fatalf("%d distinct lines, want %d", len(seen), writers*each)
	}
}

func TestWriteRejectsMessageWithoutMethodOrID(t *testing.T) {
	c := NewConn(strings.NewReader(""), io.Discard, Options{})
	defer c.Close()
	if err := c.Write(&Message{Result: json.RawMessage(`{}`)}); err == nil {
		t.Fatal("wrote a message with neither method nor id")
	}
	if err := c.Reply(nil, nil); err == nil {
		t.Fatal("replied without an id")
	}
}

func TestCloseBeforeRun(t *testing.T) {
	c := NewConn(strings.NewReader(`{"jsonrpc":"2.0","method":"x"}`+"\n"), io.Discard, Options{
		Handler: func(context.Context, *Message) { t.Error("handler ran after Close") },
	})
	c.Close()
	if err := c.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v", err)
	}
}

func TestRelayRestoresClientID(t *testing.T) {
	backend := echoPair(t)
	front, client := startConn(t, Options{})
	_ = front
	// Two clients reuse id 1; the backend sees distinct ids and each
	// client gets its own id back.
	for _, params := range []string{`{"who":"a"}`, `{"who":"b"}`} {
		clientID := json.RawMessage(`1`)
		resp, err := backend.Call(context.Background(), "tools/call", json.RawMessage(params))
		if err != nil {
			t.Fatal(err)
		}
		resp.ID = clientID
		go func() { _ = front.Write(resp) }()
		m := client.read()
		if string(m.ID) != "1" || string(m.Result) != params {
			t.Fatalf("client got %+v", m)
		}
	}
}

// A reader that is not an io.Closer: Run returns at its EOF, after Close.
func TestRunWithUnclosableReader(t *testing.T) {
	pr, pw := io.Pipe()
	c := NewConn(struct{ io.Reader }{pr}, io.Discard, Options{})
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background()) }()
	c.Close()
	<-c.Done()
	// Run still reads, discarding, until its reader ends.
	if _, err := pw.Write([]byte(`{"jsonrpc":"2.0","method":"x"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-ran; !errors.Is(err, ErrClosed) || errors.Is(err, io.EOF) {
		t.Fatalf("Run = %v; want the Close, not the later EOF", err)
	}
}
