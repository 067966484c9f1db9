package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
	peers, _ := json.Marshal(d.peer[:count])
	return fmt.Sprintf(`{"replicas": {"count": %d, "peers": %s, "keyDir": %q%s},
	  "mcpServers": {
	    "fx": {"command": %q},
	    "memo": {"command": %q, "args": ["-flock", %q], "placement": "one"}}}`, count, peers, d.keyDir, extra, d.fixture, d.fixture, d.lock)
}

// newDeployment starts n replicas (of slots addresses, for growing
// later) and haproxy in front of them.
func newDeployment(t *testing.T, n, slots int, extra string) *deployment {
	t.Helper()
	bin, _ := binaries(t)
	dir := t.TempDir()
	d := &deployment{t: t, bin: bin, cfg: filepath.Join(dir, "config.json"), keyDir: filepath.Join(dir, "key"), lock: filepath.Join(dir, "memo.lock"),
		fixture: testserver.Build(t)}
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
	d.lb = haproxy.Start(t, d.main[:n])
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
	})
}
