package fleet

import (
	"errors"
	"fmt"
	"strings"
	"testing"

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
	h := s.History()
	if len(h) != 1 || h[0].Code == nil || *h[0].Code != 3 || strings.Contains(h[0].Error, "hunter2-secret") {
		t.Fatalf("history: %+v", h)
	}
}
