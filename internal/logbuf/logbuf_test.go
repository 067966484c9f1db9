package logbuf

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// lines renders a page as "seq:line" items.
func lines(p Page) string {
	var s []string
	for _, e := range p.Entries {
		s = append(s, fmt.Sprintf("%d:%s", e.Seq, e.Line))
	}
	return strings.Join(s, " ")
}

func add(b *Buffer, ls ...string) {
	for _, l := range ls {
		b.Add(Entry{Line: l})
	}
}

// The buffer keeps the newest MaxLines lines; Tail says how many of the
// lines it was asked for are gone.
func TestEvictionByLines(t *testing.T) {
	b := New(Options{MaxLines: 3})
	add(b, "a", "b", "c", "d", "e")
	for _, c := range []struct {
		n       int
		want    string
		dropped uint64
	}{
		{2, "4:d 5:e", 0},
		{3, "3:c 4:d 5:e", 0},
		{4, "3:c 4:d 5:e", 1},
		{100, "3:c 4:d 5:e", 2}, // only two lines were ever discarded
		{0, "", 0},
		{-1, "", 0},
	} {
		if p := b.Tail(c.n); lines(p) != c.want || p.Dropped != c.dropped || p.Last != 5 {
			t.Errorf("Tail(%d) = %q dropped %d last %d; want %q dropped %d last 5", c.n, lines(p), p.Dropped, p.Last, c.want, c.dropped)
		}
	}
}

// The buffer keeps at most MaxBytes bytes of lines and session keys; a
// line longer than that is kept cut to it (at a rune boundary), alone.
func TestEvictionByBytes(t *testing.T) {
	b := New(Options{MaxBytes: 10})
	add(b, "aaaa", "bbbb")
	if p := b.Tail(10); lines(p) != "1:aaaa 2:bbbb" {
		t.Fatalf("8 bytes of 10: %q", lines(p))
	}
	add(b, "cccc") // 12 bytes: the oldest goes
	if p := b.Tail(10); lines(p) != "2:bbbb 3:cccc" || p.Dropped != 1 {
		t.Fatalf("after 12 bytes: %q dropped %d", lines(p), p.Dropped)
	}
	b.Add(Entry{Line: "dd", Session: "s12"}) // 4+4+5 = 13: another goes
	if p := b.Tail(10); lines(p) != "3:cccc 4:dd" || p.Dropped != 2 {
		t.Fatalf("after a line with a session key: %q dropped %d", lines(p), p.Dropped)
	}
	add(b, "0123456789é") // 12 bytes: cut to 10, the é whole or not at all
	if p := b.Tail(10); lines(p) != "5:0123456789" {
		t.Fatalf("a line beyond the bound: %q", lines(p))
	}
	add(b, "012345678é")
	if p := b.Tail(10); lines(p) != "6:012345678" {
		t.Fatalf("a line cut inside a rune: %q", lines(p))
	}
}

// A follower whose position the buffer has discarded gets what is kept
// and the number of lines it missed, from After and from Wait alike.
func TestFollowerToldWhatWasDropped(t *testing.T) {
	b := New(Options{MaxLines: 3})
	add(b, "a")
	pos := b.Tail(10).Last
	for i := range 9 {
		add(b, fmt.Sprint(i))
	}
	want := "8:6 9:7 10:8"
	if p := b.After(pos); lines(p) != want || p.Dropped != 6 || p.Last != 10 {
		t.Fatalf("After(%d) = %q dropped %d last %d; want %q, 6 dropped (2..7)", pos, lines(p), p.Dropped, p.Last, want)
	}
	p, err := b.Wait(t.Context(), pos)
	if err != nil || lines(p) != want || p.Dropped != 6 {
		t.Fatalf("Wait(%d) = %q dropped %d, %v", pos, lines(p), p.Dropped, err)
	}
	// Caught up: nothing, nothing missed.
	if p := b.After(p.Last); len(p.Entries) != 0 || p.Dropped != 0 || p.Last != 10 {
		t.Fatalf("After(last) = %+v", p)
	}
	if p := b.After(8); lines(p) != "9:7 10:8" || p.Dropped != 0 {
		t.Fatalf("After(8) = %q dropped %d", lines(p), p.Dropped)
	}
}

// Wait returns as soon as a line after its position is added, and not
// before; it gives up when its context ends.
func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Options{})
		add(b, "old")
		got := make(chan Page, 1)
		go func() {
			p, err := b.Wait(context.Background(), 1)
			if err != nil {
				t.Error(err)
			}
			got <- p
		}()
		synctest.Wait()
		select {
		case p := <-got:
			t.Fatalf("Wait returned %+v with nothing new", p)
		default:
		}
		add(b, "new")
		synctest.Wait()
		select {
		case p := <-got:
			if lines(p) != "2:new" || p.Dropped != 0 {
				t.Fatalf("Wait returned %q dropped %d", lines(p), p.Dropped)
			}
		default:
			t.Fatal("Wait still waits after a line was added")
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		if p, err := b.Wait(ctx, 2); err != context.DeadlineExceeded || len(p.Entries) != 0 {
			t.Fatalf("Wait past its context: %+v, %v", p, err)
		}
		if took := time.Since(start); took != time.Minute {
			t.Fatalf("Wait gave up after %v, want its context's minute", took)
		}
	})
}

// A follower that stops reading holds nothing up: lines keep being added
// (more than the buffer holds) while it is stuck, and when it reads again
// it is told how many it missed.
func TestStalledFollowerDoesNotBlockAdd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Options{MaxLines: 10})
		out := make(chan Page) // nobody reads it until the end
		go func() {
			var pos uint64
			for {
				p, err := b.Wait(t.Context(), pos)
				if err != nil {
					return
				}
				out <- p // stuck here while the test adds
				pos = p.Last
			}
		}()
		add(b, "first")
		synctest.Wait() // the follower is stuck handing on its first page
		for i := range 1000 {
			add(b, fmt.Sprint(i))
		}
		if p := <-out; lines(p) != "1:first" {
			t.Fatalf("first page %q", lines(p))
		}
		p := <-out
		if p.Dropped != 990 || len(p.Entries) != 10 || p.Entries[0].Seq != 992 || p.Last != 1001 {
			t.Fatalf("after the stall: %d lines from %d, dropped %d, last %d; want 10 from 992, 990 dropped (2..991)",
				len(p.Entries), p.Entries[0].Seq, p.Dropped, p.Last)
		}
	})
}

// Since returns the lines written at or after a time; it says lines were
// dropped only when a discarded line was written at or after it.
func TestSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Options{MaxLines: 3})
		start := time.Now()
		for _, l := range []string{"a", "b", "c", "d"} { // a line a minute
			add(b, l)
			time.Sleep(time.Minute)
		}
		// now = start+4m; kept b (1m), c (2m), d (3m); a (0m) discarded.
		for _, c := range []struct {
			since   time.Duration
			want    string
			dropped uint64
		}{
			{90 * time.Second, "4:d", 0},
			{150 * time.Second, "3:c 4:d", 0},
			{3 * time.Minute, "2:b 3:c 4:d", 0},
			{4 * time.Minute, "2:b 3:c 4:d", 1}, // a, written at start, is gone
			{0, "", 0},
		} {
			if p := b.Since(time.Now().Add(-c.since)); lines(p) != c.want || p.Dropped != c.dropped || p.Last != 4 {
				t.Errorf("Since(now-%v) = %q dropped %d last %d; want %q dropped %d", c.since, lines(p), p.Dropped, p.Last, c.want, c.dropped)
			}
		}
		// A line keeps the time it was given.
		b.Add(Entry{Line: "e", Time: start, PID: 7, Session: "s"})
		if e := b.Tail(1).Entries[0]; !e.Time.Equal(start) || e.PID != 7 || e.Session != "s" || e.Seq != 5 {
			t.Fatalf("entry %+v", e)
		}
	})
}

// Writers and followers at once: every follower accounts for every line,
// seen or dropped, in order and without a gap it was not told of (run
// under -race, which also checks the Buffer's locking).
func TestConcurrentAddAndWait(t *testing.T) {
	const writers, perWriter, followers = 4, 2000, 4
	b := New(Options{MaxLines: 50})
	var wg sync.WaitGroup
	errs := make(chan error, followers)
	for range followers {
		wg.Go(func() {
			var pos, seen, dropped uint64
			for pos < writers*perWriter {
				p, err := b.Wait(t.Context(), pos)
				if err != nil {
					errs <- err
					return
				}
				next := pos + 1 + p.Dropped
				for _, e := range p.Entries {
					if e.Seq != next {
						errs <- fmt.Errorf("after %d (+%d dropped), line %d", pos, p.Dropped, e.Seq)
						return
					}
					next++
				}
				seen += uint64(len(p.Entries))
				dropped += p.Dropped
				pos = next - 1
				if pos != p.Last {
					errs <- fmt.Errorf("page ends at %d, Last %d", pos, p.Last)
					return
				}
				b.Tail(10) // a reader of another kind, meanwhile
			}
			if seen+dropped != writers*perWriter {
				errs <- fmt.Errorf("saw %d, told of %d dropped, of %d", seen, dropped, writers*perWriter)
			}
		})
	}
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				b.Add(Entry{Line: fmt.Sprintf("w%d %d", w, i), PID: w})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p := b.Tail(100); p.Last != writers*perWriter || len(p.Entries) != 50 || p.Dropped != 50 {
		t.Fatalf("at the end: last %d, %d kept, %d dropped", p.Last, len(p.Entries), p.Dropped)
	}
}

// A Registry has one buffer per name, the same one for every caller at
// once; after Remove, a new one numbers its lines afresh, with another
// epoch.
func TestRegistry(t *testing.T) {
	var r Registry
	const n = 16
	got := make([]*Buffer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i] = r.Get("x")
			got[i].Add(Entry{Line: fmt.Sprint(i)})
		})
	}
	wg.Wait()
	for i := range n {
		if got[i] != got[0] {
			t.Fatalf("Get gave caller %d another buffer", i)
		}
	}
	if r.Get("x").Tail(n).Last != n || r.Get("y") == got[0] {
		t.Fatal("the buffers of x and y are mixed up")
	}
	r.Remove("x")
	b := r.Get("x")
	if b == got[0] || b.Tail(1).Last != 0 || b.Epoch() == got[0].Epoch() || strings.Contains(b.Epoch(), "-") {
		t.Fatalf("after Remove: the same buffer, or its epoch %q (was %q)", b.Epoch(), got[0].Epoch())
	}
	z := NewRegistry(Options{MaxLines: 2}).Get("z")
	add(z, "a", "b", "c")
	if z.Tail(5).Dropped != 1 {
		t.Fatal("NewRegistry's bounds were not applied")
	}
}

// A follower waiting when the buffer is closed is told at once, with
// ErrClosed; one that has not yet read every line gets them first, and is
// told on its next Wait.
func TestWaitEndsOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Options{})
		add(b, "a")
		errc := make(chan error, 1)
		go func() {
			p, err := b.Wait(context.Background(), 1)
			if len(p.Entries) != 0 || p.Last != 1 {
				t.Errorf("the page with ErrClosed: %+v", p)
			}
			errc <- err
		}()
		synctest.Wait() // it waits
		b.Close()
		synctest.Wait()
		select {
		case err := <-errc:
			if err != ErrClosed {
				t.Fatalf("Wait on a closed buffer: %v, want ErrClosed", err)
			}
		default:
			t.Fatal("Wait still waits after Close")
		}

		// Lines added and the buffer closed while a follower is busy: it
		// gets every line, then the end.
		b = New(Options{})
		ready, got := make(chan struct{}), make(chan string, 1)
		go func() {
			var pos uint64
			var seen []string
			for {
				p, err := b.Wait(context.Background(), pos)
				if err != nil {
					seen = append(seen, err.Error())
					break
				}
				seen = append(seen, lines(p))
				pos = p.Last
				if pos == 1 {
					<-ready // busy while the rest comes and the buffer closes
				}
			}
			got <- strings.Join(seen, " | ")
		}()
		add(b, "x")
		synctest.Wait()
		add(b, "y", "z")
		b.Close()
		close(ready)
		if s, want := <-got, "1:x | 2:y 3:z | "+ErrClosed.Error(); s != want {
			t.Fatalf("follower saw %q, want %q", s, want)
		}
		// Whatever is still after a position comes first, then the end.
		if p, err := b.Wait(context.Background(), 1); err != nil || lines(p) != "2:y 3:z" {
			t.Fatalf("Wait(1) on the closed buffer: %q, %v", lines(p), err)
		}
		if _, err := b.Wait(context.Background(), 3); err != ErrClosed {
			t.Fatalf("Wait(3) on the closed buffer: %v", err)
		}
	})
}

// A line added after Close is dropped: not kept, not numbered, and no
// follower is woken for it. What was kept can still be read.
func TestAddAfterCloseDropped(t *testing.T) {
	b := New(Options{})
	add(b, "a", "b")
	b.Close()
	add(b, "late")
	if p := b.Tail(10); lines(p) != "1:a 2:b" || p.Last != 2 {
		t.Fatalf("after a line added to the closed buffer: %q last %d", lines(p), p.Last)
	}
	if p := b.After(2); len(p.Entries) != 0 || p.Last != 2 {
		t.Fatalf("After(2) = %+v", p)
	}
	if p, err := b.Wait(t.Context(), 2); err != ErrClosed || len(p.Entries) != 0 {
		t.Fatalf("Wait(2) = %+v, %v", p, err)
	}
}

// Close may be called more than once, from several goroutines, while
// lines are added and followed (run under -race): each follower sees the
// lines in order without a gap and then ErrClosed, and nothing is kept
// after the first Close.
func TestCloseConcurrent(t *testing.T) {
	const writers, followers, closers = 4, 4, 4
	b := New(Options{MaxLines: 50})
	// Bounds a follower that Close fails to wake.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, followers)
	for range followers {
		wg.Go(func() {
			var pos uint64
			for {
				p, err := b.Wait(ctx, pos)
				if err == ErrClosed {
					if p.Last != pos {
						errs <- fmt.Errorf("ErrClosed at %d, Last %d", pos, p.Last)
					}
					return
				}
				if err != nil {
					errs <- err
					return
				}
				next := pos + 1 + p.Dropped
				for _, e := range p.Entries {
					if e.Seq != next {
						errs <- fmt.Errorf("after %d (+%d dropped), line %d", pos, p.Dropped, e.Seq)
						return
					}
					next++
				}
				pos = p.Last
			}
		})
	}
	start := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			<-start
			for i := range 2000 {
				b.Add(Entry{Line: fmt.Sprintf("w%d %d", w, i)})
			}
		})
	}
	for range closers {
		wg.Go(func() {
			<-start
			b.Close()
		})
	}
	add(b, "first")
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	last := b.Tail(1).Last
	add(b, "late")
	b.Close()
	if p := b.Tail(1); p.Last != last {
		t.Fatalf("a line was kept after Close: last %d, then %d", last, p.Last)
	}
}

// Remove closes the buffer it forgets: its followers are told, and the
// next Get makes an open one.
func TestRegistryRemoveCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r Registry
		old := r.Get("x")
		add(old, "a")
		errc := make(chan error, 1)
		go func() {
			_, err := old.Wait(context.Background(), 1)
			errc <- err
		}()
		synctest.Wait()
		r.Remove("x")
		r.Remove("x") // nothing left to close
		synctest.Wait()
		select {
		case err := <-errc:
			if err != ErrClosed {
				t.Fatalf("a follower of the removed buffer: %v, want ErrClosed", err)
			}
		default:
			t.Fatal("a follower of the removed buffer still waits")
		}
		b := r.Get("x")
		add(b, "new")
		if p, err := b.Wait(context.Background(), 0); err != nil || lines(p) != "1:new" {
			t.Fatalf("the buffer made after Remove: %q, %v", lines(p), err)
		}
	})
}
