package admin

// Replicas is GET /api/replicas of a replica (the config's "replicas"):
// every replica of the deployment as it answers its peers, by ordinal,
// with the servers each runs a process of. A serve that is no replica
// answers none (Self -1).
type Replicas struct {
	// Self is the ordinal of the replica that answered.
	Self     int       `json:"self"`
	Replicas []Replica `json:"replicas"`
}

// Replica is one replica of the deployment.
type Replica struct {
	Ordinal int    `json:"ordinal"`
	Address string `json:"address"`
	// Reachable is false when it did not answer (Error says why).
	Reachable   bool   `json:"reachable"`
	Error       string `json:"error,omitempty"`
	Incarnation string `json:"incarnation,omitempty"`
	// ConfigVersion is a digest of the config it runs: replicas that
	// differ are between two reloads.
	ConfigVersion string `json:"configVersion,omitempty"`
	// Ready is "ok", else why it is not.
	Ready string `json:"ready,omitempty"`
	// Key is the id of the key it signs with, Accepted those it accepts
	// (a rotation's step is done when every replica shows it).
	Key      string   `json:"key,omitempty"`
	Accepted []string `json:"accepted,omitempty"`
	// Servers are the servers it runs a process of: how many.
	Servers map[string]int `json:"servers,omitempty"`
	// Forwarded, Received and Gone count the requests it forwarded to
	// their owner, served for a peer, and answered as their owner's
	// being gone; PeerConnections the connections peers opened to it.
	Forwarded       uint64 `json:"forwarded"`
	Received        uint64 `json:"received"`
	Gone            uint64 `json:"gone"`
	PeerConnections uint64 `json:"peerConnections"`
	// AuditKept counts the audit lines of requests served for a peer
	// that the peer, whose audit takes them, did not take (its link
	// ended, its audit was full or gone): written here instead.
	AuditKept uint64 `json:"auditKept,omitempty"`
}
