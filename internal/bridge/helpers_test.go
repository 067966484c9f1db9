package bridge

import (
	"net"
	"path/filepath"
	"strconv"
	"testing"
)

// socketPair is a connected pair of unix sockets: a client's and the
// daemon's end.
func socketPair(t *testing.T) (client, daemon *net.UnixConn) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.DialUnix("unix", nil, ln.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	daemon, err = ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); daemon.Close() })
	return client, daemon
}

func itoa(i int) string { return strconv.Itoa(i) }
