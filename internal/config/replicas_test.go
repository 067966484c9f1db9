package config

import (
	"strings"
	"testing"
	"time"
)

func TestReplicasBlock(t *testing.T) {
	cfg := mustParse(t, `{"replicas": {"count": 3, "peerAddress": "mcpvisor-{ordinal}.peers.ns.svc:7332", "keyDir": "/etc/k", "ownerTimeout": "1s"},
	  "defaults": {"placement": "one"},
	  "mcpServers": {"memory": {"command": "x"}, "files": {"command": "y", "placement": "every"}}}`, LoadOptions{})
	r := cfg.Replicas
	if r == nil || r.Count != 3 || r.ListenFor(1) != "0.0.0.0:7332" || r.KeyDir != "/etc/k" || r.OwnerTimeout != time.Second || r.DrainTimeout != DefaultDrainTimeout {
		t.Fatalf("replicas = %+v", r)
	}
	if got := r.PeerOf(2); got != "mcpvisor-2.peers.ns.svc:7332" {
		t.Errorf("PeerOf(2) = %q", got)
	}
	if cfg.Server("memory").Placement != PlacementOne || cfg.Server("files").Placement != PlacementEvery {
		t.Errorf("placements: memory %q, files %q", cfg.Server("memory").Placement, cfg.Server("files").Placement)
	}
	list := mustParse(t, `{"replicas": {"count": 2, "peers": ["127.0.0.1:9001", "127.0.0.1:9002"], "keyDir": "/k"}, "mcpServers": {"a": {"command": "x"}}}`, LoadOptions{})
	if list.Replicas.PeerOf(1) != "127.0.0.1:9002" || list.Replicas.ListenFor(1) != "127.0.0.1:9002" {
		t.Errorf("PeerOf(1) = %q, ListenFor(1) = %q", list.Replicas.PeerOf(1), list.Replicas.ListenFor(1))
	}
	// Without the block nothing changes: every server on every replica.
	plain := mustParse(t, `{"mcpServers": {"a": {"command": "x"}}}`, LoadOptions{})
	if plain.Replicas != nil || plain.Server("a").Placement != PlacementEvery {
		t.Errorf("no replicas block: %+v, placement %q", plain.Replicas, plain.Server("a").Placement)
	}
	// The version is the file's: the same bytes, the same version.
	again := mustParse(t, `{"mcpServers": {"a": {"command": "x"}}}`, LoadOptions{})
	other := mustParse(t, `{"mcpServers": {"a": {"command": "z"}}}`, LoadOptions{})
	if plain.Version == "" || plain.Version != again.Version || plain.Version == other.Version {
		t.Errorf("versions: %q, %q, %q", plain.Version, again.Version, other.Version)
	}
}

func TestReplicasErrors(t *testing.T) {
	const srv = `"mcpServers": {"a": {"command": "x"}}`
	tests := []struct{ name, json, path, want string }{
		{"no count", `{"replicas": {"peers": ["h:1"], "keyDir": "/k"}, ` + srv + `}`, "replicas", `needs "count"`},
		{"zero count", `{"replicas": {"count": 0, "peers": [], "keyDir": "/k"}, ` + srv + `}`, "replicas.count", "out of range"},
		{"no peers", `{"replicas": {"count": 2, "keyDir": "/k"}, ` + srv + `}`, "replicas", `needs "peerAddress"`},
		{"both peer forms", `{"replicas": {"count": 1, "peers": ["h:1"], "peerAddress": "h-{ordinal}:1", "keyDir": "/k"}, ` + srv + `}`, "replicas", "not both"},
		{"template without ordinal", `{"replicas": {"count": 1, "peerAddress": "h:1", "keyDir": "/k"}, ` + srv + `}`, "replicas.peerAddress", "does not hold {ordinal}"},
		{"template without port", `{"replicas": {"count": 1, "peerAddress": "h-{ordinal}", "keyDir": "/k"}, ` + srv + `}`, "replicas.peerAddress", "not a host:port template"},
		{"fewer peers than the count", `{"replicas": {"count": 3, "peers": ["h:1", "h:2"], "keyDir": "/k"}, ` + srv + `}`, "replicas.peers", "2 addresses for a count of 3"},
		{"bad peer", `{"replicas": {"count": 1, "peers": ["nohost"], "keyDir": "/k"}, ` + srv + `}`, "replicas.peers[0]", "not a host:port"},
		{"no key", `{"replicas": {"count": 1, "peers": ["h:1"]}, ` + srv + `}`, "replicas", `needs "keyDir"`},
		{"unknown field", `{"replicas": {"count": 1, "peers": ["h:1"], "keyDir": "/k", "key": "x"}, ` + srv + `}`, "replicas.key", "unknown field: refused"},
		{"bad placement", `{"mcpServers": {"a": {"command": "x", "placement": "single"}}}`, "mcpServers.a.placement", `"single" is not a placement`},
		{"one per session", `{"mcpServers": {"a": {"command": "x", "placement": "one", "sharing": "per-session"}}}`, "mcpServers.a.placement", "live on the replica that owns the session"},
		{"negative owner timeout", `{"replicas": {"count": 1, "peers": ["h:1"], "keyDir": "/k", "ownerTimeout": "-1s"}, ` + srv + `}`, "replicas.ownerTimeout", "is negative"},
		{"negative drain delay", `{"replicas": {"count": 1, "peers": ["h:1"], "keyDir": "/k", "drainDelay": "-1s"}, ` + srv + `}`, "replicas.drainDelay", "is negative"},
		{"zero drain", `{"replicas": {"count": 1, "peers": ["h:1"], "keyDir": "/k", "drainTimeout": "0s"}, ` + srv + `}`, "replicas.drainTimeout", "not a positive duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := parseErr(t, tt.json, LoadOptions{})
			for _, p := range e.Problems {
				if p.Path == tt.path && strings.Contains(p.Message, tt.want) {
					return
				}
			}
			t.Errorf("no problem at %q containing %q; got:\n%v", tt.path, tt.want, e)
		})
	}
}
