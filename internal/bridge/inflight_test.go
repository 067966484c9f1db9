package bridge

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// countingActivity counts the Begins and Ends passed on to it.
type countingActivity struct{ begun, ended atomic.Int32 }

func (c *countingActivity) Begin() { c.begun.Add(1) }
func (c *countingActivity) End()   { c.ended.Add(1) }

// Wait returns at once with nothing in flight; with a request in flight
// it returns when the last one ends, else when the timeout passes or ctx
// ends, whichever is first; Begin and End reach Next.
func TestInFlightWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &countingActivity{}
		f := &InFlight{Next: next}
		if !f.Wait(t.Context(), time.Second) {
			t.Fatal("Wait with nothing in flight: false")
		}

		f.Begin()
		f.Begin()
		start := time.Now()
		go func() {
			time.Sleep(100 * time.Millisecond)
			f.End()
			time.Sleep(100 * time.Millisecond)
			f.End()
		}()
		if !f.Wait(t.Context(), time.Hour) || time.Since(start) != 200*time.Millisecond {
			t.Fatalf("Wait returned after %v, want when the last request ended (200ms)", time.Since(start))
		}
		if next.begun.Load() != 2 || next.ended.Load() != 2 {
			t.Fatalf("Next saw %d begins and %d ends, want 2 and 2", next.begun.Load(), next.ended.Load())
		}

		f.Begin() // never ends
		start = time.Now()
		if f.Wait(t.Context(), 2*time.Second) || time.Since(start) != 2*time.Second {
			t.Fatalf("Wait on a request that never ends: returned after %v, want false after the 2s bound", time.Since(start))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start = time.Now()
		if f.Wait(ctx, time.Hour) || time.Since(start) != 300*time.Millisecond {
			t.Fatalf("Wait with ctx ending at 300ms: returned after %v", time.Since(start))
		}
		f.End()
		if !f.Wait(t.Context(), time.Second) {
			t.Fatal("Wait after the last End: false")
		}
	})
}

// HoldEOF passes bytes and errors other than EOF through at once, holds
// EOF until the requests in flight ended (bounded by its timeout and by
// ctx), and holds it only once.
func TestHoldEOF(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &InFlight{}
		r := f.HoldEOF(t.Context(), strings.NewReader("line\n"), 0)
		f.Begin()
		b, err := io.ReadAll(io.LimitReader(r, 5))
		if string(b) != "line\n" || err != nil {
			t.Fatalf("read %q %v", b, err)
		}
		start := time.Now()
		go func() {
			time.Sleep(time.Second)
			f.End()
		}()
		if n, err := r.Read(make([]byte, 8)); n != 0 || err != io.EOF {
			t.Fatalf("the held read: %d %v, want 0 EOF", n, err)
		}
		if time.Since(start) != time.Second {
			t.Fatalf("EOF came after %v, want when the request in flight ended (1s)", time.Since(start))
		}

		// Bounded by the timeout: DefaultFlushTimeout for 0.
		f.Begin()
		r = f.HoldEOF(t.Context(), strings.NewReader(""), 0)
		start = time.Now()
		if _, err := r.Read(make([]byte, 8)); err != io.EOF || time.Since(start) != DefaultFlushTimeout {
			t.Fatalf("EOF with a request that never ends: %v after %v, want EOF after %v", err, time.Since(start), DefaultFlushTimeout)
		}
		start = time.Now()
		if _, err := r.Read(make([]byte, 8)); err != io.EOF || time.Since(start) != 0 {
			t.Fatalf("the second read at EOF: %v after %v, want EOF at once", err, time.Since(start))
		}

		// Bounded by ctx.
		ctx, cancel := context.WithCancel(t.Context())
		r = f.HoldEOF(ctx, strings.NewReader(""), time.Hour)
		go func() {
			time.Sleep(50 * time.Millisecond)
			cancel()
		}()
		start = time.Now()
		if _, err := r.Read(make([]byte, 8)); err != io.EOF || time.Since(start) != 50*time.Millisecond {
			t.Fatalf("EOF with ctx cancelled at 50ms: %v after %v", err, time.Since(start))
		}

		// Another error is not held.
		r = f.HoldEOF(t.Context(), io.MultiReader(&failReader{}), time.Hour)
		start = time.Now()
		if _, err := r.Read(make([]byte, 8)); err != io.ErrUnexpectedEOF || time.Since(start) != 0 {
			t.Fatalf("a read error: %v after %v, want it at once", err, time.Since(start))
		}
		f.End()
	})
}

type failReader struct{}

func (*failReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
