package proc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A second Stop with a 100 ms ctx returns within its ctx, with an error
// wrapping ctx.Err(), while the first caller's escalation of a server that
// ignores stdin EOF and SIGTERM (6 s to SIGKILL) goes on untouched.
func TestStopSecondCallerKeepsToItsContext(t *testing.T) {
	rt := openRuntime(t, Options{})
	marker := testserver.NewMarker(t)
	spec := fixtureSpec(t, marker, "FIXTURE_IGNORE_EOF=1", "FIXTURE_IGNORE_TERM=1")
	spec.StdinWait, spec.TermWait = 2*time.Second, 4*time.Second
	p, err := rt.Spawn(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	newClient(p).initialize(t)

	firstCtx, endFirst := context.WithCancel(context.Background())
	defer endFirst()
	first := make(chan error, 1)
	go func() { first <- p.Stop(firstCtx) }()
	<-p.stopBegun

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	start := time.Now()
	go func() { second <- p.Stop(ctx) }()
	returned := false
	select {
	case err := <-second:
		returned = true
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the second Stop returned %v, want an error wrapping context.DeadlineExceeded", err)
		}
		t.Logf("the second Stop returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(2 * time.Second):
		t.Errorf("a Stop with a 100ms ctx is still waiting after 2s")
	}
	// The escalation went on: its waits were not cut short.
	select {
	case <-p.Done():
		t.Errorf("the tree ended (%v) while the first caller's escalation should still wait", p.Status())
	default:
		if stage := p.currentStage(); stage == stageKill {
			t.Errorf("the escalation is at %q already", stage)
		}
	}

	// The first caller gives up: its ctx ends, so the tree is killed now.
	endFirst()
	if err := <-first; !errors.Is(err, context.Canceled) && err != nil {
		t.Errorf("the first Stop: %v", err)
	}
	if !returned {
		<-second
	}
	if _, err := p.Wait(ctxTimeout(t, killBound)); err != nil {
		t.Fatalf("the tree is not gone after the first caller's ctx ended: %v", err)
	}
	if st := p.Status(); st.Kind != ExitStopped || st.Stage != stageKill {
		t.Errorf("status %v, want stopped by the kill", st)
	}
	testserver.WaitGone(t, marker, 0)
}
