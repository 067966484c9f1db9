package clients

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// streams are a test's: nothing read, both outputs in buffers.
func streams() (cmdutil.IOStreams, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	return cmdutil.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, &out, &errOut
}

// Each flag and argument of install-client, uninstall-client and import
// reaches its options; a command line they refuse never runs them.
func TestFlagsReachTheOptions(t *testing.T) {
	io, _, _ := streams()
	var inst *InstallOptions
	cmd := NewCmdInstall(io, func(_ context.Context, o *InstallOptions) error { inst = o; return nil })
	cmd.SetArgs([]string{"claude-desktop", "--dry-run", "--per-server", "--import", "--remote", "--config-path", "/c/client.json", "--mcpvisor-config", "/m/config.json", "--state-dir", "/s"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if inst == nil || inst.Client != "claude-desktop" || !inst.DryRun || !inst.PerServer || !inst.Import || !inst.Remote ||
		inst.ConfigPath != "/c/client.json" || inst.MCPVisorConfig != "/m/config.json" || inst.StateDir != "/s" || inst.Executable == nil || inst.Now == nil {
		t.Errorf("install-client options: %+v", inst)
	}

	var un *UninstallOptions
	cmd = NewCmdUninstall(io, func(_ context.Context, o *UninstallOptions) error { un = o; return nil })
	cmd.SetArgs([]string{"cursor", "--force", "--dry-run", "--config-path", "/c/mcp.json", "--state-dir", "/s"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := (UninstallOptions{IO: io, Client: "cursor", DryRun: true, Force: true, ConfigPath: "/c/mcp.json", StateDir: "/s"}); un == nil || !reflect.DeepEqual(*un, want) {
		t.Errorf("uninstall-client options: %+v, want %+v", un, want)
	}

	var imp *ImportOptions
	cmd = NewCmdImport(io, func(_ context.Context, o *ImportOptions) error { imp = o; return nil })
	cmd.SetArgs([]string{"cursor", "./a.json", "-c", "/m/config.json", "--dry-run"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := (ImportOptions{IO: io, Sources: []string{"cursor", "./a.json"}, Config: "/m/config.json", DryRun: true}); imp == nil || !reflect.DeepEqual(*imp, want) {
		t.Errorf("import options: %+v, want %+v", imp, want)
	}

	for _, args := range [][]string{{}, {"a", "b"}, {"claude-desktop", "--no-such-flag"}} {
		ran := false
		cmd := NewCmdInstall(io, func(context.Context, *InstallOptions) error { ran = true; return nil })
		cmd.SetArgs(args)
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		if err := cmd.Execute(); err == nil || ran {
			t.Errorf("install-client %q: ran %v, error %v; want a refusal", args, ran, err)
		}
	}
}

// installFixture is a client's file (Claude Desktop's format, at a path
// of the test's) with two servers, and mcpvisor's config holding them.
type installFixture struct {
	client, config, state string
	original              []byte
}

func newInstallFixture(t *testing.T) *installFixture {
	t.Helper()
	dir := t.TempDir()
	f := &installFixture{client: filepath.Join(dir, "claude_desktop_config.json"), config: filepath.Join(dir, "mcpvisor.json"), state: filepath.Join(dir, "state")}
	f.original = []byte(`{
  "globalShortcut": "Ctrl+Space",
  "mcpServers": {
    "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
    "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]}
  }
}
`)
	if err := os.WriteFile(f.client, f.original, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.config, []byte(`{"mcpServers": {
  "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
  "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]}
}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *installFixture) install(io cmdutil.IOStreams) *InstallOptions {
	return &InstallOptions{IO: io, Client: "claude-desktop", ConfigPath: f.client, MCPVisorConfig: f.config, StateDir: f.state,
		Executable: func() (string, error) { return "/opt/mcpvisor/bin/mcpvisor", nil },
		Now:        func() time.Time { return time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC) }}
}

// An install writes the client's file to launch mcpvisor, keeping its
// other keys, with a copy of the file as it was (its mode kept) and a
// record; installing again changes nothing; uninstalling puts the file
// back byte for byte and removes the copy and the record. A dry run
// prints the diff and writes nothing.
func TestInstallAndUninstall(t *testing.T) {
	f := newInstallFixture(t)
	io, out, _ := streams()

	dry := f.install(io)
	dry.DryRun = true
	if err := RunInstall(context.Background(), dry); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(f.client); !bytes.Equal(got, f.original) || !strings.Contains(out.String(), "+++ "+f.client+" (installed)") {
		t.Fatalf("a dry run wrote the file, or printed no diff:\n%s", out)
	}
	if entries, _ := os.ReadDir(filepath.Dir(f.client)); len(entries) != 2 {
		t.Fatalf("a dry run left files: %v", entries)
	}

	out.Reset()
	if err := RunInstall(context.Background(), f.install(io)); err != nil {
		t.Fatal(err)
	}
	installed, _ := os.ReadFile(f.client)
	backup := f.client + ".mcpvisor-backup-20261204T100000Z"
	if copied, err := os.ReadFile(backup); err != nil || !bytes.Equal(copied, f.original) {
		t.Fatalf("the copy of the file as it was: %v", err)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the copy's mode: %v %v, want 0640", fi.Mode(), err)
	}
	if !strings.Contains(string(installed), "/opt/mcpvisor/bin/mcpvisor") || !strings.Contains(string(installed), `"globalShortcut": "Ctrl+Space"`) ||
		strings.Contains(string(installed), "server-memory") {
		t.Fatalf("the installed file:\n%s", installed)
	}
	if !strings.Contains(out.String(), "now launches") || !strings.Contains(out.String(), backup) {
		t.Errorf("install said: %q", out)
	}

	out.Reset()
	if err := RunInstall(context.Background(), f.install(io)); err != nil || !strings.Contains(out.String(), "nothing to do") {
		t.Fatalf("installing again: %v, %q", err, out)
	}
	if again, _ := os.ReadFile(f.client); !bytes.Equal(again, installed) {
		t.Fatal("installing again changed the file")
	}

	out.Reset()
	if err := RunUninstall(context.Background(), &UninstallOptions{IO: io, Client: "claude-desktop", ConfigPath: f.client, StateDir: f.state}); err != nil {
		t.Fatal(err)
	}
	if back, _ := os.ReadFile(f.client); !bytes.Equal(back, f.original) {
		t.Fatalf("uninstall did not restore the file:\n%s", back)
	}
	if _, err := os.Stat(backup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy is still there: %v", err)
	}
	if err := RunUninstall(context.Background(), &UninstallOptions{IO: io, Client: "claude-desktop", ConfigPath: f.client, StateDir: f.state}); err == nil || !strings.Contains(err.Error(), "has not changed it") {
		t.Errorf("uninstalling again: %v, want a refusal that says there is nothing to undo", err)
	}
}

// A client whose servers mcpvisor's config lacks is refused, naming them,
// and nothing is written; an unknown client is a usage error.
func TestInstallRefusals(t *testing.T) {
	f := newInstallFixture(t)
	if err := os.WriteFile(f.config, []byte(`{"mcpServers": {"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	io, _, _ := streams()
	err := RunInstall(context.Background(), f.install(io))
	if err == nil || !strings.Contains(err.Error(), "lacks") || !strings.Contains(err.Error(), "files") {
		t.Fatalf("a client with a server mcpvisor lacks: %v", err)
	}
	if got, _ := os.ReadFile(f.client); !bytes.Equal(got, f.original) {
		t.Error("the refused install wrote the file")
	}
	if _, err := os.Stat(f.state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused install recorded something: %v", err)
	}

	o := f.install(io)
	o.Client = "no-such-client"
	var usage shutdown.UsageError
	if err := RunInstall(context.Background(), o); !errors.As(err, &usage) {
		t.Errorf("an unknown client: %v, want a usage error", err)
	}
}

// Import adds what the config lacks, and says when there is nothing to
// add; a dry run writes nothing.
func TestImportAFile(t *testing.T) {
	f := newInstallFixture(t)
	cfg := filepath.Join(t.TempDir(), "config.json")
	io, out, _ := streams()
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{f.client}, Config: cfg, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg); !errors.Is(err, os.ErrNotExist) || !strings.Contains(out.String(), "server-memory") {
		t.Fatalf("a dry run: %v\n%s", err, out)
	}
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{f.client}, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(cfg); !strings.Contains(string(data), "server-memory") || !strings.Contains(string(data), "server-filesystem") {
		t.Fatalf("imported:\n%s", data)
	}
	out.Reset()
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{f.client}, Config: cfg}); err != nil || !strings.Contains(out.String(), "nothing to add") {
		t.Fatalf("importing again: %v %q", err, out)
	}
}
