// Command conformance-client is the client the MCP conformance suite
// launches in client mode to test mcpvisor as the client of its servers:
// it runs `mcpvisor serve` in front of the scenario's server and makes the
// scenario's calls through it. See package confclient.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcpvisor/mcpvisor/internal/testserver/confclient"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := confclient.Main(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}
