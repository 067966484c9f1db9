package link

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkRoundTrip: one small exchange over a link on loopback TCP, 8
// callers; both sides in this process (go test -bench RoundTrip
// -benchmem -cpuprofile shows what a link adds to the round trip).
func BenchmarkRoundTrip(b *testing.B) {
	p := newPair(&testing.T{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}), nil)
	defer p.close()
	body := strings.Repeat("x", 400)
	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", p.url+"/mcp", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := p.tr.RoundTrip(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
