package gateway

// WithClientHint returns ep whose sessions carry hint as their ClientHint:
// a name for the client program, known to the front before the client
// says anything (mcpvisor connect's parent process, from its preface),
// for per-client identity where the client's own handshake names none.
// Everything else is ep's.
func WithClientHint(ep Endpoint, hint string) Endpoint {
	return hinted{Endpoint: ep, hint: hint}
}

type hinted struct {
	Endpoint
	hint string
}

func (h hinted) Open(out Sink) *Session {
	s := h.Endpoint.Open(out)
	s.mu.Lock()
	s.hint = h.hint
	s.mu.Unlock()
	return s
}

// gateway keeps the refusals of a front on h counted in ep's gateway.
func (h hinted) gateway() *Gateway { return gatewayOf(h.Endpoint) }

// ClientHint is the name the front was given for the session's client
// program (WithClientHint), or "". Safe for concurrent use.
func (s *Session) ClientHint() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hint
}
