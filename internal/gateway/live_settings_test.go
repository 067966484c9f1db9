package gateway

import (
	"sync"
	"testing"
	"time"
)

// The settings a reload changes live are safe to change while sessions
// list and open (the race detector checks): page size and hold timeout
// while a client lists, the session bound while sessions are taken.
func TestLiveSettingsWhileServing(t *testing.T) {
	w := newWorld(t, twoFixtures)
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 20 {
			w.gw.SetPageSize(i % 4)
			w.gw.SetHoldTimeout(time.Duration(i) * time.Second)
		}
	})
	for range 10 {
		if _, err := sess.ListTools(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	w.gw.SetHoldTimeout(0)
	if d := w.gw.holdFor(); d != DefaultHoldTimeout {
		t.Fatalf("hold timeout 0 gives %v, want the default", d)
	}
}

func TestSessionLimitSetMax(t *testing.T) {
	l := NewSessionLimit(1)
	// Listens: places never evicted, so the bound alone decides.
	take := func() bool {
		_, ok := l.admitListen()
		return ok
	}
	if !take() || take() {
		t.Fatal("a bound of 1 did not hold")
	}
	l.SetMax(2)
	if !take() || take() {
		t.Fatal("a raised bound of 2 did not hold")
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			l.SetMax(3 + i%2)
			if p, ok := l.admitListen(); ok {
				p.leave()
			}
		})
	}
	wg.Wait()
	if l.Max() < 3 {
		t.Fatalf("max %d", l.Max())
	}
}
