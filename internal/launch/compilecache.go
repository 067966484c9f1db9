package launch

// Node's module compile cache (Node 22.1 and later): with
// NODE_COMPILE_CACHE set to a directory, node keeps the V8 code of every
// CommonJS and ES module it compiles there, written when the process
// exits by itself, and the next start of the same files skips their
// compilation. npm turns it on for its own start (lib/cli.js), so the
// launcher as written gets it for npm but not for the server npm starts;
// a flattened start gets it for the server.
//
// The cache is keyed by node's version and each file's content: a node or
// a package updated in place compiles afresh. A node before 22.1 ignores
// the variable. Node never removes what it wrote: entries of a node
// version no longer run stay until removed by hand.
const (
	CompileCacheEnv        = "NODE_COMPILE_CACHE"
	DisableCompileCacheEnv = "NODE_DISABLE_COMPILE_CACHE"
)

// CompileCacheSetBy is the variable of a server's environment that
// decides what node does with its compile cache — NODE_COMPILE_CACHE or
// NODE_DISABLE_COMPILE_CACHE, set to any value —, or "" when neither is
// set; has says whether the environment sets a variable.
func CompileCacheSetBy(has func(key string) bool) string {
	for _, k := range []string{DisableCompileCacheEnv, CompileCacheEnv} {
		if has(k) {
			return k
		}
	}
	return ""
}
