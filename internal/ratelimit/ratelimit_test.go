package ratelimit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A burst is allowed, the next call refused with the time until a token
// comes back, and after that time allowed again.
func TestRefillAndRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Limits{PerIdentity: Rate{PerSecond: 2, Burst: 3}})
		for i := range 3 {
			if ok, _, _ := l.Allow("alice", "s", "t"); !ok {
				t.Fatalf("call %d of the burst refused", i)
			}
		}
		ok, retry, scope := l.Allow("alice", "s", "t")
		if ok || retry != 500*time.Millisecond || scope != ScopeIdentity {
			t.Fatalf("past the burst: %v %v %q; want refused, 500ms, identity", ok, retry, scope)
		}
		time.Sleep(retry - time.Millisecond)
		if ok, retry, _ := l.Allow("alice", "s", "t"); ok || retry != time.Millisecond {
			t.Fatalf("1ms early: %v %v; want refused, 1ms", ok, retry)
		}
		time.Sleep(time.Millisecond)
		if ok, _, _ := l.Allow("alice", "s", "t"); !ok {
			t.Fatal("refused at Retry-After")
		}
		// Another identity has its own bucket; the anonymous share one.
		if ok, _, _ := l.Allow("bob", "s", "t"); !ok {
			t.Fatal("bob refused for alice's calls")
		}
		for range 3 {
			l.Allow("", "s", "t")
		}
		if ok, _, _ := l.Allow("", "x", "y"); ok {
			t.Fatal("the anonymous are not one identity")
		}
		if s := l.Stats(); s.LimitedIdentity != 3 || s.LimitedTool != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// A call refused by one bucket takes no token from the other.
func TestRefusedTakesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The tool bucket refuses: the identity's tokens stay.
		l := New(Limits{PerIdentity: Rate{PerSecond: 1, Burst: 3}, PerTool: Rate{PerSecond: 1, Burst: 1}})
		if ok, _, _ := l.Allow("a", "s", "t"); !ok {
			t.Fatal("first call refused")
		}
		for range 10 {
			if ok, retry, scope := l.Allow("a", "s", "t"); ok || scope != ScopeTool || retry != time.Second {
				t.Fatalf("second call to t: %v %v %q; want refused by tool, 1s", ok, retry, scope)
			}
		}
		for i := range 2 { // the identity's 2 tokens left, on other tools
			if ok, _, scope := l.Allow("a", "s", fmt.Sprint("u", i)); !ok {
				t.Fatalf("call %d to another tool refused by %s: the refused calls took the identity's tokens", i, scope)
			}
		}
		if ok, _, scope := l.Allow("a", "s", "v"); ok || scope != ScopeIdentity {
			t.Fatalf("4th call: %v %q; want refused by identity", ok, scope)
		}

		// The identity bucket refuses: the tool's token stays.
		l = New(Limits{PerIdentity: Rate{PerSecond: 1, Burst: 1}, PerTool: Rate{PerSecond: 1, Burst: 1}})
		l.Allow("b", "s", "other")
		for range 5 {
			if ok, _, scope := l.Allow("b", "s", "t"); ok || scope != ScopeIdentity {
				t.Fatalf("%v %q; want refused by identity", ok, scope)
			}
		}
		time.Sleep(time.Second)
		if ok, _, scope := l.Allow("b", "s", "t"); !ok {
			t.Fatalf("refused by %s after the identity refilled: a refused call took t's token", scope)
		}
	})
}

// Many goroutines, one identity: exactly the burst is allowed (time does
// not pass in the bubble), each refusal counted once.
func TestConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Limits{PerIdentity: Rate{PerSecond: 1, Burst: 100}, PerTool: Rate{PerSecond: 1, Burst: 60}})
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 50 {
					if ok, _, _ := l.Allow("a", "s", fmt.Sprint("t", (g+i)%2)); ok {
						allowed.Add(1)
					}
					l.Allow(fmt.Sprint("other", g), "s", "t") // other identities at once
				}
			})
		}
		wg.Wait()
		s := l.Stats()
		if allowed.Load() != 100 || s.LimitedIdentity+s.LimitedTool < 700 {
			t.Fatalf("%d allowed, stats %+v; want exactly the burst, 100", allowed.Load(), s)
		}
	})
}

// The same under the race detector with real time and many keys.
func TestConcurrentRace(t *testing.T) {
	l := New(Limits{PerIdentity: Rate{PerSecond: 1000, Burst: 10}, PerTool: Rate{PerSecond: 100, Burst: 5}})
	l.MaxKeys = 50
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				l.Allow(fmt.Sprint("id", (g*7+i)%97), "s", fmt.Sprint("t", i%5))
				if i%500 == 0 {
					l.SetLimits(Limits{PerIdentity: Rate{PerSecond: float64(1000 + i), Burst: 10}, PerTool: Rate{PerSecond: 100, Burst: 5}})
					_ = l.Stats()
				}
			}
		})
	}
	wg.Wait()
	if s := l.Stats(); s.Identities > 50 || s.Tools > 50 {
		t.Fatalf("stats %+v: past MaxKeys", s)
	}
}

// A flood of distinct identities cannot grow the buckets past MaxKeys;
// full buckets are dropped as they go idle.
func TestBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Limits{PerIdentity: Rate{PerSecond: 1, Burst: 2}, PerTool: Rate{PerSecond: 1, Burst: 2}})
		l.MaxKeys = 1000
		for i := range 100_000 {
			l.Allow(fmt.Sprint("id", i), "s", "t")
		}
		s := l.Stats()
		if s.Identities > 1000 || s.Tools > 1000 || s.Evicted == 0 {
			t.Fatalf("after 100k identities: %+v; want at most 1000 buckets of each kind", s)
		}
		// Idle: every bucket is full again, and the next calls sweep them.
		time.Sleep(3 * time.Second)
		for range 1000 {
			l.Allow("one", "s", "t")
		}
		if s := l.Stats(); s.Identities > keepIdle+1 || s.Tools > keepIdle+1 {
			t.Fatalf("after an idle while: %+v; want the full buckets gone but %d", s, keepIdle)
		}
	})
}

// Dropping a full bucket changes nothing: the key gets a full one again.
func TestSweepIsLossless(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Limits{PerIdentity: Rate{PerSecond: 1, Burst: 2}})
		l.Allow("a", "", "")
		l.Allow("a", "", "")
		if ok, _, _ := l.Allow("a", "", ""); ok {
			t.Fatal("past the burst allowed")
		}
		// Others' calls sweep a's bucket only once it is full again.
		for i := range keepIdle {
			l.Allow(fmt.Sprint("b", i), "", "")
		}
		time.Sleep(time.Second)
		l.Allow("c", "", "")
		if l.Stats().Identities != keepIdle+2 {
			t.Fatalf("a half-full bucket was swept: %+v", l.Stats())
		}
		if ok, _, _ := l.Allow("a", "", ""); !ok {
			t.Fatal("a refused after a second")
		}
		if ok, _, _ := l.Allow("a", "", ""); ok {
			t.Fatal("a's bucket lost its state")
		}
	})
}

// SetLimits keeps the buckets of an unchanged limit as they are, carries
// the tokens of a changed one over, and drops those of a limit now off.
func TestSetLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := Limits{PerIdentity: Rate{PerSecond: 1, Burst: 2}, PerTool: Rate{PerSecond: 1, Burst: 5}}
		l := New(lim)
		l.Allow("a", "s", "t")
		l.Allow("a", "s", "t")
		l.SetLimits(lim) // unchanged: a stays empty
		if ok, _, _ := l.Allow("a", "s", "t"); ok {
			t.Fatal("an unchanged reload refilled a's bucket")
		}
		l.SetLimits(Limits{PerIdentity: Rate{PerSecond: 1, Burst: 4}, PerTool: lim.PerTool}) // bigger burst, tokens kept
		if ok, _, _ := l.Allow("a", "s", "t"); ok {
			t.Fatal("a changed reload refilled a's bucket")
		}
		l.SetLimits(Limits{PerTool: lim.PerTool}) // identity limit off
		if ok, _, _ := l.Allow("a", "s", "t"); !ok || l.Stats().Identities != 0 {
			t.Fatalf("identity limit off: still limited, %+v", l.Stats())
		}
		l.SetLimits(Limits{})
		for range 100 {
			if ok, _, _ := l.Allow("a", "s", "t"); !ok {
				t.Fatal("no limits, yet limited")
			}
		}
		if l.Limits() != (Limits{}) {
			t.Fatal("Limits after SetLimits")
		}
	})
}

// Zero limits, a nil Limiter, and the default burst.
func TestUnlimitedAndDefaults(t *testing.T) {
	var nilL *Limiter
	if ok, _, _ := nilL.Allow("a", "s", "t"); !ok || nilL.Limits() != (Limits{}) || nilL.Stats() != (Stats{}) {
		t.Fatal("a nil Limiter is not a no-op")
	}
	nilL.SetLimits(Limits{PerTool: Rate{PerSecond: 1}})
	l := New(Limits{})
	for range 1000 {
		if ok, _, _ := l.Allow("a", "s", "t"); !ok {
			t.Fatal("zero limits refused")
		}
	}
	if s := l.Stats(); s.Identities != 0 || s.Tools != 0 {
		t.Fatalf("zero limits kept buckets: %+v", s)
	}
	if b := (Rate{PerSecond: 2.5}).burst(); b != 3 {
		t.Fatalf("default burst of 2.5/s: %d", b)
	}
	if b := (Rate{PerSecond: 0.1}).burst(); b != 1 {
		t.Fatalf("default burst of 0.1/s: %d", b)
	}
	for d, want := range map[time.Duration]string{0: "1", time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", 90 * time.Second: "90"} {
		if got := RetryAfter(d); got != want {
			t.Errorf("RetryAfter(%v) = %s; want %s", d, got, want)
		}
	}
}

// The cost of Allow with both limits on and the call allowed.
func BenchmarkAllow(b *testing.B) {
	l := New(Limits{PerIdentity: Rate{PerSecond: 1e9, Burst: 1 << 30}, PerTool: Rate{PerSecond: 1e9, Burst: 1 << 30}})
	b.ReportAllocs()
	for b.Loop() {
		l.Allow("0123456789abcdef01234567", "github", "search_issues")
	}
}

// The cost of Allow refusing.
func BenchmarkAllowRefused(b *testing.B) {
	l := New(Limits{PerIdentity: Rate{PerSecond: 0.001, Burst: 1}, PerTool: Rate{PerSecond: 0.001, Burst: 1}})
	b.ReportAllocs()
	for b.Loop() {
		l.Allow("0123456789abcdef01234567", "github", "search_issues")
	}
}

// Exhausted takes nothing and makes nothing: it says when the identity's
// bucket has a token again, and Allow counts as before.
func TestExhaustedPeeks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Limits{PerIdentity: Rate{PerSecond: 1, Burst: 2}})
		if d := l.Exhausted("a"); d != 0 {
			t.Fatalf("no bucket yet: %v", d)
		}
		if s := l.Stats(); s.Identities != 0 {
			t.Fatalf("Exhausted made a bucket: %+v", s)
		}
		for i := range 2 {
			if d := l.Exhausted("a"); d != 0 {
				t.Fatalf("token %d: exhausted for %v", i, d)
			}
			if ok, _, _ := l.Allow("a", "s", "t"); !ok {
				t.Fatalf("token %d refused", i)
			}
		}
		if d := l.Exhausted("a"); d != time.Second {
			t.Fatalf("after the burst: %v, want 1s", d)
		}
		if d := l.Exhausted("b"); d != 0 {
			t.Fatalf("another identity: %v", d)
		}
		time.Sleep(time.Second)
		if ok, _, _ := l.Allow("a", "s", "t"); !ok {
			t.Fatal("a token a second later refused")
		}
	})
}
