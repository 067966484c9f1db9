package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// A line that is a JSON array goes to Options.Batch whole, in arrival
// order with the messages around it, and WriteRaw answers it with a line
// of its own.
func TestBatchLineGoesToBatch(t *testing.T) {
	got := make(chan string, 4)
	wrote := make(chan error, 1)
	var c *Conn
	c, p := startConn(t, Options{
		Handler: func(_ context.Context, m *Message) { got <- "msg " + m.Method },
		Batch: func(_ context.Context, line []byte) {
			got <- "batch " + string(line)
			go func() { wrote <- c.WriteRaw(json.RawMessage(`[{"jsonrpc":"2.0","id":1,"result":{}}]`)) }()
		},
	})
	p.send(`{"jsonrpc":"2.0","method":"a"}`)
	p.send(`  [{"jsonrpc":"2.0","id":1,"method":"ping"}]`)
	p.send(`{"jsonrpc":"2.0","method":"b"}`)
	want := []string{"msg a", `batch   [{"jsonrpc":"2.0","id":1,"method":"ping"}]`, "msg b"}
	for _, w := range want {
		if g := <-got; g != w {
			t.Fatalf("got %q, want %q", g, w)
		}
	}
	line, err := p.in.ReadString('\n')
	if err != nil || line != `[{"jsonrpc":"2.0","id":1,"result":{}}]`+"\n" {
		t.Fatalf("the reply line: %q, %v", line, err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("WriteRaw: %v", err)
	}
}

// Without Options.Batch, an array line is reported as an invalid line
// and the connection goes on.
func TestBatchLineWithoutBatchIsReported(t *testing.T) {
	errs := make(errSink, 4)
	_, p := startConn(t, Options{OnError: errs.onError})
	p.send(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`)
	p.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if m := p.read(); string(m.ID) != "2" || m.Error == nil || m.Error.Code != MethodNotFound {
		t.Fatalf("after the batch: %s", m.Encode())
	}
	var de *DecodeError
	if err := errs.next(t); !errors.As(err, &de) || de.Code != InvalidRequest {
		t.Fatalf("reported %v", err)
	}
}

// WriteRaw refuses what cannot be one line, and writes nothing for it.
func TestWriteRawRefusesMultiLineValues(t *testing.T) {
	c, p := startConn(t, Options{})
	for _, v := range []string{"", "  ", "[1,\n2]"} {
		if err := c.WriteRaw(json.RawMessage(v)); err == nil {
			t.Fatalf("WriteRaw(%q) = nil", v)
		}
	}
	read := make(chan string, 1)
	go func() {
		line, _ := p.in.ReadString('\n')
		read <- line
	}()
	if err := c.WriteRaw(json.RawMessage(`[1,2]`)); err != nil {
		t.Fatal(err)
	}
	if line := <-read; line != "[1,2]\n" {
		t.Fatalf("first line written %q", line)
	}
}
