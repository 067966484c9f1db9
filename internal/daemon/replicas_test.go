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
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/link"
	"github.com/mcpvisor/mcpvisor/internal/replica"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// pair is two replicas of one deployment, in this process.
type pair struct {
	base    [2]string // each one's client URL
	peer    [2]string // each one's peer address
	key     []byte
	stops   [2]context.CancelFunc
	done    [2]chan error
	cfg     string
	cfgs    [2]string
	keyDirs [2]string
	fixure  string
}

// freeLoopback reserves n loopback addresses.
func freeLoopback(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().String())
		defer ln.Close()
	}
	return out
}

// startPair runs two replicas sharing a config (with extra top-level
// members) and a key.
func startPair(t testing.TB, extra string) *pair {
	t.Helper()
	return startPairWith(t, extra, "", false)
}

// startPairWith is startPair with more members of mcpServers (servers,
// a comma before each); with own, each replica has a key directory of
// its own (keyDirs), as each pod has its own mount of the Secret,
// updated at its own moment.
func startPairWith(t testing.TB, extra, servers string, own bool, more ...func(*ServeOptions)) *pair {
	t.Helper()
	dir := t.TempDir()
	p := &pair{key: []byte(strings.Repeat("k", 40)), fixure: testserver.Build(t)}
	for i := range 2 {
		p.keyDirs[i] = filepath.Join(dir, "key")
		if own {
			p.keyDirs[i] = filepath.Join(dir, fmt.Sprintf("key%d", i))
		}
		if err := os.MkdirAll(p.keyDirs[i], 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p.keyDirs[i], "current"), p.key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addrs := freeLoopback(t, 2)
	copy(p.peer[:], addrs)
	peers, _ := json.Marshal(addrs)
	for i := range 2 {
		p.cfgs[i] = filepath.Join(dir, fmt.Sprintf("config%d.json", i))
		doc := fmt.Sprintf(`{%s"replicas": {"count": 2, "peers": %s, "keyDir": %q, "drainDelay": "300ms"},
	  "mcpServers": {"x": {"command": %q}, "one": {"command": %q, "placement": "one"}%s}}`, extra, peers, p.keyDirs[i], p.fixure, p.fixure, servers)
		if err := os.WriteFile(p.cfgs[i], []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p.cfg = p.cfgs[0]
	for i := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		o := ServeOptions{Options: options(t, p.cfgs[i]), Listen: "127.0.0.1:0", Socket: "none", NoWatch: true,
			Getenv: func(k string) string {
				if k == "MCPVISOR_ORDINAL" {
					return strconv.Itoa(i)
				}
				return ""
			}}
		for _, f := range more {
			f(&o)
		}
		w := &syncWriter{}
		o.Stderr = w
		p.done[i] = make(chan error, 1)
		go func() { p.done[i] <- Serve(ctx, o) }()
		p.base[i] = "http://" + waitServing(t, w, p.done[i])
		p.stops[i] = cancel
		t.Cleanup(func() {
			cancel()
			select {
			case <-p.done[i]:
			case <-time.After(30 * time.Second):
				t.Error("serve did not end")
			}
		})
	}
	return p
}

// peerClient is a client of the peer interface holding the keys, as a
// replica's: HTTP/1.1 over the peer TLS.
func peerClient(keys *replica.Keys) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: http1Only(replica.NewRing(keys).ClientTLS())}, Timeout: 10 * time.Second}
}

func TestPeerInterfaceRefusesStrangers(t *testing.T) {
	p := startPair(t, "")
	keys, err := replica.NewKeys(p.key)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := replica.NewKeys([]byte(strings.Repeat("o", 40)))
	target := "https://" + p.peer[1] + "/servers/x/mcp"
	sign := func(k *replica.Keys, f replica.Forwarded) string {
		if f.Method == "" {
			f.Method, f.Path = http.MethodPost, "/servers/x/mcp"
		}
		if f.Expires.IsZero() {
			f.Expires = time.Now().Add(30 * time.Second)
		}
		return k.SignForward(f)
	}
	post := func(c *http.Client, url, header string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(initBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if header != "" {
			req.Header.Set(replica.ForwardHeader, header)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}

	// A client of the public interface cannot speak to the peer one:
	// plain HTTP, TLS without a certificate, a certificate of another key.
	if st, body, err := post(http.DefaultClient, "http://"+p.peer[1]+"/servers/x/mcp", ""); err == nil && (st != 400 || !strings.Contains(body, "HTTPS server")) {
		t.Errorf("plain HTTP reached the peer interface: %d %q", st, body)
	}
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 5 * time.Second}
	if st, _, err := post(noCert, target, sign(keys, replica.Forwarded{From: 0, To: 1})); err == nil {
		t.Errorf("TLS without a client certificate reached the peer interface: %d", st)
	}
	if st, _, err := post(peerClient(other), target, sign(other, replica.Forwarded{From: 0, To: 1})); err == nil {
		t.Errorf("a certificate of another key reached the peer interface: %d", st)
	}

	c := peerClient(keys)
	cases := []struct {
		name   string
		url    string
		header string
		status int
		want   string
	}{
		{"no forwarding header", target, "", 403, "Forbidden"},
		{"signed with another key", target, sign(other, replica.Forwarded{From: 0, To: 1}), 403, "Forbidden"},
		{"signed for another path", target, sign(keys, replica.Forwarded{From: 0, To: 1, Method: http.MethodPost, Path: "/mcp"}), 403, "another request's"},
		{"expired", target, sign(keys, replica.Forwarded{From: 0, To: 1, Expires: time.Now().Add(-time.Second)}), 403, "Forbidden"},
		{"for another replica", target, sign(keys, replica.Forwarded{From: 1, To: 0}), 421, "not 0"},
		{"an earlier incarnation", target, sign(keys, replica.Forwarded{From: 0, To: 1, ToIncarnation: "aaaaaaaaaaaaaaaaaaaa"}), 404, "gone"},
		{"a peer's connection to a server placed elsewhere", target, sign(keys, replica.Forwarded{From: 0, To: 1,
			Identity: mustJSON(t, identity.PeerReplica(0)), ConfigVersion: "old"}), 421, "routed by version old"},
		{"a peer's connection to the aggregated endpoint", "https://" + p.peer[1] + "/mcp", sign(keys, replica.Forwarded{From: 0, To: 1, Method: http.MethodPost, Path: "/mcp",
			Identity: mustJSON(t, identity.PeerReplica(0))}), 421, "does not run server"},
		{"not an MCP path", "https://" + p.peer[1] + "/api/servers", sign(keys, replica.Forwarded{From: 0, To: 1, Method: http.MethodPost, Path: "/api/servers"}), 404, ""},
	}
	for _, tc := range cases {
		st, body, err := post(c, tc.url, tc.header)
		if err != nil || st != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q %v, want %d containing %q", tc.name, st, body, err, tc.status, tc.want)
		}
	}
	// A good one is served: an initialize of replica 1's server x for
	// replica 0's client, with the identity replica 0 verified (none).
	if st, body, err := post(c, target, sign(keys, replica.Forwarded{From: 0, To: 1})); err != nil || st != 200 || !strings.Contains(body, `"protocolVersion"`) {
		t.Errorf("a forwarded initialize: %d %q %v", st, body, err)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A legacy session lives on the replica that initialized it; any other
// forwards its requests there with the identity it verified, so another
// identity naming the session is told it does not exist, and a request
// without a token never leaves the first replica.
func TestForwardedRequestsCarryTheVerifiedIdentity(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	p := startPair(t, `"auth": {"issuer": "`+iss.URL+`", "publicUrl": "`+publicURL+`/", "scopes": ["mcp"]},`)
	alice, bob := userToken(t, iss, "alice"), userToken(t, iss, "bob")
	r := send(t, "POST", p.base[1]+"/mcp", initBody, bearer(alice))
	if r.status != 200 {
		t.Fatalf("initialize on replica 1: %d %s", r.status, r.body)
	}
	sid := r.sid
	if !strings.HasPrefix(sid, replica.StampPrefix+"1.") {
		t.Fatalf("replica 1's session id %q is not stamped with its ordinal", sid)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	hdr := func(tok string) map[string][]string {
		h := map[string][]string{"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-11-25"}}
		if tok != "" {
			h["Authorization"] = []string{"Bearer " + tok}
		}
		return h
	}
	if r := send(t, "POST", p.base[0]+"/mcp", list, hdr(alice)); r.status != 200 || !strings.Contains(r.body, `"tools"`) {
		t.Errorf("alice's session through replica 0: %d %s", r.status, r.body)
	}
	if r := send(t, "POST", p.base[0]+"/mcp", list, hdr(bob)); r.status != 404 {
		t.Errorf("bob naming alice's session through replica 0: %d %s, want 404", r.status, r.body)
	}
	if r := send(t, "POST", p.base[0]+"/mcp", list, hdr("")); r.status != 401 {
		t.Errorf("no token through replica 0: %d %s, want 401 there", r.status, r.body)
	}
	// The peer interface of a replica that checks tokens refuses a
	// request forwarded without an identity (a sender whose config has no
	// auth yet): nothing unchecked is served.
	keys, _ := replica.NewKeys(p.key)
	req, _ := http.NewRequest(http.MethodPost, "https://"+p.peer[1]+"/mcp", strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(replica.ForwardHeader, keys.SignForward(replica.Forwarded{From: 0, To: 1, Method: http.MethodPost, Path: "/mcp", Expires: time.Now().Add(time.Minute)}))
	if resp, err := peerClient(keys).Do(req); err != nil {
		t.Error(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(b), "without an identity") {
			t.Errorf("a forward without an identity to a replica that checks tokens: %d %s", resp.StatusCode, b)
		}
	}
	// A forwarding header sent by a client to the public interface is
	// nothing: the token is still asked for.
	h := hdr("")
	h[replica.ForwardHeader] = []string{keys.SignForward(replica.Forwarded{From: 0, To: 1, Method: http.MethodPost, Path: "/mcp", Expires: time.Now().Add(time.Minute)})}
	if r := send(t, "POST", p.base[1]+"/mcp", list, h); r.status != 401 {
		t.Errorf("a signed forwarding header on the public interface, no token: %d %s, want 401", r.status, r.body)
	}
	// A forged stamp is no one's session.
	forged := strings.Replace(sid, replica.StampPrefix+"1.", replica.StampPrefix+"0.", 1)
	h = hdr(alice)
	h["Mcp-Session-Id"] = []string{forged}
	if r := send(t, "POST", p.base[0]+"/mcp", list, h); r.status != 404 {
		t.Errorf("a forged stamp: %d %s, want 404", r.status, r.body)
	}
}

// The probes: outside the guard, and the replica's own: a server that
// fails to start leaves the replica ready.
func TestProbes(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	p := startPairWith(t, `"auth": {"issuer": "`+iss.URL+`", "publicUrl": "`+publicURL+`/", "scopes": ["mcp"]},`,
		`, "broken": {"command": "/nonexistent/mcp-server"}`, false)
	r := send(t, "POST", p.base[0]+"/servers/broken/mcp", initBody, bearer(iss.Mint(t, iss.Claims("alice", publicURL+"/servers/broken/mcp"), authntest.MintOptions{})))
	if !strings.Contains(r.body, "error") {
		t.Errorf("initialize of a server that cannot start: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/livez", "/readyz"} {
		if r := send(t, "GET", p.base[0]+path, "", map[string][]string{"Host": {"mcpvisor-0.mcpvisor-peers"}}); r.status != 200 || strings.TrimSpace(r.body) != "ok" {
			t.Errorf("%s without a token: %d %q", path, r.status, r.body)
		}
	}
	// Draining: unready at once, live until the end.
	p.stops[0]()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(p.base[0] + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 503 && strings.Contains(string(b), "draining") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not say draining: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := send(t, "GET", p.base[0]+"/livez", "", nil); r.status != 200 {
		t.Errorf("/livez while draining: %d", r.status)
	}
}

// BenchmarkForwardedCall: legacy calls whose sessions live on the
// replica they reached (local) and on the other one (forwarded), 8
// callers, both replicas in this process: go test -bench Forwarded
// -cpuprofile shows where a hop goes; cpu-µs/op is the process's CPU
// (the servers' not counted). Under "audited" the config has an audit:
// a forwarded call's line is handed to the replica it reached when it
// ends; under "governed" rate limits too: the call then also asks that
// replica to admit it, a round trip before it is served (receiver.go).
func BenchmarkForwardedCall(b *testing.B) {
	for _, g := range []struct{ name, extra string }{
		{"plain", ""},
		{"audited", `"audit": {"arguments": "digest"},`},
		{"governed", `"audit": {"arguments": "digest"}, "rateLimits": {"perIdentity": {"perSecond": 1000000, "burst": 1000000}},`},
	} {
		b.Run(g.name, func(b *testing.B) { benchmarkForwardedCall(b, startPair(b, g.extra)) })
	}
}

func benchmarkForwardedCall(b *testing.B, p *pair) {
	for _, c := range []struct {
		name     string
		init, to string
	}{{"local", p.base[0], p.base[0]}, {"forwarded", p.base[1], p.base[0]}} {
		b.Run(c.name, func(b *testing.B) {
			req := func(cl *http.Client, url, sid, body string) (*http.Response, error) {
				r, _ := http.NewRequest("POST", url+"/mcp", strings.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Accept", "application/json, text/event-stream")
				if sid != "" {
					r.Header.Set("Mcp-Session-Id", sid)
					r.Header.Set("MCP-Protocol-Version", "2025-11-25")
				}
				return cl.Do(r)
			}
			b.SetParallelism(4)
			var cpu0 time.Duration
			b.ResetTimer()
			cpu0 = selfCPU()
			b.RunParallel(func(pb *testing.PB) {
				cl := &http.Client{Transport: &http.Transport{}}
				resp, err := req(cl, c.init, "", initBody)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				sid := resp.Header.Get("Mcp-Session-Id")
				for pb.Next() {
					resp, err := req(cl, c.to, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"hi"}}}`)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Error(resp.Status)
						return
					}
				}
			})
			b.ReportMetric(float64((selfCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A key rotation in three steps, each replica's Secret updated at its own
// moment and read again without a restart: the replicas talk throughout
// steps 1 and 2, and no longer once each holds only a key the other does
// not accept.
func TestKeyRotation(t *testing.T) {
	defer func(d time.Duration) { keyPoll = d }(keyPoll)
	keyPoll = 50 * time.Millisecond
	p := startPairWith(t, "", "", true)
	old, next := string(p.key), strings.Repeat("n", 40)
	write := func(i int, files map[string]string) {
		t.Helper()
		entries, _ := os.ReadDir(p.keyDirs[i])
		for _, e := range entries {
			os.Remove(filepath.Join(p.keyDirs[i], e.Name()))
		}
		for name, k := range files {
			if err := os.WriteFile(filepath.Join(p.keyDirs[i], name), []byte(k), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A session on each replica, used through the other.
	sids := [2]string{}
	for i := range 2 {
		r := send(t, "POST", p.base[i]+"/mcp", initBody, nil)
		if r.status != 200 || r.sid == "" {
			t.Fatalf("initialize on %d: %d %s", i, r.status, r.body)
		}
		sids[i] = r.sid
	}
	through := func(i int) int { // replica i's session through the other
		h := map[string][]string{"Mcp-Session-Id": {sids[i]}, "Mcp-Protocol-Version": {"2025-11-25"}}
		return send(t, "POST", p.base[1-i]+"/mcp", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, h).status
	}
	// settle waits until every replica has read its directory again: its
	// own entry in the deployment's view shows the keys the directory
	// holds, the signing key's first.
	settle := func() {
		t.Helper()
		for i := range 2 {
			keys, err := replica.LoadKeyDir(p.keyDirs[i])
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(keys.AcceptedIDs())
			waitUntil(t, 10*time.Second, func() bool {
				return strings.Contains(peerStateOf(t, p, i), `"accepted":`+string(want))
			}, fmt.Sprintf("replica %d to put its keys in force", i))
		}
	}
	check := func(step string, want int) {
		t.Helper()
		for i := range 2 {
			if st := through(i); st != want {
				t.Errorf("%s: replica %d's session through replica %d: %d, want %d", step, i, 1-i, st, want)
			}
		}
	}
	newSessions := func() {
		for i := range 2 {
			r := send(t, "POST", p.base[i]+"/mcp", initBody, nil)
			if r.status != 200 || r.sid == "" {
				t.Fatalf("initialize on %d: %d %s", i, r.status, r.body)
			}
			sids[i] = r.sid
		}
	}
	check("before", 200)
	// 1: the new key accepted everywhere; 0 first, 1 later.
	write(0, map[string]string{"current": old, "next": next})
	check("1, half-way", 200)
	write(1, map[string]string{"current": old, "next": next})
	settle()
	check("1", 200)
	// 2: the new key signs, the old one accepted.
	write(0, map[string]string{"current": next, "previous": old})
	settle()
	check("2, half-way", 200)
	write(1, map[string]string{"current": next, "previous": old})
	settle()
	check("2", 200)
	// 3: the old key gone on both. What was stamped under it no longer
	// verifies anywhere: its sessions are gone (404, and their clients
	// initialize again); those made since step 2 go on.
	oldSids := sids
	newSessions()
	write(0, map[string]string{"current": next})
	write(1, map[string]string{"current": next})
	settle()
	check("3", 200)
	sids = oldSids
	check("3, a session of before step 2", 404)
	// A replica left with a key the other does not accept reaches it
	// no more: the TLS handshake fails, and the client is told so (502),
	// never served by a replica that cannot check the request.
	newSessions()
	write(1, map[string]string{"current": old, "previous": next})
	settle()
	if st := through(0); st != 502 {
		t.Errorf("replica 0's session through replica 1, which holds a key replica 0 does not accept: %d, want 502", st)
	}
}

func sleepCall(tool string, ms int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":%q,"arguments":{"ms":%d}}}`, tool, ms)
}

// A call forwarded to its session's owner finishes when the owner
// drains, as one sent to it directly does: the drain counts what peers
// sent.
func TestDrainFinishesForwardedCalls(t *testing.T) {
	p := startPair(t, "")
	r := send(t, "POST", p.base[1]+"/mcp", initBody, nil)
	if r.status != 200 {
		t.Fatalf("initialize: %d %s", r.status, r.body)
	}
	h := map[string][]string{"Mcp-Session-Id": {r.sid}, "Mcp-Protocol-Version": {"2025-11-25"}}
	res := make(chan reply, 1)
	go func() { res <- send(t, "POST", p.base[0]+"/mcp", sleepCall("x__sleep", 1500), h) }()
	// The call is on the owner's side once replica 1 counts it.
	waitUntil(t, 10*time.Second, func() bool { return strings.Contains(peerStateOf(t, p, 1), `"received":1`) }, "the forwarded call to reach replica 1")
	p.stops[1]()
	got := <-res
	if !strings.Contains(got.body, `"result"`) || strings.Contains(got.body, `"isError":true`) {
		t.Errorf("a call forwarded to a draining owner: %d %.300s", got.status, got.body)
	}
}

// peerStateOf is replica i's /api/replicas entry for itself, as text.
func peerStateOf(t *testing.T, p *pair, i int) string {
	t.Helper()
	r := send(t, "GET", p.base[i]+"/api/replicas", "", nil)
	var rs struct {
		Replicas []json.RawMessage `json:"replicas"`
	}
	if json.Unmarshal([]byte(r.body), &rs) != nil || len(rs.Replicas) <= i {
		return ""
	}
	return string(rs.Replicas[i])
}

func waitUntil(t *testing.T, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A placement-one server restarted on its owner while a call holds its
// process: the new process starts only once the old one is gone, never
// beside it.
func TestPlacementOneRestartRunsOneProcess(t *testing.T) {
	dir := t.TempDir()
	fx := testserver.Build(t)
	keyDir := filepath.Join(dir, "key")
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(keyDir, "current"), []byte(strings.Repeat("k", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	peers, _ := json.Marshal(freeLoopback(t, 1))
	lock := filepath.Join(dir, "one.lock")
	cfg := filepath.Join(dir, "config.json")
	doc := fmt.Sprintf(`{"replicas": {"count": 1, "peers": %s, "keyDir": %q, "drainDelay": "100ms"},
	  "mcpServers": {"one": {"command": %q, "args": ["-flock", %q], "placement": "one"}}}`, peers, keyDir, fx, lock)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	base := serveReplica0(t, cfg)

	r := send(t, "POST", base+"/servers/one/mcp", initBody, nil)
	if r.status != 200 {
		t.Fatalf("initialize: %d %s", r.status, r.body)
	}
	h := map[string][]string{"Mcp-Session-Id": {r.sid}, "Mcp-Protocol-Version": {"2025-11-25"}}
	slow := make(chan reply, 1)
	go func() { slow <- send(t, "POST", base+"/servers/one/mcp", sleepCall("sleep", 1500), h) }()
	waitUntil(t, 10*time.Second, func() bool {
		b := send(t, "GET", base+"/api/servers/one", "", nil).body
		return strings.Contains(b, `"inFlight": 1`) || strings.Contains(b, `"inFlight":1`)
	}, "the slow call to be in flight")
	restarted := make(chan reply, 1)
	go func() { restarted <- send(t, "POST", base+"/api/servers/one/restart", "", nil) }()
	who := send(t, "POST", base+"/servers/one/mcp", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`, h)
	<-slow
	<-restarted
	if b, _ := os.ReadFile(lock + ".failures"); len(b) > 0 {
		t.Errorf("two processes of a placement-one server at once on its owner:\n%s", b)
	}
	t.Logf("whoami during the restart: %d %.120s", who.status, who.body)
}

// A 2026-07-28 retry whose requestState an earlier run of this replica
// made: the owner is gone, said at once, to the request by its id.
func TestOwnerGoneAnswersTheRequest(t *testing.T) {
	p := startPair(t, "")
	keys, _ := replica.NewKeys(p.key)
	state := keys.Stamp(replica.Owner{Ordinal: 0, Incarnation: "aaaaaaaaaaaaaaaaaaaa"}, "mcpv1.x.y")
	body := `{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"x__echo","arguments":{},"requestState":"` + state + `","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	for i := range 2 { // on the replica that made it, and through the other
		r := send(t, "POST", p.base[i]+"/mcp", body, map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"x__echo"}})
		if r.status != 404 || !strings.Contains(r.body, `"id":42`) || !strings.Contains(r.body, "is gone") {
			t.Errorf("via replica %d: %d %s, want 404 naming request 42", i, r.status, r.body)
		}
	}
}

// An owner that accepts connections and never answers the TLS handshake
// (a hung or stopped process) is gone once ownerTimeout passes: its
// session's requests get 404, and the client's wait is bounded by it.
func TestSilentOwnerIsGoneWithinTheBound(t *testing.T) {
	dir := t.TempDir()
	key := []byte(strings.Repeat("k", 40))
	keyDir := filepath.Join(dir, "key")
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(keyDir, "current"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	// Replica 1's address: a listener that accepts and says nothing.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	peers, _ := json.Marshal([]string{freeLoopback(t, 1)[0], silent.Addr().String()})
	cfg := filepath.Join(dir, "config.json")
	doc := fmt.Sprintf(`{"replicas": {"count": 2, "peers": %s, "keyDir": %q, "ownerTimeout": "300ms", "drainDelay": "0s"},
	  "mcpServers": {"x": {"command": %q}}}`, peers, keyDir, testserver.Build(t))
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	base := serveReplica0(t, cfg)

	keys, _ := replica.NewKeys(key)
	sid := keys.Stamp(replica.Owner{Ordinal: 1, Incarnation: "aaaaaaaaaaaaaaaaaaaa"}, "session")
	res := make(chan reply, 1)
	go func() {
		res <- send(t, "POST", base+"/mcp", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
			map[string][]string{"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-11-25"}})
	}()
	select {
	case r := <-res:
		if r.status != 404 || !strings.Contains(r.body, "gone") {
			t.Errorf("a session whose owner never answers: %d %s, want 404 saying it is gone", r.status, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request for a silent owner's session waited past 10 s (ownerTimeout is 300ms)")
	}
}

// A request forwarded to its session's owner is limited by the rate
// limits of the replica the client reached and written in that
// replica's audit; the owner decides it and serves it. Limits add up
// per replica: calls the client sends to the owner directly are counted
// there, in a bucket of the owner's.
func TestForwardedRequestsAreGovernedWhereTheyArrived(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	p := startPair(t, `"auth": {"issuer": "`+iss.URL+`", "publicUrl": "`+publicURL+`/", "scopes": ["mcp"]},
	  "rateLimits": {"perIdentity": {"perSecond": 0.001, "burst": 2}},
	  "audit": {"arguments": "full"},`)
	alice := userToken(t, iss, "alice")
	adminClaims := iss.Claims("root", publicURL)
	adminClaims["scope"] = "mcpvisor:admin"
	admin := iss.Mint(t, adminClaims, authntest.MintOptions{})

	r := send(t, "POST", p.base[1]+"/mcp", initBody, bearer(alice))
	if r.status != 200 || !strings.HasPrefix(r.sid, replica.StampPrefix+"1.") {
		t.Fatalf("initialize on replica 1: %d %q %s", r.status, r.sid, r.body)
	}
	call := func(base string, id int) reply {
		h := bearer(alice)
		h["Mcp-Session-Id"] = []string{r.sid}
		h["Mcp-Protocol-Version"] = []string{"2025-11-25"}
		return send(t, "POST", base+"/mcp", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"hi %d"}}}`, id, id), h)
	}
	for i := range 2 {
		if c := call(p.base[0], 10+i); c.status != 200 || !strings.Contains(c.body, `"result"`) {
			t.Fatalf("forwarded call %d: %d %s", i, c.status, c.body)
		}
	}
	if c := call(p.base[0], 12); !strings.Contains(c.body, `"code":-32013`) {
		t.Errorf("a third forwarded call, over replica 0's limit: %d %s", c.status, c.body)
	}
	// The owner's own limit is untouched by what replica 0 forwarded.
	if c := call(p.base[1], 13); c.status != 200 || !strings.Contains(c.body, `"result"`) {
		t.Errorf("a call made on the owner directly: %d %s", c.status, c.body)
	}

	lines := func(base string, want int) map[string]int {
		t.Helper()
		got := map[string]int{}
		deadline := time.Now().Add(10 * time.Second)
		for {
			clear(got)
			n := 0
			a := send(t, "GET", base+"/api/audit?limit=100", "", bearer(admin))
			for _, l := range strings.Split(strings.TrimSpace(a.body), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) == nil && m["method"] == "tools/call" {
					got[fmt.Sprint(m["identity"], " ", m["target"], " ", m["outcome"], " ", m["arguments"])]++
					n++
				}
			}
			if n >= want || time.Now().After(deadline) {
				return got
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	want0 := map[string]int{"alice echo ok map[text:hi 10]": 1, "alice echo ok map[text:hi 11]": 1, "alice echo limited map[text:hi 12]": 1}
	if got := lines(p.base[0], 3); fmt.Sprint(got) != fmt.Sprint(want0) {
		t.Errorf("replica 0's audit (the calls it received): %v, want %v", got, want0)
	}
	want1 := map[string]int{"alice echo ok map[text:hi 13]": 1}
	if got := lines(p.base[1], 1); fmt.Sprint(got) != fmt.Sprint(want1) {
		t.Errorf("replica 1's audit (the owner: only the call it received): %v, want %v", got, want1)
	}
	for i, want := range []string{`mcpvisor_ratelimit_limited_total{scope="identity"} 1`, `mcpvisor_ratelimit_limited_total{scope="identity"} 0`} {
		if m := send(t, "GET", p.base[i]+"/metrics", "", bearer(admin)); !strings.Contains(m.body, want+"\n") {
			t.Errorf("replica %d's /metrics lacks %q", i, want)
		}
	}
}

// What a link's failure says of its owner: only a link that could not be
// made (a refused dial, no handshake within ownerTimeout) is an owner
// gone (404: a legacy client initializes again); a write timing out on a
// live link, a connection cut, a refusal unserved are not — the owner may
// be alive, and its sessions with it.
func TestLinkErrorsAreClassified(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		name string
		err  error
		gone bool
	}{
		{"a refused dial", fmt.Errorf("link: %w", &unreachable{refused}), true},
		{"no handshake within the bound", &unreachable{fmt.Errorf("no TLS handshake: %w", context.DeadlineExceeded)}, true},
		{"a write timed out on a live link", fmt.Errorf("link to 10.0.0.2:7443: %w", &net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded}), false},
		{"the connection cut", fmt.Errorf("link to 10.0.0.2:7443: %w", io.ErrUnexpectedEOF), false},
		{"refused unserved", link.ErrRefused, false},
		{"a handshake refused (another key)", errors.New("remote error: tls: bad certificate"), false},
	} {
		if got := linkGoneErr(c.err); got != c.gone {
			t.Errorf("%s: gone = %v, want %v", c.name, got, c.gone)
		}
	}
	// And the dial says so: a port nothing listens on.
	rs := &replicaSet{}
	rc := &config.ReplicasConfig{OwnerTimeout: time.Second}
	rs.cfg.Store(rc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := rs.dialLink(t.Context(), addr); !linkGoneErr(err) {
		t.Errorf("dialing a closed port: %v, want an owner gone", err)
	}
}

// The audit line of a call served for a peer goes to the peer, which
// says whether it took it; a line it did not take is written here: none
// is lost, and none written twice when the answer comes. The owner's
// goroutines that wait for the answers end before its audit closes.
func TestAuditLinesServedForAPeerAreNeverLost(t *testing.T) {
	rs, own, file := auditedReplicaSet(t, 5*time.Second)
	srv := &link.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lr := linkReceiver{rs, link.PeerOf(r.Context())}
		if !lr.Audit(audit.Record{Method: "tools/call", Target: r.URL.Path[1:], Outcome: "ok"}) {
			t.Error("a live link refused a line")
		}
	})}
	var mu sync.Mutex
	var taken []string
	tr := &link.Transport{Dial: func(context.Context, string) (net.Conn, error) {
		c, s := net.Pipe()
		go srv.ServeConn(s)
		return c, nil
	}, Answer: func(kind byte, q []byte) []byte {
		var recs []audit.Record
		if kind != kindAudits || json.Unmarshal(q, &recs) != nil {
			return nil
		}
		a := make([]byte, len(recs))
		for i, rec := range recs {
			if strings.HasPrefix(rec.Target, "taken") {
				mu.Lock()
				taken = append(taken, rec.Target)
				mu.Unlock()
				a[i] = 1
			}
		}
		return a
	}}
	for _, path := range []string{"/taken1", "/refused1", "/taken2", "/refused2"} {
		req, _ := http.NewRequest("POST", "link://peer"+path, strings.NewReader("x"))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs.closeLines(ctx)
	tr.Close()
	srv.Close()
	rs.waitLines()
	if err := own.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if rs.lines.start() {
		t.Error("a closed tracker started a line")
	}
	b, _ := os.ReadFile(file)
	var here []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			here = append(here, fmt.Sprint(m["target"]))
		}
	}
	slices.Sort(here)
	mu.Lock()
	slices.Sort(taken)
	mu.Unlock()
	if fmt.Sprint(taken) != "[taken1 taken2]" || fmt.Sprint(here) != "[refused1 refused2]" || rs.linesHere.Load() != 2 {
		t.Errorf("lines taken by the peer %v, written here %v (counted %d); want [taken1 taken2], [refused1 refused2], 2", taken, here, rs.linesHere.Load())
	}
}

// A request with more header values than the link carries, to a session
// another replica owns, is refused where it arrived (431) and the link
// goes on serving: another call of the session succeeds.
func TestAHeaderTooLargeToRelayIsTheClients(t *testing.T) {
	p := startPair(t, "")
	r := send(t, "POST", p.base[1]+"/mcp", initBody, nil)
	if r.status != 200 {
		t.Fatalf("initialize on replica 1: %d %s", r.status, r.body)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	h := map[string][]string{"Mcp-Session-Id": {r.sid}, "Mcp-Protocol-Version": {"2025-11-25"}}
	for i := range 600 {
		h[fmt.Sprintf("X-H%d", i)] = []string{"1"}
	}
	if r := send(t, "POST", p.base[0]+"/mcp", list, h); r.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("600 header values through replica 0: %d %s, want 431", r.status, r.body)
	}
	h = map[string][]string{"Mcp-Session-Id": {r.sid}, "Mcp-Protocol-Version": {"2025-11-25"}}
	if r := send(t, "POST", p.base[0]+"/mcp", list, h); r.status != 200 || !strings.Contains(r.body, `"tools"`) {
		t.Errorf("the session's next call through replica 0: %d %s", r.status, r.body)
	}
}

// serveReplica0 serves cfg as replica 0 until the test ends, and returns
// its base URL.
func serveReplica0(t *testing.T, cfg string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o := ServeOptions{Options: options(t, cfg), Listen: "127.0.0.1:0", Socket: "none", NoWatch: true,
		Getenv: func(k string) string { return map[string]string{"MCPVISOR_ORDINAL": "0"}[k] }}
	w := &syncWriter{}
	o.Stderr = w
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, o) }()
	base := "http://" + waitServing(t, w, done)
	t.Cleanup(func() { cancel(); <-done })
	return base
}

// The tracker of audit lines on their way to peers: once closed it
// starts none; closeAndWait waits for those under way, and no longer
// than its context.
func TestTrackerWaitsWithinItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tr tracker
		for range 2 {
			if !tr.start() {
				t.Fatal("an open tracker refused to start")
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		done := make(chan struct{})
		go func() {
			tr.closeAndWait(ctx)
			close(done)
		}()
		synctest.Wait()
		if tr.start() {
			t.Error("a closed tracker started one more")
		}
		tr.done()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("closeAndWait returned with one still under way")
		default:
		}
		<-done // the context's end
		if d := time.Since(start); d != time.Second {
			t.Errorf("closeAndWait returned after %v, want its context's second", d)
		}
		// And returns as the last one ends.
		var tr2 tracker
		tr2.start()
		done2 := make(chan struct{})
		go func() {
			tr2.closeAndWait(context.Background())
			close(done2)
		}()
		synctest.Wait()
		tr2.done()
		synctest.Wait()
		select {
		case <-done2:
		default:
			t.Fatal("closeAndWait did not return as the last one ended")
		}
	})
}

// No goroutine Serve started is left once it returned: those of the
// replica's peers (the key watch, the peer listener's serve loop), of the
// daemon (the reload signal's loop, the HTTP serve loop, the config
// file's watch) and the learning of the lists not cached. Each ends on
// the shutdown by itself, so this fails on one that does not end, not on
// a missing wait: TestReplicaSetEndsItsPeerGoroutines holds the replica
// set's wait to account.
func TestServeEndsTheGoroutinesItStarts(t *testing.T) {
	defer func(d time.Duration) { keyPoll = d }(keyPoll)
	keyPoll = time.Hour
	before := map[string]bool{}
	for _, g := range goroutines() {
		before[strings.SplitN(g, " ", 3)[1]] = true
	}
	p := startPairWith(t, "", "", false, func(o *ServeOptions) { o.NoWatch, o.NoLearn = false, false })
	for i := range 2 {
		p.stops[i]()
		err := <-p.done[i]
		p.done[i] <- err // for the cleanup
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	for _, g := range goroutines() {
		if !before[strings.SplitN(g, " ", 3)[1]] && strings.Contains(g, "mcpvisor/internal/") && !strings.Contains(g, "daemon.TestServeEndsTheGoroutinesItStarts") {
			t.Errorf("a goroutine outlived Serve:\n%s", g)
		}
	}
}

// goroutines are the stacks of every goroutine, each beginning
// "goroutine N [".
func goroutines() []string {
	buf := make([]byte, 4<<20)
	return strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
}

// The lines for one link that come while its replica answers a question
// go together in the next question, not one question each; a line the
// replica gives no answer for (a replica that does not know the
// question answers nothing) is written here; the lines of another link
// go to that link.
func TestAuditLinesForOneLinkGoTogether(t *testing.T) {
	rs, own, file := auditedReplicaSet(t, 5*time.Second)
	a, b := &heldAsker{gate: make(chan struct{}), asked: make(chan struct{}, 1)}, &heldAsker{}
	line := func(p asker, target string) {
		t.Helper()
		if !(linkReceiver{rs, p}).Audit(audit.Record{Method: "tools/call", Target: target, Outcome: "ok"}) {
			t.Fatalf("a live link refused the line %s", target)
		}
	}
	line(a, "first")
	<-a.asked // a's sender waits for the answer to its first question
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprintf("l%d", i))
		line(a, want[i])
	}
	line(b, "other")
	close(a.gate)
	waitUntil(t, 10*time.Second, func() bool { return len(a.seen()) == 2 }, "a's second question")
	line(a, "old")
	closeLinesAndAudit(t, rs, own)
	if got, w := fmt.Sprint(a.seen()), fmt.Sprint([][]string{{"first"}, want, {"old"}}); got != w {
		t.Errorf("a's questions %s, want %s", got, w)
	}
	if got := fmt.Sprint(b.seen()); got != "[[other]]" {
		t.Errorf("b's questions %s, want [[other]]", got)
	}
	if b, _ := os.ReadFile(file); !strings.Contains(string(b), `"target":"old"`) || strings.Count(string(b), "\n") != 1 || rs.linesHere.Load() != 1 {
		t.Errorf("written here (%d counted): %s; want the line answered with nothing", rs.linesHere.Load(), b)
	}
	if (linkReceiver{rs, a}).Audit(audit.Record{Target: "late"}) {
		t.Error("a closed replica set took a line for a link: the gateway must write it")
	}
}

// A question carries lines up to maxBatchBytes (a link's frame is
// bounded): larger lines queued together go in several questions, and a
// line larger than that alone in one.
func TestAuditLineBatchesAreBounded(t *testing.T) {
	rs := &replicaSet{}
	rs.cfg.Store(&config.ReplicasConfig{OwnerTimeout: 5 * time.Second})
	h := &heldAsker{gate: make(chan struct{}), asked: make(chan struct{}, 1)}
	big := func(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("a", n) + `"`) }
	for i, size := range []int{10, maxBatchBytes / 3, maxBatchBytes / 3, maxBatchBytes / 3, maxBatchBytes + 1, 10} {
		if !(linkReceiver{rs, h}).Audit(audit.Record{Target: fmt.Sprint(i), Arguments: big(size)}) {
			t.Fatal("a live link refused a line")
		}
		if i == 0 {
			<-h.asked
		}
	}
	close(h.gate)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs.closeLines(ctx)
	rs.waitLines()
	if got := fmt.Sprint(h.seen()); got != "[[0] [1 2] [3] [4] [5]]" {
		t.Errorf("the questions %s, want [[0] [1 2] [3] [4] [5]]", got)
	}
}

// heldAsker is a link whose first answer waits for gate (if set), and
// which takes every line but those of a question beginning with "old";
// with fail set, its first question fails once the gate opens (a link
// that ended, or an answer that did not come in time).
type heldAsker struct {
	gate      chan struct{}
	asked     chan struct{}
	fail      error
	mu        sync.Mutex
	questions [][]string
}

func (h *heldAsker) Alive() bool { return true }

func (h *heldAsker) Ask(ctx context.Context, kind byte, q []byte) ([]byte, error) {
	var recs []audit.Record
	if kind != kindAudits || json.Unmarshal(q, &recs) != nil || len(recs) == 0 {
		return nil, fmt.Errorf("a question of kind %d: %s", kind, q)
	}
	var targets []string
	for _, r := range recs {
		targets = append(targets, r.Target)
	}
	h.mu.Lock()
	h.questions = append(h.questions, targets)
	first := len(h.questions) == 1
	h.mu.Unlock()
	if first && h.gate != nil {
		h.asked <- struct{}{}
		select {
		case <-h.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if h.fail != nil {
			return nil, h.fail
		}
	}
	if targets[0] == "old" {
		return nil, nil
	}
	return bytes.Repeat([]byte{1}, len(recs)), nil
}

// taken is the lines h took: those of every question answered but the
// first when it fails, and those of questions beginning with "old".
func (h *heldAsker) taken() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for i, q := range h.questions {
		if (i == 0 && h.fail != nil) || q[0] == "old" {
			continue
		}
		out = append(out, q...)
	}
	return out
}

func (h *heldAsker) seen() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.questions)
}

// A link whose question fails: that question's lines, and those queued
// behind it, are written here, once each, and a later line is asked
// again. A link's queue is bounded: a line beyond it is the gateway's to
// write here.
func TestAuditLinesOfAFailedQuestionAreWrittenHere(t *testing.T) {
	rs, own, file := auditedReplicaSet(t, 5*time.Second)
	h := &heldAsker{gate: make(chan struct{}), asked: make(chan struct{}, 1), fail: errors.New("link: the peer's connection ended")}
	audit1 := func(target string) bool {
		return (linkReceiver{rs, h}).Audit(audit.Record{Method: "tools/call", Target: target, Outcome: "ok"})
	}
	if !audit1("first") {
		t.Fatal("a live link refused a line")
	}
	<-h.asked
	queued := 0
	for i := range 2 * maxQueuedLines {
		if !audit1(fmt.Sprintf("q%d", i)) {
			break
		}
		queued++
	}
	if queued != maxQueuedLines {
		t.Errorf("%d lines queued behind a question, want the bound %d", queued, maxQueuedLines)
	}
	close(h.gate) // the first question fails
	// Counted here: the line over the bound (the gateway's to write),
	// the failed question's and those behind it.
	waitUntil(t, 10*time.Second, func() bool { return rs.linesHere.Load() == uint64(2+queued) }, "the failed lines written here")
	if !audit1("after") {
		t.Error("a live link refused a line after a failed question")
	}
	closeLinesAndAudit(t, rs, own)
	b, _ := os.ReadFile(file)
	if n := strings.Count(string(b), "\n"); n != 1+queued || strings.Count(string(b), `"target":"first"`) != 1 || strings.Contains(string(b), `"target":"after"`) {
		t.Errorf("written here: %d lines; want the failed question's and those behind it, once each, not the later one", n)
	}
	if got := fmt.Sprint(h.taken()); got != "[after]" {
		t.Errorf("taken by the link: %s, want [after]", got)
	}
}

// The replica set closing while a link's replica does not answer: what is
// queued is written here when the wait runs out, a line that comes later
// is the gateway's, and the question under way ends with the links'
// close, its lines written here. Every line is written once, somewhere.
func TestAuditLinesAreWrittenWhenTheCloseRunsOut(t *testing.T) {
	rs, own, file := auditedReplicaSet(t, time.Minute)
	h := &heldAsker{gate: make(chan struct{}), asked: make(chan struct{}, 1), fail: errors.New("link: the peer's connection ended")}
	audit1 := func(target string) bool {
		return (linkReceiver{rs, h}).Audit(audit.Record{Method: "tools/call", Target: target, Outcome: "ok"})
	}
	audit1("first")
	<-h.asked
	for i := range 10 {
		audit1(fmt.Sprintf("q%d", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the shutdown's time is up
	rs.closeLines(ctx)
	if n := rs.linesHere.Load(); n != 10 {
		t.Errorf("%d lines written here at the close, want the 10 queued", n)
	}
	if audit1("late") {
		t.Error("a closing replica set took a line")
	}
	close(h.gate) // the links close: the question under way fails
	rs.waitLines()
	if n := rs.linesHere.Load(); n != 12 {
		t.Errorf("%d lines counted here, want 12 (with the late one, the gateway's to write)", n)
	}
	if err := own.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(file)
	if strings.Count(string(b), "\n") != 11 || strings.Count(string(b), `"target":"first"`) != 1 {
		t.Errorf("written here: %s", b)
	}
}

// A replica set's peer goroutines — the key watch and the peer
// listener's serve loop — end when it closes, whatever the context they
// were started with: the watch has its own cancel, and close waits for
// both.
func TestReplicaSetEndsItsPeerGoroutines(t *testing.T) {
	before := map[string]bool{}
	for _, g := range goroutines() {
		before[strings.SplitN(g, " ", 3)[1]] = true
	}
	rs := openTestReplicaSet(t, "")
	rs.servePeers(context.Background(), http.NotFoundHandler()) // a context that never ends
	closeWithin(t, rs, context.Background(), 10*time.Second)
	for _, g := range goroutines() {
		if !before[strings.SplitN(g, " ", 3)[1]] && (strings.Contains(g, "(*replicaSet).watchKeys") || strings.Contains(g, "(*replicaSet).servePeers")) {
			t.Errorf("a peer goroutine outlived its replica set:\n%s", g)
		}
	}
}

// A replica set closed with its time up while a link's replica does not
// answer writes, before close returns, the lines queued and those of the
// question under way (which ends with the links, or within ownerTimeout).
func TestReplicaSetCloseWritesTheLinesUnderWay(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	own, err := audit.Open(audit.Options{File: file})
	if err != nil {
		t.Fatal(err)
	}
	rs := openTestReplicaSet(t, `, "ownerTimeout": "300ms"`)
	rs.audit = func() *audit.Log { return own }
	rs.servePeers(context.Background(), http.NotFoundHandler())
	h := &heldAsker{gate: make(chan struct{}), asked: make(chan struct{}, 1)}
	for i := range 5 {
		if !(linkReceiver{rs, h}).Audit(audit.Record{Target: fmt.Sprint(i)}) {
			t.Fatal("a live link refused a line")
		}
		if i == 0 {
			<-h.asked // the first line's question is under way, unanswered
		}
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	closeWithin(t, rs, expired, 10*time.Second)
	if n := rs.linesHere.Load(); n != 5 {
		t.Errorf("%d lines written here when close returned, want 5", n)
	}
	if err := own.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(file); strings.Count(string(b), "\n") != 5 {
		t.Errorf("the audit here: %s", b)
	}
}

// openTestReplicaSet is replica 0 of one, with a key, peers on loopback
// and more members of the replicas block (extra, a comma before each).
func openTestReplicaSet(t *testing.T, extra string) *replicaSet {
	t.Helper()
	keys := t.TempDir()
	if err := os.WriteFile(filepath.Join(keys, "current"), []byte(strings.Repeat("k", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	peers, _ := json.Marshal(freeLoopback(t, 1))
	doc := fmt.Sprintf(`{"replicas": {"count": 1, "peers": %s, "keyDir": %q%s}, "mcpServers": {}}`, peers, keys, extra)
	cfg, err := config.Parse([]byte(doc), "config.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ordinal := func(k string) string {
		if k == "MCPVISOR_ORDINAL" {
			return "0"
		}
		return ""
	}
	rs, err := openReplicas(cfg, ordinal, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rs.reload(cfg)
	return rs
}

// closeWithin closes rs with ctx, failing the test if that takes longer
// than limit.
func closeWithin(t *testing.T, rs *replicaSet, ctx context.Context, limit time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		rs.close(ctx)
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("the replica set did not close within %v", limit)
	}
}

// Once the replica set begins to close, it takes no line, even while it
// waits for the senders to hand over what is queued: peers go on
// forwarding calls meanwhile, and a queue that never empties would hold
// the close to its limit. A later line is the gateway's to write here.
func TestAuditLinesAreRefusedOnceTheCloseBegins(t *testing.T) {
	rs := &replicaSet{}
	rs.cfg.Store(&config.ReplicasConfig{OwnerTimeout: time.Minute})
	h := &heldAsker{gate: make(chan struct{}), asked: make(chan struct{}, 1)}
	audit1 := func(target string) bool { return (linkReceiver{rs, h}).Audit(audit.Record{Target: target}) }
	audit1("first")
	<-h.asked
	audit1("queued")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rs.closeLines(ctx)
	}()
	waitUntil(t, 10*time.Second, func() bool {
		rs.queueMu.Lock()
		defer rs.queueMu.Unlock()
		return rs.queuesClosed
	}, "the set to begin closing while its sender waits")
	if audit1("late") {
		t.Error("a closing set took a line")
	}
	close(h.gate)
	<-closed
	rs.waitLines()
	if got := fmt.Sprint(h.seen()); got != "[[first] [queued]]" {
		t.Errorf("the questions %s, want [[first] [queued]]", got)
	}
}

// auditedReplicaSet is a bare replica set with an audit of its own (in
// file) and ownerTimeout, for the hand-over of audit lines.
func auditedReplicaSet(t *testing.T, ownerTimeout time.Duration) (*replicaSet, *audit.Log, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	own, err := audit.Open(audit.Options{File: file})
	if err != nil {
		t.Fatal(err)
	}
	rs := &replicaSet{audit: func() *audit.Log { return own }}
	rs.cfg.Store(&config.ReplicasConfig{OwnerTimeout: ownerTimeout})
	return rs, own, file
}

// closeLinesAndAudit closes rs's hand-over of lines, then own, as the
// replica set and serve do.
func closeLinesAndAudit(t *testing.T, rs *replicaSet, own *audit.Log) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs.closeLines(ctx)
	rs.waitLines()
	if err := own.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// The lines a peer hands over are written here as the peer would have
// written them: a line without arguments gets no digest of any (it
// travels as JSON, where none must not become null), one with arguments
// the digest of its own.
func TestHandedLinesKeepTheirArguments(t *testing.T) {
	rs, own, file := auditedReplicaSet(t, 5*time.Second)
	q, err := json.Marshal([]audit.Record{
		{Method: "tools/call", Target: "none", Outcome: "denied"},
		{Method: "tools/call", Target: "some", Outcome: "ok", Arguments: json.RawMessage(`{"a":1}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.answer(kindAudits, q); !bytes.Equal(got, []byte{1, 1}) {
		t.Fatalf("the answer %v, want both taken", got)
	}
	closeLinesAndAudit(t, rs, own)
	b, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "arguments") || !strings.Contains(lines[1], `"arguments_sha256":"`+audit.Digest(json.RawMessage(`{"a":1}`))+`"`) {
		t.Errorf("the lines written:\n%s", b)
	}
}
