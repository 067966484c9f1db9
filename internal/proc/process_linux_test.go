package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

func openRuntime(t testing.TB, opts Options) *Runtime {
	t.Helper()
	rt, err := Open(withShim(t, opts))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return rt
}

const (
	testStdinWait = 300 * time.Millisecond
	testTermWait  = 300 * time.Millisecond
	// slack is what a stop may take beyond its configured waits.
	slack = 100 * time.Millisecond
)

func fixtureSpec(t testing.TB, marker string, env ...string) Spec {
	return Spec{
		Name:      "fixture",
		Command:   testserver.Build(t),
		Env:       append(append(os.Environ(), testserver.MarkerEnv+"="+marker), env...),
		StdinWait: testStdinWait,
		TermWait:  testTermWait,
		PostExit:  PostExit{QuiesceWait: 200 * time.Millisecond},
	}
}

// client speaks just enough JSON-RPC to check that a server answers.
type client struct {
	p     *Process
	lines chan string
}

func newClient(p *Process) *client {
	c := &client{p: p, lines: make(chan string, 16)}
	go func() {
		defer close(c.lines)
		r := bufio.NewReaderSize(p.Stdout(), 1<<16)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				c.lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	return c
}

// call sends a request and returns the first line that carries its id.
func (c *client) call(t testing.TB, id int, method, params string) string {
	t.Helper()
	req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", id, method, params)
	if _, err := io.WriteString(c.p.Stdin(), req); err != nil {
		t.Fatalf("write %s: %v", method, err)
	}
	want := fmt.Sprintf(`"id":%d`, id)
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				t.Fatalf("%s: stdout closed before the answer", method)
			}
			if strings.Contains(line, want) {
				return line
			}
		case <-timeout:
			t.Fatalf("%s: no answer in 10s", method)
		}
	}
}

const initParams = `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"proc-test","version":"0"}}`

func (c *client) initialize(t testing.TB) {
	t.Helper()
	if got := c.call(t, 1, "initialize", initParams); !strings.Contains(got, `"result"`) {
		t.Fatalf("initialize: %s", got)
	}
}

// waitCount waits until at least n live processes carry marker.
func waitCount(t testing.TB, marker string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := testserver.LiveProcesses(marker)
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("want %d live processes with the marker, have %v", n, pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStopEveryMisbehaviour is the core promise: whatever the server does,
// after Stop nothing of its tree is left, and Stop kept to its bounds.
func TestStopEveryMisbehaviour(t *testing.T) {
	// What a loaded machine adds to a stop beyond its waits (timers that
	// fire late, the kill, the sweep of escaped descendants, the reap)
	// reaches a few hundred ms under go test -race ./... on two cores;
	// the waits are long beside that slack, so that the bounds still tell
	// a step taken late, an extra wait or the default waits from load.
	const (
		stdinWait = 600 * time.Millisecond
		termWait  = 600 * time.Millisecond
		stopSlack = 400 * time.Millisecond
	)
	cases := []struct {
		name    string
		env     []string
		answers bool
		procs   int           // processes of the tree besides the shim, once started
		fast    bool          // expected to end at the stdin step
		want    ExitKind      // how it ended
		maxStop time.Duration // 0: stdin+term+slack
	}{
		{name: "well-behaved", answers: true, procs: 1, fast: true, want: ExitStopped},
		{name: "ignores-term", env: []string{"FIXTURE_IGNORE_TERM=1"}, answers: true, procs: 1, fast: true, want: ExitStopped},
		{name: "ignores-eof", env: []string{"FIXTURE_IGNORE_EOF=1"}, answers: true, procs: 1, want: ExitStopped},
		{name: "ignores-eof-and-term", env: []string{"FIXTURE_IGNORE_EOF=1", "FIXTURE_IGNORE_TERM=1"}, answers: true, procs: 1, want: ExitStopped},
		{name: "setsid-grandchild", env: []string{"FIXTURE_SETSID_CHILD=1"}, answers: true, procs: 2, want: ExitStopped},
		{name: "grandchild-holds-stdout", env: []string{"FIXTURE_STDOUT_CHILD=1"}, answers: true, procs: 2, want: ExitStopped},
		{name: "never-answers", env: []string{"FIXTURE_NEVER_ANSWER=1"}, procs: 1, want: ExitStopped},
		{name: "garbage", env: []string{"FIXTURE_GARBAGE=1"}, answers: true, procs: 1, fast: true, want: ExitStopped},
		{name: "huge-line", env: []string{"FIXTURE_HUGE_LINE=4000000"}, answers: true, procs: 1, fast: true, want: ExitStopped},
		{name: "slow-start", env: []string{"FIXTURE_SLOW_START=5s"}, procs: 1, want: ExitStopped},
		{name: "everything-at-once", env: []string{"FIXTURE_IGNORE_EOF=1", "FIXTURE_IGNORE_TERM=1", "FIXTURE_SETSID_CHILD=1", "FIXTURE_STDOUT_CHILD=1"}, answers: true, procs: 3, want: ExitStopped},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					marker := testserver.NewMarker(t)
					spec := fixtureSpec(t, marker, c.env...)
					spec.StdinWait, spec.TermWait = stdinWait, termWait
					p, err := rt.Spawn(t.Context(), spec)
					if err != nil {
						t.Fatal(err)
					}
					cl := newClient(p)
					if c.answers {
						cl.initialize(t)
					}
					want := c.procs
					if rt.Report().Active(LayerPIDNamespace) {
						want++ // the shim carries the marker too
					}
					waitCount(t, marker, want)

					start := time.Now()
					if err := p.Stop(context.Background()); err != nil {
						t.Fatalf("Stop: %v", err)
					}
					took := time.Since(start)
					if left := testserver.LiveProcesses(marker); len(left) > 0 {
						testserver.KillProcesses(marker)
						t.Fatalf("after Stop, processes of the tree remain: %v", left)
					}
					bound := stdinWait + termWait + stopSlack
					if c.fast {
						bound = stdinWait
					}
					if took > bound {
						t.Errorf("Stop took %v, bound %v", took, bound)
					}
					st := p.Status()
					if st.Kind != c.want {
						t.Errorf("status %v, want kind %v", st, c.want)
					}
					t.Logf("stop took %v, %v", took.Round(time.Millisecond), st)
				})
			}
		})
	}
}

func TestCrashIsClassified(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			t.Run("at-start", func(t *testing.T) {
				marker := testserver.NewMarker(t)
				p, err := rt.Spawn(t.Context(), fixtureSpec(t, marker, "FIXTURE_CRASH_AT_START=1"))
				if err != nil {
					t.Fatal(err)
				}
				st, err := p.Wait(ctxTimeout(t, 5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if st.Kind != ExitCrashed || st.Code != 3 || !st.Crashed() {
					t.Fatalf("status %v, want crashed with code 3", st)
				}
				if err := p.Stop(t.Context()); err != nil {
					t.Fatalf("Stop after exit: %v", err)
				}
				if len(p.Stderr().Lines()) == 0 {
					t.Error("the crash message on stderr was not captured")
				}
			})
			t.Run("after-call", func(t *testing.T) {
				marker := testserver.NewMarker(t)
				p, err := rt.Spawn(t.Context(), fixtureSpec(t, marker, "FIXTURE_CRASH_AFTER=1", "FIXTURE_STDOUT_CHILD=1"))
				if err != nil {
					t.Fatal(err)
				}
				cl := newClient(p)
				cl.initialize(t)
				cl.call(t, 2, "tools/call", `{"name":"echo","arguments":{"text":"x"}}`)
				st, err := p.Wait(ctxTimeout(t, 5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if st.Kind != ExitCrashed || st.Code != 3 {
					t.Fatalf("status %v", st)
				}
				// The grandchild that held stdout was killed after the
				// quiesce window, without any Stop.
				if left := testserver.LiveProcesses(marker); len(left) > 0 {
					t.Fatalf("descendants survived the crash: %v", left)
				}
				_ = p.Stop(t.Context())
			})
			t.Run("killed-by-someone-else", func(t *testing.T) {
				marker := testserver.NewMarker(t)
				p, err := rt.Spawn(t.Context(), fixtureSpec(t, marker))
				if err != nil {
					t.Fatal(err)
				}
				cl := newClient(p)
				cl.initialize(t)
				pid, _ := fmt.Sscan(strings.TrimSpace(cl.call(t, 2, "tools/call", `{"name":"pid","arguments":{}}`)))
				_ = pid
				for _, q := range waitCount(t, marker, 1) {
					if q != p.Pid() {
						_ = syscall.Kill(q, syscall.SIGKILL) // the server itself, not the shim
					}
				}
				if !rt.Report().Active(LayerPIDNamespace) {
					_ = syscall.Kill(p.Pid(), syscall.SIGKILL)
				}
				st, err := p.Wait(ctxTimeout(t, 5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if st.Kind != ExitCrashed || st.Signal != syscall.SIGKILL {
					t.Fatalf("status %v, want crashed by SIGKILL", st)
				}
				_ = p.Stop(t.Context())
			})
		})
	}
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStopIsIdempotentAndConcurrent(t *testing.T) {
	rt := openRuntime(t, Options{})
	marker := testserver.NewMarker(t)
	p, err := rt.Spawn(t.Context(), fixtureSpec(t, marker, "FIXTURE_IGNORE_EOF=1"))
	if err != nil {
		t.Fatal(err)
	}
	newClient(p).initialize(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := p.Stop(context.Background()); err != nil {
				t.Errorf("Stop: %v", err)
			}
		})
	}
	wg.Wait()
	if err := p.Stop(context.Background()); err != nil {
		t.Errorf("Stop again: %v", err)
	}
	if st := p.Status(); st.Kind != ExitStopped || st.Stage != "term" {
		t.Errorf("status %v, want stopped at the term step", st)
	}
	testserver.WaitGone(t, marker, 0)
}

func TestStopDeadlineSkipsToKill(t *testing.T) {
	rt := openRuntime(t, Options{})
	marker := testserver.NewMarker(t)
	spec := fixtureSpec(t, marker, "FIXTURE_IGNORE_EOF=1", "FIXTURE_IGNORE_TERM=1")
	spec.StdinWait, spec.TermWait = 0, 0 // defaults: 2 s + 10 s
	p, err := rt.Spawn(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	newClient(p).initialize(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	// Stop returns by its deadline: nil if the tree is gone by then, else
	// an error wrapping the deadline, with the tree being killed.
	if err := p.Stop(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(start); took > 150*time.Millisecond+slack {
		t.Errorf("Stop under a 150ms deadline took %v", took)
	}
	if _, err := p.Wait(ctxTimeout(t, killBound)); err != nil {
		t.Fatalf("the tree is not gone: %v", err)
	}
	if st := p.Status(); st.Stage != "kill" || st.Signal != syscall.SIGKILL && !rt.Report().Active(LayerPIDNamespace) {
		t.Errorf("status %v, want killed", st)
	}
	testserver.WaitGone(t, marker, 0)
}

func TestPostExitWatchdogStopsAServerThatClosedStdout(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			marker := testserver.NewMarker(t)
			spec := Spec{
				Name:      "closes-stdout",
				Command:   "/bin/sh",
				Args:      []string{"-c", "exec 1>&-; trap '' TERM; sleep 30"},
				Env:       append(os.Environ(), testserver.MarkerEnv+"="+marker),
				StdinWait: 50 * time.Millisecond,
				TermWait:  50 * time.Millisecond,
				PostExit:  PostExit{ExitHangWait: 200 * time.Millisecond},
			}
			p, err := rt.Spawn(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if n, err := io.Copy(io.Discard, p.Stdout()); err != nil || n != 0 {
				t.Fatalf("read stdout: %d bytes, %v", n, err)
			}
			st, err := p.Wait(ctxTimeout(t, 5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if took < 200*time.Millisecond || took > 300*time.Millisecond+slack {
				t.Errorf("stopped %v after stdout EOF, want the 200ms exit-hang window plus the stop", took)
			}
			if st.Kind != ExitStopped {
				t.Errorf("status %v", st)
			}
			testserver.WaitGone(t, marker, 0)
		})
	}
}

func TestDescendantsGetTheQuiesceWindowThenDie(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			marker := testserver.NewMarker(t)
			spec := Spec{
				Name:     "leaves-a-child",
				Command:  "/bin/sh",
				Args:     []string{"-c", "trap '' TERM; (trap '' TERM; exec sleep 30) & echo started; exit 0"},
				Env:      append(os.Environ(), testserver.MarkerEnv+"="+marker),
				PostExit: PostExit{QuiesceWait: 300 * time.Millisecond},
			}
			p, err := rt.Spawn(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			<-p.Exited()
			st, err := p.Wait(ctxTimeout(t, 5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if took < 250*time.Millisecond || took > 300*time.Millisecond+slack+DefaultWaitDelay {
				t.Errorf("tree gone %v after the leader exited, want about the 300ms window", took)
			}
			if st.Kind != ExitClean {
				t.Errorf("status %v, want clean", st)
			}
			if left := testserver.LiveProcesses(marker); len(left) > 0 {
				t.Fatalf("the child outlived the window: %v", left)
			}
		})
	}
}

func TestStderrRing(t *testing.T) {
	rt := openRuntime(t, Options{})
	marker := testserver.NewMarker(t)
	spec := fixtureSpec(t, marker, "FIXTURE_STDERR_LINES=50")
	spec.StderrLines = 10
	p, err := rt.Spawn(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	newClient(p).initialize(t)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.Stderr().Tail(0), "stderr line 50") {
		if time.Now().After(deadline) {
			t.Fatalf("stderr ring: %q", p.Stderr().Lines())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	lines := p.Stderr().Lines()
	if len(lines) != 10 {
		t.Fatalf("ring holds %d lines, want 10: %q", len(lines), lines)
	}
	// The fixture writes one more line when stdin closes; the ring keeps
	// the newest ten: lines 42..50 and that one.
	if lines[0] != "stderr line 42" || lines[8] != "stderr line 50" {
		t.Errorf("ring does not hold the last lines: %q", lines)
	}
}

// Spec.OnStderr is given every stderr line, with the leader's pid, in
// order, whatever the ring keeps; all of them by the time Stop returns.
func TestStderrHook(t *testing.T) {
	rt := openRuntime(t, Options{})
	marker := testserver.NewMarker(t)
	spec := fixtureSpec(t, marker, "FIXTURE_STDERR_LINES=50")
	spec.StderrLines = 10
	var mu sync.Mutex
	var got []string
	spec.OnStderr = func(pid int, line string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf("%d %s", pid, line))
	}
	p, err := rt.Spawn(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	newClient(p).initialize(t)
	if err := p.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 51 {
		t.Fatalf("the hook had %d lines, want 51 (50 and the one at stdin's close): %q", len(got), got)
	}
	for i := range 50 {
		if want := fmt.Sprintf("%d stderr line %d", p.Pid(), i+1); got[i] != want {
			t.Fatalf("line %d: %q, want %q", i, got[i], want)
		}
	}
}

// Spec.Redact rewrites each stderr line before the ring and the hook take
// it: neither the lines kept nor what quotes the ring (an exit's error)
// carries the secret.
func TestStderrRedact(t *testing.T) {
	rt := openRuntime(t, Options{})
	spec := fixtureSpec(t, testserver.NewMarker(t), "FIXTURE_STDERR_LINES=3")
	spec.Redact = func(line string) string { return strings.ReplaceAll(line, "line 2", "[redacted]") }
	var mu sync.Mutex
	var hooked []string
	spec.OnStderr = func(_ int, line string) {
		mu.Lock()
		defer mu.Unlock()
		hooked = append(hooked, line)
	}
	p, err := rt.Spawn(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	newClient(p).initialize(t)
	if err := p.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	ring := p.Stderr().Lines()
	for _, lines := range [][]string{ring, hooked} {
		if len(lines) < 3 || lines[0] != "stderr line 1" || lines[1] != "stderr [redacted]" || lines[2] != "stderr line 3" {
			t.Fatalf("ring %q, hook %q: want line 2 redacted in both", ring, hooked)
		}
	}
}

func TestSpawnErrors(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			if _, err := rt.Spawn(t.Context(), Spec{Command: "/nonexistent/mcp-server"}); err == nil {
				t.Fatal("spawning a missing binary succeeded")
			}
			if _, err := rt.Spawn(t.Context(), Spec{Command: "no-such-command-mcpvisor-test"}); err == nil {
				t.Fatal("spawning an unknown command succeeded")
			}
			if _, err := rt.Spawn(t.Context(), Spec{}); err == nil {
				t.Fatal("empty command accepted")
			}
			theSpawner.mu.Lock()
			live := theSpawner.live
			theSpawner.mu.Unlock()
			if live != 0 {
				t.Fatalf("spawner still counts %d children after failed spawns", live)
			}
		})
	}
}

func TestSpawnAfterClose(t *testing.T) {
	rt, err := Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Spawn(t.Context(), Spec{Command: "/bin/true"}); err != ErrClosed {
		t.Fatalf("Spawn after Close: %v, want ErrClosed", err)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	rt, err := Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	marker := testserver.NewMarker(t)
	for range 3 {
		p, err := rt.Spawn(t.Context(), fixtureSpec(t, marker, "FIXTURE_IGNORE_EOF=1", "FIXTURE_IGNORE_TERM=1"))
		if err != nil {
			t.Fatal(err)
		}
		newClient(p).initialize(t)
	}
	start := time.Now()
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// In parallel, the three stops take one stop's waits (600 ms) plus
	// their kills, sweeps and reaps, which under go test -race ./... on
	// two cores took up to 220 ms (TestStopEveryMisbehaviour); one after
	// another they would take three times the waits (1.8 s), two at once
	// twice (1.2 s). 400 ms beyond the waits tells them apart; 100 ms
	// failed once in a full run (707 ms).
	if took := time.Since(start); took > testStdinWait+testTermWait+4*slack {
		t.Errorf("Close of 3 TERM-ignorers took %v: stops must run in parallel", took)
	}
	if left := testserver.LiveProcesses(marker); len(left) > 0 {
		t.Fatalf("left after Close: %v", left)
	}
}

// TestKillIsImmediate is the forced-shutdown path: Kill removes every tree
// at once, whatever its processes ignore, without waiting for any stop step.
func TestKillIsImmediate(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			marker := testserver.NewMarker(t)
			for range 2 {
				p, err := rt.Spawn(t.Context(), fixtureSpec(t, marker, "FIXTURE_IGNORE_EOF=1", "FIXTURE_IGNORE_TERM=1", "FIXTURE_SETSID_CHILD=1", "FIXTURE_STDOUT_CHILD=1"))
				if err != nil {
					t.Fatal(err)
				}
				newClient(p).initialize(t)
			}
			start := time.Now()
			rt.Kill()
			for len(testserver.LiveProcesses(marker)) > 0 {
				if time.Since(start) > 100*time.Millisecond {
					testserver.KillProcesses(marker)
					t.Fatalf("processes left 100ms after Kill: %v", testserver.LiveProcesses(marker))
				}
				time.Sleep(time.Millisecond)
			}
			t.Logf("every process gone %v after Kill", time.Since(start).Round(time.Millisecond))
		})
	}
}
