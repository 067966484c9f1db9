package rpc

import (
	"io"
	"syscall"
	"time"
)

// rawWriter makes writes that never block to a connection's writer: one
// that the runtime polls (an *os.File from os.Pipe, as a child's stdin
// is; a net.Conn) and so is in non-blocking mode. A write takes what the
// kernel has room for and returns; the rest is the writer goroutine's, as
// write.go describes. Only the sender that holds the write side (it set
// Conn.wr.writing) uses it.
type rawWriter struct {
	rc syscall.RawConn
	fn func(fd uintptr) bool // r.try, made once

	// The write in progress.
	b   []byte
	n   int
	err error

	afterWrite func() // tests: runs after each write, before it is accounted
}

// newRawWriter returns nil unless w takes writes that do not block: it
// has a write deadline (so the runtime polls it: os.ErrNoDeadline
// otherwise), a syscall.RawConn, and is in non-blocking mode. It clears
// w's write deadline, which the connection does not use.
func newRawWriter(w io.Writer) *rawWriter {
	dw, ok := w.(interface{ SetWriteDeadline(time.Time) error })
	if !ok {
		return nil
	}
	sc, ok := w.(syscall.Conn)
	if !ok || dw.SetWriteDeadline(time.Time{}) != nil {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil || !nonblocking(rc) {
		return nil
	}
	r := &rawWriter{rc: rc}
	r.fn = r.try
	return r
}

// write writes what of b the kernel takes at once: n < len(b) with a nil
// error means it had no room for the rest.
func (r *rawWriter) write(b []byte) (n int, err error) {
	r.b, r.n, r.err = b, 0, nil
	if err := r.rc.Write(r.fn); err != nil { // closed
		r.b = nil
		return 0, err
	}
	n, err = r.n, r.err
	r.b, r.err = nil, nil
	if r.afterWrite != nil {
		r.afterWrite()
	}
	return n, err
}

// try is the one pass of rc.Write: true, so that it never waits.
func (r *rawWriter) try(fd uintptr) bool {
	for r.n < len(r.b) {
		n, err := writeFD(fd, r.b[r.n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return true
		case err != nil:
			r.err = err
			return true
		}
		r.n += n
	}
	return true
}
