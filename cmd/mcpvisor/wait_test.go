package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

func TestWaitDone(t *testing.T) {
	// Not ready, as the fleet says (fleet.Status.Ready has its own tests).
	st := func(name, state string, learned bool, lastErr string) fleet.Status {
		return fleet.Status{Name: name, State: state, Learned: learned, LastError: lastErr}
	}
	ready := func(name, state string) fleet.Status {
		return fleet.Status{Name: name, State: state, Learned: true, Ready: true}
	}
	cases := []struct {
		name    string
		servers []fleet.Status
		names   []string
		done    bool
		err     string // "" for none
	}{
		{"all ready", []fleet.Status{ready("a", "running"), ready("b", "dormant"), ready("c", "new")}, nil, true, ""},
		{"one starting", []fleet.Status{ready("a", "running"), st("b", "starting", false, "")}, nil, false, "waiting for b (starting, tools not known yet)"},
		{"only the named", []fleet.Status{ready("a", "running"), st("b", "starting", false, "")}, []string{"a"}, true, ""},
		{"running, tools not learned yet (eager)", []fleet.Status{st("a", "running", false, "")}, nil, false, "waiting for a (running, tools not known yet)"},
		{"running, its tools lost", []fleet.Status{{Name: "a", State: "running", Learned: true, Warning: "it lists no tools where it had 3"}}, nil, false, "waiting for a (running, it lists no tools where it had 3)"},
		{"never started, nothing known (--no-learn)", []fleet.Status{st("a", "new", false, "")}, nil, false, "waiting for a (new, tools not known yet)"},
		{"a failed start", []fleet.Status{st("a", "new", true, "boom")}, nil, false, "waiting for a (new, last error: boom)"},
		{"failed", []fleet.Status{st("a", "failed", false, "boom"), ready("b", "running")}, nil, false, "waiting for a (failed, tools not known yet, last error: boom)"},
		{"unknown", []fleet.Status{ready("a", "running")}, []string{"z"}, true, `no server named "z"; configured: a`},
		{"restarting", []fleet.Status{st("a", "restarting", true, "")}, nil, false, "waiting for a (restarting)"},
	}
	for _, c := range cases {
		done, err := waitDone(c.servers, c.names)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if done != c.done || (c.err == "") != (err == nil) || !strings.Contains(got, c.err) {
			t.Errorf("%s: done %v, err %q; want %v, %q", c.name, done, got, c.done, c.err)
		}
	}
}

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
