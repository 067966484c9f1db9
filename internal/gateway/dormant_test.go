package gateway

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// The on-demand lifecycle with real fixture processes.

func TestFiftyCallsToADormantServerSpawnOnce(t *testing.T) {
	w := newWorld(t, `{"s":{"command":"$FIXTURE","idleTimeout":"300ms","startGrace":"0s"}}`)
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	ctx := t.Context()
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "s__echo", Arguments: map[string]any{"text": "wake"}}); err != nil {
		t.Fatal(err)
	}
	w.waitEvent("s", "dormant", 1, 5*time.Second)
	if left := testserver.LiveProcesses(w.marker); len(left) != 0 {
		t.Fatalf("dormant server still has processes: %v", left)
	}

	// 50 concurrent first calls; count the processes that ever appear.
	stop := make(chan struct{})
	seen := map[int]bool{}
	var seenMu sync.Mutex
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		for {
			for _, pid := range testserver.LiveProcesses(w.marker) {
				seenMu.Lock()
				seen[pid] = true
				seenMu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			out, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "s__echo", Arguments: map[string]any{"text": "x"}})
			if err != nil {
				errs <- err
			} else if textOf(t, out) != "x" {
				errs <- &unexpected{i, textOf(t, out)}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-scanDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := w.count("s", "respawned"); n != 1 {
		t.Errorf("%d respawned events for 50 concurrent calls, want 1", n)
	}
	perTree := 1
	if w.rt.Report().Active("pid-namespace") {
		perTree = 2 // the shim carries the marker too
	}
	if len(seen) != perTree {
		t.Errorf("%d processes appeared for 50 concurrent calls, want one tree of %d", len(seen), perTree)
	}
}

type unexpected struct {
	i    int
	text string
}

func (u *unexpected) Error() string { return "call " + string(rune('0'+u.i%10)) + " got " + u.text }

func TestLongCallOutlivesTheIdleTimeout(t *testing.T) {
	w := newWorld(t, `{"s":{"command":"$FIXTURE","idleTimeout":"1s","startGrace":"0s"}}`)
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	out, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "s__sleep", Arguments: map[string]any{"ms": 2500}})
	if err != nil || !strings.Contains(textOf(t, out), "slept") {
		t.Fatalf("a 2.5s call with a 1s idle timeout: %v %v", out, err)
	}
	if n := w.count("s", "dormant"); n != 0 {
		t.Fatalf("went dormant during the call (%d events)", n)
	}
	start := time.Now()
	w.waitEvent("s", "dormant", 1, 3*time.Second)
	took := time.Since(start)
	if took < 900*time.Millisecond || took > 1100*time.Millisecond {
		t.Errorf("dormant %v after the call ended, want the 1s idle timeout (±100ms)", took)
	}
	t.Logf("idle precision: dormant event %v after the call's answer with a 1s idle timeout", took.Round(time.Millisecond))
}

func TestRespawnFailureIsReportedAndRetried(t *testing.T) {
	flag := t.TempDir() + "/broken"
	w := newWorld(t, `{"s":{"command":"/bin/sh","args":["-c","test -e `+flag+` && exit 3; exec $0","$FIXTURE"],"idleTimeout":"300ms","startGrace":"0s"}}`)
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	ctx := t.Context()
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "s__echo", Arguments: map[string]any{"text": "a"}}); err != nil {
		t.Fatal(err)
	}
	w.waitEvent("s", "dormant", 1, 5*time.Second)
	if err := writeFile(flag); err != nil {
		t.Fatal(err)
	}
	_, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "s__echo", Arguments: map[string]any{"text": "b"}})
	if err == nil || !strings.Contains(err.Error(), "server s") {
		t.Fatalf("call while the server cannot start: %v, want an error naming it", err)
	}
	if err := removeFile(flag); err != nil {
		t.Fatal(err)
	}
	out, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "s__echo", Arguments: map[string]any{"text": "c"}})
	if err != nil || textOf(t, out) != "c" {
		t.Fatalf("the next request did not retry the start: %v %v", out, err)
	}
}
