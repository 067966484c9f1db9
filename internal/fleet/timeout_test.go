package fleet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestWithTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := WithTimeout(context.Background(), 0)
		if _, ok := ctx.Deadline(); ok || ctx.Err() != nil {
			t.Fatalf("a bound of 0: deadline set or context ended (%v)", ctx.Err())
		}
		cancel()
		if ctx.Err() == nil {
			t.Fatal("cancel did not end a context without deadline")
		}
		ctx, cancel = WithTimeout(context.Background(), time.Second)
		defer cancel()
		if d, ok := ctx.Deadline(); !ok || d != time.Now().Add(time.Second) {
			t.Fatalf("a bound of 1s: deadline %v, %v", d, ok)
		}
	})
	for _, c := range []struct{ a, b, want time.Duration }{
		{time.Second, 2 * time.Second, 3 * time.Second},
		{0, time.Second, 0},
		{time.Second, 0, 0},
		{0, 0, 0},
	} {
		if got := PlusTimeouts(c.a, c.b); got != c.want {
			t.Errorf("PlusTimeouts(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
