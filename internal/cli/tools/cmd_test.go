package tools

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
)

// The flags and arguments of tools and its subcommands reach their
// options through runF.
func TestFlagsReachTheOptions(t *testing.T) {
	io := cmdutil.IOStreams{In: strings.NewReader(""), Out: new(bytes.Buffer), ErrOut: new(bytes.Buffer)}
	var list *Options
	cmd := NewCmdTools(io, func(_ context.Context, o *Options) error { list = o; return nil })
	cmd.SetArgs([]string{"github", "--json", "--addr", "h:3"})
	if err := cmd.Execute(); err != nil || list == nil || len(list.Servers) != 1 || list.Servers[0] != "github" || !list.JSON || list.API.Addr != "h:3" {
		t.Errorf("tools github --json: %+v %v", list, err)
	}
	var ap *ApproveOptions
	cmd = NewCmdApprove(io, func(_ context.Context, o *ApproveOptions) error { ap = o; return nil })
	cmd.SetArgs([]string{"fx", "echo@0123456789ab", "shout", "--all"})
	if err := cmd.Execute(); err != nil || ap == nil || ap.Server != "fx" || strings.Join(ap.Tools, ",") != "echo@0123456789ab,shout" || !ap.All {
		t.Errorf("tools approve: %+v %v", ap, err)
	}
	var df *DiffOptions
	cmd = NewCmdDiff(io, func(_ context.Context, o *DiffOptions) error { df = o; return nil })
	cmd.SetArgs([]string{"fx", "--json"})
	if err := cmd.Execute(); err != nil || df == nil || df.Server != "fx" || !df.JSON {
		t.Errorf("tools diff: %+v %v", df, err)
	}
	var al *AcceptLostOptions
	cmd = NewCmdAcceptLost(io, func(_ context.Context, o *AcceptLostOptions) error { al = o; return nil })
	cmd.SetArgs([]string{"fx"})
	if err := cmd.Execute(); err != nil || al == nil || al.Server != "fx" {
		t.Errorf("tools accept-lost: %+v %v", al, err)
	}
}
