package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A token serve refuses ends the wait at once: waiting will not mend it.
func TestWaitRefusedToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Unauthorized: a valid bearer token is required", http.StatusUnauthorized)
	}))
	defer srv.Close()
	_, err := run(t, "wait", "--addr", srv.URL, "--timeout", "1m")
	if err == nil || strings.HasPrefix(err.Error(), "not ready after") || !strings.Contains(err.Error(), "401 Unauthorized") {
		t.Fatalf("wait with a refused token: %v", err)
	}
}

// A serve that never answers within the timeout (here a listener that
// takes the request and says nothing) is reported as such, not by the
// bare deadline of the attempt the timeout cut.
func TestWaitNoAnswer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	_, err := run(t, "wait", "--addr", srv.URL, "--timeout", "300ms")
	if err == nil || !strings.Contains(err.Error(), "not ready after 300ms: is mcpvisor serve running at "+srv.URL+"? it did not answer") {
		t.Fatalf("wait on a serve that never answers: %v", err)
	}
}

// An eager server's lists are learned from the process its eager start
// runs, with or without --no-learn (nothing more is started for it): it
// becomes ready — `mcpvisor wait` succeeds, `tools` lists its tools —
// without a client listing them first.
func TestAnEagerServerIsLearnedFromItsStart(t *testing.T) {
	for _, args := range [][]string{nil, {"--no-learn"}} {
		t.Run(fmt.Sprint(len(args)), func(t *testing.T) {
			fixture := testserver.Build(t)
			s := startServe(t, fmt.Sprintf(`{"mcpServers":{"alpha":{"command":%q,"eager":true,"idleTimeout":"0"}}}`, fixture), args...)
			stopAtCleanup(t, s)
			addr := strings.TrimPrefix(s.base, "http://")
			if code, out, stderr := runBin(t, "wait", "alpha", "--addr", addr, "--timeout", "20s"); code != 0 {
				t.Fatalf("wait alpha: exit %d %s %s", code, out, stderr)
			}
			if code, out, stderr := runBin(t, "tools", "alpha", "--addr", addr); code != 0 || !strings.Contains(out, "echo") {
				t.Fatalf("tools alpha: exit %d %s %s", code, out, stderr)
			}
		})
	}
}
