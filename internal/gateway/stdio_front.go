package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// stdioFront serves one stdio client: its connection, the endpoint it is
// served, its session there, and what runs for it. StdioOptions.Serve
// builds one, runs it, and closes it.
type stdioFront struct {
	ep    Endpoint
	gw    *Gateway // counts the lines refused before ep sees them (nil: ep is no gateway's, nothing is counted)
	log   *slog.Logger
	act   Activity // may be nil
	place *Place   // may be nil
	stall time.Duration

	// ctx ends with the connection, or when the place is evicted (its
	// cause is then ErrSessionEvicted).
	ctx    context.Context
	user   *identity.Identity // who the client is (StdioOptions.Identity)
	cancel context.CancelCauseFunc

	// Set before the connection runs; never changed after.
	conn *rpc.Conn
	sess *Session
	// out is the legacy session's sink: what relates to no request, and
	// its requests' related messages — the endpoint's requests to the
	// client among them. modernOut is a modern request's: what belongs
	// to it goes to stdout, and never a request.
	out, modernOut Sink
	// held are the calls held for the client's retries: they count as
	// its activity, and end with the front.
	held *heldFront

	// wg counts every goroutine of the front's — the workers, the
	// requests to the client, the eviction watch — which close waits for.
	wg   sync.WaitGroup
	pool *workers

	// version is the revision initialize negotiated (nil before): a
	// session at batchVersion may send JSON-RPC batches.
	version atomic.Pointer[string]

	asks   askGate
	asked  callsByID // the endpoint's requests the client is asked
	modern callsByID // the client's modern requests
}

// askGate starts the endpoint's requests to the client, each on a
// goroutine of its own, until the session ends: servers' requests arrive
// on their own goroutines, maybe as the session ends, and none is started
// once close waits for the rest.
type askGate struct {
	mu    sync.Mutex // guards ended, held while a request starts
	ended bool
}

// start runs f on a goroutine counted in wg; false, and f is not run, if
// the session has ended.
func (g *askGate) start(wg *sync.WaitGroup, f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended {
		return false
	}
	wg.Go(f)
	return true
}

// end lets no request start any more.
func (g *askGate) end() {
	g.mu.Lock()
	g.ended = true
	g.mu.Unlock()
}

// callsByID are requests in flight by id, each with its cancel. The front
// keeps two: the endpoint's requests the client is being asked (asked,
// by the endpoint's id: the endpoint withdraws one with a
// notifications/cancelled naming it by that id, which the client never
// saw — the ask is cancelled instead, and the connection tells the client
// by the id it was sent), and the client's modern (2026-07-28) requests
// (modern, by the client's id: its notifications/cancelled names the one
// it ends).
type callsByID struct {
	mu   sync.Mutex // guards byID
	byID map[string]context.CancelCauseFunc
}

// add takes cancel as that of request id; false if a request of that id
// is in flight already.
func (c *callsByID) add(id string, cancel context.CancelCauseFunc) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.byID[id]; dup {
		return false
	}
	if c.byID == nil {
		c.byID = map[string]context.CancelCauseFunc{}
	}
	c.byID[id] = cancel
	return true
}

// remove forgets request id, ended.
func (c *callsByID) remove(id string) {
	c.mu.Lock()
	delete(c.byID, id)
	c.mu.Unlock()
}

// cancel ends request id with cause (nil: context.Canceled); false if
// none of that id is in flight.
func (c *callsByID) cancel(id string, cause error) bool {
	c.mu.Lock()
	cancel := c.byID[id]
	c.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel(cause)
	return true
}

// errAskWithdrawn is the cause of an ask the endpoint withdrew: the
// client is told so, and the endpoint, which took the request back, is
// handed no answer.
var errAskWithdrawn = errors.New("withdrawn by the server")

// newStdioFront makes the front of o that serves ep to the client on r
// and w, within ctx.
func (o StdioOptions) newStdioFront(ctx context.Context, ep Endpoint, r io.Reader, w io.Writer) *stdioFront {
	f := &stdioFront{ep: ep, gw: gatewayOf(ep), log: o.Logger, act: o.Activity, place: o.Place, stall: o.WriteTimeout}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.stall <= 0 {
		f.stall = DefaultWriteTimeout
	}
	f.held = &heldFront{act: f.act}
	if f.place != nil {
		f.held.act = placeActivity{f.place, f.act}
	}
	f.user = o.Identity
	f.ctx, f.cancel = context.WithCancelCause(identity.NewContext(ctx, o.Identity))
	f.pool = &workers{wg: &f.wg, work: make(chan func()), quit: f.ctx.Done()}
	f.out, f.modernOut = SinkFunc(f.send), SinkFunc(f.sendModern)
	// The connection bounds its writes to the client (StallTimeout: a
	// stalled client ends it, and no Write left blocked holds Run) and
	// closes w at its end. Responses from the client arrive on its own
	// pending table (see ask).
	f.conn = rpc.NewConn(r, w, rpc.Options{
		PeerName: "client",
		// The connection's own error replies (a line that is not
		// JSON-RPC) and the front's refusals are queued as the line is
		// read: at the client's EOF they are written before the
		// connection ends.
		FlushAtEOF:   true,
		Logger:       f.log,
		StallTimeout: f.stall,
		OnError:      f.protocolError,
		Handler:      f.handle,
		Batch:        f.batch,
	})
	return f
}

// run opens the session and serves the client until its connection
// ends, and says why.
func (f *stdioFront) run(clientHint string) error {
	f.sess = f.ep.Open(f.out)
	f.sess.SetIdentity(f.user)
	if clientHint != "" {
		f.sess.SetClientHint(clientHint)
	}
	if f.place != nil {
		f.wg.Go(f.watchEviction)
	}
	err := f.conn.Run(f.ctx)
	if errors.Is(err, rpc.ErrWriteStalled) {
		f.log.Warn("stdio: the client has not read its output for "+f.stall.String()+"; dropping it", "err", err)
		err = fmt.Errorf("%w: %w", ErrClientStalled, err)
	}
	if errors.Is(context.Cause(f.ctx), ErrSessionEvicted) {
		err = ErrSessionEvicted
	}
	return err
}

// close ends the session, once the connection has: what runs for it is
// cancelled and waited for, and the calls held for it end.
func (f *stdioFront) close() {
	f.cancel(nil)
	f.asks.end()
	f.ep.Close(f.sess)
	f.wg.Wait()
	f.held.close()
}

// watchEviction ends the front when its place is evicted, telling a
// legacy client why.
func (f *stdioFront) watchEviction() {
	select {
	case <-f.place.Evicted():
	case <-f.ctx.Done():
		return
	}
	f.log.Info("stdio: session evicted to make room for another", "maxSessions", f.place.lim.Max())
	if f.version.Load() != nil {
		_ = f.conn.Write(evictedNotice(f.place))
	}
	f.cancel(ErrSessionEvicted)
}

// begin and end bracket each request (a batch is one): begin is false
// once the session's place was taken (the session is ending).
func (f *stdioFront) begin() bool {
	if f.place != nil && !f.place.enter() {
		return false
	}
	if f.act != nil {
		f.act.Begin()
	}
	return true
}

func (f *stdioFront) end() {
	if f.act != nil {
		f.act.End()
	}
	if f.place != nil {
		f.place.exit()
	}
}

// reply queues a reply of the front's own — a line refused before the
// endpoint sees it — as the line is read, without waiting for the client
// (Post): the client's EOF that follows waits for it (FlushAtEOF), so a
// client that closes its input after its last line still reads its
// refusal.
func (f *stdioFront) reply(m *rpc.Message) { _ = f.conn.Post(m) }

// protocolError counts a line the connection refused — one that is not
// a JSON-RPC message, or is over the line limit (with an error reply if
// it is a request whose id could be read) — before that reply is
// written.
func (f *stdioFront) protocolError(err error) {
	refuseLine(f.ctx, f.gw, err)
	f.log.Warn("json-rpc protocol error", "peer", "client", "err", err)
}

// send is the legacy session's sink (out). A request — the endpoint's to
// the client: sampling, elicitation, roots — is asked on a goroutine of
// its own (ask); a notifications/cancelled of one of those withdraws its
// ask, and is not written: the client knows the request by another id.
func (f *stdioFront) send(m *rpc.Message) error {
	if !m.IsRequest() {
		if m.Method == "notifications/cancelled" && f.asked.cancel(string(rpc.CancelledRequestID(m.Params)), withdrawal(m.Params)) {
			return nil
		}
		if f.version.Load() == nil {
			// Before initialize, nothing relates to no request: a
			// legacy client is not yet a session, and a modern one
			// never is (it listens with subscriptions/listen).
			return ErrNoStream
		}
		return f.conn.Write(m)
	}
	// Registered before the ask starts, so that a withdrawal that
	// follows the request at once finds it.
	ctx, cancel := context.WithCancelCause(f.ctx)
	key := string(m.ID)
	withdrawable := f.asked.add(key, cancel)
	done := func() {
		if withdrawable {
			f.asked.remove(key)
		}
		cancel(nil)
	}
	if !f.asks.start(&f.wg, func() { defer done(); f.ask(ctx, m) }) {
		done()
		return ErrSessionClosed
	}
	return nil
}

// withdrawal is the cause of an ask withdrawn by a notifications/cancelled
// of params: errAskWithdrawn, with the reason it gives.
func withdrawal(params json.RawMessage) error {
	if reason := stringField(params, "reason"); reason != "" {
		return fmt.Errorf("%w: %s", errAskWithdrawn, reason)
	}
	return errAskWithdrawn
}

// sendModern is a modern request's sink (modernOut).
func (f *stdioFront) sendModern(m *rpc.Message) error {
	if m.IsRequest() {
		return ErrNoStream
	}
	return f.conn.Write(m)
}

// ask sends the client the endpoint's request m as a call of the
// connection's — the client's answer arrives on its pending table — and
// hands the answer back to the endpoint under m's id. The client has
// inputWait to answer, as on every front: then the call is withdrawn
// (the client is told it is cancelled, and the connection forgets it)
// and the endpoint is answered RequestTimeout, as the HTTP front answers
// a server its client did not answer. ctx ends when the endpoint
// withdraws m (errAskWithdrawn): the client is told, and the endpoint,
// which took m back, is answered nothing.
func (f *stdioFront) ask(ctx context.Context, m *rpc.Message) {
	late := fmt.Errorf("the client did not answer %s within %v", m.Method, inputWait)
	ctx, cancel := context.WithTimeoutCause(ctx, inputWait, late)
	defer cancel()
	resp, err := f.conn.Call(ctx, m.Method, m.Params)
	switch {
	case err == nil:
	case errors.Is(context.Cause(ctx), errAskWithdrawn):
		return
	case context.Cause(ctx) == late:
		resp = &rpc.Message{Error: &rpc.Error{Code: rpc.RequestTimeout, Message: late.Error()}}
	default:
		resp = &rpc.Message{Error: &rpc.Error{Code: rpc.InternalError, Message: "client did not answer: " + err.Error()}}
	}
	resp.ID = m.ID
	f.ep.Handle(f.ctx, f.sess, resp, f.out)
}

// handle is the connection's Handler: it serves one message of the
// client's, a request on a worker.
func (f *stdioFront) handle(ctx context.Context, m *rpc.Message) {
	switch {
	case !m.IsRequest():
		f.notified(ctx, m)
	case isModernRequest(m):
		f.serveModern(ctx, m)
	default:
		f.serveLegacy(ctx, m)
	}
}

// isModernRequest reports whether request m names a modern revision in
// its _meta.
func isModernRequest(m *rpc.Message) bool {
	_, modern := modernVersionOf(m.Params)
	return modern
}

// notified takes a notification or a response of the client's: a
// notifications/cancelled of a modern request in flight ends it; the
// rest goes to the session.
func (f *stdioFront) notified(ctx context.Context, m *rpc.Message) {
	if f.place != nil {
		f.place.touch()
	}
	if m.Method == "notifications/cancelled" && f.modern.cancel(string(rpc.CancelledRequestID(m.Params)), nil) {
		return
	}
	f.ep.Handle(ctx, f.sess, m, f.out)
}

// serveModern serves a modern (2026-07-28) request, stateless, on a
// worker, registered by its id while in flight.
func (f *stdioFront) serveModern(ctx context.Context, m *rpc.Message) {
	mo, bad := readModern(m)
	if bad == nil {
		bad = unsupportedVersion(m, mo.Version)
	}
	if bad != nil {
		f.gw.refuse(ctx, m, bad.ID, refusalOutcome(bad.Error.Code), bad.Error.Code, bad.Error.Message)
		f.reply(bad)
		return
	}
	mo.client = f.sess // every request here is this client's
	mo.front = f.held
	if !f.begin() {
		f.reply(evictedReply(m.ID, f.place))
		return
	}
	rctx, cancel := context.WithCancelCause(ctx)
	key := string(m.ID)
	if !f.modern.add(key, cancel) {
		cancel(nil)
		f.end()
		msg := "Invalid Request: id " + key + " is already the id of a request in flight"
		f.gw.refuse(ctx, m, m.ID, telemetry.ProtocolError, rpc.InvalidRequest, msg)
		f.reply(errorReply(m.ID, rpc.InvalidRequest, msg))
		return
	}
	f.pool.run(func() {
		resp := answered(f.log, m, f.ep.Stateless(rctx, m, mo, f.modernOut))
		f.modern.remove(key)
		cancel(nil)
		_ = f.conn.Write(resp)
		f.end()
	})
}

// serveLegacy serves a request of the legacy session on a worker.
func (f *stdioFront) serveLegacy(ctx context.Context, m *rpc.Message) {
	if !f.begin() {
		f.reply(evictedReply(m.ID, f.place))
		return
	}
	f.pool.run(func() {
		resp := answered(f.log, m, f.ep.Handle(ctx, f.sess, m, f.out))
		if m.Method == "initialize" && resp.Error == nil {
			v := negotiated(resp)
			f.version.Store(&v)
		}
		_ = f.conn.Write(resp)
		f.end()
	})
}

// batch is the connection's Batch: a JSON-RPC batch of a session at
// batchVersion is served on a worker, and answered by one line; any
// other's is refused.
func (f *stdioFront) batch(ctx context.Context, line []byte) {
	v := ""
	if p := f.version.Load(); p != nil {
		v = *p
	}
	if v != batchVersion {
		f.log.Debug("stdio: batch refused", "version", v)
		msg := batchRefused(v)
		f.gw.refuse(ctx, nil, nil, telemetry.ProtocolError, rpc.InvalidRequest, msg)
		f.reply(errorReply(nil, rpc.InvalidRequest, msg))
		return
	}
	reqs, others, errs, fail := splitBatch(ctx, f.gw, line)
	if fail != nil {
		f.gw.refuse(ctx, nil, nil, telemetry.ProtocolError, fail.Code, fail.Message)
		f.reply(errorReply(nil, fail.Code, fail.Message))
		return
	}
	for _, m := range others {
		f.ep.Handle(ctx, f.sess, m, f.out)
	}
	if len(reqs) == 0 && len(errs) == 0 {
		if f.place != nil {
			f.place.touch()
		}
		return // only notifications and responses: nothing is answered
	}
	if !f.begin() {
		f.reply(evictedReply(nil, f.place))
		return
	}
	f.pool.run(func() {
		serveStdioBatch(ctx, f.ep, f.sess, f.conn, f.out, f.log, reqs, errs)
		f.end()
	})
}
