package fleet

import (
	"context"
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
)

// Server is one configured server and its instances.
type Server struct {
	cfg *config.Server
	f   *Fleet

	shared *instance

	mu         sync.Mutex
	perSession map[string]*instance
}

// Name is the configured name.
func (s *Server) Name() string { return s.cfg.Name }

// Config is the server's resolved configuration.
func (s *Server) Config() *config.Server { return s.cfg }

// PerSession reports whether each client session gets its own process.
func (s *Server) PerSession() bool { return s.cfg.Sharing == config.SharingPerSession }

func (s *Server) instance(session string) *instance {
	if !s.PerSession() || session == "" {
		return s.shared
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.perSession[session]
	if in == nil {
		in = s.newInstance(session)
		if s.perSession == nil {
			s.perSession = map[string]*instance{}
		}
		s.perSession[session] = in
	}
	return in
}

func (s *Server) instances() []*instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*instance{s.shared}
	for _, in := range s.perSession {
		out = append(out, in)
	}
	return out
}

// Begin marks a request of session as in flight (and as activity); End
// marks it done. Between the two the server never goes dormant. Every
// Begin must be followed by exactly one End with the same session.
func (s *Server) Begin(session string) { s.instance(session).begin() }

// End ends what Begin began.
func (s *Server) End(session string) { s.instance(session).end() }

// Touch records activity that is not a request (a notification in either
// direction) on the instance conn belongs to.
func (s *Server) Touch(conn *backend.Conn) {
	for _, in := range s.instances() {
		if in.owns(conn) {
			in.touch()
			return
		}
	}
}

// Conn returns a live connection for session (ignored unless the server is
// per-session), starting or respawning the process if needed: concurrent
// callers share one spawn and its outcome. ctx bounds the wait, not the
// spawn.
func (s *Server) Conn(ctx context.Context, session string) (*backend.Conn, error) {
	l, err := s.instance(session).acquire(ctx)
	if err != nil {
		return nil, err
	}
	c, _ := l.(*backend.Conn)
	return c, nil
}

// Current returns the shared instance's live connection, or nil when it is
// not running. It never starts anything.
func (s *Server) Current() *backend.Conn {
	c, _ := s.shared.current().(*backend.Conn)
	return c
}

// Running lists the live connections of every instance.
func (s *Server) Running() []*backend.Conn {
	var out []*backend.Conn
	for _, in := range s.instances() {
		if c, ok := in.current().(*backend.Conn); ok && c != nil {
			out = append(out, c)
		}
	}
	return out
}

// EndSession closes the instance a per-session server ran for session.
func (s *Server) EndSession(ctx context.Context, session string) {
	if !s.PerSession() {
		return
	}
	s.mu.Lock()
	in := s.perSession[session]
	delete(s.perSession, session)
	s.mu.Unlock()
	if in != nil {
		_ = in.close(ctx)
	}
}

// Stop stops the shared instance (it starts again on the next request).
func (s *Server) Stop(ctx context.Context) error { return s.shared.close(ctx) }

// Status describes the server (its shared instance, and how many
// per-session instances run).
func (s *Server) Status() Status {
	st := s.shared.status()
	st.Name = s.Name()
	s.mu.Lock()
	st.Sessions = len(s.perSession)
	s.mu.Unlock()
	return st
}

// PIDs lists the process of every running instance of the server, shared
// and per-session (remote servers have none).
func (s *Server) PIDs() []int {
	var out []int
	for _, in := range s.instances() {
		in.mu.Lock()
		pid := pidOf(in.conn)
		in.mu.Unlock()
		if pid != 0 {
			out = append(out, pid)
		}
	}
	return out
}

// Requests counts the requests ever begun on the shared instance.
func (s *Server) Requests() int64 {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	return s.shared.requests
}

// Rest puts the shared instance to sleep at once if it is running, has
// nothing in flight and no request began since Requests returned requests:
// a server started only to learn its lists goes back to sleep.
func (s *Server) Rest(requests int64) bool { return s.shared.rest(requests) }
