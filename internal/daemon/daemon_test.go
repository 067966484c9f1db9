package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

func init() {
	// Re-executed as a server's pid-namespace init: run it and exit
	// before any test starts.
	proc.RunShimIfRequested()
	// Under -race the race runtime sleeps a second in every exit of a
	// race-built process; this binary's children are (the shim), and
	// the second is not what their exit costs in production.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
}

// Every test ends with no goroutine of the daemon's left: what Serve and
// Stdio opened, they closed, on every path.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// writeConfig writes a config of the fixture server x (with extra
// members before mcpServers) and returns its path.
func writeConfig(t *testing.T, extra string) string {
	t.Helper()
	fixture := testserver.Build(t)
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`{%s"mcpServers":{"x":{"command":%q}}}`, extra, fixture)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func options(t testing.TB, cfg string) Options {
	return Options{ConfigFile: cfg, StateDir: t.TempDir(), ShutdownTimeout: 10 * time.Second, NoLearn: true,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Stderr: io.Discard, Version: "test"}
}

// Each way serve can fail before it serves returns its error, and closes
// what it had opened by then (TestMain's leak check, and a state file
// that opens again at once, show it); none leaves a process behind.
func TestServeFailuresBeforeServingCloseWhatWasOpened(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := writeConfig(t, "")
	cases := []struct {
		name string
		o    func(o *ServeOptions)
		want string
	}{
		{"no config file", func(o *ServeOptions) { o.ConfigFile = filepath.Join(t.TempDir(), "none.json") }, "none.json"},
		{"an invalid config", func(o *ServeOptions) {
			o.ConfigFile = filepath.Join(t.TempDir(), "bad.json")
			_ = os.WriteFile(o.ConfigFile, []byte(`{"mcpServers":{"x":{"command":""}}}`), 0o600)
		}, "command"},
		{"a bad OTLP endpoint", func(o *ServeOptions) { o.OTLPEndpoint = "::not a url" }, "otlp"},
		{"the listen address taken", func(o *ServeOptions) { o.Listen = taken.Addr().String() }, "address already in use"},
		{"the socket's directory unusable", func(o *ServeOptions) { o.Socket = filepath.Join(cfg, "sub", "mcpvisor.sock") }, "sock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := ServeOptions{Options: options(t, cfg), Listen: "127.0.0.1:0", Socket: SocketAuto, NoWatch: true}
			tc.o(&o)
			err := Serve(t.Context(), o)
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), tc.want) {
				t.Fatalf("Serve: %v, want an error about %q", err, tc.want)
			}
			var usage shutdown.UsageError
			if tc.name == "a bad OTLP endpoint" && !errors.As(err, &usage) {
				t.Errorf("a bad OTLP endpoint: %T, want a usage error (exit 2)", err)
			}
		})
	}
}

// A serve whose context ends shuts down cleanly (nil: exit 0): it served
// a request first, and the state it held is free after it returns.
func TestServeRunsUntilItsContextEnds(t *testing.T) {
	cfg := writeConfig(t, "")
	ctx, cancel := context.WithCancel(t.Context())
	o := ServeOptions{Options: options(t, cfg), Listen: "127.0.0.1:0", Socket: "none", NoWatch: true}
	o.Stderr = &syncWriter{}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, o) }()
	addr := waitServing(t, o.Stderr.(*syncWriter), done)
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after its context ended: %v, want a clean exit", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30 s of its context ending")
	}
	// The state file is free again: a second serve of the same state opens
	// it and runs.
	ctx2, cancel2 := context.WithCancel(t.Context())
	o.Stderr = &syncWriter{}
	done2 := make(chan error, 1)
	go func() { done2 <- Serve(ctx2, o) }()
	waitServing(t, o.Stderr.(*syncWriter), done2)
	cancel2()
	if err := <-done2; err != nil {
		t.Fatalf("the second serve: %v", err)
	}
}

// waitServing waits for serve's "serving" line and returns its address.
func waitServing(t testing.TB, w *syncWriter, done <-chan error) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if s := w.String(); strings.Contains(s, "serving") {
			addr := s[strings.Index(s, "http://")+len("http://"):]
			return addr[:strings.Index(addr, "/mcp")]
		}
		select {
		case err := <-done:
			t.Fatalf("Serve returned before serving: %v", err)
		case <-deadline:
			t.Fatal("Serve did not say it serves within 30 s")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A stdio whose --server names no server is a usage error, and closes what
// it opened.
func TestStdioUnknownServerIsAUsageError(t *testing.T) {
	cfg := writeConfig(t, "")
	o := StdioOptions{Options: options(t, cfg), Server: "nope", Stdin: io.NopCloser(strings.NewReader("")), Stdout: io.Discard}
	err := Stdio(t.Context(), o)
	var usage shutdown.UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("Stdio --server nope: %v, want a usage error naming it", err)
	}
}

// A stdio answers its client, and exits cleanly when the client hangs
// up.
func TestStdioEndsWithItsClient(t *testing.T) {
	cfg := writeConfig(t, "")
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	o := StdioOptions{Options: options(t, cfg), Stdin: inR, Stdout: outW}
	done := make(chan error, 1)
	go func() { done <- Stdio(t.Context(), o) }()
	go func() {
		_, _ = io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`+"\n")
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil || !strings.Contains(line, `"id":1,"result"`) {
		t.Fatalf("the answer to initialize: %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }() // whatever else it says
	inW.Close()                                      // the client hangs up
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Stdio after its client hung up: %v, want a clean exit", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stdio did not return within 30 s of its client hanging up")
	}
	outW.Close()
}

// syncWriter is a buffer safe for the daemon's writes and the test's
// reads at once.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(b)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// stdio with a config that describes replicas says it does not join
// them, naming the servers placed "one" it serves (enabled, and the one
// --server names if set), which may run beside the deployment's process;
// without a replicas block it says nothing of it.
func TestStdioSaysItDoesNotJoinReplicas(t *testing.T) {
	const replicas = `"replicas": {"count": 2, "peers": ["127.0.0.1:1", "127.0.0.1:2"], "keyDir": "/nonexistent"},`
	for _, c := range []struct {
		name, extra, server string
		warn                bool
		named               string // the placement_one attribute, or "" for none
	}{
		{"replicas", replicas, "", true, "placement_one=one\n"},
		{"replicas, another server", replicas, "x", true, ""},
		{"none", ``, "", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			fixture := testserver.Build(t)
			cfg := filepath.Join(t.TempDir(), "config.json")
			doc := fmt.Sprintf(`{%s"mcpServers": {"x": {"command": %q}, "one": {"command": %q, "placement": "one"},
			  "off": {"command": %q, "placement": "one", "disabled": true}}}`, c.extra, fixture, fixture, fixture)
			if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs syncWriter
			o := StdioOptions{Options: options(t, cfg), Server: c.server, Stdin: io.NopCloser(strings.NewReader("")), Stdout: io.Discard}
			o.Log = slog.New(slog.NewTextHandler(&logs, nil))
			if err := Stdio(t.Context(), o); err != nil {
				t.Fatal(err)
			}
			got := logs.String()
			warned := strings.Contains(got, "does not join the replicas")
			named := strings.Contains(got, "placement_one=")
			if warned != c.warn || named != (c.named != "") || !strings.Contains(got, c.named) {
				t.Errorf("stdio's log:\n%s\nwant the warning: %v, naming %q", got, c.warn, c.named)
			}
		})
	}
}
