package fleet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Go runs its function with the fleet's context, which Close cancels and
// then waits for the function to return; after Close, Go runs nothing.
func TestGoEndsWithTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, "")
		ended := make(chan struct{})
		if !ff.f.Go(func(ctx context.Context) {
			defer close(ended)
			<-ctx.Done()
		}) {
			t.Fatal("Go ran nothing on an open fleet")
		}
		start := time.Now()
		ff.close(t)
		select {
		case <-ended:
		default:
			t.Fatal("Close returned before the function it ran")
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("Close took %v", d)
		}
		ran := false
		if ff.f.Go(func(context.Context) { ran = true }) {
			t.Fatal("Go ran a function after Close")
		}
		synctest.Wait()
		if ran {
			t.Fatal("a function Go refused ran")
		}
	})
}
