package bridge

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// Version is the preface version this package speaks.
const Version = "connect/1"

// MaxPrefaceLine bounds a preface line and a reply line, newline
// included: a longer one is refused (ErrBadPreface).
const MaxPrefaceLine = 4096

// Hello is the preface connect sends: one JSON line.
type Hello struct {
	// Version is the preface version ("mcpvisor" on the wire): Version.
	Version string `json:"mcpvisor"`
	// Server is the configured server the client wants alone,
	// unprefixed; "" for every server, aggregated (as /mcp).
	Server string `json:"server"`
	// Client names the program that launched connect (its parent
	// process), a hint for per-client identity; "" if unknown.
	Client string `json:"client"`

	// PeerUID is the connecting process's uid, from the kernel (never
	// from the wire), when PeerKnown: the session's identity.
	PeerUID   int  `json:"-"`
	PeerKnown bool `json:"-"`
}

// Reply is the daemon's answer to a Hello: one JSON line, either
// {"ok":true} or {"error":"…"}.
type Reply struct {
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

// WriteHello writes h as one line to w.
func WriteHello(w io.Writer, h Hello) error {
	return writeLine(w, h)
}

// ReadHello reads a preface line from r. A line longer than
// MaxPrefaceLine, one that is not a JSON object or one without a version
// is an error wrapping ErrBadPreface; a version other than Version one
// wrapping ErrUnsupportedVersion (with h as read). r should be a
// bufio.Reader of at least MaxPrefaceLine bytes, and what it buffered
// past the line is the client's.
func ReadHello(r *bufio.Reader) (h Hello, err error) {
	line, err := readLine(r)
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(line, &h); err != nil {
		return h, fmt.Errorf("%w: %w (a connection to the mcpvisor socket starts with {\"mcpvisor\":%q,...}: use mcpvisor connect)", ErrBadPreface, err, Version)
	}
	switch h.Version {
	case Version:
		return h, nil
	case "":
		return h, fmt.Errorf("%w: no \"mcpvisor\" version in %s (use mcpvisor connect)", ErrBadPreface, truncate(line))
	}
	return h, fmt.Errorf("%w %q: this daemon speaks %s; run a matching mcpvisor connect, or restart the daemon with the same mcpvisor", ErrUnsupportedVersion, h.Version, Version)
}

// WriteReply writes rep as one line to w.
func WriteReply(w io.Writer, rep Reply) error {
	return writeLine(w, rep)
}

// Handshake sends h on c and reads the daemon's reply, both within
// timeout (0: no bound). It returns the reader to read the daemon's bytes
// from from then on (what the reply's read took past its line comes
// first), or an error: a *RefusedError with the daemon's message,
// ErrBadPreface for a reply that is not one, or the I/O error.
func Handshake(c net.Conn, h Hello, timeout time.Duration) (io.Reader, error) {
	if timeout > 0 {
		_ = c.SetDeadline(time.Now().Add(timeout))
		defer c.SetDeadline(time.Time{})
	}
	if err := WriteHello(c, h); err != nil {
		if goingAway(err) {
			return nil, fmt.Errorf("%w before taking the preface: %w", ErrDaemonClosed, err)
		}
		return nil, err
	}
	br := bufio.NewReaderSize(c, MaxPrefaceLine)
	line, err := readLine(br)
	if err != nil {
		if errors.Is(err, io.EOF) || goingAway(err) {
			return nil, fmt.Errorf("%w before answering the preface: %w", ErrDaemonClosed, err)
		}
		return nil, err
	}
	var rep Reply
	if err := json.Unmarshal(line, &rep); err != nil || (!rep.OK && rep.Error == "") {
		return nil, fmt.Errorf("%w: the daemon answered %s", ErrBadPreface, truncate(line))
	}
	if !rep.OK {
		return nil, &RefusedError{Reason: rep.Error}
	}
	return rest(br, c), nil
}

// rest is what is left to read of c after br read from it: br's buffered
// bytes, then c itself (not through br, whose small buffer would cut
// every later read into pieces of its size).
func rest(br *bufio.Reader, c io.Reader) io.Reader {
	n := br.Buffered()
	if n == 0 {
		return c
	}
	b, _ := br.Peek(n)
	return io.MultiReader(bytes.NewReader(bytes.Clone(b)), c)
}

func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// readLine reads one line of at most MaxPrefaceLine bytes, without its
// newline.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, fmt.Errorf("%w: the first line is longer than %d bytes", ErrBadPreface, MaxPrefaceLine)
	case errors.Is(err, io.EOF) && len(line) > 0:
		return nil, fmt.Errorf("%w: the connection ended inside the first line", ErrBadPreface)
	case err != nil:
		return nil, err
	}
	return line[:len(line)-1], nil
}

func truncate(b []byte) string {
	const n = 80
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// goingAway reports whether err is how a daemon that is shutting down ends
// a connection it will not serve: closed before it read the preface, or
// still in its listen queue when it stopped listening — a reset or a
// broken pipe, on a unix socket, rather than EOF.
func goingAway(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
