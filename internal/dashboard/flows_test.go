package dashboard

import (
	"fmt"
	"testing"
	"time"
)

// The logins under way are bounded: past maxFlows the oldest goes; an
// expired one is refused and dropped; each is taken once.
func TestLoginFlowsBounded(t *testing.T) {
	l := newLogins()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	for i := range maxFlows + 8 {
		l.add(&flow{state: fmt.Sprint(i), expires: now.Add(flowLifetime + time.Duration(i)*time.Second)})
	}
	if n := len(l.flows); n != maxFlows {
		t.Fatalf("%d flows held, want the bound %d", n, maxFlows)
	}
	if l.take("0") != nil || l.take("7") != nil {
		t.Error("the oldest flows were kept past the bound")
	}
	if l.take("8") == nil {
		t.Fatal("a flow within the bound was lost")
	}
	if l.take("8") != nil {
		t.Error("a flow was taken twice")
	}
	now = now.Add(flowLifetime + 20*time.Second)
	if l.take("9") != nil {
		t.Error("an expired flow was taken")
	}
	l.add(&flow{state: "fresh", expires: now.Add(flowLifetime)})
	// Adding prunes every expired flow: of 10..71, those before 20
	// ended; 52 remain, and the fresh one.
	if n := len(l.flows); n != 53 {
		t.Errorf("%d flows held after expiry, want 53", n)
	}
}
