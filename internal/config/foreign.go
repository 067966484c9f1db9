package config

import (
	"bytes"
	"errors"
	"slices"
	"strings"

	"github.com/mcpvisor/mcpvisor/internal/clientcfg"
)

// A configuration may also be a client's own file: VS Code's mcp.json
// (top-level "servers"), Zed's settings.json ("context_servers") or
// Codex's config.toml (a .toml file, tables [mcp_servers.NAME]). Their
// servers are served as mcpServers entries would be, Codex's tool
// filters and timeouts as tools, requestTimeout and initTimeout; what of
// an entry mcpvisor does not need is a warning naming the field, and a
// server that cannot run without the client (a value the client prompts
// for, a Zed extension) or that the client restricts in ways mcpvisor
// cannot (VS Code's envFile or sandbox, Codex's env_vars) is left out
// with a warning. The files' other settings are the
// client's and are not read.

// foreignFormat returns the client format of a decoded document that is
// not mcpvisor's own, if it is one.
func foreignFormat(root *node) (clientcfg.Format, bool) {
	if root == nil || root.kind != kindObject {
		return 0, false
	}
	has := func(k string) bool { return slices.Contains(root.keys, k) }
	switch {
	case has("mcpServers"):
		return 0, false
	case has("servers"):
		return clientcfg.FormatVSCode, true
	case has("context_servers"):
		return clientcfg.FormatZed, true
	}
	return 0, false
}

// looksForeign guesses, for a file that does not parse, whether it is
// a JSONC client file (a "servers" or "context_servers" key, no
// "mcpServers"), whose syntax errors are told past its comments.
func looksForeign(data []byte) bool {
	has := func(k string) bool { return bytes.Contains(data, []byte(`"`+k+`"`)) }
	return !has("mcpServers") && (has("servers") || has("context_servers"))
}

// isTOML reports whether a file named name is read as TOML.
func isTOML(name string) bool { return strings.HasSuffix(strings.ToLower(name), ".toml") }

// foreign reads a client's file into a document of mcpServers-like
// entries under the client's own key, for p.config; problems and
// warnings name the client's fields.
func (p *parser) foreign(data []byte, f clientcfg.Format) (*node, *Problem) {
	file, err := clientcfg.Read(data, f)
	if err != nil {
		var ce *clientcfg.Error
		if errors.As(err, &ce) {
			return nil, &Problem{File: p.file, Line: ce.Line, Column: ce.Column, Message: ce.Msg}
		}
		return nil, &Problem{File: p.file, Message: err.Error()}
	}
	key := map[clientcfg.Format]string{clientcfg.FormatVSCode: "servers", clientcfg.FormatZed: "context_servers", clientcfg.FormatCodex: "mcp_servers"}[f]
	p.serversKey = key
	p.paths = map[string]string{}
	for _, pr := range file.Problems {
		p.errorf(pr.At, "%s", pr.Msg)
	}
	servers := &node{kind: kindObject}
	for _, s := range file.Servers {
		for _, n := range s.Unsupported {
			p.warnf(n.At, "%s", n.Msg)
		}
		if s.Blocked != "" {
			if !strings.HasPrefix(s.Blocked, "invalid: ") {
				p.warnf(s.At, "not served: %s", s.Blocked)
			}
			continue
		}
		if len(s.ClientOnly) > 0 {
			// fields that change what the server may do or see: served
			// without them, it would do or see more than the client let it
			p.warnf(s.At, "not served (the client's to run): %s", s.LeftToClient())
			continue
		}
		e := &node{kind: kindObject}
		add := func(k string, v *node) {
			e.keys = append(e.keys, k)
			e.vals = append(e.vals, v)
			if real := s.FieldPath(k); real != join(join(key, s.Name), k) {
				p.paths[join(join(key, s.Name), k)] = real
			}
		}
		str := func(s string) *node { return &node{kind: kindString, str: s} }
		strs := func(l []string) *node {
			a := &node{kind: kindArray}
			for _, x := range l {
				a.vals = append(a.vals, str(x))
			}
			return a
		}
		kvs := func(l []clientcfg.KV) *node {
			o := &node{kind: kindObject}
			for _, kv := range l {
				o.keys = append(o.keys, kv.Key)
				o.vals = append(o.vals, str(kv.Value))
			}
			return o
		}
		if s.Remote() {
			add("url", str(s.URL))
			if s.Transport == clientcfg.TransportSSE {
				add("type", str("sse"))
			}
			if len(s.Headers) > 0 {
				add("headers", kvs(s.Headers))
			}
		} else {
			add("command", str(s.Command))
			if s.Args != nil {
				add("args", strs(s.Args))
			}
			if len(s.Env) > 0 {
				add("env", kvs(s.Env))
			}
			if s.Cwd != "" {
				add("cwd", str(s.Cwd))
			}
		}
		if s.Disabled {
			add("disabled", &node{kind: kindBool, b: true})
		}
		if s.Tools != nil {
			t := &node{kind: kindObject}
			if s.Tools.Allow != nil {
				t.keys, t.vals = append(t.keys, "allow"), append(t.vals, strs(s.Tools.Allow))
			}
			if s.Tools.Deny != nil {
				t.keys, t.vals = append(t.keys, "deny"), append(t.vals, strs(s.Tools.Deny))
			}
			add("tools", t)
		}
		if s.InitTimeout != "" {
			add("initTimeout", str(s.InitTimeout))
		}
		if s.RequestTimeout != "" {
			add("requestTimeout", str(s.RequestTimeout))
		}
		servers.keys = append(servers.keys, s.Name)
		servers.vals = append(servers.vals, e)
	}
	return &node{kind: kindObject, keys: []string{key}, vals: []*node{servers}}, nil
}

// mapPath turns a path of the document foreign made into the path of the
// field in the client's file.
func (p *parser) mapPath(at string) string {
	for from, to := range p.paths {
		if rest, ok := strings.CutPrefix(at, from); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			return to + rest
		}
	}
	return at
}
