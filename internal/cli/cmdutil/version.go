package cmdutil

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at link time with -ldflags
// "-X github.com/mcpvisor/mcpvisor/internal/cli/cmdutil.version=v1.2.3".
var version = ""

// Version is mcpvisor's version line: the release (or the module's
// version, else "dev"), the revision, Go, OS and architecture.
func Version() string {
	v := version
	rev := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = s.Value[:12]
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	if rev != "" {
		v += " (" + rev + ")"
	}
	return fmt.Sprintf("mcpvisor %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
