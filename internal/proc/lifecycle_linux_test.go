package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// The stdio backend drives a Process through lifecycle.Supervisor. These
// tests run that adapter, in its smallest form, against the real fixture:
// Connect spawns and handshakes, Wait reports the tree's end, Close stops it.

type procConnector struct {
	rt    *Runtime
	spec  Spec
	mu    sync.Mutex
	pids  []int
	procs []*Process
}

type procSession struct {
	p     *Process
	lines chan string
}

func (c *procConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	p, err := c.rt.Spawn(ctx, c.spec)
	if err != nil {
		return nil, lifecycle.Classify(err)
	}
	c.mu.Lock()
	c.pids = append(c.pids, p.Pid())
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	s := &procSession{p: p, lines: make(chan string, 16)}
	go func() {
		defer close(s.lines)
		r := bufio.NewReader(p.Stdout())
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				s.lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	if _, err := io.WriteString(p.Stdin(), initLine); err != nil {
		_ = p.Stop(context.Background())
		return nil, lifecycle.Classify(err)
	}
	select {
	case line, ok := <-s.lines:
		if ok && strings.Contains(line, `"result"`) {
			return s, nil
		}
		_ = p.Stop(context.Background())
		st := p.Status()
		return nil, fmt.Errorf("%w: no initialize result (%s): %s", lifecycle.ErrServerCrashed, st, p.Stderr().Tail(3))
	case <-ctx.Done():
		_ = p.Stop(context.Background())
		return nil, ctx.Err()
	}
}

func (s *procSession) Wait() error {
	<-s.p.Done()
	for range s.lines {
	}
	st := s.p.Status()
	if st.Crashed() {
		return fmt.Errorf("%w: %s", lifecycle.ErrServerCrashed, st)
	}
	return nil
}

func (s *procSession) Close() error { return s.p.Stop(context.Background()) }

func fastPolicy() lifecycle.Policy {
	return lifecycle.Policy{
		MaxAttempts: 3,
		Backoff:     lifecycle.Backoff{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond},
		InitTimeout: 5 * time.Second,
	}
}

func TestSupervisedFixtureRestartsAfterCrash(t *testing.T) {
	rt := openRuntime(t, Options{})
	marker := testserver.NewMarker(t)
	conn := &procConnector{rt: rt, spec: fixtureSpec(t, marker, "FIXTURE_CRASH_AFTER=1")}
	sup := lifecycle.New("fixture", conn, fastPolicy())
	if err := sup.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	restarted := sup.Restarted()
	first := conn.procs[0]
	io.WriteString(first.Stdin(), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`+"\n")
	select {
	case <-restarted:
	case <-time.After(10 * time.Second):
		t.Fatalf("no restart after the crash; state %v", sup.State())
	}
	if st := first.Status(); st.Kind != ExitCrashed || st.Code != 3 {
		t.Errorf("first process ended %v, want a crash with code 3", st)
	}
	conn.mu.Lock()
	pids := append([]int(nil), conn.pids...)
	conn.mu.Unlock()
	if len(pids) != 2 || pids[0] == pids[1] || !sup.IsReady() {
		t.Fatalf("want a second, different process and Ready; pids %v, state %v", pids, sup.State())
	}
	if err := sup.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if left := testserver.LiveProcesses(marker); len(left) > 0 {
		t.Fatalf("processes left after the supervisor stopped: %v", left)
	}
}

func TestSupervisedCrashAtStartIsReported(t *testing.T) {
	rt := openRuntime(t, Options{})
	marker := testserver.NewMarker(t)
	conn := &procConnector{rt: rt, spec: fixtureSpec(t, marker, "FIXTURE_CRASH_AT_START=1")}
	sup := lifecycle.New("fixture", conn, fastPolicy())
	err := sup.Start(t.Context())
	if !errors.Is(err, lifecycle.ErrServerCrashed) || !strings.Contains(err.Error(), "crashing at start") {
		t.Fatalf("Start: %v, want ErrServerCrashed with the server's stderr", err)
	}
	if st := sup.State(); st.State != lifecycle.StateStopped {
		t.Fatalf("state %v after a failed first start", st.State)
	}
	if left := testserver.LiveProcesses(marker); len(left) > 0 {
		t.Fatalf("processes left: %v", left)
	}
}

func TestSupervisedMissingBinaryIsUnavailable(t *testing.T) {
	rt := openRuntime(t, Options{})
	conn := &procConnector{rt: rt, spec: Spec{Command: "/nonexistent/mcp-server"}}
	sup := lifecycle.New("missing", conn, fastPolicy())
	if err := sup.Start(t.Context()); !errors.Is(err, lifecycle.ErrServerUnavailable) {
		t.Fatalf("Start: %v, want ErrServerUnavailable", err)
	}
}

func TestSupervisedSlowStartTimesOut(t *testing.T) {
	rt := openRuntime(t, Options{})
	marker := testserver.NewMarker(t)
	conn := &procConnector{rt: rt, spec: fixtureSpec(t, marker, "FIXTURE_SLOW_START=10s")}
	pol := fastPolicy()
	pol.InitTimeout = 300 * time.Millisecond
	sup := lifecycle.New("slow", conn, pol)
	start := time.Now()
	err := sup.Start(t.Context())
	if !errors.Is(err, lifecycle.ErrInitTimeout) {
		t.Fatalf("Start: %v, want ErrInitTimeout", err)
	}
	// The init timeout, then the stop's two waits and a SIGKILL: far
	// from the 10 s the fixture would take to start. The slack is a
	// loaded machine's (a kill, a sweep and a reap took up to 220 ms past
	// their waits under -race on 2 busy cores), not slack's 100 ms.
	if took := time.Since(start); took > 300*time.Millisecond+testStdinWait+testTermWait+time.Second {
		t.Errorf("timed-out start took %v", took)
	}
	if left := testserver.LiveProcesses(marker); len(left) > 0 {
		t.Fatalf("the timed-out server was left running: %v", left)
	}
}
