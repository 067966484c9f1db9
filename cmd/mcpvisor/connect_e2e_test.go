package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/bridge"
	"github.com/mcpvisor/mcpvisor/internal/clientbook"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// mcpvisor connect and the shared daemon, on the real binary.

// connectWorld is a config and state directory for connect, and the
// marker every process started from them carries.
type connectWorld struct {
	cfg, state, marker string
	// home is HOME for connect and what it starts, with XDG_CONFIG_HOME
	// home/xdg: no service the user installed is found there.
	home string
	env  []string // more environment for connect
}

// newConnectWorld writes a config with server x (the fixture); its daemon
// listens on a free port (127.0.0.1:0), not the default one.
func newConnectWorld(t *testing.T) *connectWorld {
	t.Helper()
	dir := t.TempDir()
	w := &connectWorld{cfg: filepath.Join(dir, "config.json"), state: filepath.Join(dir, "state"), marker: testserver.NewMarker(t), home: filepath.Join(dir, "home")}
	if err := os.Mkdir(w.home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.cfg, []byte(fmt.Sprintf(`{"listen":"127.0.0.1:0","mcpServers":{"x":{"command":%q}}}`, testserver.Build(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: whatever a daemon this test
	// started left is reported, then killed (by pid).
	t.Cleanup(func() {
		for _, pid := range w.daemons() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		testserver.WaitGone(t, w.marker, 5*time.Second)
	})
	return w
}

// command is `mcpvisor connect` on w with args, with w's marker.
func (w *connectWorld) command(t *testing.T, args ...string) *exec.Cmd {
	bin, _ := binaries(t)
	cmd := exec.Command(bin, append([]string{"connect", "--config", w.cfg, "--state-dir", w.state}, args...)...)
	cmd.Env = append(os.Environ(), testserver.MarkerEnv+"="+w.marker, "HOME="+w.home, "XDG_CONFIG_HOME="+filepath.Join(w.home, "xdg"))
	cmd.Env = append(cmd.Env, w.env...)
	return cmd
}

// client runs connect with args as the go-sdk client's command, in the
// protocol era of opts (nil: the client's default, 2026-07-28).
func (w *connectWorld) client(t *testing.T, opts *mcp.ClientSessionOptions, args ...string) (*mcp.ClientSession, *exec.Cmd) {
	t.Helper()
	cmd := w.command(t, args...)
	cmd.Stderr = &testserver.Buffer{}
	client := mcp.NewClient(&mcp.Implementation{Name: "connect-e2e", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, opts)
	if err != nil {
		t.Fatalf("connect: %v; its stderr:\n%s", err, cmd.Stderr)
	}
	t.Cleanup(func() { sess.Close() })
	return sess, cmd
}

// daemons are the live mcpvisor serve processes of w's state directory.
func (w *connectWorld) daemons() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		argv := cmdlineOf(pid)
		if len(argv) > 1 && argv[1] == "serve" && slices.Contains(argv, w.state) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// fixtures are the live fixture server processes of w.
func (w *connectWorld) fixtures() []int {
	var pids []int
	for _, pid := range testserver.LiveProcesses(w.marker) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(b)) == "mcp-fixture" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// socket is the daemon socket of w's state directory.
func (w *connectWorld) socket(t *testing.T) string {
	p, _, err := bridge.SocketPath(w.state)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fixturePID calls x's pid tool through sess (tool name: x__pid through
// the aggregate, pid with --server x).
func fixturePID(t *testing.T, sess *mcp.ClientSession, tool string) int {
	t.Helper()
	res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: tool})
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %v", tool, res, err)
	}
	pid, err := strconv.Atoi(text(res))
	if err != nil {
		t.Fatalf("%s answered %q", tool, text(res))
	}
	return pid
}

// waitUntil polls cond every 10 ms until it holds, failing t after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// Three clients, each with its own connect, share one daemon and one
// server process; a client killed outright leaves both running and the
// others served.
func TestConnectClientsShareOneServer(t *testing.T) {
	w := newConnectWorld(t)
	legacy := &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
	var sessions []*mcp.ClientSession
	var cmds []*exec.Cmd
	for range 3 {
		s, c := w.client(t, legacy)
		sessions, cmds = append(sessions, s), append(cmds, c)
	}
	pid := fixturePID(t, sessions[0], "x__pid")
	for i, s := range sessions[1:] {
		if got := fixturePID(t, s, "x__pid"); got != pid {
			t.Fatalf("client %d reached fixture pid %d, client 0 pid %d", i+1, got, pid)
		}
	}
	// (pid is the fixture's in its pid namespace, if it has one.)
	f, d := w.fixtures(), w.daemons()
	if len(f) != 1 || len(d) != 1 {
		t.Fatalf("fixture processes %v, daemons %v: want one of each", f, d)
	}
	fixture, daemon := f[0], d[0]

	if err := cmds[1].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the killed connect's exit", func() bool { return !alive(cmds[1].Process.Pid) })
	for _, i := range []int{0, 2} {
		if got := fixturePID(t, sessions[i], "x__pid"); got != pid {
			t.Fatalf("after a client was killed, client %d reached pid %d, want %d", i, got, pid)
		}
	}
	if d, f := w.daemons(), w.fixtures(); len(d) != 1 || d[0] != daemon || len(f) != 1 || f[0] != fixture {
		t.Fatalf("after a client was killed: daemons %v (want [%d]), fixtures %v (want [%d])", d, daemon, f, fixture)
	}
}

// Two connects started at the same moment, with no daemon, start one;
// that daemon, started with --idle-exit, exits once both have gone and
// it has been unused that long, and leaves no process behind. A daemon
// the user started stays meanwhile.
func TestConnectStartsOneDaemonThatExitsWhenUnused(t *testing.T) {
	w := newConnectWorld(t)
	const idle = 1500 * time.Millisecond
	legacy := &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
	sessions := make([]*mcp.ClientSession, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range sessions {
		wg.Go(func() {
			<-start
			sessions[i], _ = w.client(t, legacy, "--idle-exit", idle.String())
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	if d := w.daemons(); len(d) != 1 {
		t.Fatalf("two connects at once started daemons %v, want one", d)
	}
	if a, b := fixturePID(t, sessions[0], "x__pid"), fixturePID(t, sessions[1], "x__pid"); a != b {
		t.Fatalf("the two clients reached fixture pids %d and %d", a, b)
	}

	// A daemon the user started, on a state directory of its own, for
	// comparison: it has no --exit-when-unused.
	user := newConnectWorld(t)
	us := startServeFile(t, user.cfg, "", "--state-dir", user.state)
	stopAtCleanup(t, us)
	userClient, _ := user.client(t, legacy, "--start=never")
	fixturePID(t, userClient, "x__pid")
	userClient.Close()

	for _, s := range sessions {
		s.Close()
	}
	gone := time.Now()
	took := waitUntil(t, idle+10*time.Second, "the auto-started daemon's exit", func() bool { return len(w.daemons()) == 0 })
	if took < idle-200*time.Millisecond {
		t.Errorf("the auto-started daemon exited %v after its last client left, before its --idle-exit %v", took, idle)
	}
	testserver.WaitGone(t, w.marker, 5*time.Second)
	if _, err := os.Stat(w.socket(t)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the daemon left its socket behind: %v", err)
	}
	if d := user.daemons(); len(d) != 1 || d[0] != us.cmd.Process.Pid {
		t.Errorf("the user's daemon: %v, want [%d] still running %v after its client left", d, us.cmd.Process.Pid, time.Since(gone))
	}
	t.Logf("auto-started daemon exited %v after its last client left (--idle-exit %v)", took.Round(time.Millisecond), idle)
}

// Both protocol eras reach the server through connect, and --server
// serves one server alone, unprefixed.
func TestConnectBothEras(t *testing.T) {
	w := newConnectWorld(t)
	legacy, _ := w.client(t, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if v := legacy.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("legacy client negotiated %q", v)
	}
	modern, _ := w.client(t, nil)
	if v := modern.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("modern client negotiated %q", v)
	}
	single, _ := w.client(t, nil, "--server", "x")
	for _, c := range []struct {
		sess *mcp.ClientSession
		tool string
	}{{legacy, "x__echo"}, {modern, "x__echo"}, {single, "echo"}} {
		res, err := c.sess.CallTool(t.Context(), &mcp.CallToolParams{Name: c.tool, Arguments: map[string]any{"text": "through connect"}})
		if err != nil || text(res) != "through connect" {
			t.Fatalf("%s: %v %v", c.tool, res, err)
		}
	}
	if a, b := fixturePID(t, legacy, "x__pid"), fixturePID(t, single, "pid"); a != b {
		t.Fatalf("aggregate and --server reached pids %d and %d", a, b)
	}
}

// rawConnect runs connect with pipes for stdin and stdout.
type rawConnect struct {
	cmd    *exec.Cmd
	in     *os.File
	out    *bufio.Reader
	stderr *testserver.Buffer
	waited chan error
}

func (w *connectWorld) raw(t *testing.T, args ...string) *rawConnect {
	t.Helper()
	return w.rawIn(t, "", args...)
}

// rawIn is raw with connect's working directory dir ("": this one).
func (w *connectWorld) rawIn(t *testing.T, dir string, args ...string) *rawConnect {
	t.Helper()
	p := &rawConnect{cmd: w.command(t, args...), stderr: &testserver.Buffer{}, waited: make(chan error, 1)}
	p.cmd.Dir = dir
	p.cmd.Stderr = p.stderr
	in, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.in = in.(*os.File)
	// A pipe of our own, not StdoutPipe, which Wait closes: what connect
	// wrote before it exited stays readable after.
	out, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	p.cmd.Stdout = outW
	p.out = bufio.NewReader(out)
	err = p.cmd.Start()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	go func() { p.waited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// exit waits up to limit for p's exit and returns its code.
func (p *rawConnect) exit(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case err := <-p.waited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return 0
	case <-time.After(limit):
		t.Fatalf("connect did not exit within %v; stderr:\n%s", limit, p.stderr)
	}
	return -1
}

// response reads p's stdout up to the response with id (notifications
// may come first).
func (p *rawConnect) response(t *testing.T, id int) string {
	t.Helper()
	want := `"id":` + strconv.Itoa(id) + `,`
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			t.Fatalf("reading response %d: %v; stderr:\n%s", id, err, p.stderr)
		}
		if strings.Contains(line, want) {
			return line
		}
	}
}

func (p *rawConnect) initialize(t *testing.T) {
	t.Helper()
	fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":%s}`+"\n", initLine)
	if line := p.response(t, 1); !strings.Contains(line, `"protocolVersion":"2025-11-25"`) {
		t.Fatalf("initialize through connect: %q; stderr:\n%s", line, p.stderr)
	}
}

// connect ends with its client: at stdin EOF, promptly; when the daemon
// closes the connection, with an error that says so.
func TestConnectExitsWithItsClient(t *testing.T) {
	w := newConnectWorld(t)
	s := startServeFile(t, w.cfg, "", "--state-dir", w.state)
	p := w.raw(t, "--start=never")
	p.initialize(t)
	closed := time.Now()
	p.in.Close()
	if code := p.exit(t, 3*time.Second); code != 0 {
		t.Errorf("after stdin EOF: exit %d, want 0; stderr:\n%s", code, p.stderr)
	}
	t.Logf("connect exited %v after stdin EOF", time.Since(closed).Round(time.Millisecond))

	p = w.raw(t, "--start=never")
	p.initialize(t)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exit(t, 10*time.Second); code != 1 || !strings.Contains(p.stderr.String(), "closed the connection") {
		t.Errorf("after the daemon stopped: exit %d, want 1, stderr:\n%s", code, p.stderr)
	}
	if code, _ := s.exit(t, time.Now(), 10*time.Second); code != 0 {
		t.Errorf("the daemon exited %d", code)
	}
}

// connect ends when the client that started it exits, though its stdin
// stays open (held by another process).
func TestConnectExitsWithItsParent(t *testing.T) {
	w := newConnectWorld(t)
	bin, _ := binaries(t)
	r, held, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	fmt.Fprintf(held, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":%s}`+"\n", initLine)
	mid := exec.Command(os.Args[0], "-test.run=^$")
	mid.Env = append(os.Environ(), testserver.MarkerEnv+"="+w.marker,
		middleEnv+"="+strings.Join([]string{bin, "connect", "--config", w.cfg, "--state-dir", w.state}, "\x1f"))
	mid.ExtraFiles = []*os.File{r}
	out, err := mid.Output()
	r.Close()
	if err != nil {
		t.Fatalf("middle: %v %s", err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("middle said %q", out)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	took := waitUntil(t, 5*time.Second, "connect's exit after its parent's", func() bool { return !alive(pid) })
	if d := w.daemons(); len(d) != 1 {
		t.Errorf("daemons after the orphaned connect exited: %v, want the one it started, still running", d)
	}
	t.Logf("connect exited %v after its parent", took.Round(time.Millisecond))
}

// What connect is refused and cannot do says what and why.
func TestConnectErrors(t *testing.T) {
	w := newConnectWorld(t)
	run := func(args ...string) (int, string) {
		t.Helper()
		p := w.raw(t, args...)
		p.in.Close()
		return p.exit(t, 30*time.Second), p.stderr.String()
	}
	if code, stderr := run("--start=never"); code != 1 || !strings.Contains(stderr, "no mcpvisor daemon answers on "+w.socket(t)) {
		t.Errorf("--start=never with no daemon: exit %d, %s", code, stderr)
	}
	if code, stderr := run("--config", filepath.Join(t.TempDir(), "none.json")); code != 1 || !strings.Contains(stderr, "none.json does not exist") || !strings.Contains(stderr, "mcpvisor import") {
		t.Errorf("no config: exit %d, %s", code, stderr)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"mcpServers":{"x":{"command":""}}}`), 0o600)
	if code, stderr := run("--config", bad); code != 1 || !strings.Contains(stderr, "before it answered") || !strings.Contains(stderr, "daemon.log") || !strings.Contains(stderr, "mcpServers.x") {
		t.Errorf("a daemon that cannot start: exit %d, %s", code, stderr)
	}
	if code, stderr := run("--start=sometimes"); code != 2 || !strings.Contains(stderr, "--start") {
		t.Errorf("--start=sometimes: exit %d, %s", code, stderr)
	}

	s := startServeFile(t, w.cfg, "", "--state-dir", w.state)
	stopAtCleanup(t, s)
	if code, stderr := run("--server", "nope"); code != 1 || !strings.Contains(stderr, `refused the connection: no server named "nope"; configured: x`) {
		t.Errorf("--server nope: exit %d, %s", code, stderr)
	}
	// A preface connect does not send: another version, none at all.
	for _, c := range []struct{ line, want string }{
		{`{"mcpvisor":"connect/9","server":""}`, `unsupported preface version "connect/9": this daemon speaks connect/1`},
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `no "mcpvisor" version`},
		{`hello`, "not a connect preface"},
	} {
		conn, err := net.Dial("unix", w.socket(t))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(conn, c.line)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		var rep bridge.Reply
		if json.Unmarshal([]byte(line), &rep) != nil || rep.OK || !strings.Contains(rep.Error, c.want) {
			t.Errorf("preface %s: the daemon answered %q, want an error with %q", c.line, line, c.want)
		}
	}
}

// The socket: a dead daemon's is replaced, a live one's is never taken.
func TestServeSocketStaleAndInUse(t *testing.T) {
	w := newConnectWorld(t)
	sock := w.socket(t)
	os.MkdirAll(w.state, 0o700)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // a dead daemon's socket file: nothing answers on it
	s := startServeFile(t, w.cfg, "", "--state-dir", w.state)
	stopAtCleanup(t, s)
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the socket after serve replaced a stale one: %v %v", fi, err)
	}
	p := w.raw(t, "--start=never")
	p.initialize(t)

	bin, _ := binaries(t)
	second := exec.Command(bin, "serve", "--config", w.cfg, "--state-dir", w.state, "--listen", "127.0.0.1:0", "--socket", sock)
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another mcpvisor serve is running on it") {
		t.Fatalf("a second serve on a live socket: %v\n%s", err, out)
	}
	fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"still"}}}`+"\n")
	if line := p.response(t, 2); !strings.Contains(line, `"text":"still"`) {
		t.Fatalf("the first daemon after a second serve was refused: %q", line)
	}
	if !alive(s.cmd.Process.Pid) {
		t.Fatal("the first daemon is gone")
	}
}

// A client that names itself nowhere is known by the program that
// launched connect (its parent process, from connect's preface); one that
// names itself is known by its own name.
func TestConnectNamesTheClientByItsParent(t *testing.T) {
	w := newConnectWorld(t)
	s := startServeFile(t, w.cfg, "", "--state-dir", w.state)
	call := func(p *rawConnect, clientInfo string) {
		t.Helper()
		fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":%s}}`+"\n", clientInfo)
		p.response(t, 1)
		fmt.Fprintf(p.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
		fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"hi"}}}`+"\n")
		if line := p.response(t, 2); !strings.Contains(line, `"hi"`) {
			t.Fatalf("tools/call through connect: %s", line)
		}
	}
	call(w.raw(t, "--start=never"), `{"version":"1"}`)
	call(w.raw(t, "--start=never"), `{"name":"Zed","version":"0.190.0"}`)
	comm, err := os.ReadFile("/proc/self/comm") // connect's parent: this test
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, c := range servers(t, s.base)["x"].Clients {
		got[c.Name] = c.Requests
	}
	parent := strings.ToLower(strings.TrimSpace(string(comm)))
	found := false
	for name, n := range got {
		if name != "zed" && name != clientbook.Unknown && strings.HasPrefix(name, parent[:min(len(parent), 8)]) && n == 1 {
			found = true
		}
	}
	if !found || got["zed"] != 1 || len(got) != 2 {
		t.Fatalf("clients of x: %v; want zed and this test's program (%q), one request each", got, parent)
	}
}
