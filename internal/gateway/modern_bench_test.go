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
