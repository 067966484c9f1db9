package testserver

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// -grow-mb and the grow tool allocate step by step, so that a memory limit
// stops the growth on the way rather than one allocation past it.
const (
	growStepMB   = 4
	growInterval = 5 * time.Millisecond
)

// maxForkBomb bounds -fork-bomb whatever limit applies (or none): a test
// whose limit was not applied cannot take the machine down.
const maxForkBomb = 2000

// grown holds what grow allocated, until the process exits.
var grown struct {
	sync.Mutex
	chunks [][]byte
}

// grow allocates mb MiB, stepMB at a time with interval between steps,
// touching every page so that it is resident; it keeps it all. It returns
// early when ctx ends (nil: never).
func growCtx(ctx context.Context, mb, stepMB int, interval time.Duration) int {
	done := 0
	for done < mb {
		n := min(stepMB, mb-done)
		b := make([]byte, n<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		grown.Lock()
		grown.chunks = append(grown.chunks, b)
		grown.Unlock()
		done += n
		if done < mb && interval > 0 {
			t := time.NewTimer(interval)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return done
			}
		}
	}
	return done
}

func grow(mb, stepMB int, interval time.Duration) int {
	return growCtx(context.Background(), mb, stepMB, interval)
}

// spin keeps one CPU busy until this process has used d more CPU time
// (wall-clock time where that cannot be read), so that what it burned
// does not depend on how busy the machine is; it returns its rounds.
func spin(d time.Duration) int {
	n := 0
	if start, ok := cpuTime(); ok {
		for used := time.Duration(0); used < d; n++ {
			now, _ := cpuTime()
			used = now - start
		}
		return n
	}
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
	}
	return n
}

func runGrow(ctx context.Context, _ *server, args, _ json.RawMessage) (toolResult, bool) {
	a := struct {
		MB         int `json:"mb"`
		StepMB     int `json:"stepMb"`
		IntervalMs int `json:"intervalMs"`
	}{MB: 1024, StepMB: growStepMB, IntervalMs: int(growInterval / time.Millisecond)}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return errorResult("bad arguments: %v", err), true
		}
	}
	if a.MB < 0 || a.StepMB < 1 || a.IntervalMs < 0 {
		return errorResult("bad arguments: mb must be 0 or more, stepMb 1 or more, intervalMs 0 or more"), true
	}
	n := growCtx(ctx, a.MB, a.StepMB, time.Duration(a.IntervalMs)*time.Millisecond)
	if ctx.Err() != nil {
		return toolResult{}, false
	}
	return textResult(fmt.Sprintf("grew %d MiB", n)), true
}
