package service

import (
	"fmt"
	"strings"
)

// systemdUnit is the user unit that runs s. Facts from systemd's own
// manuals (systemd 252: systemd.service(5), systemd.kill(5),
// systemd.unit(5)); each setting says why it is there.
func systemdUnit(s Spec) []byte {
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	line("# %s; `mcpvisor service uninstall` removes it.", Marker)
	line("[Unit]")
	line("Description=mcpvisor: supervisor and gateway of MCP servers")
	line("# A daemon that cannot stay up (say, a config broken by hand since) is")
	line("# restarted at most 5 times in 2 minutes, then left failed (systemctl --user")
	line("# reset-failed mcpvisor, after fixing it), not restarted forever.")
	line("StartLimitIntervalSec=120")
	line("StartLimitBurst=5")
	line("")
	line("[Service]")
	line("# exec: started once the binary was executed, so that a missing or broken")
	line("# binary fails the start itself instead of looking started.")
	line("Type=exec")
	line("ExecStart=%s", execLine(s.args()))
	if s.Path != "" {
		line("# The PATH of the shell that installed the service: the servers' commands")
		line("# (npx, uvx, ...) are found as they are there, not in the user manager's")
		line("# minimal PATH.")
		line("Environment=%s", envAssignment("PATH", s.Path))
	}
	line("# Restarted when it crashes or exits with an error, not when it is stopped;")
	line("# after 2 s, not systemd's 100 ms, so that a fault is not retried in a hot loop.")
	line("Restart=on-failure")
	line("RestartSec=2")
	line("# mixed: the stop's SIGTERM goes to mcpvisor alone, which stops its servers")
	line("# itself — stdin closed, then SIGTERM and SIGKILL to each server's process")
	line("# group, within --shutdown-timeout (%s) — and the final SIGKILL goes to", s.shutdownTimeout())
	line("# every process left in the unit's cgroup: no server outlives the unit, and")
	line("# none is killed before mcpvisor had the chance to stop it cleanly.")
	line("# (control-group, the default, would SIGTERM every server at once behind")
	line("# mcpvisor's back; process or none would let them escape.)")
	line("KillMode=mixed")
	line("KillSignal=SIGTERM")
	line("# mcpvisor puts the servers' trees in cgroups of their own under the unit's,")
	line("# where it can (resource limits, cgroup.kill: mcpvisor doctor): Delegate")
	line("# leaves that subtree to it (systemd.resource-control(5)); the stop's final")
	line("# SIGKILL still reaches every process in it.")
	line("Delegate=yes")
	line("# Above mcpvisor's own bound (%s, then it kills what is left): systemd's", s.shutdownTimeout())
	line("# SIGKILL is for an mcpvisor that hangs, never for one still stopping.")
	line("TimeoutStopSec=%d", seconds(s.stopTimeout()))
	line("")
	line("[Install]")
	line("# default.target: the user session's main target, started at login (and at")
	line("# boot, with lingering: loginctl enable-linger).")
	line("WantedBy=default.target")
	return []byte(b.String())
}

// execLine is argv as an ExecStart= value: each word quoted when it needs
// it (systemd.service(5), Command lines: "double quotes ... C-style
// escapes"), '%' doubled (a specifier otherwise) and '$' doubled (a
// variable otherwise).
func execLine(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		a = strings.NewReplacer("%", "%%", "$", "$$").Replace(a)
		if a == "" || strings.ContainsAny(a, " \t\"'\\;") {
			a = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(a) + `"`
		}
		words[i] = a
	}
	return strings.Join(words, " ")
}

// envAssignment is name=value as an Environment= value: quoted, with
// C-style escapes, '%' doubled (systemd.exec(5), Environment=).
func envAssignment(name, value string) string {
	v := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%").Replace(value)
	return `"` + name + "=" + v + `"`
}
