package fleet

import (
	"context"

	"github.com/mcpvisor/mcpvisor/internal/interest"
)

// Interest is what client sessions asked of the servers that a new
// process must be told before it serves — resource subscriptions, a log
// level — and that keeps an instance awake (a subscription). The gateway
// records it (an *interest.Book); the fleet only reads it through these.
// An instance is named by its server and its key ("" for the shared one).
type Interest interface {
	// Replay tells c, a new connection of the instance, what its
	// sessions asked, within ctx, and returns the generation (Gen) of
	// what it told, read with it: while Gen is still that, c was told
	// the current state (replayTo and catchUp rely on it).
	Replay(ctx context.Context, s interest.Server, key string, c interest.Conn) uint64
	// Gen counts the changes of what sessions asked of s.
	Gen(s interest.Server) uint64
	// Pinned reports whether a session of the instance holds a
	// resource subscription: it must not go dormant.
	Pinned(s interest.Server, key string) bool
	// Sync tells rs, the connection of the instance to a modern server,
	// the resources its sessions subscribe to now, as one set.
	Sync(rs interest.ResourceSubscriber, s interest.Server, key string)
	// End forgets what session asked, records nothing it asks
	// afterwards, and returns the servers it had asked something of.
	End(session string) []interest.Server
}

// TaskHolder is implemented by an Options.Hooks that knows of tasks
// (long-running calls a client follows after their request ended) that
// the servers' processes are working on: an instance working on one must
// not go dormant, which would end it. When what kept an instance awake
// goes away, the holder calls Server.Rearm.
type TaskHolder interface {
	Working(s *Server, key string) bool
}

// subscribed reports whether a session of the instance keyed key ("" for
// the shared one) holds a subscription on this server (never without
// Options.Interest).
func (s *Server) subscribed(key string) bool {
	it := s.f.opts.Interest
	return it != nil && it.Pinned(s, key)
}

// working reports whether the instance keyed key works on a task a
// client follows (Options.Hooks, a TaskHolder).
func (s *Server) working(key string) bool {
	th, ok := s.f.opts.Hooks.(TaskHolder)
	return ok && th.Working(s, key)
}

// pinned reports whether the instance keyed key must stay awake: a
// session subscribed to its resources, or it works on a task.
func (s *Server) pinned(key string) bool { return s.subscribed(key) || s.working(key) }

// Rearm tells the instance of session ("" for the shared one), if it
// runs, that something that kept it awake went away: its idle timer runs
// again. It starts nothing.
func (s *Server) Rearm(session string) {
	if in := s.instanceOf(session); in != nil {
		in.rearm()
	}
}

// interestGen counts the changes of what sessions asked of the server (0
// without Options.Interest).
func (s *Server) interestGen() uint64 {
	if it := s.f.opts.Interest; it != nil {
		return it.Gen(s)
	}
	return 0
}

// replayTo tells a new connection what its instance's sessions asked of the
// server before it restarted or slept. It runs before the connection
// serves any request, within the connect's context (the init timeout, and
// a Stop cancels it). What the sessions ask meanwhile (a subscribe or a log
// level set during the start) is told too: it repeats until nothing
// changed while it ran, at most a few times.
func (in *instance) replayTo(ctx context.Context, c Conn) {
	it := in.srv.f.opts.Interest
	if it == nil {
		return
	}
	for range 3 {
		gen := it.Replay(ctx, in.srv, in.key, c)
		in.do(func(st *instState) (_ effects) { st.replayed = gen; return })
		if it.Gen(in.srv) == gen || ctx.Err() != nil {
			return
		}
	}
}

// catchUp replays again, under a lease, if what the sessions asked changed
// since the last replay: a change made between the replay and the moment
// the instance serves (when a request could not reach it yet) is not lost.
// It is bounded by the init timeout (none if 0) and by ctx, the fleet's.
func (in *instance) catchUp(ctx context.Context) {
	var replayed uint64
	in.view(func(st *instState) { replayed = st.replayed })
	if in.srv.interestGen() == replayed {
		return
	}
	l, ok := in.srv.Peek(in.key)
	if !ok || l.Conn() == nil {
		if ok {
			l.Release()
		}
		return
	}
	defer l.Release()
	ctx, cancel := WithTimeout(ctx, in.srv.Config().InitTimeout)
	defer cancel()
	in.replayTo(ctx, l.Conn())
}

// resync tells the shared instance's connection, if it runs and is to a
// modern server, the subscriptions its sessions hold now: such a server
// has them in mcpvisor's listen as one set, not one by one, and a session
// that ended takes its own out of it (what it asked is forgotten first,
// interest.Book.End).
func (s *Server) resync() {
	it := s.f.opts.Interest
	if it == nil {
		return
	}
	if rs, ok := s.sharedIn().current().(interest.ResourceSubscriber); ok && rs.Modern() {
		it.Sync(rs, s, "")
	}
}
