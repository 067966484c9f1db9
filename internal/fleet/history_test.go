package fleet

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// A failed start whose error quotes the server's stderr (a process that
// exited during its handshake) is redacted wherever it goes — the error's
// text and the history — and keeps its exit status and classification.
func TestStartFailureRedactsTheQuotedStderr(t *testing.T) {
	lf := newLaunchFleet(t, `"s":{"command":"s","env":{"API_KEY":"hunter2-secret"}}`)
	s := lf.f.Get("s")
	exit := &backend.ExitError{Server: "s", Status: proc.ExitStatus{Code: 3}, Stderr: "bad key hunter2-secret"}
	se := s.sharedIn().startFailure(fmt.Errorf("%w", exit), 0)
	if strings.Contains(se.Error(), "hunter2-secret") || !strings.Contains(se.Error(), "[redacted]") {
		t.Fatalf("start error: %q", se.Error())
	}
	if se.Stage != StageHandshake || !errors.Is(se, lifecycle.ErrServerCrashed) {
		t.Fatalf("stage %q, crashed %v", se.Stage, errors.Is(se, lifecycle.ErrServerCrashed))
	}
	h := s.Detail().History
	if len(h) != 1 || h[0].Code == nil || *h[0].Code != 3 || strings.Contains(h[0].Error, "hunter2-secret") {
		t.Fatalf("history: %+v", h)
	}
}

// A crash loop is diagnosable from the history alone: the crash, then each
// restart attempt that failed to start (with its stage), the last one
// included when the policy gives up.
func TestHistoryKeepsFailedRestartAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0","restart":{"policy":"on-failure","maxAttempts":2,"backoff":{"initial":"1s","max":"1s","jitter":0}}`)
		defer ff.close(t)
		s := ff.f.Get("s")
		lv, _ := live(s.Acquire(t.Context(), "")).(*fakeLive)
		if lv == nil {
			t.Fatal("s did not start")
		}
		ff.fail.Store(true)
		lv.crash()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if st := s.Status().State; st != "failed" {
			t.Fatalf("state %s, want failed after the attempts", st)
		}
		var stages []string
		for _, e := range s.Detail().History {
			stages = append(stages, e.Stage)
		}
		want := []string{StageServing, StageHandshake, StageHandshake}
		if fmt.Sprint(stages) != fmt.Sprint(want) {
			t.Fatalf("history stages %v, want %v (the crash, then both failed attempts)", stages, want)
		}
		for _, e := range s.Detail().History[1:] {
			if !strings.Contains(e.Error, "cannot start") {
				t.Fatalf("attempt recorded as %q, want the attempt's own error", e.Error)
			}
		}
	})
}

// A server whose start failed is shown failed — not "new", as if it had
// never been tried — until a start succeeds; the next request tries again.
func TestAFailedStartShowsFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"restart":{"maxAttempts":1}`)
		defer ff.close(t)
		s := ff.f.Get("s")
		if st := s.Status().State; st != "new" {
			t.Fatalf("state before any start: %s", st)
		}
		ff.fail.Store(true)
		if _, err := s.Acquire(t.Context(), ""); err == nil {
			t.Fatal("the start did not fail")
		}
		if st := s.Status(); st.State != "failed" || st.LastError == "" {
			t.Fatalf("after a failed start: %+v", st)
		}
		ff.fail.Store(false)
		l, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		if st := s.Status().State; st != "running" {
			t.Fatalf("after a start that succeeded: %s", st)
		}
	})
}
