package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkGatewayCall is a tools/call of the fixture's echo through the
// whole gateway (handler, aggregate, fleet, the fixture over stdio), 16
// concurrent callers: in a 2025-11-25 session, and as stateless
// 2026-07-28 requests, each with a short text and with one of 64 KiB (its
// echo as big: what each scan and copy of a request or result costs). The
// profile of the modern path against the session path is what the first
// costs beyond the second.
func BenchmarkGatewayCall(b *testing.B) {
	w := newWorld(b, `{"x":{"command":"$FIXTURE"}}`)
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	srv := httptest.NewServer(h)
	defer func() { h.Close(); srv.Close() }()
	for _, size := range []struct{ name, text string }{{"", "hello"}, {"-64KiB", strings.Repeat("abcdefghij", 6554)}} {
		b.Run("session"+size.name, func(b *testing.B) {
			resp, err := http.Post(srv.URL, "application/json", strings.NewReader(httpInit))
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			sid := resp.Header.Get("Mcp-Session-Id")
			hdr := http.Header{"Content-Type": {"application/json"}, "Accept": {httpAccept}, "Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-11-25"}}
			benchLoadBody(b, srv.URL, hdr, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"`+size.text+`"}}}`), nil)
		})
		b.Run("modern"+size.name, func(b *testing.B) {
			hdr := http.Header{"Content-Type": {"application/json"}, "Accept": {httpAccept}}
			for k, v := range modernHeaders("tools/call", "x__echo") {
				hdr.Set(k, v)
			}
			benchLoadBody(b, srv.URL, hdr, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"`+size.text+`"},`+modernMeta(`{}`)+`}}`), nil)
		})
	}
}

// BenchmarkGatewayHandle is mcpvisor's own cost of one tools/call through
// the aggregated endpoint, in a 2025-11-25 session and as a stateless
// 2026-07-28 request: ServeHTTP called directly by one caller (no HTTP
// client, no network, no other caller in this process), the whole gateway
// and fleet behind it, the fixture over stdio. cpu-µs/call is this
// process's CPU per call — mcpvisor's alone, the fixture being a process
// of its own — which is what the two eras' paths cost beyond each other.
func BenchmarkGatewayHandle(b *testing.B) {
	w := newWorld(b, `{"x":{"command":"$FIXTURE"}}`)
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	defer h.Close()
	rig := newHandleRig(b, h)
	r, rw, post := rig.r, rig.w, rig.post
	base := http.Header{"Accept": {httpAccept}, "Content-Type": {"application/json"}}
	run := func(b *testing.B, hdr http.Header, call []byte) {
		r.Header = hdr
		post(call) // the server started and its list learned
		if rw.status != 0 && rw.status != http.StatusOK {
			b.Fatalf("status %d", rw.status)
		}
		want := rw.n
		b.ReportAllocs()
		cpu0 := processCPU()
		for b.Loop() {
			post(call)
			if rw.n != want {
				b.Fatalf("status %d, %d bytes, want %d", rw.status, rw.n, want)
			}
		}
		b.ReportMetric(float64(processCPU()-cpu0)/1e3/float64(b.N), "cpu-µs/call")
	}
	b.Run("session", func(b *testing.B) {
		r.Header = base.Clone()
		post([]byte(httpInit))
		sid := rw.hdr.Get("Mcp-Session-Id")
		if sid == "" {
			b.Fatalf("initialize: %d, no session", rw.status)
		}
		hdr := base.Clone()
		hdr.Set("Mcp-Session-Id", sid)
		hdr.Set("Mcp-Protocol-Version", "2025-11-25")
		run(b, hdr, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"hello"}}}`))
	})
	b.Run("modern", func(b *testing.B) {
		hdr := base.Clone()
		for k, v := range modernHeaders("tools/call", "x__echo") {
			hdr.Set(k, v)
		}
		run(b, hdr, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	})
}
