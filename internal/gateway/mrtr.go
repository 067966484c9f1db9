package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Multi Round-Trip Requests for modern clients of legacy servers
// (2026-07-28, basic/patterns/mrtr). A legacy server asks its client for
// sampling, elicitation or roots by sending a request while it serves a
// call; a modern client takes no requests. So mcpvisor keeps the server's
// call open — held — and answers the client with an input_required result
// carrying the server's requests and a requestState that only mcpvisor can
// have made (HMAC-SHA256 under a key of this run), bound to the method and
// parameters of the call and to a deadline. The client's retry, with
// inputResponses, answers the server's requests; its response is the
// call's result, or the next input_required round. A held call whose
// client does not come back within the hold bound is cancelled at the
// server, and its server's requests get errors.

// mrtrMethod reports whether a modern client's method may get an
// input_required result (mrtr: tools/call, prompts/get, resources/read).
func mrtrMethod(method string) bool {
	return method == "tools/call" || method == "prompts/get" || method == "resources/read"
}

// DefaultHoldTimeout bounds how long a held call waits for its client's
// retry.
const DefaultHoldTimeout = config.DefaultHoldTimeout

// maxHeld bounds the calls held at once, and maxPendingInputs the server
// requests one held call has waiting: beyond them, servers' requests are
// refused.
const (
	maxHeld          = 1024
	maxPendingInputs = 16
)

// A round gathers the requests a server sends together: it is answered
// once the server has sent none for gatherQuiet, or gatherMax after its
// first. SDKs ask for a round's inputs at once (the go-sdk from one
// goroutine each): they come microseconds apart, and the client gets them
// in one round, not one round each.
const (
	gatherQuiet = 25 * time.Millisecond
	gatherMax   = 250 * time.Millisecond
)

// endpointName is the name of an endpoint's server, "" for the aggregated
// endpoint (nil).
func endpointName(srv *fleet.Server) string {
	if srv == nil {
		return ""
	}
	return srv.Name()
}

// statePrefix marks a requestState mcpvisor made; any other passes
// through to the server as the server's own.
const statePrefix = "mcpv1."

// heldCall is a modern client's call on a legacy server, held across
// input_required rounds.
type heldCall struct {
	g        *Gateway
	endpoint *fleet.Server   // the server of the endpoint serving it, nil for the aggregated one
	req      *rpc.Message    // the request as the client sent it
	rawCaps  json.RawMessage // the client's declared capabilities
	id       string
	server   string
	method   string
	digest   string
	caps     map[string]json.RawMessage // the client's declared capabilities
	mreq     *modernReq                 // the request it holds the call of, ended with it
	cancel   context.CancelCauseFunc    // ends the server's call, once it began
	sink     swapSink                   // the current round's stream, nil between rounds
	front    *heldFront                 // the front the request came on (nil: none to answer to)

	mu      sync.Mutex
	pending map[string]*heldInput // by input key, waiting for the client
	final   *rpc.Message          // the server's answer, once it came
	needCap string                // a capability the server needs and the client did not declare
	call    *call                 // the forwarded call, once the server asked for input
	changed chan struct{}         // closed, and replaced, whenever there is something new
	first   time.Time             // when the first input of the round pending came
	last    time.Time             // when the latest input came
	rounds  int                   // rounds begun; only the latest is answered
	seq     int
	ended   bool
	expires time.Time
	expiry  *time.Timer // ends the call at expires
}

// A heldFront is the front modern requests come on (an HTTP handler, a
// stdio connection), as the calls held for its clients' retries need it:
// they end when it closes — no held call outlives the front its client
// would retry on — and each counts as its activity while it is held (a
// stdio mcpvisor with an idle exit does not exit while a client's user
// answers an elicitation).
type heldFront struct {
	act    Activity // may be nil
	mu     sync.Mutex
	closed bool
	calls  map[*heldCall]struct{}
}

// add takes h as one of the front's held calls (once: a second add of h
// is a no-op); false if the front has closed (h is then not held).
func (f *heldFront) add(h *heldCall) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	if _, ok := f.calls[h]; ok {
		return true
	}
	if f.calls == nil {
		f.calls = map[*heldCall]struct{}{}
	}
	f.calls[h] = struct{}{}
	if f.act != nil {
		f.act.Begin()
	}
	return true
}

// remove lets go of h, once held.
func (f *heldFront) remove(h *heldCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.calls[h]; !ok {
		return
	}
	delete(f.calls, h)
	if f.act != nil {
		f.act.End()
	}
}

// close ends every call the front holds, and any it would take later.
func (f *heldFront) close() {
	f.mu.Lock()
	f.closed = true
	calls := slices.Collect(maps.Keys(f.calls))
	f.mu.Unlock()
	for _, h := range calls {
		h.end()
	}
}

// signal wakes every round waiting; never blocks.
func (h *heldCall) signal() {
	h.mu.Lock()
	h.signalLocked()
	h.mu.Unlock()
}

func (h *heldCall) signalLocked() {
	if h.changed != nil {
		close(h.changed)
	}
	if h.ended {
		h.changed = nil // a round sees the end before it would wait
		return
	}
	h.changed = make(chan struct{})
}

// heldInput is one server request waiting for the client's answer.
type heldInput struct {
	conn      fleet.Conn
	backendID json.RawMessage
	method    string
	params    json.RawMessage
}

// swapSink forwards to the current round's stream.
type swapSink struct {
	mu  sync.Mutex
	cur Sink
}

func (s *swapSink) Send(m *rpc.Message) error {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil {
		return ErrNoStream
	}
	return cur.Send(m)
}

func (s *swapSink) set(to Sink) {
	s.mu.Lock()
	s.cur = to
	s.mu.Unlock()
}

// forwardHeld forwards a modern client's call to a legacy server so that
// the server's requests during it become input_required rounds.
func (g *Gateway) forwardHeld(ctx context.Context, mr *modernReq, srv *fleet.Server, m *rpc.Message, params json.RawMessage, related Sink) *rpc.Message {
	// m is the request as the server gets it (a prefixed name replaced by
	// the server's own); mr.msg is as the client sent it, which its retry
	// repeats. Most calls get no server request: what only a held call
	// needs — its id, digest, deadline, registration — is made when the
	// first one comes (escalate).
	h := &heldCall{
		g: g, endpoint: mr.srv, server: srv.Name(), method: m.Method, req: mr.msg, rawCaps: mr.mo.Caps,
		changed: make(chan struct{}), front: mr.mo.front,
	}
	h.sink.set(related)
	// The call outlives the request that began it if it is held: it is
	// the held call's, on the request (which it ends), ended by the
	// client's last round, its going away, or the hold bound.
	h.mreq = mr
	mr.held = h
	// Until the server asks for input the call is bound to the client's
	// request — its going away ends the call, even while the server is
	// still being started (begin) or the request written (Start) — and
	// only then to the hold bound (unbind).
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	h.cancel = cancel
	unbind := context.AfterFunc(ctx, h.end)
	f, resp := g.begin(hctx, cancel, sender{req: mr}, srv, m.Method, params, m.ID, &h.sink)
	if resp != nil {
		unbind()
		h.end()
		return resp
	}
	// Most calls get no server request: the answer is waited for here,
	// on the request's goroutine, bound to the request. Only when the
	// server asks for input does the wait move to a goroutine of its own,
	// and the call to the hold bound.
	// changed is taken before the request is sent: whatever the server
	// asks for from then on closes it (taken later, it may be the channel
	// that replaced the one closed, and the wait would miss the request).
	h.mu.Lock()
	changed := h.changed
	h.mu.Unlock()
	w, err := f.conn.Start(f.context(), m.Method, f.params)
	if err != nil {
		unbind()
		resp := f.finish(nil, err)
		h.end()
		return resp
	}
	if testHookStarted != nil {
		testHookStarted(h)
	}
	r, interrupted, err := w.Wait(f.context(), changed)
	unbind()
	if interrupted {
		h.mu.Lock()
		ended := h.ended
		h.mu.Unlock()
		if !ended {
			// The server's answer is waited for on a goroutine of its
			// own, for the rounds to take.
			go func() {
				r, _, err := w.Wait(f.context(), nil)
				if err == nil && f.context().Err() != nil {
					// Answered as the call ended (its hold ran out, its
					// client went away): no round takes the answer, and
					// the call counts as ended, whichever of the server's
					// answer and the cancellation came first.
					r, err = nil, f.context().Err()
				}
				resp := f.finish(r, err)
				h.mu.Lock()
				h.final = resp
				h.mu.Unlock()
				h.signal()
			}()
			return h.round(ctx, m.ID)
		}
		// Ended (the client went away): the server's call is cancelled,
		// and its answer comes at once.
		r, _, err = w.Wait(f.context(), nil)
	}
	resp = f.finish(r, err)
	if e := h.capabilityError(m.ID); e != nil {
		// The server asked for what the client did not declare, was
		// refused and answered at once: the client is told what was
		// missing, not the server's failure.
		resp = e
	}
	h.end()
	return resp
}

// capabilityError is the MissingRequiredClientCapability error for id if
// the server asked for input the client did not declare, else nil.
func (h *heldCall) capabilityError(id json.RawMessage) *rpc.Message {
	h.mu.Lock()
	needCap := h.needCap
	h.mu.Unlock()
	return capabilityError(id, h.server, needCap)
}

// capabilityError is the MissingRequiredClientCapability error for id
// when server asked for input needing capability needCap, or nil if
// needCap is "".
func capabilityError(id json.RawMessage, server, needCap string) *rpc.Message {
	if needCap == "" {
		return nil
	}
	data := mustJSON(map[string]any{"requiredCapabilities": map[string]json.RawMessage{needCap: json.RawMessage(`{}`)}})
	return &rpc.Message{ID: id, Error: &rpc.Error{Code: rpc.MissingClientCapability,
		Message: fmt.Sprintf("server %s needs the %s capability, which the request did not declare", server, needCap), Data: data}}
}

// givesInput reports whether a modern client declared a capability a
// legacy server's request could need (sampling, elicitation, roots): only
// then can its call need input_required rounds. Without, every such
// request is refused and the call answers MissingRequiredClientCapability.
func (mo *Modern) givesInput() bool {
	var v [3]json.RawMessage
	rpc.MembersInto(v[:], mo.Caps, "sampling", "elicitation", "roots")
	return v[0] != nil || v[1] != nil || v[2] != nil
}

// testHookStarted, if set, runs as soon as a modern call's request is
// sent, before its answer is waited for (tests order events with it).
var testHookStarted func(*heldCall)

// escalate makes h a held call, once: it gets its id, the digest of its
// request, its deadline, and a place in the gateway's table and its
// front's. false if the table is full or the front has closed (then the
// server's request is refused). The front takes it outside the gateway's
// locks: its Activity is the caller's code.
func (h *heldCall) escalate() bool {
	h.mu.Lock()
	held, ended := h.id != "", h.ended
	h.mu.Unlock()
	if held {
		return true
	}
	if ended || (h.front != nil && !h.front.add(h)) {
		return false // ended, or the front closed: no client can retry
	}
	ok := h.register()
	if !ok && h.front != nil {
		h.front.remove(h)
	}
	return ok
}

// register gives h its id and place in the gateway's table (escalate);
// false if the table is full or h has ended.
func (h *heldCall) register() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.id != "" {
		return true
	}
	if h.ended {
		return false
	}
	g := h.g
	id := secretID("")
	if !g.held.add(id, h) {
		return false
	}
	h.id = id
	h.digest = salientDigest(h.req.Params)
	hold := g.holdFor()
	h.expires = time.Now().Add(hold)
	_ = json.Unmarshal(h.rawCaps, &h.caps)
	h.expiry = time.AfterFunc(hold, h.end)
	return true
}

// round waits, within the client's request ctx, for what comes next: a
// server request (answered with input_required, listing every input still
// missing), or the final response (with id, the round's request id). A
// client that goes away mid-round abandons the call.
func (h *heldCall) round(ctx context.Context, id json.RawMessage) *rpc.Message {
	h.mu.Lock()
	h.rounds++
	me := h.rounds
	h.signalLocked() // an earlier round still waiting is superseded
	h.mu.Unlock()
	for {
		h.mu.Lock()
		if me != h.rounds {
			h.mu.Unlock()
			return errorResponse(id, rpc.InvalidParams, "Invalid params: a later retry of this request took its place")
		}
		final, needCap, ended, pending := h.final, h.needCap, h.ended, len(h.pending)
		if final != nil {
			h.final = nil // one round gets it
		}
		changed := h.changed
		var gather time.Duration
		if pending > 0 {
			now := time.Now()
			gather = min(h.last.Add(gatherQuiet).Sub(now), h.first.Add(gatherMax).Sub(now))
		}
		h.mu.Unlock()
		switch {
		case needCap != "":
			// Before the final answer: a server refused what it asked
			// for may answer at once, and the client is to learn what it
			// did not declare.
			e := h.capabilityError(id)
			h.stop(false)
			return e
		case final != nil:
			h.end()
			final.ID = id
			return final
		case ended:
			return errorResponse(id, rpc.InvalidParams, "Invalid params: the request ended (answered on another retry, abandoned or expired); send it again without requestState")
		case pending > 0 && gather <= 0:
			if r := h.missing(id); r != nil {
				// Between rounds nothing is the client's to see: no
				// request of its is active.
				h.sink.set(nil)
				return r
			}
			continue // the server withdrew what it asked: wait on
		}
		var after <-chan time.Time
		var gt *time.Timer
		if gather > 0 {
			gt = time.NewTimer(gather)
			after = gt.C
		}
		cancelled := false
		select {
		case <-changed:
		case <-after:
		case <-ctx.Done():
			cancelled = true
		}
		if gt != nil {
			gt.Stop()
		}
		if cancelled {
			h.end()
			return errorResponse(id, rpc.BackendUnavailable, fmt.Sprintf("request to server %s cancelled: %v", h.server, context.Cause(ctx)))
		}
	}
}

// missing is the input_required result for the inputs the client still
// owes, or nil if it owes none.
func (h *heldCall) missing(id json.RawMessage) *rpc.Message {
	h.mu.Lock()
	if len(h.pending) == 0 {
		h.mu.Unlock()
		return nil // withdrawn since the round looked (withdraw)
	}
	reqs := make(map[string]json.RawMessage, len(h.pending))
	for k, in := range h.pending {
		reqs[k] = mustJSON(map[string]json.RawMessage{"method": mustJSON(in.method), "params": nonEmpty(in.params)})
	}
	state := h.g.signState(h)
	h.mu.Unlock()
	res := mustJSON(map[string]any{
		"resultType":    "input_required",
		"inputRequests": reqs,
		"requestState":  state,
	})
	return resultResponse(id, res)
}

func nonEmpty(p json.RawMessage) json.RawMessage {
	if len(p) == 0 {
		return json.RawMessage(`{}`)
	}
	return p
}

// declared reports whether h's client declared capability capName (read
// from rawCaps, set when h was made: h.caps is parsed only once h holds).
func (h *heldCall) declared(capName string) bool {
	return rpc.Member(h.rawCaps, capName) != nil
}

// offer takes a server request that came during the held call: false if
// the client cannot be asked it (it did not declare the capability, or too
// many are pending), in which case the server is refused.
func (h *heldCall) offer(conn fleet.Conn, m *rpc.Message, c *call) (bool, string) {
	capName := capabilityOf(m.Method)
	if capName == "" {
		return false, fmt.Sprintf("mcpvisor cannot forward %s to an MCP %s client", m.Method, modernVersion)
	}
	if !h.escalate() {
		return false, "too many calls wait for their clients' input, or the request has ended"
	}
	h.mu.Lock()
	defer h.signal()
	defer h.mu.Unlock()
	if h.ended {
		return false, "the client's request has ended"
	}
	if _, declared := h.caps[capName]; !declared {
		// The server gets a refusal; the client, for what the call
		// needed (sampling, elicitation: asked while the server serves
		// it), MissingRequiredClientCapabilityError for its request.
		// Roots a server asks for on its own, whatever the call: refused,
		// it goes on, as with a client that did not declare them.
		if callScoped(capMethod(capName)) {
			h.needCap = capName
		}
		return false, fmt.Sprintf("the client did not declare the %s capability", capName)
	}
	if len(h.pending) >= maxPendingInputs {
		return false, "too many requests wait for the client"
	}
	h.seq++
	key := "mcpv-" + strconv.Itoa(h.seq)
	if len(h.pending) == 0 {
		h.pending = map[string]*heldInput{}
		h.first = time.Now()
	}
	h.last = time.Now()
	h.pending[key] = &heldInput{conn: conn, backendID: m.ID, method: m.Method, params: m.Params}
	// While the client owes the input, the call's request timeout does not
	// run (the hold bounds the wait).
	h.call = c
	c.waiting.Add(1)
	return true, ""
}

// answer gives the server the client's inputResponses for pending inputs;
// responses to anything else are ignored (mrtr: unexpected ones are).
func (h *heldCall) answer(responses map[string]json.RawMessage) {
	h.mu.Lock()
	var done []*heldInput
	var results []json.RawMessage
	for k, v := range responses {
		if in := h.pending[k]; in != nil {
			delete(h.pending, k)
			done = append(done, in)
			results = append(results, v)
		}
	}
	c := h.call
	h.mu.Unlock()
	for i, in := range done {
		in, result := in, results[i]
		h.g.outbox.post(in.conn, func() { _ = in.conn.Reply(in.backendID, result) })
		if c != nil {
			// The timeout restarts before the wait ends: a timer that
			// fires in between sees the wait and runs again.
			c.touch()
			c.waiting.Add(-1)
		}
	}
}

// refusedGrace is how long a server refused the input it asked for has to
// end its call before mcpvisor cancels it (a variable for tests).
var refusedGrace = 5 * time.Second

// errRefusedUnanswered is why such a call is cancelled.
var errRefusedUnanswered = errors.New("the server did not end its call after mcpvisor refused its request for the client's input")

// withdraw drops the pending input that is conn's request id, which the
// server cancelled: the client is not asked it (or its answer is ignored),
// and it no longer holds the call's request timeout. It reports whether
// the input was the call's.
func (h *heldCall) withdraw(conn fleet.Conn, id json.RawMessage) bool {
	h.mu.Lock()
	var key string
	for k, in := range h.pending {
		if in.conn == conn && string(in.backendID) == string(id) {
			key = k
			break
		}
	}
	if key == "" {
		h.mu.Unlock()
		return false
	}
	delete(h.pending, key)
	c := h.call
	h.signalLocked()
	h.mu.Unlock()
	if c != nil {
		c.touch()
		c.waiting.Add(-1)
	}
	return true
}

// end ends the held call: the server's call is cancelled if still running,
// its pending requests refused, and its state no longer accepted.
func (h *heldCall) end() { h.stop(true) }

// stop is end; with cancel false the server's call is left refusedGrace
// to finish on its own (it was refused what it asked, and answers soon),
// so that it is not counted as abandoned, and cancelled after.
func (h *heldCall) stop(cancel bool) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	pending := h.pending
	h.pending = nil
	id, expiry, c, cancelCall := h.id, h.expiry, h.call, h.cancel
	h.signalLocked()
	h.mu.Unlock()
	if c != nil {
		// The inputs dropped no longer hold the call's timeout.
		c.waiting.Add(-int32(len(pending)))
	}
	h.sink.set(nil)
	if expiry != nil {
		expiry.Stop()
	}
	switch {
	case cancelCall == nil:
	case cancel:
		cancelCall(nil)
	default:
		// Refused what it asked for, the server answers soon; one that
		// does not is cancelled all the same after a grace (nobody waits
		// for its answer: the client has had its own).
		time.AfterFunc(refusedGrace, func() { cancelCall(errRefusedUnanswered) })
	}
	for _, in := range pending {
		in := in
		h.g.outbox.post(in.conn, func() {
			_ = in.conn.ReplyError(in.backendID, rpc.InternalError, "the client did not answer: its request ended")
		})
	}
	if id != "" {
		h.g.held.remove(id)
		if h.front != nil {
			h.front.remove(h)
		}
	}
	h.g.endModernReq(h.mreq)
}

// HeldCalls is the number of calls held for a modern client's retry.
func (g *Gateway) HeldCalls() int {
	return g.held.count()
}

// HeldCallsByServer counts the held calls of each server that has any.
func (g *Gateway) HeldCallsByServer() map[string]int {
	out := map[string]int{}
	for _, h := range g.held.all() {
		out[h.server]++
	}
	return out
}

// resumeHeld serves a modern client's retry whose requestState mcpvisor
// made: it verifies the state, gives the server the inputResponses, and
// answers with the call's result or the next round.
func (g *Gateway) resumeHeld(ctx context.Context, m *rpc.Message, mo *Modern, state string, endpoint *fleet.Server, related Sink) *rpc.Message {
	st, err := g.verifyState(state)
	if err != nil {
		return errorResponse(m.ID, rpc.InvalidParams, "Invalid params: requestState "+err.Error())
	}
	if st.Method != m.Method || st.Digest != salientDigest(m.Params) || st.Endpoint != endpointName(endpoint) || st.Who != whoOf(identity.FromContext(ctx)) {
		return errorResponse(m.ID, rpc.InvalidParams, "Invalid params: requestState belongs to another request (its endpoint, method and parameters must be the original's)")
	}
	h := g.held.get(st.Held)
	if h != nil && !identity.Same(h.mreq.user, identity.FromContext(ctx)) {
		h = nil // another identity's call: as if it had ended
	}
	if h != nil && h.endpoint != endpoint {
		// Made on the endpoint of a server since removed, whose name
		// another server now has: the call is that server's, and ends
		// with its drain.
		h = nil
	}
	if h == nil {
		return errorResponse(m.ID, rpc.InvalidParams, "Invalid params: requestState names a request that has ended (answered, abandoned or expired); send it again without requestState")
	}
	h.mu.Lock()
	stale := st.Round != h.rounds
	h.mu.Unlock()
	if stale {
		return errorResponse(m.ID, rpc.InvalidParams, "Invalid params: requestState is of an earlier round; retry with the latest one")
	}
	var p struct {
		InputResponses map[string]json.RawMessage `json:"inputResponses"`
	}
	_ = json.Unmarshal(m.Params, &p)
	h.mu.Lock()
	c := h.call
	h.mu.Unlock()
	if c != nil {
		// Progress of this round goes under this request's token, or
		// nowhere if it asked for none.
		h.g.reg.retoken(c, rpc.ProgressToken(m.Params))
	}
	// Its log lines at this request's logLevel, or none.
	g.reg.nextRound(h.mreq, mo)
	h.sink.set(related)
	h.answer(p.InputResponses)
	return h.round(ctx, m.ID)
}

// heldState is what a requestState of mcpvisor's says.
type heldState struct {
	Held     string `json:"h"`
	Endpoint string `json:"p"` // the server of the endpoint it was made on, "" for the aggregated one
	Round    int    `json:"r"` // the round that made it: a later round's state supersedes it
	Method   string `json:"m"`
	Digest   string `json:"d"`
	Expires  int64  `json:"e"`           // Unix milliseconds
	Who      string `json:"u,omitempty"` // whoOf the identity the call is held for
}

// whoOf names id (person and client) in a requestState: a retry by
// another identity does not match it.
func whoOf(id *identity.Identity) string {
	if id == nil {
		return ""
	}
	return id.Key() + "/" + id.ClientID
}

// signState makes the requestState of h's next round; h.mu is held.
func (g *Gateway) signState(h *heldCall) string {
	body := mustJSON(heldState{Held: h.id, Endpoint: endpointName(h.endpoint), Round: h.rounds, Method: h.method, Digest: h.digest, Expires: h.expires.UnixMilli(), Who: whoOf(h.mreq.user)})
	mac := hmac.New(sha256.New, g.stateKey)
	mac.Write(body)
	return g.stamp(statePrefix + base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil)))
}

var (
	errStateForged  = errors.New("failed verification: it was not made by this mcpvisor, or was altered")
	errStateExpired = errors.New("has expired")
)

// verifyState checks a requestState of mcpvisor's and reads it.
func (g *Gateway) verifyState(state string) (*heldState, error) {
	rest, _ := strings.CutPrefix(g.inner(state), statePrefix)
	b64, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, errStateForged
	}
	body, err1 := base64.RawURLEncoding.DecodeString(b64)
	mac, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil {
		return nil, errStateForged
	}
	want := hmac.New(sha256.New, g.stateKey)
	want.Write(body)
	if !hmac.Equal(mac, want.Sum(nil)) {
		return nil, errStateForged
	}
	var st heldState
	if json.Unmarshal(body, &st) != nil {
		return nil, errStateForged
	}
	if time.Now().UnixMilli() > st.Expires {
		return nil, errStateExpired
	}
	return &st, nil
}

// salientDigest digests what identifies a request's target and input —
// its params without _meta, inputResponses and requestState, re-encoded
// with sorted keys, so a client's re-encoding of the same request matches.
func salientDigest(params json.RawMessage) string {
	var p map[string]any
	if json.Unmarshal(params, &p) != nil {
		p = nil
	}
	delete(p, "_meta")
	delete(p, "inputResponses")
	delete(p, "requestState")
	sum := sha256.Sum256(mustJSON(p))
	return hex.EncodeToString(sum[:16])
}

// newStateKey is a run's key for requestState.
func newStateKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// heldTable is the calls held for modern clients' retries, by id. Its
// methods are the only code that touches it.
type heldTable struct {
	mu sync.Mutex
	m  map[string]*heldCall
}

// add holds h as id, unless maxHeld calls are held already.
func (t *heldTable) add(id string, h *heldCall) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) >= maxHeld {
		return false
	}
	if t.m == nil {
		t.m = map[string]*heldCall{}
	}
	t.m[id] = h
	return true
}

// remove lets the call held as id go.
func (t *heldTable) remove(id string) {
	t.mu.Lock()
	delete(t.m, id)
	t.mu.Unlock()
}

// get is the call held as id, or nil.
func (t *heldTable) get(id string) *heldCall {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

// all lists the calls held now.
func (t *heldTable) all() []*heldCall {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*heldCall, 0, len(t.m))
	for _, h := range t.m {
		out = append(out, h)
	}
	return out
}

// count is the number of calls held now.
func (t *heldTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
