// Package backend is one connection to one MCP server: a stdio server run
// through internal/proc (StdioConnector) or a remote one reached over HTTP
// (HTTPConnector: a 2025 server through the go-sdk's client transport, a
// 2026-07-28 one by a POST per request), spoken to through internal/rpc,
// after the MCP initialize handshake or the server/discover probe (see
// modern.go). A Conn is the lifecycle.Session that a lifecycle.Supervisor
// keeps alive; the Connector makes new ones.
package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// ProtocolVersion is the MCP revision mcpvisor asks its servers for.
const ProtocolVersion = "2025-11-25"

// SupportedVersions are the revisions mcpvisor speaks, newest first.
var SupportedVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// Supported reports whether v is a revision mcpvisor speaks.
func Supported(v string) bool {
	for _, s := range SupportedVersions {
		if s == v {
			return true
		}
	}
	return false
}

// Hooks receive what a server sends on its own: notifications (progress,
// logging, list changes, resource updates, cancellations) and requests
// (sampling, elicitation, roots). Both are called on the connection's read
// goroutine and must not block, nor write to the server there (a write
// waits for the server to read, which may wait for this goroutine): a
// Request hook answers through Conn.Reply or Conn.ReplyError from another
// goroutine.
type Hooks interface {
	Notification(c *Conn, m *rpc.Message)
	Request(c *Conn, m *rpc.Message)
}

// InitResult is what the server answered to initialize.
type InitResult struct {
	ProtocolVersion string          `json:"protocolVersion"`
	Capabilities    json.RawMessage `json:"capabilities"`
	ServerInfo      json.RawMessage `json:"serverInfo"`
	Instructions    string          `json:"instructions,omitempty"`
	// SupportedVersions are the protocol versions the server was found to
	// speak, when that is known: its server/discover result's; for a
	// server initialized with the legacy revision, mcpvisor's own record
	// of what a probe found (see Era). Absent when nothing was probed.
	SupportedVersions []string `json:"supportedVersions,omitempty"`
	// Raw is the whole result as the server sent it.
	Raw json.RawMessage `json:"-"`
	// caps is Capabilities decoded as far as routing needs.
	caps map[string]json.RawMessage
}

// Has reports whether the server declared the capability (tools, prompts,
// resources, logging, completions, …).
func (r *InitResult) Has(capability string) bool {
	_, ok := r.caps[capability]
	return ok
}

// Conn is one live, initialized connection to a server.
type Conn struct {
	name string
	rpc  *rpc.Conn
	proc *proc.Process // nil for a remote server
	// init is the server's initialize (or server/discover) result; a
	// dual-era server's is replaced once its era is learned (dual.go).
	init atomic.Pointer[InitResult]
	log  *slog.Logger

	// caps is what initialize declares (nil: ClientCapabilities, all
	// mcpvisor carries); StdioConnector.Capabilities.
	caps     json.RawMessage
	modern   bool  // the server speaks ModernVersion (modern.go); set before Connect returns
	tw       *twin // the process for modern clients of a dual-era server (dual.go); nil for a remote server and for that process itself
	lst      listening
	runDone  chan struct{}
	closing  atomic.Bool   // set when mcpvisor begins to close the connection
	closeReq chan struct{} // closed with closing
	answered atomic.Bool   // the server answered a client's request (MarkAnswered, Answered)
	serial   uint64        // this connection's number (Serial)
}

// serials numbers the connections made, from 1.
var serials atomic.Uint64

// Serial is the connection's number, unique in this process: another
// connection to the same server — after a restart, a sleep, a crash —
// has another. What a server keeps in its process (a task) is that
// connection's.
func (c *Conn) Serial() uint64 { return c.serial }

// Local reports whether the connection is to a process mcpvisor runs
// (false: a remote server, whose state outlives any connection to it).
func (c *Conn) Local() bool { return c.proc != nil }

// exitGrace is how long a server whose output ended unasked has to exit on
// its own before mcpvisor stops it: a crashed process's exit is collected
// within it, so its status is its own.
const exitGrace = time.Second

// ExitError is why a local server's connection ended without mcpvisor
// asking: the process exited (any code, or a signal mcpvisor did not send),
// or it closed its output and had to be stopped. It wraps
// lifecycle.ErrServerCrashed, so the restart policy treats it as a crash.
type ExitError struct {
	Server string
	// Status is the process's exit status; Status.Stage names the stop
	// step mcpvisor had taken when it ended ("" when it exited on its own).
	Status proc.ExitStatus
	// Stderr is the last lines the server wrote to stderr.
	Stderr string
}

func (e *ExitError) Error() string {
	how := fmt.Sprintf("server %s exited unexpectedly (%s)", e.Server, exitHow(e.Status))
	switch {
	case e.Status.Kind == proc.ExitOOM:
		how = fmt.Sprintf("server %s was killed by its memory limit (oom: %s)", e.Server, exitHow(e.Status))
	case e.Status.Stage != "":
		how = fmt.Sprintf("server %s closed its output and was stopped (%s)", e.Server, exitHow(e.Status))
	}
	if e.Stderr != "" {
		how += "; stderr: " + e.Stderr
	}
	return lifecycle.ErrServerCrashed.Error() + ": " + how
}

// Unwrap makes an ExitError a lifecycle.ErrServerCrashed.
func (e *ExitError) Unwrap() error { return lifecycle.ErrServerCrashed }

func exitHow(st proc.ExitStatus) string {
	s := fmt.Sprintf("exit code %d", st.Code)
	if st.Signal != 0 {
		s = "signal " + st.Signal.String()
	}
	if st.Stage != "" {
		s += ", after " + st.Stage
	}
	if st.PIDsLimitHits > 0 {
		s += fmt.Sprintf(", %d fork(s) refused by its pids limit", st.PIDsLimitHits)
	}
	return s
}

// Name is the server's configured name.
func (c *Conn) Name() string { return c.name }

// Init is the server's initialize result.
func (c *Conn) Init() *InitResult { return c.init.Load() }

// Process is the server's process tree, or nil for a remote server.
func (c *Conn) Process() *proc.Process { return c.proc }

// Call sends a request and waits for its response (which may carry a
// JSON-RPC error). See rpc.Conn.Call for cancellation.
func (c *Conn) Call(ctx context.Context, method string, params json.RawMessage) (*rpc.Message, error) {
	if c.modern {
		params = withOwnMeta(params)
	}
	m, err := c.rpc.Call(ctx, method, params)
	return m, c.callErr(err)
}

// CallAbort is Call bounded by abort as well (rpc.Conn.CallAbort).
func (c *Conn) CallAbort(ctx context.Context, abort <-chan struct{}, cause func() error, method string, params json.RawMessage) (*rpc.Message, error) {
	if c.modern {
		params = withOwnMeta(params)
	}
	m, err := c.rpc.CallAbort(ctx, abort, cause, method, params)
	return m, c.callErr(err)
}

// Answered reports whether the server answered a client's request on the
// connection (MarkAnswered): lifecycle.Answerer. A connection that did
// was a success however short its life; one that ended before is a
// failed run, which counts towards a crash loop. mcpvisor's own requests
// (a list refresh after a start, a replay of subscriptions) do not count:
// a server that answers those and dies unprompted is a crash loop.
func (c *Conn) Answered() bool { return c.answered.Load() }

// MarkAnswered records that the server answered a client's request, with
// a result or a JSON-RPC error (the gateway says so through its lease). A
// load first: the flag is written once, not by every call. Safe to call
// concurrently.
func (c *Conn) MarkAnswered() {
	if !c.answered.Load() {
		c.answered.Store(true)
	}
}

// Start sends a request and returns it pending (see rpc.Conn.Start): Call,
// with the wait left to the caller.
func (c *Conn) Start(ctx context.Context, method string, params json.RawMessage) (rpc.Waiter, error) {
	if c.modern {
		params = withOwnMeta(params)
	}
	p, err := c.rpc.Start(ctx, method, params)
	if err != nil {
		return nil, c.callErr(err)
	}
	return pending{p, c}, nil
}

// pending is a request Start sent: its errors say which server ended.
type pending struct {
	p *rpc.Pending
	c *Conn
}

func (p pending) Wait(ctx context.Context, interrupt <-chan struct{}) (*rpc.Message, bool, error) {
	m, interrupted, err := p.p.Wait(ctx, interrupt)
	return m, interrupted, p.c.callErr(err)
}

// callErr names the server in the error of a request the connection's end
// failed.
func (c *Conn) callErr(err error) error {
	if err != nil && errors.Is(err, rpc.ErrClosed) {
		return fmt.Errorf("server %s: %w", c.name, c.endCause(err))
	}
	return err
}

// Notify sends a notification.
func (c *Conn) Notify(method string, params json.RawMessage) error {
	return c.rpc.Notify(method, params)
}

// Reply answers a request the server sent.
func (c *Conn) Reply(id, result json.RawMessage) error { return c.rpc.Reply(id, result) }

// ReplyError answers a request the server sent with an error.
func (c *Conn) ReplyError(id json.RawMessage, code int, msg string) error {
	return c.rpc.ReplyError(id, code, msg, nil)
}

// Alive reports whether the protocol stream is still open. A server that
// crashed is not alive even before its supervisor has noticed.
func (c *Conn) Alive() bool {
	select {
	case <-c.rpc.Done():
		return false
	default:
		return true
	}
}

// Done is closed when the connection has ended (and, for a process, the
// tree is gone).
func (c *Conn) Done() <-chan struct{} { return c.runDone }

// endCause describes why the connection ended, with the process's exit
// status and last stderr lines when there is a process.
func (c *Conn) endCause(err error) error {
	if c.proc == nil {
		return err
	}
	select {
	case <-c.proc.Exited():
	default:
		return err
	}
	st, _ := c.proc.Wait(context.Background())
	tail := c.proc.Stderr().Tail(3)
	msg := fmt.Sprintf("%v: process %s", lifecycle.ErrServerCrashed, st)
	if tail != "" {
		msg += "; stderr: " + tail
	}
	return &crashCause{msg: msg, exit: &ExitError{Server: c.name, Status: st, Stderr: tail}}
}

// crashCause is endCause's error for a process that ended: it is
// lifecycle.ErrServerCrashed, and carries the process's *ExitError (how it
// ended: an OOM kill during a start is counted from it).
type crashCause struct {
	msg  string
	exit *ExitError
}

func (e *crashCause) Error() string   { return e.msg }
func (e *crashCause) Unwrap() []error { return []error{lifecycle.ErrServerCrashed, e.exit} }

// Wait blocks until the connection ends. It returns nil when mcpvisor
// ended it (Close) and the process did not crash on the way, and a
// classified error otherwise (lifecycle.Session): for a local server that
// ended unasked — whatever its exit code, whether or not it closed its
// stdout first — an *ExitError.
func (c *Conn) Wait() error {
	<-c.runDone
	if c.proc == nil {
		// A remote server: the stream ended by Close wraps nothing but
		// rpc.ErrClosed (see rpc.Conn.Err); any other end is a failure.
		if err := c.rpc.Err(); err != nil && !errors.Is(err, errClosedByUs) && errors.Unwrap(err) != nil {
			return lifecycle.Classify(err)
		}
		return nil
	}
	st := c.proc.Status()
	if c.closing.Load() && !st.Crashed() {
		return nil
	}
	return &ExitError{Server: c.name, Status: st, Stderr: c.proc.Stderr().Tail(3)}
}

var errClosedByUs = errors.New("closed by mcpvisor")

// Close ends the connection: for a process, the full stop escalation of
// proc.Process.Stop. Idempotent; safe concurrently with Wait.
func (c *Conn) Close() error { return c.CloseContext(context.Background()) }

// CloseContext is Close bounded by ctx: when ctx ends during the stop, the
// process tree is killed at once (proc.Process.Stop) and CloseContext
// returns ctx's error. Only the first call stops the connection; a later
// or concurrent call waits for that stop to end, or for its own ctx,
// whichever comes first. lifecycle's Supervisor calls it with the context
// of its Stop.
func (c *Conn) CloseContext(ctx context.Context) error {
	// Not a sync.Once: a concurrent Do would wait for the first call's
	// whole stop, past its own ctx.
	if c.closing.CompareAndSwap(false, true) {
		close(c.closeReq)
		// A dual-era server's process for modern clients stops beside it.
		twinDone := make(chan struct{})
		go func() {
			defer close(twinDone)
			c.endTwin(ctx)
		}()
		defer func() { <-twinDone }()
		// Cancellations of requests that ended just before are delivered
		// first: a server that sees them stops that work and can exit at
		// once on stdin EOF.
		fctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_ = c.rpc.Flush(fctx)
		cancel()
		var err error
		if c.proc != nil {
			err = c.proc.Stop(ctx)
		}
		c.rpc.Close()
		select {
		case <-c.runDone:
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
		}
		return err
	}
	select {
	case <-c.runDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
