package connect

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// connect's flags reach its options through runF, with their defaults;
// --start other than auto or never is a usage error that never runs.
func TestFlagsReachTheOptions(t *testing.T) {
	streams := cmdutil.IOStreams{In: strings.NewReader(""), Out: new(bytes.Buffer), ErrOut: new(bytes.Buffer)}
	var got *Options
	run := func(args ...string) error {
		got = nil
		cmd := NewCmdConnect(streams, func(_ context.Context, o Options, _ io.Writer) error { got = &o; return nil })
		cmd.SetArgs(args)
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		return cmd.Execute()
	}
	if err := run("--server", "github", "-c", "/c.json", "--state-dir", "/s", "--socket", "/s/x.sock", "--start", "never", "--idle-exit", "1m", "--start-timeout", "5s"); err != nil {
		t.Fatal(err)
	}
	want := Options{server: "github", configFile: "/c.json", stateDir: "/s", socket: "/s/x.sock", start: "never", idleExit: time.Minute, startTimeout: 5 * time.Second}
	if got == nil || *got != want {
		t.Errorf("options %+v, want %+v", got, want)
	}
	if err := run(); err != nil || got == nil || got.start != "auto" || got.idleExit != defaultConnectIdleExit || got.startTimeout != defaultConnectStartTimeout {
		t.Errorf("defaults: %+v %v", got, err)
	}
	var usage shutdown.UsageError
	if err := run("--start", "sometimes"); !errors.As(err, &usage) || got != nil {
		t.Errorf("--start sometimes: ran %v, %v", got != nil, err)
	}
}
