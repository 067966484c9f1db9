package diag

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/secret"
	"github.com/mcpvisor/mcpvisor/internal/userdirs"
)

// NewCmdDoctor is doctor.
func NewCmdDoctor(streams cmdutil.IOStreams) *cobra.Command {
	var stateDir, configFile string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Show which process-containment layers and resource limits work on this machine, and why others do not",
		Long: `doctor opens mcpvisor's process runtime exactly as serve does and reports each
containment layer: process group, pidfd, parent-death signal, child subreaper,
pid namespace, cgroup v2, and the start-up sweep of trees that a killed
mcpvisor left behind (which it runs, as serve would); then each kind of
resource limit (memory, pids, cpu): the cgroup controller, v2 or v1, and the
directory that enforce it, or why it cannot be; and where per-server usage
comes from. With --config it names each server whose configured limits
cannot be enforced here (it would run without them), and with the config's
"auth" (team identity) it names the issuer, says whether its metadata and
keys can be fetched from here, and that a static token is an admin
credential.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			io := streams.Or(cmd)
			var cfg *config.Config
			if configFile != "" {
				var err error
				if cfg, err = config.Load(configFile, config.LoadOptions{}); err != nil {
					return err
				}
			}
			log := slog.New(slog.NewTextHandler(io.ErrOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
			rt, err := proc.Open(proc.Options{StateDir: stateDir, Logger: log})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			defer rt.Close(ctx)
			rep := rt.Report()
			secrets := secretBackend(stateDir)
			var auth *authReport
			if cfg != nil && cfg.Auth != nil {
				ctx := cmd.Context()
				if ctx == nil {
					ctx = context.Background()
				}
				auth = checkAuth(ctx, cfg.Auth)
			}
			if asJSON {
				enc := json.NewEncoder(io.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(doctorJSON{Report: rep, Servers: serverLimits(rep, cfg), Secrets: secrets, Auth: auth})
			}
			return printDoctor(io.Out, rep, stateDir, cfg, secrets, auth)
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", userdirs.DefaultStateDir(), "state directory (ledger of running instances, caches)")
	cmd.Flags().StringVarP(&configFile, "config", "c", "", "configuration file: also check its servers' resource limits")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// doctorJSON is doctor's --json output: the runtime's report and, with
// --config, each server that has limits.
type doctorJSON struct {
	proc.Report
	Servers []serverLimit `json:"servers,omitempty"`
	// Secrets says where ${keyring:NAME} references are looked up.
	Secrets string `json:"secrets"`
	// Auth is the config's team identity, with --config and "auth".
	Auth *authReport `json:"auth,omitempty"`
}

// secretBackend says which store keeps the secrets that ${keyring:NAME}
// references resolve to (as serve, given this state directory, opens
// it), and why not the keyring when it is the file.
func secretBackend(stateDir string) string {
	s, why := secret.OpenReport(stateDir, secret.Options{})
	if why != "" {
		return s.Backend() + "; not the OS keyring: " + why
	}
	return s.Backend()
}

// serverLimit is one configured server's kernel limits, and those of them
// this machine cannot enforce, with why.
type serverLimit struct {
	Name        string       `json:"name"`
	Limits      string       `json:"limits"`
	NotEnforced []proc.Layer `json:"notEnforced,omitempty"`
}

// serverLimits lists the enabled local servers of cfg (nil: none) that
// have limits the kernel enforces.
func serverLimits(rep proc.Report, cfg *config.Config) []serverLimit {
	if cfg == nil {
		return nil
	}
	var out []serverLimit
	for _, s := range cfg.Servers {
		if s.Disabled || s.Kind != config.KindStdio || !s.Limits.Kernel() {
			continue
		}
		l := &proc.Limits{MemoryBytes: s.Limits.Memory, PIDs: s.Limits.PIDs, CPU: s.Limits.CPU}
		out = append(out, serverLimit{Name: s.Name, Limits: l.String(), NotEnforced: rep.NotEnforced(l)})
	}
	return out
}

func printDoctor(w io.Writer, rep proc.Report, stateDir string, cfg *config.Config, secrets string, auth *authReport) error {
	fmt.Fprintln(w, cmdutil.Version())
	fmt.Fprintf(w, "uid %d, state directory %s\n", os.Getuid(), stateDir)
	fmt.Fprintf(w, "secrets (${keyring:NAME}): %s\n\n", secrets)
	if auth != nil {
		printAuth(w, auth)
	}
	fmt.Fprint(w, rep.String())
	fmt.Fprintln(w)
	if cfg != nil {
		servers := serverLimits(rep, cfg)
		fmt.Fprintf(w, "Resource limits of %s: ", cfg.File)
		if len(servers) == 0 {
			fmt.Fprintln(w, "no server has any.")
		} else {
			fmt.Fprintln(w)
		}
		for _, s := range servers {
			if len(s.NotEnforced) == 0 {
				fmt.Fprintf(w, "  %s: %s: enforced\n", s.Name, s.Limits)
				continue
			}
			for _, n := range s.NotEnforced {
				fmt.Fprintf(w, "  WARNING %s: its %s limit cannot be enforced here, and it runs without it: %s\n", s.Name, n.Name, n.Detail)
			}
		}
		fmt.Fprintln(w)
	}
	if layer := rep.SurvivesSIGKILL(); layer != "" {
		fmt.Fprintf(w, "If mcpvisor is SIGKILLed, the %s layer removes every server process at once.\n", layer)
	} else {
		fmt.Fprintln(w, "If mcpvisor is SIGKILLed, direct children die (where pdeathsig works) but their")
		fmt.Fprintln(w, "descendants may survive until the next mcpvisor start sweeps them.")
	}
	return nil
}
