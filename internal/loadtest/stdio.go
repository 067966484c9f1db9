package loadtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
)

// StdioConn is one newline-delimited JSON-RPC connection to an MCP server
// (its stdin and stdout). Any number of callers share it: each request
// gets a fresh id, and one reader hands every response to the caller
// waiting on that id.
type StdioConn struct {
	wmu sync.Mutex
	w   io.Writer

	mu      sync.Mutex
	pending map[int64]chan []byte
	err     error // set when the reader stops
	done    chan struct{}

	nextID atomic.Int64
}

// NewStdio starts reading responses from r; requests go to w.
func NewStdio(r io.Reader, w io.Writer) *StdioConn {
	c := &StdioConn{w: w, pending: map[int64]chan []byte{}, done: make(chan struct{})}
	go c.read(r)
	return c
}

// Done is closed when the server's output has ended.
func (c *StdioConn) Done() <-chan struct{} { return c.done }

func (c *StdioConn) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var err error
	for {
		var line []byte
		line, err = br.ReadBytes('\n')
		if len(line) > 0 {
			c.dispatch(line)
		}
		if err != nil {
			break
		}
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	c.mu.Lock()
	c.err = fmt.Errorf("server output ended: %w", err)
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.done)
}

// dispatch hands a response to its caller, answers a server request with
// an error (the load client offers no capabilities) and drops anything else.
func (c *StdioConn) dispatch(line []byte) {
	var env struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(line, &env) != nil || len(env.ID) == 0 || string(env.ID) == "null" {
		return
	}
	if env.Method != "" {
		if env.Method == "ping" {
			_ = c.write([]byte(`{"jsonrpc":"2.0","id":` + string(env.ID) + `,"result":{}}` + "\n"))
		} else {
			_ = c.write([]byte(`{"jsonrpc":"2.0","id":` + string(env.ID) + `,"error":{"code":-32601,"message":"load client: method not found"}}` + "\n"))
		}
		return
	}
	id, err := strconv.ParseInt(string(env.ID), 10, 64)
	if err != nil {
		return
	}
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ch != nil {
		ch <- line
	}
}

func (c *StdioConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(b)
	return err
}

// call sends the request line(id) (ending in a newline) and waits on ch,
// which must have room for one reply, for the response.
func (c *StdioConn) call(ctx context.Context, line func(id int64) []byte, ch chan []byte) ([]byte, error) {
	id := c.nextID.Add(1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.pending[id] = ch
	c.mu.Unlock()
	if err := c.write(line(id)); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, err
	}
	select {
	case reply, ok := <-ch:
		if !ok {
			c.mu.Lock()
			defer c.mu.Unlock()
			return nil, c.err
		}
		return reply, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

// Initialize does the MCP handshake: initialize, then
// notifications/initialized.
func (c *StdioConn) Initialize(ctx context.Context) error {
	reply, err := c.call(ctx, func(id int64) []byte {
		return []byte(`{"jsonrpc":"2.0","id":` + strconv.FormatInt(id, 10) + initializeRequest[len(`{"jsonrpc":"2.0","id":0`):] + "\n")
	}, make(chan []byte, 1))
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(reply, &resp); err != nil || len(resp.Result) == 0 {
		return fmt.Errorf("initialize: %.300s", reply)
	}
	return c.write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"))
}

// Echo returns one caller's call function: tools/call tool {"text": text},
// checking the reply. Every caller needs its own.
func (c *StdioConn) Echo(ctx context.Context, tool, text string) func() error {
	var buf []byte
	line := func(id int64) []byte {
		buf = append(AppendCall(buf[:0], id, tool, text), '\n')
		return buf
	}
	ch := make(chan []byte, 1)
	want := EchoWant(text)
	return func() error {
		reply, err := c.call(ctx, line, ch)
		if err != nil {
			return err
		}
		return CheckEcho(reply, want)
	}
}
