package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

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
	s.interestLocked(session).subs[uri] = true
	s.mu.Unlock()
}

// Unsubscribe forgets a subscription Subscribe recorded.
func (s *Server) Unsubscribe(session, uri string) {
	s.mu.Lock()
	if it := s.interests[session]; it != nil {
		delete(it.subs, uri)
	}
	s.mu.Unlock()
}

// SetLogLevel records the log level session set on this server ("" forgets
// it); it is replayed to every new process.
func (s *Server) SetLogLevel(session, level string) {
	s.mu.Lock()
	s.interestLocked(session).level = level
	s.mu.Unlock()
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
		mine := sess == key || (key == "" && s.perSessionOwnerLocked(sess) == nil)
		if len(it.subs) > 0 && mine {
			return true
		}
	}
	return false
}

// perSessionOwnerLocked is the per-session instance of session, if any.
func (s *Server) perSessionOwnerLocked(session string) *instance {
	if !s.PerSession() {
		return nil
	}
	return s.perSession[session]
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
		mine := sess == key || (key == "" && s.perSessionOwnerLocked(sess) == nil)
		if !mine {
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

// replayTo tells a new connection what its instance's sessions asked of the
// server before it restarted or slept. It runs before the connection
// serves any request, bounded by the server's init timeout.
func (in *instance) replayTo(c Conn) {
	uris, level := in.srv.replay(in.key)
	if len(uris) == 0 && level == "" {
		return
	}
	cfg := in.srv.cfg
	ctx, cancel := context.WithTimeout(context.Background(), cfg.InitTimeout+time.Second)
	defer cancel()
	log := in.srv.f.log.With("server", in.srv.Name())
	if level != "" && c.Init().Has("logging") {
		params, _ := json.Marshal(map[string]string{"level": level})
		if resp, err := c.Call(ctx, "logging/setLevel", params); err != nil || resp.Error != nil {
			log.Warn("could not restore the log level after a restart", "level", level, "err", callErr(resp, err))
		}
	}
	for _, u := range uris {
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
