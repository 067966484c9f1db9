package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/clientcfg"
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

// mcpvisorExecutable is the path a client is to launch: the running
// executable as the user named it (a symlink kept), absolute. A `go run`
// build, which is deleted when it exits, is refused.
func mcpvisorExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if arg := os.Args[0]; arg != "" {
		p := arg
		if !strings.ContainsRune(arg, filepath.Separator) {
			p, _ = exec.LookPath(arg)
		}
		if p != "" {
			if abs, err := filepath.Abs(p); err == nil {
				a, errA := os.Stat(abs)
				b, errB := os.Stat(exe)
				if errA == nil && errB == nil && os.SameFile(a, b) {
					exe = abs
				}
			}
		}
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil && isGoRunBuild(resolved) {
		return "", fmt.Errorf("this mcpvisor is a temporary `go run` build (%s), deleted when it exits: install mcpvisor (go install, make build, or a release) and run %s with it", resolved, strings.Join(os.Args[1:min(len(os.Args), 3)], " "))
	}
	return exe, nil
}

// isGoRunBuild reports whether an executable is one `go run` (or `go
// test`) built in its work directory, go-build… under GOTMPDIR or the
// system temp dir, which is deleted when the command ends.
func isGoRunBuild(path string) bool {
	for _, tmp := range []string{os.Getenv("GOTMPDIR"), os.TempDir()} {
		if tmp == "" {
			continue
		}
		if t, err := filepath.EvalSymlinks(tmp); err == nil {
			tmp = t
		}
		if rel, err := filepath.Rel(tmp, path); err == nil && strings.HasPrefix(rel, "go-build") {
			return true
		}
	}
	return false
}

// clientTarget is the client named and the file install-client and
// uninstall-client work on (override, else where the client keeps it),
// with the format it is in.
func clientTarget(name, override string) (*clientcfg.Client, string, clientcfg.Format, error) {
	c := clientcfg.Lookup(name)
	if c == nil {
		return nil, "", 0, usageError{Err: fmt.Errorf("unknown client %q (known: %s)", name, strings.Join(clientcfg.Names(), ", "))}
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

func newInstallClientCmd() *cobra.Command {
	var (
		dryRun, perServer, doImport, remote  bool
		configPath, mcpvisorConfig, stateDir string
	)
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
to do both. Remote entries (url) are left to the client by default: the
client keeps reaching them itself; if mcpvisor's config has them too, the
default "mcpvisor" entry serves them as well, so the client sees their
tools twice: remove one, or pass --remote to take them over (mcpvisor then
proxies them). Entries mcpvisor cannot run (VS Code inputs, Zed
extensions), or that the client restricts in ways mcpvisor cannot carry
(VS Code's sandbox or envFile, Codex's env_vars or approval modes, a
sign-in, a field mcpvisor does not know), stay as they are: the output
names them and their fields, and mcpvisor's config need not have them.
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
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			c, path, format, err := clientTarget(args[0], configPath)
			if err != nil {
				return err
			}
			if mcpvisorConfig == "" {
				mcpvisorConfig = userdirs.DefaultConfigFile()
			}
			if mcpvisorConfig, err = filepath.Abs(mcpvisorConfig); err != nil {
				return err
			}
			exe, err := mcpvisorExecutable()
			if err != nil {
				return err
			}
			if stateDir == "" {
				stateDir = userdirs.DefaultStateDir()
			}
			data, err := os.ReadFile(path)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			existed := err == nil
			if !existed {
				data = nil
			}
			rec, err := readRecord(stateDir, path)
			if err != nil {
				return err
			}
			if rec != nil && rec.never(data, existed) {
				// install-client stopped (a crash, a kill) after recording
				// and before writing: the file is still the one it copied
				fmt.Fprintf(out, "%s: an install of %s never reached the file; its record is discarded\n", path, rec.At.Format(time.RFC3339))
				if err := rec.discard(stateDir); err != nil {
					return err
				}
				rec = nil
			}
			if rec != nil {
				if existed && hashOf(data) == rec.SHA256 && rec.PerServer == perServer {
					fmt.Fprintf(out, "%s: already launches mcpvisor (installed %s); nothing to do\n", path, rec.At.Format(time.RFC3339))
					return nil
				}
				return fmt.Errorf("%s: install-client changed it on %s and it is not as it left it: run `mcpvisor uninstall-client %s` first", path, rec.At.Format(time.RFC3339), c.Name)
			}
			cfgData, err := os.ReadFile(mcpvisorConfig)
			if err != nil && !(errors.Is(err, fs.ErrNotExist) && doImport) {
				return fmt.Errorf("reading mcpvisor's config: %w (run `mcpvisor import %s` first)", err, c.Name)
			}
			cfgExisted := err == nil
			if !cfgExisted {
				cfgData = nil
			}
			if doImport {
				var report bytes.Buffer
				merged, err := importInto(cfgData, mcpvisorConfig, clientFiles(c), &report)
				if err != nil && cfgData == nil {
					return err
				}
				if err == nil && !bytes.Equal(merged, cfgData) {
					io.Copy(out, &report)
					if dryRun {
						fmt.Fprint(out, clientcfg.DiffRedacted(cfgData, merged, clientcfg.FormatMCPServers, mcpvisorConfig, mcpvisorConfig+" (imported)"))
					} else {
						if err := os.MkdirAll(filepath.Dir(mcpvisorConfig), 0o700); err != nil {
							return err
						}
						if err := clientcfg.ReplaceFile(mcpvisorConfig, merged, 0o600, cfgData, cfgExisted); err != nil {
							return err
						}
						fmt.Fprintf(out, "%s: written\n", mcpvisorConfig)
					}
					cfgData = merged
				}
			}
			mine, err := clientcfg.Read(cfgData, clientcfg.FormatMCPServers)
			if err != nil {
				return fmt.Errorf("%s:%w", mcpvisorConfig, err)
			}
			var configured struct {
				StateDir string `json:"stateDir"`
			}
			_ = json.Unmarshal(cfgData, &configured) // strict JSON; read again by connect
			plan, err := c.PlanInstall(data, format, clientcfg.InstallOptions{
				Exe: exe, Config: mcpvisorConfig, StateDir: userdirs.DaemonStateDir(configured.StateDir),
				PerServer: perServer, Remote: remote, Known: mine.Servers,
				Project: clientcfg.ProjectDir(path, clientEnv().Home)})
			if err != nil {
				var ce *clientcfg.Error
				if errors.As(err, &ce) {
					return fmt.Errorf("%s:%w (the file is left as it is)", path, err)
				}
				return fmt.Errorf("%s: %w (the file is left as it is)", path, err)
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
				return fmt.Errorf("%s: mcpvisor's config (%s) lacks %s: run `mcpvisor import %s` first, or pass --import", path, mcpvisorConfig, strings.Join(names, ", "), c.Name)
			}
			for _, k := range plan.Kept {
				fmt.Fprintf(out, "%s: %s: %s\n", path, k.At, k.Msg)
			}
			for _, d := range plan.Dropped {
				fmt.Fprintf(out, "%s: %s: %s\n", path, d.At, d.Msg)
			}
			if dryRun {
				fmt.Fprint(out, clientcfg.DiffRedacted(data, plan.Data, format, path, path+" (installed)"))
				return nil
			}
			rec = &installRecord{Client: c.Name, Path: path, PerServer: perServer, SHA256: hashOf(plan.Data), Installed: string(plan.Data), At: time.Now().UTC()}
			mode := fs.FileMode(0o600)
			if existed {
				fi, err := os.Stat(path)
				if err != nil {
					return err
				}
				mode = fi.Mode().Perm()
				rec.Backup = path + ".mcpvisor-backup-" + rec.At.Format("20060102T150405Z")
				if err := writeNew(rec.Backup, data, mode); err != nil {
					return fmt.Errorf("backing up %s: %w", path, err)
				}
			} else if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return err
			}
			// The record first: a crash after the file is written leaves
			// one for uninstall-client; one whose file was never written
			// is told (never) and discarded by the next install-client.
			if err := writeRecord(stateDir, rec); err != nil {
				if rec.Backup != "" {
					os.Remove(rec.Backup)
				}
				return err
			}
			if err := clientcfg.ReplaceFile(path, plan.Data, mode, data, existed); err != nil {
				rec.discard(stateDir)
				return fmt.Errorf("writing %s: %w", path, err)
			}
			fmt.Fprintf(out, "%s: %s now launches %s through mcpvisor", path, c.Title, strings.Join(plan.Taken, ", "))
			if rec.Backup != "" {
				fmt.Fprintf(out, " (the file as it was: %s)", rec.Backup)
			}
			fmt.Fprintln(out)
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the change as a unified diff; write nothing")
	cmd.Flags().BoolVar(&perServer, "per-server", false, "one entry per server instead of one for all")
	cmd.Flags().BoolVar(&doImport, "import", false, "import the client's servers into mcpvisor's config first")
	cmd.Flags().BoolVar(&remote, "remote", false, "take over remote (url) entries too")
	cmd.Flags().StringVar(&configPath, "config-path", "", "the client's configuration file (default: where the client keeps it)")
	cmd.Flags().StringVar(&mcpvisorConfig, "mcpvisor-config", "", "mcpvisor's configuration file (default $XDG_CONFIG_HOME/mcpvisor/config.json)")
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "where installs are recorded (default $XDG_STATE_HOME/mcpvisor)")
	return cmd
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

func newUninstallClientCmd() *cobra.Command {
	var (
		dryRun, force        bool
		configPath, stateDir string
	)
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
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			c, path, format, err := clientTarget(args[0], configPath)
			if err != nil {
				return err
			}
			if stateDir == "" {
				stateDir = userdirs.DefaultStateDir()
			}
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
			var orig []byte
			mode := fs.FileMode(0o600)
			if rec.Backup != "" {
				if orig, err = os.ReadFile(rec.Backup); err != nil {
					return fmt.Errorf("reading the copy: %w", err)
				}
				fi, err := os.Stat(rec.Backup)
				if err != nil {
					return err
				}
				mode = fi.Mode().Perm()
			}
			// Unchanged since install: the copy goes back byte for byte.
			// Changed: only the server entries install-client changed go
			// back, in what the file holds now (a client that keeps its
			// state in the file, as Claude Code does, loses none of it).
			whole := curExisted && hashOf(cur) == rec.SHA256
			next := orig
			switch {
			case whole:
			case !curExisted && !force:
				return fmt.Errorf("%s was removed since install-client wrote it on %s; pass --force to put the copy back", path, rec.At.Format(time.RFC3339))
			case !curExisted:
				whole = true
			default:
				spliced, conflicts, err := c.PlanUninstall(orig, []byte(rec.Installed), cur, format, force)
				if err != nil {
					return fmt.Errorf("%s: %w (the file is left as it is)", path, err)
				}
				if len(conflicts) > 0 && !force {
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
			if dryRun {
				fmt.Fprint(out, clientcfg.DiffRedacted(cur, next, format, path, path+" (restored)"))
				return nil
			}
			if remove {
				target, err := clientcfg.Resolve(path)
				if err != nil {
					return err
				}
				if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			} else {
				if !whole {
					if fi, err := os.Stat(path); err == nil {
						mode = fi.Mode().Perm() // the file's now
					}
				}
				if err := clientcfg.ReplaceFile(path, next, mode, cur, curExisted); err != nil {
					return err
				}
				if whole {
					target, err := clientcfg.Resolve(path)
					if err != nil {
						return err
					}
					if err := os.Chmod(target, mode); err != nil {
						return err
					}
				}
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
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the change as a unified diff; write nothing")
	cmd.Flags().BoolVar(&force, "force", false, "put the entries back even when they changed since install-client")
	cmd.Flags().StringVar(&configPath, "config-path", "", "the client's configuration file (default: where the client keeps it)")
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "where installs are recorded (default $XDG_STATE_HOME/mcpvisor)")
	return cmd
}
