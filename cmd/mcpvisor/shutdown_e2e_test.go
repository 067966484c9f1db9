package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// Self-protection and bounded shutdown, tested on the real binary.

// started is a running mcpvisor process under test.
type started struct {
	cmd    *exec.Cmd
	marker string
	base   string // serve: base URL
	waited chan error

	mu    sync.Mutex
	lines []string // serve: what mcpvisor wrote to stderr so far
}

// waitLog waits until mcpvisor (serve) has written n lines to stderr that
// contain substr, and fails t if that takes longer than limit.
func (s *started) waitLog(t *testing.T, substr string, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s.mu.Lock()
		seen := 0
		for _, l := range s.lines {
			if strings.Contains(l, substr) {
				seen++
			}
		}
		s.mu.Unlock()
		if seen >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mcpvisor logged %q %d times in %v, want %d", substr, seen, limit, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startServe runs `mcpvisor serve` with config and waits for its address.
func startServe(t testing.TB, config string, args ...string) *started {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(config), 0o600)
	return startServeFile(t, cfg, "", args...)
}

// startServeFile runs `mcpvisor serve` on the config file cfg in the
// working directory cwd ("" for the test's).
func startServeFile(t testing.TB, cfg, cwd string, args ...string) *started {
	t.Helper()
	bin, _ := binaries(t)
	dir := t.TempDir()
	s := &started{marker: testserver.NewMarker(t), waited: make(chan error, 1)}
	s.cmd = exec.Command(bin, append([]string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--state-dir", filepath.Join(dir, "state"), "--log-level", "warn"}, args...)...)
	s.cmd.Dir = cwd
	s.cmd.Env = append(os.Environ(), testserver.MarkerEnv+"="+s.marker)
	stderr, _ := s.cmd.StderrPipe()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			s.mu.Unlock()
			if _, rest, ok := strings.Cut(sc.Text(), " servers at "); ok {
				addr <- strings.TrimSuffix(rest, "/mcp")
			} else if testing.Verbose() {
				t.Log("mcpvisor:", sc.Text())
			}
		}
		s.waited <- s.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		testserver.KillProcesses(s.marker)
	})
	select {
	case s.base = <-addr:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not start")
	}
	return s
}

// exit waits for the process to exit and returns its exit code and how
// long after since it took.
func (s *started) exit(t *testing.T, since time.Time, limit time.Duration) (int, time.Duration) {
	t.Helper()
	select {
	case err := <-s.waited:
		took := time.Since(since)
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), took
		}
		return 0, took
	case <-time.After(limit + 5*time.Second):
		t.Fatalf("mcpvisor did not exit within %v", limit+5*time.Second)
	}
	return -1, 0
}

// gone asserts that no process of the fixture trees is alive.
func gone(t *testing.T, marker string) {
	t.Helper()
	if left := testserver.LiveProcesses(marker); len(left) > 0 {
		testserver.KillProcesses(marker)
		t.Fatalf("processes survived mcpvisor: %v", left)
	}
}

func TestSIGTERMStopsEveryServerAndAnswersCallsInFlight(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"a":{"command":%q},"b":{"command":%q},"c":{"command":%q}}}`, fixture, fixture, fixture), "--no-learn")
	sess := connectHTTP(t, s.base+"/mcp", nil)
	for _, name := range []string{"a", "b", "c"} {
		if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: name + "__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	// The call in flight goes over raw HTTP, to see exactly what the
	// client receives.
	inflight := make(chan string, 1)
	go func() {
		inflight <- rawCall(s.base+"/mcp", sess.ID(), `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"a__sleep","arguments":{"ms":60000}}}`)
	}()
	time.Sleep(200 * time.Millisecond) // the call reaches the server
	sent := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	code, took := s.exit(t, sent, time.Second)
	if code != 0 || took > time.Second {
		t.Errorf("after SIGTERM: exit code %d after %v, want 0 within 1s", code, took)
	}
	gone(t, s.marker)
	select {
	case got := <-inflight:
		if !strings.Contains(got, `"id":99`) || !strings.Contains(got, `"error"`) {
			t.Errorf("the call in flight got %q, want a JSON-RPC error response", got)
		}
		t.Logf("exit %v after SIGTERM; the call in flight got: %s", took.Round(time.Millisecond), strings.TrimSpace(got))
	case <-time.After(5 * time.Second):
		t.Error("the call in flight got no answer")
	}
}

func TestSIGTERMWithATermIgnoringServer(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"stubborn":{"command":%q,"env":{"FIXTURE_IGNORE_TERM":"1","FIXTURE_IGNORE_EOF":"1"},"stop":{"stdinWait":"300ms","termWait":"300ms"}}}}`, fixture), "--no-learn")
	sess := connectHTTP(t, s.base+"/mcp", nil)
	if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "stubborn__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	code, took := s.exit(t, sent, 1100*time.Millisecond)
	if code != 0 || took > 1100*time.Millisecond {
		t.Errorf("exit code %d after %v, want 0 within the stop bounds (600ms) + 0.5s", code, took)
	}
	gone(t, s.marker)
	t.Logf("exit %v after SIGTERM with a TERM-ignoring server (bounds 300ms + 300ms)", took.Round(time.Millisecond))
}

// With the default stop waits (stdin 2 s, SIGTERM 10 s: 12 s before a
// SIGKILL) and the default 10 s shutdown timeout, the shutdown deadline
// reaches the process stop: a server that ignores SIGTERM and stdin EOF is
// SIGKILLed inside the deadline and mcpvisor exits 0, not forced (3).
func TestSIGTERMWithATermIgnoringServerUnderDefaultWaits(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"stubborn":{"command":%q,"env":{"FIXTURE_IGNORE_TERM":"1","FIXTURE_IGNORE_EOF":"1"}}}}`, fixture), "--no-learn")
	sess := connectHTTP(t, s.base+"/mcp", nil)
	if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "stubborn__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	code, took := s.exit(t, sent, 10*time.Second)
	if code != 0 || took > 10*time.Second {
		t.Errorf("exit code %d after %v, want 0 within the 10s shutdown timeout", code, took)
	}
	gone(t, s.marker)
	t.Logf("exit %d %v after SIGTERM with a TERM-ignoring server under default waits", code, took.Round(time.Millisecond))
}

// stubbornEnv makes the fixture ignore SIGTERM and stdin EOF: only SIGKILL
// ends it.
const stubbornEnv = `"FIXTURE_IGNORE_TERM":"1","FIXTURE_IGNORE_EOF":"1"`

// eofIgnored is what the fixture logs (and mcpvisor relays at debug level)
// when its stdin closes: the first step of a stop has been taken.
const eofIgnored = "stdin closed; not exiting"

// sigtermWithinDefaultTimeout sends SIGTERM to s and asserts that it exits
// 0 within the default 10 s shutdown timeout, every fixture process gone.
func sigtermWithinDefaultTimeout(t *testing.T, s *started) {
	t.Helper()
	sent := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	code, took := s.exit(t, sent, 10*time.Second)
	if code != 0 || took > 10*time.Second {
		t.Errorf("exit code %d after %v, want 0 within the 10s shutdown timeout", code, took)
	}
	gone(t, s.marker)
	t.Logf("exit %d %v after SIGTERM", code, took.Round(time.Millisecond))
}

// A stop that began before the shutdown, under a context of its own (here
// the idle stop that puts a server to sleep), is bounded by the shutdown
// deadline too: the TERM-ignoring server it is stopping is SIGKILLed in
// time and mcpvisor exits 0. Before, that stop kept its own course
// (SIGKILL 12 s after it began) and the deadline forced the exit (3).
func TestSIGTERMDuringADormantStopOfATermIgnoringServer(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"stubborn":{"command":%q,"idleTimeout":"1s","startGrace":"0s","env":{%s}}}}`, fixture, stubbornEnv), "--no-learn", "--log-level", "debug")
	sess := connectHTTP(t, s.base+"/mcp", nil)
	if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "stubborn__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	s.waitLog(t, eofIgnored, 1, 5*time.Second) // the idle stop has closed its stdin
	time.Sleep(500 * time.Millisecond)
	sigtermWithinDefaultTimeout(t, s)
}

// The stops of per-session instances begin when their client sessions end,
// under a context of their own: some before the shutdown (clients that
// left), the rest as the shutdown ends the remaining sessions, before the
// fleet's close reaches them. Every one is bounded by the shutdown
// deadline.
func TestSIGTERMWhileSessionEndsStopPerSessionTermIgnoringServers(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"stubborn":{"command":%q,"sharing":"per-session","env":{%s}}}}`, fixture, stubbornEnv), "--no-learn", "--log-level", "debug")
	var sessions []*mcp.ClientSession
	for range 6 {
		sess := connectHTTP(t, s.base+"/servers/stubborn/mcp", nil)
		if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, sess)
	}
	for _, sess := range sessions[:3] {
		_ = sess.Close()
	}
	s.waitLog(t, eofIgnored, 3, 5*time.Second) // the three stops are under way
	sigtermWithinDefaultTimeout(t, s)
}

// A server that is still starting (it sleeps before it reads its stdin)
// when the shutdown comes: the interrupted start stops it under a context
// of its own, which the shutdown deadline bounds.
func TestSIGTERMWhileATermIgnoringServerIsStarting(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"stubborn":{"command":%q,"eager":true,"env":{"FIXTURE_SLOW_START":"60s",%s}}}}`, fixture, stubbornEnv), "--no-learn", "--log-level", "debug")
	s.waitLog(t, "slow start: sleeping", 1, 10*time.Second)
	sigtermWithinDefaultTimeout(t, s)
}

func TestDoubleSIGINTKillsAtOnce(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"stubborn":{"command":%q,"env":{"FIXTURE_IGNORE_TERM":"1","FIXTURE_IGNORE_EOF":"1","FIXTURE_SETSID_CHILD":"1"}}}}`, fixture), "--no-learn")
	sess := connectHTTP(t, s.base+"/mcp", nil)
	if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "stubborn__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(150 * time.Millisecond) // the graceful stop waits 2s on stdin
	second := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	code, took := s.exit(t, second, 100*time.Millisecond)
	if code != 3 || took > 100*time.Millisecond {
		t.Errorf("after a second SIGINT: exit code %d after %v, want 3 within 100ms", code, took)
	}
	deadline := time.Now().Add(time.Second)
	for len(testserver.LiveProcesses(s.marker)) > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	gone(t, s.marker)
	t.Logf("exit %v after the second SIGINT", took.Round(time.Millisecond))
}

// stdioProc runs `mcpvisor stdio` with pipes for stdin and stdout.
type stdioProc struct {
	*started
	in  io.WriteCloser
	out *bufio.Reader
}

func startStdio(t *testing.T, config string, args ...string) *stdioProc {
	t.Helper()
	bin, _ := binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(config), 0o600)
	p := &stdioProc{started: &started{marker: testserver.NewMarker(t), waited: make(chan error, 1)}}
	p.cmd = exec.Command(bin, append([]string{"stdio", "--config", cfg, "--state-dir", filepath.Join(dir, "state"), "--no-learn", "--log-level", "warn"}, args...)...)
	p.cmd.Env = append(os.Environ(), testserver.MarkerEnv+"="+p.marker)
	p.cmd.Stderr = os.Stderr
	p.in, _ = p.cmd.StdinPipe()
	out, _ := p.cmd.StdoutPipe()
	p.out = bufio.NewReader(out)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.waited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		testserver.KillProcesses(p.marker)
	})
	return p
}

func (p *stdioProc) send(t *testing.T, id int, method, params string) {
	t.Helper()
	fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", id, method, params)
}

func (p *stdioProc) read(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	line, err := p.out.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var m map[string]json.RawMessage
	json.Unmarshal([]byte(line), &m)
	return m
}

const initLine = `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}`

func TestStdinEOFExits(t *testing.T) {
	p := startStdio(t, fmt.Sprintf(`{"mcpServers":{"a":{"command":%q},"b":{"command":%q,"env":{"FIXTURE_IGNORE_EOF":"1"},"stop":{"stdinWait":"200ms"}}}}`, testserver.Build(t), testserver.Build(t)))
	p.send(t, 1, "initialize", initLine)
	p.read(t)
	p.send(t, 2, "tools/call", `{"name":"a__echo","arguments":{"text":"x"}}`)
	p.read(t)
	p.send(t, 3, "tools/call", `{"name":"b__echo","arguments":{"text":"x"}}`)
	p.read(t)
	closed := time.Now()
	p.in.Close()
	code, took := p.exit(t, closed, time.Second)
	if code != 0 || took > time.Second {
		t.Errorf("after stdin EOF: exit %d after %v, want 0 within 1s", code, took)
	}
	gone(t, p.marker)
	t.Logf("exit %v after stdin EOF", took.Round(time.Millisecond))
}

func TestIdleExitSparesACallInFlight(t *testing.T) {
	p := startStdio(t, fmt.Sprintf(`{"mcpServers":{"a":{"command":%q}}}`, testserver.Build(t)), "--idle-exit", "500ms")
	p.send(t, 1, "initialize", initLine)
	p.read(t)
	start := time.Now()
	p.send(t, 2, "tools/call", `{"name":"a__sleep","arguments":{"ms":1500}}`)
	resp := p.read(t)
	if _, ok := resp["result"]; !ok || time.Since(start) < 1400*time.Millisecond {
		t.Fatalf("a 1.5s call under a 500ms idle exit: %v after %v", resp, time.Since(start))
	}
	answered := time.Now()
	code, took := p.exit(t, answered, time.Second)
	if code != 0 || took < 400*time.Millisecond || took > 700*time.Millisecond {
		t.Errorf("exit %d %v after the answer, want 0 about 500ms after", code, took)
	}
	gone(t, p.marker)
}

// The orphan case: the client that started mcpvisor exits, but another
// process keeps mcpvisor's stdin open, so no EOF ever comes.

const middleEnv = "MCPVISOR_TEST_MIDDLE"

// runMiddle is this test binary re-executed as a short-lived client: it
// starts mcpvisor with stdin from fd 3 (a pipe the test keeps open), reads
// mcpvisor's first answer (so mcpvisor is up and serving), prints its pid
// and exits without waiting for it: the client is gone, the pipe is not.
func runMiddle() int {
	args := strings.Split(os.Getenv(middleEnv), "\x1f")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = os.NewFile(3, "held-stdin")
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Println("error", err)
		return 1
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println(cmd.Process.Pid)
	return 0
}

// abandon starts mcpvisor stdio through a middle process that exits at
// once, with stdin held open by the returned pipe end; it returns
// mcpvisor's pid. requests are written into mcpvisor's stdin first.
func abandon(t *testing.T, cfg, stateDir, marker string, requests string) (pid int, held *os.File) {
	t.Helper()
	bin, _ := binaries(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, requests)
	mid := exec.Command(os.Args[0], "-test.run=^$")
	mid.Env = append(os.Environ(), testserver.MarkerEnv+"="+marker,
		middleEnv+"="+strings.Join([]string{bin, "stdio", "--config", cfg, "--state-dir", stateDir, "--no-learn", "--log-level", "error"}, "\x1f"))
	mid.ExtraFiles = []*os.File{r}
	out, err := mid.Output()
	r.Close()
	if err != nil {
		w.Close()
		t.Fatalf("middle: %v %s", err, out)
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		w.Close()
		t.Fatalf("middle said %q", out)
	}
	return pid, w
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

func TestOrphanedStdioExits(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`{"mcpServers":{"a":{"command":%q,"env":{"FIXTURE_SETSID_CHILD":"1"}}}}`, testserver.Build(t))), 0o600)
	marker := testserver.NewMarker(t)
	reqs := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initLine + "}\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"x"}}}` + "\n"
	pid, held := abandon(t, cfg, filepath.Join(dir, "state"), marker, reqs)
	defer held.Close()
	start := time.Now() // the client has just exited
	// The server started (the request was in the pipe), its parent is
	// gone, its stdin is still open.
	waitFor := func(cond func() bool, limit time.Duration) bool {
		deadline := time.Now().Add(limit)
		for !cond() {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(5 * time.Millisecond)
		}
		return true
	}
	if !waitFor(func() bool { return !alive(pid) && len(testserver.LiveProcesses(marker)) == 0 }, time.Second) {
		gone(t, marker)
		t.Fatalf("mcpvisor stdio %d still running %v after its parent exited", pid, time.Since(start))
	}
	t.Logf("abandoned mcpvisor stdio and its servers gone %v after its parent exited", time.Since(start).Round(time.Millisecond))
}

// TestAbandonCycles: a client that reconnects over and over, leaving each
// mcpvisor stdio behind with its pipe held open. None may remain.
// MCPVISOR_ABANDON_CYCLES sets the count (1,000 for the full run).
func TestAbandonCycles(t *testing.T) {
	n := 40
	if v, err := strconv.Atoi(os.Getenv("MCPVISOR_ABANDON_CYCLES")); err == nil && v > 0 {
		n = v
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`{"mcpServers":{"a":{"command":%q}}}`, testserver.Build(t))), 0o600)
	marker := testserver.NewMarker(t)
	reqs := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initLine + "}\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"x"}}}` + "\n"
	var pids []int
	var held []*os.File
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	start := time.Now()
	for i := range n {
		pid, h := abandon(t, cfg, filepath.Join(dir, "state", strconv.Itoa(i)), marker, reqs)
		pids = append(pids, pid)
		held = append(held, h)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		for _, pid := range pids {
			if alive(pid) {
				left++
			}
		}
		if left == 0 && len(testserver.LiveProcesses(marker)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			testserver.KillProcesses(marker)
			t.Fatalf("after %d abandoned sessions: %d mcpvisor processes and %d server processes remain", n, left, len(testserver.LiveProcesses(marker)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d connect/abandon cycles in %v: 0 processes left", n, time.Since(start).Round(time.Millisecond))
}

// rawCall POSTs one JSON-RPC request on session and returns the body (or
// the transport error).
func rawCall(url, session, body string) string {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "transport error: " + err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Sprintf("status %d, read error %v, body %q", resp.StatusCode, err, b)
	}
	return string(b)
}
