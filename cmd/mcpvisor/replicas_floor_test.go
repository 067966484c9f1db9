package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/link"
	"github.com/mcpvisor/mcpvisor/internal/replica"
)

// The floor of a forwarding hop (make bench-replicas): what one round
// trip of a message between two processes costs in CPU, both sides, over
// loopback TCP, over TLS 1.3 under the peer keys, and over a link (TLS
// and the link's framing and streams, an http.Handler answering). A hop
// can cost no less than the first; what the link adds is its own.

const echoPeerEnv = "MCPVISOR_ECHO_PEER"

// floorMsg is the size of each message: about a small legacy call.
const floorMsg = 400

var floorKey = []byte(strings.Repeat("f", 40))

// TestEchoPeerChild is the other process of the floor: it echoes on three
// listeners, whose addresses it prints, until its standard input ends.
func TestEchoPeerChild(t *testing.T) {
	if os.Getenv(echoPeerEnv) == "" {
		t.Skip("helper process of TestBenchReplicas")
	}
	keys, err := replica.NewKeys(floorKey)
	if err != nil {
		t.Fatal(err)
	}
	ring := replica.NewRing(keys)
	echo := func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, floorMsg)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}
	plain, _ := net.Listen("tcp", "127.0.0.1:0")
	secure, _ := net.Listen("tcp", "127.0.0.1:0")
	linked, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &link.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})}
	serve := func(ln net.Listener, handle func(net.Conn)) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}
	go serve(plain, echo)
	go serve(secure, func(c net.Conn) { echo(tls.Server(c, ring.ServerTLS())) })
	go serve(linked, func(c net.Conn) {
		tc := tls.Server(c, ring.ServerTLS())
		if tc.Handshake() != nil {
			c.Close()
			return
		}
		srv.ServeConn(tc)
	})
	fmt.Printf("%s %s %s\n", plain.Addr(), secure.Addr(), linked.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
}

// selfCPU is this process's user and system CPU.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// floor measures the round trips: CPU per round trip, both processes,
// over each of TCP, TLS and a link, with conc callers making n each.
func floor(t *testing.T, conc, n int) (tcp, tlsRT, linkRT time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEchoPeerChild$")
	cmd.Env = append(os.Environ(), echoPeerEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	var addrs [3]string
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if _, serr := fmt.Sscan(line, &addrs[0], &addrs[1], &addrs[2]); err != nil || serr != nil {
		t.Fatalf("the echo peer: %q %v %v", line, err, serr)
	}
	keys, _ := replica.NewKeys(floorKey)
	ring := replica.NewRing(keys)
	measure := func(do func(i int) func()) time.Duration {
		calls := make([]func(), conc)
		for i := range conc {
			calls[i] = do(i)
		}
		c0, p0 := selfCPU(), processCPU(cmd.Process.Pid)
		var wg sync.WaitGroup
		for _, call := range calls {
			wg.Go(func() {
				for range n {
					call()
				}
			})
		}
		wg.Wait()
		return (selfCPU() - c0 + processCPU(cmd.Process.Pid) - p0) / time.Duration(conc*n)
	}
	pingPong := func(secure bool) func(int) func() {
		return func(int) func() {
			c, err := net.Dial("tcp", addrs[map[bool]int{false: 0, true: 1}[secure]])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if secure {
				cfg := ring.ClientTLS()
				cfg.NextProtos = nil
				c = tls.Client(c, cfg)
			}
			buf := make([]byte, floorMsg)
			return func() {
				if _, err := c.Write(buf); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	tr := &link.Transport{Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		cfg := ring.ClientTLS()
		cfg.NextProtos = nil
		tc := tls.Client(c, cfg)
		return tc, tc.HandshakeContext(ctx)
	}}
	defer tr.Close()
	body := strings.Repeat("x", floorMsg)
	viaLink := func(int) func() {
		return func() {
			req, _ := http.NewRequest("POST", "link://"+addrs[2]+"/mcp", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	measure(pingPong(false)) // warm
	return measure(pingPong(false)), measure(pingPong(true)), measure(viaLink)
}
