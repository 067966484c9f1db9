package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// gateWriter holds its first Write until released (then fails it if fail
// is set) and records every Write as one chunk.
type gateWriter struct {
	started, release chan struct{}
	fail             bool
	once             sync.Once
	mu               sync.Mutex
	writes           []string
}

func newGateWriter() *gateWriter {
	return &gateWriter{started: make(chan struct{}), release: make(chan struct{})}
}

func (w *gateWriter) Write(b []byte) (int, error) {
	first := false
	w.once.Do(func() {
		first = true
		close(w.started)
		<-w.release
	})
	if first && w.fail {
		return 0, errors.New("pipe broke")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(b))
	return len(b), nil
}

func (w *gateWriter) chunks() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.writes...)
}

func (c *Conn) queuedLen() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return len(c.wr.queue)
}

// waitQueued waits until n lines wait behind the write in progress.
func waitQueued(t *testing.T, c *Conn, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.queuedLen() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d lines queued, want %d", c.queuedLen(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func gateConn(t *testing.T, w *gateWriter) (*Conn, *io.PipeWriter) {
	t.Helper()
	return writerConn(t, w, nil)
}

// writerConn runs a Conn that writes to w and reads from a pipe whose
// writing end it returns. At the end of the test it closes both, runs
// unblock (to free a writer held in Write) and waits for Run.
func writerConn(t *testing.T, w io.Writer, unblock func()) (*Conn, *io.PipeWriter) {
	t.Helper()
	r, peerW := io.Pipe()
	c := NewConn(r, w, Options{})
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background()) }()
	t.Cleanup(func() {
		c.Close()
		peerW.Close()
		if unblock != nil {
			unblock()
		}
		<-ran
	})
	return c, peerW
}

// Lines sent while a write is in progress go out together, in order, in
// one Write; a Notify returns only once its line is written, a Call at
// once.
func TestQueuedLinesGoOutInOneWrite(t *testing.T) {
	w := newGateWriter()
	c, peer := gateConn(t, w)
	first := callAsync(t.Context(), c, "first", "")
	<-w.started
	var calls []<-chan result
	for i := range 4 {
		calls = append(calls, callAsync(t.Context(), c, "q"+string(rune('0'+i)), ""))
		waitQueued(t, c, i+1)
	}
	notified := make(chan error, 1)
	go func() { notified <- c.Notify("note", json.RawMessage(`{"k":1}`)) }()
	waitQueued(t, c, 5)
	select {
	case err := <-notified:
		t.Fatalf("Notify returned (%v) before its line was written", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(w.release)
	if err := <-notified; err != nil {
		t.Fatal(err)
	}
	got := w.chunks()
	if len(got) != 2 {
		t.Fatalf("%d writes %q, want 2: the first line, then the queued ones together", len(got), got)
	}
	if !strings.Contains(got[0], `"first"`) {
		t.Errorf("first write %q", got[0])
	}
	lines := strings.Split(strings.TrimSuffix(got[1], "\n"), "\n")
	want := []string{`"q0"`, `"q1"`, `"q2"`, `"q3"`, `"note"`}
	if len(lines) != len(want) {
		t.Fatalf("batch %q: %d lines, want %d", got[1], len(lines), len(want))
	}
	for i, l := range lines {
		if _, err := Decode([]byte(l)); err != nil || !strings.Contains(l, want[i]) {
			t.Errorf("batch line %d = %q (%v), want %s", i, l, err, want[i])
		}
	}
	// Answer everything: ids are given in order, 1 to 5.
	for id := 1; id <= 5; id++ {
		if _, err := io.WriteString(peer, `{"jsonrpc":"2.0","id":`+string(rune('0'+id))+`,"result":{}}`+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range append([]<-chan result{first}, calls...) {
		if r := <-ch; r.err != nil || r.msg == nil {
			t.Errorf("call: %v", r.err)
		}
	}
}

// A peer that stops reading holds senders once maxQueued bytes wait; a
// Call cancelled while held sends nothing.
func TestFullQueueHoldsSenders(t *testing.T) {
	w := newGateWriter()
	c, _ := gateConn(t, w)
	first := callAsync(t.Context(), c, "first", "")
	<-w.started
	pad := `{"pad":"` + strings.Repeat("x", maxQueued*2/3) + `"}`
	second := callAsync(t.Context(), c, "second", pad)
	waitQueued(t, c, 1)
	ctx, cancel := context.WithCancel(t.Context())
	third := callAsync(ctx, c, "third", pad)
	select {
	case r := <-third:
		t.Fatalf("third call returned (%v) past a full queue", r.err)
	case <-time.After(20 * time.Millisecond):
	}
	if n := c.queuedLen(); n != 1 {
		t.Fatalf("%d lines queued, want 1: the third is held", n)
	}
	cancel()
	if r := <-third; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("third = %v, want context.Canceled", r.err)
	}
	close(w.release)
	deadline := time.Now().Add(5 * time.Second)
	for len(w.chunks()) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	all := strings.Join(w.chunks(), "")
	if !strings.Contains(all, `"second"`) {
		t.Error("the queued second call was not written")
	}
	if strings.Contains(all, `"third"`) {
		t.Error("the call cancelled while held was written")
	}
	c.Close()
	for _, ch := range []<-chan result{first, second} {
		if r := <-ch; !errors.Is(r.err, ErrClosed) {
			t.Errorf("call = %v, want ErrClosed", r.err)
		}
	}
}

// A write error ends the connection and fails what was queued behind it:
// a waiting Notify gets the error, not nil.
func TestWriteErrorFailsQueuedSenders(t *testing.T) {
	w := newGateWriter()
	w.fail = true
	c, _ := gateConn(t, w)
	first := callAsync(t.Context(), c, "first", "")
	<-w.started
	second := callAsync(t.Context(), c, "second", "")
	waitQueued(t, c, 1)
	notified := make(chan error, 1)
	go func() { notified <- c.Notify("note", nil) }()
	waitQueued(t, c, 2)
	close(w.release)
	if err := <-notified; !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "pipe broke") {
		t.Fatalf("Notify = %v, want ErrClosed with the write error", err)
	}
	for _, ch := range []<-chan result{first, second} {
		if r := <-ch; !errors.Is(r.err, ErrClosed) {
			t.Errorf("call = %v, want ErrClosed", r.err)
		}
	}
	if got := w.chunks(); len(got) != 0 {
		t.Errorf("wrote %q after the write error", got)
	}
	if err := c.Notify("late", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Notify after the end = %v", err)
	}
}

// A sender held by a full queue goes on when the queue empties because the
// call that filled it was withdrawn.
func TestHeldSenderGoesOnWhenTheQueueIsWithdrawn(t *testing.T) {
	w := newGateWriter()
	c, _ := gateConn(t, w)
	first := callAsync(t.Context(), c, "first", "")
	<-w.started
	pad := `{"pad":"` + strings.Repeat("x", maxQueued*2/3) + `"}`
	ctx, cancel := context.WithCancel(t.Context())
	big := callAsync(ctx, c, "big", pad)
	waitQueued(t, c, 1)
	notified := make(chan error, 1)
	go func() { notified <- c.Notify("held", json.RawMessage(pad)) }()
	time.Sleep(20 * time.Millisecond) // held: the queue is full
	if n := c.queuedLen(); n != 1 {
		t.Fatalf("%d queued, want 1 (the notification held)", n)
	}
	cancel()
	if r := <-big; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("big = %v", r.err)
	}
	close(w.release)
	select {
	case err := <-notified:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the held Notify never went on")
	}
	all := strings.Join(w.chunks(), "")
	if !strings.Contains(all, `"held"`) || strings.Contains(all, `"big"`) {
		t.Fatalf("written: held %v, big %v", strings.Contains(all, `"held"`), strings.Contains(all, `"big"`))
	}
	c.Close()
	<-first
}

// seqWriter blocks its n-th Write (from 1) until gates[n] is closed, if
// there is such a gate, and records every Write.
type seqWriter struct {
	mu     sync.Mutex
	n      int
	gates  map[int]chan struct{}
	writes []string
	at     map[int]chan struct{} // closed when Write n starts
}

func newSeqWriter(blocked ...int) *seqWriter {
	w := &seqWriter{gates: map[int]chan struct{}{}, at: map[int]chan struct{}{}}
	for _, n := range blocked {
		w.gates[n] = make(chan struct{})
		w.at[n] = make(chan struct{})
	}
	return w
}

func (w *seqWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.n++
	n := w.n
	gate, at := w.gates[n], w.at[n]
	w.mu.Unlock()
	if gate != nil {
		close(at)
		<-gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(b))
	return len(b), nil
}

func (w *seqWriter) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.writes, "")
}

func seqConn(t *testing.T, w *seqWriter) *Conn {
	t.Helper()
	c, _ := writerConn(t, w, func() {
		for _, g := range w.gates {
			select {
			case <-g:
			default:
				close(g)
			}
		}
	})
	return c
}

// A Call whose line is written returns when its context ends, even while
// the lines queued behind it are stuck in the peer's pipe.
func TestCallIsNotHeldByOthersLines(t *testing.T) {
	w := newSeqWriter(1, 2)
	c := seqConn(t, w)
	ctx, cancel := context.WithCancel(t.Context())
	a := callAsync(ctx, c, "a", "")
	<-w.at[1]
	b := callAsync(t.Context(), c, "b", "")
	waitQueued(t, c, 1)
	close(w.gates[1]) // a's line is written; b's write then sticks
	<-w.at[2]
	cancel()
	select {
	case r := <-a:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("a = %v", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call whose line was written stayed held by the line queued behind it")
	}
	c.Close()
	if r := <-b; !errors.Is(r.err, ErrClosed) {
		t.Fatalf("b = %v", r.err)
	}
}

// Nothing queued is written once the connection has ended.
func TestNoLineAfterTheEnd(t *testing.T) {
	w := newSeqWriter(1)
	c := seqConn(t, w)
	a := callAsync(t.Context(), c, "a", "")
	<-w.at[1]
	b := callAsync(t.Context(), c, "b", "")
	waitQueued(t, c, 1)
	notified := make(chan error, 1)
	go func() { notified <- c.Notify("note", nil) }()
	waitQueued(t, c, 2)
	c.Close()
	if err := <-notified; !errors.Is(err, ErrClosed) {
		t.Fatalf("Notify = %v, want ErrClosed", err)
	}
	close(w.gates[1])
	for _, ch := range []<-chan result{a, b} {
		if r := <-ch; !errors.Is(r.err, ErrClosed) {
			t.Errorf("call = %v", r.err)
		}
	}
	<-c.asyncDone()
	if all := w.all(); strings.Contains(all, `"b"`) || strings.Contains(all, `"note"`) {
		t.Fatalf("written after the end: %q", all)
	}
}
