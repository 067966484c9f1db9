package clientcfg

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcpvisor/mcpvisor/internal/jsonc"
)

// SameLaunch reports whether a and b start the same server, whatever
// their names: the same command, args, env (in any order) and cwd, or the
// same url, headers and transport.
//
// An entry that ran mcp-remote, taken over as the remote server it
// reached (File.TakeOverMCPRemote), is the same as that server and as
// the launch of mcp-remote as written.
func SameLaunch(a, b *Server) bool {
	if sameLaunch(a, b) {
		return true
	}
	return a.launched != nil && sameLaunch(a.launched, b) || b.launched != nil && sameLaunch(a, b.launched)
}

func sameLaunch(a, b *Server) bool {
	if a.Remote() != b.Remote() {
		return false
	}
	if a.Remote() {
		return a.URL == b.URL && a.Transport == b.Transport && sameKVs(a.Headers, b.Headers)
	}
	return a.Command == b.Command && slices.Equal(a.Args, b.Args) && a.Cwd == b.Cwd && sameKVs(a.Env, b.Env)
}

func sameKVs(a, b []KV) bool {
	sorted := func(l []KV) []KV {
		l = slices.Clone(l)
		slices.SortFunc(l, func(x, y KV) int { return strings.Compare(x.Key, y.Key) })
		return l
	}
	return slices.Equal(sorted(a), sorted(b))
}

// IsConnect reports whether the entry launches mcpvisor connect, as
// install-client writes it: such an entry is never imported or taken
// over.
func (s *Server) IsConnect() bool {
	base := strings.ToLower(filepath.Base(strings.ReplaceAll(s.Command, `\`, "/")))
	base = strings.TrimSuffix(base, ".exe")
	return base == "mcpvisor" && len(s.Args) > 0 && s.Args[0] == "connect"
}

// Entry returns the server as an entry of mcpvisor's config.
func (s *Server) Entry() jsonc.Ordered {
	var e jsonc.Ordered
	kvs := func(l []KV) jsonc.Ordered {
		var o jsonc.Ordered
		for _, kv := range l {
			o = append(o, jsonc.Field{Key: kv.Key, Value: kv.Value})
		}
		return o
	}
	if s.Remote() {
		e = append(e, jsonc.Field{Key: "url", Value: s.URL})
		if s.Transport == TransportSSE {
			e = append(e, jsonc.Field{Key: "type", Value: "sse"})
		}
		if len(s.Headers) > 0 {
			e = append(e, jsonc.Field{Key: "headers", Value: kvs(s.Headers)})
		}
		if o := s.OAuth.entry(); len(o) > 0 {
			e = append(e, jsonc.Field{Key: "oauth", Value: o})
		}
	} else {
		e = append(e, jsonc.Field{Key: "command", Value: s.Command})
		if len(s.Args) > 0 {
			e = append(e, jsonc.Field{Key: "args", Value: s.Args})
		}
		if len(s.Env) > 0 {
			e = append(e, jsonc.Field{Key: "env", Value: kvs(s.Env)})
		}
		if s.Cwd != "" {
			e = append(e, jsonc.Field{Key: "cwd", Value: s.Cwd})
		}
	}
	if s.Disabled {
		e = append(e, jsonc.Field{Key: "disabled", Value: true})
	}
	if s.Tools != nil && (s.Tools.Allow != nil || len(s.Tools.Deny) > 0) {
		e = append(e, jsonc.Field{Key: "tools", Value: s.Tools.entry()})
	}
	if s.InitTimeout != "" {
		e = append(e, jsonc.Field{Key: "initTimeout", Value: s.InitTimeout})
	}
	if s.RequestTimeout != "" {
		e = append(e, jsonc.Field{Key: "requestTimeout", Value: s.RequestTimeout})
	}
	return e
}

// InstallOptions say how install-client rewrites a client's file.
type InstallOptions struct {
	// Exe is the absolute path of the mcpvisor executable to launch.
	Exe string
	// Config is the absolute path of mcpvisor's config, passed to connect.
	Config string
	// StateDir, when set, is passed to connect as --state-dir: the
	// daemon's, as a client's environment may not say it (a config that
	// sets its own stateDir needs none).
	StateDir string
	// PerServer writes one connect entry per server, named as the
	// client's entry, instead of one "mcpvisor" entry for all.
	PerServer bool
	// KeepRemote leaves the client's remote entries (url) as they are;
	// by default they are taken over as the local ones (they must then
	// be in mcpvisor's config).
	KeepRemote bool
	// Launchers reads package launchers' command lines, to take over an
	// entry that runs mcp-remote as the remote server it reaches (see
	// File.TakeOverMCPRemote): nil for none.
	Launchers LaunchParser
	// Known are the servers of mcpvisor's config.
	Known []*Server
	// Secrets reads the secrets Known's ${keyring:NAME} references name,
	// to tell whether an entry holding literal secrets is one of them
	// (see SameServer): nil, it never is.
	Secrets SecretLookup
	// Project is the project directory the file belongs to ("" for a
	// user's file, see ProjectDir): its servers run there.
	Project string
}

// EntryName is the name of the one entry install-client writes.
const EntryName = "mcpvisor"

// Plan is what install-client would do to a client's file.
type Plan struct {
	// Data is the file's new content.
	Data []byte
	// Taken are the client's entries now launched through mcpvisor.
	Taken []string
	// Kept are the entries left as they were, with why.
	Kept []Note
	// Dropped are fields of taken entries the client applied to the
	// server and no longer does (one entry for all servers has no place
	// for them), with what applies instead.
	Dropped []Note
	// Missing are the client's servers that mcpvisor's config lacks:
	// the plan is not to be carried out while there are any.
	Missing []*Server
	// Notes are what the user is told of the taken entries: how they
	// were carried over, and the servers mcpvisor now signs in to
	// (mcpvisor login NAME), named as in mcpvisor's config.
	Notes []Note
}

// PlanInstall works out the new content of a client's file of format f
// (its user configuration when f is FormatClaudeUser: the top-level
// "mcpServers"), which holds data (nil for a file that does not exist).
func (c *Client) PlanInstall(data []byte, f Format, opts InstallOptions) (*Plan, error) {
	if f == FormatVSCodeSettings {
		return nil, fmt.Errorf("VS Code's settings.json is read only (VS Code moves its servers to mcp.json): install into mcp.json")
	}
	exists := data != nil
	if !exists {
		if f == FormatCodex {
			data = []byte{}
		} else {
			data = []byte("{}\n")
		}
	}
	file, err := c.ReadIn(data, f, opts.Project)
	if err != nil {
		return nil, err
	}
	if len(file.Problems) > 0 {
		return nil, fmt.Errorf("%s (fix the file first)", file.Problems[0])
	}
	if opts.Launchers != nil {
		file.TakeOverMCPRemote(opts.Launchers)
	}
	key := f.serversKey()
	plan := &Plan{}
	type take struct {
		entry string
		as    string // mcpvisor's server
		off   bool
		keep  []rawField // the client's own fields, kept per server
	}
	var takes []take
	for _, s := range file.Servers {
		if f == FormatClaudeUser && s.At != join(key, s.Name) {
			continue // a project's local server: edited by hand, or from its own .mcp.json
		}
		switch {
		case s.IsConnect():
			plan.Kept = append(plan.Kept, Note{s.At, "launches mcpvisor connect already"})
			continue
		case s.LeftToClient() != "":
			plan.Kept = append(plan.Kept, Note{s.At, "left to the client: " + s.LeftToClient()})
			continue
		case s.Remote() && opts.KeepRemote:
			plan.Kept = append(plan.Kept, Note{s.At, "remote: left to the client (--remote=false)"})
			continue
		}
		// mcpvisor's server must filter the tools as the client did; an
		// entry per server keeps the client's own filter, which then
		// applies on top of mcpvisor's.
		i := slices.IndexFunc(opts.Known, func(k *Server) bool { return SameServer(k, s, opts.Secrets) && SameTools(k.Tools, s.Tools) })
		if i < 0 && opts.PerServer {
			i = slices.IndexFunc(opts.Known, func(k *Server) bool { return SameServer(k, s, opts.Secrets) })
		}
		if i < 0 {
			plan.Missing = append(plan.Missing, s)
			continue
		}
		t := take{entry: s.Name, as: opts.Known[i].Name, off: s.Disabled}
		for _, r := range s.clientSide {
			if opts.PerServer {
				t.keep = append(t.keep, r)
				continue
			}
			switch r.Key {
			case "enabled_tools", "disabled_tools": // mcpvisor's server has them
				continue
			}
			plan.Dropped = append(plan.Dropped, Note{join(s.At, r.Key), fmt.Sprintf("the one %q entry has no place for it: mcpvisor's settings of %q apply instead (import maps the client's timeouts to them; --per-server keeps it)", EntryName, t.as)})
		}
		takes = append(takes, t)
		plan.Taken = append(plan.Taken, s.Name)
		plan.Notes = append(plan.Notes, s.Notes...)
		if s.Login {
			plan.Notes = append(plan.Notes, Note{s.At, fmt.Sprintf("mcpvisor signs in to it now, not the client: log in with `mcpvisor login %s` when it asks", t.as)})
		}
	}
	if len(plan.Missing) > 0 {
		return plan, nil
	}
	connect := func(server string) []string {
		a := []string{"connect"}
		if server != "" {
			a = append(a, "--server", server)
		}
		a = append(a, "--config", opts.Config)
		if opts.StateDir != "" {
			a = append(a, "--state-dir", opts.StateDir)
		}
		return a
	}
	entry := func(server string, off bool, keep []rawField) jsonc.Ordered {
		var e jsonc.Ordered
		if f == FormatVSCode {
			e = append(e, jsonc.Field{Key: "type", Value: "stdio"})
		}
		e = append(e, jsonc.Field{Key: "command", Value: opts.Exe}, jsonc.Field{Key: "args", Value: connect(server)})
		if off {
			if f == FormatZed {
				e = append(e, jsonc.Field{Key: "enabled", Value: false})
			} else {
				e = append(e, jsonc.Field{Key: "disabled", Value: true})
			}
		}
		for _, r := range keep {
			e = append(e, jsonc.Field{Key: r.Key, Value: r.JSON})
		}
		return e
	}
	if !opts.PerServer {
		if s := file.Server(EntryName); s != nil && !slices.ContainsFunc(takes, func(t take) bool { return t.entry == EntryName }) && !s.IsConnect() {
			return nil, fmt.Errorf("%s: the client has an entry named %q that is not mcpvisor's; rename it first", s.At, EntryName)
		}
	}
	out := data
	if f == FormatCodex {
		for _, t := range takes {
			text := ""
			if opts.PerServer {
				text = codexTable(t.entry, opts.Exe, connect(t.as), !t.off, t.keep)
			}
			if out, err = codexReplace(out, t.entry, text); err != nil {
				return nil, err
			}
		}
		if !opts.PerServer {
			if out, err = codexReplace(out, EntryName, codexTable(EntryName, opts.Exe, connect(""), true, nil)); err != nil {
				return nil, err
			}
		}
		plan.Data = out
		return plan, nil
	}
	path := []string{key}
	for _, t := range takes {
		if opts.PerServer {
			out, err = jsonc.SetMember(out, path, t.entry, entry(t.as, t.off, t.keep))
		} else {
			out, err = jsonc.RemoveMember(out, path, t.entry)
		}
		if err != nil {
			return nil, err
		}
	}
	if !opts.PerServer {
		if out, err = jsonc.SetMember(out, path, EntryName, entry("", false, nil)); err != nil {
			return nil, err
		}
	}
	plan.Data = out
	return plan, nil
}
