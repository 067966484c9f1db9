package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/sse"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// HTTPConnector connects to a remote MCP server and performs the initialize
// handshake, or finds it speaks MCP 2026-07-28 (Protocol; http_modern.go).
// It implements lifecycle.Connector. The go-sdk's client transport speaks
// HTTP to a legacy server, a modernConn of mcpvisor's to a modern one; a
// connStream turns either mcp.Connection into the byte stream of
// newline-delimited JSON that internal/rpc reads and writes, so a remote
// server is the same *Conn as a stdio one (with no Process).
//
// What connStream adds to the go-sdk transport used without mcp.Client
// (whose unexported sessionUpdated hook it cannot reach):
//   - the MCP-Protocol-Version header on every request after initialize
//     (the version the server chose, read from its initialize result);
//   - the standalone GET stream of the Streamable HTTP transport, which
//     carries what the server sends outside any request (list_changed,
//     resource updates) and notices a server that has gone away;
//   - requests sent without holding up the connection while the server
//     holds a POST open (each request is POSTed from its own goroutine);
//     notifications and replies are POSTed in order;
//   - notifications/cancelled also ends the cancelled request's POST;
//   - HTTP 401 and 403 classified as lifecycle.ErrAuthRequired.
type HTTPConnector struct {
	Name string
	URL  string
	// Headers are set on every request to the server's host (not on a
	// redirect to another host), unless the transport set the same header
	// itself. Values are never logged.
	Headers map[string]string
	// ResolveHeaders, if set, gives the headers of each connection in
	// place of Headers (the fleet resolves secret references in them at
	// each connect); its error fails the Connect as it is.
	ResolveHeaders func(ctx context.Context) (map[string]string, error)
	// Transport is "streamable-http" (the default when empty) or "sse",
	// the HTTP+SSE transport of MCP 2024-11-05.
	Transport string
	// Protocol is ProtocolAuto, ProtocolLegacy or ProtocolModern: how the
	// server's era is found, as for a stdio server, with the probe of the
	// Streamable HTTP transport (http_modern.go). Empty is ProtocolLegacy:
	// a remote server is probed only when configured to be. The HTTP+SSE
	// transport is legacy only.
	Protocol string
	// EraHint, if set, tells the protocol version the server spoke when
	// it was last connected to ("" if unknown): an "auto" server known
	// legacy is initialized without the probe.
	EraHint func() string
	era     eraMemo
	Hooks   Hooks
	Logger  *slog.Logger
	// HTTPClient, if set, carries the requests (its Transport, Jar and
	// CheckRedirect are used; its Timeout must be zero, since it would cut
	// the long-lived streams). By default each connection has a transport
	// of its own, closed with it.
	HTTPClient *http.Client
	// Capabilities, if set, is what initialize declares to a legacy
	// server instead of ClientCapabilities (as StdioConnector's).
	Capabilities json.RawMessage
	// OnConnect, if set, sees every new connection before Connect returns,
	// with Connect's context (work it does there is bounded by it).
	OnConnect func(ctx context.Context, c *Conn)
	// Auth, if set, authorizes every request to the server's host with
	// an OAuth access token (auth.go). Its error, once it reports one,
	// classifies the connection's failure as lifecycle.ErrAuthRequired
	// wrapping it.
	Auth Authorizer
}

// Tunables, variables so that tests can shorten them.
var (
	// closeTimeout bounds the DELETE that ends the server's session, and
	// closeGuard the whole end of the session (the go-sdk connection's
	// Close): past it, the DELETE is abandoned.
	closeTimeout = 2 * time.Second
	closeGuard   = 3 * time.Second
	// listenRetries is how many times in a row the standalone stream may
	// fail to (re)connect before the connection counts as lost; the waits
	// between grow from listenDelay, doubling.
	listenRetries = 3
	listenDelay   = 100 * time.Millisecond
	// listenMaxDelay bounds the wait before a modern server's
	// subscriptions/listen that keeps ending at once is opened again.
	listenMaxDelay = 5 * time.Second
	// listenHealthy is how long a standalone stream must last to count as
	// progress when it delivered nothing, and a modern server's
	// subscriptions/listen to be opened again at once when it ends.
	listenHealthy = 5 * time.Second
	// maxEvent bounds one event read from the standalone stream.
	maxEvent = rpc.DefaultMaxLine
)

const protocolVersionHeader = "MCP-Protocol-Version"

// Connect opens the connection, probes the server's era if Protocol asks
// for it, sends initialize and notifications/initialized to a legacy
// server, and returns the live connection. ctx bounds the whole handshake;
// the connection is closed if the handshake fails, Connect waiting for
// that no longer than ctx.
func (hc *HTTPConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	log := hc.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("server", hc.Name)
	var streamable bool
	switch hc.Transport {
	case "", "streamable-http":
		streamable = true
	case "sse":
	default:
		return nil, fmt.Errorf("server %s: unknown HTTP transport %q", hc.Name, hc.Transport)
	}
	base, err := url.Parse(hc.URL)
	if err != nil {
		return nil, fmt.Errorf("server %s: invalid URL", hc.Name) // the URL may hold a secret
	}

	headers := hc.Headers
	if hc.ResolveHeaders != nil {
		if headers, err = hc.ResolveHeaders(ctx); err != nil {
			return nil, err
		}
	}
	if c, ok := hc.Auth.(Connecting); ok {
		// The authorizer's settings (its secrets) are found once a
		// connection, not once a request.
		if err := c.Connecting(ctx); err != nil {
			return nil, fmt.Errorf("server %s: %w", hc.Name, err)
		}
	}

	b := &connStream{name: hc.Name, url: hc.URL, log: log, streamable: streamable, calls: map[jsonrpc.ID]*callState{}, ended: make(chan struct{})}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.endCtx, b.endCancel = context.WithCancel(context.Background())
	b.pr, b.pw = io.Pipe()
	b.client = hc.client(b, base, headers)
	abandon := func(err error) error {
		b.cancel()
		b.endCancel()
		b.release()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return b.classify(fmt.Errorf("server %s: %w", hc.Name, err))
	}

	// The era: a modern server's description, or nil for a legacy one.
	var modern *InitResult
	protocol := hc.Protocol
	if protocol == "" {
		protocol = ProtocolLegacy
	}
	switch {
	case !streamable && protocol == ProtocolModern:
		return nil, abandon(fmt.Errorf("%w: MCP %s needs the streamable-http transport, not %q (configured \"protocol\": \"modern\")", lifecycle.ErrCapabilityMissing, ModernVersion, hc.Transport))
	case !streamable || protocol == ProtocolLegacy:
	case protocol == ProtocolAuto && hc.knownLegacy():
	default:
		if modern, err = b.probe(ctx, protocol); err != nil {
			return nil, abandon(err)
		}
		switch {
		case modern == nil && protocol == ProtocolModern:
			return nil, abandon(fmt.Errorf("%w: server/discover did not answer as MCP %s (configured \"protocol\": \"modern\")", lifecycle.ErrCapabilityMissing, ModernVersion))
		case modern == nil && !b.probeGaveUp:
			hc.era.set(EraLegacy, nil)
		}
	}

	// The go-sdk connection outlives ctx (for "sse", its GET is the
	// stream), but ctx bounds getting it.
	if modern != nil {
		b.conn = newModernConn(b)
	} else {
		var t mcp.Transport
		if streamable {
			t = &mcp.StreamableClientTransport{Endpoint: hc.URL, HTTPClient: b.client}
		} else {
			t = &mcp.SSEClientTransport{Endpoint: hc.URL, HTTPClient: b.client}
		}
		stop := context.AfterFunc(ctx, b.cancel)
		conn, err := t.Connect(b.ctx)
		stop()
		if err != nil {
			return nil, abandon(fmt.Errorf("connecting: %w", err))
		}
		b.conn = conn
	}

	c := &Conn{name: hc.Name, log: log, caps: hc.Capabilities, runDone: make(chan struct{}), closeReq: make(chan struct{}), serial: serials.Add(1)}
	c.rpc = rpc.NewConn(b, connStreamWriter{b}, rpc.Options{
		PeerName: "server " + hc.Name,
		Logger:   log,
		Handler:  hookHandler(c, hc.Hooks),
	})
	b.spawn(b.pump)
	go func() {
		_ = c.rpc.Run(context.Background())
		c.endListen()
		b.shutdown()
		b.wg.Wait()
		b.awaitSessionEnd()
		b.release()
		close(c.runDone)
	}()
	if modern != nil {
		c.modern = true
		c.init.Store(modern)
		log.Info("server speaks MCP " + ModernVersion + ": no initialize, no session, requests carry _meta and the request headers")
	} else if err := c.initialize(ctx, nil); err != nil {
		// Under ctx: the session's end may outlast it (see shutdown).
		_ = c.CloseContext(ctx)
		if f := b.failure(); f != nil && errors.Is(err, rpc.ErrClosed) {
			return nil, fmt.Errorf("server %s: %w", hc.Name, f)
		}
		return nil, b.classify(fmt.Errorf("server %s: %w", hc.Name, err))
	}
	if b.probeGaveUp {
		// The probe went unanswered and initialize worked: legacy. Had
		// initialize failed (a slow modern server refuses it), the next
		// connection would have probed again.
		hc.era.set(EraLegacy, nil)
	}
	if streamable && modern == nil {
		b.spawn(b.listen)
	}
	if hc.OnConnect != nil {
		hc.OnConnect(ctx, c)
	}
	if c.modern {
		// After OnConnect, whose replay names the resources subscribed
		// to: the listen opens once, with them.
		c.startListen()
	}
	return c, nil
}

// knownLegacy reports whether the server turned out legacy before, in this
// connector's life or (EraHint) when it was last connected to.
func (hc *HTTPConnector) knownLegacy() bool { return hc.era.knownLegacy(hc.EraHint) }

// SetEraHint sets EraHint if it is not set (for the fleet, which keeps the
// era of every server's last run).
func (hc *HTTPConnector) SetEraHint(hint func() string) {
	if hc.EraHint == nil {
		hc.EraHint = hint
	}
}

// client is the http.Client of one connection: the configured one (or a
// transport of the connection's own) behind a RoundTripper that adds the
// headers.
func (hc *HTTPConnector) client(b *connStream, base *url.URL, headers map[string]string) *http.Client {
	var cl http.Client
	if hc.HTTPClient != nil {
		cl = *hc.HTTPClient
	}
	rt := cl.Transport
	if rt == nil {
		if hc.HTTPClient == nil {
			if dt, ok := http.DefaultTransport.(*http.Transport); ok {
				b.owned = dt.Clone()
				rt = b.owned
			}
		}
		if rt == nil {
			rt = http.DefaultTransport
		}
	}
	cl.Transport = &headerTransport{base: rt, scheme: base.Scheme, host: base.Host, headers: headers, auth: hc.Auth, b: b}
	return &cl
}

// hookHandler hands what the server sends on its own to the hooks, and
// after the acknowledgement of a modern server's listen opened again what
// may have been missed before it (listenAcknowledged).
//
// It runs on the read loop, which must not wait for the server to read, so
// its own answer is written from another goroutine (as Hooks.Request must
// write its own).
func hookHandler(c *Conn, h Hooks) func(context.Context, *rpc.Message) {
	return func(_ context.Context, m *rpc.Message) {
		if h == nil {
			if m.IsRequest() {
				go func() {
					_ = c.ReplyError(m.ID, rpc.MethodNotFound, "mcpvisor has no client to forward "+m.Method+" to")
				}()
			}
			return
		}
		if m.IsRequest() {
			h.Request(c, m)
			return
		}
		h.Notification(c, m)
		if m.Method == "notifications/subscriptions/acknowledged" {
			for _, n := range c.listenAcknowledged(m.Params) {
				h.Notification(c, n)
			}
		}
	}
}

// connStream is an mcp.Connection seen as a byte stream: rpc.Conn reads the
// server's messages from it one line each, and writes its own as lines,
// which connStream decodes and hands to the connection.
type connStream struct {
	name       string
	url        string
	log        *slog.Logger
	streamable bool
	client     *http.Client
	owned      *http.Transport // closed with the connection; nil if configured
	conn       mcp.Connection

	ctx    context.Context // ends with the connection
	cancel context.CancelFunc
	pr     *io.PipeReader // rpc.Conn reads the server's messages here
	pw     *io.PipeWriter

	params  toolHeaders            // the tools' x-mcp-header annotations (a modern server's)
	version atomic.Pointer[string] // negotiated protocol version, once known
	denied  atomic.Int32           // the latest HTTP status if it was 401 or 403, else 0
	auth    authState              // what stops every request until the user acts
	// probeGaveUp: server/discover got no answer within the probe bound;
	// only a working initialize then makes the server known legacy.
	probeGaveUp bool

	mu     sync.Mutex
	calls  map[jsonrpc.ID]*callState // requests without a response yet
	initID jsonrpc.ID                // the initialize request
	closed bool                      // no more goroutines start
	wg     sync.WaitGroup

	failErr error // why connStream ended the connection, once it has

	// The end of the server's session, which shutdown begins: ended is
	// closed when the go-sdk connection's Close has returned; endCancel
	// abandons its DELETE.
	ended     chan struct{}
	endCtx    context.Context
	endCancel context.CancelFunc
}

// callState is one request in flight. Its context carries the POST; it
// ends when the request is cancelled, or once both the response has been
// read and the HTTP body that carried it has been closed (so that the
// HTTP connection can be reused).
type callState struct {
	authErr    atomic.Pointer[error] // what the authorizer stopped the request with (auth.go)
	cancel     context.CancelFunc
	responded  atomic.Bool
	bodyClosed atomic.Bool
	cancelled  atomic.Bool
}

func (st *callState) respond() {
	st.responded.Store(true)
	if st.bodyClosed.Load() {
		st.cancel()
	}
}

func (st *callState) closeBody() {
	st.bodyClosed.Store(true)
	if st.responded.Load() {
		st.cancel()
	}
}

type callKey struct{}

// spawn runs f on a goroutine that the end of the connection waits for,
// unless the connection has ended.
func (b *connStream) spawn(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// Read is rpc.Conn's side of the pipe.
func (b *connStream) Read(p []byte) (int, error) { return b.pr.Read(p) }

// Close is called by rpc.Conn when the connection ends, for any reason.
func (b *connStream) Close() error {
	b.shutdown()
	return nil
}

var errStreamClosed = errors.New("connection closed")

// shutdown ends the connection: the streams and requests in flight at
// once, and the server's session (the go-sdk connection's Close, a DELETE
// bounded by closeTimeout) on a goroutine of its own, which
// awaitSessionEnd waits for. Only the first call does anything, and no
// call waits: Conn.CloseContext must return at its own ctx.
func (b *connStream) shutdown() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.pr.CloseWithError(errStreamClosed)
	go func() {
		defer close(b.ended)
		defer b.endCancel()
		if err := b.conn.Close(); err != nil {
			b.log.Debug("ending the remote session", "err", err)
		}
	}()
}

// awaitSessionEnd waits for the end of the session that shutdown began,
// at most closeGuard; then it abandons the DELETE, after which the go-sdk
// connection's Close returns at once (it is waited for closeGuard more, in
// case a configured transport does not heed its request's context).
func (b *connStream) awaitSessionEnd() {
	t := time.NewTimer(closeGuard)
	defer t.Stop()
	select {
	case <-b.ended:
		return
	case <-t.C:
	}
	b.log.Warn("ending the remote session timed out; abandoning it", "after", closeGuard)
	b.endCancel()
	t.Reset(closeGuard)
	select {
	case <-b.ended:
	case <-t.C:
		b.log.Error("the remote session's end did not return once abandoned")
	}
}

// release closes the connection's own idle HTTP connections.
func (b *connStream) release() {
	if b.owned != nil {
		b.owned.CloseIdleConnections()
	}
}

// fail ends the connection because of err: rpc.Conn reads the error (once
// classified) from the pipe, and closes b. The first failure wins.
func (b *connStream) fail(err error) {
	b.mu.Lock()
	if b.failErr != nil {
		b.mu.Unlock()
		return
	}
	b.failErr = b.classify(err)
	err = b.failErr
	b.mu.Unlock()
	b.pw.CloseWithError(err)
}

// failure is why fail ended the connection, or nil.
func (b *connStream) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failErr
}

// classify attaches a lifecycle class to a failure of the connection.
// Refused credentials win over what they caused (the go-sdk reports a 401
// as the failure of the request that got it).
func (b *connStream) classify(err error) error {
	err = b.redact(err)
	if a := b.authFailure(); a != nil {
		switch {
		case !userMustAct(a):
			// The authorizer could not tell now: retried like a server
			// that does not answer.
			if !errors.Is(err, a) {
				err = fmt.Errorf("%w (%w)", err, a)
			}
			if !errors.Is(err, lifecycle.ErrServerUnavailable) {
				err = fmt.Errorf("%w: %w", lifecycle.ErrServerUnavailable, err)
			}
			return err
		case !errors.Is(err, a):
			return fmt.Errorf("%w: %w", lifecycle.ErrAuthRequired, a)
		case !errors.Is(err, lifecycle.ErrAuthRequired):
			return fmt.Errorf("%w: %w", lifecycle.ErrAuthRequired, err)
		}
	}
	if code := int(b.denied.Load()); code != 0 && !errors.Is(err, lifecycle.ErrAuthRequired) {
		return fmt.Errorf("%w: server %s answered HTTP %d %s (%v)", lifecycle.ErrAuthRequired, b.name, code, http.StatusText(code), err)
	}
	if errors.Is(err, mcp.ErrSessionMissing) && !errors.Is(err, lifecycle.ErrSessionMissing) {
		return fmt.Errorf("%w: %w", lifecycle.ErrSessionMissing, err)
	}
	return lifecycle.Classify(err)
}

// pump copies the server's messages from the go-sdk connection to the pipe.
func (b *connStream) pump() {
	for {
		msg, err := b.conn.Read(b.ctx)
		if err != nil {
			if b.ctx.Err() == nil {
				b.fail(fmt.Errorf("reading from the server: %w", err))
			}
			return
		}
		if resp, ok := msg.(*jsonrpc.Response); ok {
			b.answered(resp)
		}
		data, err := jsonrpc.EncodeMessage(msg)
		if err != nil {
			b.log.Warn("dropping a message the server sent", "err", err)
			continue
		}
		if _, err := b.pw.Write(append(data, '\n')); err != nil {
			return
		}
	}
}

// answered does the bookkeeping of a response: the request's state, the
// protocol version from the initialize result, and an error the go-sdk
// made up (a stream that ended without the response) turned into a
// JSON-RPC error of mcpvisor's.
func (b *connStream) answered(resp *jsonrpc.Response) {
	b.mu.Lock()
	st := b.calls[resp.ID]
	delete(b.calls, resp.ID)
	isInit := b.initID.IsValid() && resp.ID == b.initID
	b.mu.Unlock()
	if st != nil {
		st.respond()
	}
	if isInit && resp.Error == nil && b.streamable {
		var r struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		if json.Unmarshal(resp.Result, &r) == nil && r.ProtocolVersion != "" {
			b.version.Store(&r.ProtocolVersion)
		}
	}
	if resp.Error != nil {
		if _, ok := resp.Error.(*jsonrpc.Error); !ok {
			we := &jsonrpc.Error{Code: rpc.BackendUnavailable, Message: fmt.Sprintf("server %s: %v", b.name, resp.Error)}
			var inner *jsonrpc.Error
			if errors.As(resp.Error, &inner) {
				we.Code = inner.Code
			}
			resp.Error = we
		}
	}
}

// connStreamWriter is rpc.Conn's writing side: one line per Write.
type connStreamWriter struct{ b *connStream }

func (w connStreamWriter) Close() error { return w.b.Close() }

func (w connStreamWriter) Write(p []byte) (int, error) {
	b := w.b
	for line := range bytes.Lines(p) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			continue
		}
		if err := b.send(line); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// send writes one message. A request is POSTed from a goroutine of its
// own: a server may hold the POST until it answers. Notifications and
// responses are POSTed in order (the server answers them at once).
func (b *connStream) send(line []byte) error {
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		if m, derr := rpc.Decode(line); derr == nil && m.IsRequest() {
			b.inject(m.ID, rpc.InvalidRequest, "mcpvisor could not forward the request: "+err.Error())
		}
		b.log.Warn("dropping a message that could not be forwarded", "err", err)
		return nil
	}
	if req, ok := msg.(*jsonrpc.Request); ok {
		if req.IsCall() {
			return b.call(req)
		}
		if req.Method == "notifications/cancelled" {
			b.cancelled(req.Params)
		}
	}
	err = b.conn.Write(b.ctx, msg)
	switch {
	case err == nil:
		return nil
	case b.ctx.Err() != nil:
		return errStreamClosed
	case isNetError(err):
		b.fail(fmt.Errorf("writing to the server: %w", err))
		return b.failure()
	default:
		// An HTTP error status: if it broke the session, the go-sdk
		// connection fails and pump ends the connection.
		b.log.Warn("the server refused a message", "err", err)
		return nil
	}
}

// call POSTs a request from its own goroutine.
func (b *connStream) call(req *jsonrpc.Request) error {
	st := &callState{}
	ctx, cancel := context.WithCancel(b.ctx)
	st.cancel = cancel
	ctx = context.WithValue(ctx, callKey{}, st)
	b.mu.Lock()
	b.calls[req.ID] = st
	if req.Method == "initialize" {
		b.initID = req.ID
	}
	b.mu.Unlock()
	ok := b.spawn(func() {
		err := b.conn.Write(ctx, req)
		if err == nil {
			return
		}
		b.forget(req.ID)
		cancel()
		if b.ctx.Err() != nil || st.cancelled.Load() {
			return // ended, or the caller gave up: nobody waits
		}
		id, _ := json.Marshal(req.ID.Raw())
		if e := st.authAnswer(); e != nil {
			// Only the user can authorize it (a login, a step-up): the
			// request is answered so, and the connection goes on.
			b.injectError(id, e)
			return
		}
		if isNetError(err) {
			b.fail(fmt.Errorf("sending %s: %w", req.Method, err))
			return
		}
		code, msg := rpc.BackendUnavailable, fmt.Sprintf("server %s: %v", b.name, b.redact(err))
		var we *jsonrpc.Error
		if errors.As(err, &we) {
			code = int(we.Code)
		}
		b.inject(id, code, msg)
	})
	if !ok {
		b.forget(req.ID)
		cancel()
		return errStreamClosed
	}
	return nil
}

func (b *connStream) forget(id jsonrpc.ID) {
	b.mu.Lock()
	delete(b.calls, id)
	b.mu.Unlock()
}

// cancelled ends the POST of a request mcpvisor gave up on.
func (b *connStream) cancelled(params json.RawMessage) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	b.mu.Lock()
	st := b.calls[id]
	delete(b.calls, id)
	b.mu.Unlock()
	if st != nil {
		st.cancelled.Store(true)
		st.cancel()
	}
}

// inject answers one of mcpvisor's requests with an error, as if the
// server had.
func (b *connStream) inject(id json.RawMessage, code int, msg string) {
	b.injectError(id, &rpc.Error{Code: code, Message: msg})
}

// injectError is inject of a whole error, data included.
func (b *connStream) injectError(id json.RawMessage, e *rpc.Error) {
	m := rpc.Message{ID: id, Error: e}
	_, _ = b.pw.Write(append(m.AppendTo(nil), '\n'))
}

// isNetError reports whether err is the failure of an HTTP exchange
// itself (the server could not be reached, or the connection broke), not
// an HTTP status.
func isNetError(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue)
}

// redact removes from err's message the server's URL but for its scheme
// and host: its path or query may hold a secret (an API key), and errors
// end up in logs and events. The go-sdk formats the URL into its messages
// (as net/http's *url.Error does), so it is cut from the text; the chain
// is kept for errors.Is and errors.As.
func (b *connStream) redact(err error) error {
	msg := err.Error()
	safe := msg
	var ue *url.Error
	if errors.As(err, &ue) {
		safe = strings.ReplaceAll(safe, ue.URL, hostOnly(ue.URL))
	}
	safe = strings.ReplaceAll(safe, b.url, hostOnly(b.url))
	if safe == msg {
		return err
	}
	return &redactedError{msg: safe, err: err}
}

func hostOnly(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(url)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// listen keeps the standalone GET stream of the Streamable HTTP transport
// open: the server sends on it what relates to no request. It reconnects
// (with Last-Event-ID, after the delay the server asked for) when the
// stream ends. The connection counts as lost when the stream cannot be
// reopened listenRetries times in a row (the server is unreachable or
// answers 5xx), or when the server says the session is gone (404) or
// refuses the credentials (401, 403). A server that offers no stream (405,
// another 4xx, not an event stream) or whose streams keep ending at once
// is left alone.
func (b *connStream) listen() {
	var lastID string
	var retry time.Duration
	failures, empties := 0, 0
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			d := retry
			if failures > 0 || d <= 0 {
				d = listenDelay << min(failures, 10)
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-b.ctx.Done():
				t.Stop()
				return
			}
		}
		resp, err := b.get(lastID)
		if b.ctx.Err() != nil {
			if err == nil {
				resp.Body.Close()
			}
			return
		}
		if err != nil {
			if failures++; failures > listenRetries {
				b.fail(fmt.Errorf("standalone SSE stream: %w", err))
				return
			}
			continue
		}
		ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		switch code := resp.StatusCode; {
		case code == http.StatusUnauthorized || code == http.StatusForbidden:
			resp.Body.Close()
			b.fail(fmt.Errorf("standalone SSE stream: HTTP %d %s", code, http.StatusText(code)))
			return
		case code == http.StatusNotFound && b.conn.SessionID() != "":
			resp.Body.Close()
			b.fail(fmt.Errorf("standalone SSE stream: %w", mcp.ErrSessionMissing))
			return
		case code >= 500:
			resp.Body.Close()
			if failures++; failures > listenRetries {
				b.fail(fmt.Errorf("standalone SSE stream: HTTP %d %s", code, http.StatusText(code)))
				return
			}
			continue
		case code < 200 || code >= 300 || ct != "text/event-stream":
			resp.Body.Close()
			b.log.Debug("the server offers no standalone SSE stream", "status", code, "content-type", ct)
			return
		}
		failures = 0
		start := time.Now()
		progressed, r, err := b.readEvents(resp.Body, &lastID, func(data []byte) bool {
			b.deliver(data)
			return true
		})
		resp.Body.Close()
		if b.ctx.Err() != nil {
			return
		}
		if r > 0 {
			retry = r
		}
		if progressed || time.Since(start) >= listenHealthy {
			empties = 0
		} else if empties++; empties > listenRetries {
			b.log.Warn("the standalone SSE stream keeps ending at once; no longer listening", "err", err)
			return
		}
	}
}

// get opens the standalone stream.
func (b *connStream) get(lastID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, b.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if sid := b.conn.SessionID(); sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	return b.client.Do(req)
}

// readEvents hands the data of each message event of an event stream to
// message (which must not keep it) until the stream ends or message
// returns false. It reports whether any event arrived, and the
// reconnection delay the server asked for.
func (b *connStream) readEvents(body io.Reader, lastID *string, message func(data []byte) bool) (progressed bool, retry time.Duration, err error) {
	r := sse.NewReader(body, maxEvent)
	defer func() {
		if id, sent := r.LastID(); sent {
			*lastID, progressed = id, true
		}
		retry, _ = r.Retry()
	}()
	for {
		ev, err := r.Next()
		switch {
		case errors.Is(err, sse.ErrEventTooLarge):
			b.log.Warn("dropping an oversized event from the standalone stream", "limit", maxEvent)
			continue
		case err == io.EOF:
			return progressed, retry, nil
		case err != nil:
			return progressed, retry, err
		case ev.Type != "message":
			continue
		}
		progressed = true
		if !message(ev.Data) {
			return progressed, retry, nil
		}
	}
}

// deliver passes one event's message on as a line, unchanged but for
// insignificant white space.
func (b *connStream) deliver(data []byte) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		b.log.Warn("dropping an event from the standalone stream that is not JSON", "err", err)
		return
	}
	buf.WriteByte('\n')
	_, _ = b.pw.Write(buf.Bytes())
}

// headerTransport adds the configured headers and, after initialize, the
// protocol version to every request; bounds the session's DELETE; notes
// refused credentials; and tells a request's state when its body closes.
type headerTransport struct {
	base    http.RoundTripper
	scheme  string
	host    string
	headers map[string]string
	auth    Authorizer // nil: the configured headers are all
	b       *connStream
}

// own reports whether u is at the server's own origin: its host, by its
// scheme — a redirect to another host, or from https down to http on the
// same one, carries neither the configured headers nor the token.
func (t *headerTransport) own(u *url.URL) bool {
	return u.Host == t.host && strings.EqualFold(u.Scheme, t.scheme)
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if t.own(r.URL) {
		for k, v := range t.headers {
			if http.CanonicalHeaderKey(k) == "Host" {
				r.Host = v
			} else if r.Header.Get(k) == "" {
				r.Header.Set(k, v)
			}
		}
	}
	if v := t.b.version.Load(); v != nil && r.Header.Get(protocolVersionHeader) == "" {
		r.Header.Set(protocolVersionHeader, *v)
	}
	var onClose []func()
	if r.Method == http.MethodDelete {
		ctx, cancel := context.WithTimeout(r.Context(), closeTimeout)
		stop := context.AfterFunc(t.b.endCtx, cancel) // abandoned past closeGuard
		r = r.WithContext(ctx)
		onClose = append(onClose, func() { stop(); cancel() })
	}
	if st, ok := r.Context().Value(callKey{}).(*callState); ok {
		onClose = append(onClose, st.closeBody)
	}
	var resp *http.Response
	var err error
	if t.auth != nil && t.own(r.URL) {
		resp, err = t.authorize(r)
	} else {
		resp, err = t.base.RoundTrip(r)
	}
	if err != nil {
		for _, f := range onClose {
			f()
		}
		return nil, err
	}
	switch code := resp.StatusCode; {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		t.b.denied.Store(int32(code))
	case code >= 200 && code < 300:
		t.b.denied.Store(0)
	}
	if len(onClose) > 0 {
		resp.Body = &hookedBody{ReadCloser: resp.Body, onClose: onClose}
	}
	return resp, nil
}

// hookedBody runs functions once, after the body is closed.
type hookedBody struct {
	io.ReadCloser
	once    sync.Once
	onClose []func()
}

func (h *hookedBody) Close() error {
	err := h.ReadCloser.Close()
	h.once.Do(func() {
		for _, f := range h.onClose {
			f()
		}
	})
	return err
}
