package service

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"path/filepath"
)

// launchdPlist is the launchd agent that runs s. Keys from
// launchd.plist(5); each says why it is there, in a comment.
func launchdPlist(s Spec) []byte {
	var b bytes.Buffer
	str := func(v string) string {
		var e bytes.Buffer
		_ = xml.EscapeText(&e, []byte(v))
		return e.String()
	}
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	line(`<?xml version="1.0" encoding="UTF-8"?>`)
	line(`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">`)
	line(`<!-- %s; mcpvisor service uninstall removes it. -->`, Marker)
	line(`<plist version="1.0">`)
	line(`<dict>`)
	line(`	<key>Label</key>`)
	line(`	<string>%s</string>`, Label)
	line(`	<!-- mcpvisor serve, run directly (it does not daemonize, as launchd wants). -->`)
	line(`	<key>ProgramArguments</key>`)
	line(`	<array>`)
	for _, a := range s.args() {
		line(`		<string>%s</string>`, str(a))
	}
	line(`	</array>`)
	if s.Path != "" {
		line(`	<!-- The PATH of the shell that installed the agent: the servers' commands`)
		line(`	     (npx, uvx, ...) are found as they are there, not in launchd's minimal PATH. -->`)
		line(`	<key>EnvironmentVariables</key>`)
		line(`	<dict>`)
		line(`		<key>PATH</key>`)
		line(`		<string>%s</string>`, str(s.Path))
		line(`	</dict>`)
	}
	line(`	<!-- Started when the agent is loaded: at login, and at install. -->`)
	line(`	<key>RunAtLoad</key>`)
	line(`	<true/>`)
	line(`	<!-- Started again when it crashes or exits with an error; not when it exits`)
	line(`	     cleanly (a stop: launchctl bootout, or mcpvisor's own SIGTERM handling). -->`)
	line(`	<key>KeepAlive</key>`)
	line(`	<dict>`)
	line(`		<key>SuccessfulExit</key>`)
	line(`		<false/>`)
	line(`		<key>Crashed</key>`)
	line(`		<true/>`)
	line(`	</dict>`)
	line(`	<!-- The stop's SIGTERM lets mcpvisor stop its servers itself, within its`)
	line(`	     shutdown timeout (%s); launchd's SIGKILL comes only after this, for an`, s.shutdownTimeout())
	line(`	     mcpvisor that hangs. -->`)
	line(`	<key>ExitTimeOut</key>`)
	line(`	<integer>%d</integer>`, seconds(s.stopTimeout()))
	line(`	<!-- Standard: the limits of an ordinary app; Background would throttle the`)
	line(`	     CPU and I/O of the servers the user's tools wait on. -->`)
	line(`	<key>ProcessType</key>`)
	line(`	<string>Standard</string>`)
	if s.LogDir != "" {
		log := str(filepath.Join(s.LogDir, "mcpvisor.log"))
		line(`	<!-- mcpvisor's log (it writes to stderr) and anything on stdout. -->`)
		line(`	<key>StandardOutPath</key>`)
		line(`	<string>%s</string>`, log)
		line(`	<key>StandardErrorPath</key>`)
		line(`	<string>%s</string>`, log)
	}
	line(`</dict>`)
	line(`</plist>`)
	return b.Bytes()
}
