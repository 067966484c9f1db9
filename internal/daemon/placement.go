package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/replica"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Placement: a server with "placement": "one" runs on one replica of
// the deployment, its owner — the ordinal its name hashes to over the
// configured count (rendezvous hashing: a change of count moves only the
// servers whose owner changes). The others reach it through the owner's
// peer interface, as a remote server (config.Server.ThroughPeer): their
// clients' requests are decided, limited and audited where they arrived,
// and the owner serves the peer's connection as decided
// (identity.Peer). When the count changes, the old owner's reload turns
// its process into such a connection (stopping the process) and the new
// owner's start waits until no peer runs it (gate): never two at once,
// while every replica can reach its peers. A replica that cannot be
// reached runs nothing as far as the gate knows: a pod force-deleted
// while its process lives on (a partitioned node) is the one case where
// two may run, for as long as that node lives (docs/kubernetes.md).

// place rewrites cfg's servers placed on one replica for replica self:
// those another replica owns are reached through it.
func place(cfg *config.Config, self int) {
	rc := cfg.Replicas
	if rc == nil {
		return
	}
	for i, s := range cfg.Servers {
		if s.Placement != config.PlacementOne || s.Disabled {
			continue
		}
		owner := replica.OwnerOf(s.Name, rc.Count)
		if owner == self {
			if s.Protocol == config.ProtocolAuto {
				// One process: no second one to probe the modern era on
				// (nor to serve it on, for a dual-era server). It is
				// initialized, and modern clients' calls are bridged
				// to it (MRTR); a modern-only server says so with
				// "protocol": "modern".
				s.Protocol = config.ProtocolLegacy
			}
			continue
		}
		cfg.Servers[i] = s.ThroughPeer(owner, "https://"+rc.PeerOf(owner)+"/servers/"+url.PathEscape(s.Name)+"/mcp")
	}
}

// owns reports whether this replica runs server name under cfg.
func (rs *replicaSet) owns(cfg *config.Config, name string) bool {
	s := cfg.Server(name)
	return s != nil && s.Placement == config.PlacementOne && replica.OwnerOf(name, cfg.Replicas.Count) == rs.self.Ordinal
}

// peerClient is the fleet's client for the servers this replica reaches
// through their owner: each request signed as this replica's own
// (identity.Peer), over the peer TLS.
func (rs *replicaSet) peerClient() *http.Client {
	return &http.Client{Transport: peerTransport{rs}}
}

type peerTransport struct{ rs *replicaSet }

func (t peerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rs := t.rs
	rc := rs.cfg.Load()
	to := -1
	for i := range rc.Count {
		if rc.PeerOf(i) == req.URL.Host {
			to = i
			break
		}
	}
	if to < 0 {
		return nil, fmt.Errorf("%w: %s is no replica of the configured %d", lifecycle.ErrServerUnavailable, req.URL.Host, rc.Count)
	}
	id, _ := json.Marshal(identity.PeerReplica(rs.self.Ordinal))
	f := replica.Forwarded{From: rs.self.Ordinal, To: to, ConfigVersion: *rs.version.Load(), Identity: id,
		Method: req.Method, Path: req.URL.Path, Expires: time.Now().Add(replica.ForwardLifetime)}
	out := req.Clone(req.Context())
	out.Header.Set(replica.ForwardHeader, rs.ring.Load().SignForward(f))
	resp, err := rs.transport.RoundTrip(out)
	if err != nil {
		return nil, fmt.Errorf("%w: replica %d, which runs this server for the deployment (placement %q), cannot be reached; retry: %v",
			lifecycle.ErrServerUnavailable, to, config.PlacementOne, err)
	}
	return resp, nil
}

// placementState is what a replica answers about one server: whether it
// runs a process of it, or is about to.
type placementState struct {
	Ordinal  int    `json:"ordinal"`
	Running  int    `json:"running"`
	Claiming bool   `json:"claiming"`
	Version  string `json:"version"`
}

// claims are the starts of servers placed here under way: a peer asked
// meanwhile is told, so that two replicas that both think they own a
// server (their configs differ) never start it together. A claim stands
// from the gate until its start is over; the runtime counts the process
// from its spawn on.
type claims struct {
	mu sync.Mutex
	m  map[string]int // server → starts under way
}

func (c *claims) add(name string, d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	if c.m[name] += d; c.m[name] <= 0 {
		delete(c.m, name)
	}
}

func (c *claims) has(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[name] > 0
}

// gate waits, within ctx, until no process of server sc runs — here (an
// earlier process still stopping: a restart, a relaunch by a reload) or
// on a peer — and no peer starts one: the fleet's start of a server
// placed here. Its claim stands until release.
func (rs *replicaSet) gate(ctx context.Context, sc *config.Server) (release func(), err error) {
	name := sc.Name
	rs.claims.add(name, 1)
	claimed := true
	defer func() {
		if err != nil && claimed {
			rs.claims.add(name, -1)
		}
	}()
	var last string
	for {
		busy, yield := "", false
		if n := rs.running(name); n > 0 {
			busy = fmt.Sprintf("this replica's earlier process (%d) is still stopping", n)
		} else {
			busy, yield = rs.peersOn(ctx, name)
		}
		switch {
		case busy == "":
			var once sync.Once
			return func() { once.Do(func() { rs.claims.add(name, -1) }) }, nil
		case yield && claimed:
			// A lower ordinal starts it too: it goes first; this claim
			// is withdrawn until it has.
			rs.claims.add(name, -1)
			claimed = false
		}
		if busy != last {
			rs.log.Info("placement: waiting before starting", "server", name, "because", busy)
			last = busy
		}
		t := time.NewTimer(time.Duration(150+rand.IntN(150)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: server %s runs on this replica (%d) once no other process of it runs, and %s; retry", lifecycle.ErrServerUnavailable, name, rs.self.Ordinal, busy)
		case <-t.C:
		}
		if !claimed {
			rs.claims.add(name, 1)
			claimed = true
		}
	}
}

// peersOn asks every peer about server name: busy names one that runs it
// or starts it, or that answered in a way that says nothing ("" none);
// yield says one of lower ordinal starts it. A peer that refuses the
// connection, names no host, or gives no answer within ownerTimeout is
// gone, and runs nothing as far as anyone can know; any other failure
// (a refusal of its key, an error) may hide a running process, and
// waits.
func (rs *replicaSet) peersOn(ctx context.Context, name string) (busy string, yield bool) {
	n := rs.span()
	type answer struct {
		st  placementState
		err error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		if i == rs.self.Ordinal {
			continue
		}
		wg.Go(func() {
			st, err := rs.askPlacement(ctx, i, name)
			answers[i] = answer{st, err}
		})
	}
	wg.Wait()
	for i, a := range answers {
		switch {
		case i == rs.self.Ordinal:
		case a.err != nil && ownerGoneErr(a.err):
		case a.err != nil:
			return fmt.Sprintf("replica %d did not say whether it runs it: %v", i, a.err), false
		case a.st.Running > 0:
			return fmt.Sprintf("replica %d runs it", i), false
		case a.st.Claiming:
			busy = fmt.Sprintf("replica %d starts it", i)
			if i < rs.self.Ordinal {
				yield = true
			}
		}
	}
	return busy, yield
}

// span is how many ordinals may hold a process: the configured count,
// every address of a peers list, and the largest count this replica
// was configured with (a replica beyond a shrunk count lives until its
// pod is deleted, and may still run what it owned).
func (rs *replicaSet) span() int {
	rc := rs.cfg.Load()
	n := max(rc.Count, int(rs.maxCount.Load()), rs.self.Ordinal+1)
	if rc.Peers != nil {
		n = max(n, len(rc.Peers))
	}
	return n
}

// peerPath is the peer interface's own API.
const peerPath = "/peer/v1/"

// askPlacement asks peer i about server name, bounded by ownerTimeout.
func (rs *replicaSet) askPlacement(ctx context.Context, i int, name string) (placementState, error) {
	var st placementState
	err := rs.peerGet(ctx, i, peerPath+"placement/"+url.PathEscape(name), &st)
	return st, err
}

// peerGet GETs path of peer i's peer API into v, bounded by ownerTimeout.
func (rs *replicaSet) peerGet(ctx context.Context, i int, path string, v any) error {
	return rs.peerDo(ctx, i, http.MethodGet, path, nil, v)
}

// peerDo sends method path (with body, if any) to peer i's peer API, as
// this replica, and decodes its answer into v; bounded by ownerTimeout.
func (rs *replicaSet) peerDo(ctx context.Context, i int, method, path string, body []byte, v any) error {
	rc := rs.cfg.Load()
	ctx, cancel := context.WithTimeout(ctx, rc.OwnerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "https://"+rc.PeerOf(i)+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	id, _ := json.Marshal(identity.PeerReplica(rs.self.Ordinal))
	req.Header.Set(replica.ForwardHeader, rs.ring.Load().SignForward(replica.Forwarded{From: rs.self.Ordinal, To: i,
		ConfigVersion: *rs.version.Load(), Identity: id, Method: method, Path: req.URL.Path, Expires: time.Now().Add(replica.ForwardLifetime)}))
	resp, err := rs.transport.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("replica %d: %s: %s", i, resp.Status, strings.TrimSpace(string(b)))
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // to its end: the connection is kept
	return err
}

// servePeerAPI serves the peer interface's own API (the request already
// verified as a peer's).
func (rs *replicaSet) servePeerAPI(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, peerPath)
	switch {
	case strings.HasPrefix(rest, "placement/") && r.Method == http.MethodGet:
		name, err := url.PathUnescape(strings.TrimPrefix(rest, "placement/"))
		if err != nil {
			http.Error(w, "Bad Request", http.StatusBadRequest)
			return
		}
		writeJSON(w, placementState{Ordinal: rs.self.Ordinal, Running: rs.running(name), Claiming: rs.claims.has(name), Version: *rs.version.Load()})
	case rest == "state" && r.Method == http.MethodGet:
		writeJSON(w, rs.state())
	case strings.HasPrefix(rest, "grant/"):
		name, what, _ := strings.Cut(strings.TrimPrefix(rest, "grant/"), "/")
		if n, err := url.PathUnescape(name); err == nil {
			rs.serveGrant(w, r, n, what)
		} else {
			http.Error(w, "Bad Request", http.StatusBadRequest)
		}
	default:
		http.NotFound(w, r)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// misplaced answers a peer's request for a server this replica does not
// run under its config: the peer routed by another version of it (a
// reload under way) — a clear error, never a wrong route.
func (rs *replicaSet) misplaced(w http.ResponseWriter, f replica.Forwarded, server string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusMisdirectedRequest)
	msg := fmt.Sprintf("replica %d does not run server %s under its configuration (version %s); the request was routed by version %s: retry once the replicas have reloaded",
		rs.self.Ordinal, server, *rs.version.Load(), f.ConfigVersion)
	_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":%q}}`+"\n", msg)
}

// replicaState is one replica as the deployment's view shows it.
type replicaState = admin.Replica

// state is this replica's own.
func (rs *replicaSet) state() replicaState {
	rc := rs.cfg.Load()
	st := replicaState{Ordinal: rs.self.Ordinal, Address: rc.PeerOf(rs.self.Ordinal), Reachable: true,
		Incarnation: rs.self.Incarnation, ConfigVersion: *rs.version.Load(), Ready: "ok",
		Forwarded: rs.forwarded.Load(), Received: rs.received.Load(), Gone: rs.gone.Load(), PeerConnections: rs.peerConns.Load(), AuditKept: rs.linesHere.Load(),
		Key: rs.ring.Load().SigningID(), Accepted: rs.ring.Load().AcceptedIDs()}
	if why := rs.ready(); why != "" {
		st.Ready = why
	}
	if rs.servers != nil {
		st.Servers = map[string]int{}
		for _, name := range rs.servers() {
			if n := rs.running(name); n > 0 {
				st.Servers[name] = n
			}
		}
	}
	return st
}

// deployment is every replica's state: this one's, and each peer's as it
// answers (or why it does not), by ordinal.
func (rs *replicaSet) deployment(ctx context.Context) []replicaState {
	rc := rs.cfg.Load()
	out := make([]replicaState, rs.span())
	var wg sync.WaitGroup
	for i := range out {
		if i == rs.self.Ordinal {
			out[i] = rs.state()
			continue
		}
		wg.Go(func() {
			var st replicaState
			if err := rs.peerGet(ctx, i, peerPath+"state", &st); err != nil {
				st = replicaState{Ordinal: i, Address: rc.PeerOf(i), Error: err.Error()}
			}
			out[i] = st
		})
	}
	wg.Wait()
	return out
}

// A remote server's OAuth grant has one owner among the replicas: the
// ordinal its name hashes to. It alone refreshes the grant (a rotated
// refresh token used by two replicas would invalidate the other's), and
// it serves its access token to the others over the peer interface;
// peerGrant is their authorizer.

// peerGrant is the authorizer of sc's connections on a replica that does
// not hold its grant; nil on the one that does.
func (rs *replicaSet) peerGrant(sc *config.Server) backend.Authorizer {
	owner := replica.OwnerOf(sc.Name, rs.cfg.Load().Count)
	if owner == rs.self.Ordinal || owner < 0 {
		return nil
	}
	return &peerGrant{rs: rs, name: sc.Name, owner: owner}
}

// peerGrant asks the grant's owner for its token, and tells it of the
// server's challenges.
type peerGrant struct {
	rs    *replicaSet
	name  string
	owner int

	mu    sync.Mutex
	tok   string    // the owner's token last taken ("": none, or none yet)
	taken time.Time // when: "" is asked again after noTokenFor
}

// noTokenFor is how long a replica takes the owner's "no token" (a
// remote server that may need none) before asking again.
const noTokenFor = 30 * time.Second

// grantAnswer is the peer API's answer about a grant.
type grantAnswer struct {
	Token string `json:"token,omitempty"`
	Retry bool   `json:"retry,omitempty"`
	// Error is why no token; AuthRequired that only a login (on the
	// owner) can end it.
	Error        string `json:"error,omitempty"`
	AuthRequired bool   `json:"authRequired,omitempty"`
}

func (g *peerGrant) fail(a grantAnswer, err error) error {
	if err != nil {
		return fmt.Errorf("%w: replica %d, which holds server %s's OAuth grant, cannot be reached; retry: %v", lifecycle.ErrServerUnavailable, g.owner, g.name, err)
	}
	if a.AuthRequired {
		return fmt.Errorf("%w: %s (on replica %d, which holds the grant)", lifecycle.ErrAuthRequired, a.Error, g.owner)
	}
	return fmt.Errorf("%s (on replica %d, which holds the grant)", a.Error, g.owner)
}

// Token is the owner's token, taken once and kept until the server
// refuses it. An owner that cannot be reached gives none: a server that
// needs no token is served all the same, one that needs it answers 401,
// and Challenged says the owner is unreachable.
func (g *peerGrant) Token(ctx context.Context) (string, error) {
	g.mu.Lock()
	tok, taken := g.tok, g.taken
	g.mu.Unlock()
	if tok != "" || !taken.IsZero() && time.Since(taken) < noTokenFor {
		return tok, nil
	}
	var a grantAnswer
	err := g.rs.peerDo(ctx, g.owner, http.MethodGet, peerPath+"grant/"+url.PathEscape(g.name)+"/token", nil, &a)
	if err != nil {
		g.rs.log.Debug("replicas: the grant's owner is unreachable; no token sent", "server", g.name, "owner", g.owner, "err", err)
		return "", nil
	}
	if a.Error != "" {
		return "", g.fail(a, nil)
	}
	g.mu.Lock()
	g.tok, g.taken = a.Token, time.Now()
	g.mu.Unlock()
	return a.Token, nil
}

func (g *peerGrant) Challenged(ctx context.Context, used string, status int, h string) (bool, error) {
	body, _ := json.Marshal(map[string]any{"used": used, "status": status, "header": h})
	var a grantAnswer
	err := g.rs.peerDo(ctx, g.owner, http.MethodPost, peerPath+"grant/"+url.PathEscape(g.name)+"/challenged", body, &a)
	g.mu.Lock()
	if g.tok == used {
		g.tok, g.taken = "", time.Time{} // taken again from the owner, refreshed or not
	}
	g.mu.Unlock()
	if err != nil || a.Error != "" {
		return false, g.fail(a, err)
	}
	return a.Retry, nil
}

// serveGrant answers a peer about server name's grant, held here.
func (rs *replicaSet) serveGrant(w http.ResponseWriter, r *http.Request, name, what string) {
	if rs.grants == nil || replica.OwnerOf(name, rs.cfg.Load().Count) != rs.self.Ordinal {
		rs.misplaced(w, replica.Forwarded{ConfigVersion: "?"}, name)
		return
	}
	answer := func(err error) grantAnswer {
		if err == nil {
			return grantAnswer{}
		}
		return grantAnswer{Error: err.Error(), AuthRequired: errors.Is(err, lifecycle.ErrAuthRequired)}
	}
	switch {
	case what == "token" && r.Method == http.MethodGet:
		tok, err := rs.grants.GrantToken(r.Context(), name)
		a := answer(err)
		a.Token = tok
		writeJSON(w, a)
	case what == "challenged" && r.Method == http.MethodPost:
		var in struct {
			Used   string `json:"used"`
			Status int    `json:"status"`
			Header string `json:"header"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&in); err != nil {
			http.Error(w, "Bad Request", http.StatusBadRequest)
			return
		}
		retry, err := rs.grants.GrantChallenged(r.Context(), name, in.Used, in.Status, in.Header)
		a := answer(err)
		a.Retry = retry
		writeJSON(w, a)
	default:
		http.NotFound(w, r)
	}
}

// grantHolder is what serves a grant's token: the fleet.
type grantHolder interface {
	GrantToken(ctx context.Context, name string) (string, error)
	GrantChallenged(ctx context.Context, name, used string, status int, h string) (bool, error)
}
