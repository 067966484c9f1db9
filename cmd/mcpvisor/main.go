// Command mcpvisor supervises stdio MCP servers and serves them as one MCP endpoint.
package main

import (
	"fmt"
	"os"

	"github.com/mcpvisor/mcpvisor/internal/proc"
)

func main() {
	// mcpvisor re-executes itself as the init of each server's pid
	// namespace; that process never reaches the command line below.
	proc.RunShimIfRequested()
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "mcpvisor:", err)
		os.Exit(exitUsage)
	}
}
