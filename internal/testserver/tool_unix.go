//go:build unix

package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Tools the tests run that make test builds from their own modules in
// the background, at the lowest priority (tools/NAME/build.sh
// --background, started by scripts/test-deps.sh): Hydra, Helm. While a
// build runs, its marker BIN.building holds its pid and its output goes
// to BIN.log.

// Tool returns tool name's binary: $MCPVISOR_<NAME> if set, else
// .deps/tools/NAME under root (the module root), waiting for a build of
// it under way (WaitBuilt) at most wait ($MCPVISOR_<NAME>_WAIT, a
// duration, changes it). beside names files its build makes in the same
// directory, which must exist too.
func Tool(ctx context.Context, name, root string, wait time.Duration, beside ...string) (string, error) {
	env := "MCPVISOR_" + strings.ToUpper(name)
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", env, err)
		}
		return p, nil
	}
	if v := os.Getenv(env + "_WAIT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return "", fmt.Errorf("%s_WAIT=%q: want a duration such as 6m", env, v)
		}
		wait = d
	}
	return WaitBuilt(ctx, name, filepath.Join(root, ".deps", "tools", name), wait, beside...)
}

// WaitBuilt waits, within ctx and at most wait, while the marker
// bin.building names a live process, then returns bin if it and the
// files named beside (in its directory) exist. Its errors name `make
// NAME` and the last build's log.
func WaitBuilt(ctx context.Context, name, bin string, wait time.Duration, beside ...string) (string, error) {
	marker := bin + ".building"
	deadline := time.Now().Add(wait)
	for building(marker) {
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s: the background build of %s did not finish within %v (log %s.log): "+
				"run `make %s` and look at its output", name, bin, wait, bin, name)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s: waiting for the build of %s: %w", name, bin, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	paths := []string{bin}
	for _, b := range beside {
		paths = append(paths, filepath.Join(filepath.Dir(bin), b))
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			msg := fmt.Sprintf("%s: %s is missing: run `make %s` (make test builds it through scripts/test-deps.sh), or set MCPVISOR_%s",
				name, p, name, strings.ToUpper(name))
			if log, err := os.ReadFile(bin + ".log"); err == nil && len(log) > 0 {
				msg += "\nthe last build's log (" + bin + ".log):\n" + tail(string(log), 4096)
			}
			return "", errors.New(msg)
		}
	}
	return bin, nil
}

// building reports whether marker names a live process.
func building(marker string) bool {
	b, err := os.ReadFile(marker)
	if err != nil {
		return false
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
