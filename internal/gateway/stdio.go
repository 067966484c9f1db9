package gateway

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Activity receives the client's requests as they begin and end (the
// watchdog's Tracker: idle-exit never cuts a request in flight).
type Activity interface {
	Begin()
	End()
}

// ServeStdio serves ep to one client over newline-delimited JSON-RPC on r
// and w (mcpvisor stdio: stdin and stdout) until r reaches EOF or ctx ends.
// Requests run concurrently; everything the client should see — responses,
// related messages, notifications — is written to w, one line each. act,
// if not nil, sees every client request begin and end.
func ServeStdio(ctx context.Context, ep Endpoint, r io.Reader, w io.Writer, log *slog.Logger, act Activity) error {
	var conn *rpc.Conn
	var sess *Session
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pool := &workers{wg: &wg, work: make(chan func()), quit: ctx.Done()}
	// Responses from the client arrive on the connection's own pending
	// table, so a request the gateway sends the client (sampling,
	// elicitation, roots) goes out as a Call, and its answer is handed
	// back to the endpoint under the gateway's id.
	// Servers' requests arrive on their own goroutines, maybe as the
	// session ends: none is started once ServeStdio waits for the rest.
	var spawnMu sync.Mutex
	ended := false
	var out SinkFunc
	out = func(m *rpc.Message) error {
		if !m.IsRequest() {
			return conn.Write(m)
		}
		spawnMu.Lock()
		defer spawnMu.Unlock()
		if ended {
			return ErrSessionClosed
		}
		wg.Go(func() {
			resp, err := conn.Call(ctx, m.Method, m.Params)
			if err != nil {
				resp = &rpc.Message{Error: &rpc.Error{Code: rpc.InternalError, Message: "client did not answer: " + err.Error()}}
			}
			resp.ID = m.ID
			ep.Handle(ctx, sess, resp, out)
		})
		return nil
	}
	conn = rpc.NewConn(r, w, rpc.Options{
		PeerName: "client",
		Logger:   log,
		Handler: func(hctx context.Context, m *rpc.Message) {
			if !m.IsRequest() {
				ep.Handle(hctx, sess, m, out)
				return
			}
			if act != nil {
				act.Begin()
			}
			pool.run(func() {
				if resp := ep.Handle(hctx, sess, m, out); resp != nil {
					_ = conn.Write(resp)
				}
				if act != nil {
					act.End()
				}
			})
		},
	})
	sess = ep.Open(out)
	err := conn.Run(ctx)
	cancel()
	spawnMu.Lock()
	ended = true
	spawnMu.Unlock()
	ep.Close(sess)
	wg.Wait()
	return err
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
