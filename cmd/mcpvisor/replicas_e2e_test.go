package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/oauthclient/oauthtest"
	"github.com/mcpvisor/mcpvisor/internal/replica"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/internal/testserver/haproxy"
)

// Replicas on loopback standing in for a StatefulSet: three mcpvisor
// serve processes, ordinals 0–2, each with its own ports and state
// directory, one config file (the ConfigMap) and one key directory (the
// Secret), behind haproxy balancing round robin with no stickiness and
// retrying only connection failures.

// deployment is replicas under test.
type deployment struct {
	t       *testing.T
	bin     string
	cfg     string   // the config file every replica reads
	keyDir  string   // the shared key
	lock    string   // the placement-one fixture's flock file
	main    []string // each replica's client address
	peer    []string // each replica's peer address
	state   []string // each replica's state directory (kept across restarts)
	reps    []*started
	lb      *haproxy.LB
	fixture string
	one     string // the placement-one server's name
	servers string // more members of mcpServers, each with a comma before
	top     string // more top-level members, each with a comma after
}

// freeAddrs reserves n loopback addresses (listened on and closed: a
// restarted replica comes back on its own).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// replicaConfig is the deployment's config for count replicas.
func (d *deployment) replicaConfig(count int, extra string) string {
	peers, _ := json.Marshal(d.peer) // every slot's: those beyond count are replicas it may grow to
	return fmt.Sprintf(`{%s"replicas": {"count": %d, "peers": %s, "keyDir": %q%s},
	  "mcpServers": {
	    "fx": {"command": %q},
	    %q: {"command": %q, "args": ["-flock", %q], "placement": "one"}%s}}`, d.top, count, peers, d.keyDir, extra, d.fixture, d.one, d.fixture, d.lock, d.servers)
}

// newDeployment starts n replicas (of slots addresses, for growing
// later) and haproxy in front of them.
func newDeployment(t *testing.T, n, slots int, extra string, lbOpts ...haproxy.Option) *deployment {
	t.Helper()
	return newDeploymentOf(t, n, slots, extra, "memo", lbOpts...)
}

func newDeploymentOf(t *testing.T, n, slots int, extra, one string, lbOpts ...haproxy.Option) *deployment {
	t.Helper()
	return newDeploymentWith(t, n, slots, extra, one, "", lbOpts...)
}

func newDeploymentWith(t *testing.T, n, slots int, extra, one, servers string, lbOpts ...haproxy.Option) *deployment {
	t.Helper()
	return newDeploymentTop(t, n, slots, "", extra, one, servers, lbOpts...)
}

// newDeploymentTop is newDeploymentWith with top-level members of the
// config (top, a comma after each).
func newDeploymentTop(t *testing.T, n, slots int, top, extra, one, servers string, lbOpts ...haproxy.Option) *deployment {
	t.Helper()
	bin, _ := binaries(t)
	dir := t.TempDir()
	d := &deployment{t: t, bin: bin, cfg: filepath.Join(dir, "config.json"), keyDir: filepath.Join(dir, "key"), lock: filepath.Join(dir, "memo.lock"),
		fixture: testserver.Build(t), one: one, servers: servers, top: top}
	if err := os.MkdirAll(d.keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if err := os.WriteFile(filepath.Join(d.keyDir, "current"), []byte(hex.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := freeAddrs(t, 2*slots)
	d.main, d.peer = addrs[:slots], addrs[slots:]
	for i := range slots {
		d.state = append(d.state, filepath.Join(dir, fmt.Sprintf("state-%d", i)))
	}
	d.writeConfig(d.replicaConfig(n, extra))
	d.reps = make([]*started, slots)
	for i := range n {
		d.start(i)
	}
	d.lb = haproxy.Start(t, d.main[:n], lbOpts...)
	return d
}

func (d *deployment) writeConfig(cfg string) {
	// As the kubelet swaps a ConfigMap: a new file renamed over the old.
	tmp := d.cfg + ".new"
	if err := os.WriteFile(tmp, []byte(cfg), 0o600); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, d.cfg); err != nil {
		d.t.Fatal(err)
	}
}

// start runs replica i and waits until it serves.
func (d *deployment) start(i int) *started {
	t := d.t
	s := &started{marker: testserver.NewMarker(t), waited: make(chan error, 1)}
	s.cmd = exec.Command(d.bin, "serve", "--config", d.cfg, "--listen", d.main[i], "--state-dir", d.state[i], "--log-level", "info", "--no-learn")
	s.cmd.Env = append(os.Environ(), testserver.MarkerEnv+"="+s.marker, fmt.Sprintf("MCPVISOR_ORDINAL=%d", i))
	stderr, _ := s.cmd.StderrPipe()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			s.mu.Unlock()
			if strings.Contains(sc.Text(), " servers at ") {
				select {
				case up <- struct{}{}:
				default:
				}
			} else if testing.Verbose() {
				t.Logf("replica %d: %s", i, sc.Text())
			}
		}
		s.waited <- s.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		testserver.KillProcesses(s.marker)
	})
	select {
	case <-up:
	case err := <-s.waited:
		t.Fatalf("replica %d exited at start: %v\n%s", i, err, s.stderrText())
	case <-time.After(20 * time.Second):
		t.Fatalf("replica %d did not start", i)
	}
	s.base = "http://" + d.main[i]
	d.reps[i] = s
	return s
}

// stop ends replica i with sig and waits for its exit.
func (d *deployment) stop(i int, sig syscall.Signal, limit time.Duration) {
	d.t.Helper()
	s := d.reps[i]
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.waited:
	case <-time.After(limit):
		d.t.Fatalf("replica %d did not exit within %v of %v", i, limit, sig)
	}
	if sig == syscall.SIGKILL {
		testserver.KillProcesses(s.marker) // its servers die with it: the pid namespace, or the shim's watch
	}
}

// lockFailures is what the placement-one fixture recorded of a second
// process that found the lock held.
func (d *deployment) lockFailures() string {
	b, _ := os.ReadFile(d.lock + ".failures")
	return string(b)
}

// locks is how many processes of the placement-one fixture took its
// lock so far.
func (d *deployment) locks() int {
	b, _ := os.ReadFile(d.lock + ".log")
	return strings.Count(string(b), "locked ")
}

// whoami calls the placement-one server's whoami through url.
func whoami(t *testing.T, sess *mcp.ClientSession, tool string) string {
	t.Helper()
	res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: tool})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s: %s", tool, textOf(res))
	}
	return textOf(res)
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestReplicasBehindABalancer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, 3, 3, "")
	lb := d.lb.URL() + "/mcp"

	t.Run("legacy sessions", func(t *testing.T) {
		// Each client's requests land on every replica in turn; the
		// session's owner serves them all.
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for c := range 2 {
			wg.Go(func() {
				sess := eraClient(t, lb, "2025-11-25", fmt.Sprintf("legacy-%d", c))
				for i := range 500 {
					text := fmt.Sprintf("c%d-%d", c, i)
					res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"text": text}})
					if err != nil {
						errs <- fmt.Errorf("client %d call %d: %w", c, i, err)
						return
					}
					if got := textOf(res); !strings.Contains(got, text) {
						errs <- fmt.Errorf("client %d call %d: got %q", c, i, got)
						return
					}
				}
				// Sampling: the server's request reaches this client,
				// wherever the session's requests landed.
				res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "fx__sample", Arguments: map[string]any{"prompt": "who"}})
				if err != nil || !strings.Contains(textOf(res), fmt.Sprintf("legacy-%d", c)) {
					errs <- fmt.Errorf("client %d sampling: %v %v", c, err, res)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("TypeScript SDK", func(t *testing.T) {
		// Its legacy session's 1,000 calls, progress and sampling, and
		// a 2026-07-28 client's MRTR round, through the balancer.
		for _, mode := range []string{"legacy", "pin"} {
			n := map[string]int{"legacy": 1000, "pin": 100}[mode]
			r := runTSClientEnv(t, []string{"TS_TOOL_PREFIX=fx__", fmt.Sprintf("TS_REPEAT=%d", n)}, mode, lb)
			if r.Repeated != n || r.Progress == 0 || !strings.Contains(r.Sampled, "ts answer") || !strings.Contains(r.Text, "from typescript") {
				t.Errorf("TypeScript client (%s) through the balancer: %+v", mode, r)
			}
		}
	})

	t.Run("modern requests and MRTR rounds", func(t *testing.T) {
		sess := eraClient(t, lb, "", "modern")
		for i := range 300 {
			if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"text": fmt.Sprint(i)}}); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		for i := range 20 {
			res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "fx__sample", Arguments: map[string]any{"prompt": "who"}})
			if err != nil || !strings.Contains(textOf(res), "modern") {
				t.Fatalf("MRTR round %d: %v %+v", i, err, res)
			}
		}
	})

	t.Run("placement one", func(t *testing.T) {
		// Every replica reaches it, in either era, directly and through
		// the balancer; one process ever ran (it logs each lock it takes).
		for i := range 3 {
			for _, era := range []string{"2025-11-25", ""} {
				whoami(t, eraClient(t, "http://"+d.main[i]+"/mcp", era, "direct"), "memo__whoami")
				whoami(t, eraClient(t, "http://"+d.main[i]+"/servers/memo/mcp", era, "direct"), "whoami")
			}
		}
		if f := d.lockFailures(); f != "" {
			t.Errorf("two processes of the placement-one server at once:\n%s", f)
		}
		if n := d.locks(); n != 1 {
			t.Errorf("the placement-one server took its lock %d times, want 1 process", n)
		}
		// Every replica's view of the deployment: which one runs it.
		owner := replica.OwnerOf("memo", 3)
		for i := range 3 {
			resp, err := http.Get("http://" + d.main[i] + "/api/replicas")
			if err != nil {
				t.Fatal(err)
			}
			var rs struct {
				Replicas []struct {
					Ordinal int            `json:"ordinal"`
					Ready   string         `json:"ready"`
					Servers map[string]int `json:"servers"`
				} `json:"replicas"`
			}
			err = json.NewDecoder(resp.Body).Decode(&rs)
			resp.Body.Close()
			if err != nil || len(rs.Replicas) != 3 {
				t.Fatalf("replica %d's /api/replicas: %v %+v", i, err, rs)
			}
			for _, r := range rs.Replicas {
				if want := map[bool]int{true: 1}[r.Ordinal == owner]; r.Servers["memo"] != want || r.Ready != "ok" {
					t.Errorf("replica %d says replica %d runs memo ×%d (ready %q), want ×%d", i, r.Ordinal, r.Servers["memo"], r.Ready, want)
				}
			}
		}
	})

	t.Run("the dashboard", func(t *testing.T) {
		// In a browser, on a replica that does not run memo: the
		// Replicas section lists the three, says which one this is and
		// which runs memo; a replica killed shows unreachable. (Last: it
		// kills one.)
		owner := replica.OwnerOf("memo", 3)
		viewed, killed := (owner+1)%3, (owner+2)%3
		whoami(t, eraClient(t, "http://"+d.main[viewed]+"/mcp", "2025-11-25", "direct"), "memo__whoami") // memo runs on its owner
		bt := newTab(t, newBrowser(t))
		bt.do(t, "open the dashboard", chromedp.Navigate("http://"+d.main[viewed]+"/"))
		cell := func(ord, col int) string {
			return fmt.Sprintf(`(document.querySelector('#replicas tbody').rows[%d]?.cells[%d]?.textContent ?? '')`, ord, col)
		}
		bt.waitFor(t, "the Replicas section, three rows", `!document.getElementById('replicas-section').hidden && document.querySelector('#replicas tbody').rows.length === 3`)
		bt.waitFor(t, "this replica named", cell(viewed, 0)+fmt.Sprintf(` === '%d (this one)'`, viewed))
		bt.waitFor(t, "memo's owner runs it", cell(owner, 4)+`.split(', ').includes('memo×1')`)
		for _, i := range []int{viewed, killed} {
			if got := eval[string](t, bt, cell(i, 4)); strings.Contains(got, "memo") {
				t.Errorf("replica %d's row says it runs %q", i, got)
			}
		}
		d.stop(killed, syscall.SIGKILL, 10*time.Second)
		bt.waitFor(t, "the killed replica unreachable", cell(killed, 2)+`.startsWith('unreachable') && document.querySelector('#replicas tbody').rows[`+strconv.Itoa(killed)+`].className === 'unready'`)
		if errs := bt.consoleErrors(); len(errs) > 0 {
			t.Errorf("console errors: %v", errs)
		}
	})
}

// ownerOfSession is the ordinal a stamped legacy session id names.
func ownerOfSession(id string) int {
	rest, ok := strings.CutPrefix(id, "mcpv-o1.")
	if !ok {
		return -1
	}
	n, _ := strconv.Atoi(strings.SplitN(rest, ".", 2)[0])
	return n
}

// load is clients calling through the balancer until stopped: modern
// ones, each call on its own; legacy ones, each on its session, which
// initialize again after a 404, as the specification tells them to.
type load struct {
	t    *testing.T
	url  string
	stop chan struct{}
	wg   sync.WaitGroup

	mu sync.Mutex
	// modern calls: each one's send time and outcome.
	modern []callRecord
	// legacy: per client, its sessions' owners and the failures it saw.
	legacy []*legacyClient
}

// loadPause spaces each load client's calls: a few hundred calls a
// second in all, enough to have calls in flight at every moment, and
// CPU left for the tests that run beside these.
const loadPause = 2 * time.Millisecond

type callRecord struct {
	sent, done time.Time
	err        error
}

type legacyClient struct {
	mu       sync.Mutex
	owners   []int       // the owner of each session it had, in order
	failures []time.Time // when a call found its session gone (404)
	recovers []time.Time // when a call succeeded after a failure
	inFlight []time.Time // when a call failed otherwise (its relay died under it)
	calls    int
}

func startLoad(t *testing.T, url string, modern, legacy int) *load {
	l := &load{t: t, url: url, stop: make(chan struct{})}
	for c := range modern {
		sess := eraClient(t, url, "", fmt.Sprintf("modern-%d", c))
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				rec := callRecord{sent: time.Now()}
				_, rec.err = sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"text": fmt.Sprint(i)}})
				rec.done = time.Now()
				l.mu.Lock()
				l.modern = append(l.modern, rec)
				l.mu.Unlock()
				time.Sleep(loadPause)
			}
		})
	}
	for c := range legacy {
		lc := &legacyClient{}
		l.legacy = append(l.legacy, lc)
		l.wg.Go(func() {
			who := fmt.Sprintf("legacy-%d", c)
			// The go-sdk's defaults: its standalone stream, relayed by
			// whichever replica it landed on, is opened again when that
			// one dies.
			connect := func() (*mcp.ClientSession, error) {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				client := mcp.NewClient(&mcp.Implementation{Name: who, Version: "0"}, nil)
				return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			}
			sess, err := connect()
			if err != nil {
				t.Errorf("%s: %v", who, err)
				return
			}
			defer func() { sess.Close() }()
			lc.owners = append(lc.owners, ownerOfSession(sess.ID()))
			failed := false
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				_, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"text": fmt.Sprint(i)}})
				lc.mu.Lock()
				lc.calls++
				if err != nil && !errors.Is(err, mcp.ErrSessionMissing) {
					// Not the session: the request's own relay, a replica
					// that died under it. Counted; the session goes on.
					lc.inFlight = append(lc.inFlight, time.Now())
					lc.mu.Unlock()
					continue
				}
				if err != nil {
					lc.failures = append(lc.failures, time.Now())
					failed = true
					lc.mu.Unlock()
					sess.Close()
					// A new session, as after any 404.
					s, err := connect()
					if err != nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					sess = s
					lc.mu.Lock()
					lc.owners = append(lc.owners, ownerOfSession(sess.ID()))
					lc.mu.Unlock()
					continue
				}
				if failed {
					lc.recovers = append(lc.recovers, time.Now())
					failed = false
				}
				lc.mu.Unlock()
				time.Sleep(loadPause)
			}
		})
	}
	return l
}

func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
}

// modernAfter splits the modern calls: those sent after at (which must
// all succeed), and the failures of those in flight at it.
func (l *load) modernAfter(at time.Time) (after, failedAfter, inFlightFailed, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.modern {
		total++
		switch {
		case r.sent.After(at):
			after++
			if r.err != nil {
				failedAfter++
				l.t.Logf("a modern call sent %v after the event failed: %v", r.sent.Sub(at), r.err)
			}
		case r.done.After(at) && r.err != nil:
			inFlightFailed++
		}
	}
	return
}

func TestReplicasFailover(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, 3, 3, "")
	url := d.lb.URL() + "/mcp"
	l := startLoad(t, url, 4, 6)
	time.Sleep(time.Second)
	// SIGKILL replica 2 mid-run.
	killed := time.Now()
	d.stop(2, syscall.SIGKILL, 5*time.Second)
	reaped := time.Now()
	time.Sleep(3 * time.Second)
	l.end()

	after, failedAfter, inFlight, total := l.modernAfter(reaped)
	t.Logf("2026-07-28: %d calls, %d sent after the kill (reaped %v after SIGKILL), %d of those failed; %d in flight at the kill failed (not retried)",
		total, after, reaped.Sub(killed).Round(time.Millisecond), failedAfter, inFlight)
	if after == 0 || failedAfter != 0 {
		t.Errorf("modern calls after the kill: %d sent, %d failed; want some, none failed", after, failedAfter)
	}
	var worst time.Duration
	for i, lc := range l.legacy {
		lc.mu.Lock()
		owned := lc.owners[0] == 2
		switch {
		case owned && len(lc.failures) == 0:
			t.Errorf("legacy client %d: its session's owner was killed and it saw no 404", i)
		case owned && len(lc.recovers) == 0:
			t.Errorf("legacy client %d: did not recover after its owner was killed", i)
		case owned:
			took := lc.recovers[0].Sub(killed)
			worst = max(worst, took)
			t.Logf("legacy client %d (owner 2): 404 then a new session on replica %d; first success %v after the kill", i, lc.owners[len(lc.owners)-1], took.Round(time.Millisecond))
		case len(lc.failures) > 0:
			t.Errorf("legacy client %d: its session's owner (%d) lives, yet it was told %d times its session is gone", i, lc.owners[0], len(lc.failures))
		}
		if len(lc.inFlight) > 0 {
			t.Logf("legacy client %d: %d calls in flight through the killed replica failed (not retried)", i, len(lc.inFlight))
		}
		lc.mu.Unlock()
	}
	t.Logf("failover: the first success of an affected client came %v after the kill at worst", worst.Round(time.Millisecond))
}

func TestReplicasRollingRestart(t *testing.T) {
	t.Parallel()
	// The balancer checks readiness, as a Service does: a draining
	// replica is unready at once, and leaves the rotation.
	d := newDeployment(t, 3, 3, "", haproxy.WithHealthCheck("/readyz"))
	url := d.lb.URL() + "/mcp"
	l := startLoad(t, url, 3, 3)
	time.Sleep(500 * time.Millisecond)
	began := time.Now()
	for i := range 3 {
		// As Kubernetes restarts a StatefulSet: SIGTERM, wait for the
		// exit (the drain: unready for drainDelay, then what is in
		// flight finishes), start the pod again under its ordinal.
		sent := time.Now()
		d.stop(i, syscall.SIGTERM, 60*time.Second)
		t.Logf("replica %d drained and exited in %v", i, time.Since(sent).Round(time.Millisecond))
		d.start(i)
		waitReady(t, "http://"+d.main[i])
	}
	time.Sleep(500 * time.Millisecond)
	l.end()
	after, failedAfter, _, total := l.modernAfter(began)
	t.Logf("2026-07-28: %d calls, %d during the rolling restart, %d failed", total, after, failedAfter)
	if after == 0 || failedAfter != 0 {
		t.Errorf("modern calls during the rolling restart: %d, %d failed; want none failed", after, failedAfter)
	}
	for i, lc := range l.legacy {
		lc.mu.Lock()
		if n := len(lc.failures); n != len(lc.recovers) {
			t.Errorf("legacy client %d: %d of its sessions ended, %d recovered", i, n, len(lc.recovers))
		}
		t.Logf("legacy client %d: %d calls, sessions on replicas %v (each ended by its owner's restart with a 404, then initialized again)", i, lc.calls, lc.owners)
		lc.mu.Unlock()
	}
}

// waitReady waits until base's /readyz says ready.
func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 20s: %v", base, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A server placed on one replica moves when the count changes: the old
// owner stops it before the new owner starts it, 3 → 2 → 3, and every
// replica reaches it throughout; while its owner is down, calls get a
// retryable error naming the owner.
func TestReplicasPlacementMoves(t *testing.T) {
	t.Parallel()
	// A name replica 2 owns among three: it moves when the count is 2.
	one := ""
	for i := 0; one == ""; i++ {
		if name := fmt.Sprintf("memo%d", i); replica.OwnerOf(name, 3) == 2 {
			one = name
		}
	}
	then := replica.OwnerOf(one, 2)
	d := newDeploymentOf(t, 3, 3, "", one)
	tool := one + "__whoami"
	sessions := make([]*mcp.ClientSession, 3)
	for i := range 3 {
		sessions[i] = eraClient(t, "http://"+d.main[i]+"/mcp", "2025-11-25", "direct")
		whoami(t, sessions[i], tool)
	}
	// Calls go on through every replica while it moves.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for i := range 2 { // replicas 0 and 1 stay
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := sessions[i].CallTool(t.Context(), &mcp.CallToolParams{Name: tool})
				if err == nil && res.IsError {
					mu.Lock()
					errs = append(errs, textOf(res))
					mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	// 3 → 2: the config first (each replica reloads it), then the pod.
	d.writeConfig(d.replicaConfig(2, ""))
	waitFor(t, 20*time.Second, func() bool { return d.locks() == 2 }, "the new owner to start it")
	d.stop(2, syscall.SIGTERM, 60*time.Second)
	for i := range 2 {
		whoami(t, sessions[i], tool)
	}
	// 2 → 3: the pod first, then the config.
	d.start(2)
	sessions[2] = eraClient(t, "http://"+d.main[2]+"/mcp", "2025-11-25", "direct")
	d.writeConfig(d.replicaConfig(3, ""))
	waitFor(t, 20*time.Second, func() bool { return d.locks() == 3 }, "replica 2 to start it again")
	for i := range 3 {
		whoami(t, sessions[i], tool)
	}
	close(stop)
	wg.Wait()
	if f := d.lockFailures(); f != "" {
		t.Errorf("two processes of the placement-one server at once:\n%s", f)
	}
	t.Logf("%s: replica 2 → replica %d → replica 2; %d calls meanwhile answered with an error, e.g. %q", one, then, len(errs), first(errs))
	for _, e := range errs {
		if !strings.Contains(e, "replica") || !strings.Contains(e, "retry") {
			t.Errorf("a call while the server moved got %q: want a retryable error naming a replica", e)
		}
	}

	// Its owner down: a clear retryable error naming it.
	d.stop(2, syscall.SIGKILL, 5*time.Second)
	res, err := sessions[0].CallTool(t.Context(), &mcp.CallToolParams{Name: tool})
	if err == nil && !res.IsError {
		t.Fatalf("a call of a server whose owner is down succeeded: %s", textOf(res))
	}
	msg := fmt.Sprint(err)
	if res != nil {
		msg = textOf(res)
	}
	if !strings.Contains(msg, "replica 2") || !strings.Contains(msg, "retry") {
		t.Errorf("owner down: got %q, want an error naming replica 2 and saying to retry", msg)
	}
	t.Logf("owner down: %s", msg)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// waitFor polls cond until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A remote server's OAuth grant has one owner among the replicas: it
// alone asks the authorization server for tokens and serves them to the
// others, so a grant is never refreshed twice at once.
func TestReplicasShareOneGrant(t *testing.T) {
	t.Parallel()
	const secretValue = "cc-secret-replicas"
	rs := newOAuthResource(t, oauthtest.Options{ClientID: "cc-client", ClientSecret: secretValue, AuthMethods: []string{"client_secret_basic"}, NoRegistration: true})
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "client-secret")
	if err := os.WriteFile(secretFile, []byte(secretValue), 0o600); err != nil {
		t.Fatal(err)
	}
	remote := fmt.Sprintf(`, "remote": {"url": %q, "oauth": {"clientId": "cc-client", "clientSecret": "${file:%s}", "grant": "client_credentials", "tokenEndpointAuthMethod": "client_secret_basic"}}`, rs.URL, secretFile)
	d := newDeploymentWith(t, 3, 3, "", "memo", remote)
	sessions := make([]*mcp.ClientSession, 3)
	for i := range 3 {
		sessions[i] = eraClient(t, "http://"+d.main[i]+"/servers/remote/mcp", "2025-11-25", "direct")
		callOK(t, sessions[i], "hello")
	}
	if n := rs.Count("client-credentials"); n != 1 {
		t.Errorf("three replicas asked for %d tokens, want 1 (the grant's owner's)", n)
	}
	// The resource drops the token: each replica is refused it, and the
	// owner alone takes a new one, once.
	rs.ExpireAccessTokens()
	for i := range 3 {
		callOK(t, sessions[i], "hello")
	}
	if n := rs.Count("client-credentials"); n != 2 {
		t.Errorf("after the token was dropped: %d token requests in all, want 2", n)
	}
	t.Logf("grant owner: replica %d", replica.OwnerOf("remote", 3))
}
