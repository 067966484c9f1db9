package fleet

import (
	"context"

	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// What the tests read of an instance and do to a server, beyond what the
// fleet does itself.

// supervisor is the supervisor of the instance's run, or nil when it has
// none (never started, or dormant).
func (in *instance) supervisor() (sup *lifecycle.Supervisor) {
	in.view(func(st *instState) { sup = st.sup })
	return sup
}

// runState is the state of the instance's run (runStateLocked).
func (in *instance) runState() (info lifecycle.StateInfo) {
	in.view(func(*instState) { info = in.runStateLocked() })
	return info
}

// stopShared stops the shared instance (it starts again on the next
// request).
func (s *Server) stopShared(ctx context.Context) error { return s.sharedIn().close(ctx) }
