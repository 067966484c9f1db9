// Command mcp-fixture is the MCP stdio server used by mcpvisor's tests and as
// its quick-start demo server. See package testserver for what it does.
package main

import (
	"os"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

func main() {
	os.Exit(testserver.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
