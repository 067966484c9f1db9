// Package haproxy runs an haproxy load balancer in front of a test's HTTP
// backends: the balancer that Kubernetes-style replicas of `mcpvisor
// serve` sit behind in the tests, as they would behind a Service or an
// ingress in production.
//
// The balancer spreads requests round robin, each request on its own, with
// no stickiness; it retries a request only when it could not connect to a
// backend (never one that reached it: a tools/call must not run twice),
// on another backend; it streams responses (SSE) as they come. See
// [Start] for the configuration and why.
//
// haproxy is a system package (Debian's haproxy, which `make test-deps`
// installs): the harness takes $MCPVISOR_HAPROXY, else /usr/sbin/haproxy,
// else haproxy on PATH, and fails the test with what to install when there
// is none.
package haproxy

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// EnvBinary names the environment variable that points at the haproxy
// binary to run.
const EnvBinary = "MCPVISOR_HAPROXY"

// defaultBinary is where Debian's package installs haproxy.
const defaultBinary = "/usr/sbin/haproxy"

const (
	readyTimeout = 10 * time.Second // haproxy's start, to its stats socket answering
	stopTimeout  = 5 * time.Second  // from SIGTERM, then again from SIGKILL
	backendName  = "replicas"
	statsTimeout = 5 * time.Second // one exchange on the stats socket
)

// Option changes how [Start] configures haproxy.
type Option func(*options)

type options struct {
	checkPath string
}

// WithHealthCheck turns on haproxy's health checks: every 500 ms it sends
// GET path to each backend, takes it out of the rotation after two answers
// other than 200 (or failed connections) in a row, and back in after one
// 200. Off by default: the tests that kill a replica measure what the
// balancer does on its own, with its retries, not what its checks hide.
func WithHealthCheck(path string) Option {
	return func(o *options) { o.checkPath = path }
}

// LB is a running haproxy.
type LB struct {
	addr     string
	sock     string // the stats socket
	backends []string
	cmd      *exec.Cmd
	out      *testserver.TailBuffer // haproxy's stdout and stderr: its logs
	config   string

	done   chan struct{} // closed once haproxy has been reaped
	mu     sync.Mutex
	watch  bool // from its start until the cleanup: an exit now is early
	exited bool // haproxy has been reaped
}

// Addr is the address the balancer listens on: 127.0.0.1 and a port.
func (lb *LB) Addr() string { return lb.addr }

// URL is "http://" + Addr().
func (lb *LB) URL() string { return "http://" + lb.addr }

// Pid is haproxy's process id.
func (lb *LB) Pid() int { return lb.cmd.Process.Pid }

// Logs returns the end of what haproxy wrote: its warnings and a line per
// request (HTTP log format).
func (lb *LB) Logs() string { return lb.out.String() }

// BackendStats is what haproxy counted for one backend (one "server" line),
// from its stats (`show stat`, the CSV fields named in brackets).
type BackendStats struct {
	Name string // r0, r1…: the backend's index in the list given to Start
	Addr string // as given to Start
	// Status is UP, DOWN, "no check" (health checks off) or a state such
	// as MAINT.
	Status string
	// Sessions is how many requests haproxy sent to the backend [stot],
	// counting each attempt: a request whose connection it refused and
	// that went on to another backend counts on both.
	Sessions int64
	// ConnErrors is how many requests failed to connect to it in the end,
	// with no retry left [econ]; one retried elsewhere is not counted here
	// but in Redispatches.
	ConnErrors int64
	// Retries is how many times a connection to it was tried again on it
	// [wretr]: none while another backend is there to redispatch to.
	Retries int64
	// Redispatches is how many times a request was moved off it to
	// another backend after its connection failed [wredis].
	Redispatches int64
	// Current is how many requests it holds now [scur], streams included.
	Current int64
	// RespErrors is how many responses from it failed [eresp]: a
	// connection closed with no answer, for one.
	RespErrors int64
}

// Start runs haproxy in front of backends (host:port, plain HTTP), and
// returns it once it serves. It listens on 127.0.0.1, on a free port that
// the test process binds and hands to haproxy (so no other process can
// take the port in between). It is stopped at the test's cleanup (SIGTERM
// to its pid, then SIGKILL after 5 s), and a haproxy that exits before
// then fails the test. Its logs are shown when the test failed.
//
// The configuration, from haproxy 2.6's configuration manual:
//   - balance roundrobin with no cookie and no prefer-last-server: nothing
//     sticks a client to a backend.
//   - option http-server-close: the client's connection is kept alive,
//     each request on it is balanced on its own, and the connection to the
//     backend is closed after each response. With haproxy's default
//     (keep-alive on both sides, idle server connections pooled by
//     http-reuse safe) a request could be sent on a pooled connection that
//     a killed backend has just closed: an error that is not a connection
//     failure, which is never retried. A connection per request makes a
//     stopped backend a refused connection, every time. option httpclose
//     would close the client's connections too, and real clients keep
//     theirs.
//   - retries 3, retry-on conn-failure (only: empty-response would replay
//     a request that reached a backend which then died, and so may have
//     run), option redispatch 1: every retry goes to another backend,
//     at once (a retry on the same backend waits up to a second first).
//   - timeout connect 2s; client, server and tunnel 1h: SSE streams stay
//     open, and haproxy forwards response data as it comes, unbuffered.
//   - health checks only with [WithHealthCheck].
//   - logs (one line a request) to stdout, kept by the harness; the stats
//     socket (a Unix socket, level user) for [LB.Stats].
func Start(t testing.TB, backends []string, opts ...Option) *LB {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if len(backends) == 0 {
		t.Fatal("haproxy.Start: no backends")
	}
	for _, b := range backends {
		if _, _, err := net.SplitHostPort(b); err != nil || strings.ContainsAny(b, " \t\n#") {
			t.Fatalf("haproxy.Start: backend %q is not host:port", b)
		}
	}
	if p := o.checkPath; p != "" && (!strings.HasPrefix(p, "/") || strings.ContainsAny(p, " \t\n#\\\"'")) {
		t.Fatalf("haproxy.WithHealthCheck: %q is not a plain absolute path", p)
	}
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}

	// The listener is bound here and inherited as fd 3 (bind fd@3).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("haproxy: listen: %v", err)
	}
	lnFile, err := ln.(*net.TCPListener).File()
	addr := ln.Addr().String()
	ln.Close()
	if err != nil {
		t.Fatalf("haproxy: the listener's file: %v", err)
	}
	defer lnFile.Close()

	// A Unix socket's path has room for about 100 bytes, which a test's
	// TempDir may exceed: the socket gets a short directory of its own.
	sockDir, err := os.MkdirTemp("", "haproxy")
	if err != nil {
		t.Fatal(err)
	}
	lb := &LB{
		addr:     addr,
		sock:     filepath.Join(sockDir, "stats.sock"),
		backends: append([]string(nil), backends...),
		out:      &testserver.TailBuffer{Max: 256 << 10},
		done:     make(chan struct{}),
	}
	lb.config = lb.configText(o)
	cfgPath := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(lb.config), 0o600); err != nil {
		os.RemoveAll(sockDir)
		t.Fatal(err)
	}

	lb.cmd = exec.Command(bin, "-db", "-f", cfgPath)
	lb.cmd.Stdout = lb.out
	lb.cmd.Stderr = lb.out
	lb.cmd.ExtraFiles = []*os.File{lnFile} // fd 3
	lb.cmd.SysProcAttr = sysProcAttr()
	// The goroutine that starts haproxy keeps its OS thread until haproxy
	// is reaped: the parent-death signal (Linux) follows the thread that
	// forked.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := lb.cmd.Start()
		started <- err
		if err != nil {
			return
		}
		err = lb.cmd.Wait()
		lb.mu.Lock()
		lb.exited = true
		if lb.watch {
			// The test is still running (the cleanup clears watch
			// before it waits for done), so it may still be failed.
			t.Errorf("haproxy (pid %d) exited before the test ended: %v\nhaproxy output:\n%s", lb.cmd.Process.Pid, err, lb.out.String())
		}
		lb.mu.Unlock()
		close(lb.done)
	}()
	if err := <-started; err != nil {
		os.RemoveAll(sockDir)
		t.Fatalf("haproxy: start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		if err := lb.stop(); err != nil {
			t.Error(err)
		}
		os.RemoveAll(sockDir)
		if t.Failed() {
			t.Logf("haproxy config:\n%s\nhaproxy output:\n%s", lb.config, lb.out.String())
		}
	})
	if err := lb.waitReady(readyTimeout); err != nil {
		_ = lb.stop()
		t.Fatalf("haproxy: %v\nhaproxy output:\n%s", err, lb.out.String())
	}
	lb.mu.Lock()
	lb.watch = true
	exited := lb.exited
	lb.mu.Unlock()
	if exited { // between its answer and now: not reported by the waiter
		<-lb.done
		t.Fatalf("haproxy: exited at start (%v)\nhaproxy output:\n%s", lb.cmd.ProcessState, lb.out.String())
	}
	return lb
}

// configText is haproxy's configuration for lb and o (see Start).
func (lb *LB) configText(o options) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
	nbthread 1
	maxconn 512
	stats socket %s mode 600 level user
	log stdout format raw local0 info

defaults
	mode http
	log global
	option httplog
	timeout connect 2s
	timeout client 1h
	timeout server 1h
	timeout tunnel 1h
	timeout check 2s
	option http-server-close
	retries 3
	retry-on conn-failure
	option redispatch 1

frontend front
	bind fd@3
	default_backend %s

backend %s
	balance roundrobin
`, lb.sock, backendName, backendName)
	check := ""
	if o.checkPath != "" {
		fmt.Fprintf(&b, "\toption httpchk GET %s\n\thttp-check expect status 200\n", o.checkPath)
		check = " check inter 500ms fall 2 rise 1"
	}
	for i, addr := range lb.backends {
		fmt.Fprintf(&b, "\tserver r%d %s%s\n", i, addr, check)
	}
	return b.String()
}

// Binary is the haproxy to run: $MCPVISOR_HAPROXY, else /usr/sbin/haproxy,
// else haproxy on PATH. None is an error that says what to install.
func Binary() (string, error) { return findBinary(defaultBinary) }

// findBinary is Binary with def in place of /usr/sbin/haproxy.
func findBinary(def string) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("haproxy: %s=%s: %v", EnvBinary, p, err)
		}
		return p, nil
	}
	if executable(def) == nil {
		return def, nil
	}
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p, nil
	}
	return "", errors.New("haproxy: the load-balancer tests need haproxy, which is not installed: " +
		"run `make test-deps` (as root it runs apt-get install haproxy), or install haproxy (Debian: apt-get install -y haproxy), " +
		"or set " + EnvBinary + " to its path")
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// waitReady waits until haproxy answers on its stats socket (it opens the
// socket once its configuration is loaded and its proxies have started),
// until it exits, or for timeout.
func (lb *LB) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var err error
	for {
		var out string
		out, err = lb.command("show info")
		if err == nil && strings.Contains(out, "Pid: ") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not serving %v after its start: stats socket: %v", timeout, err)
		}
		select {
		case <-lb.done:
			return fmt.Errorf("exited at start (%v)", lb.cmd.ProcessState)
		case <-tick.C:
		}
	}
}

// stop ends haproxy: SIGTERM (it stops at once, streams included), then
// SIGKILL if it is still there 5 s later.
func (lb *LB) stop() error {
	lb.mu.Lock()
	lb.watch = false
	lb.mu.Unlock()
	pid := lb.cmd.Process.Pid
	select {
	case <-lb.done:
		return nil // it exited early, which was already reported
	default:
	}
	_ = lb.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-lb.done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = lb.cmd.Process.Kill()
	select {
	case <-lb.done:
		return fmt.Errorf("haproxy (pid %d) did not stop within %v of SIGTERM: killed", pid, stopTimeout)
	case <-time.After(stopTimeout):
		return fmt.Errorf("haproxy (pid %d) survived SIGKILL for %v", pid, stopTimeout)
	}
}

// command sends one command to the stats socket and returns its answer.
func (lb *LB) command(cmd string) (string, error) {
	c, err := net.DialTimeout("unix", lb.sock, statsTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(statsTimeout))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", err
	}
	// Not in interactive mode, haproxy answers and closes.
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Stats reads haproxy's counters for each backend, in the order given to
// Start.
func (lb *LB) Stats() ([]BackendStats, error) {
	out, err := lb.command("show stat")
	if err != nil {
		return nil, fmt.Errorf("haproxy stats: %w", err)
	}
	return parseStats(out, lb.backends)
}

// parseStats reads the servers of the backend from `show stat`'s CSV.
func parseStats(out string, backends []string) ([]BackendStats, error) {
	out = strings.TrimPrefix(out, "# ")
	r := csv.NewReader(strings.NewReader(out))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("haproxy stats: %w in %q", err, out)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("haproxy stats: empty answer")
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, name := range []string{"pxname", "svname", "status", "stot", "econ", "wretr", "wredis", "scur", "eresp"} {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("haproxy stats: no column %s in %q", name, rows[0])
		}
	}
	get := func(row []string, name string) string {
		if i := col[name]; i < len(row) {
			return row[i]
		}
		return ""
	}
	num := func(row []string, name string) (int64, error) {
		v := get(row, name)
		if v == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("haproxy stats: %s=%q: %v", name, v, err)
		}
		return n, nil
	}
	stats := make([]BackendStats, len(backends))
	seen := make([]bool, len(backends))
	for _, row := range rows[1:] {
		if get(row, "pxname") != backendName {
			continue
		}
		name := get(row, "svname")
		i, err := strconv.Atoi(strings.TrimPrefix(name, "r"))
		if !strings.HasPrefix(name, "r") || err != nil || i < 0 || i >= len(backends) {
			continue // BACKEND, the sum of them all
		}
		s := BackendStats{Name: name, Addr: backends[i], Status: get(row, "status")}
		for _, f := range []struct {
			name string
			to   *int64
		}{
			{"stot", &s.Sessions}, {"econ", &s.ConnErrors}, {"wretr", &s.Retries},
			{"wredis", &s.Redispatches}, {"scur", &s.Current}, {"eresp", &s.RespErrors},
		} {
			if *f.to, err = num(row, f.name); err != nil {
				return nil, err
			}
		}
		stats[i], seen[i] = s, true
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("haproxy stats: no row for backend r%d (%s)", i, backends[i])
		}
	}
	return stats, nil
}
