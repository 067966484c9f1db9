package bridge

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// counter is an Activity that counts connections open.
type counter struct {
	mu         sync.Mutex
	open, seen int
}

func (c *counter) Begin() { c.mu.Lock(); c.open++; c.seen++; c.mu.Unlock() }
func (c *counter) End()   { c.mu.Lock(); c.open--; c.mu.Unlock() }
func (c *counter) get() (open, seen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open, c.seen
}

// serveEcho runs a Server on a socket in a temp dir whose sessions echo
// every line back prefixed with the server's name, until the client's
// EOF or ctx's end; stop cancels it and returns Serve's error once Serve
// has returned.
func serveEcho(t *testing.T, s *Server) (path string, stop func() error) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Open == nil {
		s.Open = echoOpen(nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	var once sync.Once
	var err2 error
	stop = func() error {
		once.Do(func() { cancel(); err2 = <-done })
		return err2
	}
	t.Cleanup(func() { stop() })
	return path, stop
}

// echoOpen is the Open of serveEcho's sessions: "nope" is no server,
// and any other's session echoes its lines prefixed with its name. admit,
// if not nil, is asked first for a place (its release given back once
// the connection is closed).
func echoOpen(admit func(Hello) (func(), error)) func(h Hello) (Session, func(), error) {
	return func(h Hello) (Session, func(), error) {
		if h.Server == "nope" {
			return nil, nil, errors.New(`no server named "nope"`)
		}
		var release func()
		if admit != nil {
			var err error
			if release, err = admit(h); err != nil {
				return nil, nil, err
			}
		}
		return func(ctx context.Context, r io.Reader, w io.Writer) error {
			// The reader ends when the connection is closed, after the
			// session returns.
			lines, quit := make(chan string), make(chan struct{})
			defer close(quit)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(r)
				for sc.Scan() {
					select {
					case lines <- sc.Text():
					case <-quit:
						return
					}
				}
			}()
			for {
				select {
				case <-ctx.Done():
					w.Write([]byte("bye\n"))
					return ctx.Err()
				case l, ok := <-lines:
					if !ok {
						return nil
					}
					io.WriteString(w, h.Server+":"+l+"\n")
				}
			}
		}, release, nil
	}
}

func dialHello(t *testing.T, path string, h Hello) (*net.UnixConn, io.Reader, error) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	down, err := Handshake(c.(*net.UnixConn), h, 5*time.Second)
	return c.(*net.UnixConn), down, err
}

func TestServerServesAndRefuses(t *testing.T) {
	var act counter
	path, stop := serveEcho(t, &Server{Activity: &act})
	c, down, err := dialHello(t, path, Hello{Version: Version, Server: "a"})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "hello\n")
	br := bufio.NewReader(down)
	if l, err := br.ReadString('\n'); l != "a:hello\n" || err != nil {
		t.Fatalf("echo: %q %v", l, err)
	}
	if open, _ := act.get(); open != 1 {
		t.Fatalf("%d connections open, want 1", open)
	}
	c.CloseWrite()
	if _, err := br.ReadString('\n'); err != io.EOF {
		t.Fatalf("after the client's EOF the daemon's side did not close: %v", err)
	}

	_, _, err = dialHello(t, path, Hello{Version: Version, Server: "nope"})
	var re *RefusedError
	if !errors.As(err, &re) || re.Reason != `no server named "nope"` {
		t.Fatalf("unknown server: %v", err)
	}
	_, _, err = dialHello(t, path, Hello{Version: "connect/0"})
	if !errors.As(err, &re) || !strings.Contains(re.Reason, `unsupported preface version "connect/0"`) {
		t.Fatalf("another version: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if open, seen := act.get(); open == 0 && seen == 3 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("activity: %d open, %d seen; want 0 and 3", open, seen)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// Serve's end ends every session (each sees ctx end) and returns once
// they have returned.
func TestServerStopEndsSessions(t *testing.T) {
	path, stop := serveEcho(t, &Server{})
	var downs []*bufio.Reader
	for range 3 {
		_, down, err := dialHello(t, path, Hello{Version: Version})
		if err != nil {
			t.Fatal(err)
		}
		downs = append(downs, bufio.NewReader(down))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for i, br := range downs {
		if l, _ := br.ReadString('\n'); l != "bye\n" {
			t.Errorf("session %d: %q, want its goodbye", i, l)
		}
		if _, err := br.ReadString('\n'); err != io.EOF {
			t.Errorf("session %d not closed: %v", i, err)
		}
	}
	if _, err := net.Dial("unix", path); err == nil {
		t.Error("still accepting after Serve returned")
	}
}

// A connection that sends no preface is dropped after PrefaceTimeout.
func TestServerPrefaceTimeout(t *testing.T) {
	path, _ := serveEcho(t, &Server{PrefaceTimeout: 50 * time.Millisecond})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the daemon kept a silent connection: %v", err)
	}
	if strings.Contains(string(b), `"ok"`) {
		t.Fatalf("answered %q", b)
	}
}

// Open bounds the sessions: one refused is told why in the reply and
// never runs; a place Open took is released once its connection is
// closed, and a refused Open keeps none.
func TestServerOpenBounds(t *testing.T) {
	var mu sync.Mutex
	taken := 0
	released := make(chan struct{}, 8)
	path, stop := serveEcho(t, &Server{Open: echoOpen(func(Hello) (func(), error) {
		mu.Lock()
		defer mu.Unlock()
		if taken == 1 {
			return nil, errors.New("too many sessions (maxSessions 1)")
		}
		taken++
		return func() {
			mu.Lock()
			taken--
			mu.Unlock()
			released <- struct{}{}
		}, nil
	})})
	first, _, err := dialHello(t, path, Hello{Version: Version, Server: "a"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = dialHello(t, path, Hello{Version: Version, Server: "a"})
	var re *RefusedError
	if !errors.As(err, &re) || re.Reason != "too many sessions (maxSessions 1)" {
		t.Fatalf("a second session under a bound of 1: %v", err)
	}
	first.Close()
	<-released
	third, down, err := dialHello(t, path, Hello{Version: Version, Server: "a"})
	if err != nil {
		t.Fatalf("a session after the first closed: %v", err)
	}
	io.WriteString(third, "hi\n")
	if l, err := bufio.NewReader(down).ReadString('\n'); l != "a:hi\n" || err != nil {
		t.Fatalf("the third session: %q %v", l, err)
	}
	third.Close()
	<-released
	// Refused by Open for another reason: it took no place.
	if _, _, err := dialHello(t, path, Hello{Version: Version, Server: "nope"}); !errors.As(err, &re) {
		t.Fatalf("unknown server: %v", err)
	}
	mu.Lock()
	if taken != 0 {
		t.Errorf("%d places taken after every connection closed", taken)
	}
	mu.Unlock()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// Open's release comes once the connection is closed: the client reads
// its end by then.
func TestOpenReleasedAfterClose(t *testing.T) {
	released := make(chan error, 1)
	var client *net.UnixConn
	ready := make(chan struct{})
	s := &Server{Open: echoOpen(func(Hello) (func(), error) {
		return func() {
			<-ready
			// Closed before this call, the client's read ends at
			// once; open, it waits for its deadline.
			_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := io.ReadAll(client)
			released <- err
		}, nil
	})}
	path, _ := serveEcho(t, s)
	c, down, err := dialHello(t, path, Hello{Version: Version, Server: "a"})
	if err != nil {
		t.Fatal(err)
	}
	client = c
	_ = down
	close(ready)
	c.CloseWrite() // the session ends at the client's EOF
	if err := <-released; err != nil {
		t.Fatalf("when Open's release ran the connection was still open: %v", err)
	}
}

// The session's peer is the connecting process's uid, from the kernel;
// a preface that claims one is not believed.
func TestServerReadsThePeersUID(t *testing.T) {
	got := make(chan Hello, 1)
	path, stop := serveEcho(t, &Server{Open: echoOpen(func(h Hello) (func(), error) {
		got <- h
		return nil, nil
	})})
	defer stop()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, `{"mcpvisor":"`+Version+`","server":"a","PeerUID":0,"PeerKnown":false}`+"\n")
	select {
	case h := <-got:
		if !h.PeerKnown || h.PeerUID != os.Getuid() {
			t.Errorf("peer: known %v uid %d, want this process's uid %d", h.PeerKnown, h.PeerUID, os.Getuid())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no session opened")
	}
}
