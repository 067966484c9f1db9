package backend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// Launch sees each spawn's Spec, its environment built, and may run
// another program; it is told how each start ended: nil for a start that
// connected, and for a strict 2025 server that ended on the era probe
// (which is started again, Launch asked again), else the error. (The
// probe comes first for an instance only modern clients use.)
func TestLaunchHook(t *testing.T) {
	rt, err := proc.Open(proc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	fixture := testserver.Build(t)
	var seen []proc.Spec
	var ended []error
	sc := &StdioConnector{
		Name:        "launched",
		Runtime:     rt,
		Spec:        proc.Spec{Command: "/nonexistent/npx", Args: []string{"-y", "pkg"}},
		ExtraEnv:    []string{"FIXTURE_STRICT_INIT=1", testserver.MarkerEnv + "=" + testserver.NewMarker(t)},
		Logger:      quiet(),
		ModernFirst: true,
		Launch: func(spec *proc.Spec) func(error) {
			seen = append(seen, *spec)
			if len(seen) > 2 {
				return nil // the third start: as configured
			}
			spec.Command, spec.Args = fixture, []string{"-stderr-lines", "1"}
			return func(err error) { ended = append(ended, err) }
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sc.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.(*Conn).CloseContext(ctx); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || len(ended) != 2 || ended[0] != nil || ended[1] != nil {
		t.Fatalf("Launch saw %d spawns, was told %v; want 2 (the probe's end, then the connect), both nil", len(seen), ended)
	}
	if seen[0].Command != "/nonexistent/npx" || !slices.Equal(seen[0].Args, []string{"-y", "pkg"}) || !slices.Contains(seen[0].Env, "FIXTURE_STRICT_INIT=1") {
		t.Errorf("Launch saw %s %q (env has the server's variables: %v)", seen[0].Command, seen[0].Args, slices.Contains(seen[0].Env, "FIXTURE_STRICT_INIT=1"))
	}
	_, err = sc.Connect(ctx)
	if !errors.Is(err, ErrSpawn) || len(ended) != 2 {
		t.Fatalf("a spawn left as configured: %v; told %v", err, ended)
	}

	// A start that fails is reported with its error.
	sc.Launch = func(spec *proc.Spec) func(error) {
		spec.Command = filepath.Join(t.TempDir(), "missing")
		return func(err error) { ended = append(ended, err) }
	}
	if _, err := sc.Connect(ctx); !errors.Is(err, ErrSpawn) || len(ended) != 3 || !errors.Is(ended[2], os.ErrNotExist) {
		t.Fatalf("a failed spawn: %v; told %v", err, ended)
	}
}
