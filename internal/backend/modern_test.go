package backend

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

func connectProtocol(t *testing.T, command, protocol string) (*Conn, error) {
	t.Helper()
	rt, err := proc.Open(proc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	sc := &StdioConnector{
		Name: "s", Runtime: rt, Protocol: protocol, Logger: quiet(),
		Spec: proc.Spec{Command: command, Env: append(proc.Environ(), testserver.MarkerEnv+"="+testserver.NewMarker(t))},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sc.Connect(ctx)
	if err != nil {
		return nil, err
	}
	c := s.(*Conn)
	t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

func everythingServer(t *testing.T) string {
	return testserver.BuildPackage(t, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server", "everything-server")
}

// "auto" finds a dual-era server modern: no initialize, its discover
// result as its init, and requests without _meta get mcpvisor's own.
func TestProbeFindsModernServer(t *testing.T) {
	c, err := connectProtocol(t, everythingServer(t), ProtocolAuto)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Modern() || c.Init().ProtocolVersion != ModernVersion || !c.Init().Has("tools") || !strings.Contains(string(c.Init().ServerInfo), "mcp-conformance-test-server") {
		t.Fatalf("modern %v, init %s", c.Modern(), c.Init().Raw)
	}
	resp, err := c.Call(t.Context(), "tools/list", nil)
	if err != nil || resp.Error != nil || !strings.Contains(string(resp.Result), `"resultType":"complete"`) {
		t.Fatalf("tools/list on the modern server: %v %s", err, resp.Encode())
	}
}

// A legacy server answers the probe with an error: "auto" initializes it,
// and does not probe it again; "modern" refuses it; "legacy" never probes
// a dual-era one.
func TestProbeFallsBackToLegacy(t *testing.T) {
	fixture := testserver.Build(t)
	c, err := connectProtocol(t, fixture, ProtocolAuto)
	if err != nil {
		t.Fatal(err)
	}
	if c.Modern() || c.Init().ProtocolVersion != ProtocolVersion {
		t.Fatalf("the fixture: modern %v, version %q", c.Modern(), c.Init().ProtocolVersion)
	}
	if _, err := connectProtocol(t, fixture, ProtocolModern); err == nil || !strings.Contains(err.Error(), `"protocol": "modern"`) {
		t.Fatalf("modern-only connect to a legacy server: %v", err)
	}
	c, err = connectProtocol(t, everythingServer(t), ProtocolLegacy)
	if err != nil {
		t.Fatal(err)
	}
	if c.Modern() || c.Init().ProtocolVersion != ProtocolVersion {
		t.Fatalf("legacy connect to a dual-era server: modern %v, version %q", c.Modern(), c.Init().ProtocolVersion)
	}
}

// withOwnMeta adds mcpvisor's _meta where a request has none and keeps a
// client's where it has one.
func TestWithOwnMeta(t *testing.T) {
	for in, want := range map[string]string{
		``:               `{"_meta":` + string(ownMeta) + `}`,
		`{}`:             `{"_meta":` + string(ownMeta) + `}`,
		`{"cursor":"x"}`: `{"_meta":` + string(ownMeta) + `,"cursor":"x"}`,
		`{"_meta":{"` + metaProtocolVersion + `":"2026-07-28","k":1}}`: `{"_meta":{"` + metaProtocolVersion + `":"2026-07-28","k":1}}`,
	} {
		if got := string(withOwnMeta([]byte(in))); got != want {
			t.Errorf("withOwnMeta(%s) = %s, want %s", in, got, want)
		}
	}
	got := string(withOwnMeta([]byte(`{"_meta":{"progressToken":"p"}}`)))
	if !strings.Contains(got, `"progressToken":"p"`) || !strings.Contains(got, metaClientCaps) {
		t.Errorf("merged _meta %s", got)
	}
}

// An "auto" server whose last run was legacy (the persisted initialize
// result says so) is initialized at once, not probed.
func TestEraHintSkipsTheProbe(t *testing.T) {
	rt, err := proc.Open(proc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	for hint, modern := range map[string]bool{"2025-11-25": false, "": true, ModernVersion: true} {
		sc := &StdioConnector{
			Name: "s", Runtime: rt, Protocol: ProtocolAuto, Logger: quiet(), EraHint: func() string { return hint },
			Spec: proc.Spec{Command: everythingServer(t), Env: append(proc.Environ(), testserver.MarkerEnv+"="+testserver.NewMarker(t))},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := sc.Connect(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		c := s.(*Conn)
		if c.Modern() != modern {
			t.Errorf("hint %q: modern %v, want %v", hint, c.Modern(), modern)
		}
		_ = c.Close()
	}
}

// An empty Protocol is ProtocolAuto: a strict 2025 server, which exits
// when probed, is probed once, started again and initialized within the
// same Connect, and not probed on the next.
func TestEmptyProtocolIsAuto(t *testing.T) {
	rt, err := proc.Open(proc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	probes := filepath.Join(t.TempDir(), "probes")
	sc := &StdioConnector{
		Name: "s", Runtime: rt, Logger: quiet(),
		Spec: proc.Spec{Command: testserver.Build(t), Env: append(proc.Environ(), testserver.MarkerEnv+"="+testserver.NewMarker(t),
			"FIXTURE_STRICT_INIT=1", "FIXTURE_STRICT_INIT_LOG="+probes)},
	}
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := sc.Connect(ctx)
		cancel()
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		_ = s.(*Conn).Close()
	}
	if b, _ := os.ReadFile(probes); strings.Count(string(b), "server/discover") != 1 {
		t.Fatalf("probes: %q, want one", b)
	}
}
