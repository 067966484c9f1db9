package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// redactFleet is a fleet of stdio servers (nothing is started) that keeps
// their stderr in the registry it returns.
func redactFleet(t *testing.T, servers string) (*Fleet, *logbuf.Registry) {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"mcpServers":{`+servers+`}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	reg := logbuf.NewRegistry(logbuf.Options{})
	f, err := New(cfg, Options{Logger: discardLogger(), Logs: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	return f, reg
}

// withEnv is sc with its environment replaced by env: the config a reload
// that rotates a secret puts in force (a launch change).
func withEnv(sc *config.Server, env map[string]string) *config.Server {
	c := *sc
	c.Env = env
	return &c
}

// stderrCapture is what the proc layer does, under the stdio connector of
// a launch, with every line its process writes to stderr: the launch's
// Spec.Redact, then its Spec.OnStderr (proc's own test checks that order).
func stderrCapture(t *testing.T, c lifecycle.Connector) func(int, string) {
	t.Helper()
	sc, ok := c.(*backend.StdioConnector)
	if !ok || sc.Spec.OnStderr == nil || sc.Spec.Redact == nil {
		t.Fatalf("the stdio connector is a %T that captures or redacts no stderr", c)
	}
	return func(pid int, line string) { sc.Spec.OnStderr(pid, sc.Spec.Redact(line)) }
}

// A line is redacted once, as it is captured, with the config of the
// launch whose process wrote it: after a reload rotates the secret, the
// old launch's lines — kept, or written by its process while it drains —
// still hide the old secret, which the config now in force no longer
// names, wherever the kept lines go (the logs, a failed start's stderr
// and the history).
func TestStderrIsRedactedWithItsLaunchsConfig(t *testing.T) {
	f, reg := redactFleet(t, `"s":{"command":"s","env":{"TOKEN":"old-token-value"}}`)
	s := f.Get("s")
	old := s.Config()
	oldLaunch := stderrCapture(t, f.connector(old, instHooks{s.sharedIn()}, nil))

	oldLaunch(41, "kept: auth with old-token-value")
	s.cfg.Store(withEnv(old, map[string]string{"TOKEN": "new-token-value"}))
	newLaunch := stderrCapture(t, f.connector(s.Config(), instHooks{s.sharedIn()}, nil))
	oldLaunch(41, "draining: auth with old-token-value")
	newLaunch(42, "auth with new-token-value")

	buf := reg.Lookup("s")
	if buf == nil {
		t.Fatal("no buffer for s")
	}
	var got []string
	for _, e := range buf.Tail(10).Entries {
		got = append(got, fmt.Sprintf("%d %s", e.PID, e.Line))
	}
	want := []string{"41 kept: auth with [redacted]", "41 draining: auth with [redacted]", "42 auth with [redacted]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("kept lines:\n%q\nwant\n%q", got, want)
	}

	// A failed start quotes its last process's lines (42's).
	if lines := s.stderrSince(0, s.sharedIn()); fmt.Sprint(lines) != fmt.Sprint([]string{"auth with [redacted]"}) {
		t.Fatalf("stderrSince: %q", lines)
	}
	if lines := s.stderrSince(1, s.sharedIn()); fmt.Sprint(lines) != fmt.Sprint([]string{"auth with [redacted]"}) {
		t.Fatalf("stderrSince: %q", lines)
	}
	se := s.sharedIn().startFailure(errors.New("handshake failed"), 0)
	if strings.Contains(se.Error(), "token-value") || len(se.Stderr) != 1 {
		t.Fatalf("start error: %q, stderr %q", se.Error(), se.Stderr)
	}
	if h := s.Detail().History; len(h) != 1 || strings.Contains(fmt.Sprint(h[0].Stderr), "token-value") {
		t.Fatalf("history: %+v", h)
	}
}

// A failed start's stderr is the lines its own launch wrote, never those
// of another process of the server: while a restart drains the old shared
// process — which serves another client's call and writes to stderr — the
// new launch of the same (shared, session "") instance slot fails, and
// the error its caller gets quotes only the new launch's lines.
func TestStartFailureQuotesOnlyItsOwnLaunchsStderr(t *testing.T) {
	f, _ := redactFleet(t, `"s":{"command":"s"}`)
	s := f.Get("s")
	old := s.sharedIn()
	fresh := s.newInstance("") // what a restart puts in service while old drains
	oldLaunch := stderrCapture(t, f.connector(s.Config(), instHooks{old}, nil))
	newLaunch := stderrCapture(t, f.connector(s.Config(), instHooks{fresh}, nil))

	oldLaunch(41, "before the restart")
	mark := s.stderrMark()
	oldLaunch(41, "serving session B: marker-of-B")
	newLaunch(42, "unknown flag --bad")
	oldLaunch(41, "session B's call done")

	se := fresh.startFailure(errors.New("handshake failed"), mark)
	if fmt.Sprint(se.Stderr) != fmt.Sprint([]string{"unknown flag --bad"}) {
		t.Fatalf("the new launch's start error quotes %q, want only its own line", se.Stderr)
	}
	if h := s.Detail().History; len(h) != 1 || fmt.Sprint(h[0].Stderr) != fmt.Sprint(se.Stderr) {
		t.Fatalf("history: %+v", h)
	}
	// And the old process's own failure, were it to have one, quotes its
	// lines only.
	if lines := s.stderrSince(mark, old); fmt.Sprint(lines) != fmt.Sprint([]string{"serving session B: marker-of-B", "session B's call done"}) {
		t.Fatalf("old launch's lines: %q", lines)
	}
}
