package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// overlongPad is more than the line limit of the tests below and far more
// than the few KiB at the start of a line that used to be looked at.
var overlongPad = strings.Repeat(`{"k":"v \"q\" \\"},`, 8<<10)

const overlongMax = 64 << 10

// A response over the limit fails its call at once with the limit named,
// wherever its top-level id sits; "id" keys inside the result and "id":
// inside strings are not taken for it.
func TestOverlongResponseFailsItsCallWhereverTheIDIs(t *testing.T) {
	for _, tc := range []struct {
		name string
		line func(id string) string
	}{
		{"id first", func(id string) string {
			return `{"jsonrpc":"2.0","id":` + id + `,"result":{"x":[` + overlongPad + `1]}}`
		}},
		{"id last (TypeScript SDK)", func(id string) string {
			return `{"result":{"x":[` + overlongPad + `1]},"jsonrpc":"2.0","id":` + id + `}`
		}},
		{"id in the middle", func(id string) string {
			return `{"result":{"x":[` + overlongPad + `1]},"id":` + id + `,"jsonrpc":"2.0","_meta":{"p":[` + overlongPad + `2]}}`
		}},
		{"nested ids before the real one", func(id string) string {
			return `{"result":{"id":999,"items":[{"id":998},` + overlongPad + `{"id":[1,{"id":2}]}],"meta":{"id":"x"}},"jsonrpc":"2.0","id":` + id + `}`
		}},
		{`strings holding "id": and escaped quotes`, func(id string) string {
			return `{"result":{"text":"a \"id\":997, \\\"id\\\":996 } ] {` + strings.Repeat(`\"`, 1<<15) + `\\"},"note":"\"id\":995","jsonrpc":"2.0","id":` + id + `}`
		}},
		{"escaped key, white space", func(id string) string {
			return "{ \"result\" : { \"x\" : [" + overlongPad + "1] } ,\t\"jsonrpc\":\"2.0\" , \"\\u0069d\" :\t" + id + " }"
		}},
		{"string id", func(id string) string {
			return `{"result":{"x":[` + overlongPad + `1]},"jsonrpc":"2.0","id":"` + id + `"}`
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sink := make(errSink, 10)
				c, p := startConn(t, Options{OnError: sink.onError, PeerName: "server x", MaxLine: overlongMax})
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				start := time.Now()
				big := callAsync(ctx, c, "tools/call", `{"name":"big"}`)
				req := p.read()
				line := tc.line(string(req.ID))
				if !json.Valid([]byte(line)) {
					t.Fatalf("test line is not JSON: %.200s", line)
				}
				if len(line) <= overlongMax {
					t.Fatalf("test line of %d bytes is not over the limit", len(line))
				}
				p.send(line)

				r := <-big
				var tl *LineTooLongError
				if !errors.As(r.err, &tl) || !errors.Is(r.err, ErrLineTooLong) {
					t.Fatalf("call = %v, want a *LineTooLongError", r.err)
				}
				if d := time.Since(start); d != 0 {
					t.Fatalf("the call failed after %v, want at once", d)
				}
				if want := "response from server x exceeds 64 KiB line limit"; r.err.Error() != want {
					t.Fatalf("error %q, want %q", r.err, want)
				}
				if id, _ := parseOurID(tl.ID); string(tl.ID) == "" || id != mustID(t, req.ID) || tl.Size != int64(len(line)) {
					t.Fatalf("error detail: id %s size %d, want id %s size %d", tl.ID, tl.Size, req.ID, len(line))
				}
				if err := sink.next(t); !errors.As(err, &tl) {
					t.Fatalf("reported %v", err)
				}
				// The connection goes on.
				small := callAsync(ctx, c, "ping", "")
				req = p.read()
				p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{}}`)
				if r := <-small; r.err != nil {
					t.Fatal(r.err)
				}
			})
		})
	}
}

func mustID(t *testing.T, raw []byte) int64 {
	t.Helper()
	id, ok := parseOurID(raw)
	if !ok {
		t.Fatalf("id %s is not ours", raw)
	}
	return id
}

// A request of the peer's over the limit gets an InvalidRequest error with
// its own id, even when the id comes after the huge params.
func TestOverlongRequestWithIDLastIsAnswered(t *testing.T) {
	for _, line := range []string{
		`{"method":"sampling/createMessage","params":{"id":1,"m":[` + overlongPad + `1]},"jsonrpc":"2.0","id":"srv-9"}`,
		`{"params":{"id":"srv-8","m":[` + overlongPad + `1]},"id":"srv-9","method":"x","jsonrpc":"2.0"}`,
	} {
		synctest.Test(t, func(t *testing.T) {
			sink := make(errSink, 10)
			_, p := startConn(t, Options{OnError: sink.onError, MaxLine: overlongMax, Handler: func(context.Context, *Message) {}})
			p.send(line)
			synctest.Wait()
			var tl *LineTooLongError
			if err := sink.next(t); !errors.As(err, &tl) || tl.Kind != "request" || string(tl.ID) != `"srv-9"` {
				t.Fatalf("reported %v", err)
			}
			reply := p.read()
			if string(reply.ID) != `"srv-9"` || reply.Error == nil || reply.Error.Code != InvalidRequest ||
				reply.Error.Message != "request exceeds 64 KiB line limit" {
				t.Fatalf("reply = %+v %+v", reply, reply.Error)
			}
		})
	}
}

// An overlong line without a top-level id is only reported: a pending
// call whose id appears nested in it is not failed.
func TestOverlongLineWithoutIDIsOnlyReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := make(errSink, 10)
		c, p := startConn(t, Options{OnError: sink.onError, MaxLine: overlongMax})
		got := callAsync(t.Context(), c, "tools/call", "")
		req := p.read()
		id := string(req.ID)
		p.send(`{"jsonrpc":"2.0","result":{"id":` + id + `,"items":[` + overlongPad + `{"id":` + id + `}]},"ids":` + id + `,"x":{"id":` + id + `}}`)
		synctest.Wait()
		var tl *LineTooLongError
		if err := sink.next(t); !errors.As(err, &tl) || tl.ID != nil || tl.Kind != "response" {
			t.Fatalf("reported %v (%+v)", err, tl)
		}
		select {
		case r := <-got:
			t.Fatalf("the call was failed by a line that did not name it: %v", r.err)
		default:
		}
		p.send(`{"jsonrpc":"2.0","id":` + id + `,"result":{}}`)
		if r := <-got; r.err != nil {
			t.Fatal(r.err)
		}
	})
}
