package connect

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// connect checks who serves the socket it dialed before it sends
// anything: this user's daemon passes; one of another uid is refused,
// naming both.
func TestPeerIsMe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := dialDaemon(context.Background(), path)
	if err != nil {
		t.Fatalf("this user's socket: %v", err)
	}
	defer c.Close()
	if err := peerIsMe(c, os.Getuid()); err != nil {
		t.Fatalf("this user's socket: %v", err)
	}
	other := os.Getuid() + 1
	err = peerIsMe(c, other)
	if err == nil || !strings.Contains(err.Error(), "served by uid "+strconv.Itoa(os.Getuid())) || !strings.Contains(err.Error(), "(uid "+strconv.Itoa(other)+")") {
		t.Fatalf("a socket of another uid than %d: %v", other, err)
	}
}
