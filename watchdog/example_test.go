package watchdog_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/watchdog"
)

// A stdio server loop with a watchdog. The server counts every request with
// a Tracker and gives up after 30 minutes without one; it also goes as soon
// as the client that started it exits. Here the parent pid and the
// termination are injected so that the run is deterministic: a real server
// leaves PPID, OriginalPPID and OnTerminate unset.
func Example() {
	var activity watchdog.Tracker

	var ppid atomic.Int64 // stands in for getppid()
	ppid.Store(4242)
	reasons := make(chan watchdog.Reason, 1)

	wd, err := watchdog.Start(context.Background(), watchdog.Config{
		IdleTimeout:  30 * time.Minute,
		State:        activity.Snapshot,
		OriginalPPID: 4242,
		PPID:         func() int { return int(ppid.Load()) },
		PollInterval: time.Millisecond,
		OnTerminate:  func(r watchdog.Reason) { reasons <- r },
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer wd.Stop()

	stdin := bufio.NewScanner(strings.NewReader("ping\ntools/list\ntools/call\n"))
	for stdin.Scan() {
		activity.Begin()
		fmt.Println("handled", stdin.Text()) // and the response flushed
		activity.End()
	}

	// The client exits, but something still holds our stdin open, so no
	// EOF would ever arrive in a real server: we are re-parented to init.
	ppid.Store(1)
	fmt.Println("watchdog:", <-reasons)

	// Output:
	// handled ping
	// handled tools/list
	// handled tools/call
	// watchdog: orphaned
}

// The rules, one decision at a time.
func ExampleShouldTerminate() {
	const parent = 4242
	fmt.Println(watchdog.ShouldTerminate(time.Hour, 10*time.Minute, parent, parent, 1)) // busy
	fmt.Println(watchdog.ShouldTerminate(time.Hour, 10*time.Minute, parent, parent, 0)) // idle
	fmt.Println(watchdog.ShouldTerminate(time.Hour, 0, parent, parent, 0))              // idle rule off
	fmt.Println(watchdog.ShouldTerminate(0, 10*time.Minute, 1, parent, 3))              // parent gone
	// Output:
	// false none
	// true idle
	// false none
	// true orphaned
}
