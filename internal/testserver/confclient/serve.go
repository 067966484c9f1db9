package confclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds of serve's life (variables so that tests can shorten them).
var (
	serveStartTimeout = 10 * time.Second
	serveStopTimeout  = 5 * time.Second
)

// tailLines is how many of serve's last log lines a failure shows.
const tailLines = 40

// tail keeps the last lines written to it.
type tail struct {
	mu    sync.Mutex
	lines []string
	max   int
}

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// lineWriter calls line with each line written to it.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a line that never ends
		w.line(string(w.buf))
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

// served is a running `mcpvisor serve`.
type served struct {
	cmd    *exec.Cmd
	addr   string // host:port of its HTTP listener
	log    *tail
	waited chan struct{} // closed when it has exited
	err    error         // its exit, once waited is closed
}

// startServe runs `mcpvisor serve` (bin) on cfg with env added, and
// returns once it listens, within serveStartTimeout.
func startServe(ctx context.Context, bin, cfg, dir string, env []string) (*served, error) {
	s := &served{log: &tail{max: tailLines}, waited: make(chan struct{})}
	s.cmd = exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0",
		"--state-dir", filepath.Join(dir, "state"), "--socket", "none", "--no-watch",
		"--exit-with-parent", "--log-level", "info")
	s.cmd.Env = append(serveEnv(os.Environ()), env...)
	addr := make(chan string, 1)
	s.cmd.Stderr = &lineWriter{line: func(line string) {
		s.log.add(line)
		if _, rest, ok := strings.Cut(line, " servers at "); ok {
			select {
			case addr <- strings.TrimPrefix(strings.TrimSuffix(strings.TrimSpace(rest), "/mcp"), "http://"):
			default:
			}
		}
	}}
	// A process serve left behind holding its stderr does not hold the
	// harness.
	s.cmd.WaitDelay = time.Second
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s serve: %w", bin, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.waited)
	}()
	timer := time.NewTimer(serveStartTimeout)
	defer timer.Stop()
	select {
	case s.addr = <-addr:
		return s, nil
	case <-s.waited:
		return nil, fmt.Errorf("mcpvisor serve exited before listening (%v):\n%s", s.err, s.log)
	case <-timer.C:
		s.stop()
		return nil, fmt.Errorf("mcpvisor serve did not listen within %v:\n%s", serveStartTimeout, s.log)
	case <-ctx.Done():
		s.stop()
		return nil, context.Cause(ctx)
	}
}

// serveEnv is the environment for serve: the harness's, without a
// session bus, so that serve keeps its secrets in its state directory's
// file, never in the keyring of the user running the tests.
func serveEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "DBUS_SESSION_BUS_ADDRESS=") {
			out = append(out, kv)
		}
	}
	return out
}

// stop sends SIGTERM, waits serveStopTimeout, then kills. It reports an
// exit that was not clean.
func (s *served) stop() error {
	select {
	case <-s.waited:
		return s.exitErr()
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(serveStopTimeout)
	defer timer.Stop()
	select {
	case <-s.waited:
		return s.exitErr()
	case <-timer.C:
		_ = s.cmd.Process.Kill()
		<-s.waited
		return fmt.Errorf("mcpvisor serve did not exit within %v of SIGTERM", serveStopTimeout)
	}
}

func (s *served) exitErr() error {
	if s.err != nil {
		return fmt.Errorf("mcpvisor serve: %w", s.err)
	}
	return nil
}

// endpoint is serve's MCP endpoint of the server.
func (s *served) endpoint() string { return "http://" + s.addr + "/servers/s/mcp" }

// serverStatus is what the admin API says of a server.
type serverStatus struct {
	State     string `json:"state"`
	LastError string `json:"lastError"`
}

// NeedsLogin is the state of a server that waits for `mcpvisor login`.
const NeedsLogin = "needs-login"

func (s *served) status(ctx context.Context) (serverStatus, error) {
	var st serverStatus
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addr+"/api/servers/s", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /api/servers/s: %s: %s", resp.Status, b)
	}
	return st, json.Unmarshal(b, &st)
}

// settled waits, within d, until the server is past its first start
// (neither new nor starting) and returns its status.
func (s *served) settled(ctx context.Context, d time.Duration) (serverStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := s.status(ctx)
		if err == nil && st.State != "new" && st.State != "starting" {
			return st, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("server s still %q", st.State)
			}
			return st, fmt.Errorf("waiting for server s to start: %w (%v)", err, context.Cause(ctx))
		case <-tick.C:
		}
	}
}
