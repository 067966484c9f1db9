package testserver

import (
	"net"
	"os/exec"
	"testing"
	"time"
)

// StartHTTP runs bin with -http ADDR and args, ADDR a free loopback
// address, waits (10 s at most) until it listens there, and returns
// ADDR; the process is killed when the test ends. The go-sdk conformance
// server (BuildPackage of its everything-server) serves MCP that way.
func StartHTTP(t testing.TB, bin string, args ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, append([]string{"-http", addr}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s", bin, addr)
		}
		time.Sleep(20 * time.Millisecond) // polling for it to listen
	}
}
