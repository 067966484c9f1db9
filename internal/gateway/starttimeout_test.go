package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A request is answered within its request timeout whatever state its
// server is in: one that arrives while the server starts, and the start
// takes longer than the timeout, gets a timeout error naming the start at
// its timeout — on both endpoints — and the start goes on: the next
// request, once it is done, is served by it with no second spawn.
func TestRequestTimeoutCoversTheStart(t *testing.T) {
	w := newWorldStore(t, `{"slow":{"command":"$FIXTURE","args":["-slow-start","2s"],"requestTimeout":"500ms","idleTimeout":"0"}}`, t.TempDir()+"/state.db", "")
	srv := w.fleet.Get("slow")
	// Started once, to learn it (its initialize result and tools are
	// cached), then put to sleep.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := srv.Catalog().List(ctx, catalog.Tools); err != nil {
		t.Fatal(err)
	}
	for srv.Catalog().CachedInit() == nil || !srv.Catalog().Cached(catalog.Tools) {
		if ctx.Err() != nil {
			t.Fatal("the server's initialize result and tools were not learned")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := srv.Sleep(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ep := range []struct {
		name string
		ep   Endpoint
		tool string
	}{{"/servers/slow/mcp", w.gw.Single("slow"), "echo"}, {"/mcp", w.gw.Aggregate(), "slow__echo"}} {
		t.Run(strings.Trim(ep.name, "/"), func(t *testing.T) {
			if st := srv.Status().State; st != "dormant" {
				t.Fatalf("state %s before the call", st)
			}
			spawns := w.count("slow", "respawned")
			sess := w.stdioClient(ep.ep, nil)
			t0 := time.Now()
			_, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: ep.tool, Arguments: map[string]any{"text": "x"}})
			took := time.Since(t0)
			var werr *jsonrpc.Error
			if !errors.As(err, &werr) || werr.Code != rpc.RequestTimeout || !strings.Contains(werr.Message, "within 500ms") || !strings.Contains(werr.Message, "starting") {
				t.Fatalf("a call while the server starts: %v", err)
			}
			if took < 500*time.Millisecond || took > 1500*time.Millisecond {
				t.Fatalf("answered after %v, want at its timeout (500ms)", took)
			}
			w.waitEvent("slow", "respawned", spawns+1, 10*time.Second)
			res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: ep.tool, Arguments: map[string]any{"text": "y"}})
			if err != nil || res.IsError {
				t.Fatalf("once started: %v %v", res, err)
			}
			if n := w.count("slow", "respawned"); n != spawns+1 {
				t.Fatalf("%d wakes, want %d: the start the timed-out call began went on", n, spawns+1)
			}
			for srv.Status().InFlight > 0 { // the call's lease is released after its answer
				if ctx.Err() != nil {
					t.Fatal("the call's lease was never released")
				}
				time.Sleep(time.Millisecond)
			}
			if err := srv.Sleep(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A modern client's request to a dual-era server waits for the server's
// process for modern clients within its own request timeout too: when
// that process takes longer to start, the request is answered at its
// timeout, and never sent to the server after it.
func TestRequestTimeoutCoversTheModernProcess(t *testing.T) {
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	command := filepath.Join(dir, "server.sh")
	// The second start (the process for modern clients) takes 2 s.
	script := "#!/bin/sh\necho s >> " + mustJSONString(starts) + "\n" +
		"if [ $(wc -l < " + mustJSONString(starts) + ") -ge 2 ]; then sleep 2; fi\n" +
		"exec " + mustJSONString(conformanceServer(t)) + "\n"
	if err := os.WriteFile(command, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, `{"c":{"command":`+mustJSONString(command)+`,"prefix":"","requestTimeout":"500ms"}}`)
	legacy := w.stdioClient(w.gw.Aggregate(), nil)
	if _, err := legacy.CallTool(t.Context(), &mcp.CallToolParams{Name: "test_simple_text"}); err != nil {
		t.Fatal(err) // the primary is up: the server is dual-era
	}
	modern := w.modernClient(w.gw.Aggregate(), false, nil)
	t0 := time.Now()
	_, err := modern.CallTool(t.Context(), &mcp.CallToolParams{Name: "test_simple_text"})
	took := time.Since(t0)
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != rpc.RequestTimeout || !strings.Contains(werr.Message, "within 500ms") {
		t.Fatalf("a modern call while its process starts: %v", err)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("answered after %v, want at its timeout (500ms)", took)
	}
}
