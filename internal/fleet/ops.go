package fleet

import (
	"context"
	"errors"
	"fmt"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"sync"
	"time"
)

// refused is the error a request gets instead of an instance, or nil.
func (s *Server) refused() error {
	if p := s.refusal.Load(); p != nil {
		return *p
	}
	return nil
}

// Removed reports whether a reload removed the server: it serves nothing
// more, for good (a server added again under its name is another).
func (s *Server) Removed() bool { return errors.Is(s.refused(), ErrRemoved) }

// setRefusal makes every request refused with err (nil: served again).
func (s *Server) setRefusal(err error) {
	if err == nil {
		s.refusal.Store(nil)
		return
	}
	s.refusal.Store(&err)
}

// drainBound is how long the calls a retired instance holds may take to
// finish before it is stopped under them: the server's request timeout,
// or a minute when it has none. That is the longest a call may keep its
// server working alone; one that waits on its client meanwhile (sampling,
// elicitation: the request timeout restarts when the client answers) or
// that a modern client's retry holds may take longer, and is cut at the
// bound — the drain reports it (Drained.Cut).
func (s *Server) drainBound() time.Duration {
	if d := s.Config().RequestTimeout; d > 0 {
		return d
	}
	return time.Minute
}

// Drained is what taking a server's instances out of service did.
type Drained struct {
	// Stopped counts the instances stopped (running or not).
	Stopped int `json:"stopped"`
	// Cut counts the instances stopped with calls still in flight, once
	// the drain bound had passed.
	Cut int `json:"cut,omitempty"`
	// Error joins what went wrong stopping them.
	Error string `json:"error,omitempty"`
	// Pending is set when the caller stopped waiting (its context ended)
	// before the drain did: the drain goes on, within its bound.
	Pending bool `json:"pending,omitempty"`
}

// revive puts a startable shared instance in service in place of one
// takeOut left retired (the server was refusing then).
func (s *Server) revive() {
	if in := s.sharedIn(); in.isRetired() {
		fresh := s.newInstance("")
		if s.shared.CompareAndSwap(in, fresh) {
			fresh.inherit(in)
		}
	}
}

// retired is what takeOut took out of service, for stopOut.
type retired struct {
	in      *instance
	drained <-chan struct{}
	place   bool   // a per-session instance: its place under maxInstances is freed when stopped
	reason  string // for its stopped event
}

// takeOut takes every instance of the server out of service at once — the
// shared one replaced by a fresh instance built from the server's current
// configuration, the per-session ones forgotten (a session's next request
// gets a fresh one, and what it asked of the server is told to it again)
// — and returns them for stopOut. Requests from then on go to the fresh
// instances, or, when the server refuses (set its refusal first), are
// refused: its fresh shared instance is then retired from the start, so
// nothing can start it until revive.
func (s *Server) takeOut(reason string) []retired {
	// The operator stepped in, or the launch changed: a crash loop starts
	// over.
	if k := s.streak.Load(); k != nil {
		k.Reset()
	}
	fresh := s.newInstance("")
	if s.refused() != nil {
		fresh.retire()
	}
	// Out of service and draining in one step under the fleet's drain
	// lock: Close, which takes the servers' instances and then the
	// draining ones, finds each instance in one or the other.
	f := s.f
	f.drainMu.Lock()
	prev := s.shared.Swap(fresh)
	out := []retired{{in: prev, reason: reason}}
	s.mu.Lock()
	for _, in := range s.perSession {
		s.stopping++ // until stopped, as for an ended session
		out = append(out, retired{in: in, place: true, reason: reason})
	}
	s.perSession = nil
	s.mu.Unlock()
	if f.draining == nil {
		f.draining = map[*instance]struct{}{}
	}
	for _, r := range out {
		f.draining[r.in] = struct{}{}
	}
	f.drainMu.Unlock()
	fresh.inherit(prev)
	for i := range out {
		out[i].drained = out[i].in.retire()
	}
	return out
}

// stopOut lets each instance takeOut returned finish the calls it holds,
// within the server's drain bound and ctx, and stops it; it returns once
// every one is stopped (or ctx ended: the rest are stopped at once).
func (s *Server) stopOut(ctx context.Context, old []retired) Drained {
	bound := s.drainBound()
	var mu sync.Mutex
	var out Drained
	var errs []error
	var wg sync.WaitGroup
	for _, r := range old {
		wg.Go(func() {
			t := time.NewTimer(bound)
			defer t.Stop()
			cut := false
			select {
			case <-r.drained:
			case <-t.C:
				cut = true
			case <-ctx.Done():
				cut = true
			}
			err := r.in.closeFor(ctx, r.reason)
			s.f.drainingDone(r.in)
			if r.place {
				s.freePlace()
			}
			mu.Lock()
			defer mu.Unlock()
			out.Stopped++
			if cut {
				out.Cut++
			}
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		out.Error = errors.Join(errs...).Error()
	}
	return out
}

// drainAsync drains and stops old (stopOut) on a fleet goroutine, bounded
// by the server's drain bound alone — not by whoever asked for it: a
// caller that stops waiting does not cut the calls in flight — and by
// Close, which stops them at once. The returned channel yields how it went
// (it is buffered: nobody need read it); then, if set, after runs, always,
// with the fleet's context (ended if the fleet is closing). A closing
// fleet stops old at once.
func (s *Server) drainAsync(old []retired, after func(context.Context, Drained)) <-chan Drained {
	out := make(chan Drained, 1)
	run := func(ctx context.Context) {
		d := s.stopOut(ctx, old)
		out <- d
		if after != nil {
			after(ctx, d)
		}
	}
	if !s.f.spawn(run) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		run(ctx)
	}
	return out
}

// awaitDrain waits for a drain drainAsync runs, within ctx; when ctx ends
// first, the drain is reported pending.
func awaitDrain(ctx context.Context, ch <-chan Drained) (Drained, error) {
	select {
	case d := <-ch:
		return d, nil
	case <-ctx.Done():
		return Drained{Pending: true}, ctx.Err()
	}
}

// resumeSubscribed starts again, after takeOut, each instance a session's
// resource subscription needs running — a server asleep or not started
// cannot send the updates its subscribers wait for: the shared instance
// when one of its sessions subscribed, and the per-session instance of
// each subscribed session that had one (old). It returns once they are
// started or failed, within ctx.
func (s *Server) resumeSubscribed(ctx context.Context, old []retired) {
	var keys []string
	if !s.Private() && s.subscribed("") {
		keys = append(keys, "")
	}
	for _, r := range old {
		if r.in.key != "" && s.Config().PerSession() && s.subscribed(r.in.key) {
			keys = append(keys, r.in.key)
		}
	}
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Go(func() {
			ctx, cancel := WithTimeout(ctx, StartWait(s.Config().InitTimeout))
			defer cancel()
			l, err := s.Acquire(ctx, key)
			if err != nil {
				if ctx.Err() == nil && s.refused() == nil {
					s.f.log.Warn("could not start the server again for its subscribers", "server", s.Name(), "err", err)
				}
				return
			}
			l.Release()
		})
	}
	wg.Wait()
}

// inherit carries the server's counts from the shared instance in
// replaced to in, its successor.
func (in *instance) inherit(replaced *instance) {
	var spawns int32
	replaced.view(func(st *instState) { spawns = st.spawns })
	in.do(func(st *instState) (_ effects) { st.spawns += spawns; return }) // the server's count, not the instance's
}

// freePlace counts one stopping per-session instance as gone, and lets a
// session waiting for a place under the instance limit take it.
func (s *Server) freePlace() {
	s.mu.Lock()
	s.stopping--
	if s.freed != nil {
		close(s.freed)
		s.freed = nil
	}
	s.mu.Unlock()
}

// Stop is the operator's stop: from its call on, every request to the
// server is refused with an error wrapping ErrStopped — unlike a dormant
// server, it is not started again on demand — until Start. Its instances
// finish the calls they hold, within the server's drain bound (its request
// timeout), and are stopped. It returns once they are, or when ctx ends
// (the drain goes on: Drained.Pending).
//
// Stop, Start, Restart and a reload hold the server's operator lock only
// while they change its state, never across a drain or a start: none
// waits for another's.
func (s *Server) Stop(ctx context.Context) (Drained, error) {
	s.opMu.Lock()
	if err := s.refused(); errors.Is(err, ErrRemoved) {
		s.opMu.Unlock()
		return Drained{}, err
	}
	s.setRefusal(fmt.Errorf("server %s is %w (mcpvisor start %s)", s.Name(), ErrStopped, s.Name()))
	old := s.takeOut("stopped by the operator")
	s.opMu.Unlock()
	return awaitDrain(ctx, s.drainAsync(old, func(_ context.Context, d Drained) {
		s.f.emit(NewEvent(s.Name(), "", event.OperatorStopDetails{Drain: d.drain()}))
	}))
}

// Start is the operator's start: a server Stop stopped is served again,
// and its shared instance (a per-session server has none for clients) is
// started now; it returns once that instance is ready, its start failed,
// or ctx ended. Starting a running server changes nothing.
func (s *Server) Start(ctx context.Context) error {
	s.opMu.Lock()
	err := s.unstopLocked()
	s.opMu.Unlock()
	if err != nil {
		return err
	}
	if err := s.startNow(ctx); err != nil {
		return err
	}
	s.catchUpRelaunch()
	return nil
}

// catchUpRelaunch learns the lists of a server a reload relaunched whose
// relearn was skipped because the operator had it stopped when the
// relaunch's drain ended: the lists held are the old launch's, and
// nothing else looks again (a start does not while a relaunch is pending).
func (s *Server) catchUpRelaunch() {
	if s.refused() == nil && s.cat.RelaunchPending() {
		s.requestRefresh(allKinds...)
	}
}

// unstopLocked serves the server again if the operator stopped it — a
// startable shared instance in place first, so that a request arriving
// as the refusal is lifted finds one — and says why not if a reload
// removed it. opMu is held.
func (s *Server) unstopLocked() error {
	if err := s.refused(); err != nil && !errors.Is(err, ErrStopped) {
		return err
	}
	s.revive()
	s.setRefusal(nil)
	return nil
}

// startNow starts the shared instance if it is not running, and waits
// for it within ctx.
func (s *Server) startNow(ctx context.Context) error {
	if s.Private() { // its shared instance serves nobody: it starts to learn the lists, on demand
		return nil
	}
	l, err := s.Acquire(ctx, "")
	if err != nil {
		return err
	}
	l.Release()
	return nil
}

// Restart drains and stops every instance of the server (as Stop does,
// within its drain bound), then starts its shared instance again, and the
// per-session instances of sessions subscribed to its resources, and waits
// for them to be ready, within ctx. Requests arriving meanwhile are not
// refused: they go to the new instances (started at once by the first of
// them, while the old ones drain) — for a per-session server at its
// maxInstances, once a draining instance has stopped and freed its place,
// as after a session's end. A stopped server is started.
func (s *Server) Restart(ctx context.Context) (Drained, error) {
	s.opMu.Lock()
	if err := s.unstopLocked(); err != nil {
		s.opMu.Unlock()
		return Drained{}, err
	}
	old := s.takeOut("restarted by the operator")
	s.opMu.Unlock()
	d, err := awaitDrain(ctx, s.drainAsync(old, func(_ context.Context, d Drained) {
		s.f.emit(NewEvent(s.Name(), "", event.OperatorRestartDetails{Drain: d.drain()}))
	}))
	if err != nil {
		return d, err
	}
	if err := s.startNow(ctx); err != nil {
		return d, err
	}
	s.catchUpRelaunch()
	s.resumeSubscribed(ctx, old)
	return d, ctx.Err()
}

func (d Drained) drain() event.Drain {
	return event.Drain{Instances: d.Stopped, Cut: d.Cut, Error: d.Error}
}
