package svc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/service"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
	"github.com/mcpvisor/mcpvisor/internal/userdirs"
)

// Options are service install's and uninstall's.
type Options struct {
	IO cmdutil.IOStreams
	// Config is the config the service serves ("": the user's); StateDir
	// its state directory ("": the config's, else the user's).
	Config, StateDir string
	service.Options
	// Host is the user and machine the service is for (this one, its
	// service manager run for real).
	Host func(out io.Writer) (service.Host, error)
	// Executable is what the service runs (cmdutil.Executable).
	Executable func() (string, error)
}

// NewCmdService is service, with install and uninstall: their flags fill
// an Options, run by runF (nil: RunInstall or RunUninstall).
func NewCmdService(streams cmdutil.IOStreams, runF func(ctx context.Context, action string, o *Options) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "service install|uninstall",
		Short: "Run mcpvisor serve at login, as a user service (systemd on Linux, launchd on macOS)",
		Long: `mcpvisor service install writes a user service that runs this mcpvisor binary's
serve at every login, and starts it now: a systemd user unit,
$XDG_CONFIG_HOME/systemd/user/mcpvisor.service (systemctl --user), on Linux;
a launchd agent, ~/Library/LaunchAgents/` + service.Label + `.plist
(launchctl bootstrap gui/UID), on macOS. The config file must validate. A
definition already there is left alone when it is the same, and replaced only
with --force, after its difference is shown. --dry-run prints what would be
written and run, and does neither.

mcpvisor service uninstall stops the service and removes its definition.`,
		Args: cobra.NoArgs,
	}
	o := &Options{IO: streams, Host: thisHost, Executable: cmdutil.Executable}
	run := func(action string, f func(context.Context, *Options) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			o.IO = streams.Or(cmd)
			if runF != nil {
				return runF(cmd.Context(), action, o)
			}
			return f(cmd.Context(), o)
		}
	}
	install := &cobra.Command{
		Use:   "install [--config FILE] [--state-dir DIR] [--dry-run] [--force]",
		Short: "Install and start the user service that runs mcpvisor serve at login",
		Args:  cobra.NoArgs,
		RunE:  run("install", RunInstall),
	}
	install.Flags().StringVarP(&o.Config, "config", "c", "", "configuration file the service serves (default $XDG_CONFIG_HOME/mcpvisor/config.json)")
	install.Flags().StringVar(&o.StateDir, "state-dir", "", "state directory (default from the config, else $XDG_STATE_HOME/mcpvisor)")
	install.Flags().BoolVar(&o.DryRun, "dry-run", false, "print what would be written and run; do neither")
	install.Flags().BoolVar(&o.Force, "force", false, "replace a different service definition")
	uninstall := &cobra.Command{
		Use:   "uninstall [--dry-run] [--force]",
		Short: "Stop the user service and remove its definition",
		Args:  cobra.NoArgs,
		RunE:  run("uninstall", RunUninstall),
	}
	uninstall.Flags().BoolVar(&o.DryRun, "dry-run", false, "print what would be run and removed; do neither")
	uninstall.Flags().BoolVar(&o.Force, "force", false, "remove a definition mcpvisor service install did not write")
	cmd.AddCommand(install, uninstall)
	return cmd
}

// RunInstall writes the user service that serves o.Config at login, and
// starts it (service.Install), the config validated first.
func RunInstall(ctx context.Context, o *Options) error {
	spec, err := serviceSpec(o.Executable, o.Config, o.StateDir)
	if err != nil {
		return err
	}
	h, err := o.Host(o.IO.Out)
	if err != nil {
		return err
	}
	return service.Install(ctx, h, spec, o.Options)
}

// RunUninstall stops the user service and removes its definition.
func RunUninstall(ctx context.Context, o *Options) error {
	h, err := o.Host(o.IO.Out)
	if err != nil {
		return err
	}
	return service.Uninstall(ctx, h, o.Options)
}

// serviceSpec is the service of this binary serving configFile ("" for
// the user's default config), the config validated first.
func serviceSpec(executable func() (string, error), configFile, stateDir string) (service.Spec, error) {
	exe, err := executable()
	if err != nil {
		return service.Spec{}, shutdown.UsageError{Err: err}
	}
	if configFile == "" {
		if configFile, err = userdirs.ConfigFile(); err != nil {
			return service.Spec{}, err
		}
	}
	if configFile, err = filepath.Abs(configFile); err != nil {
		return service.Spec{}, err
	}
	if _, err := os.Stat(configFile); errors.Is(err, fs.ErrNotExist) {
		return service.Spec{}, fmt.Errorf("no config file at %s for the service to serve (--config names another)", configFile)
	}
	cfg, err := config.Load(configFile, config.LoadOptions{})
	if err != nil {
		return service.Spec{}, fmt.Errorf("the service would serve %s, which does not validate (mcpvisor validate --config %s): %w", configFile, configFile, err)
	}
	spec := service.Spec{Executable: exe, Config: configFile, Path: os.Getenv("PATH")}
	switch {
	case stateDir != "":
		// Given: passed on.
		if spec.StateDir, err = filepath.Abs(stateDir); err != nil {
			return service.Spec{}, err
		}
		spec.LogDir = spec.StateDir
	case cfg.StateDir != "":
		// The config's: serve reads it there, as a reload may change it.
		if !filepath.IsAbs(cfg.StateDir) {
			return service.Spec{}, fmt.Errorf("%s: stateDir %q is relative, and a service runs in a directory of its manager's choosing (systemd: the home directory; launchd: /): make it absolute, or give --state-dir", configFile, cfg.StateDir)
		}
		spec.LogDir = cfg.StateDir
	default:
		spec.StateDir = userdirs.DaemonStateDir(cfg.StateDir)
		spec.LogDir = spec.StateDir
	}
	return spec, nil
}

// thisHost is this user on this machine, its service manager run for
// real, what it runs printed to out.
func thisHost(out io.Writer) (service.Host, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return service.Host{}, fmt.Errorf("the service goes in the home directory: %w", err)
	}
	if _, err := service.Location(runtime.GOOS, home, ""); err != nil {
		return service.Host{}, err
	}
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	} else if name == "" {
		return service.Host{}, errors.New("who is this user? (no USER, and the user database does not say)")
	}
	return service.Host{
		GOOS: runtime.GOOS, Home: home, XDGConfigHome: os.Getenv("XDG_CONFIG_HOME"),
		UID: os.Getuid(), User: name, LingerDir: "/var/lib/systemd/linger",
		Runner: service.ExecRunner{}, Out: out,
	}, nil
}
