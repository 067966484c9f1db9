package backend

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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

// "modern" finds a dual-era server modern: no initialize, its discover
// result as its init, and requests without _meta get mcpvisor's own.
func TestProbeFindsModernServer(t *testing.T) {
	c, err := connectProtocol(t, everythingServer(t), ProtocolModern)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Modern() || c.Init().ProtocolVersion != ModernVersion || !c.Init().Has("tools") || !strings.Contains(string(c.Init().ServerInfo), "mcp-conformance-test-server") {
		t.Fatalf("modern %v, init %s", c.Modern(), c.Init().Raw)
	}
	if c.Init().Era() != EraModern {
		t.Errorf("era %v, want modern", c.Init().Era())
	}
	resp, err := c.Call(t.Context(), "tools/list", nil)
	if err != nil || resp.Error != nil || !strings.Contains(string(resp.Result), `"resultType":"complete"`) {
		t.Fatalf("tools/list on the modern server: %v %s", err, resp.Encode())
	}
}

// A legacy server is initialized by "auto" without a probe; "modern"
// refuses it; "legacy" never probes a dual-era one.
func TestProbeFallsBackToLegacy(t *testing.T) {
	fixture := testserver.Build(t)
	c, err := connectProtocol(t, fixture, ProtocolAuto)
	if err != nil {
		t.Fatal(err)
	}
	if c.Modern() || c.Init().ProtocolVersion != ProtocolVersion || c.Init().Era() != EraUnknown {
		t.Fatalf("the fixture: modern %v, version %q, era %v", c.Modern(), c.Init().ProtocolVersion, c.Init().Era())
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
	if tc, err := c.ModernConn(t.Context()); tc != nil || err != nil {
		t.Fatalf("a \"legacy\" server's modern connection: %v %v", tc, err)
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

// What the last run recorded decides an "auto" server's handshake: one
// recorded modern-only is probed first (not initialized), any other
// initialized first; one recorded legacy starts no process for modern
// clients, one recorded dual or not probed yet does.
func TestLastInitDecidesTheHandshake(t *testing.T) {
	rt := openRuntime(t)
	for _, tc := range []struct {
		last       string
		modern     bool // the connection is modern-only
		twin       bool // a modern client gets a process of its own
		eraAfter   Era
		versionsIn bool // the result records the versions at once
	}{
		{``, false, true, EraDual, false},
		{`{"protocolVersion":"2025-11-25"}`, false, true, EraDual, false},
		{`{"protocolVersion":"2026-07-28","capabilities":{}}`, false, true, EraDual, false}, // recorded before versions were kept
		{`{"protocolVersion":"2025-11-25","supportedVersions":["2025-11-25"]}`, false, false, EraLegacy, true},
		{`{"protocolVersion":"2025-11-25","supportedVersions":["2026-07-28","2025-11-25"]}`, false, true, EraDual, true},
		{`{"protocolVersion":"2026-07-28","supportedVersions":["2026-07-28"]}`, true, false, EraModern, true},
	} {
		last := json.RawMessage(tc.last)
		if tc.last == "" {
			last = nil
		}
		sc := &StdioConnector{
			Name: "s", Runtime: rt, Protocol: ProtocolAuto, Logger: quiet(), LastInit: func() json.RawMessage { return last },
			Spec: proc.Spec{Command: everythingServer(t), Env: append(proc.Environ(), testserver.MarkerEnv+"="+testserver.NewMarker(t))},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := sc.Connect(ctx)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		c := s.(*Conn)
		if c.Modern() != tc.modern || (c.Init().SupportedVersions != nil) != tc.versionsIn {
			t.Errorf("last %s: modern %v, init %s", tc.last, c.Modern(), c.Init().Raw)
		}
		m, err := c.ModernConn(ctx)
		cancel()
		switch {
		case err != nil:
			t.Errorf("last %s: modern connection: %v", tc.last, err)
		case tc.modern && m != c, !tc.modern && (m != nil) != tc.twin:
			t.Errorf("last %s: modern connection %p (the connection %p), want one of its own %v", tc.last, m, c, tc.twin)
		case c.Init().Era() != tc.eraAfter:
			t.Errorf("last %s: era %v, want %v (init %s)", tc.last, c.Init().Era(), tc.eraAfter, c.Init().Raw)
		}
		_ = c.Close()
	}
}

// An empty Protocol is ProtocolAuto: a strict 2025 server, which exits
// when probed, is initialized at once and never probed to start it; the
// first modern client's request probes it on a process of its own, which
// ends on the probe, and none is started again.
func TestEmptyProtocolIsAuto(t *testing.T) {
	rt := openRuntime(t)
	probes := filepath.Join(t.TempDir(), "probes")
	var told []Era
	sc := &StdioConnector{
		Name: "s", Runtime: rt, Logger: quiet(), OnEra: func(c *Conn) { told = append(told, c.Init().Era()) },
		Spec: proc.Spec{Command: testserver.Build(t), Env: append(proc.Environ(), testserver.MarkerEnv+"="+testserver.NewMarker(t),
			"FIXTURE_STRICT_INIT=1", "FIXTURE_STRICT_INIT_LOG="+probes)},
	}
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := sc.Connect(ctx)
		if err != nil {
			cancel()
			t.Fatalf("connect %d: %v", i, err)
		}
		c := s.(*Conn)
		if b, _ := os.ReadFile(probes); i == 0 && len(b) != 0 {
			t.Fatalf("probed to start: %q", b)
		}
		for range 2 {
			if m, err := c.ModernConn(ctx); m != nil || err != nil {
				t.Fatalf("connect %d: the strict server's modern connection: %v %v", i, m, err)
			}
		}
		if i == 1 && c.Init().Era() != EraLegacy {
			t.Errorf("the next start's result records %v, want legacy: %s", c.Init().Era(), c.Init().Raw)
		}
		cancel()
		_ = c.Close()
	}
	if b, _ := os.ReadFile(probes); strings.Count(string(b), "server/discover") != 1 {
		t.Fatalf("probes: %q, want one", b)
	}
	if !slices.Equal(told, []Era{EraLegacy}) {
		t.Fatalf("OnEra told %v, want legacy once", told)
	}
}
