package fleet

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/secret"
)

// A per-identity server ("sharing": "per-identity") serves each identity
// from an instance of its own — its own process for a stdio server —,
// shared by all that identity's sessions and requests: the identity's
// instance, in Server.perSession under the key identityPrefix + its
// identity key (InstanceKey), which no client session's key is. Like a
// session's own instance it is bounded by maxInstances and is nobody's
// list cache (the shared instance, key "", learns the lists, as the
// anonymous identity); unlike one it does not end with a session
// (DetachSession does not know its key): it ends when it has been idle
// for the server's idleTimeout (releaseIdentity), and with the server
// (a stop, a restart, a reload that changes or removes it). Its env,
// args and headers resolve ${identity.sub}, ${identity.key} and
// ${keyring:NAME@identity} as its identity (secret.Identity).

// identityPrefix starts the instance key of an identity's instance.
const identityPrefix = "identity/"

// AnonymousIdentity is the identity key of requests that carry no
// verified identity: they share one instance of a per-identity server.
const AnonymousIdentity = "anonymous"

// IdentityKey is the identity key who's requests are served under on a
// per-identity server: who.Key(), or AnonymousIdentity for nil.
func IdentityKey(who *identity.Identity) string {
	if k := who.Key(); k != "" {
		return k
	}
	return AnonymousIdentity
}

// isIdentityKey reports whether key is an identity's instance key.
func isIdentityKey(key string) bool { return strings.HasPrefix(key, identityPrefix) }

// identityName is the name of the identity whose instance key is key.
func (s *Server) identityName(key string) string {
	_, name, _ := s.whoFor(key)
	return name
}

// identityOfKey is the identity key of an identity's instance key, and
// whether key is one.
func identityOfKey(key string) (string, bool) { return strings.CutPrefix(key, identityPrefix) }

// PerIdentity reports whether the server serves each identity from an
// instance of its own.
func (s *Server) PerIdentity() bool { return s.Config().Sharing == config.SharingPerIdentity }

// Private reports whether the server's client instances are not shared
// by every client: each session (per-session) or each identity
// (per-identity) has its own, and the shared instance serves nobody's
// traffic — it only learns the server's lists. Most decisions that read
// "per-session" mean this.
func (s *Server) Private() bool { return Private(s.Config()) }

// Private is Server.Private of a configuration.
func Private(cfg *config.Server) bool {
	return cfg.Sharing == config.SharingPerSession || cfg.Sharing == config.SharingPerIdentity
}

// InstanceKey is the key to lease s under (Acquire, TryAcquire, Peek)
// for a request of session (a client session's or a modern request's
// key) sent by who (nil: anonymous): on a per-identity server, who's
// identity's instance — the same for every session of that identity —,
// else session itself. It is the one place the choice is made.
func (s *Server) InstanceKey(session string, who *identity.Identity) string {
	if !s.PerIdentity() {
		return session
	}
	k := IdentityKey(who)
	if who != nil {
		// Remembered for the instance's references (${identity.sub}):
		// one record per person, written once.
		if _, ok := s.idents.Load(k); !ok {
			s.idents.LoadOrStore(k, who)
		}
	}
	return identityPrefix + k
}

// whoFor is the identity an instance made under key runs for: nil for
// an instance that runs for none (a shared or per-session one), the
// anonymous identity for the shared instance of a per-identity server,
// which learns its lists. ok is false when key names an identity the
// server was never told of (InstanceKey).
func (s *Server) whoFor(key string) (who *secret.Identity, name string, ok bool) {
	if !s.PerIdentity() {
		return nil, "", true
	}
	k, isID := identityOfKey(key)
	if key == "" || (isID && k == AnonymousIdentity) {
		return &secret.Identity{Key: AnonymousIdentity}, AnonymousIdentity, true
	}
	if !isID {
		return nil, "", false
	}
	v, found := s.idents.Load(k)
	if !found {
		return nil, "", false
	}
	id := v.(*identity.Identity)
	return &secret.Identity{Key: k, Subject: id.Subject}, id.Name(), true
}

// errNoIdentity is the error of a request to a per-identity server that
// names no identity's instance.
func errNoIdentity(name string) error {
	return fmt.Errorf("server %s serves each identity from its own instance, and the request names none (lease it under Server.InstanceKey)", name)
}

// releaseIdentity ends in, an identity's instance that went dormant for
// idleness, for good, unless a request began on it meanwhile: out of the
// server's instances — its place under maxInstances is free, and the
// identity's next request starts a new one (a request that found it just
// before is sent on to that one: errRetired). A caller waiting for a
// place (instanceFor) is told either way.
func (s *Server) releaseIdentity(in *instance) {
	if _, ok := identityOfKey(in.key); !ok {
		return
	}
	s.mu.Lock()
	released := false
	if s.perSession[in.key] == in {
		in.do(func(st *instState) (_ effects) {
			if st.phase != phaseDormant || st.inflight > 0 || st.starting != nil {
				return
			}
			st.phase = phaseRetired
			in.setPolicyLocked(st, in.srv.Config())
			st.closes++
			released = true
			return
		})
		if released {
			delete(s.perSession, in.key)
		}
		// Who waits for a place looks again: this one is free, or, woken
		// meanwhile, no longer stopping.
		if s.freed != nil {
			close(s.freed)
			s.freed = nil
		}
	}
	s.mu.Unlock()
}

// identityStoppingLocked reports whether an identity's instance is going
// to sleep for idleness, after which its place is free (releaseIdentity);
// s.mu is held.
func (s *Server) identityStoppingLocked() bool {
	for key, in := range s.perSession {
		if !isIdentityKey(key) {
			continue
		}
		sleeping := false
		in.view(func(st *instState) { sleeping = st.phase == phaseSleeping })
		if sleeping {
			return true
		}
	}
	return false
}

// IdentityStatus describes an identity's instance of a per-identity
// server (Status.Identities).
type IdentityStatus struct {
	// Identity is the identity's key (identity.Identity.Key, or
	// "anonymous"); Name its subject.
	Identity     string    `json:"identity"`
	Name         string    `json:"name"`
	State        string    `json:"state"`
	PID          int       `json:"pid,omitempty"`
	StartedAt    time.Time `json:"startedAt,omitzero"`
	LastActivity time.Time `json:"lastActivity,omitzero"`
	InFlight     int       `json:"inFlight"`
	Requests     int64     `json:"requests"`
	LastError    string    `json:"lastError,omitempty"`
}

// identityStatus lists the identities' instances, by name then key, and
// counts the sessions' own.
func (s *Server) identityStatus() (sessions int, ids []IdentityStatus) {
	s.mu.Lock()
	var ins []*instance
	for key, in := range s.perSession {
		if _, ok := identityOfKey(key); ok {
			ins = append(ins, in)
		} else {
			sessions++
		}
	}
	s.mu.Unlock()
	cfg := s.Config()
	for _, in := range ins {
		st := in.status()
		k, _ := identityOfKey(in.key)
		ids = append(ids, IdentityStatus{Identity: k, Name: s.identityName(in.key), State: st.State, PID: st.PID, StartedAt: st.StartedAt,
			LastActivity: st.LastActivity, InFlight: st.InFlight, Requests: st.Requests, LastError: cfg.RedactText(st.LastError)})
	}
	slices.SortFunc(ids, func(a, b IdentityStatus) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Identity, b.Identity)
	})
	return sessions, ids
}

// Reaches reports whether a message src's instance sent on its own (a
// list_changed, a log line, a resource update) may reach a client
// session of who (nil: anonymous): an identity's instance's messages
// reach only that identity's sessions. It says nothing of other
// instances (Source.Session decides those).
func (src Source) Reaches(who *identity.Identity) bool {
	return src.Identity == "" || src.Identity == IdentityKey(who)
}

// whoOf is the identity the instance hooks are for runs for, or nil.
func whoOf(hooks any) *secret.Identity {
	if h, ok := hooks.(instHooks); ok {
		who, _, _ := h.in.srv.whoFor(h.in.key)
		return who
	}
	return nil
}
