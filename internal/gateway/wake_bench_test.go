package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

const echoCall = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}` + "\n"

// BenchmarkWake measures a dormant server's wake: the first tools/call
// after it went dormant, answered through the gateway (respawn, handshake,
// call). "direct" is the baseline in the same run: spawning the fixture
// and doing the same handshake and call by hand. Wake overhead is the
// difference (target ≤ 5 ms). The gateway's cases: in a pid namespace
// under the mcpvisor-shim binary, under a re-execution of the running
// binary (mcpvisor without the shim installed), and with process-group
// containment only.
func BenchmarkWake(b *testing.B) {
	bin := testserver.Build(b)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(bin)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			r := bufio.NewReader(out)
			io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"0"}}}`+"\n")
			r.ReadString('\n')
			io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
			io.WriteString(in, echoCall)
			if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, `"result"`) {
				b.Fatal(line, err)
			}
			b.StopTimer()
			in.Close()
			cmd.Wait()
			b.StartTimer()
		}
	})
	shimBin := testserver.BuildPackage(b, "github.com/mcpvisor/mcpvisor/cmd/mcpvisor-shim", "mcpvisor-shim-test")
	modes := []struct {
		name string
		opts proc.Options
	}{
		{"pidns-shim", proc.Options{ShimPath: shimBin}},
		{"pidns-self", proc.Options{}},
		{"plain", proc.Options{NoPIDNamespace: true, NoCgroup: true}},
	}
	for _, mode := range modes {
		b.Run("dormant-"+mode.name, func(b *testing.B) {
			w := newBenchWorld(b, `{"s":{"command":"$FIXTURE","idleTimeout":"1h"}}`, mode.opts)
			if want := mode.opts.ShimPath; want != "" && !strings.Contains(w.rt.Report().String(), "init: "+want) {
				b.Fatalf("the runtime does not use %s:\n%s", want, w.rt.Report())
			}
			ep := w.gw.Single("s")
			sess := ep.Open(SinkFunc(func(*rpc.Message) error { return nil }))
			defer ep.Close(sess)
			srv := w.fleet.Get("s")
			call := &rpc.Message{ID: json.RawMessage("2"), Method: "tools/call", Params: json.RawMessage(`{"name":"echo","arguments":{"text":"x"}}`)}
			for b.Loop() {
				b.StopTimer()
				// Wait until the previous process is fully stopped: the
				// dormant time is set when the stop completes (while it
				// runs, status shows the previous one).
				restAt := time.Now()
				if srv.Status().State == "running" && srv.Sleep(context.Background()) == nil {
					for !srv.Status().DormantSince.After(restAt) {
						time.Sleep(time.Millisecond)
					}
				}
				b.StartTimer()
				resp := ep.Handle(context.Background(), sess, call, SinkFunc(func(*rpc.Message) error { return nil }))
				if resp.Error != nil {
					b.Fatal(resp.Error)
				}
			}
		})
	}
}

// newBenchWorld is newWorld with the Runtime options opts.
func newBenchWorld(b *testing.B, servers string, opts proc.Options) *world {
	old := worldRuntime
	worldRuntime = opts
	defer func() { worldRuntime = old }()
	return newWorld(b, servers)
}
