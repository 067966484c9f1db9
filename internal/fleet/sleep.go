package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Sleep is the operator's "sleep now": the server's running shared
// instance goes dormant at once, as it would after its idle timeout — its
// process tree stopped, its lists kept, the next request starting it again
// — whatever its idle timeout and spawn grace period (idleTimeout 0
// included). It returns once the process is stopped, or when ctx ends
// first (the stop goes on, within the server's stop bound).
//
// Sleep refuses, changing nothing, a server that is not running and ready
// (ErrNotRunning, its state named; a per-session server, whose instances
// each sleep on their own when idle, is refused so too), one with requests
// in flight or a resource subscription (ErrBusy: a call is never cut), and
// one the operator stopped or a reload removed (the error wraps ErrStopped
// or ErrRemoved). A server already going dormant is waited for, and so is
// mcpvisor's own work on it (a list refresh, a relayed notification),
// which a sleep would cut: ctx bounds that wait too, and a Sleep that
// gives up in it changes nothing.
func (s *Server) Sleep(ctx context.Context) error {
	for {
		done, quiet, err := s.sleepNow()
		if err != nil {
			return err
		}
		if quiet != nil {
			select {
			case <-quiet:
				continue // look again: a request may have come meanwhile
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// sleepNow starts Sleep's dormant stop, under the operator lock (a Stop,
// Restart or reload is either before it or after it), and returns the
// channel closed when the stop is done; or, when only mcpvisor's own
// leases are in flight, starts nothing and returns the channel closed
// when they are all released.
func (s *Server) sleepNow() (done, quiet <-chan struct{}, err error) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := s.refused(); err != nil {
		return nil, nil, err
	}
	name := s.Name()
	if s.Private() {
		each := "client session"
		if s.PerIdentity() {
			each = "identity"
		}
		return nil, nil, fmt.Errorf("server %s is %w as one process: it runs one per %s, each put to sleep when idle (restart or stop it instead)", name, ErrNotRunning, each)
	}
	in := s.sharedIn()
	if s.subscribed(in.key) {
		return nil, nil, fmt.Errorf("server %s is %w: a client subscribed to its resources, whose updates only a running server can send", name, ErrBusy)
	}
	if s.working(in.key) {
		return nil, nil, fmt.Errorf("server %s is %w: it works on a task a client follows, which a sleep would end (stop or restart it to end the task)", name, ErrBusy)
	}
	notRunning := false
	fx := in.update(func(st *instState) (fx effects) {
		if st.phase == phaseSleeping {
			done = st.sleepDone
			return
		}
		if l := in.liveLocked(); st.phase != phaseRunning || l == nil || !l.Alive() || in.runStateLocked().State != lifecycle.StateReady {
			notRunning = true
			return
		}
		if n := st.inflight - st.own; n > 0 {
			err = fmt.Errorf("server %s is %w: %d request(s) in flight (it sleeps on its own once idle; a stop lets them finish first)", name, ErrBusy, n)
			return
		}
		if st.own > 0 {
			quiet = drainedLocked(st)
			return
		}
		done = in.sleepLocked(st, &fx, time.Now(), "operator", nil)
		return
	})
	in.apply(fx)
	if notRunning {
		err = fmt.Errorf("server %s is %s, %w: there is no process to put to sleep", name, s.Status().State, ErrNotRunning)
	}
	return done, quiet, err
}
