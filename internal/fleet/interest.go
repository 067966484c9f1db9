package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"sort"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// interest is what one client session asked of a server that the server
// itself must be told again after it restarts or wakes: the resources it
// subscribed to and the log level it set. The fleet keeps it per (server,
// session) and replays it to every new process of an instance before the
// instance serves.
type interest struct {
	subs  map[string]bool
	level string
}

// logLevels are the MCP log levels, most verbose first.
var logLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// LogSeverity ranks an MCP log level (debug 0 … emergency 7); -1 if it is
// not one.
func LogSeverity(level string) int {
	for i, l := range logLevels {
		if l == level {
			return i
		}
	}
	return -1
}

func (s *Server) interestLocked(session string) *interest {
	if s.interests == nil {
		s.interests = map[string]*interest{}
	}
	it := s.interests[session]
	if it == nil {
		it = &interest{subs: map[string]bool{}}
		s.interests[session] = it
	}
	return it
}

// Subscribe records that session subscribed to uri on this server (call it
// before the subscribe request is sent, and Unsubscribe if the server
// refuses it): the subscription is replayed to every new process, and while
// any session of an instance is subscribed the instance does not go
// dormant — a sleeping server cannot send the updates its subscribers wait
// for.
func (s *Server) Subscribe(session, uri string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endedLocked(session) {
		return // a late request of an ended session records nothing
	}
	s.interestLocked(session).subs[uri] = true
	s.igen++
}

// Unsubscribe forgets a subscription Subscribe recorded.
func (s *Server) Unsubscribe(session, uri string) {
	s.mu.Lock()
	if it := s.interests[session]; it != nil {
		delete(it.subs, uri)
		if len(it.subs) == 0 && it.level == "" {
			delete(s.interests, session)
		}
	}
	s.igen++
	s.mu.Unlock()
}

// SetLogLevel records the log level session set on this server ("" forgets
// it); it is replayed to every new process.
func (s *Server) SetLogLevel(session, level string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endedLocked(session) {
		return
	}
	s.interestLocked(session).level = level
	s.igen++
}

// endedLocked reports whether session has ended; s.mu is held. Asked under
// the lock that writes an interest, the answer holds until the write:
// Fleet.EndSession marks the session ended before it takes s.mu to forget
// the session's interests, so an interest is either written before that
// and forgotten with the rest, or not written at all.
func (s *Server) endedLocked(session string) bool { return s.f.sessionEnded(session) }

// interestGen counts the changes of what sessions asked of the server.
func (s *Server) interestGen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.igen
}

// Subscribers lists the sessions subscribed to uri on this server, sorted.
func (s *Server) Subscribers(uri string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for sess, it := range s.interests {
		if it.subs[uri] {
			out = append(out, sess)
		}
	}
	sort.Strings(out)
	return out
}

// LogLevels maps each session that set a log level on this server to that
// level.
func (s *Server) LogLevels() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for sess, it := range s.interests {
		if it.level != "" {
			out[sess] = it.level
		}
	}
	return out
}

// pinned reports whether a session of the instance keyed key ("" for the
// shared one) holds a subscription on this server.
func (s *Server) pinned(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sess, it := range s.interests {
		if len(it.subs) > 0 && s.servesLocked(key, sess) {
			return true
		}
	}
	return false
}

// servesLocked reports whether the instance keyed key ("" for the shared
// one) is the one that serves session: a per-session server's sessions
// each have their own — whether it runs now or not: one a restart took out
// of service is made again for the session — and only a request with no
// session goes to its shared instance; a shared server's sessions all
// share it.
func (s *Server) servesLocked(key, session string) bool {
	if s.PerSession() {
		return session == key
	}
	return key == ""
}

// replay is what a new process of the instance keyed key must be told:
// the union of its sessions' subscriptions and the most verbose level any
// of them set.
func (s *Server) replay(key string) (uris []string, level string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := map[string]bool{}
	best := -1
	for sess, it := range s.interests {
		if !s.servesLocked(key, sess) {
			continue
		}
		for u := range it.subs {
			set[u] = true
		}
		if r := LogSeverity(it.level); r >= 0 && (best < 0 || r < best) {
			best = r
		}
	}
	for u := range set {
		uris = append(uris, u)
	}
	sort.Strings(uris)
	if best >= 0 {
		level = logLevels[best]
	}
	return uris, level
}

// InstanceSubscriptions lists the resources subscribed to on the instance
// that serves session (its own per-session instance, else the shared
// one), by any of its sessions, sorted.
func (s *Server) InstanceSubscriptions(session string) []string {
	key := ""
	if s.PerSession() {
		key = session
	}
	uris, _ := s.replay(key)
	return uris
}

// SyncSubscriptions tells rs — the connection of the instance serving
// session, to a modern server — the resources that instance's sessions
// subscribe to now. Calls are serialized, each reading the set under the
// same lock it is told under, so that what the server is told last is
// the current set (two changes at once cannot leave the older one).
func (s *Server) SyncSubscriptions(rs ResourceSubscriber, session string) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	rs.SetResourceSubscriptions(s.InstanceSubscriptions(session))
}

// ResourceSubscriber is a connection that takes a modern server's resource
// subscriptions as one set (such a server has no resources/subscribe: they
// go in mcpvisor's subscriptions/listen). Modern reports whether the
// server is one.
type ResourceSubscriber interface {
	Modern() bool
	SetResourceSubscriptions(uris []string)
}

// replayTo tells a new connection what its instance's sessions asked of the
// server before it restarted or slept. It runs before the connection
// serves any request, within the connect's context (the init timeout, and
// a Stop cancels it). What the sessions ask meanwhile (a subscribe or a log
// level set during the start) is told too: it repeats until nothing
// changed while it ran, at most a few times.
func (in *instance) replayTo(ctx context.Context, c Conn) {
	for range 3 {
		gen := in.srv.interestGen()
		in.replayOnce(ctx, c)
		in.do(func(st *instState, _ *effects) { st.replayed = gen })
		if in.srv.interestGen() == gen || ctx.Err() != nil {
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

func (in *instance) replayOnce(ctx context.Context, c Conn) {
	if rs, ok := c.(ResourceSubscriber); ok && rs.Modern() {
		// A modern server: the subscriptions go in its listen, and the
		// log level in each request's _meta.
		in.srv.SyncSubscriptions(rs, in.key)
		return
	}
	uris, level := in.srv.replay(in.key)
	if len(uris) == 0 && level == "" {
		return
	}
	log := in.srv.f.log.With("server", in.srv.Name())
	if level != "" && c.Init().Has("logging") {
		params, _ := json.Marshal(map[string]string{"level": level})
		if resp, err := c.Call(ctx, "logging/setLevel", params); err != nil || resp.Error != nil {
			log.Warn("could not restore the log level after a restart", "level", level, "err", callErr(resp, err))
		}
	}
	for _, u := range uris {
		if ctx.Err() != nil {
			return
		}
		params, _ := json.Marshal(map[string]string{"uri": u})
		if resp, err := c.Call(ctx, "resources/subscribe", params); err != nil || resp.Error != nil {
			log.Warn("could not restore a resource subscription after a restart", "uri", u, "err", callErr(resp, err))
		}
	}
}

func callErr(resp *rpc.Message, err error) error {
	if err != nil {
		return err
	}
	return errors.New(resp.Error.Message)
}

// EffectiveLogLevel is the level to set on the instance that serves
// session: the most verbose level any session of that instance set ("" if
// none did).
func (s *Server) EffectiveLogLevel(session string) string {
	key := ""
	if s.PerSession() {
		key = session
	}
	_, level := s.replay(key)
	return level
}
