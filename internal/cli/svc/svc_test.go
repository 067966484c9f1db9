package svc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/service"
)

// install's and uninstall's flags reach the options through runF, with
// the action named.
func TestFlagsReachTheOptions(t *testing.T) {
	streams := cmdutil.IOStreams{In: strings.NewReader(""), Out: new(bytes.Buffer), ErrOut: new(bytes.Buffer)}
	var action string
	var got Options
	cmd := NewCmdService(streams, func(_ context.Context, a string, o *Options) error { action, got = a, *o; return nil })
	cmd.SetArgs([]string{"install", "-c", "/c.json", "--state-dir", "/s", "--dry-run", "--force"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if action != "install" || got.Config != "/c.json" || got.StateDir != "/s" || !got.DryRun || !got.Force || got.Host == nil || got.Executable == nil {
		t.Errorf("service install: %s %+v", action, got)
	}
	cmd = NewCmdService(streams, func(_ context.Context, a string, o *Options) error { action, got = a, *o; return nil })
	cmd.SetArgs([]string{"uninstall", "--dry-run"})
	if err := cmd.Execute(); err != nil || action != "uninstall" || !got.DryRun || got.Force {
		t.Errorf("service uninstall: %s %+v %v", action, got, err)
	}
}

// An install of a config that is not there names it, before any host is
// asked; the host's refusal is uninstall's error.
func TestRunRefusals(t *testing.T) {
	asked := false
	o := &Options{IO: cmdutil.IOStreams{Out: io.Discard}, Config: filepath.Join(t.TempDir(), "none.json"),
		Host: func(io.Writer) (service.Host, error) {
			asked = true
			return service.Host{}, errors.New("no service manager here")
		},
		Executable: func() (string, error) { return "/opt/mcpvisor/bin/mcpvisor", nil }}
	if err := RunInstall(context.Background(), o); err == nil || !strings.Contains(err.Error(), "no config file at") || !strings.Contains(err.Error(), "none.json") || asked {
		t.Errorf("install of a missing config: %v (host asked: %v)", err, asked)
	}
	if err := RunUninstall(context.Background(), o); err == nil || err.Error() != "no service manager here" {
		t.Errorf("uninstall without a host: %v", err)
	}
}
