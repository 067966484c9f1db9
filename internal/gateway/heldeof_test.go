package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/bridge"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// eofSlow is an endpoint whose every request takes 200 ms (or ends with
// its ctx: then it answers "cancelled").
type eofSlow struct{}

func (eofSlow) Open(out Sink) *Session { return &Session{out: out} }
func (eofSlow) Handle(ctx context.Context, s *Session, m *rpc.Message, related Sink) *rpc.Message {
	if !m.IsRequest() {
		return nil
	}
	select {
	case <-time.After(200 * time.Millisecond):
		return &rpc.Message{ID: m.ID, Result: json.RawMessage(`{"ok":true}`)}
	case <-ctx.Done():
		return &rpc.Message{ID: m.ID, Error: &rpc.Error{Code: rpc.InternalError, Message: "cancelled"}}
	}
}
func (e eofSlow) Stateless(ctx context.Context, m *rpc.Message, mo *Modern, related Sink) *rpc.Message {
	return e.Handle(ctx, nil, m, related)
}
func (eofSlow) Close(*Session) {}

// serveHeldEOF serves input as the daemon's socket session does
// (serve_socket.go: a per-session bridge.InFlight as the front's Activity,
// the reader wrapped in its HoldEOF) and returns everything written back.
func serveHeldEOF(t *testing.T, input string) string {
	t.Helper()
	return serveToEOF(t, input, true)
}

// serveToEOF serves input to the end of the stream, through the daemon's
// HoldEOF if held, else as mcpvisor stdio does (nothing holds its EOF),
// and returns everything written back.
func serveToEOF(t *testing.T, input string, held bool) string {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		inflight := &bridge.InFlight{}
		opts := StdioOptions{Activity: inflight}
		var r io.Reader = inR
		if held {
			r = inflight.HoldEOF(context.Background(), inR, bridge.DefaultFlushTimeout)
		}
		_ = opts.Serve(context.Background(), eofSlow{}, r, outW)
		outW.Close()
	}()
	go func() {
		io.WriteString(inW, input)
		inW.Close() // the client's EOF, as connect's CloseWrite passes it on
	}()
	var got strings.Builder
	sc := bufio.NewScanner(outR)
	for sc.Scan() {
		got.WriteString(sc.Text() + "\n")
	}
	<-done
	return got.String()
}

// A request whose line ends with a newline, then EOF: HoldEOF keeps the
// session until its answer is written.
func TestHeldEOFAnswersTheLastLine(t *testing.T) {
	got := serveHeldEOF(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n")
	if !strings.Contains(got, `"ok":true`) {
		t.Fatalf("answer to the last request before EOF: %q", got)
	}
}

// The same request as the stream's final line without a newline (the
// line reader hands it over only with the EOF): HoldEOF ends the line
// first, so it is read, counted and answered before the hold.
func TestHeldEOFAnswersALastLineWithoutNewline(t *testing.T) {
	got := serveHeldEOF(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if !strings.Contains(got, `"ok":true`) {
		t.Fatalf("answer to a final request line without a newline: %q (want the result, as with a newline)", got)
	}
}

// A line the front refuses itself (a batch before initialize), and a
// request line the connection refuses (not JSON-RPC: method is a number),
// as the last line before the client's EOF: the refusal is queued as the
// line is read and written before the connection ends
// (rpc.Options.FlushAtEOF), through the daemon's HoldEOF and in plain
// mcpvisor stdio alike.
func TestEOFAnswersRefusals(t *testing.T) {
	for _, c := range []struct{ name, line string }{
		{"batch before initialize", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`},
		{"invalid request", `{"jsonrpc":"2.0","id":1,"method":5}`},
	} {
		for _, held := range []bool{true, false} {
			for i := range 50 {
				if got := serveToEOF(t, c.line+"\n", held); !strings.Contains(got, `"error"`) {
					t.Fatalf("%s (held EOF %v), run %d: the refusal of the last line before EOF is lost: %q", c.name, held, i, got)
				}
			}
		}
	}
}
