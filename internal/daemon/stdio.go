package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
	"github.com/mcpvisor/mcpvisor/internal/stdfile"
	"github.com/mcpvisor/mcpvisor/watchdog"
)

// StdioOptions are mcpvisor stdio's.
type StdioOptions struct {
	Options
	// Server serves that server alone, unprefixed ("": all of them).
	Server string
	// IdleExit ends stdio after this long without a client request (0:
	// never).
	IdleExit time.Duration
	// Stdin and Stdout carry the protocol (nil: the process's own, as
	// files a close interrupts).
	Stdin  io.ReadCloser
	Stdout io.Writer
}

// Stdio runs mcpvisor stdio until its client is gone or it is shut down
// (a signal, ctx ending, idleness):
// it opens the config, the state, the fleet and the gateway, serves the
// client on stdin and stdout, and closes them in order. An error before
// serving closes what was opened. It returns nil for a clean exit, else
// the exit code as an error (shutdown.ExitCode) or what went wrong.
func Stdio(ctx context.Context, o StdioOptions) (err error) {
	log := o.Log
	// A client that is gone must not kill mcpvisor by SIGPIPE before it
	// has stopped its servers, nor after, while it says why it exits: a
	// write error ends the session instead. (Notify, not Ignore: an
	// ignored signal would be inherited by the servers.) It is never
	// stopped: the process ends soon after Stdio returns, writing to
	// stderr on its way out.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	tr, err := newTracing(o.OTLPEndpoint, o.Version)
	if err != nil {
		return err
	}
	sd := shutdown.New()
	defer context.AfterFunc(ctx, func() { sd.Trigger("stopped: " + context.Cause(ctx).Error()) })()
	var a *app
	var wd *watchdog.Watchdog
	served := false
	defer func() {
		if err != nil && !served { // the one path of every error exit before serving
			if wd != nil {
				wd.Stop()
			}
			if a != nil {
				if err := a.close(context.Background()); err != nil {
					log.Warn("closing after a failed start", "err", err)
				}
			} else {
				_ = tr.Shutdown(context.Background()) // nothing exported yet
			}
			sd.Stop()
		}
	}()
	if a, err = openApp(o.ConfigFile, o.StateDir, log, nil); err != nil {
		return err
	}
	warnReplicasInStdio(a.cfg, o.Server, log)
	a.setTracing(tr)
	// The audit and the rate limits, as serve applies them: a stdio
	// client's calls are recorded and limited as its local user's.
	var auditLog *audit.Log
	if ao := auditOptions(a.cfg, a.stateDir, log); ao != nil {
		if auditLog, err = audit.Open(*ao); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		a.gw.SetAudit(auditLog)
		defer func() {
			a.gw.SetAudit(nil)
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = auditLog.Close(cctx)
		}()
	}
	if lim := limiterOf(a.cfg); lim != nil {
		a.gw.SetLimits(lim)
	}
	ep := a.gw.Aggregate()
	if o.Server != "" {
		if ep = a.gw.Single(o.Server); ep == nil {
			return shutdown.UsageError{Err: fmt.Errorf("--server: no enabled server named %q in %s", o.Server, o.ConfigFile)}
		}
	}
	var activity watchdog.Tracker
	if wd, err = watchdog.Start(sd.Context(), watchdog.Config{
		IdleTimeout: o.IdleExit,
		State:       activity.Snapshot,
		OnTerminate: func(r watchdog.Reason) { sd.Trigger(r.String()) },
		Logger:      log,
	}); err != nil {
		return err
	}
	defer wd.Stop()
	a.startEager(sd.Context(), !o.NoLearn)

	stdin, stdout := o.Stdin, o.Stdout
	if stdin == nil {
		in, restore := stdfile.Stdin()
		defer restore()
		stdin = in
	}
	if stdout == nil {
		stdout = os.Stdout
	}
	served = true // the shutdown closes everything from here on
	go func() {
		_ = gateway.StdioOptions{Logger: log, Activity: &activity, Identity: localIdentity(os.Getuid())}.Serve(sd.Context(), ep, stdin, stdout)
		sd.Trigger("stdin closed")
	}()
	return a.shutdown(sd, o.ShutdownTimeout, func(ctx context.Context) error {
		_ = stdin.Close() // a blocked read must not hold the exit
		return a.close(ctx)
	})
}

// warnReplicasInStdio says that stdio, a client's own mcpvisor, does not
// join the replicas a config's replicas block describes: it runs the
// servers it serves itself (only, if set), so a placement-one server may
// then run here beside the deployment's one process.
func warnReplicasInStdio(cfg *config.Config, only string, log *slog.Logger) {
	if cfg.Replicas == nil {
		return
	}
	var one []string
	for _, s := range cfg.Servers {
		if s.Placement == config.PlacementOne && !s.Disabled && (only == "" || only == s.Name) {
			one = append(one, s.Name)
		}
	}
	msg := "stdio does not join the replicas of the config's \"replicas\" block: it runs the servers it serves in this process"
	if len(one) == 0 {
		log.Warn(msg)
		return
	}
	slices.Sort(one)
	log.Warn(msg+", so a server placed \"one\" may run here beside the deployment's process", "placement_one", strings.Join(one, ","))
}
