package bridge

import (
	"context"
	"io"
	"sync"
	"time"
)

// InFlight counts one session's requests in flight (it is the session's
// gateway.Activity: Begin and End of every client request), passing each
// Begin and End on to Next, the daemon-wide Activity, if set. Connect
// closes its write side at the client's EOF and still copies the answers
// under way for up to DefaultFlushTimeout: HoldEOF keeps the daemon's
// session reading until they are written. The zero value is usable; it
// is safe for concurrent use.
type InFlight struct {
	// Next, if not nil, sees every Begin and End as well.
	Next Activity

	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to 0; nil while n is 0
}

// Begin counts a request in.
func (f *InFlight) Begin() {
	f.mu.Lock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
	if f.Next != nil {
		f.Next.Begin()
	}
}

// End counts a request out; the last one out wakes the waits.
func (f *InFlight) End() {
	f.mu.Lock()
	f.n--
	if f.n == 0 {
		close(f.idle)
		f.idle = nil
	}
	f.mu.Unlock()
	if f.Next != nil {
		f.Next.End()
	}
}

// Wait waits until no request is in flight, at most timeout (0 or
// negative: no bound), or until ctx ends. It reports whether none is in
// flight.
func (f *InFlight) Wait(ctx context.Context, timeout time.Duration) bool {
	f.mu.Lock()
	idle := f.idle
	f.mu.Unlock()
	if idle == nil {
		return true
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-idle:
		return true
	case <-expired:
	case <-ctx.Done():
	}
	return false
}

// HoldEOF is r, except that its io.EOF (only EOF: another error is
// returned at once) is held until f has no request in flight, at most
// timeout (0: DefaultFlushTimeout), or until ctx ends: the stdio front
// ends a session, and cancels its requests, at the EOF it reads, and a
// client that sent its last request and closed its input still wants
// the answer. A last line the client did not end with a newline is ended
// with one, so that its request is read, and counted, before the hold.
func (f *InFlight) HoldEOF(ctx context.Context, r io.Reader, timeout time.Duration) io.Reader {
	if timeout <= 0 {
		timeout = DefaultFlushTimeout
	}
	return &eofHolder{f: f, ctx: ctx, r: r, timeout: timeout}
}

type eofHolder struct {
	f       *InFlight
	ctx     context.Context
	r       io.Reader
	timeout time.Duration
	held    bool // the EOF was held once: later reads return it at once
	// open: the bytes read so far end inside a line (no newline yet).
	open bool
}

func (h *eofHolder) Read(p []byte) (int, error) {
	if h.held {
		return h.r.Read(p)
	}
	n, err := h.r.Read(p)
	if n > 0 {
		h.open = p[n-1] != '\n'
	}
	if err != io.EOF {
		return n, err
	}
	if n > 0 {
		// The last bytes first: the requests they carry are counted
		// before the EOF is read again.
		return n, nil
	}
	if h.open && len(p) > 0 {
		// A last line without its newline: the line reader would take
		// it only with the EOF, after the hold. End it, so that its
		// request is counted (and answered) first.
		h.open = false
		p[0] = '\n'
		return 1, nil
	}
	h.held = true
	h.f.Wait(h.ctx, h.timeout)
	return 0, err
}
