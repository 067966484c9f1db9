package config

import "github.com/mcpvisor/mcpvisor/internal/secret"

// expansion is the result of expanding one string.
type expansion struct {
	value   string
	missing []string // variables referenced without a default and not set
}

// expand replaces ${VAR}, ${VAR:-default} and ${env:VAR} in s with values
// from lookup and $$ with a literal $, for the fields expanded when the
// configuration loads (command, cwd, url, stateDir). A $ followed by
// anything else is kept as it is. ${VAR:-default} uses default when VAR
// is unset or empty; the default may itself contain references. An unset
// variable without a default is listed in missing (and expands to "").
// Malformed references, and file or keyring ones, are an error.
func expand(s string, lookup func(string) (string, bool)) (expansion, error) {
	v, missing, err := secret.ExpandEnv(s, lookup)
	return expansion{value: v, missing: missing}, err
}
