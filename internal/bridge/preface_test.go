package bridge

import (
	"bufio"
	"errors"
	"strings"
	"testing"
)

func TestReadHello(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     Hello
		err      error
		msg      string
	}{
		{"ok", `{"mcpvisor":"connect/1","server":"x","client":"claude"}` + "\n", Hello{Version: Version, Server: "x", Client: "claude"}, nil, ""},
		{"peer fields are never read from the wire", `{"mcpvisor":"connect/1","PeerUID":0,"PeerKnown":true}` + "\n", Hello{Version: Version}, nil, ""},
		{"unknown fields pass", `{"mcpvisor":"connect/1","later":1}` + "\n", Hello{Version: Version}, nil, ""},
		{"another version", `{"mcpvisor":"connect/2"}` + "\n", Hello{Version: "connect/2"}, ErrUnsupportedVersion, `"connect/2": this daemon speaks connect/1`},
		{"no version", `{"jsonrpc":"2.0","id":1,"method":"initialize"}` + "\n", Hello{}, ErrBadPreface, `no "mcpvisor" version`},
		{"not json", "hello\n", Hello{}, ErrBadPreface, "use mcpvisor connect"},
		{"too long", strings.Repeat("x", MaxPrefaceLine+1) + "\n", Hello{}, ErrBadPreface, "longer than 4096 bytes"},
		{"cut short", `{"mcpvisor":`, Hello{}, ErrBadPreface, "ended inside the first line"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := ReadHello(bufio.NewReaderSize(strings.NewReader(c.in), MaxPrefaceLine))
			if !errors.Is(err, c.err) || (c.err != nil && !strings.Contains(err.Error(), c.msg)) {
				t.Fatalf("err %v, want %v with %q", err, c.err, c.msg)
			}
			if h != c.want {
				t.Fatalf("hello %+v, want %+v", h, c.want)
			}
		})
	}
}

// What the daemon's reply read took past its line is the client's first
// bytes from the daemon, not lost.
func TestHandshakeKeepsWhatFollowsTheReply(t *testing.T) {
	client, daemon := socketPair(t)
	go func() {
		br := bufio.NewReaderSize(daemon, MaxPrefaceLine)
		if _, err := ReadHello(br); err == nil {
			daemon.Write([]byte("{\"ok\":true}\nfirst bytes\n"))
		}
		daemon.Close()
	}()
	down, err := Handshake(client, Hello{Version: Version}, 0)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(down).ReadString('\n')
	if line != "first bytes\n" || err != nil {
		t.Fatalf("after the reply: %q %v", line, err)
	}
	client.Close()
}

func TestHandshakeRefusedAndBadReply(t *testing.T) {
	for _, c := range []struct {
		reply string
		check func(error) bool
	}{
		{`{"error":"no server named \"y\""}` + "\n", func(err error) bool {
			var re *RefusedError
			return errors.As(err, &re) && re.Reason == `no server named "y"` && errors.Is(err, ErrRefused)
		}},
		{`{}` + "\n", func(err error) bool { return errors.Is(err, ErrBadPreface) }},
		{"", func(err error) bool { return errors.Is(err, ErrDaemonClosed) }},
	} {
		client, daemon := socketPair(t)
		go func() {
			_, _ = ReadHello(bufio.NewReaderSize(daemon, MaxPrefaceLine))
			daemon.Write([]byte(c.reply))
			daemon.Close()
		}()
		_, err := Handshake(client, Hello{Version: Version}, 0)
		if !c.check(err) {
			t.Errorf("reply %q: %v", c.reply, err)
		}
		client.Close()
	}
}
