package launch

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
	"strconv"
	"strings"
)

// Key identifies a launch for the cache of its resolution: a SHA-256
// (hex) over the command and its arguments, the env the server's config
// sets, the working directory it runs in (dir: its cwd, else mcpvisor's),
// and, of the environment it inherits from mcpvisor (inherited,
// "KEY=value"), what decides what npm or pnpm finds: PATH, HOME, their
// npm_config_* and pnpm_config_* variables (in any case), the XDG base
// directories pnpm keeps its cache, store and settings in, and NODE_PATH
// (pnpm's shim passes it on after its own). Any change of those is
// another key, so the resolution is redone. Values (secrets in env among
// them) are only hashed.
func Key(command string, args []string, env map[string]string, dir string, inherited []string) string {
	h := sha256.New()
	field(h, "mcpvisor launch resolution v1")
	field(h, command)
	field(h, strconv.Itoa(len(args)))
	for _, a := range args {
		field(h, a)
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	field(h, strconv.Itoa(len(keys)))
	for _, k := range keys {
		field(h, k)
		field(h, env[k])
	}
	field(h, dir)
	var from []string
	for _, kv := range inherited {
		k, _, _ := strings.Cut(kv, "=")
		lk := strings.ToLower(k)
		if k == "PATH" || k == "HOME" || strings.HasPrefix(lk, "npm_config_") || strings.HasPrefix(lk, "pnpm_config_") ||
			k == "XDG_CACHE_HOME" || k == "XDG_DATA_HOME" || k == "XDG_CONFIG_HOME" || k == "NODE_PATH" {
			from = append(from, kv)
		}
	}
	slices.Sort(from)
	field(h, strconv.Itoa(len(from)))
	for _, kv := range from {
		field(h, kv)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// field writes v, length first, so that no two lists of fields hash alike.
func field(h hash.Hash, v string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(v)))
	h.Write(n[:])
	h.Write([]byte(v))
}
