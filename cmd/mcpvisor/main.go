// Command mcpvisor supervises stdio MCP servers and serves them as one MCP endpoint.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "mcpvisor:", err)
		os.Exit(exitUsage)
	}
}
