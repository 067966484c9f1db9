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
