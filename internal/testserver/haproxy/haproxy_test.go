//go:build unix

package haproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLong bounds every wait of these tests for something that must happen.
const waitLong = 10 * time.Second

// backend is a small HTTP server on 127.0.0.1 that answers its name and
// counts the requests it got and the connections they came on.
type backend struct {
	name  string
	srv   *httptest.Server
	hits  atomic.Int64
	conns atomic.Int64
}

func newBackend(t *testing.T, name string, h http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{name: name}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" { // health checks are not requests of the test's
			if h != nil {
				h(w, r)
				return
			}
			w.WriteHeader(http.StatusOK)
			return
		}
		b.hits.Add(1)
		if h != nil {
			h(w, r)
			return
		}
		io.WriteString(w, name)
	}))
	b.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			b.conns.Add(1)
		}
	}
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) addr() string { return b.srv.Listener.Addr().String() }

// client is a keep-alive HTTP client that counts the connections it opens.
type client struct {
	hc    *http.Client
	conns atomic.Int64
}

func newClient(t *testing.T) *client {
	t.Helper()
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{hc: &http.Client{Transport: tr, Timeout: waitLong}}
}

// get sends GET url and returns the status and the body.
func (c *client) get(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			if !i.Reused {
				c.conns.Add(1)
			}
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func addrs(bs ...*backend) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.addr())
	}
	return out
}

// One keep-alive client connection, 30 requests in a row: each request is
// balanced on its own, so each of 3 backends gets about 10 (balancing per
// connection would send all 30 to one), and each on a connection of its
// own, which haproxy closes after the response: a request is never sent on
// a pooled connection to a backend that has since died (which would fail
// it without a retry), so a stopped backend is always a refused connection.
func TestRoundRobinPerRequest(t *testing.T) {
	t.Parallel()
	bs := []*backend{newBackend(t, "a", nil), newBackend(t, "b", nil), newBackend(t, "c", nil)}
	lb := Start(t, addrs(bs...))
	c := newClient(t)
	got := map[string]int{}
	for range 30 {
		code, body := c.get(t, lb.URL()+"/x")
		if code != http.StatusOK {
			t.Fatalf("status %d, body %q", code, body)
		}
		got[body]++
	}
	if n := c.conns.Load(); n != 1 {
		t.Errorf("the client opened %d connections to the balancer, want 1 (kept alive)", n)
	}
	for _, b := range bs {
		if n := got[b.name]; n < 8 || n > 12 {
			t.Errorf("backend %s answered %d of 30 requests, want about 10: %v", b.name, n, got)
		}
		if h, c := b.hits.Load(), b.conns.Load(); h != c {
			t.Errorf("backend %s got %d requests on %d connections, want a connection each", b.name, h, c)
		}
	}
	stats, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range stats {
		if s.Addr != bs[i].addr() || s.Name != "r"+strconv.Itoa(i) {
			t.Errorf("stats[%d] is %s %s, want r%d %s", i, s.Name, s.Addr, i, bs[i].addr())
		}
		if s.Sessions != bs[i].hits.Load() || s.ConnErrors != 0 || s.Retries != 0 || s.Status != "no check" {
			t.Errorf("stats of %s: %+v, want %d sessions, no errors, no retries, no check", bs[i].name, s, bs[i].hits.Load())
		}
	}
}

// stopBackend closes b's listener and holds its port bound, not listening
// (a connection to it is refused), so that no other listener of the
// machine takes the port while the test runs.
func stopBackend(t *testing.T, b *backend) {
	t.Helper()
	addr := b.srv.Listener.Addr().(*net.TCPAddr)
	b.srv.Close()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: addr.Port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("holding the port of the stopped backend %s: %v", addr, err)
	}
}

// A backend whose listener is closed refuses the connection: haproxy
// retries the request on another backend, and the client sees only
// successes.
func TestRefusedConnectionIsRetriedElsewhere(t *testing.T) {
	t.Parallel()
	bs := []*backend{newBackend(t, "a", nil), newBackend(t, "b", nil), newBackend(t, "c", nil)}
	lb := Start(t, addrs(bs...))
	c := newClient(t)
	for range 3 { // each backend served once: all three are in the rotation
		if code, body := c.get(t, lb.URL()+"/x"); code != http.StatusOK {
			t.Fatalf("status %d, body %q", code, body)
		}
	}
	if bs[1].hits.Load() != 1 {
		t.Fatalf("backend b served %d of the first 3 requests, want 1", bs[1].hits.Load())
	}
	stopBackend(t, bs[1])
	for i := range 12 {
		code, body := c.get(t, lb.URL()+"/x")
		if code != http.StatusOK || (body != "a" && body != "c") {
			t.Fatalf("request %d with b stopped: status %d, body %q", i, code, body)
		}
	}
	if n := bs[0].hits.Load() + bs[2].hits.Load(); n != 14 {
		t.Errorf("a and c served %d requests, want 14 (2 before, 12 after b stopped)", n)
	}
	stats, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// Each of the 12 requests that chose b was moved on at once; none
	// failed for good.
	if s := stats[1]; s.Redispatches < 1 || s.ConnErrors != 0 || s.Sessions != 1+s.Redispatches {
		t.Errorf("stats of the stopped backend: %+v, want redispatches, a session for each and 1, and no final connection error", s)
	}
	for _, i := range []int{0, 2} {
		if s := stats[i]; s.ConnErrors != 0 || s.RespErrors != 0 {
			t.Errorf("stats of %s: %+v, want no errors", bs[i].name, s)
		}
	}
}

// closer is a backend that reads a request, counts it, and closes the
// connection without a word: a replica that died with the request.
type closer struct {
	ln   net.Listener
	hits atomic.Int64
	wg   sync.WaitGroup
}

func newCloser(t *testing.T) *closer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &closer{ln: ln}
	c.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.wg.Go(func() {
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(waitLong))
				r := bufio.NewReader(conn)
				for { // the request's head, to its empty line
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						break
					}
				}
				c.hits.Add(1)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		c.wg.Wait()
	})
	return c
}

// A request that reached a backend which then closed the connection
// without answering is not sent again (it may have run there): the client
// gets 502 and the backend saw it once.
func TestRequestThatReachedABackendIsNotRetried(t *testing.T) {
	t.Parallel()
	bad := newCloser(t)
	good := newBackend(t, "good", nil)
	lb := Start(t, []string{bad.ln.Addr().String(), good.addr()})
	c := newClient(t)
	oks := int64(0)
	for i := 0; bad.hits.Load() == 0; i++ {
		if i == 4 {
			t.Fatalf("4 requests and none reached the closing backend (round robin over 2)")
		}
		before := good.hits.Load()
		code, body := c.get(t, lb.URL()+"/call")
		if bad.hits.Load() == 0 {
			if code != http.StatusOK || body != "good" {
				t.Fatalf("request %d: status %d, body %q from the good backend", i, code, body)
			}
			oks++
			continue
		}
		// The response came after haproxy gave up on the request: any
		// retry would have come before it.
		if code != http.StatusBadGateway {
			t.Errorf("request %d reached the closing backend and got status %d, body %q; want 502", i, code, body)
		}
		if good.hits.Load() != before {
			t.Errorf("request %d reached the closing backend and then the good one", i)
		}
	}
	if n := bad.hits.Load(); n != 1 {
		t.Errorf("the closing backend saw %d requests, want 1", n)
	}
	if n := good.hits.Load(); n != oks {
		t.Errorf("the good backend saw %d requests, want %d", n, oks)
	}
	stats, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s := stats[0]; s.Retries != 0 || s.Redispatches != 0 || s.RespErrors != 1 || s.Sessions != 1 {
		t.Errorf("stats of the closing backend: %+v, want one session, one response error, no retry", s)
	}
}

// An SSE response streams through: the client reads the first event while
// the backend still holds the second.
func TestSSEStreams(t *testing.T) {
	t.Parallel()
	proceed := make(chan struct{})
	var closeOnce sync.Once
	release := func() { closeOnce.Do(func() { close(proceed) }) }
	t.Cleanup(release) // before the backend's Close, which waits for the handler
	b := newBackend(t, "sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-proceed:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: two\n\n")
	})
	lb := Start(t, []string{b.addr()})
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, lb.URL()+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
	}
	r := bufio.NewReader(resp.Body)
	event := func() string {
		t.Helper()
		var data []string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream: %v (read %q); the balancer held the event back?", err, data)
			}
			line = strings.TrimRight(line, "\r\n")
			if line == "" {
				return strings.Join(data, "\n")
			}
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
	if got := event(); got != "one" {
		t.Fatalf("first event %q, want one", got)
	}
	release()
	if got := event(); got != "two" {
		t.Fatalf("second event %q, want two", got)
	}
}

// With health checks on, a backend whose check fails is taken out of the
// rotation: every request goes to the others.
func TestHealthCheckTakesAFailingBackendOut(t *testing.T) {
	t.Parallel()
	sick := newBackend(t, "sick", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "sick")
	})
	bs := []*backend{newBackend(t, "a", nil), sick, newBackend(t, "c", nil)}
	lb := Start(t, addrs(bs...), WithHealthCheck("/readyz"))
	deadline := time.Now().Add(waitLong)
	for {
		stats, err := lb.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(stats[1].Status, "DOWN") && strings.HasPrefix(stats[0].Status, "UP") && strings.HasPrefix(stats[2].Status, "UP") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health checks: %+v after %v, want r1 DOWN and the others UP", stats, waitLong)
		}
		time.Sleep(50 * time.Millisecond) // polling for a state to come
	}
	c := newClient(t)
	for i := range 6 {
		code, body := c.get(t, lb.URL()+"/x")
		if code != http.StatusOK || body == "sick" {
			t.Fatalf("request %d: status %d, body %q", i, code, body)
		}
	}
	if n := sick.hits.Load(); n != 0 {
		t.Errorf("the backend whose check fails got %d requests", n)
	}
}

// haproxy is gone once the test that started it has ended.
func TestStoppedAtCleanup(t *testing.T) {
	t.Parallel()
	b := newBackend(t, "a", nil)
	var pid int
	t.Run("lb", func(t *testing.T) {
		lb := Start(t, []string{b.addr()})
		pid = lb.Pid()
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("haproxy (pid %d) is not running: %v", pid, err)
		}
		if code, _ := newClient(t).get(t, lb.URL()+"/"); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	})
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("haproxy (pid %d) after its test ended: kill 0: %v, want no such process", pid, err)
	}
}

// fakeTB records what the harness reports, to check that it fails a test.
type fakeTB struct {
	testing.TB // the real test, for what is not overridden
	mu         sync.Mutex
	errs       []string
	cleanups   []func()
	reported   chan struct{} // gets a value on each report
}

func newFakeTB(t *testing.T) *fakeTB {
	return &fakeTB{TB: t, reported: make(chan struct{}, 16)}
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, a ...any) {
	f.mu.Lock()
	f.errs = append(f.errs, fmt.Sprintf(format, a...))
	f.mu.Unlock()
	f.reported <- struct{}{}
}

func (f *fakeTB) Error(a ...any) { f.Errorf("%s", fmt.Sprint(a...)) }

func (f *fakeTB) Fatalf(format string, a ...any) {
	f.Errorf(format, a...)
	runtime.Goexit()
}

func (f *fakeTB) Fatal(a ...any) { f.Fatalf("%s", fmt.Sprint(a...)) }

func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.errs) > 0
}

func (f *fakeTB) Logf(string, ...any) {}

func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	f.cleanups = append(f.cleanups, fn)
	f.mu.Unlock()
}

func (f *fakeTB) cleanup() {
	f.mu.Lock()
	fns := f.cleanups
	f.cleanups = nil
	f.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

func (f *fakeTB) report() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.errs, "\n")
}

// run calls fn as a test body: in a goroutine of its own, which Fatal
// ends.
func (f *fakeTB) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

// A haproxy that dies while the test runs fails the test.
func TestEarlyExitFailsTheTest(t *testing.T) {
	t.Parallel()
	b := newBackend(t, "a", nil)
	f := newFakeTB(t)
	defer f.cleanup()
	var lb *LB
	f.run(func() { lb = Start(f, []string{b.addr()}) })
	if lb == nil || f.Failed() {
		t.Fatalf("Start failed: %s", f.report())
	}
	if err := syscall.Kill(lb.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.reported:
	case <-time.After(waitLong):
		t.Fatalf("haproxy killed, and the test was not failed within %v", waitLong)
	}
	if got := f.report(); !strings.Contains(got, "exited before the test ended") {
		t.Errorf("report %q, want it to say haproxy exited early", got)
	}
}

// With no haproxy to run, the test fails with what to install.
func TestMissingBinaryFailsTheTest(t *testing.T) {
	t.Setenv(EnvBinary, "/nonexistent/haproxy")
	f := newFakeTB(t)
	defer f.cleanup()
	var lb *LB
	f.run(func() { lb = Start(f, []string{"127.0.0.1:1"}) })
	if lb != nil || !strings.Contains(f.report(), EnvBinary+"=/nonexistent/haproxy") {
		t.Errorf("Start with a missing binary: report %q, want a failure naming %s", f.report(), EnvBinary)
	}
	// None installed: the message says what to do.
	t.Setenv(EnvBinary, "")
	t.Setenv("PATH", t.TempDir())
	_, err := findBinary("/nonexistent/usr/sbin/haproxy")
	if err == nil || !strings.Contains(err.Error(), "make test-deps") || !strings.Contains(err.Error(), "apt-get install -y haproxy") {
		t.Errorf("no haproxy anywhere: %v, want the command to run", err)
	}
}

// A haproxy that does not start (a configuration it refuses) fails the
// test with its output.
func TestBadStartFailsTheTest(t *testing.T) {
	t.Parallel()
	f := newFakeTB(t)
	defer f.cleanup()
	var lb *LB
	f.run(func() { lb = Start(f, []string{"127.0.0.1:99999"}) })
	if got := f.report(); lb != nil || !strings.Contains(got, "exited at start") || !strings.Contains(got, "ALERT") {
		t.Errorf("Start with a port haproxy refuses: report %q, want its exit and its alert", got)
	}
	f = newFakeTB(t)
	defer f.cleanup()
	f.run(func() { lb = Start(f, []string{"127.0.0.1:1"}, WithHealthCheck("no-slash")) })
	if lb != nil || !strings.Contains(f.report(), "not a plain absolute path") {
		t.Errorf("Start with a bad check path: report %q", f.report())
	}
}

func TestParseStats(t *testing.T) {
	t.Parallel()
	out := "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,-,addr\n" +
		"front,FRONTEND,,,1,2,512,30,,,0,0,0,,,,,OPEN,,,\n" +
		"replicas,r0,0,0,1,1,,11,,,,0,,2,3,4,5,UP,1,,127.0.0.1:1\n" +
		"replicas,r1,0,0,0,1,,9,,,,0,,0,0,0,0,\"DOWN 1/2\",1,,127.0.0.1:2\n" +
		"replicas,BACKEND,0,0,1,2,,20,,,,0,,2,3,4,5,UP,2,,\n"
	got, err := parseStats(out, []string{"127.0.0.1:1", "127.0.0.1:2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []BackendStats{
		{Name: "r0", Addr: "127.0.0.1:1", Status: "UP", Sessions: 11, ConnErrors: 2, RespErrors: 3, Retries: 4, Redispatches: 5, Current: 1},
		{Name: "r1", Addr: "127.0.0.1:2", Status: "DOWN 1/2", Sessions: 9},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("parseStats = %+v, want %+v", got, want)
	}
	if _, err := parseStats(out, []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}); err == nil {
		t.Errorf("parseStats with a backend missing: no error")
	}
}
