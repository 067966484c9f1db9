// Package secret is mcpvisor secret set|rm|ls: the secrets that
// ${keyring:NAME} references in the config resolve to, kept in the OS
// keyring or, where there is none, in a 0600 file in the state directory
// (package internal/secret).
package secret

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/secret"
	"github.com/mcpvisor/mcpvisor/internal/userdirs"
)

// Options are secret set's, rm's and ls's.
type Options struct {
	IO cmdutil.IOStreams
	// ConfigFile ("": the user's) gives the state directory when
	// StateDir is "", as serve takes it.
	ConfigFile, StateDir string
	// Open opens the store of a state directory (nil: secret.Open).
	Open func(stateDir string) secret.Store
	// Terminal reports whether In is a terminal, and ReadHidden reads a
	// line from it without echo (nil: the process's own stdin).
	Terminal   func(io.Reader) bool
	ReadHidden func(io.Reader) (string, error)
	// Name is set's and rm's secret.
	Name string
}

// NewCmdSecret is secret, with set, rm and ls: their flags fill an
// Options, run by runF (nil: RunSet, RunRm or RunLs).
func NewCmdSecret(streams cmdutil.IOStreams, runF func(ctx context.Context, action string, o *Options) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret set|rm|ls",
		Short: "Keep the secrets that ${keyring:NAME} references in the config resolve to",
		Long: `mcpvisor secret keeps named secrets for the config's ${keyring:NAME}
references, in the OS keyring (the Secret Service on Linux, the macOS
Keychain) when one answers, else in <state dir>/secrets.json, a file only you
may read (0600). serve reads them from the same place when a server that
refers to one starts; a changed secret applies at that server's next start
(mcpvisor restart NAME).

  mcpvisor secret set NAME   reads the value from stdin, or asks for it
                             without echo on a terminal (never from the
                             command line, where ps and the shell's history
                             would see it)
  mcpvisor secret rm NAME    removes it
  mcpvisor secret ls         lists the names, and where they are kept

NAME is letters, digits, '.', '_', '-' and '/' (github.GITHUB_TOKEN); names
starting with oauth/ are mcpvisor login's records, which set and rm refuse.`,
		Args: cobra.NoArgs,
	}
	o := &Options{IO: streams}
	run := func(action string, f func(context.Context, *Options) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			if len(args) > 0 {
				o.Name = args[0]
				if err := secret.CheckName(o.Name); err != nil {
					return err
				}
				if secret.Reserved(o.Name) {
					if action == "rm" {
						return fmt.Errorf("%s is the OAuth record of %s, kept by mcpvisor login: remove it with `mcpvisor logout %s`", o.Name, strings.TrimPrefix(o.Name, secret.OAuthPrefix), strings.TrimPrefix(o.Name, secret.OAuthPrefix))
					}
					return secret.CheckUserName(o.Name)
				}
			}
			if runF != nil {
				return runF(cmd.Context(), action, o)
			}
			return f(cmd.Context(), o)
		}
	}
	set := &cobra.Command{Use: "set NAME", Short: "Set a secret, read from stdin or asked for without echo", Args: cobra.ExactArgs(1), RunE: run("set", RunSet)}
	rm := &cobra.Command{Use: "rm NAME", Short: "Remove a secret", Args: cobra.ExactArgs(1), RunE: run("rm", RunRm)}
	ls := &cobra.Command{Use: "ls", Short: "List the secrets' names, and where they are kept", Args: cobra.NoArgs, RunE: run("ls", RunLs)}
	for _, c := range []*cobra.Command{set, rm, ls} {
		c.Flags().StringVar(&o.ConfigFile, "config", "", "config file whose stateDir to use (default $XDG_CONFIG_HOME/mcpvisor/config.json)")
		c.Flags().StringVar(&o.StateDir, "state-dir", "", "state directory (default from the config, else $XDG_STATE_HOME/mcpvisor)")
		cmd.AddCommand(c)
	}
	return cmd
}

// StateDir is the state directory serve uses: stateDir if set, else the
// config's stateDir (configFile, "" for the user's), else the default.
func StateDir(configFile, stateDir string) (string, error) {
	if stateDir == "" {
		if configFile == "" {
			configFile, _ = userdirs.ConfigFile()
		}
		if configFile != "" {
			if data, err := config.ReadFile(configFile); err == nil {
				if cfg, err := config.Parse(data, configFile, config.LoadOptions{}); err == nil {
					stateDir = cfg.StateDir
				}
			}
		}
	}
	if stateDir == "" {
		d, err := userdirs.StateDir()
		if err != nil {
			return "", err
		}
		stateDir = d
	}
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	return stateDir, nil
}

// Store opens the store serve would use for o's config and state
// directory: what `mcpvisor import --move-secrets` stores secrets in.
func (o *Options) Store() (secret.Store, error) {
	dir, err := StateDir(o.ConfigFile, o.StateDir)
	if err != nil {
		return nil, err
	}
	open := o.Open
	if open == nil {
		open = secret.Open
	}
	return open(dir), nil
}

// OpenStore is the store serve uses with this config file and state
// directory ("" for the defaults).
func OpenStore(configFile, stateDir string) (secret.Store, error) {
	o := Options{ConfigFile: configFile, StateDir: stateDir}
	return o.Store()
}

// timeout bounds one command's work with the store (each keyring call is
// bounded on its own too).
const timeout = 30 * time.Second

// RunSet sets o.Name to a value read from o.IO.In: asked for without echo
// on a terminal, else all of it (one trailing newline dropped).
func RunSet(ctx context.Context, o *Options) error {
	value, err := o.readValue()
	if err != nil {
		return err
	}
	s, err := o.Store()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.Set(ctx, o.Name, value); err != nil {
		return fmt.Errorf("setting %s: %w", o.Name, err)
	}
	fmt.Fprintf(o.IO.ErrOut, "set %s in the %s; refer to it as ${keyring:%s}\n", o.Name, s.Backend(), o.Name)
	return nil
}

// RunRm removes o.Name.
func RunRm(ctx context.Context, o *Options) error {
	s, err := o.Store()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.Delete(ctx, o.Name); err != nil {
		if errors.Is(err, secret.ErrNotFound) {
			return fmt.Errorf("no secret named %s in the %s", o.Name, s.Backend())
		}
		return fmt.Errorf("removing %s: %w", o.Name, err)
	}
	fmt.Fprintf(o.IO.ErrOut, "removed %s from the %s\n", o.Name, s.Backend())
	return nil
}

// RunLs lists the names, then where they are kept.
func RunLs(ctx context.Context, o *Options) error {
	s, err := o.Store()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	names, err := s.List(ctx)
	if err != nil {
		return err
	}
	records := 0
	for _, n := range names {
		fmt.Fprintln(o.IO.Out, n)
		if secret.Reserved(n) {
			records++
		}
	}
	fmt.Fprintf(o.IO.ErrOut, "%d secret(s) in the %s\n", len(names), s.Backend())
	if records > 0 {
		fmt.Fprintf(o.IO.ErrOut, "%d of them OAuth records (oauth/NAME), kept by mcpvisor login; mcpvisor logout NAME removes one\n", records)
	}
	return nil
}

// readValue reads the secret: without echo from a terminal, else all of
// stdin (at most secret.MaxFileSize bytes, less one trailing newline).
func (o *Options) readValue() (string, error) {
	isTerm, readHidden := o.Terminal, o.ReadHidden
	if isTerm == nil {
		isTerm = isTerminal
	}
	if readHidden == nil {
		readHidden = readNoEcho
	}
	var v string
	if isTerm(o.IO.In) {
		fmt.Fprintf(o.IO.ErrOut, "Value of %s (not shown): ", o.Name)
		line, err := readHidden(o.IO.In)
		fmt.Fprintln(o.IO.ErrOut)
		if err != nil {
			return "", fmt.Errorf("reading the value: %w", err)
		}
		v = line
	} else {
		data, err := io.ReadAll(io.LimitReader(o.IO.In, secret.MaxFileSize+1))
		if err != nil {
			return "", fmt.Errorf("reading the value from stdin: %w", err)
		}
		if len(data) > secret.MaxFileSize {
			return "", fmt.Errorf("the value on stdin is larger than %d KiB", secret.MaxFileSize>>10)
		}
		v = string(data)
		if t, ok := strings.CutSuffix(v, "\n"); ok {
			v = strings.TrimSuffix(t, "\r")
		}
	}
	if v == "" {
		return "", errors.New("empty value: nothing set (pipe the value in, e.g. `printf %s \"$TOKEN\" | mcpvisor secret set NAME`)")
	}
	return v, nil
}

// isTerminal reports whether r is a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := getTermios(int(f.Fd()))
	return err == nil
}

// readNoEcho reads a line from the terminal r with echo off, restoring
// the terminal's mode after.
func readNoEcho(r io.Reader) (string, error) {
	f := r.(*os.File)
	fd := int(f.Fd())
	old, err := getTermios(fd)
	if err != nil {
		return "", err
	}
	noEcho := *old
	noEcho.Lflag &^= echoFlags
	noEcho.Lflag |= icanon
	if err := setTermios(fd, &noEcho); err != nil {
		return "", err
	}
	defer setTermios(fd, old)
	line, err := bufio.NewReader(io.LimitReader(f, secret.MaxFileSize)).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}
