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
	"github.com/mcpvisor/mcpvisor/internal/proc"
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

// stderrCapture is what the stdio connector of a launch gives every line
// its process writes to stderr.
func stderrCapture(t *testing.T, c lifecycle.Connector) func(int, string) {
	t.Helper()
	if r, ok := c.(*redactingConnector); ok {
		c = r.Connector
	}
	sc, ok := c.(*backend.StdioConnector)
	if !ok || sc.Spec.OnStderr == nil {
		t.Fatalf("the stdio connector is a %T that captures no stderr", c)
	}
	return sc.Spec.OnStderr
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

	if lines := s.stderrSince(0, ""); fmt.Sprint(lines) != fmt.Sprint([]string{"kept: auth with [redacted]", "draining: auth with [redacted]", "auth with [redacted]"}) {
		t.Fatalf("stderrSince: %q", lines)
	}
	se := s.sharedIn().startFailure(errors.New("handshake failed"), 0)
	if strings.Contains(se.Error(), "token-value") || len(se.Stderr) != 3 {
		t.Fatalf("start error: %q, stderr %q", se.Error(), se.Stderr)
	}
	if h := s.History(); len(h) != 1 || strings.Contains(fmt.Sprint(h[0].Stderr), "token-value") {
		t.Fatalf("history: %+v", h)
	}
}

// errConnector's Connect fails with connectErr, else returns a session
// whose Wait reports waitErr; it takes an era hint and says whether its
// session was closed with a context.
type errConnector struct {
	connectErr, waitErr error
	hinted              bool
	closedWithCtx       bool
}

func (c *errConnector) Connect(context.Context) (lifecycle.Session, error) {
	if c.connectErr != nil {
		return nil, c.connectErr
	}
	return errSession{c}, nil
}

func (c *errConnector) SetEraHint(func() string) { c.hinted = true }

type errSession struct{ c *errConnector }

func (s errSession) Wait() error  { return s.c.waitErr }
func (s errSession) Close() error { return nil }
func (s errSession) CloseContext(context.Context) error {
	s.c.closedWithCtx = true
	return nil
}

// The proc layer keeps a stderr ring of its own, whose tail the errors of
// a stdio launch quote — a process's exit (backend.ExitError.Stderr) and
// a failed handshake's error — and which the lifecycle's events, the
// status's last error and the history take up: the launch's connector
// redacts them with its own config as they enter the fleet, keeping what
// the fleet reads in them (the crash class, the exit status), so that a
// draining old launch's crash does not show the secret a reload rotated.
func TestLaunchErrorsAreRedactedWithItsLaunchsConfig(t *testing.T) {
	f, _ := redactFleet(t, `"s":{"command":"s","env":{"TOKEN":"old-token-value"}}`)
	s := f.Get("s")
	old := s.Config()
	s.cfg.Store(withEnv(old, map[string]string{"TOKEN": "new-token-value"})) // the old launch drains

	exit := &backend.ExitError{Server: "s", Status: proc.ExitStatus{Code: 3}, Stderr: "bad old-token-value"}
	inner := &errConnector{waitErr: exit}
	c := redactLaunch(inner, old)
	if h, ok := c.(interface{ SetEraHint(func() string) }); !ok {
		t.Fatal("the era hint does not reach the stdio connector")
	} else if h.SetEraHint(func() string { return "" }); !inner.hinted {
		t.Fatal("the era hint was not passed on")
	}
	sess, err := c.Connect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	werr := sess.Wait()
	var ee *backend.ExitError
	if !errors.As(werr, &ee) || ee.Status.Code != 3 || ee.Stderr != "bad [redacted]" || strings.Contains(werr.Error(), "old-token-value") || !errors.Is(werr, lifecycle.ErrServerCrashed) {
		t.Fatalf("Wait: %v (exit %+v)", werr, ee)
	}
	if exit.Stderr != "bad old-token-value" {
		t.Fatal("the backend's error was changed in place")
	}
	if cc, ok := sess.(lifecycle.ContextCloser); !ok || cc.CloseContext(t.Context()) != nil || !inner.closedWithCtx {
		t.Fatal("a bounded close does not reach the session")
	}
	e := s.sharedIn().servingExit(werr, 41)
	if strings.Contains(e.Error+fmt.Sprint(e.Stderr), "old-token-value") || e.Code == nil || *e.Code != 3 {
		t.Fatalf("serving exit: %+v", e)
	}

	// A handshake the process's end failed quotes the ring in its text;
	// one that wraps the exit carries it too.
	for _, cerr := range []error{
		fmt.Errorf("%w: process exit code 3; stderr: bad old-token-value", lifecycle.ErrServerCrashed),
		fmt.Errorf("server s: %w", &backend.ExitError{Server: "s", Status: proc.ExitStatus{Code: 3}, Stderr: "bad old-token-value"}),
	} {
		_, err := redactLaunch(&errConnector{connectErr: cerr}, old).Connect(t.Context())
		if err == nil || strings.Contains(err.Error(), "old-token-value") || !strings.Contains(err.Error(), "[redacted]") || !errors.Is(err, lifecycle.ErrServerCrashed) {
			t.Fatalf("Connect: %v", err)
		}
		if errors.As(err, &ee) && ee.Stderr != "bad [redacted]" {
			t.Fatalf("Connect's exit: %+v", ee)
		}
		se := s.sharedIn().startFailure(err, 0)
		if h := s.History(); strings.Contains(se.Error()+h[len(h)-1].Error, "old-token-value") {
			t.Fatalf("start failure: %q, history %+v", se.Error(), h[len(h)-1])
		}
	}

	// An error with nothing to hide is passed on as it is.
	plain := fmt.Errorf("%w: cannot start", lifecycle.ErrServerUnavailable)
	if _, err := redactLaunch(&errConnector{connectErr: plain}, old).Connect(t.Context()); err != plain {
		t.Fatalf("Connect: %v, want the error itself", err)
	}
}
