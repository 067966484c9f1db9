package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// ReplicasConfig is the top-level "replicas" object: mcpvisor as one of
// several replicas (a Kubernetes StatefulSet's pods, or processes named
// by a peers list) that forward to each other what one of them owns.
// nil: a single mcpvisor, as before.
type ReplicasConfig struct {
	// Count is the configured number of replicas: ordinals 0…Count−1.
	// Single-placement servers are placed over it.
	Count int
	// PeerAddress is a host:port template holding "{ordinal}" (the
	// StatefulSet's pods under its headless Service); Peers lists the
	// addresses by ordinal instead, at least Count of them. Exactly one
	// is set.
	PeerAddress string
	Peers       []string
	// PeerListen is where this replica's peer interface listens: mutual
	// TLS from the shared key, never a client's. "" (the default): the
	// port of this replica's own peer address, on that address when it
	// is an IP (a peers list on one host), else on every interface (a
	// pod's DNS name).
	PeerListen string
	// KeyDir holds the shared key: the file "current" signs, every other
	// file not starting with a dot is accepted too (a rotation).
	KeyDir string
	// OwnerTimeout bounds how long a forwarded request waits to reach
	// its owner — the connection and the TLS handshake — and a question
	// to a peer (its answer too): past it the owner is gone
	// (DefaultOwnerTimeout). A forwarded call then takes as long as its
	// owner takes to answer it, as it would there.
	OwnerTimeout time.Duration
	// DrainTimeout bounds how long a SIGTERM waits for the requests in
	// flight before it ends the legacy sessions (DefaultDrainTimeout).
	// DrainDelay is how long, within it, the replica goes on serving
	// while unready, for the balancer to take it out (DefaultDrainDelay).
	DrainTimeout, DrainDelay time.Duration
}

// Replica defaults.
const (
	DefaultOwnerTimeout = 2 * time.Second
	DefaultDrainTimeout = 30 * time.Second
	DefaultDrainDelay   = 5 * time.Second
	// MaxReplicas bounds the count (ordinals are small decimal numbers).
	MaxReplicas = 1000
)

// Placement of a server across replicas ("placement").
const (
	// PlacementEvery: each replica runs the server on demand (the default).
	PlacementEvery = "every"
	// PlacementOne: one process in the whole deployment, on the replica
	// the server's name hashes to; the others reach it through that one.
	PlacementOne = "one"
)

var replicasNames = []string{"count", "peerAddress", "peers", "peerListen", "keyDir", "ownerTimeout", "drainTimeout", "drainDelay"}

// replicas reads the top-level "replicas" object.
func (p *parser) replicas(v *node, at string) *ReplicasConfig {
	if v.kind == kindNull {
		return nil
	}
	r := &ReplicasConfig{OwnerTimeout: DefaultOwnerTimeout, DrainTimeout: DefaultDrainTimeout, DrainDelay: DefaultDrainDelay}
	p.secure(v, at, replicasNames, func(key string, v *node, kat string) bool {
		switch key {
		case "count":
			if n := p.integer(v, kat); n != nil {
				if *n < 1 || *n > MaxReplicas {
					p.errorf(kat, "%d is out of range (1 to %d replicas)", *n, MaxReplicas)
				} else {
					r.Count = *n
				}
			}
		case "peerAddress":
			if s, ok := p.str(v, kat); ok {
				s, _ = p.expand(s, kat, false)
				if !strings.Contains(s, "{ordinal}") {
					p.errorf(kat, "%q does not hold {ordinal}: each replica's address is the template with its ordinal", s)
				} else if err := checkListen(strings.ReplaceAll(s, "{ordinal}", "0")); err != nil {
					p.errorf(kat, "%q is not a host:port template: %v", s, err)
				} else {
					r.PeerAddress = s
				}
			}
		case "peers":
			if list, ok := p.strings(v, kat); ok {
				for i, s := range list {
					if err := checkListen(s); err != nil {
						p.errorf(index(kat, i), "%q is not a host:port address: %v", s, err)
					}
				}
				r.Peers = list
			}
		case "peerListen":
			if s, ok := p.str(v, kat); ok {
				if err := checkListen(s); err != nil {
					p.errorf(kat, "%q is not a listen address: %v", s, err)
				} else {
					r.PeerListen = s
				}
			}
		case "keyDir":
			if s, ok := p.str(v, kat); ok {
				s, _ = p.expand(s, kat, false)
				if s == "" {
					p.errorf(kat, "is empty")
				}
				r.KeyDir = s
			}
		case "ownerTimeout", "drainTimeout":
			if d := p.duration(v, kat); d != nil {
				switch {
				case *d <= 0:
					p.errorf(kat, "%v is not a positive duration", *d)
				case key == "ownerTimeout":
					r.OwnerTimeout = *d
				default:
					r.DrainTimeout = *d
				}
			}
		case "drainDelay":
			if d := p.duration(v, kat); d != nil {
				if *d < 0 {
					p.errorf(kat, "%v is negative", *d)
				} else {
					r.DrainDelay = *d
				}
			}
		default:
			return false
		}
		return true
	})
	if v.kind != kindObject {
		return nil
	}
	if r.Count == 0 && !p.hasErrorAt(0, at+".count") {
		p.errorf(at, "needs \"count\": the number of replicas (ordinals 0 to count-1)")
	}
	switch {
	case r.PeerAddress != "" && r.Peers != nil:
		p.errorf(at, "has both \"peerAddress\" and \"peers\": give the template or the list, not both")
	case r.PeerAddress == "" && r.Peers == nil:
		if !p.hasErrorAt(0, at+".peerAddress") && !p.hasErrorAt(0, at+".peers") {
			p.errorf(at, "needs \"peerAddress\" (a template holding {ordinal}) or \"peers\" (host:port by ordinal)")
		}
	case r.Peers != nil && r.Count > 0 && len(r.Peers) < r.Count:
		p.errorf(at+".peers", "lists %d addresses for a count of %d: one per ordinal (more are replicas beyond the count, while it grows or shrinks)", len(r.Peers), r.Count)
	}
	if r.DrainDelay > r.DrainTimeout {
		p.errorf(at+".drainDelay", "%v is longer than drainTimeout (%v), which bounds it", r.DrainDelay, r.DrainTimeout)
	}
	if r.KeyDir == "" && !p.hasErrorAt(0, at+".keyDir") {
		p.errorf(at, "needs \"keyDir\": the directory of the key the replicas share (a mounted Secret)")
	}
	return r
}

// ListenFor is where replica ordinal's peer interface listens.
// ("" when the peers list has no address for it).
func (r *ReplicasConfig) ListenFor(ordinal int) string {
	if r.PeerListen != "" {
		return r.PeerListen
	}
	host, port, err := net.SplitHostPort(r.PeerOf(ordinal))
	if err != nil {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return net.JoinHostPort(host, port)
	}
	return net.JoinHostPort("0.0.0.0", port)
}

// PeerOf is the peer address of ordinal i ("" when the peers list has
// none for it).
func (r *ReplicasConfig) PeerOf(i int) string {
	if r.Peers != nil {
		if i < 0 || i >= len(r.Peers) {
			return ""
		}
		return r.Peers[i]
	}
	return strings.ReplaceAll(r.PeerAddress, "{ordinal}", fmt.Sprint(i))
}

// checkReplicas checks what spans the replicas block and the servers.
func (p *parser) checkReplicas(cfg *Config) {
	for _, s := range cfg.Servers {
		if s.Placement != PlacementOne {
			continue
		}
		at := p.serversKey + "." + s.Name + ".placement"
		if s.Sharing != SharingShared {
			p.errorf(at, "%q with \"sharing\": %q: a session's or an identity's own instances live on the replica that owns the session, never in one place", PlacementOne, s.Sharing)
		}
		if cfg.Replicas == nil {
			p.warnf(at, "%q without \"replicas\": a single mcpvisor runs every server once anyway", PlacementOne)
		}
	}
}

// versionOf is a configuration's version: a digest of the bytes it was
// parsed from, short, the same on every replica that read the same file.
func versionOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}

// Via is how a replica that does not run a server placed on one replica
// reaches it: through the owner's peer interface.
type Via struct {
	// Ordinal is the owner's.
	Ordinal int
}

// ThroughPeer is s as a replica that is not its owner serves it: a remote
// server at url, the owner's endpoint for it on its peer interface, with
// s's settings. The owner applies s's launch, limits and pin; this
// replica its policy, audit and limits to its own clients' requests, and
// its name prefix and tool filter (which the owner's endpoint applied
// already: filtering twice is filtering once).
func (s *Server) ThroughPeer(ordinal int, url string) *Server {
	return &Server{
		Name: s.Name, Kind: KindHTTP, Transport: TransportStreamableHTTP, URL: url,
		Disabled: s.Disabled, Prefix: s.Prefix, Tools: s.Tools, Sharing: s.Sharing, Placement: s.Placement,
		ClientCapabilities: s.ClientCapabilities, Protocol: ProtocolAuto, MaxInstances: s.MaxInstances,
		IdleTimeout: s.IdleTimeout, StartGrace: s.StartGrace, InitTimeout: s.InitTimeout, RequestTimeout: s.RequestTimeout,
		StdinWait: s.StdinWait, TermWait: s.TermWait, Restart: s.Restart,
		Via: &Via{Ordinal: ordinal},
	}
}
