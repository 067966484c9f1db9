// Command mcpvisor supervises stdio MCP servers and serves them as one MCP endpoint.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

func main() {
	// mcpvisor re-executes itself as the init of each server's pid
	// namespace; that process never reaches the command line below.
	proc.RunShimIfRequested()
	os.Exit(exitCodeOf(newRootCmd().Execute()))
}

// exitCode ends the command with a code and no message of its own.
type exitCode = shutdown.ExitCode

// exitCodeOf prints err (unless it is only an exit code) and maps it to the
// documented exit codes: 2 for bad usage and invalid configuration, 1 for
// any other error.
func exitCodeOf(err error) int {
	if err == nil {
		return shutdown.ExitOK
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	fmt.Fprintln(os.Stderr, "mcpvisor:", err)
	var cerr *config.Error
	var uerr usageError
	if errors.As(err, &cerr) || errors.As(err, &uerr) || cobraUsage(err) {
		return shutdown.ExitUsage
	}
	return shutdown.ExitError
}

// cobraUsage recognises the usage errors cobra returns as plain errors.
func cobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "required flag", "unknown flag", "unknown shorthand flag", "accepts ", "invalid argument"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
