//go:build !linux

package shim

import (
	"fmt"
	"os"
)

// Main fails outside Linux, which has no pid namespaces: mcpvisor never
// starts the shim there.
func Main([]string) int {
	fmt.Fprintln(os.Stderr, Name+": pid namespaces exist only on Linux")
	return 125
}
