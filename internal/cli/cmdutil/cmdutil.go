// Package cmdutil is what mcpvisor's commands share: the streams they
// read and write, and the executable a client or a service is to launch.
package cmdutil

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
)

// IOStreams are a command's input and outputs: the process's own, or a
// test's buffers.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// Or is s with the streams it lacks taken from cmd (InOrStdin,
// OutOrStdout, ErrOrStderr): a command built with no streams of its own
// writes where its cobra command does, which SetOut and SetErr change.
func (s IOStreams) Or(cmd *cobra.Command) IOStreams {
	if s.In == nil {
		s.In = cmd.InOrStdin()
	}
	if s.Out == nil {
		s.Out = cmd.OutOrStdout()
	}
	if s.ErrOut == nil {
		s.ErrOut = cmd.ErrOrStderr()
	}
	return s
}

// Executable is the path a client is to launch: the running
// executable as the user named it (a symlink kept), absolute. A `go run`
// build, which is deleted when it exits, is refused.
func Executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if arg := os.Args[0]; arg != "" {
		p := arg
		if !strings.ContainsRune(arg, filepath.Separator) {
			p, _ = exec.LookPath(arg)
		}
		if p != "" {
			if abs, err := filepath.Abs(p); err == nil {
				a, errA := os.Stat(abs)
				b, errB := os.Stat(exe)
				if errA == nil && errB == nil && os.SameFile(a, b) {
					exe = abs
				}
			}
		}
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil && IsGoRunBuild(resolved) {
		return "", fmt.Errorf("this mcpvisor is a temporary `go run` build (%s), deleted when it exits: install mcpvisor (go install, make build, or a release) and run %s with it", resolved, strings.Join(os.Args[1:min(len(os.Args), 3)], " "))
	}
	return exe, nil
}

// IsGoRunBuild reports whether an executable is one `go run` (or `go
// test`) built in its work directory, go-build… under GOTMPDIR or the
// system temp dir, which is deleted when the command ends.
func IsGoRunBuild(path string) bool {
	for _, tmp := range []string{os.Getenv("GOTMPDIR"), os.TempDir()} {
		if tmp == "" {
			continue
		}
		if t, err := filepath.EvalSymlinks(tmp); err == nil {
			tmp = t
		}
		if rel, err := filepath.Rel(tmp, path); err == nil && strings.HasPrefix(rel, "go-build") {
			return true
		}
	}
	return false
}

// AddAPIFlags adds --addr and --token-file, where a running serve's admin
// API is, to cmd, filling c; without a token file or variable, c sends
// the admin token of mcpvisor login --gateway for the address, if any.
func AddAPIFlags(cmd *cobra.Command, c *adminclient.Client) {
	cmd.Flags().StringVar(&c.Addr, "addr", "127.0.0.1:7331", "address of mcpvisor serve")
	cmd.Flags().StringVar(&c.TokenFile, "token-file", "", "file holding the bearer token (default: $MCPVISOR_TOKEN_FILE, else $MCPVISOR_TOKEN, else the login of mcpvisor login --gateway)")
}

// Show fetches path and writes it to w: as it came with raw, else decoded
// into a T and given to print.
func Show[T any](ctx context.Context, c *adminclient.Client, w io.Writer, path string, raw bool, print func(io.Writer, T) error) error {
	if raw {
		body, err := c.Get(ctx, path)
		if err == nil {
			_, err = w.Write(body)
		}
		return err
	}
	var v T
	if err := c.GetJSON(ctx, path, &v); err != nil {
		return err
	}
	return print(w, v)
}

// OneLine is the first line of s, cut to n runes.
func OneLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// RunE is the RunE of a command whose options o are filled by prepare
// (the streams, the arguments; an error is the command line's) and then
// run by runF when a test gave one, else by run.
func RunE[O any](o *O, prepare func(cmd *cobra.Command, args []string) error, runF, run func(context.Context, *O) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := prepare(cmd, args); err != nil {
			return err
		}
		if runF != nil {
			return runF(cmd.Context(), o)
		}
		return run(cmd.Context(), o)
	}
}
