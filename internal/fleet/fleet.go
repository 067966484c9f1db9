// Package fleet is the set of configured servers and their lifecycle: the
// only place that decides when a server starts and stops. Each server is
// driven by a lifecycle.Supervisor over a backend connector; callers get a
// live connection with Server.Conn, which starts the server on first use,
// once for any number of concurrent callers.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Options configure a Fleet.
type Options struct {
	Runtime *proc.Runtime
	Hooks   backend.Hooks
	Logger  *slog.Logger
	// OnReconnect is called after a server was restarted (its lists may
	// have changed).
	OnReconnect func(s *Server)
}

// Fleet holds one Server per enabled configured server.
type Fleet struct {
	opts    Options
	log     *slog.Logger
	servers []*Server // sorted by name
	byName  map[string]*Server
}

// New builds the fleet for cfg. Nothing is started.
func New(cfg *config.Config, opts Options) (*Fleet, error) {
	f := &Fleet{opts: opts, log: opts.Logger, byName: map[string]*Server{}}
	if f.log == nil {
		f.log = slog.Default()
	}
	for _, sc := range cfg.Servers {
		if sc.Disabled {
			continue
		}
		s, err := f.newServer(sc)
		if err != nil {
			return nil, err
		}
		f.servers = append(f.servers, s)
		f.byName[sc.Name] = s
	}
	sort.Slice(f.servers, func(i, j int) bool { return f.servers[i].Name() < f.servers[j].Name() })
	return f, nil
}

// Servers lists the enabled servers, sorted by name.
func (f *Fleet) Servers() []*Server { return f.servers }

// Get returns the named server, or nil.
func (f *Fleet) Get(name string) *Server { return f.byName[name] }

// Close stops every server in parallel under ctx.
func (f *Fleet) Close(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(f.servers))
	for i, s := range f.servers {
		wg.Go(func() { errs[i] = s.sup.Stop(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Server is one configured server.
type Server struct {
	cfg *config.Server
	f   *Fleet
	sup *lifecycle.Supervisor

	mu       sync.Mutex
	conn     *backend.Conn
	starting chan struct{} // closed when the start in progress ends
	startErr error
}

func (f *Fleet) newServer(sc *config.Server) (*Server, error) {
	s := &Server{cfg: sc, f: f}
	log := f.log.With("server", sc.Name)
	var conn lifecycle.Connector
	switch sc.Kind {
	case config.KindStdio:
		env := os.Environ()
		for k, v := range sc.Env {
			env = append(env, k+"="+v)
		}
		conn = &backend.StdioConnector{
			Name:    sc.Name,
			Runtime: f.opts.Runtime,
			Spec: proc.Spec{
				Command:   sc.Command,
				Args:      sc.Args,
				Env:       env,
				Dir:       sc.Cwd,
				StdinWait: stopWait(sc.StdinWait),
				TermWait:  stopWait(sc.TermWait),
			},
			Hooks:     f.opts.Hooks,
			Logger:    f.log,
			OnConnect: s.connected,
		}
	default:
		return nil, fmt.Errorf("server %s: %s servers are not supported yet", sc.Name, sc.Kind)
	}
	pol := sc.Policy()
	pol.Logger = log
	pol.OnDisconnect = func(err error) {
		s.mu.Lock()
		s.conn = nil
		s.mu.Unlock()
		if err != nil {
			log.Warn("server disconnected", "err", err)
		}
	}
	pol.OnRestart = func() {
		if f.opts.OnReconnect != nil {
			f.opts.OnReconnect(s)
		}
	}
	s.sup = lifecycle.New(sc.Name, conn, pol)
	return s, nil
}

// stopWait maps config's "0 means no wait" onto proc's negative value.
func stopWait(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func (s *Server) connected(c *backend.Conn) {
	s.mu.Lock()
	s.conn = c
	s.mu.Unlock()
}

// Name is the configured name.
func (s *Server) Name() string { return s.cfg.Name }

// Config is the server's resolved configuration.
func (s *Server) Config() *config.Server { return s.cfg }

// State is the supervisor's state.
func (s *Server) State() lifecycle.StateInfo { return s.sup.State() }

// Current returns the live connection, or nil when the server is not
// running. It never starts anything.
func (s *Server) Current() *backend.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && s.conn.Alive() && s.sup.IsReady() {
		return s.conn
	}
	return nil
}

// dying returns the connection that has ended but that the supervisor has
// not yet replaced, or nil.
func (s *Server) dying() *backend.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && !s.conn.Alive() {
		return s.conn
	}
	return nil
}

// Conn returns a live connection, starting the server if it is not
// running. Concurrent callers share one start and its outcome. While the
// supervisor restarts a crashed server, Conn waits for the new connection.
// ctx bounds the wait, not the start: a start that a caller gave up on
// still completes for the others (bounded by the init timeout).
func (s *Server) Conn(ctx context.Context) (*backend.Conn, error) {
	for {
		if c := s.Current(); c != nil {
			return c, nil
		}
		if d := s.dying(); d != nil {
			// The server just went away: wait for the supervisor to see
			// the end (the tree is being reaped), then for its restart.
			select {
			case <-d.Done():
			case <-ctx.Done():
				return nil, fmt.Errorf("server %s is restarting: %w", s.Name(), ctx.Err())
			}
			for s.dying() == d && s.sup.IsReady() {
				select {
				case <-ctx.Done():
					return nil, fmt.Errorf("server %s is restarting: %w", s.Name(), ctx.Err())
				case <-time.After(5 * time.Millisecond):
				}
			}
			continue
		}
		st := s.sup.State()
		switch st.State {
		case lifecycle.StateRestarting, lifecycle.StateStarting:
			// Starting is covered by the single flight below when we own
			// it; otherwise wait for the supervisor's reconnect.
			if st.State == lifecycle.StateRestarting {
				select {
				case <-s.sup.Restarted():
					continue
				case <-ctx.Done():
					return nil, fmt.Errorf("server %s is restarting: %w", s.Name(), ctx.Err())
				case <-time.After(100 * time.Millisecond):
					continue // the restart may have given up: look again
				}
			}
		}
		if err := s.start(ctx); err != nil {
			return nil, err
		}
	}
}

// start runs one Start for all concurrent callers.
func (s *Server) start(ctx context.Context) error {
	s.mu.Lock()
	ch := s.starting
	if ch == nil {
		ch = make(chan struct{})
		s.starting = ch
		s.mu.Unlock()
		err := s.sup.Start(context.Background())
		s.mu.Lock()
		s.startErr = err
		s.starting = nil
		s.mu.Unlock()
		close(ch)
		return err
	}
	s.mu.Unlock()
	select {
	case <-ch:
		s.mu.Lock()
		err := s.startErr
		s.mu.Unlock()
		return err
	case <-ctx.Done():
		return fmt.Errorf("server %s is starting: %w", s.Name(), ctx.Err())
	}
}

// Stop stops the server (it starts again on the next Conn).
func (s *Server) Stop(ctx context.Context) error { return s.sup.Stop(ctx) }
