package fleet

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/interest"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// launchFleet is a fleet of fake servers whose connector counts the
// connects of each launch (by command), so a test sees which launch a
// start used.
type launchFleet struct {
	f      *Fleet
	mu     sync.Mutex
	by     map[string]int // connects by command
	events []Event
}

// eventsOf lists the events of type typ so far.
func (lf *launchFleet) eventsOf(typ string) []Event {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	var out []Event
	for _, e := range lf.events {
		if string(e.Type) == typ {
			out = append(out, e)
		}
	}
	return out
}

func (lf *launchFleet) connects(command string) int {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return lf.by[command]
}

type launchConnector struct {
	lf        *launchFleet
	command   string
	onConnect func(context.Context, Live)
}

func (c *launchConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	c.lf.mu.Lock()
	c.lf.by[c.command]++
	c.lf.mu.Unlock()
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	l := &fakeLive{done: make(chan struct{})}
	c.onConnect(ctx, l)
	return l, nil
}

func parseCfg(t *testing.T, servers string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"mcpServers":{`+servers+`}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newLaunchFleet(t *testing.T, servers string) *launchFleet {
	t.Helper()
	lf := &launchFleet{by: map[string]int{}}
	f, err := New(parseCfg(t, servers), Options{
		Logger:   discardLogger(),
		Interest: interest.New(discardLogger()),
		Connector: func(sc *config.Server, _ backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector {
			return &launchConnector{lf: lf, command: sc.Command, onConnect: onConnect}
		},
		OnEvent: func(e Event) {
			recordEvent(e)
			lf.mu.Lock()
			lf.events = append(lf.events, e)
			lf.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	lf.f = f
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	return lf
}

// running starts the named server and returns its live connection.
func (lf *launchFleet) running(t *testing.T, name string) Live {
	t.Helper()
	l := live(lf.f.Get(name).Acquire(t.Context(), ""))
	if l == nil {
		t.Fatalf("%s did not start", name)
	}
	return l
}

func actions(r ReloadResult) map[string]string {
	m := map[string]string{}
	for _, s := range r.Servers {
		m[s.Name] = s.Action
	}
	return m
}

const threeServers = `"a":{"command":"a","idleTimeout":"0"},"b":{"command":"b","idleTimeout":"0"},"c":{"command":"c","idleTimeout":"0"}`

// A reload keeps an unchanged server's process, relaunches a changed one
// (its old process stopped, its next request served by the new launch),
// refuses and stops a removed one, and serves an added one; nothing else
// is spawned.
func TestReloadAppliesPerServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, threeServers)
		a, b, c := lf.running(t, "a"), lf.running(t, "b"), lf.running(t, "c")
		removed := lf.f.Get("c")

		res, err := lf.f.Reload(t.Context(), parseCfg(t, `"a":{"command":"a","idleTimeout":"0"},"b":{"command":"b2","idleTimeout":"0"},"d":{"command":"d","idleTimeout":"0"}`), false, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"a": "unchanged", "b": "restarted", "c": "removed", "d": "added"}
		if got := actions(res); len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] || got["c"] != want["c"] || got["d"] != want["d"] {
			t.Fatalf("actions = %v, want %v", got, want)
		}
		if !a.Alive() || live(lf.f.Get("a").Acquire(t.Context(), "")) != a {
			t.Fatal("the unchanged server's connection did not survive the reload")
		}
		if b.Alive() || c.Alive() {
			t.Fatalf("old processes left running: b %v, c %v", b.Alive(), c.Alive())
		}
		if lf.f.Get("c") != nil {
			t.Fatal("a removed server is still found by name")
		}
		if _, err := removed.Acquire(t.Context(), ""); !errors.Is(err, ErrRemoved) {
			t.Fatalf("a request to the removed server (held from before) got %v, want ErrRemoved", err)
		}
		if got := lf.connects("b2") + lf.connects("d"); got != 0 {
			t.Fatalf("%d spawns before any request: a reload without learning starts nothing", got)
		}
		if nb := live(lf.f.Get("b").Acquire(t.Context(), "")); nb == nil || nb == b {
			t.Fatal("the changed server was not served by a new connection")
		}
		lf.running(t, "d")
		if lf.connects("a") != 1 || lf.connects("b") != 1 || lf.connects("b2") != 1 || lf.connects("c") != 1 || lf.connects("d") != 1 {
			t.Fatalf("connects = %v, want one of each launch", lf.by)
		}
		if d := res.Servers[1].Drained; d == nil || d.Stopped != 1 || d.Cut != 0 {
			t.Fatalf("b drained = %+v, want one instance stopped, none cut", d)
		}
	})
}

// A relaunch waits for the call in flight on the old process (the old
// process is stopped only after it), while a request arriving meanwhile
// is served by the new launch at once.
func TestReloadDrainsCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, threeServers)
		b := lf.f.Get("b")
		held, err := b.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		old := held.in.current()
		done := make(chan ReloadResult, 1)
		go func() {
			res, _ := lf.f.Reload(context.Background(), parseCfg(t, `"a":{"command":"a","idleTimeout":"0"},"b":{"command":"b2","idleTimeout":"0"},"c":{"command":"c","idleTimeout":"0"}`), false, nil)
			done <- res
		}()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("the reload returned while a call was in flight on the old process")
		default:
		}
		if !old.Alive() {
			t.Fatal("the old process was stopped under a call in flight")
		}
		if nb := live(b.Acquire(t.Context(), "")); nb == nil || nb == old || lf.connects("b2") != 1 {
			t.Fatal("a request during the drain was not served by the new launch")
		}
		held.Release()
		res := <-done
		if old.Alive() {
			t.Fatal("the old process outlived its drain")
		}
		if d := res.Servers[1].Drained; d == nil || d.Cut != 0 {
			t.Fatalf("drained = %+v, want nothing cut", d)
		}
	})
}

// A call that outlasts the drain bound (the server's request timeout) is
// cut: the reload does not wait for it longer.
func TestReloadDrainIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"b":{"command":"b","idleTimeout":"0","requestTimeout":"5s"}`)
		held, err := lf.f.Get("b").Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		t0 := time.Now()
		res, err := lf.f.Reload(t.Context(), parseCfg(t, ``), false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(t0); took < 5*time.Second || took > 6*time.Second {
			t.Fatalf("the reload took %v, want the 5s drain bound", took)
		}
		if d := res.Servers[0].Drained; d == nil || d.Cut != 1 {
			t.Fatalf("drained = %+v, want one instance cut", d)
		}
	})
}

// Settings alone apply in place: the process is kept, and a new idle
// timeout puts it to sleep on time.
func TestReloadSettingsInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"a":{"command":"a","idleTimeout":"0","startGrace":"0s"}`)
		a := lf.running(t, "a")
		res, err := lf.f.Reload(t.Context(), parseCfg(t, `"a":{"command":"a","idleTimeout":"10s","startGrace":"0s","restart":{"policy":"never"}}`), false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Servers[0]; got.Action != "updated" || len(got.Fields) != 2 || got.Fields[0] != "idleTimeout" || got.Fields[1] != "restart" {
			t.Fatalf("result = %+v, want updated: idleTimeout, restart", got)
		}
		if !a.Alive() || lf.connects("a") != 1 {
			t.Fatal("a settings-only change restarted the server")
		}
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if st := state(lf.f.Get("a")); st != "running" {
			t.Fatalf("state %s before the new idle timeout", st)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if st := state(lf.f.Get("a")); st != "dormant" {
			t.Fatalf("state %s after the new idle timeout, want dormant", st)
		}
		if got := lf.f.Get("a").sharedIn().runState().State; got == lifecycle.StateReady {
			t.Fatal("supervisor still ready after the dormant stop")
		}
	})
}

// The operator's stop refuses requests until start (nothing is started
// for them, unlike a dormant server), waits for the call in flight, and
// start brings the server back.
func TestOperatorStopAndStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, threeServers)
		a := lf.f.Get("a")
		held, err := a.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		old := held.in.current()
		stopped := make(chan Drained, 1)
		go func() {
			d, _ := a.Stop(context.Background())
			stopped <- d
		}()
		synctest.Wait()
		if _, err := a.Acquire(t.Context(), ""); !errors.Is(err, ErrStopped) {
			t.Fatalf("request to a stopped server: %v, want ErrStopped", err)
		}
		select {
		case <-stopped:
			t.Fatal("stop returned with a call in flight")
		default:
		}
		held.Release()
		if d := <-stopped; d.Stopped != 1 || d.Cut != 0 || old.Alive() {
			t.Fatalf("stop: %+v, old alive %v", d, old.Alive())
		}
		st := a.Status()
		if st.State != "stopped" || st.Refusing == "" {
			t.Fatalf("status %+v, want stopped and refusing", st)
		}
		if lf.connects("a") != 1 {
			t.Fatalf("%d connects: a stopped server was started", lf.connects("a"))
		}
		if err := a.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if st := a.Status(); st.State != "running" || lf.connects("a") != 2 || st.Spawns != 2 {
			t.Fatalf("after start: %+v, %d connects", st, lf.connects("a"))
		}
	})
}

// Restart replaces the process; callers waiting on the old instance while
// it starts are sent on to the new one rather than failed.
func TestOperatorRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, threeServers)
		a := lf.f.Get("a")
		first := lf.running(t, "a")
		d, err := a.Restart(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if first.Alive() || d.Stopped != 1 {
			t.Fatalf("restart: %+v, old alive %v", d, first.Alive())
		}
		second := lf.running(t, "a")
		if second == first || lf.connects("a") != 2 {
			t.Fatalf("restart did not respawn: %d connects", lf.connects("a"))
		}
		// A restart while a start is under way: its waiters get the new
		// instance, not an error.
		if _, err := a.Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
		_ = a.stopShared(t.Context())
		errc := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := use(a.Acquire(t.Context(), ""))
				errc <- err
			}()
		}
		time.Sleep(50 * time.Millisecond) // the start takes 100ms
		if _, err := a.Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := <-errc; err != nil {
				t.Fatalf("a caller waiting while the server restarted got %v", err)
			}
		}
	})
}

// A session waiting for a place under maxInstances when a reload removes
// the server, or the operator stops it, must be refused, not given a fresh
// process nothing would serve (for a removed server, one the fleet no
// longer knows about).
func TestRefusingServerRefusesAWaitingSession(t *testing.T) {
	for _, c := range []struct {
		how  string
		want error
	}{{"removed", ErrRemoved}, {"stopped", ErrStopped}} {
		t.Run(c.how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lf := newLaunchFleet(t, `"p":{"command":"p","sharing":"per-session","maxInstances":1,"idleTimeout":"0"}`)
				p := lf.f.Get("p")
				a, err := p.Acquire(t.Context(), "A")
				if err != nil {
					t.Fatal(err)
				}
				a.Release()
				stop := lf.f.DetachSession("A") // A's instance now counts as stopping
				type res struct {
					l   *Lease
					err error
				}
				got := make(chan res, 1)
				go func() {
					l, err := p.Acquire(context.Background(), "B")
					got <- res{l, err}
				}()
				synctest.Wait() // B waits for a place
				if c.how == "removed" {
					_, err = lf.f.Reload(t.Context(), parseCfg(t, ``), false, nil)
				} else {
					_, err = p.Stop(t.Context())
				}
				if err != nil {
					t.Fatal(err)
				}
				stop(t.Context()) // A's instance is gone: B wakes
				r := <-got
				if r.err == nil {
					t.Errorf("B got a lease on a %s server (connects of p: %d; status %+v)", c.how, lf.connects("p"), p.Status())
					r.l.Release()
					_ = lf.f.Close(context.Background())
					if r.l.in.current() != nil {
						t.Errorf("its process outlives Fleet.Close")
					}
				} else if !errors.Is(r.err, c.want) {
					t.Errorf("err = %v, want %v", r.err, c.want)
				}
				if n := lf.connects("p"); n != 1 {
					t.Errorf("%d connects: a %s server was started", n, c.how)
				}
			})
		})
	}
}

// Reloads run one at a time: of two at once, the second compares with the
// configuration the first left, so it removes what the first added, and
// the fleet ends with the second's servers.
func TestConcurrentReloadsSerialize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"a":{"command":"a"}`)
		withB := parseCfg(t, `"a":{"command":"a"},"b":{"command":"b"}`)
		withC := parseCfg(t, `"a":{"command":"a"},"c":{"command":"c"}`)
		results := make(chan map[string]string, 2)
		for _, cfg := range []*config.Config{withB, withC} {
			go func() {
				res, err := lf.f.Reload(context.Background(), cfg, false, nil)
				if err != nil {
					t.Error(err)
				}
				results <- actions(res)
			}()
		}
		// They may return in either order (the second applied may have
		// less to drain): the first applied is the one that removed
		// nothing.
		first, second := <-results, <-results
		if first["b"] == "removed" || first["c"] == "removed" {
			first, second = second, first
		}
		added := map[string]bool{"b": first["b"] == "added", "c": first["c"] == "added"}
		var last string
		switch {
		case added["b"] && second["b"] == "removed" && second["c"] == "added":
			last = "c"
		case added["c"] && second["c"] == "removed" && second["b"] == "added":
			last = "b"
		default:
			t.Fatalf("the reloads did not see each other: first %v, second %v", first, second)
		}
		if names := len(lf.f.Servers()); names != 2 || lf.f.Get(last) == nil {
			t.Fatalf("the fleet has %d servers, want a and %s", names, last)
		}
	})
}

// Close stops an instance still draining (a reload removed its server
// while a call held it): no process outlives the fleet.
func TestCloseStopsDrainingInstances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"b":{"command":"b","idleTimeout":"0"}`)
		held, err := lf.f.Get("b").Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		old := held.in.current()
		reloaded := make(chan struct{})
		go func() {
			defer close(reloaded)
			_, _ = lf.f.Reload(context.Background(), parseCfg(t, ``), false, nil)
		}()
		synctest.Wait() // the reload drains b
		if err := lf.f.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if old.Alive() {
			t.Fatal("the removed server's draining process outlives Fleet.Close")
		}
		held.Release()
		<-reloaded
	})
}

const relaunchB = `"a":{"command":"a","idleTimeout":"0"},"b":{"command":"b2","idleTimeout":"0"},"c":{"command":"c","idleTimeout":"0"}`

// A reload whose caller stops waiting (a client that hangs up, a CLI's
// Ctrl-C) does not cut the drains: the caller gets its context's error at
// once, the call in flight on the old process finishes, and the process is
// stopped after it.
func TestReloadDrainOutlivesTheCallersContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, threeServers)
		held, err := lf.f.Get("b").Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		old := held.in.current()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		t0 := time.Now()
		res, err := lf.f.Reload(ctx, parseCfg(t, relaunchB), false, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("reload: %v, want the caller's deadline", err)
		}
		if took := time.Since(t0); took > 2*time.Second {
			t.Fatalf("the reload returned after %v, past its caller's 1s", took)
		}
		if got := actions(res); got["b"] != "restarted" {
			t.Fatalf("actions %v: the reload was applied before the deadline", got)
		}
		if d := res.Servers[1].Drained; d == nil || !d.Pending {
			t.Fatalf("drained = %+v, want pending", d)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !old.Alive() {
			t.Fatal("the caller's deadline cut the drain: the old process was stopped under its call")
		}
		if n := len(lf.eventsOf("reload-drained")); n != 0 {
			t.Fatalf("%d reload-drained events before the drain ended", n)
		}
		held.Release()
		synctest.Wait()
		if old.Alive() {
			t.Fatal("the old process outlived its drain")
		}
		// Its caller gone, the drain's outcome is still reported.
		if ev := lf.eventsOf("reload-drained"); len(ev) != 1 || ev[0].Server != "b" || ev[0].Details["instances"] != 1 {
			t.Fatalf("reload-drained events %+v, want one for b", ev)
		}
	})
}

// A reload whose caller has already given up applies nothing.
func TestReloadWithEndedContextAppliesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, threeServers)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := lf.f.Reload(ctx, parseCfg(t, `"a":{"command":"a"}`), false, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("reload: %v, want context.Canceled", err)
		}
		if n := len(lf.f.Servers()); n != 3 || lf.f.Get("b") == nil {
			t.Fatalf("%d servers after a reload its caller gave up: it was applied", n)
		}
	})
}

// The new configuration is served — the applied hook (routes, aggregate,
// live settings) runs — before the drains end, not after them; the hook
// learns when each removed server's drain has ended.
func TestReloadAppliedBeforeDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, threeServers)
		heldB, err := lf.f.Get("b").Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		heldC, err := lf.f.Get("c").Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		type seen struct {
			names []string
			gone  <-chan struct{}
		}
		applied := make(chan seen, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = lf.f.Reload(context.Background(), parseCfg(t, `"a":{"command":"a","idleTimeout":"0"},"b":{"command":"b2","idleTimeout":"0"},"d":{"command":"d"}`), false, func(a Applied) {
				var names []string
				for _, s := range lf.f.Servers() {
					names = append(names, s.Name())
				}
				applied <- seen{names, a.Removed["c"]}
			})
		}()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		var got seen
		select {
		case got = <-applied:
		default:
			t.Fatal("the applied hook had not run while the drains waited for calls")
		}
		if len(got.names) != 3 || got.names[2] != "d" || got.gone == nil {
			t.Fatalf("the hook saw servers %v, removed c's drain %v", got.names, got.gone)
		}
		select {
		case <-got.gone:
			t.Fatal("c's drain reported ended while its call was in flight")
		default:
		}
		heldC.Release()
		synctest.Wait()
		select {
		case <-got.gone:
		default:
			t.Fatal("c's drain ended but the hook was not told")
		}
		heldB.Release()
		<-done
	})
}

// The operator's actions take the server's lock only to change its state,
// never across a drain or a start: a stop with a short context returns
// within it while a restart drains a long call, and the restart that finds
// the server stopped says so.
func TestStopDoesNotWaitForARestartsDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, threeServers)
		a := lf.f.Get("a")
		held, err := a.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		restarted := make(chan error, 1)
		go func() {
			_, err := a.Restart(context.Background())
			restarted <- err
		}()
		synctest.Wait() // the restart drains: the call holds the old process
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		t0 := time.Now()
		_, _ = a.Stop(ctx)
		if took := time.Since(t0); took > 2*time.Second {
			t.Fatalf("stop took %v behind a restart's drain, past its 1s context", took)
		}
		if _, err := a.Acquire(t.Context(), ""); !errors.Is(err, ErrStopped) {
			t.Fatalf("after stop: %v, want ErrStopped", err)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		defer rcancel()
		if _, err := lf.f.Reload(rctx, parseCfg(t, threeServers+`,"d":{"command":"d"}`), false, nil); err != nil {
			t.Fatalf("a reload behind the restart's drain: %v", err)
		}
		held.Release()
		if err := <-restarted; !errors.Is(err, ErrStopped) {
			t.Fatalf("restart: %v, want ErrStopped (stopped meanwhile)", err)
		}
	})
}

// After a restart, a per-session server's sessions keep their own
// subscriptions: each subscribed session's instance runs again with them
// (no request needed to bring the updates back), and the shared instance
// (which only learns the lists) neither gets them nor is kept awake by them.
func TestRestartResumesSubscribedSessions(t *testing.T) {
	for _, init := range []string{"", `,"initTimeout":"0"`} { // 0: no deadline
		t.Run("init"+init, func(t *testing.T) { restartResumesSubscribedSessions(t, init) })
	}
}

func restartResumesSubscribedSessions(t *testing.T, init string) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"p":{"command":"p","sharing":"per-session","idleTimeout":"0"`+init+`}`)
		p := lf.f.Get("p")
		a, err := p.Acquire(t.Context(), "A")
		if err != nil {
			t.Fatal(err)
		}
		a.Release()
		p.subscribe("A", "file:///x")
		if _, err := p.Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if p.pinned("") {
			t.Fatal("the shared instance counts session A's subscription as its own")
		}
		if uris, _ := p.replay(""); len(uris) != 0 {
			t.Fatalf("the shared instance would be told %v", uris)
		}
		in := p.instanceOf("A")
		if in == nil || in.current() == nil || !in.current().Alive() {
			t.Fatal("session A's instance was not started again after the restart")
		}
		if n := lf.connects("p"); n != 2 {
			t.Fatalf("%d connects, want 2 (A's first and its resumed instance)", n)
		}
	})
}

// A relaunch of a shared server that a session subscribed to starts the
// new launch once drained, even without learning: subscribers keep getting
// updates.
func TestRelaunchResumesASubscribedServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, threeServers)
		lf.running(t, "b")
		lf.f.Get("b").subscribe("A", "file:///x")
		if _, err := lf.f.Reload(t.Context(), parseCfg(t, relaunchB), false, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := lf.connects("b2"); n != 1 {
			t.Fatalf("%d connects of the new launch, want 1: its subscriber gets no updates", n)
		}
		if lf.connects("a")+lf.connects("c") != 0 {
			t.Fatal("servers nobody subscribed to were started")
		}
	})
}

// While a per-session server's subscribed session has no instance (a
// restart took it out of service and the session has not come back), its
// subscription stays its own: the shared instance, which only learns the
// lists, is neither told it nor kept awake by it.
func TestSubscriptionsStayWithTheirSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"p":{"command":"p","sharing":"per-session","idleTimeout":"0"}`)
		p := lf.f.Get("p")
		held, err := p.Acquire(t.Context(), "A")
		if err != nil {
			t.Fatal(err)
		}
		p.subscribe("A", "file:///x")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := p.Restart(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("restart: %v, want its deadline (the drain waits for A's call)", err)
		}
		if in := p.instanceOf("A"); in != nil {
			t.Fatal("A has an instance again before its drain ended")
		}
		if p.pinned("") {
			t.Fatal("the shared instance counts session A's subscription as its own")
		}
		if uris, _ := p.replay(""); len(uris) != 0 {
			t.Fatalf("the shared instance would be told %v", uris)
		}
		held.Release()
	})
}

// A process taken out of service (a removed server draining a call, an
// operator stop, or a restart) that exits during its drain is not started
// again by its restart policy: nothing would use it. That holds too when
// a settings-only reload racing the restart applies the server's restart
// policy to the old instance it had in its snapshot of the instances.
func TestRetiredInstanceIsNotRespawned(t *testing.T) {
	for _, how := range []string{"removed", "stopped", "restarted, then settings applied"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lf := newLaunchFleet(t, `"b":{"command":"b","idleTimeout":"0","restart":{"policy":"always","backoff":{"initial":"1s","max":"1s","jitter":0}}}`)
				b := lf.f.Get("b")
				held, err := b.Acquire(t.Context(), "")
				if err != nil {
					t.Fatal(err)
				}
				old, _ := held.in.current().(*fakeLive)
				done := make(chan struct{})
				go func() {
					defer close(done)
					switch how {
					case "removed":
						_, _ = lf.f.Reload(context.Background(), parseCfg(t, ``), false, nil)
					case "stopped":
						_, _ = b.Stop(context.Background())
					default:
						_, _ = b.Restart(context.Background())
					}
				}()
				synctest.Wait() // draining: the call holds the old process
				if !held.in.isRetired() {
					t.Fatal("the instance was not taken out of service")
				}
				if how == "restarted, then settings applied" {
					held.in.applySettings(b.Config()) // what the racing reload does with its snapshot
				}
				old.crash()
				time.Sleep(10 * time.Second)
				synctest.Wait()
				if n := lf.connects("b"); n != 1 {
					t.Fatalf("%d connects of b: its draining process was restarted", n)
				}
				held.Release()
				<-done
			})
		})
	}
}

// Close ends a reload's drain at once: the removed server's process is
// stopped, the reload returns, and the applied hook's Removed channel is
// closed (what waits on it — the server's endpoint — is let go).
func TestCloseEndsAReloadsDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"b":{"command":"b","idleTimeout":"0"}`)
		held, err := lf.f.Get("b").Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		gone := make(chan (<-chan struct{}), 1)
		reloaded := make(chan ReloadResult, 1)
		go func() {
			res, _ := lf.f.Reload(context.Background(), parseCfg(t, ``), false, func(a Applied) { gone <- a.Removed["b"] })
			reloaded <- res
		}()
		synctest.Wait()
		removed := <-gone
		if err := lf.f.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case <-removed:
		default:
			t.Fatal("Close ended the drain but Applied.Removed is still open")
		}
		select {
		case res := <-reloaded:
			if d := res.Servers[0].Drained; d == nil || d.Cut != 1 {
				t.Fatalf("drained = %+v, want the one instance cut", d)
			}
		default:
			t.Fatal("the reload still waits for a drain Close ended")
		}
	})
}

// An operator stop that arrives once the fleet is closing does not wait
// for the calls its instances hold: they are stopped at once.
func TestStopDuringCloseDoesNotDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"b":{"command":"b","idleTimeout":"0"}`)
		b := lf.f.Get("b")
		held, err := b.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		old := held.in.current()
		lf.f.stopBackground() // Close's first step: nothing is spawned any more
		t0 := time.Now()
		d, err := b.Stop(context.Background())
		if err != nil || time.Since(t0) > time.Second || d.Cut != 1 {
			t.Fatalf("stop on a closing fleet: %+v, %v after %v", d, err, time.Since(t0))
		}
		synctest.Wait() // the kill's effect
		if old.Alive() {
			t.Fatal("the process outlived a stop on a closing fleet")
		}
	})
}

// An instance a restart took out of service shows while it finishes its
// calls: listed as draining with its calls in flight, and counted in the
// server's status, until its drain ends.
func TestDrainingInstancesAreShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"b":{"command":"b","idleTimeout":"0"}`)
		b := lf.f.Get("b")
		held, err := b.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = b.Restart(context.Background())
		}()
		synctest.Wait() // the old instance drains the call
		ins := b.Detail().Instances
		if len(ins) != 2 || ins[0].State == "draining" || ins[1].State != "draining" || ins[1].InFlight != 1 || !ins[1].Shared {
			t.Fatalf("instances while the restart drains: %+v", ins)
		}
		if st := b.Status(); st.Draining != 1 {
			t.Fatalf("status while the restart drains: %+v", st)
		}
		held.Release()
		<-done
		synctest.Wait()
		if ins := b.Detail().Instances; len(ins) != 1 || ins[0].State != "running" {
			t.Fatalf("instances after the drain: %+v", ins)
		}
		if st := b.Status(); st.Draining != 0 {
			t.Fatalf("status after the drain: %+v", st)
		}
	})
}
