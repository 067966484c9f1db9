package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/link"
	"github.com/mcpvisor/mcpvisor/internal/replica"
)

// Replicas (the config's "replicas"; DESIGN decision 16). Each replica
// knows its ordinal, an incarnation new at each start, and where its
// peers are. What it issues that a later request names — a legacy
// session's id, a held call's requestState, a task id — is stamped with
// it (gateway.Stamper); a request naming what another replica owns is
// forwarded there in one hop, over a link (package link: one kept
// connection per peer, mutual TLS from the shared key), with the identity
// this replica verified (replicaSet.front); this replica limits and
// audits it, the owner decides and serves it (receiver.go). An owner that is
// gone — the connection refused, no TLS handshake within ownerTimeout, or
// a new incarnation under its ordinal — means 404 at once: a legacy
// client initializes again, as the specification tells it to. Nothing is
// stored anywhere.

// replicaSet is this replica among its peers. It is made once per serve
// and lives until serve ends; reloads change its settings in place.
type replicaSet struct {
	log  *slog.Logger
	self replica.Owner
	ring *replica.Ring

	cfg      atomic.Pointer[config.ReplicasConfig]
	maxCount atomic.Int64           // the largest count configured in this run
	version  atomic.Pointer[string] // the config version in force

	// draining: SIGTERM came; readiness is false, new sessions go to a
	// peer, what is in flight finishes (drain).
	draining atomic.Bool
	// inflight counts the requests being served on the public front
	// (POSTs but for subscriptions/listen, whose streams last): the
	// drain waits for it to reach zero.
	inflight atomic.Int64
	idle     chan struct{} // cap 1: inflight reached zero

	// access is the MCP routes' guard options: a request is admitted by
	// its route's guard before it is forwarded.
	access guard.Options

	// transport carries the peer API (placement, grants) over HTTP;
	// link carries forwarded MCP requests (package link), served by
	// linkSrv on the peer listener beside HTTP.
	transport *http.Transport
	link      *link.Transport
	linkSrv   *link.Server
	// relays ends what this replica relays for its clients (cutRelays):
	// a relayed stream (a legacy session's GET) would otherwise hold
	// the shutdown until its owner ends it.
	relays    context.Context
	cutRelays context.CancelFunc
	peerLn    net.Listener
	peerSrv   *http.Server
	// keyPoll is how often the key directory is read again (keyPoll
	// when the set was made); stopKeys ends that watch, and bg counts
	// the goroutines servePeers started (the watch and the peer
	// listener's serve loop), which close waits for.
	keyPoll  time.Duration
	stopKeys context.CancelFunc
	bg       sync.WaitGroup
	// forwarded counts requests forwarded to a peer, gone those whose
	// owner was gone, received those served for a peer.
	forwarded, gone, received atomic.Uint64
	// peerConns counts the connections peers opened here: a few per
	// peer, kept alive, unless something closes them per request.
	peerConns atomic.Uint64
	// lines are the audit lines of requests served for a peer on their
	// way to it (receiver.go); linesHere counts those it did not take,
	// written here.
	lines     tracker
	linesHere atomic.Uint64
	// queues are the lines on their way to each link's replica, one
	// sender each (receiver.go); queuesClosed, the set is closing and
	// takes no line.
	queueMu      sync.Mutex
	queues       map[asker]*lineQueue
	queuesClosed bool

	// claims are this replica's starts of servers placed here under way
	// (placement.go); running counts the process trees of a server here
	// (proc.Runtime.Running), servers names the servers (both set once
	// the app is open).
	claims  claims
	running func(name string) int
	servers func() []string
	// grants serves the OAuth grants this replica holds to its peers
	// (the fleet; set once the app is open).
	grants grantHolder
	// admit is this replica's admission (its audit's room, its rate
	// limits) and audit its audit in force, for the requests it
	// forwarded (receiver.go; set once the app is open).
	admit func(key, server, target string) gateway.Admission
	audit func() *audit.Log
	// cfgNow is the configuration in force, for placement checks.
	cfgNow atomic.Pointer[config.Config]
}

// ordinalFromEnv is this replica's ordinal: MCPVISOR_ORDINAL, else the
// trailing -N of POD_NAME (a StatefulSet's pod), else of the host name.
func ordinalFromEnv(getenv func(string) string) (int, error) {
	if v := strings.TrimSpace(getenv("MCPVISOR_ORDINAL")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > replica.MaxOrdinal {
			return 0, fmt.Errorf("MCPVISOR_ORDINAL=%q is not an ordinal (0 to %d)", v, replica.MaxOrdinal)
		}
		return n, nil
	}
	name := getenv("POD_NAME")
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return 0, fmt.Errorf("no MCPVISOR_ORDINAL or POD_NAME, and no host name: %w", err)
		}
		name = h
	}
	n, err := replica.OrdinalFromName(name)
	if err != nil {
		return 0, fmt.Errorf("no MCPVISOR_ORDINAL, and %w", err)
	}
	return n, nil
}

// openReplicas makes this replica's set from cfg (nil without a replicas
// block) and listens on its peer interface; nothing is served yet.
func openReplicas(cfg *config.Config, getenv func(string) string, log *slog.Logger) (*replicaSet, error) {
	rc := cfg.Replicas
	if rc == nil {
		return nil, nil
	}
	ord, err := ordinalFromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("replicas: %w", err)
	}
	keys, err := replica.LoadKeyDir(rc.KeyDir)
	if err != nil {
		return nil, fmt.Errorf("replicas: %w", err)
	}
	rs := &replicaSet{log: log, keyPoll: keyPoll, self: replica.Owner{Ordinal: ord, Incarnation: replica.NewIncarnation()},
		ring: replica.NewRing(keys), idle: make(chan struct{}, 1)}
	rs.relays, rs.cutRelays = context.WithCancel(context.Background())
	rs.cfg.Store(rc)
	rs.maxCount.Store(int64(rc.Count))
	rs.cfgNow.Store(cfg)
	v := cfg.Version
	rs.version.Store(&v)
	rs.transport = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: rs.cfg.Load().OwnerTimeout}
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig:     http1Only(rs.ring.ClientTLS()),
		TLSHandshakeTimeout: rc.OwnerTimeout,
		// The deployment's view and placement ask every peer at once.
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	rs.link = &link.Transport{Dial: rs.dialLink, Answer: rs.answer}
	rs.linkSrv = &link.Server{Log: log}
	listen := rc.ListenFor(ord)
	if listen == "" {
		return nil, fmt.Errorf("replicas: ordinal %d has no address in replicas.peers (%d listed)", ord, len(rc.Peers))
	}
	if rs.peerLn, err = net.Listen("tcp", listen); err != nil {
		return nil, fmt.Errorf("replicas: the peer interface: %w", err)
	}
	log.Info("replica", "ordinal", ord, "incarnation", rs.self.Incarnation, "count", rc.Count, "peer", rs.peerLn.Addr().String(), "key", keys.SigningID())
	return rs, nil
}

// keyPoll is how often the key directory is read again: the kubelet
// updates a mounted Secret in place, within a minute or so of its change.
var keyPoll = 5 * time.Second

// watchKeys reads the key directory every rs.keyPoll until ctx ends, and
// puts keys that changed in force (a rotation needs no restart).
func (rs *replicaSet) watchKeys(ctx context.Context) {
	t := time.NewTicker(rs.keyPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rs.readKeys()
		}
	}
}

// readKeys reads the key directory and puts its keys in force if they
// changed. Connections kept alive under the keys before are closed when
// idle, so that the next request is made under the new ones. A
// directory that does not read keeps the keys in force.
func (rs *replicaSet) readKeys() {
	keys, err := replica.LoadKeyDir(rs.cfg.Load().KeyDir)
	if err != nil {
		rs.log.Error("replicas: the peer keys do not read; the ones in force stay", "err", err)
		return
	}
	if slices.Equal(keys.AcceptedIDs(), rs.ring.Load().AcceptedIDs()) {
		return
	}
	rs.ring.Set(keys)
	rs.transport.CloseIdleConnections()
	rs.link.Retire()
	rs.log.Info("replicas: peer keys changed", "signing", keys.SigningID(), "accepted", strings.Join(keys.AcceptedIDs(), ","))
}

// reload takes a new config's replica settings and keys (the kubelet
// updates a mounted Secret in place). A key directory that no longer
// reads keeps the keys in force.
func (rs *replicaSet) reload(cfg *config.Config) {
	rs.cfg.Store(cfg.Replicas)
	if n := int64(cfg.Replicas.Count); n > rs.maxCount.Load() {
		rs.maxCount.Store(n)
	}
	rs.cfgNow.Store(cfg)
	v := cfg.Version
	rs.version.Store(&v)
	rs.readKeys()
}

// Stamp and Inner make rs the gateway's Stamper.
func (rs *replicaSet) Stamp(id string) string { return rs.ring.Load().Stamp(rs.self, id) }

func (rs *replicaSet) Inner(s string) string {
	if !replica.HasStamp(s) {
		return s
	}
	if _, inner, ok, err := rs.ring.Load().Unstamp(s); ok && err == nil {
		return inner
	}
	return s
}

// isMCPPath reports whether path is an MCP endpoint: /mcp, or
// /servers/{name}/mcp (the name returned) as the gateway's front routes
// it.
func isMCPPath(path string) (server string, ok bool) {
	if path == "/mcp" {
		return "", true
	}
	return gateway.ServerPath(path)
}

// maxPeekBody bounds the body the front reads to find what a 2026-07-28
// request names (a larger one is served where it landed: the gateway
// refuses it past its own bound anyway).
const maxPeekBody = 4 << 20

// ownerOf is what r names that a replica owns: the owner and whether r
// names one (a stamped session id, requestState or task id); the body,
// if read, is put back, and a 2026-07-28 request's JSON-RPC id set in
// *id for the answers the front may give it.
func (rs *replicaSet) ownerOf(r *http.Request, id *json.RawMessage) (o replica.Owner, legacy, found bool) {
	keys := rs.ring.Load()
	if sid := r.Header.Get("Mcp-Session-Id"); replica.HasStamp(sid) {
		o, _, ok, err := keys.Unstamp(sid)
		if ok && err == nil {
			return o, true, true
		}
		// Forged, or of a key no longer accepted: no session of anyone's;
		// the gateway says so.
		return replica.Owner{}, true, false
	}
	if r.Method != http.MethodPost || r.Body == nil || r.Header.Get("Mcp-Session-Id") != "" {
		return replica.Owner{}, false, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPeekBody+1))
	rest := r.Body
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), rest), rest}
	if err != nil || len(body) > maxPeekBody || !bytes.Contains(body, []byte(replica.StampPrefix)) {
		return replica.Owner{}, false, false
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Params struct {
			RequestState string `json:"requestState"`
			TaskID       string `json:"taskId"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &m) != nil {
		return replica.Owner{}, false, false
	}
	for _, s := range []string{m.Params.RequestState, m.Params.TaskID} {
		if replica.HasStamp(s) {
			if o, _, ok, err := keys.Unstamp(s); ok && err == nil {
				// The answer of an owner gone names the request.
				if validID(m.ID) {
					*id = m.ID
				}
				return o, false, true
			}
		}
	}
	return replica.Owner{}, false, false
}

// front serves next on the public listener, forwarding to its owner what
// another replica owns, and counting what is in flight for the drain.
func (rs *replicaSet) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		server, mcp := isMCPPath(r.URL.Path)
		if !mcp {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Method") != "subscriptions/listen" {
			rs.inflight.Add(1)
			defer rs.done()
		}
		var id json.RawMessage
		o, legacy, found := rs.ownerOf(r, &id)
		if id != nil {
			r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
		}
		switch {
		case !found:
			if rs.draining.Load() && newSession(r) {
				// A new legacy session while draining: a peer's.
				if to, ok := rs.peerForNew(); ok {
					rs.forwardNew(w, r, server, replica.Owner{Ordinal: to})
					return
				}
			}
			next.ServeHTTP(w, r)
		case o == rs.self:
			next.ServeHTTP(w, r)
		case o.Ordinal == rs.self.Ordinal || o.Ordinal >= rs.span():
			// Made by an earlier run of this replica, or by a replica the
			// deployment no longer has: gone.
			rs.gone.Add(1)
			rs.ownerGone(w, r, legacy, o)
		default:
			rs.forward(w, r, server, o, legacy)
		}
	})
}

// newSession reports whether r may be a legacy initialize: a POST with no
// session id and no 2026-07-28 protocol header.
func newSession(r *http.Request) bool {
	return r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" && r.Header.Get("Mcp-Method") == ""
}

// peerForNew is the peer a draining replica sends new sessions to: the
// next ordinal.
func (rs *replicaSet) peerForNew() (int, bool) {
	n := rs.cfg.Load().Count
	if n < 2 {
		return 0, false
	}
	return (rs.self.Ordinal + 1) % n, true
}

// done ends a counted request.
func (rs *replicaSet) done() {
	if rs.inflight.Add(-1) == 0 {
		select {
		case rs.idle <- struct{}{}:
		default:
		}
	}
}

// fwd is a forwarded request's destination and signed header, for the
// relay and its errors.
type fwd struct {
	to         replica.Owner
	legacy     bool
	newSession bool // a new session sent to a peer by a draining replica
	header     string
}

// forwardNew forwards a new legacy session to a peer: a draining
// replica's.
func (rs *replicaSet) forwardNew(w http.ResponseWriter, r *http.Request, server string, o replica.Owner) {
	rs.forwardAs(w, r, server, o, true, true)
}

// forward admits r as its route's guard would, then relays it to o's
// replica with the identity it carries, signed.
func (rs *replicaSet) forward(w http.ResponseWriter, r *http.Request, server string, o replica.Owner, legacy bool) {
	rs.forwardAs(w, r, server, o, legacy, false)
}

func (rs *replicaSet) forwardAs(w http.ResponseWriter, r *http.Request, server string, o replica.Owner, legacy, newSession bool) {
	access := rs.access
	access.Route = guard.Route{Path: "/mcp"}
	if server != "" {
		access.Route = guard.Route{Path: r.URL.Path, Server: server}
	}
	r, status := guard.New(access).Admit(w, r)
	if status != 0 {
		return
	}
	var idJSON json.RawMessage
	if id := identity.FromContext(r.Context()); id != nil {
		idJSON, _ = json.Marshal(id)
	}
	f := replica.Forwarded{From: rs.self.Ordinal, To: o.Ordinal, ToIncarnation: o.Incarnation, ConfigVersion: *rs.version.Load(),
		Identity: idJSON, Method: r.Method, Path: r.URL.Path, Expires: time.Now().Add(replica.ForwardLifetime)}
	rs.forwarded.Add(1)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(rs.relays, cancel)()
	rs.relay(w, r.WithContext(ctx), &fwd{to: o, legacy: legacy, newSession: newSession, header: rs.ring.Load().SignForward(f)})
}

// hopHeaders are of one connection: not relayed, either way.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// credentialHeaders stay here too: the owner trusts the signed identity.
var credentialHeaders = []string{"Authorization", "Cookie"}

// relay sends r over the link to its owner's peer interface and writes
// the answer back as it comes: a whole answer in one piece, a stream
// flushed at each piece.
func (rs *replicaSet) relay(w http.ResponseWriter, r *http.Request, f *fwd) {
	h := make(http.Header, len(r.Header)+1)
	for k, v := range r.Header {
		h[k] = v
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
	for _, k := range credentialHeaders {
		delete(h, k)
	}
	h[replica.ForwardHeader] = []string{f.header}
	out := (&http.Request{Method: r.Method, URL: &url.URL{Scheme: "link", Host: rs.cfg.Load().PeerOf(f.to.Ordinal), Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery},
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Body: r.Body, ContentLength: r.ContentLength}).WithContext(r.Context())
	out.Host = out.URL.Host
	if r.ContentLength == 0 {
		out.Body = http.NoBody
	}
	resp, err := rs.link.RoundTrip(out)
	if err == nil && resp.Header.Get(peerRefusedHeader) != "" {
		err = rs.refusal(resp, f)
	}
	if err != nil {
		rs.proxyError(w, r, f, err)
		return
	}
	defer resp.Body.Close()
	wh := w.Header()
	for k, v := range resp.Header {
		wh[k] = v
	}
	for _, k := range hopHeaders {
		delete(wh, k)
	}
	w.WriteHeader(resp.StatusCode)
	// A stream (an event stream, or an answer of no length) is flushed
	// as it comes; a whole answer is written once.
	stream := resp.ContentLength < 0 || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	rc := http.NewResponseController(w)
	for {
		n, rerr := resp.Body.Read(*bp)
		if n > 0 {
			if _, err := w.Write((*bp)[:n]); err != nil {
				return // the client went away: Close resets the stream
			}
			if stream {
				if err := rc.Flush(); err != nil {
					return
				}
			}
		}
		if rerr == io.EOF {
			return
		}
		if rerr != nil {
			if r.Context().Err() == nil {
				rs.log.Debug("replicas: a relayed answer was cut", "ordinal", f.to.Ordinal, "err", rerr)
			}
			// The status is written: the client sees the answer end
			// short, as from a broken connection.
			panic(http.ErrAbortHandler)
		}
	}
}

var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// proxyError answers a forward that failed: an owner that cannot be
// reached is gone (404, at once); anything else is a 502.
func (rs *replicaSet) proxyError(w http.ResponseWriter, r *http.Request, f *fwd, err error) {
	if rs.relays.Err() != nil {
		// This replica shuts down: the client, still there, retries
		// elsewhere.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "Service Unavailable: this replica is shutting down; retry", http.StatusServiceUnavailable)
		return
	}
	if f.newSession && linkGoneErr(err) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("Service Unavailable: this replica is draining and replica %d, which would take the new session, cannot be reached; retry", f.to.Ordinal), http.StatusServiceUnavailable)
		return
	}
	if linkGoneErr(err) && r.Context().Err() == nil {
		rs.gone.Add(1)
		rs.log.Debug("replicas: owner unreachable", "ordinal", f.to.Ordinal, "err", err)
		rs.ownerGone(w, r, f.legacy, f.to)
		return
	}
	if r.Context().Err() != nil {
		return // the client went away
	}
	if link.IsHeadTooLarge(err) {
		// The client's own: the link does not carry such a header.
		http.Error(w, "Request Header Fields Too Large: "+err.Error(), http.StatusRequestHeaderFieldsTooLarge)
		return
	}
	if errors.Is(err, link.ErrRefused) {
		// Refused unserved twice (the owner shuts down, or takes no more
		// streams): nothing ran; the client may send it again.
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("Service Unavailable: replica %d, which owns this request's session or state, refused it unserved; retry (%v)", f.to.Ordinal, err), http.StatusServiceUnavailable)
		return
	}
	rs.log.Warn("replicas: forwarding failed", "ordinal", f.to.Ordinal, "err", err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadGateway)
	_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":%q}}`+"\n",
		fmt.Sprintf("replica %d, which owns this request's session or state, failed to answer: %v", f.to.Ordinal, err))
}

// unreachable is the error of a link to a peer that could not be made
// (dialLink): the peer is gone.
type unreachable struct{ err error }

func (u *unreachable) Error() string { return u.err.Error() }
func (u *unreachable) Unwrap() error { return u.err }

// linkGoneErr reports whether err, a link's, says its owner is gone: the
// link could not be made (ownerGoneErr of the dial). What fails on a
// link made — a write timing out, the connection cut — is not: the owner
// may be alive, and its sessions with it.
func linkGoneErr(err error) bool {
	var u *unreachable
	return errors.As(err, &u)
}

// ownerGoneErr reports whether err says a peer is gone: its address
// refuses connections (or names no host), or no TLS handshake came within
// ownerTimeout. A handshake refused — a key the peer does not accept —
// is a misconfiguration, not an owner gone.
func ownerGoneErr(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// ownerGone answers a request whose owner is gone: a legacy session's
// with the 404 the specification tells a client to initialize again
// after; a requestState's or task id's with a JSON-RPC error saying what
// to do.
func (rs *replicaSet) ownerGone(w http.ResponseWriter, r *http.Request, legacy bool, o replica.Owner) {
	if legacy {
		http.Error(w, "Not Found: no such session (the replica that held it is gone; initialize again)", http.StatusNotFound)
		return
	}
	id, _ := r.Context().Value(requestIDKey{}).(json.RawMessage)
	if !validID(id) {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":%q}}`+"\n", id,
		fmt.Sprintf("Invalid params: the replica that held this request (ordinal %d) is gone; send the request again without requestState, or create the task again", o.Ordinal))
}

// requestIDKey carries the JSON-RPC id of a 2026-07-28 request the front
// read, for its answers.
type requestIDKey struct{}

// validID reports whether id is a JSON-RPC id: a string or a number.
func validID(id json.RawMessage) bool {
	var v any
	if len(id) == 0 || json.Unmarshal(id, &v) != nil {
		return false
	}
	switch v.(type) {
	case string, float64:
		return true
	}
	return false
}

// peerHandler serves the peer interface: requests another replica
// forwarded here, checked (signature, owner, incarnation, path) and
// served by local — the public front's handler without forwarding, so
// that nothing goes a second hop.
func (rs *replicaSet) peerHandler(local http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			peerRefused(w, http.StatusForbidden, "Forbidden: the peer interface is for replicas")
			return
		}
		f, err := rs.ring.Load().VerifyForward(r.Header.Get(replica.ForwardHeader), time.Now())
		if err != nil {
			peerRefused(w, http.StatusForbidden, "Forbidden: "+err.Error())
			return
		}
		if f.Method != r.Method || f.Path != r.URL.Path {
			peerRefused(w, http.StatusForbidden, "Forbidden: the forwarding header is another request's")
			return
		}
		if f.To != rs.self.Ordinal {
			// Never a second hop: the sender's routing is wrong.
			peerRefused(w, http.StatusMisdirectedRequest, fmt.Sprintf("Misdirected Request: this is replica %d, not %d", rs.self.Ordinal, f.To))
			return
		}
		if strings.HasPrefix(r.URL.Path, peerPath) {
			rs.servePeerAPI(w, r)
			return
		}
		server, mcp := isMCPPath(r.URL.Path)
		if !mcp {
			http.NotFound(w, r)
			return
		}
		if f.ToIncarnation != "" && f.ToIncarnation != rs.self.Incarnation {
			rs.gone.Add(1)
			legacy := r.Header.Get("Mcp-Session-Id") != ""
			if !legacy {
				// The answer names the request: its id, from its body.
				var m struct {
					ID json.RawMessage `json:"id"`
				}
				if b, err := io.ReadAll(io.LimitReader(r.Body, maxPeekBody)); err == nil && json.Unmarshal(b, &m) == nil && validID(m.ID) {
					r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, m.ID))
				}
			}
			rs.ownerGone(w, r, legacy, replica.Owner{Ordinal: f.To, Incarnation: f.ToIncarnation})
			return
		}
		var id *identity.Identity
		if len(f.Identity) > 0 {
			id = new(identity.Identity)
			if err := json.Unmarshal(f.Identity, id); err != nil {
				http.Error(w, "Bad Request: the forwarded identity does not decode", http.StatusBadRequest)
				return
			}
			id.Finish()
		}
		if id == nil && rs.access.Team != nil && rs.access.Team.Config() != nil {
			// This replica checks tokens; the sender did not: their
			// configs differ (auth being rolled out). Nothing unchecked
			// is served.
			peerRefused(w, http.StatusForbidden, fmt.Sprintf("Forbidden: replica %d forwarded a request without an identity, and this replica requires one (their configurations differ: %s here, %s there)", f.From, *rs.version.Load(), f.ConfigVersion))
			return
		}
		if id.Decided() && (server == "" || !rs.owns(rs.cfgNow.Load(), server)) {
			// A peer's connection to a server placed here: only to one
			// this replica runs under its own config.
			rs.misplaced(w, f, server)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Method") != "subscriptions/listen" {
			// The drain waits for what peers sent here as for what
			// clients did.
			rs.inflight.Add(1)
			defer rs.done()
		}
		rs.received.Add(1)
		r.Header.Del(replica.ForwardHeader)
		ctx := guard.Vouched(r.Context(), id)
		if p := link.PeerOf(ctx); p != nil {
			// The replica the client reached limits the request and
			// audits it (receiver.go); this one decides and serves it.
			ctx = gateway.WithReceiver(ctx, linkReceiver{rs, p})
		}
		local.ServeHTTP(w, r.WithContext(ctx))
	})
}

// peerRefusedHeader marks an answer of the peer interface that refused a
// request as a peer's (its key, its header, its routing): the forwarding
// replica answers its client 502 naming the replica, never passing the
// refusal on as if it were the client's own.
const peerRefusedHeader = "Mcpvisor-Peer-Refused"

func peerRefused(w http.ResponseWriter, status int, msg string) {
	w.Header().Set(peerRefusedHeader, "1")
	http.Error(w, msg, status)
}

// refusal is the error of a peer's refusal, for this replica's 502.
func (rs *replicaSet) refusal(resp *http.Response, f *fwd) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	resp.Body.Close()
	return fmt.Errorf("%w: replica %d refused the forwarded request: %s", errPeerRefused, f.to.Ordinal, strings.TrimSpace(string(b)))
}

var errPeerRefused = errors.New("peer refused")

// servePeers serves the peer interface until it is closed, and watches
// the keys until ctx ends.
func (rs *replicaSet) servePeers(ctx context.Context, local http.Handler) {
	ctx, rs.stopKeys = context.WithCancel(ctx)
	rs.bg.Go(func() { rs.watchKeys(ctx) })
	h := rs.peerHandler(local)
	rs.linkSrv.Handler = h
	srv := &http.Server{Handler: h, TLSConfig: rs.ring.ServerTLS(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		// A peer's link is served on the same listener as the peer API,
		// told apart by ALPN; net/http hands the connection over after
		// its handshake and tracks it until ServeConn returns.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){
			link.Proto: func(_ *http.Server, c *tls.Conn, _ http.Handler) { rs.linkSrv.ServeConn(c) },
		},
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				rs.peerConns.Add(1)
			}
		},
		ErrorLog: slog.NewLogLogger(rs.log.Handler(), slog.LevelDebug)}
	rs.peerSrv = srv
	rs.bg.Go(func() {
		if err := srv.ServeTLS(rs.peerLn, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			rs.log.Error("replicas: the peer interface failed", "err", err)
		}
	})
}

// drain makes the replica unready and waits, within the drain timeout,
// drainDelay for the balancer to stop sending here (requests meanwhile
// are served, new sessions go to a peer), then for the requests in
// flight to finish.
func (rs *replicaSet) drain(ctx context.Context) {
	rs.draining.Store(true)
	rc := rs.cfg.Load()
	rs.log.Info("replicas: draining", "delay", rc.DrainDelay, "timeout", rc.DrainTimeout, "inflight", rs.inflight.Load())
	ctx, cancel := context.WithTimeout(ctx, rc.DrainTimeout)
	defer cancel()
	t := time.NewTimer(rc.DrainDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return
	}
	rs.waitIdle(ctx, rc.DrainTimeout)
	if n := rs.inflight.Load(); n > 0 {
		rs.log.Warn("replicas: drain timed out with requests in flight", "inflight", n)
	}
}

// waitIdle waits, at most bound and within ctx, for the counted requests
// in flight to end.
func (rs *replicaSet) waitIdle(ctx context.Context, bound time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for rs.inflight.Load() > 0 {
		select {
		case <-rs.idle:
		case <-ctx.Done():
			return
		}
	}
}

// close ends the peer interface (after the sessions it served ended).
func (rs *replicaSet) close(ctx context.Context) {
	rs.cutRelays()
	// The audit lines on their way to peers are answered while the links
	// are up (a line whose answer a closing link lost would be written
	// twice), within ctx; what is left, and any line that comes later, is
	// written here.
	rs.closeLines(ctx)
	if rs.peerSrv != nil {
		// The links' streams finish within ctx, as the HTTP
		// exchanges do; then what is left is cut.
		done := make(chan struct{})
		go func() {
			defer close(done)
			rs.linkSrv.Shutdown(ctx)
		}()
		_ = rs.peerSrv.Shutdown(ctx)
		<-done
		rs.linkSrv.Close()
	} else if rs.peerLn != nil {
		_ = rs.peerLn.Close()
	}
	rs.link.Close()
	rs.transport.CloseIdleConnections()
	// A sender still asking has its answer cut by the links' close.
	rs.waitLines()
	// What servePeers started ends with the set: the watch on its
	// cancel, the serve loop once Shutdown closed its listener.
	if rs.stopKeys != nil {
		rs.stopKeys()
	}
	rs.bg.Wait()
}

// tracker counts goroutines of something that closes: once closed, it
// starts none, and closeAndWait waits for those under way.
type tracker struct {
	mu     sync.Mutex
	closed bool
	n      int
	zero   chan struct{} // closed when n reaches 0 after close
}

// start counts one more, unless closed.
func (t *tracker) start() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.n++
	return true
}

func (t *tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
}

// closeAndWait closes t and waits, within ctx, for what it counts.
func (t *tracker) closeAndWait(ctx context.Context) {
	t.mu.Lock()
	t.closed = true
	if t.n == 0 {
		t.mu.Unlock()
		return
	}
	if t.zero == nil {
		t.zero = make(chan struct{})
	}
	zero := t.zero
	t.mu.Unlock()
	select {
	case <-zero:
	case <-ctx.Done():
	}
}

// ready is the replica's own readiness: "" when ready, else why not.
func (rs *replicaSet) ready() string {
	if rs == nil {
		return ""
	}
	if rs.draining.Load() {
		return "draining"
	}
	if rc := rs.cfg.Load(); rs.self.Ordinal >= rc.Count {
		return fmt.Sprintf("ordinal %d is outside the configured count %d", rs.self.Ordinal, rc.Count)
	}
	return ""
}

// dialLink connects to a peer's link: a TCP connection within
// ownerTimeout, and a TLS handshake within it too. A refused
// connection's error is the dial's (*net.OpError), a handshake that
// does not come a timeout: both say the owner is gone (unreachable).
func (rs *replicaSet) dialLink(ctx context.Context, addr string) (net.Conn, error) {
	bound := rs.cfg.Load().OwnerTimeout
	d := net.Dialer{Timeout: bound}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ownerGoneErr(err) {
			err = &unreachable{err}
		}
		return nil, err
	}
	cfg := rs.ring.ClientTLS()
	cfg.NextProtos = []string{link.Proto}
	tc := tls.Client(nc, cfg)
	hctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		nc.Close()
		if hctx.Err() != nil && ctx.Err() == nil {
			return nil, &unreachable{fmt.Errorf("no TLS handshake from %s within %v: %w", addr, bound, context.DeadlineExceeded)}
		}
		return nil, err
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != link.Proto {
		tc.Close()
		return nil, fmt.Errorf("the peer at %s speaks no link (ALPN %q): it runs another version", addr, p)
	}
	return tc, nil
}

// http1Only is c speaking HTTP/1.1 only.
func http1Only(c *tls.Config) *tls.Config {
	c = c.Clone()
	c.NextProtos = []string{"http/1.1"}
	return c
}
