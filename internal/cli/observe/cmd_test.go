package observe

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// The flags of events and logs reach their options through runF; --tail
// not given is -1 (serve's default), and a negative one is a usage error
// that never runs.
func TestFlagsReachTheOptions(t *testing.T) {
	io := cmdutil.IOStreams{In: strings.NewReader(""), Out: new(bytes.Buffer), ErrOut: new(bytes.Buffer)}
	var ev *EventsOptions
	cmd := NewCmdEvents(io, func(_ context.Context, o *EventsOptions) error { ev = o; return nil })
	cmd.SetArgs([]string{"-f", "--server", "github", "--json", "--addr", "h:2"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if ev == nil || !ev.Follow || ev.Server != "github" || !ev.JSON || ev.API.Addr != "h:2" {
		t.Errorf("events options: %+v", ev)
	}
	var lg *LogsOptions
	run := func(args ...string) error {
		lg = nil
		cmd := NewCmdLogs(io, func(_ context.Context, o *LogsOptions) error { lg = o; return nil })
		cmd.SetArgs(args)
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		return cmd.Execute()
	}
	if err := run("a", "-f", "--since", "10m", "--json"); err != nil || lg == nil || lg.Server != "a" || !lg.Follow || lg.Since != "10m" || lg.Tail != -1 || !lg.JSON {
		t.Errorf("logs a -f --since 10m: %+v %v", lg, err)
	}
	if err := run("a", "--tail", "0"); err != nil || lg == nil || lg.Tail != 0 {
		t.Errorf("logs --tail 0: %+v %v", lg, err)
	}
	var usage shutdown.UsageError
	if err := run("a", "--tail", "-3"); !errors.As(err, &usage) || lg != nil {
		t.Errorf("logs --tail -3: ran %v, %v; want a usage error", lg != nil, err)
	}
}

// --since is checked before --tail, as before logs became a package: a
// command line wrong in both is told about --since.
func TestLogsSinceIsCheckedFirst(t *testing.T) {
	cmd := NewCmdLogs(cmdutil.IOStreams{}, nil)
	cmd.SetOut(new(bytes.Buffer))
	cmd.SetErr(new(bytes.Buffer))
	cmd.SetArgs([]string{"a", "--since", "bogus", "--tail", "-1", "--addr", "127.0.0.1:1"})
	var usage shutdown.UsageError
	if err := cmd.Execute(); !errors.As(err, &usage) || !strings.HasPrefix(err.Error(), "--since") {
		t.Errorf("logs --since bogus --tail -1: %v", err)
	}
}
