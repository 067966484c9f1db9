package fleet

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// A start the supervisor refuses because the server went into a crash
// loop after the request's own check (another instance's failures, on
// the record the server's instances share) started nothing: the request
// gets the crash loop's error, and nothing is counted or reported as a
// spawn, a wake or a start.
func TestRefusedStartIsNoStart(t *testing.T) {
	for _, dormant := range []bool{false, true} {
		name := map[bool]string{false: "first start", true: "wake"}[dormant]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ff := newFakeFleet(t, `,"idleTimeout":"5s","startGrace":"0s"`)
				defer ff.close(t)
				s := ff.f.Get("s")
				if dormant {
					if _, err := use(s.Acquire(t.Context(), "")); err != nil {
						t.Fatal(err)
					}
					time.Sleep(6 * time.Second) // idle, then dormant
					synctest.Wait()
					if st := s.Status().State; st != "dormant" {
						t.Fatalf("state %q, want dormant", st)
					}
				}
				spawns, wakes, connects := s.Telemetry().Spawns().Count, s.Telemetry().Wakes().Count, ff.connects.Load()
				events := len(ff.eventsOf())

				ff.f.seams.beforeSupervisorStart = func(srv *Server) {
					// Two failures in a row, the next attempt a minute
					// away: a crash loop, recorded after acquire looked.
					for range 2 {
						srv.streakOf().Fail(errors.New("exit status 1"), func(int) time.Duration { return time.Minute })
					}
				}
				defer func() { ff.f.seams.beforeSupervisorStart = nil }()

				_, err := use(s.Acquire(t.Context(), ""))
				if !errors.Is(err, lifecycle.ErrCrashLoop) {
					t.Fatalf("Acquire: %v, want the crash loop's error", err)
				}
				synctest.Wait()
				if n := s.Telemetry().Spawns().Count; n != spawns {
					t.Errorf("spawns %d → %d for a start that started nothing", spawns, n)
				}
				if n := s.Telemetry().Wakes().Count; n != wakes {
					t.Errorf("wakes %d → %d for a start that started nothing", wakes, n)
				}
				if n := ff.connects.Load(); n != connects {
					t.Errorf("connects %d → %d", connects, n)
				}
				for _, e := range ff.eventsOf()[events:] {
					if e.Type == "started" || e.Type == "respawned" {
						t.Errorf("a refused start reported %q: %+v", e.Type, e)
					}
				}
				// Nothing changed: a server never started is failed (its
				// requests get the loop's error), a dormant one stays so.
				if st, want := s.Status().State, map[bool]string{false: "failed", true: "dormant"}[dormant]; st != want {
					t.Errorf("state %q after a refused %s, want %q", st, name, want)
				}
			})
		})
	}
}

// eventsOf is a copy of the events reported so far.
func (ff *fakeFleet) eventsOf() []Event {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	return append([]Event(nil), ff.events...)
}
