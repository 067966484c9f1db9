// Package config loads mcpvisor's configuration: a JSON file that is a
// superset of the "mcpServers" format desktop MCP clients use, so an
// existing Claude Desktop (or similar) config works as it is.
//
//	{
//	  "listen": "127.0.0.1:7331",          // default
//	  "stateDir": "${HOME}/.local/state/mcpvisor",
//	  "pageSize": 100,                      // aggregated lists in pages of 100; default 0: whole
//	  "maxSessions": 1000,                  // client sessions of the HTTP front (default)
//	  "holdTimeout": "5m",                  // a call held for a 2026-07-28 client's input (default)
//	  "defaults": { "idleTimeout": "3m", "restart": { "maxAttempts": 3 } },
//	  "mcpServers": {
//	    "files":  { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"],
//	                "env": { "NODE_OPTIONS": "--max-old-space-size=256" },
//	                "tools": { "deny": ["write_*"] } },
//	    "remote": { "url": "https://mcp.example.com/mcp",
//	                "headers": { "Authorization": "Bearer ${EXAMPLE_TOKEN}" } }
//	  }
//	}
//
// A server is local (command, args, env, cwd) or remote (url, headers);
// "type" or "transport" ("stdio", "http", "streamable-http", "sse") may say
// which and must agree with the fields. "disabled" keeps a server
// configured but off. Settings allowed both per server and in "defaults":
// idleTimeout, startGrace, initTimeout, requestTimeout, eager, pin (hold
// back new or changed tools until approved), prefix,
// tools {allow, deny}, sharing ("shared" | "per-session"),
// clientCapabilities (of "roots", "sampling", "elicitation": what mcpvisor
// may declare to the server; default all three), maxInstances
// (of a per-session server, default 32), stop {stdinWait,
// termWait}, restart {policy ("on-failure" | "never" | "always"),
// maxAttempts, backoff {initial, max, multiplier, jitter}, healthyPeriod},
// limits {memory, pids, cpu} and maxIdleMemory (see Limits):
//
//	"defaults": { "limits": { "memory": "512MiB", "pids": 256 }, "maxIdleMemory": "300MiB" },
//	"browser":  { "command": "npx", "args": ["@playwright/mcp"], "limits": { "memory": "1GiB", "cpu": 1.5 } }
//
// Sizes are a whole number of bytes or a string with a unit: B, KB, MB,
// GB, TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024), in any
// case; pids is a whole number of tasks, 1 or more; cpu a number of cores
// (0.01 or more). "unlimited" undoes a default for one server. Limits are
// each process tree's (every instance of a per-session server has its
// own) and a launch setting: a change restarts the server on reload;
// maxIdleMemory applies in place. A remote server has none (a warning).
//
// Durations are Go duration strings ("90s", "10m") or numbers of seconds;
// negative durations are errors and 0 disables (see Server). Layering, per
// field (nested restart, backoff and stop fields included): built-in
// defaults, then the environment variables EnvIdleTimeout and
// EnvStartGrace, then "defaults", then the server's own settings.
//
// ${VAR} and ${VAR:-default} (default when unset or empty) are expanded in
// command, args, env values, cwd, url, header values and stateDir; $$ is a
// literal $, and any other $ is kept. An unset variable without a default
// is an error (a warning for a disabled server).
//
// Parse collects every problem rather than stopping at the first, each
// naming the file, the JSON path and what is wrong:
//
//	config.json: mcpServers.files.idleTimeout: "10 minutes" is not a duration (use e.g. "90s" or "10m", or a number of seconds)
//	config.json:7:3: invalid character '}' looking for beginning of object key string
//
// Unknown fields are warnings (clients add fields of their own) unless
// LoadOptions.Strict, which makes every warning an error. null is the same
// as an absent field.
//
// Env and header values are secrets: nothing in this package prints them,
// and Server.Redacted shows a command line or URL with token-like values
// hidden.
package config
