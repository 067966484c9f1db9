package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The inline write (write.go, inline.go): on an idle connection whose
// writer takes writes that do not block, a sender writes its line itself;
// what the pipe has no room for goes to the connection's writer.

func (c *Conn) writerRuns() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asyncRuns
}

// Only a writer in the runtime's poller, in non-blocking mode, is written
// inline.
func TestInlineOnlyForWritesThatCannotBlock(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	if newRawWriter(pw) == nil {
		t.Error("an os.Pipe's writing end is not written inline")
	}
	_ = pw.Fd() // makes it blocking
	if newRawWriter(pw) != nil {
		t.Error("a blocking os.Pipe is written inline")
	}
	f, err := os.Create(t.TempDir() + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if newRawWriter(f) != nil {
		t.Error("a regular file (no poller) is written inline")
	}
	_, iw := io.Pipe()
	if newRawWriter(iw) != nil {
		t.Error("an io.Pipe is written inline")
	}
}

// waitTaken waits until the connection's writer has taken what was
// queued and is writing it.
func waitTaken(t *testing.T, c *Conn) {
	t.Helper()
	deadline := time.Now().Add(stuckAfter)
	for {
		if c.writerTook() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing was taken for writing")
		}
		time.Sleep(time.Millisecond)
	}
}

// readMethods decodes the next n lines, which must come within slack, and
// returns their methods.
func readMethods(t *testing.T, lines <-chan string, n int) []string {
	t.Helper()
	var got []string
	timeout := time.After(slack)
	for len(got) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the pipe ended after %q", got)
			}
			m, err := Decode([]byte(l))
			if err != nil {
				t.Fatalf("line %d is not a message (%v): %.100q", len(got), err, l)
			}
			got = append(got, m.Method)
		case <-timeout:
			t.Fatalf("the peer read %q, then nothing for %v", got, slack)
		}
	}
	return got
}

// readLines reads the lines the peer gets from pr, on a goroutine, until
// pr ends.
func readLines(pr *os.File) <-chan string {
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
	return lines
}

// On an idle os.Pipe every sender — Notify, Reply, their Context
// variants, Call — writes its own line: no goroutine of the connection
// starts, and each line is in the pipe when its sender returns (for Call:
// when it is answered).
func TestInlineWriteOnAnIdlePipe(t *testing.T) {
	c, pr := pipeConn(t, Options{})
	if c.raw == nil {
		t.Fatal("the os.Pipe is not written inline")
	}
	br := bufio.NewReader(pr)
	next := func() *Message {
		t.Helper()
		l, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		m, err := Decode(l)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		return m
	}
	ctx := t.Context()
	for i := range 3 {
		if err := c.Notify("n", json.RawMessage(fmt.Sprintf(`[%d]`, i))); err != nil {
			t.Fatal(err)
		}
		if err := c.NotifyContext(ctx, "nc", nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Reply(json.RawMessage(`"r"`), nil); err != nil {
			t.Fatal(err)
		}
		if err := c.ReplyErrorContext(ctx, json.RawMessage(`"e"`), 1, "x", nil); err != nil {
			t.Fatal(err)
		}
		if m := next(); m.Method != "n" || string(m.Params) != fmt.Sprintf(`[%d]`, i) {
			t.Fatalf("read %+v", m)
		}
		if m := next(); m.Method != "nc" {
			t.Fatalf("read %+v", m)
		}
		if m := next(); string(m.ID) != `"r"` {
			t.Fatalf("read %+v", m)
		}
		if m := next(); string(m.ID) != `"e"` || m.Error == nil {
			t.Fatalf("read %+v", m)
		}
	}
	if n := c.writerRuns(); n != 0 {
		t.Fatalf("%d writer goroutines started for an idle connection", n)
	}

	// Call, to a peer that answers at once.
	caller := echoPairOS(t)
	for i := range 3 {
		m, err := caller.Call(ctx, "echo", json.RawMessage(fmt.Sprintf(`[%d]`, i)))
		if err != nil || string(m.Result) != fmt.Sprintf(`[%d]`, i) {
			t.Fatalf("Call = %v, %v", m, err)
		}
	}
	if n := caller.writerRuns(); n != 0 {
		t.Fatalf("%d writer goroutines started for sequential calls", n)
	}
}

// A line longer than the pipe's buffer is begun by its sender and
// finished by the connection's writer: a NotifyContext whose peer does not
// read returns at its context with an error saying the line was being
// written, and so does a Notify at its WriteTimeout; a line sent
// meanwhile waits behind; once the peer reads it gets both lines whole
// and in order.
func TestInlineRestFinishedByTheWriter(t *testing.T) {
	for _, timed := range []bool{false, true} {
		t.Run(map[bool]string{false: "context", true: "WriteTimeout"}[timed], func(t *testing.T) {
			c, pr := pipeConn(t, Options{WriteTimeout: shortCtx})
			start := time.Now()
			var huge <-chan error
			if timed {
				huge = errAsync(func() error { return c.Notify("huge", json.RawMessage(hugeParams)) })
			} else {
				ctx, cancel := context.WithTimeout(t.Context(), shortCtx)
				defer cancel()
				huge = errAsync(func() error { return c.NotifyContext(ctx, "huge", json.RawMessage(hugeParams)) })
			}
			err := within(t, "the huge notification", huge, start.Add(shortCtx+slack))
			want := error(context.DeadlineExceeded)
			if timed {
				want = ErrWriteTimeout
			}
			if !errors.Is(err, want) || !strings.Contains(err.Error(), "already being written") {
				t.Fatalf("huge = %v, want %v, the line being written", err, want)
			}
			if n := c.writerRuns(); n != 1 {
				t.Fatalf("%d writer goroutines started, want 1 for the rest of the line", n)
			}
			after := errAsync(func() error { return c.NotifyContext(t.Context(), "after", nil) })

			lines := readLines(pr)
			var got []string
			for l := range lines {
				m, err := Decode([]byte(l))
				if err != nil {
					t.Fatalf("line %d is not a message (%v): %.100q", len(got), err, l)
				}
				got = append(got, m.Method)
				if m.Method == "huge" && string(m.Params) != hugeParams {
					t.Fatal("the huge line's params changed on the way")
				}
				if m.Method == "after" {
					break
				}
			}
			if err := <-after; err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, " ") != "huge after" {
				t.Fatalf("the peer read %q, want huge, after", got)
			}
			c.Close()
			for range lines {
			}
		})
	}
}

// A line sent while another's sender writes inline is written after that
// line: after its rest, when the pipe takes only part of it, else by the
// writer goroutine that the first sender starts on its way out.
func TestLineSentDuringAnInlineWriteGoesAfterIt(t *testing.T) {
	for name, params := range map[string]string{"whole": `{}`, "part": hugeParams} {
		t.Run(name, func(t *testing.T) {
			c, pr := pipeConn(t, Options{WriteTimeout: stuckAfter / 2})
			var second <-chan error
			c.raw.afterWrite = func() {
				c.raw.afterWrite = nil
				second = errAsync(func() error { return c.Notify("second", nil) })
				waitQueued(t, c, 1)
			}
			first := errAsync(func() error { return c.NotifyContext(t.Context(), "first", json.RawMessage(params)) })
			lines := readLines(pr) // takes the first line whole, so both fit
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			if err := <-second; err != nil {
				t.Fatal(err)
			}
			got := readMethods(t, lines, 2)
			if strings.Join(got, " ") != "first second" {
				t.Fatalf("the peer read %q", got)
			}
			c.Close()
			for range lines {
			}
		})
	}
}

// A sender whose line's rest waits in a full pipe returns when its context
// is cancelled (not only at a deadline), and a Call in that state sends
// its cancellation after the line.
func TestInlineSenderReturnsAtCancel(t *testing.T) {
	c, pr := pipeConn(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	note := errAsync(func() error { return c.NotifyContext(ctx, "huge-note", json.RawMessage(hugeParams)) })
	waitTaken(t, c)
	call := callAsync(ctx, c, "huge-call", hugeParams)
	waitQueued(t, c, 1) // the call's line, behind the rest of the notification
	select {
	case err := <-note:
		t.Fatalf("NotifyContext returned (%v) while its line was being written", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	if err := within(t, "NotifyContext", note, time.Now().Add(slack)); !errors.Is(err, context.Canceled) {
		t.Fatalf("NotifyContext = %v", err)
	}
	if r := within(t, "Call", call, time.Now().Add(slack)); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Call = %v", r.err)
	}
	lines := readLines(pr)
	marked := errAsync(func() error { return c.NotifyContext(t.Context(), "marker", nil) })
	var got []string
	for l := range lines {
		m, err := Decode([]byte(l))
		if err != nil {
			t.Fatalf("line %d is not a message (%v): %.100q", len(got), err, l)
		}
		got = append(got, m.Method)
		if m.Method == "marker" {
			break
		}
	}
	if err := <-marked; err != nil {
		t.Fatal(err)
	}
	// The call's line was still queued at the cancel: withdrawn, and so no
	// cancellation either.
	if strings.Join(got, " ") != "huge-note marker" {
		t.Fatalf("the peer read %q", got)
	}
	c.Close()
	for range lines {
	}
}

// Many senders of lines larger than a pipe's atomic write, against a peer
// that reads slowly: lines begun inline, rests handed over and lines
// queued meanwhile never interleave, and each sender's lines keep their
// order.
func TestInlineAndQueuedLinesNeverInterleave(t *testing.T) {
	c, pr := pipeConn(t, Options{WriteTimeout: -1})
	const senders, each = 8, 40
	pad := strings.Repeat("y", 20<<10)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				p := json.RawMessage(fmt.Sprintf(`{"s":%d,"i":%d,"pad":%q}`, s, i, pad))
				if err := c.Notify("n", p); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	br := bufio.NewReaderSize(pr, 4096)
	nextI := make([]int, senders)
	buf := make([]byte, 1000)
	var line []byte
	for n := 0; n < senders*each; {
		k, err := br.Read(buf) // small reads: the pipe fills up now and then
		if err != nil {
			t.Fatal(err)
		}
		line = append(line, buf[:k]...)
		for {
			i := bytes.IndexByte(line, '\n')
			if i < 0 {
				break
			}
			var p struct{ S, I int }
			m, err := Decode(line[:i+1])
			if err == nil {
				err = json.Unmarshal(m.Params, &p)
			}
			if err != nil {
				t.Fatalf("line %d: %v: %.80q", n, err, line[:i])
			}
			if p.I != nextI[p.S] {
				t.Fatalf("sender %d: line %d came after %d", p.S, p.I, nextI[p.S]-1)
			}
			nextI[p.S]++
			line = line[i+1:]
			n++
		}
	}
	wg.Wait()
}
