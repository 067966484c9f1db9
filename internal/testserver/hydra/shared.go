package hydra

import (
	"context"
	"sync"
	"testing"
)

// SharedOptions are the options of the Hydra Shared starts: subjects log
// in by login_hint, with no extra claims (SetClaims adds them).
var SharedOptions = Options{}

var shared struct {
	mu  sync.Mutex
	srv *Server
	err error
	ran bool
}

// Shared returns the test binary's Hydra, started on first use with
// SharedOptions; TestMain stops it with StopShared after the tests. A
// failure to start fails every test that asks for it, with the same error.
// If the test fails, its cleanup shows Hydra's logs.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	if !shared.ran {
		shared.ran = true
		bin, err := Binary(context.Background())
		if err == nil {
			shared.srv, err = StartProcess(bin, SharedOptions)
		}
		shared.err = err
	}
	s, err := shared.srv, shared.err
	shared.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("hydra logs (shared):\n%s", s.Logs())
		}
	})
	return s
}

// StopShared stops the Hydra Shared started, if any, and reaps it; a
// later Shared starts a new one. Call it from TestMain after m.Run.
func StopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	s := shared.srv
	shared.srv, shared.err, shared.ran = nil, nil, false
	if s == nil {
		return nil
	}
	return s.Close()
}
