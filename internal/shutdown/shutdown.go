// Package shutdown runs mcpvisor's exit: the first SIGINT or SIGTERM (or
// another trigger: stdin EOF, the parent's death, idleness) starts a
// graceful shutdown under one global deadline; a second signal, or the
// deadline passing, forces the exit at once.
package shutdown

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Exit codes of mcpvisor (documented in docs/exit-codes.md).
const (
	// ExitOK: a clean shutdown, whatever triggered it.
	ExitOK = 0
	// ExitError: mcpvisor could not run (a listen error, a failed start).
	ExitError = 1
	// ExitUsage: bad flags or an invalid configuration.
	ExitUsage = 2
	// ExitForced: a second signal, or the shutdown deadline passing,
	// ended the graceful shutdown; every server process was SIGKILLed.
	ExitForced = 3
)

// Shutdown coordinates one process's exit.
type Shutdown struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	reason string
	sigs   chan os.Signal
	stop   func()
}

// New starts listening for SIGINT and SIGTERM. The first one (or Trigger)
// ends Context.
func New() *Shutdown {
	s := &Shutdown{sigs: make(chan os.Signal, 2)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	signal.Notify(s.sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var once sync.Once
	s.stop = func() { once.Do(func() { signal.Stop(s.sigs); close(done) }) }
	go func() {
		select {
		case sig := <-s.sigs:
			s.Trigger("signal " + sig.String())
		case <-done:
		}
	}()
	return s
}

// Context ends when shutdown begins.
func (s *Shutdown) Context() context.Context { return s.ctx }

// Trigger begins the shutdown for reason (the first reason is kept).
func (s *Shutdown) Trigger(reason string) {
	s.mu.Lock()
	if s.reason == "" {
		s.reason = reason
	}
	s.mu.Unlock()
	s.cancel()
}

// Stop stops listening for signals, for a process that ends without Run
// (an error before it served); Run stops as it returns.
func (s *Shutdown) Stop() { s.stop() }

// Reason is why the shutdown began ("" before).
func (s *Shutdown) Reason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// Run performs the shutdown once Context has ended: graceful runs with a
// context bounded by timeout; a second SIGINT/SIGTERM, or the timeout,
// cancels that context and calls force at once, which must kill every
// process group without waiting; Run then returns ExitForced without
// waiting for graceful to return (the caller exits). Otherwise it returns
// ExitOK, or ExitError if graceful failed.
func (s *Shutdown) Run(timeout time.Duration, graceful func(context.Context) error, force func()) int {
	<-s.ctx.Done()
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- graceful(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			return ExitError
		}
		return ExitOK
	case <-s.sigs:
	case <-ctx.Done():
	}
	cancel()
	force()
	return ExitForced
}

// ExitCode ends a command with a code and no message of its own.
type ExitCode int

func (c ExitCode) Error() string { return fmt.Sprintf("exit code %d", int(c)) }

// UsageError is a mistake in the command line or in what it names: it
// ends the command with ExitUsage.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }
