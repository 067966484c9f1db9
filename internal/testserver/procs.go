package testserver

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// MarkerEnv is the environment variable by which tests recognise every
// process of one fixture tree: a test sets MarkerEnv=NewMarker(t) in the
// environment it spawns with, and the fixture's children inherit it. Its
// name does not start with MCPVISOR_: mcpvisor keeps its own variables from
// the servers it spawns, and the marker must reach them.
const MarkerEnv = "MCP_FIXTURE_MARKER"

// NewMarker returns a value for MarkerEnv that is unique to this call: the
// test name, made safe, and random hex.
func NewMarker(tb testing.TB) string {
	tb.Helper()
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, tb.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("NewMarker: %v", err)
	}
	return name + "-" + hex.EncodeToString(b[:])
}

// WaitGone waits until no live process carries MarkerEnv=marker. If some
// still do after timeout, it reports them as a test error and kills them.
// Off Linux, where processes cannot be found, it returns at once.
func WaitGone(tb testing.TB, marker string, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pids := LiveProcesses(marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Errorf("processes with %s=%s still alive after %v: %v", MarkerEnv, marker, timeout, pids)
			KillProcesses(marker)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
