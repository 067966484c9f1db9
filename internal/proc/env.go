package proc

import (
	"os"
	"slices"
	"strings"
)

// ownEnvPrefix starts the name of every environment variable that belongs
// to mcpvisor itself rather than to the servers it runs.
const ownEnvPrefix = "MCPVISOR_"

// Environ is mcpvisor's environment (os.Environ) without mcpvisor's own
// variables: every variable whose name starts with "MCPVISOR_" (matched
// case-sensitively), such as its API token MCPVISOR_TOKEN, its settings,
// or the TreeEnv it carries when it is itself a server of another
// mcpvisor. It is what a server inherits when its Spec.Env is nil, and
// what the pid-namespace init and its probe start from (plus the variables
// of their protocol; see package shim). Code that builds a server's
// environment from mcpvisor's should start from Environ, not os.Environ:
// an explicit Spec.Env is used as given.
func Environ() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, ownEnvPrefix) })
}
