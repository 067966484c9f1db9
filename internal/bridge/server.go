package bridge

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/peercred"
)

// DefaultPrefaceTimeout bounds the wait for a connection's preface
// (Server.PrefaceTimeout).
const DefaultPrefaceTimeout = 10 * time.Second

// Session serves one connection's client once its preface was accepted:
// r carries the client's bytes, w the daemon's. It returns when the
// session ends (r at EOF, ctx done, w failed); the connection is closed
// after it returns.
type Session func(ctx context.Context, r io.Reader, w io.Writer) error

// Activity sees each connection begin and end (the watchdog's Tracker).
type Activity interface {
	Begin()
	End()
}

// Server is a daemon's side of the socket: it reads each connection's
// preface, answers it, and hands the connection to the session Open
// returns for it. The zero value is not usable: Open is required.
type Server struct {
	// Open resolves a preface (its version already accepted) to the
	// session that serves it, or an error the client is told as the
	// reply (an unknown server; no place for a session under a bound on
	// the sessions open at once). release, if not nil, is called once
	// the connection is closed, whether its session ran or not: what
	// Open took for the session (that place) is given back there. On an
	// error Open keeps nothing. It is called on the connection's
	// goroutine and may be called concurrently.
	Open func(h Hello) (s Session, release func(), err error)

	// Activity, if not nil, sees every connection begin when it is
	// accepted and end when it is closed: an open connection is a client.
	Activity Activity

	// PrefaceTimeout bounds the wait for a preface line; a connection
	// that sends none in time is closed. 0: DefaultPrefaceTimeout.
	PrefaceTimeout time.Duration

	// Logger receives a record of every refused connection (nil: none).
	Logger *slog.Logger
}

// Serve accepts connections on ln until ctx ends or ln is closed, serving
// each on a goroutine of its own, and then closes ln and waits until
// every session has returned: a session ends with ctx, so Serve returns
// once they have seen it. It returns nil when ctx ended or ln was closed,
// else the error that stopped accepting.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of descriptors, or the like: wait a little (as
			// net/http does), the sessions that end free some.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			log.Warn("mcpvisor socket: accept failed", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		if s.Activity != nil {
			s.Activity.Begin()
		}
		wg.Go(func() {
			defer func() {
				_ = c.Close()
				if s.Activity != nil {
					s.Activity.End()
				}
			}()
			s.handle(ctx, c, log)
		})
	}
}

// handle reads c's preface, answers it and runs its session.
func (s *Server) handle(ctx context.Context, c net.Conn, log *slog.Logger) {
	timeout := s.PrefaceTimeout
	if timeout <= 0 {
		timeout = DefaultPrefaceTimeout
	}
	// Until the session runs, the end of ctx cuts the preface's wait: set
	// after the bound, which would otherwise undo a ctx already ended.
	_ = c.SetDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	br := bufio.NewReaderSize(c, MaxPrefaceLine)
	h, err := ReadHello(br)
	if uc, ok := c.(*net.UnixConn); ok && err == nil {
		if uid, perr := peercred.UID(uc); perr == nil {
			h.PeerUID, h.PeerKnown = uid, true
		}
	}
	var sess Session
	if err == nil {
		var release func()
		sess, release, err = s.Open(h)
		if err == nil && release != nil {
			// After the close (Serve's close again is a no-op): the
			// place is free only once the connection is gone.
			defer func() {
				_ = c.Close()
				release()
			}()
		}
	}
	if err != nil {
		log.Warn("mcpvisor socket: connection refused", "client", h.Client, "server", h.Server, "err", err)
		_ = WriteReply(c, Reply{Error: err.Error()})
		stop()
		return
	}
	// Decide before answering: a client told OK must see its session
	// run (and, if ctx ends, see it end), so ctx's end may only cut
	// what comes before the answer. If it has ended, the connection
	// closes unanswered, which connect takes as the daemon going away.
	if !stop() {
		return
	}
	// The answer is bounded by the preface deadline still set.
	if err := WriteReply(c, Reply{OK: true}); err != nil {
		return // the client is gone
	}
	_ = c.SetDeadline(time.Time{})
	_ = sess(ctx, rest(br, c), c)
}
