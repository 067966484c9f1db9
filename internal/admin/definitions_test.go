package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/fleet/fleettest"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// toolsConn is a live connection to a fake server that lists the tools
// its toolsConnector holds at the time of the call.
type toolsConn struct {
	*liveSession
	c *toolsConnector
}

func (t toolsConn) Name() string            { return "s" }
func (t toolsConn) Init() *fleet.InitResult { return t.c.init }
func (t toolsConn) Call(_ context.Context, method string, _ json.RawMessage) (*rpc.Message, error) {
	if method != "tools/list" {
		return &rpc.Message{Result: json.RawMessage(`{}`)}, nil
	}
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return &rpc.Message{Result: json.RawMessage(`{"tools":[` + strings.Join(t.c.tools, ",") + `]}`)}, nil
}
func (t toolsConn) Start(context.Context, string, json.RawMessage) (rpc.Waiter, error) {
	return nil, io.EOF
}
func (t toolsConn) Notify(string, json.RawMessage) error          { return nil }
func (t toolsConn) Reply(json.RawMessage, json.RawMessage) error  { return nil }
func (t toolsConn) ReplyError(json.RawMessage, int, string) error { return nil }

type toolsConnector struct {
	init      *fleet.InitResult
	onConnect func(context.Context, fleet.Live)
	mu        sync.Mutex
	tools     []string
}

func (c *toolsConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	l := toolsConn{&liveSession{done: make(chan struct{})}, c}
	c.onConnect(ctx, l)
	return l, nil
}

// The definitions routes: the detail's definitions, the row's pending
// count, the diff with each held tool's fingerprint, and approvals — bad
// bodies, names that are not pending (400 listing those that are), a
// stale fingerprint (409), an unknown server (404) — none of which
// approves anything, then a good one that does.
func TestDefinitionsRoutes(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"s","pin":true,"idleTimeout":"0"}}}`), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	init, err := fleettest.ParseInit(json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	tc := &toolsConnector{init: init, tools: []string{`{"name":"echo","inputSchema":{"type":"object"}}`}}
	changed := make(chan fleet.Event, 10)
	f, err := fleet.New(cfg, fleet.Options{
		Logger: slog.New(slog.DiscardHandler),
		OnEvent: func(e fleet.Event) {
			if e.Type == "definitions_changed" {
				changed <- e
			}
		},
		Connector: func(_ *config.Server, _ backend.Hooks, onConnect func(context.Context, fleet.Live)) lifecycle.Connector {
			tc.onConnect = onConnect
			return tc
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	s := f.Get("s")
	if _, err := s.Catalog().List(t.Context(), catalog.Tools); err != nil {
		t.Fatal(err)
	}
	tc.mu.Lock()
	tc.tools = []string{`{"name":"echo","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}}}`, `{"name":"new","description":"Makes <img src=x onerror=alert(1)> things.","inputSchema":{}}`}
	tc.mu.Unlock()
	if _, err := s.Restart(t.Context()); err != nil { // relearns, in the background
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(f, nil, Options{}))
	defer srv.Close()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no definitions_changed after a restart with other tools")
	}

	var d Detail
	getJSON(t, srv.URL+"/api/servers/s", http.StatusOK, &d)
	if d.Definitions == nil || !d.Definitions.Pin || d.Definitions.ChangedAt == nil || len(d.Definitions.Pending) != 2 {
		t.Fatalf("detail definitions %+v", d.Definitions)
	}
	var rows Servers
	getJSON(t, srv.URL+"/api/servers", http.StatusOK, &rows)
	if rows.Servers[0].PendingDefinitions != 2 {
		t.Fatalf("row pendingDefinitions %d, want 2", rows.Servers[0].PendingDefinitions)
	}
	var diff DefinitionsDiff
	getJSON(t, srv.URL+"/api/servers/s/definitions/diff", http.StatusOK, &diff)
	if diff.Server != "s" || diff.Since == nil || len(diff.Changes) != 2 || len(diff.Pending) != 2 {
		t.Fatalf("diff %+v", diff)
	}
	echo := diff.Pending[0]
	if echo.Name != "echo" || echo.Change.Change != "changed" || len(echo.Fields) != 1 || echo.Fields[0].Path != "inputSchema.properties" || len(echo.Fingerprint) != 64 {
		t.Fatalf("pending echo %+v", echo)
	}
	// A new tool is shown whole: what it would be approved as.
	added := diff.Pending[1]
	if added.Name != "new" || added.Change.Change != "added" || len(added.Fields) != 2 ||
		added.Fields[0].Path != "description" || jsonString(added.Fields[0].New) != "Makes <img src=x onerror=alert(1)> things." ||
		added.Fields[1].Path != "inputSchema" || string(added.Fields[1].New) != `{}` {
		t.Logf("pending new %+v, want its whole definition", added)
	}
	if p := d.Definitions.Pending; len(p) != 2 || len(p[1].Fields) != 2 {
		t.Fatalf("detail pending %+v, want the new tool's definition", p)
	}
	newFP := added.Fingerprint
	getJSON(t, srv.URL+"/api/servers/nope/definitions/diff", http.StatusNotFound, nil)

	post := func(path, body string) (int, string) {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		path, body string
		status     int
		says       string
	}{
		{"/api/servers/s/approve", `{"names":"echo"}`, 400, "want {"},
		{"/api/servers/s/approve", `{"nmes":["echo"]}`, 400, "unknown field"},
		{"/api/servers/s/approve", `{"names":[""]}`, 400, "empty tool name"},
		{"/api/servers/s/approve", `{"names":["echo","bogus"]}`, 400, "pending: echo, new"},
		{"/api/servers/s/approve", `{"names":["echo","new","echo"]}`, 400, "echo is named twice"},
		// Nothing named is not "everything".
		{"/api/servers/s/approve", ``, 400, `name the tools to approve, or send \"all\": true`},
		{"/api/servers/s/approve", `{}`, 400, `name the tools to approve, or send \"all\": true`},
		{"/api/servers/s/approve", `{"names":[]}`, 400, `name the tools to approve`},
		{"/api/servers/s/approve", `{"all":false}`, 400, `name the tools to approve`},
		{"/api/servers/s/approve", `{"all":true,"names":["echo"]}`, 400, `not both`},
		{"/api/servers/s/approve", `{"all":true,"fingerprints":{"echo":"` + echo.Fingerprint + `"}}`, 400, `not both`},
		// A fingerprint is the definition's, whole or its first 32 digits
		// or more, and must match it on every digit given.
		{"/api/servers/s/approve", `{"names":["echo"],"fingerprints":{"echo":"00"}}`, 400, "at least its first 32 hex digits"},
		{"/api/servers/s/approve", `{"names":["echo"],"fingerprints":{"echo":"` + echo.Fingerprint[:12] + `"}}`, 400, "at least its first 32 hex digits"},
		{"/api/servers/s/approve", `{"names":["echo"],"fingerprints":{"echo":"` + strings.Repeat("g", 32) + `"}}`, 400, "at least its first 32 hex digits"},
		{"/api/servers/s/approve", `{"names":["echo"],"fingerprints":{"echo":"` + echo.Fingerprint + `0"}}`, 400, "at least its first 32 hex digits"},
		{"/api/servers/s/approve", `{"names":["echo"],"fingerprints":{"new":"` + newFP + `"}}`, 400, "fingerprints: new is not named"},
		{"/api/servers/s/approve", `{"names":["echo"],"fingerprints":{"echo":"` + strings.Repeat("0", 64) + `"}}`, 409, "changed since it was reviewed"},
		{"/api/servers/s/approve", `{"names":["echo"],"fingerprints":{"echo":"` + newFP[:32] + `"}}`, 409, "changed since it was reviewed"},
		{"/api/servers/s/approve", `{"names":["echo"],"fingerprints":{"echo":"` + echo.Fingerprint[:31] + flip(echo.Fingerprint[31]) + `"}}`, 409, "changed since it was reviewed"},
		{"/api/servers/s/approve", `{"names":["echo","new"],"fingerprints":{"echo":"` + echo.Fingerprint + `","new":"` + echo.Fingerprint + `"}}`, 409, "tool new: definition changed since it was reviewed"},
		{"/api/servers/nope/approve", `{"all":true}`, 404, `no server named \"nope\"`},
	} {
		if status, body := post(c.path, c.body); status != c.status || !strings.Contains(body, c.says) {
			t.Errorf("POST %s %s: %d %s, want %d saying %s", c.path, c.body, status, body, c.status, c.says)
		}
	}
	var tl Tools
	getJSON(t, srv.URL+"/api/servers/s/tools", http.StatusOK, &tl)
	if len(tl.Tools) != 0 || len(tl.Held) != 2 {
		t.Fatalf("tools of a server holding both: %d listed, held %v", len(tl.Tools), tl.Held)
	}
	if n := s.Status().PendingDefinitions; n != 2 {
		t.Fatalf("a refused approval approved something: %d pending", n)
	}
	// The first 32 digits of the fingerprint reviewed (in either case)
	// approve it; the answer gives the whole fingerprint approved.
	status, body := post("/api/servers/s/approve", `{"names":["echo"],"fingerprints":{"echo":"`+strings.ToUpper(echo.Fingerprint[:32])+`"}}`)
	var res ApproveResult
	if err := json.Unmarshal([]byte(body), &res); status != 200 || err != nil || len(res.Approved) != 1 || len(res.Pending) != 1 || res.Pending[0] != "new" ||
		res.Fingerprints["echo"] != echo.Fingerprint || len(res.Fingerprints) != 1 {
		t.Fatalf("approve echo: %d %s", status, body)
	}
	res = ApproveResult{}
	status, body = post("/api/servers/s/approve", `{"all":true}`)
	if err := json.Unmarshal([]byte(body), &res); status != 200 || err != nil || len(res.Approved) != 1 || res.Approved[0] != "new" || len(res.Pending) != 0 ||
		res.Fingerprints["new"] != newFP {
		t.Fatalf("approve all: %d %s", status, body)
	}
	if s.Catalog().ToolHeld("echo") || s.Catalog().ToolHeld("new") {
		t.Fatal("approved tools are still held")
	}
}

// flip is another hex digit than c.
func flip(c byte) string {
	if c == '0' {
		return "1"
	}
	return "0"
}

// jsonString is the JSON string v, decoded ("" if it is not one).
func jsonString(v json.RawMessage) string {
	var s string
	_ = json.Unmarshal(v, &s)
	return s
}
