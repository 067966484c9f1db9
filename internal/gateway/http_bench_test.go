package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Throughput of the POST path against the HTTP floor, same client, 16
// concurrent callers: compare calls/s of BenchmarkStreamablePost and
// BenchmarkBareHandler from one run.

const benchCallers = 16

var (
	benchCall   = []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`)
	benchResult = json.RawMessage(`{"content":[{"type":"text","text":"hello"}]}`)
	benchReply  = []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}]}}`)
)

// benchEndpoint answers every request at once with a canned result.
type benchEndpoint struct{}

func (benchEndpoint) Open(out Sink) *Session { return NewSession(out) }
func (benchEndpoint) Close(*Session)         {}
func (e benchEndpoint) Stateless(ctx context.Context, m *rpc.Message, _ *Modern, related Sink) *rpc.Message {
	return e.Handle(ctx, nil, m, related)
}
func (benchEndpoint) Handle(_ context.Context, _ *Session, m *rpc.Message, _ Sink) *rpc.Message {
	if !m.IsRequest() {
		return nil
	}
	return &rpc.Message{ID: m.ID, Result: benchResult}
}

// benchClient is the load client both benchmarks share.
func benchClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 2 * benchCallers
	tr.MaxIdleConnsPerHost = 2 * benchCallers
	return &http.Client{Transport: tr}
}

// benchLoad runs benchCallers goroutines POSTing benchCall with hdr.
func benchLoad(b *testing.B, url string, hdr http.Header) {
	benchLoadBody(b, url, hdr, benchCall, benchReply)
}

// benchLoadBody is benchLoad POSTing body, each answered by reply (or by
// any JSON-RPC result, if reply is nil).
func benchLoadBody(b *testing.B, url string, hdr http.Header, body, reply []byte) {
	c := benchClient()
	defer c.CloseIdleConnections()
	b.SetParallelism((benchCallers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 512)
		for pb.Next() {
			req, err := http.NewRequest("POST", url, bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			req.Header = hdr.Clone()
			resp, err := c.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			n, _ := io.ReadFull(resp.Body, buf)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || (reply != nil && !bytes.Equal(buf[:n], reply)) || (reply == nil && !bytes.Contains(buf[:n], []byte(`"result"`))) {
				b.Errorf("%d %q", resp.StatusCode, buf[:n])
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	b.ReportMetric(float64(processCPU()-cpu0)/1e3/float64(b.N), "cpu-µs/call")
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkStreamablePost(b *testing.B) {
	h := NewStreamableHandler(benchEndpoint{}, HTTPOptions{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()

	req, _ := http.NewRequest("POST", srv.URL, bytes.NewReader([]byte(httpInit)))
	req.Header.Set("Accept", httpAccept)
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		b.Fatal("no session")
	}
	hdr := http.Header{}
	hdr.Set("Accept", httpAccept)
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Mcp-Session-Id", sid)
	hdr.Set("Mcp-Protocol-Version", "2025-11-25")
	benchLoad(b, srv.URL, hdr)
}

// BenchmarkBareHandler is the floor: a bare handler that reads the body
// and returns a canned JSON-RPC reply.
func BenchmarkBareHandler(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(benchReply)
	}))
	defer srv.Close()
	hdr := http.Header{}
	hdr.Set("Accept", httpAccept)
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Mcp-Session-Id", "x")
	hdr.Set("Mcp-Protocol-Version", "2025-11-25")
	benchLoad(b, srv.URL, hdr)
}
