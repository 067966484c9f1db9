package admin

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Detail is the body of GET /api/servers/{name}: what GET /api/servers
// says of the server, and how it is configured and what is known of it.
type Detail struct {
	fleet.Status
	// Launch is the command line (stdio) or URL (http), secrets
	// redacted (config.Server.Redacted).
	Launch string `json:"launch"`
	// EnvNames and HeaderNames name the variables and headers the config
	// sets; their values are never shown.
	EnvNames    []string `json:"envNames,omitempty"`
	HeaderNames []string `json:"headerNames,omitempty"`
	// References are the secret references of its env, args, headers and
	// oauth settings, as written ("env.TOKEN: ${keyring:github-token}"):
	// never their values.
	References []string `json:"references,omitempty"`
	// SecretStore names where its ${keyring:} references and its OAuth
	// tokens are kept (the OS keyring, or the 0600 file), for a server
	// that has either.
	SecretStore string `json:"secretStore,omitempty"`
	Kind        string `json:"kind"`     // stdio or http
	Sharing     string `json:"sharing"`  // shared or per-session
	Protocol    string `json:"protocol"` // as configured: auto, legacy or modern
	// Declares is what mcpvisor declares to the server as its client, of
	// the capabilities it carries (fleet.Server.DeclaredCapabilities): to
	// a shared instance of a legacy-era server, this; to a session's own
	// instance, or in a modern-era server's requests, those of this the
	// client declared.
	Declares json.RawMessage `json:"declares"`
	// Status.Era is the protocol version the server speaks (its live
	// connection's, else the one it spoke when its lists were learned),
	// "" if unknown.
	ServerInfo json.RawMessage `json:"serverInfo,omitempty"`
	// Lists counts the server's tools, prompts, resources and resource
	// templates as cached (tools after the config's tool filter); a kind
	// never learned is absent.
	Lists map[string]int `json:"lists"`
	// HeldCalls counts the calls held for a modern client's retry.
	HeldCalls int `json:"heldCalls"`
	// History is the server's last ends — failed starts and processes
	// that ended unasked — with their stage, exit status and last stderr
	// lines, oldest first.
	History []fleet.Exit `json:"history,omitempty"`
	// Stderr is the last lines the server wrote to stderr (kept across
	// its restarts; secrets redacted as each was captured, with the
	// config of the launch that wrote it).
	Stderr []logbuf.Entry `json:"stderr,omitempty"`
	// Containment lists, for a stdio server, the containment layers its
	// processes run under (proc.Runtime.Report): the active ones with what
	// each does, the others with why they are off. Empty for an http
	// server, which NoLocalProcess then explains.
	Containment []proc.Layer `json:"containment"`
	// NoLocalProcess, set for an http server, says why it has no
	// containment: mcpvisor runs no process of it.
	NoLocalProcess string `json:"noLocalProcess,omitempty"`
	// Instances are the server's instances: the shared one first, then,
	// for a per-session server, one per client session (by the session
	// key events and logs use).
	Instances []fleet.InstanceStatus `json:"instances"`
	// Definitions: the pin setting, when the server's definitions last
	// changed, and the tools it holds back until approved.
	Definitions *DefinitionsInfo `json:"definitions"`
}

// noLocalProcess is Detail.NoLocalProcess of an http server.
const noLocalProcess = "no local process to contain: an http server runs elsewhere"

// detailStderr is how many stderr lines the detail carries.
const detailStderr = 10

// Tools is the body of GET /api/servers/{name}/tools: the server's tools
// as clients of /servers/{name}/mcp see them (the config's tool filter
// applied), from the cache — a dormant server is not woken for them.
type Tools struct {
	Server string `json:"server"`
	// Learned is false when the server's tools were never learned (it
	// never started): Tools is then empty, and says nothing of the
	// server.
	Learned bool              `json:"learned"`
	Tools   []json.RawMessage `json:"tools"`
	// Held names the tools a pinned server holds back until approved
	// (not in Tools: clients do not see them).
	Held []string `json:"held,omitempty"`
}

// server is the fleet's server named by the request's {name}, or nil
// after a 404 that says so (NoSuchServer).
func (h *Handler) server(w http.ResponseWriter, r *http.Request) *fleet.Server {
	name := r.PathValue("name")
	if s := h.f.Get(name); s != nil {
		return s
	}
	h.writeStatusJSON(w, http.StatusNotFound, map[string]string{"error": NoSuchServer(h.f, name)})
	return nil
}

// NoSuchServer is the message for a name f has no server of: it names the
// servers there are.
func NoSuchServer(f *fleet.Fleet, name string) string {
	var names []string
	for _, s := range f.Servers() {
		names = append(names, s.Name())
	}
	msg := "no server named " + strconv.Quote(name)
	if len(names) > 0 {
		msg += "; configured: " + strings.Join(names, ", ")
	}
	return msg
}

func (h *Handler) detail(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	cfg := s.Config()
	more := s.Detail()
	d := Detail{
		Status:      s.Status(),
		Launch:      cfg.Redacted(),
		EnvNames:    slices.Sorted(maps.Keys(cfg.Env)),
		HeaderNames: slices.Sorted(maps.Keys(cfg.Headers)),
		Kind:        cfg.Kind,
		Sharing:     cfg.Sharing,
		Protocol:    cfg.Protocol,
		Declares:    fleet.DeclaredCapabilities(cfg),
		ServerInfo:  s.Catalog().ServerInfo(),
		Lists:       map[string]int{},
		Containment: []proc.Layer{},
		Instances:   more.Instances,
		Definitions: definitionsInfo(s),
		References:  cfg.References(),
	}
	if st := h.f.SecretStore(); st != nil && (d.Status.OAuth != nil || slices.ContainsFunc(d.References, func(r string) bool { return strings.Contains(r, "${keyring:") })) {
		d.SecretStore = st.Backend()
	}
	switch {
	case cfg.Kind != config.KindStdio:
		d.NoLocalProcess = noLocalProcess
	case h.opts.Containment != nil:
		d.Containment = slices.Clone(h.opts.Containment)
	}
	setUsage(&d.Status, treeUsage(s))
	if h.opts.Clients != nil {
		d.Status.Clients = h.opts.Clients(s)
	}
	for _, k := range []catalog.ListKind{catalog.Tools, catalog.Prompts, catalog.Resources, catalog.Templates} {
		if items, ok := s.Catalog().CachedList(k); ok {
			if k == catalog.Tools {
				items = allowedTools(cfg, items)
			}
			d.Lists[k.Member] = len(items)
		}
	}
	if h.opts.HeldCalls != nil {
		d.HeldCalls = h.opts.HeldCalls()[s.Name()]
	}
	d.History = more.History
	if h.opts.Logs != nil {
		if b := h.opts.Logs(s.Name()); b != nil {
			// As kept: the fleet redacted each line as it was
			// captured, with its launch's config (not cfg, which a
			// reload may have changed since).
			d.Stderr = b.Tail(detailStderr).Entries
		}
	}
	h.writeJSON(w, d)
}

func (h *Handler) tools(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	items, ok := s.Catalog().CachedList(catalog.Tools)
	t := Tools{Server: s.Name(), Learned: ok}
	for _, it := range allowedTools(s.Config(), items) {
		if s.Catalog().ToolVisible(it) {
			t.Tools = append(t.Tools, it)
		} else if name, _ := rpc.StringMember(it, "name"); name != "" {
			t.Held = append(t.Held, name)
		}
	}
	if t.Tools == nil {
		t.Tools = []json.RawMessage{}
	}
	h.writeJSON(w, t)
}

// allowedTools is items without the tools the config's filter hides.
func allowedTools(cfg *config.Server, items []json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	for _, t := range items {
		if name, _ := rpc.StringMember(t, "name"); cfg.Tools.Allowed(name) {
			out = append(out, t)
		}
	}
	return out
}

// treeUsage is what s's running process trees use (Linux; zero
// elsewhere).
func treeUsage(s *fleet.Server) proc.Usage {
	usage, _ := proc.TreeUsage(s.Roots())
	var u proc.Usage
	for _, x := range usage {
		u.Add(x)
	}
	return u
}
