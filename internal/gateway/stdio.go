package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Activity receives the client's requests as they begin and end (the
// watchdog's Tracker: idle-exit never cuts a request in flight).
type Activity interface {
	Begin()
	End()
}

// ErrClientStalled: the stdio client did not take a write within
// StdioOptions.WriteTimeout; it has stopped reading and is dropped.
var ErrClientStalled = errors.New("gateway: the client stopped reading its output")

// ServeStdio serves ep to one client over newline-delimited JSON-RPC on r
// and w (mcpvisor stdio: stdin and stdout) until r reaches EOF or ctx ends,
// with log and act as in StdioOptions and the default WriteTimeout.
func ServeStdio(ctx context.Context, ep Endpoint, r io.Reader, w io.Writer, log *slog.Logger, act Activity) error {
	return StdioOptions{Logger: log, Activity: act}.Serve(ctx, ep, r, w)
}

// StdioOptions configure the stdio front. The zero value is usable.
type StdioOptions struct {
	// Logger receives the front's diagnostics (nil: discarded).
	Logger *slog.Logger

	// Activity, if not nil, sees every client request begin and end.
	Activity Activity

	// WriteTimeout bounds every write to the client: one that has not
	// been taken within it (a client that stopped reading its stdout)
	// ends the session — Serve returns an error wrapping
	// ErrClientStalled — instead of holding the front and the shutdown
	// forever. A write of more than 256 KiB gets the time for each
	// 256 KiB. 0 or negative means DefaultWriteTimeout.
	WriteTimeout time.Duration
}

// Serve serves ep to one client over newline-delimited JSON-RPC on r and
// w until r reaches EOF, ctx ends, or the client stops reading (see
// WriteTimeout). Requests run concurrently; everything the client should
// see — responses, related messages, notifications — is written to w, one
// line each. When it ends, w is closed if it is an io.Closer. A Write to w
// that never returns (a blocking pipe nobody reads) does not hold Serve:
// it is left to a goroutine of its own, which ends when that Write does.
func (o StdioOptions) Serve(ctx context.Context, ep Endpoint, r io.Reader, w io.Writer) error {
	log, act := o.Logger, o.Activity
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := o.WriteTimeout
	if timeout <= 0 {
		timeout = DefaultWriteTimeout
	}
	tw := newTimedWriter(w, timeout)
	defer tw.Close()
	var conn *rpc.Conn
	var sess *Session
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pool := &workers{wg: &wg, work: make(chan func()), quit: ctx.Done()}
	// Responses from the client arrive on the connection's own pending
	// table, so a request the gateway sends the client (sampling,
	// elicitation, roots) goes out as a Call, and its answer is handed
	// back to the endpoint under the gateway's id.
	// Servers' requests arrive on their own goroutines, maybe as the
	// session ends: none is started once ServeStdio waits for the rest.
	var spawnMu sync.Mutex
	ended := false
	var out SinkFunc
	out = func(m *rpc.Message) error {
		if !m.IsRequest() {
			return conn.Write(m)
		}
		spawnMu.Lock()
		defer spawnMu.Unlock()
		if ended {
			return ErrSessionClosed
		}
		wg.Go(func() {
			resp, err := conn.Call(ctx, m.Method, m.Params)
			if err != nil {
				resp = &rpc.Message{Error: &rpc.Error{Code: rpc.InternalError, Message: "client did not answer: " + err.Error()}}
			}
			resp.ID = m.ID
			ep.Handle(ctx, sess, resp, out)
		})
		return nil
	}
	conn = rpc.NewConn(r, tw, rpc.Options{
		PeerName: "client",
		Logger:   log,
		Handler: func(hctx context.Context, m *rpc.Message) {
			if !m.IsRequest() {
				ep.Handle(hctx, sess, m, out)
				return
			}
			if act != nil {
				act.Begin()
			}
			pool.run(func() {
				if resp := ep.Handle(hctx, sess, m, out); resp != nil {
					_ = conn.Write(resp)
				}
				if act != nil {
					act.End()
				}
			})
		},
	})
	sess = ep.Open(out)
	err := conn.Run(ctx)
	if errors.Is(err, ErrClientStalled) {
		log.Warn("stdio: the client has not read its output for "+timeout.String()+"; dropping it", "err", err)
	}
	cancel()
	tw.Close() // a write left blocked no longer holds the workers
	spawnMu.Lock()
	ended = true
	spawnMu.Unlock()
	ep.Close(sess)
	wg.Wait()
	return err
}

// workers run the client's requests. A worker that finishes waits for the
// next request instead of exiting, so that under steady load requests run
// on goroutines whose stacks have already grown; at most maxIdleWorkers
// wait, and all exit when quit closes.
type workers struct {
	wg   *sync.WaitGroup
	work chan func()
	quit <-chan struct{}
	idle atomic.Int32
}

const maxIdleWorkers = 64

// run runs f on an idle worker, or on a new one if none is idle.
func (p *workers) run(f func()) {
	select {
	case p.work <- f:
		return
	default:
	}
	p.wg.Go(func() {
		for {
			f()
			if p.idle.Add(1) > maxIdleWorkers {
				p.idle.Add(-1)
				return
			}
			select {
			case f = <-p.work:
				p.idle.Add(-1)
			case <-p.quit:
				p.idle.Add(-1)
				return
			}
		}
	})
}

// timedWriter bounds every Write to w: the bytes go, copied, to a
// goroutine of its own that writes them, and the caller waits for it at
// most timeout per 256 KiB. A write that is not done in time leaves that
// goroutine blocked — nothing interrupts a blocking write to a pipe — and
// the writer broken: that Write and every later one fail with
// ErrClientStalled. Close makes waiting and later Writes fail at once, ends
// the goroutine (once its Write, if any, returns) and closes w if it is an
// io.Closer.
type timedWriter struct {
	w       io.Writer
	timeout time.Duration
	work    chan []byte
	result  chan error // cap 1
	closed  chan struct{}
	once    sync.Once

	mu     sync.Mutex // one Write at a time
	buf    []byte     // the bytes being written; the goroutine's while it writes
	timer  *time.Timer
	broken error
}

// errWriterClosed: the timed writer was closed.
var errWriterClosed = errors.New("gateway: writer closed")

func newTimedWriter(w io.Writer, timeout time.Duration) *timedWriter {
	t := &timedWriter{w: w, timeout: timeout, work: make(chan []byte), result: make(chan error, 1), closed: make(chan struct{})}
	go t.run()
	return t
}

func (t *timedWriter) run() {
	for {
		select {
		case b := <-t.work:
			_, err := t.w.Write(b)
			t.result <- err
		case <-t.closed:
			return
		}
	}
}

// Write writes p, in pieces of at most writeChunk bytes, each within the
// timeout.
func (t *timedWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	written := 0
	for len(p) > 0 {
		if t.broken != nil {
			return written, t.broken
		}
		n := min(len(p), writeChunk)
		t.buf = append(t.buf[:0], p[:n]...)
		select {
		case t.work <- t.buf:
		case <-t.closed:
			t.broken = errWriterClosed
			return written, t.broken
		}
		if t.timer == nil {
			t.timer = time.NewTimer(t.timeout)
		} else {
			t.timer.Reset(t.timeout)
		}
		select {
		case err := <-t.result:
			t.timer.Stop()
			if err != nil {
				t.broken = err
				return written, err
			}
		case <-t.timer.C:
			t.buf = nil // the goroutine keeps it
			t.broken = ErrClientStalled
			return written, t.broken
		case <-t.closed:
			t.timer.Stop()
			t.buf = nil
			t.broken = errWriterClosed
			return written, t.broken
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// Close is idempotent and safe while a Write waits.
func (t *timedWriter) Close() error {
	var err error
	t.once.Do(func() {
		close(t.closed)
		if c, ok := t.w.(io.Closer); ok {
			err = c.Close()
		}
	})
	return err
}
