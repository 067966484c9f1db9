package rpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// These tests write into a real pipe whose reader does not read, so that
// the connection's Write blocks in the kernel once the pipe's buffer is
// full. They cannot run in a synctest bubble (a goroutine in a system call
// is not durably blocked): a sender must return within its context's time
// plus scheduling slack; a sender still blocked after stuckAfter fails the
// test instead of hanging it.

const (
	shortCtx   = 100 * time.Millisecond
	slack      = 2 * time.Second // scheduling on a loaded machine
	stuckAfter = 10 * time.Second
)

// pipeConn runs a Conn that writes into an os.Pipe and returns the pipe's
// reading end, unread. At the end of the test the Conn is closed (which
// closes the pipe's writing end and so ends a Write blocked in it), Run is
// awaited and the reading end closed.
func pipeConn(t *testing.T, opts Options) (*Conn, *os.File) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r, peerW := io.Pipe()
	c := NewConn(r, pw, opts)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background()) }()
	t.Cleanup(func() {
		c.Close()
		peerW.Close()
		<-ran
		pr.Close()
	})
	return c, pr
}

// hugeParams is far more than a pipe's buffer (64 KiB on Linux) holds.
var hugeParams = `{"pad":"` + strings.Repeat("x", 1<<20) + `"}`

// writerTook tells whether the connection's writer goroutine has taken
// what was queued and is writing it. (A sender writing inline holds the
// write side too, but does not block.)
func (c *Conn) writerTook() bool {
	c.wmu.Lock()
	taken := c.wr.writing && len(c.wr.queue) == 0
	c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	return taken && c.asyncN > 0
}

// wedge starts a Call with a huge line and the given context and waits
// until the connection's writer is writing it: the pipe fills and the
// write blocks. It returns nil if the call returned first (its context ended
// before its line was taken, on a slow machine).
func wedge(t *testing.T, ctx context.Context, c *Conn) <-chan result {
	t.Helper()
	ch := callAsync(ctx, c, "huge", hugeParams)
	deadline := time.Now().Add(stuckAfter)
	for {
		if c.writerTook() {
			return ch
		}
		select {
		case <-ch:
			return nil
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the huge line was never taken for writing")
		}
		time.Sleep(time.Millisecond)
	}
}

// within waits for a sender's result, which must come by deadline.
func within[T any](t *testing.T, what string, ch <-chan T, deadline time.Time) T {
	t.Helper()
	select {
	case v := <-ch:
		if late := time.Since(deadline); late > 0 {
			t.Errorf("%s returned %v after its deadline", what, late)
		}
		return v
	case <-time.After(time.Until(deadline) + stuckAfter):
		t.Fatalf("%s still blocked %v after its deadline", what, stuckAfter)
		panic("unreachable")
	}
}

func errAsync(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// A Call whose own line is stuck in the peer's full pipe returns at its
// context, and so does a second caller whose line waits behind it.
func TestCallReturnsAtContextWhenThePeerStopsReading(t *testing.T) {
	var c *Conn
	var first <-chan result
	var start time.Time
	for try := 0; first == nil; try++ {
		if try == 5 {
			t.Fatalf("a call's line was never taken for writing within its %v", shortCtx)
		}
		c, _ = pipeConn(t, Options{PeerName: "server"})
		start = time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), shortCtx)
		defer cancel()
		first = wedge(t, ctx, c)
	}
	ctx2, cancel2 := context.WithTimeout(t.Context(), shortCtx)
	defer cancel2()
	second := callAsync(ctx2, c, "second", `{}`)

	if r := within(t, "the call writing", first, start.Add(shortCtx+slack)); !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("first call = %v, want context.DeadlineExceeded", r.err)
	}
	if r := within(t, "the call queued", second, start.Add(shortCtx+slack)); !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("second call = %v, want context.DeadlineExceeded", r.err)
	}
	if d := time.Since(start); d < shortCtx {
		t.Fatalf("the calls returned after %v, before their context ended", d)
	}
}

// Notify, Reply, ReplyError and Write with a context return when it ends;
// without one they return after Options.WriteTimeout with ErrWriteTimeout.
// Their lines, withdrawn, never appear once the peer reads again; the line
// whose write had started is finished whole, followed by the cancellation
// of its call; every line that appears is one whole message.
func TestBoundedWritesOnAPeerThatStopsReading(t *testing.T) {
	c, pr := pipeConn(t, Options{PeerName: "server", WriteTimeout: shortCtx})
	hugeStart := time.Now()
	hctx, hcancel := context.WithTimeout(t.Context(), time.Second)
	defer hcancel()
	huge := wedge(t, hctx, c)
	if huge == nil {
		t.Fatal("the huge line was not taken for writing within a second")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), shortCtx)
	defer cancel()

	withdrawn := map[string]<-chan error{
		"NotifyContext":     errAsync(func() error { return c.NotifyContext(ctx, "gone/notify-ctx", nil) }),
		"ReplyContext":      errAsync(func() error { return c.ReplyContext(ctx, json.RawMessage(`"gone-reply-ctx"`), nil) }),
		"ReplyErrorContext": errAsync(func() error { return c.ReplyErrorContext(ctx, json.RawMessage(`"gone-error-ctx"`), 1, "x", nil) }),
		"WriteContext":      errAsync(func() error { return c.WriteContext(ctx, &Message{Method: "gone/write-ctx"}) }),
		"Notify":            errAsync(func() error { return c.Notify("gone/notify", nil) }),
		"Reply":             errAsync(func() error { return c.Reply(json.RawMessage(`"gone-reply"`), nil) }),
		"ReplyError":        errAsync(func() error { return c.ReplyError(json.RawMessage(`"gone-error"`), 1, "x", nil) }),
		"Write":             errAsync(func() error { return c.Write(&Message{Method: "gone/write"}) }),
	}
	ctxCall, cancelCall := context.WithTimeout(t.Context(), shortCtx)
	defer cancelCall()
	gone := callAsync(ctxCall, c, "gone/call", `{}`)

	r := within(t, "the call writing", huge, hugeStart.Add(time.Second+slack))
	if !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("huge call = %v", r.err)
	}
	if r := within(t, "the call queued", gone, start.Add(shortCtx+slack)); !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("queued call = %v", r.err)
	}
	for name, ch := range withdrawn {
		err := within(t, name, ch, start.Add(shortCtx+slack))
		want := context.DeadlineExceeded
		if !strings.HasSuffix(name, "Context") {
			want = ErrWriteTimeout
		}
		if !errors.Is(err, want) {
			t.Errorf("%s = %v, want %v", name, err, want)
		}
	}

	// The peer reads again.
	lines := make(chan string)
	go func() {
		defer close(lines)
		br := bufio.NewReaderSize(pr, 64<<10)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			lines <- l
		}
	}()
	mctx, mcancel := context.WithTimeout(t.Context(), stuckAfter)
	defer mcancel()
	marked := errAsync(func() error { return c.NotifyContext(mctx, "marker", nil) })
	var got []*Message
	for l := range lines {
		m, err := Decode([]byte(l))
		if err != nil {
			t.Fatalf("line %d is not a message (%v): %.100q", len(got), err, l)
		}
		got = append(got, m)
		if m.Method == "marker" {
			break
		}
	}
	if err := <-marked; err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, m := range got {
		methods = append(methods, m.Method+string(m.ID))
	}
	if len(got) != 3 || got[0].Method != "huge" || got[1].Method != "notifications/cancelled" ||
		string(CancelledRequestID(got[1].Params)) != string(got[0].ID) || got[2].Method != "marker" {
		t.Fatalf("the peer read %q; want the huge call, its cancellation, the marker", methods)
	}
	c.Close()
	for range lines {
	}
}

// A caller of one connection is never held by another that is wedged.
func TestAWedgedConnHoldsNoOtherConn(t *testing.T) {
	wedged, _ := pipeConn(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	huge := wedge(t, ctx, wedged)
	if huge == nil {
		t.Fatal("the huge call returned before its context ended")
	}
	note := errAsync(func() error { return wedged.NotifyContext(ctx, "held", nil) })

	other := echoPair(t)
	start := time.Now()
	done := make(chan result, 1)
	go func() {
		m, err := other.Call(t.Context(), "ping", json.RawMessage(`{"n":1}`))
		done <- result{m, err}
	}()
	if r := within(t, "a call on another connection", done, start.Add(slack)); r.err != nil || string(r.msg.Result) != `{"n":1}` {
		t.Fatalf("call on another connection = %v, %v", r.msg, r.err)
	}
	cancel()
	within(t, "the wedged call", huge, time.Now().Add(slack))
	if err := within(t, "the wedged notification", note, time.Now().Add(slack)); !errors.Is(err, context.Canceled) {
		t.Fatalf("NotifyContext = %v", err)
	}
}

// gateSync runs a Conn over a gateWriter in a synctest bubble; the gate is
// opened at the end of the test if the test has not opened it.
func gateSync(t *testing.T, opts Options) (*Conn, *gateWriter, *io.PipeWriter) {
	t.Helper()
	w := newGateWriter()
	r, peerW := io.Pipe()
	c := NewConn(r, w, opts)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background()) }()
	t.Cleanup(func() {
		c.Close()
		peerW.Close()
		select {
		case <-w.release:
		default:
			close(w.release)
		}
		<-ran
	})
	return c, w, peerW
}

// timed runs f on another goroutine and reports its error and how long
// it took.
type timedErr struct {
	err error
	d   time.Duration
}

func timed(f func() error) <-chan timedErr {
	ch := make(chan timedErr, 1)
	start := time.Now()
	go func() {
		err := f()
		ch <- timedErr{err, time.Since(start)}
	}()
	return ch
}

// Without a context, Notify, Reply, ReplyError and Write wait at most
// DefaultWriteTimeout (10 s) behind a write that does not end, then
// return ErrWriteTimeout; their lines are withdrawn, never written.
func TestWriteTimeoutDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, w, _ := gateSync(t, Options{PeerName: "server"})
		callAsync(t.Context(), c, "first", "")
		<-w.started
		sent := map[string]<-chan timedErr{
			"Notify":     timed(func() error { return c.Notify("gone/notify", nil) }),
			"Reply":      timed(func() error { return c.Reply(json.RawMessage(`"gone-reply"`), nil) }),
			"ReplyError": timed(func() error { return c.ReplyError(json.RawMessage(`"gone-error"`), 1, "x", nil) }),
			"Write":      timed(func() error { return c.Write(&Message{Method: "gone/write"}) }),
		}
		for name, ch := range sent {
			r := <-ch
			if !errors.Is(r.err, ErrWriteTimeout) || r.d != DefaultWriteTimeout {
				t.Errorf("%s = %v after %v, want ErrWriteTimeout after %v", name, r.err, r.d, DefaultWriteTimeout)
			}
			if want := "rpc: line to server withdrawn unwritten: rpc: write timed out after 10s"; r.err.Error() != want {
				t.Errorf("%s = %q, want %q", name, r.err, want)
			}
		}
		close(w.release)
		if err := c.Notify("after", nil); err != nil {
			t.Fatal(err)
		}
		if all := strings.Join(w.chunks(), ""); strings.Contains(all, "gone") || !strings.Contains(all, `"after"`) {
			t.Fatalf("written: %q", all)
		}
	})
}

// A negative WriteTimeout lets Notify wait as long as the connection lasts.
func TestNegativeWriteTimeoutWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, w, _ := gateSync(t, Options{WriteTimeout: -1})
		callAsync(t.Context(), c, "first", "")
		<-w.started
		note := timed(func() error { return c.Notify("patient", nil) })
		time.Sleep(time.Hour)
		synctest.Wait()
		select {
		case r := <-note:
			t.Fatalf("Notify returned (%v) while its line waited", r.err)
		default:
		}
		close(w.release)
		if r := <-note; r.err != nil {
			t.Fatal(r.err)
		}
		if all := strings.Join(w.chunks(), ""); !strings.Contains(all, `"patient"`) {
			t.Fatalf("written: %q", all)
		}
	})
}

// A sender whose line is being written when its context ends returns then;
// its line cannot be withdrawn and is written whole when the write goes
// on, and the connection stays usable. A Call in that case is followed by
// its cancellation.
func TestLineBeingWrittenIsFinished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, w, _ := gateSync(t, Options{PeerName: "server"})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		note := timed(func() error { return c.NotifyContext(ctx, "inflight", json.RawMessage(`{"k":1}`)) })
		<-w.started
		call := callAsync(ctx, c, "queued-call", "")
		r := <-note
		if !errors.Is(r.err, context.DeadlineExceeded) || r.d != time.Second {
			t.Fatalf("NotifyContext = %v after %v", r.err, r.d)
		}
		if want := "rpc: gave up on a line to server already being written (the connection finishes it): context deadline exceeded"; r.err.Error() != want {
			t.Fatalf("error %q, want %q", r.err, want)
		}
		if r := <-call; !errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("Call = %v", r.err)
		}

		// A call whose line is the one being written.
		close(w.release)
		if err := c.Notify("sync", nil); err != nil {
			t.Fatal(err)
		}
		w2 := newGateWriter()
		c2, _ := writerConn(t, w2, func() {
			select {
			case <-w2.release:
			default:
				close(w2.release)
			}
		})
		ctx2, cancel2 := context.WithTimeout(t.Context(), time.Second)
		defer cancel2()
		inflight := callAsync(ctx2, c2, "inflight-call", "")
		<-w2.started
		if r := <-inflight; !errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("Call = %v", r.err)
		}
		close(w2.release)
		if err := c2.Notify("sync", nil); err != nil {
			t.Fatal(err)
		}

		if got, want := methodsWritten(t, w), "inflight sync"; got != want {
			t.Errorf("written %q, want %q", got, want)
		}
		if got, want := methodsWritten(t, w2), "inflight-call notifications/cancelled sync"; got != want {
			t.Errorf("written %q, want %q", got, want)
		}
	})
}

// methodsWritten decodes what w got, which must be whole lines, and
// returns their methods.
func methodsWritten(t *testing.T, w *gateWriter) string {
	t.Helper()
	all := strings.Join(w.chunks(), "")
	if all != "" && !strings.HasSuffix(all, "\n") {
		t.Fatalf("written %q: not whole lines", all)
	}
	var got []string
	for _, l := range strings.SplitAfter(all, "\n") {
		if l == "" {
			continue
		}
		m, err := Decode([]byte(l))
		if err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		got = append(got, m.Method)
	}
	return strings.Join(got, " ")
}

// A context that has ended sends nothing.
func TestWriteContextEndedSendsNothing(t *testing.T) {
	c, p := startConn(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for name, err := range map[string]error{
		"NotifyContext":     c.NotifyContext(ctx, "x", nil),
		"ReplyContext":      c.ReplyContext(ctx, json.RawMessage(`1`), nil),
		"ReplyErrorContext": c.ReplyErrorContext(ctx, json.RawMessage(`1`), 1, "x", nil),
		"WriteContext":      c.WriteContext(ctx, &Message{Method: "x"}),
	} {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s = %v", name, err)
		}
	}
	go c.Notify("next", nil)
	if m := p.read(); m.Method != "next" {
		t.Fatalf("peer read %q first", m.Method)
	}
}

// A sender held for room in a full queue gives up at its bound too.
func TestSenderHeldForRoomIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, w, _ := gateSync(t, Options{})
		callAsync(t.Context(), c, "first", "")
		<-w.started
		pad := json.RawMessage(`{"pad":"` + strings.Repeat("x", maxQueued*2/3) + `"}`)
		callAsync(t.Context(), c, "filler", string(pad))
		synctest.Wait()
		held := timed(func() error { return c.Notify("held", pad) })
		r := <-held
		if !errors.Is(r.err, ErrWriteTimeout) || r.d != DefaultWriteTimeout {
			t.Fatalf("Notify = %v after %v", r.err, r.d)
		}
		close(w.release)
		if err := c.Notify("sync", nil); err != nil {
			t.Fatal(err)
		}
		if all := strings.Join(w.chunks(), ""); strings.Contains(all, `"held"`) || !strings.Contains(all, `"filler"`) {
			t.Fatal("the held line was written, or the filler was not")
		}
	})
}

// A line the connection sends on its own (here the automatic reply to a
// request when there is no Handler) waits for room at most WriteTimeout,
// then is dropped and reported.
func TestOwnLineDroppedAfterWriteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := make(errSink, 10)
		c, w, peer := gateSync(t, Options{OnError: sink.onError, WriteTimeout: time.Minute})
		callAsync(t.Context(), c, "first", "")
		<-w.started
		pad := `{"pad":"` + strings.Repeat("x", maxQueued) + `"}`
		callAsync(t.Context(), c, "filler", pad)
		synctest.Wait()
		start := time.Now()
		if _, err := io.WriteString(peer, `{"jsonrpc":"2.0","id":"srv-1","method":"unknown"}`+"\n"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case err := <-sink:
			t.Fatalf("reported %v before the timeout", err)
		default:
		}
		err := <-sink
		if !errors.Is(err, ErrWriteTimeout) || time.Since(start) != time.Minute {
			t.Fatalf("reported %v after %v", err, time.Since(start))
		}
		close(w.release)
		if err := c.Notify("sync", nil); err != nil {
			t.Fatal(err)
		}
		if all := strings.Join(w.chunks(), ""); strings.Contains(all, "srv-1") {
			t.Fatal("the dropped reply was written")
		}
	})
}
