package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
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
				if srv.Init() != nil && srv.Rest(srv.Requests()) {
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

// TestDormantMemory measures what 1,000 configured, dormant servers cost
// mcpvisor: heap after GC per server, with their tool lists cached (20
// tools each, as learned) and without. Target ≤ 2 KB per server, lists
// aside.
func TestDormantMemory(t *testing.T) {
	const n = 1000
	measure := func(servers int, withLists bool) (heap uint64) {
		var sb strings.Builder
		sb.WriteString(`{"mcpServers":{`)
		for i := range servers {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `"s%04d":{"command":"/usr/bin/mcp-server-%d","args":["--port","%d"]}`, i, i, i)
		}
		sb.WriteString(`}}`)
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		cfg, err := config.Parse([]byte(sb.String()), "mem.json", config.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g := New(nil)
		f, err := fleet.New(cfg, fleet.Options{Hooks: g})
		if err != nil {
			t.Fatal(err)
		}
		g.SetFleet(f)
		if withLists {
			tools := make([]json.RawMessage, 20)
			for i := range tools {
				tools[i] = json.RawMessage(fmt.Sprintf(`{"name":"tool_%d","description":"does thing %d","inputSchema":{"type":"object"}}`, i, i))
			}
			for _, s := range f.Servers() {
				g.catalogs[s.Name()].put(kindTools, tools)
			}
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(g)
		runtime.KeepAlive(f)
		runtime.KeepAlive(cfg)
		return after.HeapAlloc - before.HeapAlloc
	}
	bare := measure(n, false)
	per := float64(bare) / n
	withLists := float64(measure(n, true)) / n
	t.Logf("%d dormant servers: %.0f bytes of heap per server (config, fleet entry, supervisor, catalog); %.0f bytes with 20 shared cached tool items each", n, per, withLists)
	if per > 2048 {
		t.Errorf("%.0f bytes per dormant server, target ≤ 2048", per)
	}
}
