package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/clientbook"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A client's name is normalized and bounded, whatever it is: lower case,
// letters and digits of any script, '.', '_' and '-' kept, every other
// run one '-', none at either end; JSON escapes decoded first (a control
// character escaped is still one); cut at the bound on a character's
// edge; at most maxIdentScan bytes read.
func TestNormalizedIdent(t *testing.T) {
	long := strings.Repeat("ab", 100)
	for _, c := range []struct {
		in      string // a JSON string
		version bool
		want    string
	}{
		{`"Claude Desktop"`, false, "claude-desktop"},
		{`"cursor-vscode"`, false, "cursor-vscode"},
		{`"  Visual Studio Code  "`, false, "visual-studio-code"},
		{`"a\u0000b\nc\td"`, false, "a-b-c-d"},
		{`"a\"b\\c\/d"`, false, "a-b-c-d"},
		{`"\u001b[31mred\u001b[0m"`, false, "31mred-0m"},
		{`"Zed Ä€日本"`, false, "zed-ä-日本"},
		{`"\u00c4\ud83d\ude00x"`, false, "ä-x"}, // an emoji (a surrogate pair) is no letter
		{`"\ud83dx"`, false, "x"},               // half a pair: dropped
		{`"` + "\xff\xfe" + `ok"`, false, "ok"}, // not UTF-8: dropped
		{`"<script>alert(1)</script>"`, false, "script-alert-1-script"},
		{`"   "`, false, ""},
		{`""`, false, ""},
		{`42`, false, ""},
		{`null`, false, ""},
		{`{"name":"x"}`, false, ""},
		{`"1.2.3+build.7 (beta)"`, true, "1.2.3+build.7-beta"},
		{`"1.2.3+build"`, false, "1.2.3-build"},
		{`"` + long + `"`, false, long[:clientbook.MaxNameLen]},
		{`"` + long + `"`, true, long[:clientbook.MaxVersionLen]},
		{`"` + strings.Repeat("日", 40) + `"`, false, strings.Repeat("日", clientbook.MaxNameLen/3)},
		// Past maxIdentScan bytes nothing more is read: a name hidden
		// behind a megabyte of spaces is not found.
		{`"` + strings.Repeat(" ", maxIdentScan) + `late"`, false, ""},
		{`"\u00`, false, ""},
	} {
		got := string(normalizedIdent(nil, []byte(c.in), true, c.version))
		if got != c.want {
			t.Errorf("%.60q (version %v): %q, want %q", c.in, c.version, got, c.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("%.60q: %q is not UTF-8", c.in, got)
		}
	}
	if got := string(normalizedIdent(nil, []byte("Claude"), false, false)); got != "claude" {
		t.Errorf("plain text: %q", got)
	}
}

// Where a request's client name comes from: a session's initialize
// clientInfo, else its hint, else none (counted as unknown); a modern
// request's _meta clientInfo, else the identity of the stdio connection
// it came on (its hint), else none.
func TestClientIdentityPrecedence(t *testing.T) {
	identOf := func(w sender) string {
		name, version := w.clientIdentity(w.modern(), make([]byte, 0, 64), make([]byte, 0, 32))
		return string(name) + "/" + string(version)
	}
	ident := func(s *Session) string { return identOf(legacySender(s)) }
	s := NewSession(noSink)
	if got := ident(s); got != "/" {
		t.Errorf("nothing known: %q", got)
	}
	s.SetClientHint("Claude")
	if got := ident(s); got != "claude/" {
		t.Errorf("hint only: %q", got)
	}
	s.setClientInfo(json.RawMessage(`{"name":"Claude Desktop","version":"0.14.1"}`))
	if got := ident(s); got != "claude-desktop/0.14.1" {
		t.Errorf("clientInfo over the hint: %q", got)
	}
	s.SetClientHint("") // a later hint changes nothing the client said
	if got := ident(s); got != "claude-desktop/0.14.1" {
		t.Errorf("after the hint cleared: %q", got)
	}
	s2 := NewSession(noSink)
	s2.SetClientHint("cursor")
	s2.setClientInfo(json.RawMessage(`{"version":"1"}`)) // no name
	if got := ident(s2); got != "cursor/" {
		t.Errorf("clientInfo without a name: %q", got)
	}

	conn := NewSession(noSink)
	conn.SetClientHint("Windsurf")
	for _, c := range []struct {
		info   string
		client *Session
		want   string
	}{
		{`{"name":"Modern","version":"2"}`, nil, "modern/2"},
		{`{"name":"Modern","version":"2"}`, conn, "modern/2"},
		{``, conn, "windsurf/"},
		{`{"name":""}`, conn, "windsurf/"},
		{`"not an object"`, nil, "/"},
		{``, nil, "/"},
	} {
		mo := &Modern{ClientInfo: json.RawMessage(c.info), client: c.client}
		ms := &modernReq{mo: mo, client: c.client}
		if got := identOf(sender{req: ms}); got != c.want {
			t.Errorf("modern %s (connection %v): %q, want %q", c.info, c.client != nil, got, c.want)
		}
	}
}

// rawStdio is a client speaking raw JSON-RPC lines to ep through the
// stdio front with opts.
type rawStdio struct {
	t     *testing.T
	w     *io.PipeWriter
	lines *bufio.Scanner
}

func newRawStdio(t *testing.T, ep Endpoint, opts StdioOptions) *rawStdio {
	t.Helper()
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = opts.Serve(context.Background(), ep, c2sR, s2cW)
		s2cW.Close()
	}()
	t.Cleanup(func() {
		c2sW.Close()
		<-done
	})
	lines := bufio.NewScanner(s2cR)
	lines.Buffer(nil, 4<<20)
	return &rawStdio{t: t, w: c2sW, lines: lines}
}

// call sends one request line and returns its answer (the front answers
// in order here: one request at a time).
func (c *rawStdio) call(line string) *rpc.Message {
	c.t.Helper()
	if _, err := io.WriteString(c.w, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
	for c.lines.Scan() {
		m, err := rpc.Decode(c.lines.Bytes())
		if err != nil {
			c.t.Fatal(err)
		}
		if m.IsResponse() {
			if m.Error != nil {
				c.t.Fatalf("%.200s: %s", line, m.Encode())
			}
			return m
		}
	}
	c.t.Fatalf("no answer to %.200s: %v", line, c.lines.Err())
	return nil
}

// initialize opens a legacy session with clientInfo info ("" for none).
func (c *rawStdio) initialize(info string) {
	c.t.Helper()
	ci := ""
	if info != "" {
		ci = `,"clientInfo":` + info
	}
	c.call(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}` + ci + `}}`)
	if _, err := io.WriteString(c.w, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

// echo calls the echo tool n times on a legacy session.
func (c *rawStdio) echo(n int) {
	c.t.Helper()
	for i := range n {
		c.call(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`, i+1))
	}
}

// modernEcho calls the echo tool once as a modern request whose _meta
// has clientInfo info ("" for none).
func (c *rawStdio) modernEcho(id int, info string) {
	c.t.Helper()
	ci := ""
	if info != "" {
		ci = `"io.modelcontextprotocol/clientInfo":` + info + `,`
	}
	c.call(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",%s"io.modelcontextprotocol/clientCapabilities":{}}}}`, id, ci))
}

// clientCounts is the server's requests by client name.
func clientCounts(g *Gateway, s *fleet.Server) map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range g.Clients(s) {
		out[c.Name] = c.Requests
	}
	return out
}

func sameCounts(got, want map[string]uint64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// Two sessions on one server, each a client with its own name: each
// one's requests are counted under its name, never the other's; the
// server no client used has none; and the requests counted by client are
// the server's calls, all of them.
func TestClientsCountedPerSession(t *testing.T) {
	w := newWorld(t, twoFixtures)
	srv := w.fleet.Get("a")
	claude := newRawStdio(t, w.gw.Single("a"), StdioOptions{ClientHint: "should-not-show"})
	claude.initialize(`{"name":"Claude Desktop","version":"0.14.1"}`)
	cursor := newRawStdio(t, w.gw.Single("a"), StdioOptions{})
	cursor.initialize(`{"name":"cursor-vscode","version":"1.0.0"}`)
	claude.echo(3)
	cursor.echo(2)
	claude.echo(1)
	want := map[string]uint64{"claude-desktop": 4, "cursor-vscode": 2}
	if got := clientCounts(w.gw, srv); !sameCounts(got, want) {
		t.Fatalf("clients of a: %v, want %v", got, want)
	}
	var total uint64
	for _, n := range srv.Telemetry().Calls() {
		total += n
	}
	if total != 6 {
		t.Errorf("the server's calls: %d, its clients' requests: 6", total)
	}
	for _, c := range w.gw.Clients(srv) {
		if c.Name == "claude-desktop" && c.Version != "0.14.1" || c.Name == "cursor-vscode" && c.Version != "1.0.0" || c.LastUsed.IsZero() {
			t.Errorf("client %+v", c)
		}
	}
	if cs := w.gw.Clients(w.fleet.Get("b")); cs != nil {
		t.Errorf("b, which no client used, lists %+v", cs)
	}
}

// A session whose client names itself nowhere is counted under its
// connection's hint (ClientHint: what launched the bridge), else as
// unknown; a modern request over that connection that names no client
// likewise, and one whose _meta names its client under that name.
func TestClientHintAndModernClientInfo(t *testing.T) {
	w := newWorld(t, twoFixtures)
	srv := w.fleet.Get("a")
	hinted := newRawStdio(t, w.gw.Single("a"), StdioOptions{ClientHint: "Claude"})
	hinted.initialize(`{"version":"1"}`)
	hinted.echo(2)
	anon := newRawStdio(t, w.gw.Single("a"), StdioOptions{})
	anon.initialize("")
	anon.echo(1)
	modern := newRawStdio(t, w.gw.Single("a"), StdioOptions{ClientHint: "Cursor"})
	modern.modernEcho(1, `{"name":"Zed Editor","version":"0.190.0"}`)
	modern.modernEcho(2, "")
	modern.modernEcho(3, `{"name":"Zed Editor","version":"0.191.0"}`)
	want := map[string]uint64{"claude": 2, clientbook.Unknown: 1, "zed-editor": 2, "cursor": 1}
	if got := clientCounts(w.gw, srv); !sameCounts(got, want) {
		t.Fatalf("clients of a: %v, want %v", got, want)
	}
	for _, c := range w.gw.Clients(srv) {
		if c.Name == "zed-editor" && c.Version != "0.191.0" {
			t.Errorf("zed-editor's last version: %q", c.Version)
		}
	}
}

// The official go-sdk client at its modern default, over HTTP — no
// session, the client's identity only in each request's _meta — is
// counted under the name it gave.
func TestModernHTTPClientIsCountedByItsMeta(t *testing.T) {
	w := newWorld(t, twoFixtures)
	sess := w.modernClient(w.gw.Single("a"), true, nil)
	for range 2 {
		if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	got := clientCounts(w.gw, w.fleet.Get("a"))
	if got["modern-test"] < 2 || len(got) != 1 {
		t.Fatalf("clients of a: %v, want modern-test with 2 calls (and its lists) alone", got)
	}
}

// A hostile client: a name of 200 KB with control characters and markup
// at initialize, then modern requests under a new name each. What is
// kept is bounded — one name cut at the bound, at most MaxClientNames
// names, the rest under other — and every request is counted.
func TestHostileClientNamesAreBounded(t *testing.T) {
	w := newWorld(t, twoFixtures)
	srv := w.fleet.Get("a")
	huge := strings.Repeat("\\u0007<b>x</b>\\n", 200<<10/15)
	c := newRawStdio(t, w.gw.Single("a"), StdioOptions{})
	c.initialize(`{"name":"` + huge + `","version":"` + huge + `"}`)
	c.echo(1)
	cs := w.gw.Clients(srv)
	if len(cs) != 1 || len(cs[0].Name) > clientbook.MaxNameLen || len(cs[0].Version) > clientbook.MaxVersionLen ||
		strings.ContainsAny(cs[0].Name, "<>\x07\n ") || !strings.HasPrefix(cs[0].Name, "b-x-b-b-x-b") {
		t.Fatalf("clients: %+v", cs)
	}
	m := newRawStdio(t, w.gw.Single("a"), StdioOptions{})
	const n = 3 * clientbook.MaxNames
	for i := range n {
		m.modernEcho(i+1, fmt.Sprintf(`{"name":"bot %d","version":"1"}`, i))
	}
	cs = w.gw.Clients(srv)
	if len(cs) != clientbook.MaxNames+1 || cs[len(cs)-1].Name != clientbook.Other {
		t.Fatalf("%d names kept (last %q), want %d and %s", len(cs), cs[len(cs)-1].Name, clientbook.MaxNames, clientbook.Other)
	}
	var total uint64
	for _, c := range cs {
		total += c.Requests
	}
	if total != n+1 {
		t.Errorf("%d requests counted, want %d", total, n+1)
	}
}

// Reading a modern request's identity allocates nothing: its name and
// version are written in the caller's buffers, which stay on its stack
// (flight.record runs at every request).
func TestModernClientIdentityAllocatesNothing(t *testing.T) {
	conn := NewSession(noSink)
	conn.SetClientHint("cursor")
	for _, info := range []string{`{"name":"Zed Editor","version":"0.190.0"}`, ``} {
		ms := sender{req: &modernReq{mo: &Modern{ClientInfo: json.RawMessage(info), client: conn}}}
		var got string
		n := testing.AllocsPerRun(100, func() {
			var nb [clientbook.MaxNameLen]byte
			var vb [clientbook.MaxVersionLen]byte
			name, _ := ms.clientIdentity(ms.modern(), nb[:0], vb[:0])
			if len(name) == 0 {
				got = "none"
			}
		})
		if n != 0 || got != "" {
			t.Errorf("%q: %v allocations (%s)", info, n, got)
		}
	}
}

// A session's identity may be set and read concurrently: the hint by the
// front, clientInfo at initialize, the identity at every request's end
// (run with -race).
func TestSessionIdentityConcurrent(t *testing.T) {
	s := NewSession(noSink)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				switch (i + j) % 3 {
				case 0:
					s.SetClientHint(fmt.Sprint("hint", j))
				case 1:
					s.setClientInfo(json.RawMessage(fmt.Sprintf(`{"name":"c%d","version":"%d"}`, i, j)))
				default:
					_, _ = legacySender(s).clientIdentity(nil, nil, nil)
				}
			}
		})
	}
	wg.Wait()
	if name, _ := legacySender(s).clientIdentity(nil, nil, nil); !strings.HasPrefix(string(name), "c") {
		t.Errorf("name %q: a client's own name wins over the hint", name)
	}
}
