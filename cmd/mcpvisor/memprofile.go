package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// mcpvisor serves no heap profile, so it keeps none: the Go runtime
// samples an allocation every 512 KiB by default and keeps a record of
// each distinct call stack it sampled, in a 1.4 MiB hash table whose
// pages become resident as stacks are recorded — about a megabyte more
// RSS after a run that learned a thousand servers (hundreds of megabytes
// allocated) than after one that read them from the state file.
// GODEBUG=memprofilerate=N still sets the rate (the runtime reads it).
func init() {
	if _, ok := godebugMemProfileRate(); !ok {
		runtime.MemProfileRate = 0
	}
}

// godebugMemProfileRate is the memprofilerate GODEBUG sets, if it does.
func godebugMemProfileRate() (int, bool) {
	for kv := range strings.SplitSeq(os.Getenv("GODEBUG"), ",") {
		if v, ok := strings.CutPrefix(kv, "memprofilerate="); ok {
			n, err := strconv.Atoi(v)
			return n, err == nil
		}
	}
	return 0, false
}
