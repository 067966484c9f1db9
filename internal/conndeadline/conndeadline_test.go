package conndeadline

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pair is a TCP connection over loopback: the server's end wrapped by l,
// and the client's.
func pair(t *testing.T) (l *Listener, srv *Conn, cli net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l = NewListener(ln)
	t.Cleanup(func() { l.Close() })
	cli, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	nc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return l, nc.(*Conn), cli
}

// readFails reads from c and returns how long it took to fail with a
// deadline error from start; it fails the test on any other outcome or
// after 10 s.
func readFails(t *testing.T, c net.Conn, start time.Time) time.Duration {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read: %v, want a deadline error", err)
		}
		return time.Since(start)
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not fail within 10 s")
		return 0
	}
}

// A read past its deadline fails as with the runtime's timer: not before
// the deadline, soon after it.
func TestReadDeadline(t *testing.T) {
	_, c, cli := pair(t)
	const d = 200 * time.Millisecond
	start := time.Now()
	if err := c.SetReadDeadline(start.Add(d)); err != nil {
		t.Fatal(err)
	}
	if took := readFails(t, c, start); took < d {
		t.Fatalf("failed after %v, before its deadline %v", took, d)
	}
	// Once it took effect, a new deadline makes the connection usable.
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := cli.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil || b[0] != 'y' {
		t.Fatalf("read after a new deadline: %q, %v", b, err)
	}
}

// A deadline moved later takes effect at the later time; one lifted,
// never; after one took effect, the next read, without a deadline, waits
// for data and gets it.
func TestDeadlineMovedAndLifted(t *testing.T) {
	_, c, cli := pair(t)
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(100 * time.Millisecond))
	_ = c.SetReadDeadline(start.Add(400 * time.Millisecond))
	if took := readFails(t, c, start); took < 400*time.Millisecond {
		t.Fatalf("failed after %v: the earlier deadline took effect", took)
	}
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_ = c.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(400 * time.Millisecond)
		_, _ = cli.Write([]byte("x"))
	}()
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil || b[0] != 'x' {
		t.Fatalf("read after the deadline was lifted: %q, %v", b, err)
	}
}

// A deadline before now when set interrupts the read in progress at once
// (net/http's way of ending its background read).
func TestDeadlineInThePast(t *testing.T) {
	for _, past := range []time.Time{time.Unix(1, 0), time.Now().Add(-time.Millisecond)} {
		_, c, _ := pair(t)
		start := time.Now()
		go func() {
			time.Sleep(100 * time.Millisecond)
			_ = c.SetReadDeadline(past)
		}()
		readFails(t, c, start) // at once: checked on the connection by TestPastAtOnceAndClose
	}
}

// A write to a peer that stops reading fails at its deadline.
func TestWriteDeadline(t *testing.T) {
	_, c, _ := pair(t)
	const d = 200 * time.Millisecond
	start := time.Now()
	_ = c.SetWriteDeadline(start.Add(d))
	buf := make([]byte, 1<<20)
	var err error
	for time.Since(start) < 10*time.Second {
		if _, err = c.Write(buf); err != nil {
			break
		}
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write: %v, want a deadline error", err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("failed after %v, before its deadline", took)
	}
}

// Stop hands the deadlines not yet in effect to the connections: they
// still take effect; later ones are the connections' own, lifting the
// one in effect as well.
func TestStopHandsOver(t *testing.T) {
	l, c, cli := pair(t)
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(300 * time.Millisecond))
	l.Stop()
	if took := readFails(t, c, start); took < 300*time.Millisecond {
		t.Fatalf("failed after %v", took)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := cli.Write([]byte("z")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil || b[0] != 'z' {
		t.Fatalf("read after Stop with a new deadline: %q, %v", b, err)
	}
	start = time.Now()
	_ = c.SetReadDeadline(start.Add(100 * time.Millisecond))
	if took := readFails(t, c, start); took < 100*time.Millisecond {
		t.Fatalf("a deadline set after Stop took effect after %v", took)
	}
}

// fakeConn records the deadlines set on it.
type fakeConn struct {
	net.Conn // nil: only the deadlines are used
	mu       sync.Mutex
	rd, wd   time.Time
	sets     int
	err      error // returned by the sets

	// If set, a read deadline before now is held: held is closed, then
	// the set waits for hold to be closed before it is recorded, and
	// closes recorded after.
	hold, held, recorded chan struct{}
}

func (f *fakeConn) SetReadDeadline(d time.Time) error {
	if f.hold != nil && !d.IsZero() && d.Before(time.Now()) {
		close(f.held)
		<-f.hold
		defer close(f.recorded)
	}
	f.mu.Lock()
	f.rd = d
	f.sets++
	f.mu.Unlock()
	return f.err
}

func (f *fakeConn) SetWriteDeadline(d time.Time) error {
	f.mu.Lock()
	f.wd = d
	f.sets++
	f.mu.Unlock()
	return f.err
}

func (f *fakeConn) Close() error { return nil }

func (f *fakeConn) state() (rd, wd time.Time, sets int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rd, f.wd, f.sets
}

// A deadline that took effect never outlives its replacement: however
// the sweeper's work interleaves with the owner's, once a set of no
// deadline, or of one far ahead, returns, the connection has no real
// deadline. Deadlines a microsecond ahead make the sweeper act often.
// Run with -race.
func TestTakenEffectNeverOutlivesItsReplacement(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln)
	defer l.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	took := 0
	for g := range 8 {
		f := &fakeConn{}
		c := l.track(f)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for i := range 3000 {
				read := rng.IntN(2) == 0
				set := c.SetWriteDeadline
				if read {
					set = c.SetReadDeadline
				}
				_ = set(time.Now().Add(time.Duration(rng.IntN(50)) * time.Microsecond))
				if rng.IntN(3) == 0 {
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				}
				if d := map[bool]*deadline{true: &c.rd, false: &c.wd}[read]; d.w.Load()&inEffect != 0 {
					mu.Lock()
					took++
					mu.Unlock()
				}
				if rng.IntN(2) == 0 {
					_ = set(time.Time{})
				} else {
					_ = set(time.Now().Add(time.Hour))
				}
				rd, wd, _ := f.state()
				if (read && !rd.IsZero()) || (!read && !wd.IsZero()) {
					t.Errorf("conn %d, round %d: a real deadline (%v, %v) after it was replaced", g, i, rd, wd)
					return
				}
			}
			_ = c.Close()
		})
	}
	wg.Wait()
	if took == 0 {
		t.Fatal("no deadline took effect: the test exercised nothing")
	}
}

// Setting a deadline changes nothing on the connection until it passes:
// no runtime timer is armed.
func TestSetChangesNothingUntilItPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewListener(nopListener{})
		defer l.Stop()
		f := &fakeConn{}
		c := l.track(f)
		for range 100 {
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			_ = c.SetWriteDeadline(time.Now().Add(time.Minute))
			_ = c.SetReadDeadline(time.Time{})
		}
		synctest.Wait()
		if _, _, sets := f.state(); sets != 0 {
			t.Fatalf("%d deadlines set on the connection", sets)
		}
	})
}

// The sweeper sleeps until the earliest deadline it knows of, and not at
// all without one; an earlier deadline wakes it, so that it takes effect
// on time all the same.
func TestSweeperSleepsAndWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewListener(nopListener{})
		defer l.Stop()
		sweeps := func() int {
			synctest.Wait()
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.sweeps
		}
		s0 := sweeps()
		time.Sleep(24 * time.Hour)
		if n := sweeps() - s0; n != 0 {
			t.Fatalf("%d sweeps in a day with no deadline", n)
		}
		far, near := &fakeConn{}, &fakeConn{}
		cf, cn := l.track(far), l.track(near)
		_ = cf.SetReadDeadline(time.Now().Add(time.Hour))
		s1 := sweeps()
		time.Sleep(30 * time.Minute)
		if n := sweeps() - s1; n > 0 {
			t.Fatalf("%d sweeps before the only deadline", n)
		}
		start := time.Now()
		_ = cn.SetWriteDeadline(start.Add(time.Second))
		time.Sleep(time.Second - time.Nanosecond)
		if _, wd, _ := near.state(); !wd.IsZero() {
			t.Fatal("the deadline took effect before it passed")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if _, wd, _ := near.state(); wd.IsZero() || !wd.Before(time.Now()) {
			t.Fatalf("a deadline set while the sweeper slept took no effect when it passed (%v)", wd)
		}
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		if rd, _, _ := far.state(); rd.IsZero() {
			t.Fatal("the far deadline took no effect")
		}
	})
}

// A deadline in the past is on the connection when its set returns; a
// closed connection is forgotten, and its sets get the wrapped
// connection's answer.
func TestPastAtOnceAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewListener(nopListener{})
		defer l.Stop()
		f := &fakeConn{}
		c := l.track(f)
		for _, past := range []time.Time{time.Unix(1, 0), time.Now().Add(-time.Nanosecond)} {
			_ = c.SetWriteDeadline(past)
			if _, wd, _ := f.state(); !wd.Equal(past) {
				t.Fatalf("after setting %v the connection's deadline is %v", past, wd)
			}
		}
		// Past, but after the listener's base: a time of the clock's,
		// and one without a monotonic reading.
		time.Sleep(time.Second)
		for _, past := range []time.Time{time.Now().Add(-time.Nanosecond), time.Now().Add(-time.Millisecond).Round(0)} {
			_ = c.SetWriteDeadline(time.Time{})
			_ = c.SetWriteDeadline(past)
			if _, wd, _ := f.state(); !wd.Equal(past) {
				t.Fatalf("after setting %v (after base) the connection's deadline is %v", past, wd)
			}
		}
		// Far ahead without a monotonic reading: as good as none.
		_ = c.SetWriteDeadline(time.Time{})
		_, _, sets := f.state()
		_ = c.SetWriteDeadline(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC))
		if _, wd, n := f.state(); n != sets || !wd.IsZero() {
			t.Fatalf("a deadline in 9999 reached the connection: %v", wd)
		}
		_ = c.SetWriteDeadline(time.Time{})
		if _, wd, _ := f.state(); !wd.IsZero() {
			t.Fatalf("a deadline in the past outlived its replacement: %v", wd)
		}
		_ = c.Close()
		l.mu.Lock()
		n := len(l.conns)
		l.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d connections kept after Close", n)
		}
		f.err = net.ErrClosed
		if err := c.SetReadDeadline(time.Now().Add(time.Minute)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a set on a closed connection: %v", err)
		}
	})
}

// A deadline that passed after the listener's base, with the clock's
// monotonic reading (which synctest's times lack), is on the connection
// when its set returns, whether the sweeper sleeps with nothing planned
// or with a later deadline planned.
func TestPastAfterBaseAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln)
	defer l.Close()
	f := &fakeConn{}
	c := l.track(f)
	time.Sleep(10 * time.Millisecond)
	for _, planned := range []bool{false, true} {
		if planned {
			_ = l.track(&fakeConn{}).SetReadDeadline(time.Now().Add(time.Hour))
		}
		_ = c.SetWriteDeadline(time.Time{})
		past := time.Now().Add(-time.Nanosecond)
		_ = c.SetWriteDeadline(past)
		if _, wd, _ := f.state(); !wd.Equal(past) {
			t.Fatalf("planned %v: a deadline passed after base is not on the connection when its set returns (%v)", planned, wd)
		}
	}
}

// The sweeper's making a deadline take effect and the owner's replacing
// it are ordered: the owner's set waits until the past deadline is on
// the connection, and then lifts it. The sweeper is held inside its set
// of the past deadline while the owner replaces it; released once the
// owner has finished (no ordering: the bug) or has been blocked for a
// while (the ordering).
func TestReplacementWaitsForTheExpiry(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln)
	defer l.Close()
	f := &fakeConn{hold: make(chan struct{}), held: make(chan struct{}), recorded: make(chan struct{})}
	c := l.track(f)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	<-f.held // the sweeper is setting the past deadline, not done
	done := make(chan struct{})
	go func() {
		_ = c.SetReadDeadline(time.Time{})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(200 * time.Millisecond):
	}
	close(f.hold)
	<-done
	<-f.recorded
	if rd, _, _ := f.state(); !rd.IsZero() {
		t.Fatalf("the expiry landed after its replacement: the deadline is %v", rd)
	}
}

// A deadline set during a sweep, after its connection was looked at, is
// seen before the sweeper sleeps; one set through settle (replacing one
// in effect) wakes it too; one set while Stop hands over is the
// connection's own.
func TestNoDeadlineMissed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newListener(nopListener{})
		f := &fakeConn{}
		c := l.track(f)
		start := time.Now()
		var once sync.Once
		l.scanned = func() {
			once.Do(func() { _ = c.SetReadDeadline(start.Add(time.Second)) })
		}
		go l.sweep()
		defer l.Stop()
		_ = c.SetWriteDeadline(start.Add(time.Hour)) // a sweep, then a sleep of an hour
		time.Sleep(time.Second)
		synctest.Wait()
		if rd, _, _ := f.state(); rd.IsZero() {
			t.Fatal("a deadline set during a sweep took no effect when it passed")
		}
		// In effect now; its replacement, a second ahead, goes through
		// settle, while the sweeper sleeps until the write deadline.
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		time.Sleep(time.Second)
		synctest.Wait()
		if rd, _, _ := f.state(); rd.IsZero() {
			t.Fatal("a deadline set in place of one in effect took no effect when it passed")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		l := newListener(nopListener{})
		f := &fakeConn{}
		c := l.track(f)
		l.beforeRecord = func() { l.beforeRecord = nil; l.Stop() }
		go l.sweep()
		want := time.Now().Add(time.Minute)
		_ = c.SetReadDeadline(want)
		if rd, _, _ := f.state(); !rd.Equal(want) {
			t.Fatalf("a deadline set while Stop handed over is lost: the connection has %v", rd)
		}
	})
}

// Deadlines that pass one after another, one per connection, are made to
// take effect by a few sweeps, not one each: a sweep looks at every
// connection, so their number is paced by the connections'.
func TestSweepsArePaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewListener(nopListener{})
		defer l.Stop()
		const n = 200
		fs := make([]*fakeConn, n)
		start := time.Now()
		for i := range fs {
			fs[i] = &fakeConn{}
			_ = l.track(fs[i]).SetReadDeadline(start.Add(time.Second + time.Duration(i)*time.Microsecond))
		}
		synctest.Wait()
		l.mu.Lock()
		before := l.sweeps
		l.mu.Unlock()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		l.mu.Lock()
		sweeps := l.sweeps - before
		l.mu.Unlock()
		for i, f := range fs {
			if rd, _, _ := f.state(); rd.IsZero() {
				t.Fatalf("deadline %d took no effect", i)
			}
		}
		// n deadlines 1 µs apart over n connections: the gap after a
		// sweep (n × sweepGap = 2 ms) covers them all.
		if sweeps > 4 {
			t.Fatalf("%d sweeps for %d deadlines 1 µs apart", sweeps, n)
		}
	})
}

// nopListener accepts nothing.
type nopListener struct{}

func (nopListener) Accept() (net.Conn, error) { return nil, io.EOF }
func (nopListener) Close() error              { return nil }
func (nopListener) Addr() net.Addr            { return &net.TCPAddr{} }
