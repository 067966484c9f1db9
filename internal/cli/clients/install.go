package clients

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/clientcfg"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
	"github.com/mcpvisor/mcpvisor/internal/userdirs"
)

// installRecord is what install-client remembers of one change, in the
// state dir: enough for uninstall-client to restore the file and to tell
// whether it changed since.
type installRecord struct {
	Client    string    `json:"client"`
	Path      string    `json:"path"`
	Backup    string    `json:"backup,omitempty"` // "" when the file did not exist
	PerServer bool      `json:"perServer"`
	SHA256    string    `json:"sha256"`    // of the bytes install wrote
	Installed string    `json:"installed"` // those bytes, for the diff of a later change
	At        time.Time `json:"at"`
}

// never reports whether the install recorded never reached the file:
// it is still what install-client copied (or still absent).
func (r *installRecord) never(data []byte, existed bool) bool {
	if existed && hashOf(data) == r.SHA256 {
		return false
	}
	if r.Backup == "" {
		return !existed
	}
	orig, err := os.ReadFile(r.Backup)
	return err == nil && existed && bytes.Equal(orig, data)
}

// discard removes the record and its copy of the file.
func (r *installRecord) discard(stateDir string) error {
	if r.Backup != "" {
		if err := os.Remove(r.Backup); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(recordFile(stateDir, r.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func recordFile(stateDir, path string) string {
	sum := sha256.Sum256([]byte(path))
	return filepath.Join(stateDir, "clients", hex.EncodeToString(sum[:8])+".json")
}

func readRecord(stateDir, path string) (*installRecord, error) {
	data, err := os.ReadFile(recordFile(stateDir, path))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var r installRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", recordFile(stateDir, path), err)
	}
	return &r, nil
}

func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// clientTarget is the client named and the file install-client and
// uninstall-client work on (override, else where the client keeps it),
// with the format it is in.
func clientTarget(name, override string) (*clientcfg.Client, string, clientcfg.Format, error) {
	c := clientcfg.Lookup(name)
	if c == nil {
		return nil, "", 0, shutdown.UsageError{Err: fmt.Errorf("unknown client %q (known: %s)", name, strings.Join(clientcfg.Names(), ", "))}
	}
	t := c.Target(clientEnv())
	path, f := t.Path, t.Format
	if override != "" {
		path = override
		switch {
		case c.Format == clientcfg.FormatClaudeUser && filepath.Base(override) != ".claude.json":
			f = clientcfg.FormatMCPServers // a project's .mcp.json
		case c.Format == clientcfg.FormatVSCode && filepath.Base(override) == "settings.json":
			f = clientcfg.FormatVSCodeSettings
		}
	}
	abs, err := filepath.Abs(path)
	return c, abs, f, err
}

// diffSecretsHelp is what import's, install-client's and
// uninstall-client's help say of the diffs they print
// (clientcfg.DiffRedacted).
const diffSecretsHelp = `The diffs printed show no secret: env and header values, and the
secrets in args and URLs (--api-key …, --token=…, a URL's password or
token parameter), show as [REDACTED], as in inspect; one that changed
as [REDACTED, changed]. ${VAR} references show as written: they are not
secrets, and tell where a value comes from. The files are written with
the real values.`

// InstallOptions are install-client's: its flags, and what it writes to
// and launches.
type InstallOptions struct {
	IO cmdutil.IOStreams
	// Client is the client named (an argument).
	Client                               string
	DryRun, PerServer, Import, Remote    bool
	ConfigPath, MCPVisorConfig, StateDir string
	// Executable is what the client is to launch (cmdutil.Executable).
	Executable func() (string, error)
	// Now stamps the backup and the record.
	Now func() time.Time
	// Secrets reads the secrets mcpvisor's config references, to tell
	// whether a client's entry with literal secrets is one of its servers
	// (nil: the store serve reads, opened when needed).
	Secrets SecretGetter
}

// NewCmdInstall is install-client: its flags fill an InstallOptions, run
// by runF (nil: RunInstall).
func NewCmdInstall(streams cmdutil.IOStreams, runF func(context.Context, *InstallOptions) error) *cobra.Command {
	o := &InstallOptions{IO: streams, Executable: cmdutil.Executable, Now: time.Now}
	cmd := &cobra.Command{
		Use:   "install-client CLIENT [--dry-run] [--per-server] [--config-path FILE] [--mcpvisor-config FILE]",
		Short: "Make a desktop client launch its MCP servers through mcpvisor",
		Long: `Make a desktop client launch its MCP servers through mcpvisor.

Rewrites the client's configuration (CLIENT is one of: ` + strings.Join(clientcfg.Names(), ", ") + `)
so that it launches ` + "`mcpvisor connect`" + ` instead of each server: one
entry named "mcpvisor" for all of mcpvisor's servers, or with --per-server
one entry per server (named as the client's, running
` + "`mcpvisor connect --server NAME`" + `) so that the client keeps its own
toggle for each. The command written is this mcpvisor executable's
absolute path.

The client's servers must be in mcpvisor's config first (--mcpvisor-config,
default $XDG_CONFIG_HOME/mcpvisor/config.json): install-client refuses when
some are missing; run ` + "`mcpvisor import CLIENT`" + ` first, or pass --import
to do both. Remote entries (url) are taken over as the local ones:
mcpvisor proxies them, and signs in to the ones that need it (a client's
oauth key, Codex's scopes: ` + "`mcpvisor login NAME`" + `, which the output
names). --remote=false leaves them to the client, which keeps reaching
them itself (if mcpvisor's config has them too, the "mcpvisor" entry
serves them as well, and the client sees their tools twice). An entry
that runs mcp-remote (npx mcp-remote URL …) is the remote server it
reaches: it is taken over as that server (mcpvisor's config has it as a
url server, as import writes it; one Node process fewer). Entries
mcpvisor cannot run (VS Code inputs, Zed extensions), or that the client
restricts in ways mcpvisor cannot carry (VS Code's sandbox or envFile,
Codex's env_vars or approval modes, a headers helper, a field mcpvisor
does not know), stay as they are: the output names them and their
fields, and mcpvisor's config need not have them. The entries written
carry the client's values as written: a ${NAME} reference stays a
reference, never its value.
Codex's enabled_tools/disabled_tools stay in an entry written per
server; one entry for all needs mcpvisor's server to filter its tools
alike (import writes them as its tools {allow, deny}). For Claude Code the user's servers
(~/.claude.json "mcpServers") are rewritten; a project's .mcp.json with
--config-path.

A file that does not parse is not touched (the error gives line:column).
Every unrelated key, comment and blank of the file stays as it was: only
the server entries change. A timestamped copy of the file is written next
to it first (its mode kept), and the change is recorded in the state dir,
so that ` + "`mcpvisor uninstall-client CLIENT`" + ` restores the file byte for
byte. A symlinked file stays a link (its target is rewritten), and keeps
its owner. A file another program writes while install-client works on
it is left as that program wrote it (run again). Installing again when
nothing changed does nothing. --dry-run prints the change as a unified
diff and writes nothing.

` + diffSecretsHelp,
		Args: cobra.ExactArgs(1),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			o.Client = args[0]
			return nil
		}, runF, RunInstall),
	}
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "print the change as a unified diff; write nothing")
	cmd.Flags().BoolVar(&o.PerServer, "per-server", false, "one entry per server instead of one for all")
	cmd.Flags().BoolVar(&o.Import, "import", false, "import the client's servers into mcpvisor's config first")
	cmd.Flags().BoolVar(&o.Remote, "remote", true, "take over remote (url) entries too (--remote=false leaves them to the client)")
	cmd.Flags().StringVar(&o.ConfigPath, "config-path", "", "the client's configuration file (default: where the client keeps it)")
	cmd.Flags().StringVar(&o.MCPVisorConfig, "mcpvisor-config", "", "mcpvisor's configuration file (default $XDG_CONFIG_HOME/mcpvisor/config.json)")
	cmd.Flags().StringVar(&o.StateDir, "state-dir", "", "where installs are recorded (default $XDG_STATE_HOME/mcpvisor)")
	return cmd
}

// installRun is one install-client: what it resolved, and the file as it
// found it.
type installRun struct {
	o       *InstallOptions
	c       *clientcfg.Client
	path    string
	format  clientcfg.Format
	exe     string
	data    []byte // the client's file ("" when it did not exist)
	existed bool
	// stored reads the secrets mcpvisor's config references.
	stored clientcfg.SecretLookup
}

// RunInstall rewrites the client's file so that it launches mcpvisor
// connect: it resolves what to work on, checks an earlier install's
// record, reads (and with --import first fills) mcpvisor's config, plans
// the change, and writes it — the record first, then the file.
func RunInstall(ctx context.Context, o *InstallOptions) error {
	r, err := o.resolve()
	if err != nil {
		return err
	}
	var st any
	if o.Secrets != nil {
		st = o.Secrets
	}
	r.stored = storedSecrets(ctx, st, o.MCPVisorConfig)
	if done, err := r.checkRecord(); err != nil || done {
		return err
	}
	cfgData, err := r.mcpvisorConfig()
	if err != nil {
		return err
	}
	plan, err := r.plan(cfgData)
	if err != nil {
		return err
	}
	out := o.IO.Out
	for _, k := range plan.Kept {
		fmt.Fprintf(out, "%s: %s: %s\n", r.path, k.At, k.Msg)
	}
	for _, d := range plan.Dropped {
		fmt.Fprintf(out, "%s: %s: %s\n", r.path, d.At, d.Msg)
	}
	for _, n := range plan.Notes {
		fmt.Fprintf(out, "%s: %s: %s\n", r.path, n.At, n.Msg)
	}
	if o.DryRun {
		fmt.Fprint(out, clientcfg.DiffRedacted(r.data, plan.Data, r.format, r.path, r.path+" (installed)"))
		return nil
	}
	return r.write(plan)
}

// resolve finds the client's file, mcpvisor's config and state directory,
// and the executable to launch, and reads the client's file.
func (o *InstallOptions) resolve() (*installRun, error) {
	c, path, format, err := clientTarget(o.Client, o.ConfigPath)
	if err != nil {
		return nil, err
	}
	if o.MCPVisorConfig == "" {
		o.MCPVisorConfig = userdirs.DefaultConfigFile()
	}
	if o.MCPVisorConfig, err = filepath.Abs(o.MCPVisorConfig); err != nil {
		return nil, err
	}
	exe, err := o.Executable()
	if err != nil {
		return nil, err
	}
	if o.StateDir == "" {
		o.StateDir = userdirs.DefaultStateDir()
	}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	existed := err == nil
	if !existed {
		data = nil
	}
	return &installRun{o: o, c: c, path: path, format: format, exe: exe, data: data, existed: existed}, nil
}

// checkRecord looks at an earlier install's record of the file: one that
// never reached the file is discarded; one whose file is as it left it
// means there is nothing to do (done); any other is an error.
func (r *installRun) checkRecord() (done bool, err error) {
	o, out := r.o, r.o.IO.Out
	rec, err := readRecord(o.StateDir, r.path)
	if err != nil || rec == nil {
		return false, err
	}
	if rec.never(r.data, r.existed) {
		// install-client stopped (a crash, a kill) after recording and
		// before writing: the file is still the one it copied
		fmt.Fprintf(out, "%s: an install of %s never reached the file; its record is discarded\n", r.path, rec.At.Format(time.RFC3339))
		return false, rec.discard(o.StateDir)
	}
	if r.existed && hashOf(r.data) == rec.SHA256 && rec.PerServer == o.PerServer {
		fmt.Fprintf(out, "%s: already launches mcpvisor (installed %s); nothing to do\n", r.path, rec.At.Format(time.RFC3339))
		return true, nil
	}
	return false, fmt.Errorf("%s: install-client changed it on %s and it is not as it left it: run `mcpvisor uninstall-client %s` first", r.path, rec.At.Format(time.RFC3339), r.c.Name)
}

// mcpvisorConfig reads mcpvisor's config, with --import the client's
// servers merged in first (written, unless --dry-run).
func (r *installRun) mcpvisorConfig() ([]byte, error) {
	o, out := r.o, r.o.IO.Out
	cfgData, err := os.ReadFile(o.MCPVisorConfig)
	if err != nil && !(errors.Is(err, fs.ErrNotExist) && o.Import) {
		return nil, fmt.Errorf("reading mcpvisor's config: %w (run `mcpvisor import %s` first)", err, r.c.Name)
	}
	cfgExisted := err == nil
	if !cfgExisted {
		cfgData = nil
	}
	if !o.Import {
		return cfgData, nil
	}
	var report bytes.Buffer
	merged, _, err := importInto(cfgData, o.MCPVisorConfig, clientFiles(r.c), &report, importMode{stored: r.stored,
		hint: "run `mcpvisor import --move-secrets " + r.c.Name + "` first to keep them in the secret store instead"})
	if err != nil && cfgData == nil {
		return nil, err
	}
	if err != nil || bytes.Equal(merged, cfgData) {
		return cfgData, nil
	}
	_, _ = io.Copy(out, &report)
	if o.DryRun {
		fmt.Fprint(out, clientcfg.DiffRedacted(cfgData, merged, clientcfg.FormatMCPServers, o.MCPVisorConfig, o.MCPVisorConfig+" (imported)"))
		return merged, nil
	}
	if err := os.MkdirAll(filepath.Dir(o.MCPVisorConfig), 0o700); err != nil {
		return nil, err
	}
	if err := clientcfg.ReplaceFile(o.MCPVisorConfig, merged, 0o600, cfgData, cfgExisted); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "%s: written\n", o.MCPVisorConfig)
	return merged, nil
}

// plan is the client's file as install-client would write it; servers
// mcpvisor's config lacks are an error that names them.
func (r *installRun) plan(cfgData []byte) (*clientcfg.Plan, error) {
	o := r.o
	mine, err := clientcfg.Read(cfgData, clientcfg.FormatMCPServers)
	if err != nil {
		return nil, fmt.Errorf("%s:%w", o.MCPVisorConfig, err)
	}
	var configured struct {
		StateDir string `json:"stateDir"`
	}
	_ = json.Unmarshal(cfgData, &configured) // strict JSON; read again by connect
	plan, err := r.c.PlanInstall(r.data, r.format, clientcfg.InstallOptions{
		Exe: r.exe, Config: o.MCPVisorConfig, StateDir: userdirs.DaemonStateDir(configured.StateDir),
		PerServer: o.PerServer, KeepRemote: !o.Remote, Known: mine.Servers, Secrets: r.stored, Launchers: parseLauncher,
		Project: clientcfg.ProjectDir(r.path, clientEnv().Home)})
	if err != nil {
		var ce *clientcfg.Error
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("%s:%w (the file is left as it is)", r.path, err)
		}
		return nil, fmt.Errorf("%s: %w (the file is left as it is)", r.path, err)
	}
	if len(plan.Missing) > 0 {
		var names []string
		for _, s := range plan.Missing {
			n := s.At
			if s.Tools != nil {
				n += " (with tools " + s.Tools.String() + ")"
			}
			names = append(names, n)
		}
		return nil, fmt.Errorf("%s: mcpvisor's config (%s) lacks %s: run `mcpvisor import %s` first, or pass --import", r.path, o.MCPVisorConfig, strings.Join(names, ", "), r.c.Name)
	}
	return plan, nil
}

// write writes the planned file: a copy of the old one next to it and
// the record first (a crash after the file is written leaves one for
// uninstall-client; one whose file was never written is told, never, and
// discarded by the next install-client), then the file.
func (r *installRun) write(plan *clientcfg.Plan) error {
	o := r.o
	rec := &installRecord{Client: r.c.Name, Path: r.path, PerServer: o.PerServer, SHA256: hashOf(plan.Data), Installed: string(plan.Data), At: o.Now().UTC()}
	mode := fs.FileMode(0o600)
	if r.existed {
		fi, err := os.Stat(r.path)
		if err != nil {
			return err
		}
		mode = fi.Mode().Perm()
		rec.Backup = r.path + ".mcpvisor-backup-" + rec.At.Format("20060102T150405Z")
		if err := writeNew(rec.Backup, r.data, mode); err != nil {
			return fmt.Errorf("backing up %s: %w", r.path, err)
		}
	} else if err := os.MkdirAll(filepath.Dir(r.path), 0o700); err != nil {
		return err
	}
	if err := writeRecord(o.StateDir, rec); err != nil {
		if rec.Backup != "" {
			_ = os.Remove(rec.Backup)
		}
		return err
	}
	if err := clientcfg.ReplaceFile(r.path, plan.Data, mode, r.data, r.existed); err != nil {
		_ = rec.discard(o.StateDir)
		return fmt.Errorf("writing %s: %w", r.path, err)
	}
	fmt.Fprintf(o.IO.Out, "%s: %s now launches %s through mcpvisor", r.path, r.c.Title, strings.Join(plan.Taken, ", "))
	if rec.Backup != "" {
		fmt.Fprintf(o.IO.Out, " (the file as it was: %s)", rec.Backup)
	}
	fmt.Fprintln(o.IO.Out)
	return nil
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, data []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Chmod(mode); err != nil { // the umask may have taken bits
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil { // on disk before the file it backs up is replaced
		f.Close()
		return err
	}
	return f.Close()
}

func writeRecord(stateDir string, rec *installRecord) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	file := recordFile(stateDir, rec.Path)
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	return clientcfg.WriteFileAtomic(file, data, 0o600)
}

// UninstallOptions are uninstall-client's.
type UninstallOptions struct {
	IO cmdutil.IOStreams
	// Client is the client named (an argument).
	Client               string
	DryRun, Force        bool
	ConfigPath, StateDir string
}

// NewCmdUninstall is uninstall-client: its flags fill an
// UninstallOptions, run by runF (nil: RunUninstall).
func NewCmdUninstall(streams cmdutil.IOStreams, runF func(context.Context, *UninstallOptions) error) *cobra.Command {
	o := &UninstallOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "uninstall-client CLIENT [--dry-run] [--force] [--config-path FILE]",
		Short: "Put back a client's configuration as it was before install-client",
		Long: `Put back a client's configuration as it was before install-client.

Restores the copy install-client made, byte for byte (and its mode), or
removes the file when install-client created it, then deletes the copy.
When the file changed since install-client wrote it (the client keeps
its state there, or you edited it), only the server entries
install-client changed are put back as they were; everything else stays
as it is now. When those entries themselves changed since,
uninstall-client refuses and prints what changed, so that nothing is
lost silently; --force puts them back anyway (the rest of the file is
still kept). --dry-run prints the change as a unified diff and writes
nothing. A file another program writes while uninstall-client works on
it is left as that program wrote it (run again).

` + diffSecretsHelp,
		Args: cobra.ExactArgs(1),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			o.Client = args[0]
			return nil
		}, runF, RunUninstall),
	}
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "print the change as a unified diff; write nothing")
	cmd.Flags().BoolVar(&o.Force, "force", false, "put the entries back even when they changed since install-client")
	cmd.Flags().StringVar(&o.ConfigPath, "config-path", "", "the client's configuration file (default: where the client keeps it)")
	cmd.Flags().StringVar(&o.StateDir, "state-dir", "", "where installs are recorded (default $XDG_STATE_HOME/mcpvisor)")
	return cmd
}

// original is the client's file as it was before install-client, and its
// mode: nil and 0600 if there was none.
func (rec *installRecord) original() ([]byte, fs.FileMode, error) {
	if rec.Backup == "" {
		return nil, 0o600, nil
	}
	orig, err := os.ReadFile(rec.Backup)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the copy: %w", err)
	}
	fi, err := os.Stat(rec.Backup)
	if err != nil {
		return nil, 0, err
	}
	return orig, fi.Mode().Perm(), nil
}

// restore writes next over the client's file at path (what it holds now:
// cur, if it existed), or removes the file when install-client created it
// (remove). A whole restore takes the copy's mode; a spliced one keeps the
// file's.
func restore(path string, next []byte, mode fs.FileMode, cur []byte, curExisted, whole, remove bool) error {
	if remove {
		target, err := clientcfg.Resolve(path)
		if err != nil {
			return err
		}
		if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if !whole {
		if fi, err := os.Stat(path); err == nil {
			mode = fi.Mode().Perm() // the file's now
		}
	}
	if err := clientcfg.ReplaceFile(path, next, mode, cur, curExisted); err != nil {
		return err
	}
	if !whole {
		return nil
	}
	target, err := clientcfg.Resolve(path)
	if err != nil {
		return err
	}
	return os.Chmod(target, mode)
}

// RunUninstall puts the client's file back: the copy byte for byte when
// the file is as install-client left it, else only the server entries it
// changed.
func RunUninstall(_ context.Context, o *UninstallOptions) error {
	out := o.IO.Out
	c, path, format, err := clientTarget(o.Client, o.ConfigPath)
	if err != nil {
		return err
	}
	if o.StateDir == "" {
		o.StateDir = userdirs.DefaultStateDir()
	}
	stateDir := o.StateDir
	rec, err := readRecord(stateDir, path)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("%s: install-client has not changed it (no record in %s)", path, filepath.Join(stateDir, "clients"))
	}
	cur, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	curExisted := err == nil
	if !curExisted {
		cur = nil
	}
	orig, mode, err := rec.original()
	if err != nil {
		return err
	}
	// Unchanged since install: the copy goes back byte for byte.
	// Changed: only the server entries install-client changed go
	// back, in what the file holds now (a client that keeps its
	// state in the file, as Claude Code does, loses none of it).
	whole := curExisted && hashOf(cur) == rec.SHA256
	next := orig
	switch {
	case whole:
	case !curExisted && !o.Force:
		return fmt.Errorf("%s was removed since install-client wrote it on %s; pass --force to put the copy back", path, rec.At.Format(time.RFC3339))
	case !curExisted:
		whole = true
	default:
		spliced, conflicts, err := c.PlanUninstall(orig, []byte(rec.Installed), cur, format, o.Force)
		if err != nil {
			return fmt.Errorf("%s: %w (the file is left as it is)", path, err)
		}
		if len(conflicts) > 0 && !o.Force {
			return fmt.Errorf("%s changed since install-client wrote it on %s, in the entries it wrote (%s); putting them back would lose this (pass --force to put them back anyway; the rest of the file is kept):\n%s",
				path, rec.At.Format(time.RFC3339), strings.Join(conflicts, ", "), clientcfg.DiffRedacted([]byte(rec.Installed), cur, format, path+" (as installed)", path+" (now)"))
		}
		next = spliced
		if len(conflicts) > 0 {
			fmt.Fprintf(out, "%s: %s changed since install-client; put back as they were (--force)\n", path, strings.Join(conflicts, ", "))
		}
		fmt.Fprintf(out, "%s: changed since install-client wrote it on %s: only the server entries it changed are put back; the rest stays as it is now\n", path, rec.At.Format(time.RFC3339))
	}
	remove := whole && rec.Backup == ""
	if o.DryRun {
		fmt.Fprint(out, clientcfg.DiffRedacted(cur, next, format, path, path+" (restored)"))
		return nil
	}
	if err := restore(path, next, mode, cur, curExisted, whole, remove); err != nil {
		return err
	}
	if err := rec.discard(stateDir); err != nil {
		return err
	}
	if whole {
		fmt.Fprintf(out, "%s: restored as it was before install-client\n", path)
	} else {
		fmt.Fprintf(out, "%s: the server entries are back as they were before install-client\n", path)
	}
	return nil
}
