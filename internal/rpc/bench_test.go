package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

var (
	// modernCall is a 2026-07-28 tools/call as a client sends it: many
	// short strings, the kind of message a gateway scans most.
	modernCall    = []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	smallResponse = []byte(`{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"hello"}],"isError":false}}`)
	largeResponse = func() []byte {
		// ~100 KB: half prose with escapes, half structured content.
		var b strings.Builder
		b.WriteString(`{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"`)
		for b.Len() < 50_000 {
			b.WriteString(`Lorem ipsum dolor sit amet, \"consectetur\" adipiscing elit.\n`)
		}
		b.WriteString(`"}],"structuredContent":{"entries":[`)
		for i := 0; b.Len() < 100_000; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"name":"file-%d.txt","size":%d,"mtime":"2026-11-22T10:%02d:00Z","dir":false,"mode":420}`, i, i*1031, i%60)
		}
		b.WriteString(`]},"isError":false}}`)
		return []byte(b.String())
	}()
)

// stdEnvelope is the one-json.Unmarshal decode the hand scanner replaces.
type stdEnvelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func BenchmarkDecodeEnvelope(b *testing.B) {
	for _, in := range []struct {
		name string
		data []byte
	}{{"small", smallResponse}, {"modern-call", modernCall}, {"100KB", largeResponse}} {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			b.ReportAllocs()
			for b.Loop() {
				m, err := Decode(in.data)
				if err != nil || len(m.Result)+len(m.Params) == 0 {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			b.ReportAllocs()
			for b.Loop() {
				var m stdEnvelope
				if err := json.Unmarshal(in.data, &m); err != nil || len(m.Result)+len(m.Params) == 0 {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	m, err := Decode(largeResponse)
	if err != nil {
		b.Fatal(err)
	}
	m.ID = json.RawMessage(`"client-7"`)
	buf := make([]byte, 0, len(largeResponse)+64)
	b.SetBytes(int64(len(largeResponse)))
	b.ReportAllocs()
	for b.Loop() {
		buf = m.AppendTo(buf[:0])
	}
}

// BenchmarkCallRoundTrip is one Call over an io.Pipe pair to a Conn that
// echoes params as the result: encode, pipe, decode and dispatch on both
// sides. Allocations count both ends. An io.Pipe takes no write that
// cannot block, so every line goes through the connection's writer
// goroutine; BenchmarkCallRoundTripOSPipe is the same over os.Pipe, as
// to a child process, where an idle connection's sender writes itself.
func BenchmarkCallRoundTrip(b *testing.B) {
	benchCallRoundTrip(b, echoPair)
}

func BenchmarkCallRoundTripOSPipe(b *testing.B) {
	benchCallRoundTrip(b, echoPairOS)
}

func benchCallRoundTrip(b *testing.B, pair func(testing.TB) *Conn) {
	for _, size := range []int{0, 100_000} {
		params := json.RawMessage(`{"name":"echo","arguments":{"text":"` + strings.Repeat("x", size) + `"}}`)
		b.Run(fmt.Sprintf("params=%dB", len(params)), func(b *testing.B) {
			c := pair(b)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Call(ctx, "tools/call", params); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		c := pair(b)
		params := json.RawMessage(`{"name":"echo","arguments":{"text":"hi"}}`)
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Call(context.Background(), "tools/call", params); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// overlongResponse is a response of about size bytes whose result holds
// objects with "id" members of their own and escaped quotes; the
// response's id comes first or, as the TypeScript SDK writes it, last.
func overlongResponse(size int, idLast bool) string {
	var b strings.Builder
	if !idLast {
		b.WriteString(`{"jsonrpc":"2.0","id":42,`)
	} else {
		b.WriteString(`{`)
	}
	b.WriteString(`"result":{"content":[{"type":"text","text":"see entries"}],"structuredContent":{"entries":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"file-%d.txt","note":"say \"id\":%d, then {[","tags":["a","b"],"size":%d}`, i, i, i, i*1031)
	}
	b.WriteString(`]}}`)
	if idLast {
		b.WriteString(`,"jsonrpc":"2.0","id":42`)
	}
	b.WriteString("}")
	return b.String()
}

// BenchmarkRead is a Conn's read loop over a stream of about 8 MB of one
// kind of line: short notifications, 100 KB responses (no call pending),
// or 1 MB responses over a 64 KiB limit, skipped.
func BenchmarkRead(b *testing.B) {
	note := `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"x","data":"` + strings.Repeat("x", 200) + `"}}`
	for _, in := range []struct {
		name string
		line string
		max  int
	}{
		{"notifications", note, DefaultMaxLine},
		{"100KB", string(largeResponse), DefaultMaxLine},
		{"overlong/id-first", overlongResponse(1<<20, false), 64 << 10},
		{"overlong/id-last", overlongResponse(1<<20, true), 64 << 10},
	} {
		stream := []byte(strings.Repeat(in.line+"\n", max(1, 8<<20/(len(in.line)+1))))
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				c := NewConn(bytes.NewReader(stream), io.Discard, Options{
					MaxLine: in.max,
					Handler: func(context.Context, *Message) {},
					OnError: func(error) {},
				})
				if err := c.Run(context.Background()); !errors.Is(err, io.EOF) {
					b.Fatal(err)
				}
			}
		})
	}
}
