package main

import (
	"os"
	"runtime"
	"strings"
)

// mcpvisor serves no heap profile, so it keeps none: the Go runtime
// samples an allocation every 512 KiB by default and keeps a record of
// each distinct call stack it sampled, in a 1.4 MiB hash table whose
// pages become resident as stacks are recorded — about a megabyte more
// RSS after a run that learned a thousand servers (hundreds of megabytes
// allocated) than after one that read them from the state file.
// GODEBUG=memprofilerate=N still turns it on.
func init() {
	if !strings.Contains(os.Getenv("GODEBUG"), "memprofilerate=") {
		runtime.MemProfileRate = 0
	}
}
