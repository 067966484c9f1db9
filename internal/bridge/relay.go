package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// DefaultFlushTimeout is how long Relay still copies the daemon's answers
// after the client's input ended (RelayOptions.FlushTimeout).
const DefaultFlushTimeout = 2 * time.Second

// relayBuffer is the size of each direction's copy buffer: a relay holds
// at most this much of a message at a time, whatever the message's size.
const relayBuffer = 64 << 10

// HalfCloser is a connection whose write side can be closed alone
// (*net.UnixConn is one).
type HalfCloser interface {
	net.Conn
	CloseWrite() error
}

// RelayOptions configure Relay. The zero value is usable.
type RelayOptions struct {
	// FlushTimeout bounds how long answers already under way are still
	// copied to out once in has ended. 0: DefaultFlushTimeout.
	FlushTimeout time.Duration
}

// ErrClientGone: writing to the client (out) failed; it has gone.
var ErrClientGone = errors.New("bridge: the client is gone")

// Relay copies in to c and down (c's bytes, as Handshake returned them)
// to out, unchanged, through a fixed buffer each way, until:
//
//   - in ends (EOF, or a read error: the client is gone): c's write side
//     is closed, so the daemon sees the client's EOF, and Relay still
//     copies the daemon's bytes until it closes c or FlushTimeout passes;
//     it returns nil.
//   - the daemon closes c (or a read or write on it fails) while in is
//     open: an error wrapping ErrDaemonClosed.
//   - a write to out fails: an error wrapping ErrClientGone.
//   - ctx ends: context.Cause(ctx).
//
// Before it returns, Relay closes c, and in and out if they are
// io.Closers, so that copies blocked in them end, and waits for both
// copies: an in or out whose blocked Read or Write does not end on Close
// (a blocking terminal, for one) holds Relay until it does.
func Relay(ctx context.Context, c HalfCloser, down io.Reader, in io.Reader, out io.Writer, opts RelayOptions) error {
	flush := opts.FlushTimeout
	if flush <= 0 {
		flush = DefaultFlushTimeout
	}
	up := make(chan copyEnd, 1)
	dn := make(chan copyEnd, 1)
	go func() { up <- pump(c, in) }()
	go func() { dn <- pump(out, down) }()
	upDone, dnDone := false, false
	defer func() {
		_ = c.Close()
		if cl, ok := in.(io.Closer); ok {
			_ = cl.Close()
		}
		if cl, ok := out.(io.Closer); ok {
			_ = cl.Close()
		}
		if !upDone {
			<-up
		}
		if !dnDone {
			<-dn
		}
	}()

	var e copyEnd
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case e = <-dn:
		dnDone = true
		return downErr(e)
	case e = <-up:
		upDone = true
	}
	if e.write != nil {
		return fmt.Errorf("%w: %w", ErrDaemonClosed, e.write)
	}
	// The client's input ended: so does what the daemon reads.
	if err := c.CloseWrite(); err != nil {
		return fmt.Errorf("%w: %w", ErrDaemonClosed, err)
	}
	t := time.NewTimer(flush)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case e = <-dn:
		dnDone = true
		if e.write != nil {
			return fmt.Errorf("%w: %w", ErrClientGone, e.write)
		}
		return nil
	case <-t.C:
		return nil
	}
}

// downErr is Relay's error when the daemon's side ended first.
func downErr(e copyEnd) error {
	switch {
	case e.write != nil:
		return fmt.Errorf("%w: %w", ErrClientGone, e.write)
	case e.read != nil:
		return fmt.Errorf("%w: %w", ErrDaemonClosed, e.read)
	}
	return ErrDaemonClosed
}

// copyEnd is how a copy ended: read is nil at EOF, and set for another
// read error; write is set if a write failed.
type copyEnd struct{ read, write error }

// pump copies src to dst through one buffer until EOF or an error.
func pump(dst io.Writer, src io.Reader) copyEnd {
	buf := make([]byte, relayBuffer)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return copyEnd{write: werr}
			}
		}
		if err == io.EOF {
			return copyEnd{}
		}
		if err != nil {
			return copyEnd{read: err}
		}
	}
}
