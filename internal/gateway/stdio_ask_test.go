package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// askEndpoint asks its client something — sampling/createMessage, as a
// server's request is relayed — while it serves the client's "ask", and
// hands the answer it gets back to answers.
type askEndpoint struct {
	bigEndpoint
	answers chan *rpc.Message
}

func (e *askEndpoint) Handle(ctx context.Context, s *Session, m *rpc.Message, related Sink) *rpc.Message {
	switch {
	case m.IsResponse():
		e.answers <- m
		return nil
	case m.Method == "ask":
		if err := related.Send(&rpc.Message{ID: json.RawMessage(`"s-1"`), Method: "sampling/createMessage", Params: json.RawMessage(`{}`)}); err != nil {
			return errorReply(m.ID, rpc.InternalError, err.Error())
		}
	}
	return e.bigEndpoint.Handle(ctx, s, m, related)
}

// bubbleStacks are the stacks of the goroutines of the calling
// goroutine's synctest bubble (of all goroutines, if the runtime names
// no bubble in a goroutine's header).
func bubbleStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(string(buf), "\n\n")
	header, _, _ := strings.Cut(stacks[0], "\n") // the caller's own
	_, bubble, ok := strings.Cut(header, ", synctest bubble ")
	if !ok {
		return stacks
	}
	bubble, _, _ = strings.Cut(bubble, "]")
	var mine []string
	for _, s := range stacks {
		h, _, _ := strings.Cut(s, "\n")
		if strings.Contains(h, ", synctest bubble "+bubble+"]") || strings.Contains(h, ", synctest bubble "+bubble+",") {
			mine = append(mine, s)
		}
	}
	return mine
}

// A request the stdio client is sent waits for its answer inputWait, as
// on every front, not for as long as the connection lasts: then the
// endpoint is answered that the client did not answer, as the HTTP front
// answers a server, the client is told the request is cancelled, and
// nothing waits for it any more. (Fake time: the bound is minutes.)
func TestStdioClientAnswerWaitBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &askEndpoint{answers: make(chan *rpc.Message, 1)}
		c := newStdioTestClientOn(t, ep)
		start := time.Now()
		c.send(`{"jsonrpc":"2.0","id":1,"method":"ask"}`)
		var asked *rpc.Message
		for range 2 { // the request to the client, and the reply to "ask"
			if m := c.message(); m.IsRequest() {
				asked = m
			} else if m.Error != nil || string(m.ID) != "1" {
				t.Fatalf("reply to ask: %s", m.Encode())
			}
		}
		if asked == nil || asked.Method != "sampling/createMessage" {
			t.Fatal("the client was not asked")
		}
		// The client never answers.
		var answer *rpc.Message
		select {
		case answer = <-ep.answers:
		case <-time.After(24 * time.Hour):
			t.Fatalf("the request to the client still waits for it after a day")
		}
		if el := time.Since(start); el != inputWait {
			t.Errorf("the endpoint was answered after %v, want inputWait (%v)", el, inputWait)
		}
		want := fmt.Sprintf("the client did not answer sampling/createMessage within %v", inputWait)
		if string(answer.ID) != `"s-1"` || answer.Error == nil || answer.Error.Code != rpc.RequestTimeout || answer.Error.Message != want {
			t.Errorf("the endpoint was answered %s, want error %d %q for id \"s-1\"", answer.Encode(), rpc.RequestTimeout, want)
		}
		m := c.message()
		if m.Method != "notifications/cancelled" || string(rpc.CancelledRequestID(m.Params)) != string(asked.ID) {
			t.Errorf("after the wait the client read %s, want the request %s cancelled", m.Encode(), asked.ID)
		}
		synctest.Wait()
		for _, s := range bubbleStacks() {
			if strings.Contains(s, "rpc.(*Pending).Wait") || strings.Contains(s, "rpc.(*Conn).Call") {
				t.Errorf("a goroutine still waits for the client's answer:\n%s", s)
			}
		}
	})
}

// withdrawEndpoint is askEndpoint whose "withdraw" withdraws the request
// it asked, as the gateway relays a server's notifications/cancelled: by
// the id it gave the request, which the stdio client never saw.
type withdrawEndpoint struct{ askEndpoint }

func (e *withdrawEndpoint) Handle(ctx context.Context, s *Session, m *rpc.Message, related Sink) *rpc.Message {
	if m.Method == "withdraw" {
		_ = related.Send(&rpc.Message{Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":"s-1","reason":"no longer needed"}`)})
	}
	return e.askEndpoint.Handle(ctx, s, m, related)
}

// A request the stdio client is sent that the endpoint withdraws is
// cancelled under the id the client was sent it by, with the endpoint's
// reason, and nothing waits for its answer any more: the endpoint, which
// took it back, is handed none.
func TestStdioWithdrawnAskCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &withdrawEndpoint{askEndpoint{answers: make(chan *rpc.Message, 1)}}
		c := newStdioTestClientOn(t, ep)
		c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"sampling":{}},"clientInfo":{"name":"t","version":"1"}}}`)
		if m := c.message(); m.Error != nil || string(m.ID) != "0" {
			t.Fatalf("reply to initialize: %s", m.Encode())
		}
		c.send(`{"jsonrpc":"2.0","id":1,"method":"ask"}`)
		var asked *rpc.Message
		for range 2 { // the request to the client, and the reply to "ask"
			if m := c.message(); m.IsRequest() {
				asked = m
			} else if m.Error != nil || string(m.ID) != "1" {
				t.Fatalf("reply to ask: %s", m.Encode())
			}
		}
		if asked == nil || asked.Method != "sampling/createMessage" {
			t.Fatal("the client was not asked")
		}
		start := time.Now()
		c.send(`{"jsonrpc":"2.0","id":2,"method":"withdraw"}`)
		var cancelled *rpc.Message
		for range 2 { // the cancellation, and the reply to "withdraw"
			if m := c.message(); m.Method == "notifications/cancelled" {
				cancelled = m
			} else if m.Error != nil || string(m.ID) != "2" {
				t.Fatalf("reply to withdraw: %s", m.Encode())
			}
		}
		if got := string(rpc.CancelledRequestID(cancelled.Params)); got != string(asked.ID) {
			t.Errorf("the client was told request %s is cancelled, want %s, the id it was sent: %s", got, asked.ID, cancelled.Encode())
		}
		if !strings.Contains(string(cancelled.Params), "no longer needed") {
			t.Errorf("the cancellation %s does not carry the endpoint's reason", cancelled.Encode())
		}
		synctest.Wait()
		if el := time.Since(start); el != 0 {
			t.Errorf("the request was withdrawn after %v, want at once", el)
		}
		for _, s := range bubbleStacks() {
			if strings.Contains(s, "rpc.(*Pending).Wait") || strings.Contains(s, "rpc.(*Conn).Call") {
				t.Errorf("a goroutine still waits for the client's answer:\n%s", s)
			}
		}
		select {
		case m := <-ep.answers:
			t.Errorf("the endpoint was handed %s for the request it withdrew", m.Encode())
		default:
		}
	})
}
