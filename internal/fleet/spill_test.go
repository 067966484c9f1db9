package fleet

import (
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
)

func sleepNow(t *testing.T, s *Server) {
	t.Helper()
	if err := s.Sleep(t.Context()); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
}

// A server gone dormant keeps its tools list and its definitions on disk
// only; they read back as they were — listed, compared with what the next
// process lists (a change is reported against them), and, pinned, its
// approvals still decide what is held. (Through the fleet's dormancy and
// wake; the catalog's test of this name sees them leave memory.)
func TestADormantServersListsLeaveMemory(t *testing.T) {
	for _, pin := range []bool{false, true} {
		name := "unpinned"
		settings := `,"idleTimeout":"10m"`
		if pin {
			name, settings = "pinned", settings+`,"pin":true`
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				df := newDriftFleet(t, settings, nil, openStore(t))
				defer df.close(t)
				df.srv.setItems(echoV1, pidTool)
				s := df.f.Get("s")
				learnTools(t, s)
				sleepNow(t, s)
				items, ok := s.Catalog().CachedList(catalog.Tools)
				if !ok || len(items) != 2 || string(items[0]) != echoV1 || string(items[1]) != pidTool {
					t.Fatalf("the dormant server's tools read back as %q (%v)", items, ok)
				}
				if !s.Catalog().Cached(catalog.Tools) || !s.Status().Learned {
					t.Fatal("a dormant server with its list on disk is not learned")
				}

				// The next process lists echo changed: reported against
				// the definitions read back, and held when pinned.
				df.srv.setItems(echoV2, pidTool)
				learnTools(t, s) // cached: no start
				if _, err := use(s.Acquire(t.Context(), "")); err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the wake's relearn
				ev := df.of("definitions_changed")
				if len(ev) != 1 || !strings.Contains(jsonOf(t, ev[0].Details), `"changed":[{"kind":"tool","name":"echo"`) {
					t.Fatalf("after a wake with echo changed: %d definitions_changed events: %+v", len(ev), ev)
				}
				if got := s.Catalog().ToolHeld("echo"); got != pin {
					t.Fatalf("echo held: %v, want %v", got, pin)
				}
				if d := s.Catalog().Definitions(); len(d.Last) != 1 || d.Last[0].Name != "echo" {
					t.Fatalf("last change: %+v", d.Last)
				}
			})
		})
	}
}

// A list whose change could not be written stays in memory when the
// server goes dormant: nothing is lost for want of the disk. (The store
// closed, the list read back is the one in memory.)
func TestAListNotWrittenStaysInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, st)
		defer df.close(t)
		df.srv.setItems(echoV1, pidTool)
		s := df.f.Get("s")
		learnTools(t, s)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		df.srv.setItems(echoV2)
		s.listChanged("notifications/tools/list_changed")
		synctest.Wait()
		sleepNow(t, s)
		items, ok := s.Catalog().CachedList(catalog.Tools)
		if !ok || len(items) != 1 || string(items[0]) != echoV2 {
			t.Fatalf("tools after the failed write: %q (%v)", items, ok)
		}
	})
}

// Options.Trim is called once servers went dormant and none did for
// trimQuiet, at most once per trimEvery, and not after Close.
func TestTrimAfterDormancy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, openStore(t))
		var trims atomic.Int32
		df.f.opts.Trim = func(dormancy bool) {
			if !dormancy {
				t.Error("a trim after a dormancy is told it follows none")
			}
			trims.Add(1)
		}
		df.srv.setItems(echoV1)
		s := df.f.Get("s")
		learnTools(t, s)
		sleepNow(t, s)
		time.Sleep(trimQuiet - time.Millisecond)
		synctest.Wait()
		if n := trims.Load(); n != 0 {
			t.Fatalf("%d trims before the fleet was quiet for %v", n, trimQuiet)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := trims.Load(); n != 1 {
			t.Fatalf("%d trims once quiet, want 1", n)
		}

		// Dormant again soon after: the next trim waits for trimEvery.
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sleepNow(t, s)
		time.Sleep(trimQuiet)
		synctest.Wait()
		if n := trims.Load(); n != 1 {
			t.Fatalf("%d trims within %v of the last", n, trimEvery)
		}
		time.Sleep(trimEvery)
		synctest.Wait()
		if n := trims.Load(); n != 2 {
			t.Fatalf("%d trims after %v, want 2", n, trimEvery)
		}

		// A dormancy just before Close: the trimmer it started ends with
		// the fleet (synctest fails on a goroutine left blocked).
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sleepNow(t, s)
		df.close(t)
		time.Sleep(trimEvery)
		synctest.Wait()
		if n := trims.Load(); n != 2 {
			t.Fatalf("%d trims, one after Close", n)
		}
	})
}

// Close waits for a Trim under way to return, and calls none after.
func TestCloseWaitsForATrimUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, openStore(t))
		in, out := make(chan struct{}), make(chan struct{})
		var trims atomic.Int32
		df.f.opts.Trim = func(bool) {
			trims.Add(1)
			close(in)
			<-out
		}
		df.srv.setItems(echoV1)
		s := df.f.Get("s")
		learnTools(t, s)
		sleepNow(t, s)
		<-in // the trim is under way
		closed := make(chan struct{})
		go func() {
			df.close(t)
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a Trim was under way")
		default:
		}
		close(out)
		<-closed
		if n := trims.Load(); n != 1 {
			t.Fatalf("%d trims", n)
		}
	})
}

// TrimSoon, asked for after each request, trims once the requests stop
// for trimQuiet — never while they go on, however long — and may be
// asked for from many goroutines at once.
func TestTrimSoonWaitsUntilRequestsStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, openStore(t))
		defer df.close(t)
		var trims atomic.Int32
		df.f.opts.Trim = func(dormancy bool) {
			if dormancy {
				t.Error("a trim after requests only is told it follows a dormancy")
			}
			trims.Add(1)
		}
		for range 60 { // a request every half second for 30 s, four at once
			for range 4 {
				go df.f.TrimSoon()
			}
			time.Sleep(trimQuiet / 4)
			synctest.Wait()
			if n := trims.Load(); n != 0 {
				t.Fatalf("%d trims while requests went on", n)
			}
		}
		time.Sleep(trimQuiet)
		synctest.Wait()
		if n := trims.Load(); n != 1 {
			t.Fatalf("%d trims once the requests stopped, want 1", n)
		}
		time.Sleep(10 * trimEvery)
		synctest.Wait()
		if n := trims.Load(); n != 1 {
			t.Fatalf("%d trims with nothing asked since, want 1", n)
		}
	})
}

// A trim asked for while one is under way is not lost: another follows
// it, once things are quiet again; and no two trims ever overlap, however
// many goroutines ask.
func TestTrimAskedDuringATrim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, openStore(t))
		defer df.close(t)
		var trims, in atomic.Int32
		release := make(chan struct{})
		df.f.opts.Trim = func(bool) {
			if in.Add(1) > 1 {
				t.Error("two trims at once")
			}
			if trims.Add(1) == 1 {
				<-release
			}
			in.Add(-1)
		}
		df.f.TrimSoon()
		time.Sleep(trimQuiet)
		synctest.Wait()
		if n := trims.Load(); n != 1 {
			t.Fatalf("%d trims under way, want 1", n)
		}
		for range 8 {
			go df.f.TrimSoon()
		}
		synctest.Wait()
		close(release)
		time.Sleep(trimEvery + trimQuiet)
		synctest.Wait()
		if n := trims.Load(); n != 2 {
			t.Fatalf("%d trims, want 2: the one asked for during the first was lost", n)
		}
	})
}
