package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// memSession is a toy in-memory session: it ends when crash or Close is
// called.
type memSession struct {
	once sync.Once
	done chan struct{}
	err  error
}

func (s *memSession) Wait() error  { <-s.done; return s.err }
func (s *memSession) Close() error { s.crash(nil); return nil }
func (s *memSession) crash(err error) {
	s.once.Do(func() { s.err = err; close(s.done) })
}

// memConnector hands out memSessions and remembers the latest one.
type memConnector struct {
	mu   sync.Mutex
	last *memSession
}

func (c *memConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	s := &memSession{done: make(chan struct{})}
	c.mu.Lock()
	c.last = s
	c.mu.Unlock()
	return s, nil
}

func (c *memConnector) current() *memSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func Example() {
	conn := &memConnector{}
	sup := lifecycle.New("demo", conn, lifecycle.Policy{
		Restart: lifecycle.RestartOnFailure,
		Backoff: lifecycle.Backoff{Initial: time.Millisecond},
		OnDisconnect: func(err error) {
			fmt.Println("disconnected:", err)
		},
		OnRestart: func() { fmt.Println("reconnected") },
		Logger:    slog.New(slog.DiscardHandler),
	})

	ctx := context.Background()
	if err := sup.Start(ctx); err != nil {
		fmt.Println("start:", err)
		return
	}
	fmt.Println("state:", sup.State().State)

	// The server crashes; the supervisor reconnects after the backoff.
	restarted := sup.Restarted()
	conn.current().crash(errors.New("killed by OOM"))
	<-restarted
	info := sup.State()
	fmt.Println("state:", info.State, "restarts:", info.Restarts)

	if err := sup.Stop(ctx); err != nil {
		fmt.Println("stop:", err)
	}
	fmt.Println("state:", sup.State().State)

	// Output:
	// state: ready
	// disconnected: killed by OOM
	// reconnected
	// state: ready restarts: 1
	// disconnected: <nil>
	// state: stopped
}

func ExampleSupervisor_Session() {
	conn := &memConnector{}
	sup := lifecycle.New("demo", conn, lifecycle.Policy{Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()

	// Each request goes to the session the supervisor serves with, or is
	// refused when there is none.
	serve := func() string {
		sess := sup.Session()
		if sess == nil {
			return "refused: not connected"
		}
		if sess == lifecycle.Session(conn.current()) {
			return "served by the latest session"
		}
		return "served by an old session"
	}
	fmt.Println(serve())

	if err := sup.Start(ctx); err != nil {
		fmt.Println("start:", err)
		return
	}
	fmt.Println(serve())

	// The server crashes; after the reconnect, requests go to the new
	// session.
	restarted := sup.Restarted()
	conn.current().crash(errors.New("killed by OOM"))
	<-restarted
	fmt.Println(serve())

	if err := sup.Stop(ctx); err != nil {
		fmt.Println("stop:", err)
	}
	fmt.Println(serve())

	// Output:
	// refused: not connected
	// served by the latest session
	// served by the latest session
	// refused: not connected
}
