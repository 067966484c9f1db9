package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// Activity receives the client's requests as they begin and end (the
// watchdog's Tracker: idle-exit never cuts a request in flight).
type Activity interface {
	Begin()
	End()
}

// ErrClientStalled: the stdio client did not take a write within
// StdioOptions.WriteTimeout; it has stopped reading and is dropped.
var ErrClientStalled = errors.New("gateway: the client stopped reading its output")

// StdioOptions configure the stdio front. The zero value is usable.
type StdioOptions struct {
	// Logger receives the front's diagnostics (nil: discarded).
	Logger *slog.Logger

	// Activity, if not nil, sees every client request begin and end, and
	// every call held for a modern client's retry as one request while it
	// is held.
	Activity Activity

	// WriteTimeout bounds every write to the client: one that has not
	// been taken within it (a client that stopped reading its stdout)
	// ends the session — Serve returns an error wrapping
	// ErrClientStalled — instead of holding the front and the shutdown
	// forever. A write of more than 256 KiB gets the time for each
	// 256 KiB. 0 or negative means DefaultWriteTimeout.
	WriteTimeout time.Duration

	// ClientHint, if set, names the client when it names itself nowhere
	// — no clientInfo at initialize, none in a modern request's _meta —
	// in ps, the dashboard and metrics (Session.SetClientHint): say, the
	// name of the process that launched the bridge the client speaks
	// through. A name the client gives wins over it.
	ClientHint string

	// Identity is who the client is, as the operating system says (the
	// local user running it, or the connect socket's peer): its session
	// and its requests carry it, for the policy, the audit and the rate
	// limits. nil: anonymous.
	Identity *identity.Identity

	// Place, if not nil, is the session's place under a SessionLimit
	// (SessionLimit.AdmitConn: the daemon's socket). Its requests in
	// flight and its held calls are counted there, so that it is
	// evicted, by the limit's rule, only with none in flight. When the
	// place is evicted, a client that initialized a legacy session is
	// told so by a notifications/message (level "error", logger
	// "mcpvisor") naming maxSessions, a request that arrives meanwhile
	// gets a LimitReached error, and Serve ends, returning an error
	// wrapping ErrSessionEvicted.
	Place *Place
}

// ErrSessionEvicted: the session's place under its SessionLimit was taken
// to make room for another session.
var ErrSessionEvicted = errors.New("gateway: session evicted to make room for another (maxSessions)")

// Serve serves ep to one client over newline-delimited JSON-RPC on r and
// w until r reaches EOF, ctx ends, the client stops reading (see
// WriteTimeout), or its Place is evicted. Requests run concurrently; everything the client should
// see — responses, related messages, notifications — is written to w, one
// line each. When it ends, w is closed if it is an io.Closer. A Write to w
// that never returns (a blocking pipe nobody reads) does not hold Serve:
// it is left to a goroutine of its own, which ends when that Write does.
func (o StdioOptions) Serve(ctx context.Context, ep Endpoint, r io.Reader, w io.Writer) error {
	f := o.newStdioFront(ctx, ep, r, w)
	err := f.run(o.ClientHint)
	f.close()
	return err
}

// evictedText says why an evicted session ends, naming the bound.
func evictedText(p *Place) string {
	return "mcpvisor closed this session to make room for another: maxSessions (" + strconv.Itoa(p.lim.Max()) +
		") sessions were open, and this one was the least recently active with no request in flight; connect again to start a new session"
}

// evictedNotice tells an evicted session's client why it ends: a log
// message, which every legacy client can take at any time.
func evictedNotice(p *Place) *rpc.Message {
	params, _ := json.Marshal(map[string]string{"level": "error", "logger": "mcpvisor", "data": evictedText(p)})
	return &rpc.Message{Method: "notifications/message", Params: params}
}

// evictedReply refuses request id of an evicted session.
func evictedReply(id json.RawMessage, p *Place) *rpc.Message {
	return errorReply(id, rpc.LimitReached, evictedText(p))
}

// placeActivity counts a held call as a request in flight on a socket
// session's place (it cannot be evicted meanwhile), and passes it on.
type placeActivity struct {
	p    *Place
	next Activity
}

func (a placeActivity) Begin() {
	a.p.state.Add(placeReq)
	if a.next != nil {
		a.next.Begin()
	}
}

func (a placeActivity) End() {
	if a.next != nil {
		a.next.End()
	}
	a.p.exit()
}

// refuseLine counts, in gw, a line of the stdio client that its
// connection refused (rpc.Options.OnError's err): one that is not a
// JSON-RPC message or is over the line limit. A response to no pending
// call (rpc.ErrUnknownID) is no refusal: it comes too late, or for
// nothing, and is dropped as the HTTP front's endpoint drops it.
func refuseLine(ctx context.Context, gw *Gateway, err error) {
	if gw == nil {
		return
	}
	var de *rpc.DecodeError
	var tl *rpc.LineTooLongError
	switch {
	case errors.As(err, &de):
		var id json.RawMessage
		if de.Request {
			id = de.ID
		}
		gw.refuse(ctx, nil, id, telemetry.ProtocolError, de.Code, de.Error())
	case errors.As(err, &tl):
		var id json.RawMessage
		if tl.Kind == "request" {
			id = tl.ID
		}
		gw.refuse(ctx, nil, id, telemetry.ProtocolError, rpc.InvalidRequest, tl.Error())
	}
}

// answered is resp, the endpoint's response to m, or an error for m if the
// endpoint broke its contract and gave none (both fronts).
func answered(log *slog.Logger, m, resp *rpc.Message) *rpc.Message {
	if resp == nil {
		log.Error("endpoint returned no response to a request", "method", m.Method)
		return errorReply(m.ID, rpc.InternalError, "no response")
	}
	return resp
}

// serveStdioBatch serves the requests of a batch — concurrently, at most
// batchWorkers at once, their related messages going out as lines of
// their own — and writes one line: the array of errs and the requests'
// responses, once all are known (JSON-RPC 2.0, 6).
func serveStdioBatch(ctx context.Context, ep Endpoint, sess *Session, conn *rpc.Conn, out Sink, log *slog.Logger, reqs, errs []*rpc.Message) {
	var mu sync.Mutex
	resps := append(make([]*rpc.Message, 0, len(errs)+len(reqs)), errs...)
	runBatch(reqs, func(m *rpc.Message) {
		resp := answered(log, m, ep.Handle(ctx, sess, m, out))
		mu.Lock()
		resps = append(resps, resp)
		mu.Unlock()
	})
	b := append(make([]byte, 0, 256), '[')
	for i, m := range resps {
		if i > 0 {
			b = append(b, ',')
		}
		b = m.AppendTo(b)
	}
	b = append(b, ']')
	if err := conn.WriteRaw(b); err != nil {
		log.Debug("stdio: batch reply not written", "err", err)
	}
}

// workers run the client's requests. A worker that finishes waits for the
// next request instead of exiting, so that under steady load requests run
// on goroutines whose stacks have already grown; at most maxIdleWorkers
// wait, and all exit when quit closes.
type workers struct {
	wg   *sync.WaitGroup
	work chan func()
	quit <-chan struct{}
	idle atomic.Int32
}

const maxIdleWorkers = 64

// run runs f on an idle worker, or on a new one if none is idle.
func (p *workers) run(f func()) {
	select {
	case p.work <- f:
		return
	default:
	}
	p.wg.Go(func() {
		for {
			f()
			if p.idle.Add(1) > maxIdleWorkers {
				p.idle.Add(-1)
				return
			}
			select {
			case f = <-p.work:
				p.idle.Add(-1)
			case <-p.quit:
				p.idle.Add(-1)
				return
			}
		}
	})
}
