package fleet

import (
	"context"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/proc"
)

// ModernConn is the connection a modern client's request on the lease's
// connection (Conn) goes to (backend.Conn.ModernConn): that one itself
// for a modern-only server; nil for one that speaks only the legacy revisions,
// on which the call is held; for a dual-era server, its process for
// modern clients, started when the first such request needs it, the wait
// bounded by ctx — unless the server is pinned: a pinned server's tools
// are checked on the process that serves the call, with that process's
// list watched for changes, and only the primary's is, so its modern
// clients' calls are held on it. A connection that is no backend's (a
// test's) is its own.
func (l *Lease) ModernConn(ctx context.Context) (Conn, error) {
	c := l.conn
	bc, ok := c.(*backend.Conn)
	if !ok {
		return c, nil
	}
	if bc.Modern() {
		return c, nil
	}
	if l.in.srv.Config().Pin {
		return nil, nil
	}
	m, err := bc.ModernConn(ctx)
	if m == nil || err != nil {
		return nil, err
	}
	return m, nil
}

// modernRoot is the process tree of the process a dual-era server's
// instance runs for modern clients, if one runs (for proc.TreeUsage).
func (in *instance) modernRoot() (proc.Root, bool) {
	c, _ := in.live().(*backend.Conn)
	if c == nil {
		return proc.Root{}, false
	}
	if p := c.ModernProcess(); p != nil {
		return p.Root(), true
	}
	return proc.Root{}, false
}

// ConnRun is the number of the process c, a server connection (a
// lease's, or a message's Source.Conn), talks to, unique in mcpvisor's
// process: another process of the server (a restart, a wake, a crash, a
// dual-era server's process for modern clients) has another. What a
// server keeps only in its process, as a task, lives as long as its run.
// 0 for a remote server, whose state outlives any connection to it, and
// for a connection that is no backend's (a test's).
func ConnRun(c Conn) uint64 {
	bc, ok := c.(*backend.Conn)
	if !ok || !bc.Local() {
		return 0
	}
	return bc.Serial()
}

// Runs are the runs (ConnRun) of session's instance ("" for the shared
// one) as it runs now: its process's, and for a dual-era server the
// process's for modern clients, 0 when none runs; running is false when
// the instance does not run (dormant, stopped, starting, never started).
// It leases nothing and starts nothing, and takes only the server's and
// the instance's locks: the fleet may ask it of a TaskHolder.
func (s *Server) Runs(session string) (primary, twin uint64, running bool) {
	in := s.instanceOf(session)
	if in == nil {
		return 0, 0, false
	}
	l := in.current()
	if l == nil {
		return 0, 0, false
	}
	bc, ok := l.(*backend.Conn)
	if !ok {
		return 0, 0, true
	}
	primary = ConnRun(bc)
	if t := bc.RunningTwin(); t != nil {
		twin = ConnRun(t)
	}
	return primary, twin, true
}
