//go:build unix

package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fixtureProc is the mcp-fixture binary running as a child of the test, in
// a process group of its own, with pipes the test owns.
type fixtureProc struct {
	t      *testing.T
	marker string
	cmd    *exec.Cmd
	stdin  *os.File
	lines  <-chan []byte
	errOut <-chan []byte
	stderr *Buffer
	done   chan struct{} // closed when Wait returns
	state  *os.ProcessState
}

// startFixture starts the binary with MarkerEnv=marker plus env, and args.
// Its cleanup kills the process group and every process with the marker,
// then checks that none is left.
func startFixture(t *testing.T, marker string, env []string, args ...string) *fixtureProc {
	t.Helper()
	bin := Build(t)
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FIXTURE_") && !strings.HasPrefix(kv, MarkerEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, MarkerEnv+"="+marker)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		t.Fatalf("starting fixture: %v", err)
	}
	p := &fixtureProc{
		t: t, marker: marker, cmd: cmd, stdin: inW,
		lines: readLines(outR), stderr: &Buffer{}, done: make(chan struct{}),
	}
	errOut := make(chan []byte)
	p.errOut = errOut
	go func() {
		defer close(errOut)
		for line := range readLines(errR) {
			fmt.Fprintf(p.stderr, "%s\n", line)
		}
	}()
	go func() {
		defer close(p.done)
		_ = cmd.Wait()
		p.state = cmd.ProcessState
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		KillProcesses(marker)
		p.wait(waitLong)
		// Pipes end once every process holding them is gone.
		timeout := time.After(waitLong)
		for _, ch := range []<-chan []byte{p.lines, p.errOut} {
		drain:
			for {
				select {
				case _, ok := <-ch:
					if !ok {
						break drain
					}
				case <-timeout:
					t.Errorf("fixture pipes still open %v after the kill", waitLong)
					break drain
				}
			}
		}
		outR.Close()
		errR.Close()
		WaitGone(t, marker, waitLong)
		if t.Failed() {
			t.Logf("fixture stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

func (p *fixtureProc) send(format string, a ...any) {
	p.t.Helper()
	if _, err := fmt.Fprintf(p.stdin, format+"\n", a...); err != nil {
		p.t.Fatalf("writing to fixture stdin: %v", err)
	}
}

func (p *fixtureProc) next() rpcMsg {
	p.t.Helper()
	return decodeMsg(p.t, nextLine(p.t, p.lines))
}

// stderrAll waits for stderr to end and returns all of it.
func (p *fixtureProc) stderrAll() string {
	p.t.Helper()
	select {
	case <-p.errOut:
	case <-time.After(waitLong):
		p.t.Fatalf("fixture stderr still open after %v", waitLong)
	}
	return p.stderr.String()
}

// wait waits up to d for the process to end and returns its state, or nil.
func (p *fixtureProc) wait(d time.Duration) *os.ProcessState {
	select {
	case <-p.done:
		return p.state
	case <-time.After(d):
		return nil
	}
}

// mustExit waits for the process to end and checks its exit code.
func (p *fixtureProc) mustExit(code int) {
	p.t.Helper()
	st := p.wait(waitLong)
	if st == nil {
		p.t.Fatalf("fixture still running after %v, want exit code %d", waitLong, code)
	}
	if st.ExitCode() != code {
		p.t.Fatalf("fixture ended with %v, want exit code %d\nstderr:\n%s", st, code, p.stderr.String())
	}
}

// mustRun checks the process is still running d from now.
func (p *fixtureProc) mustRun(d time.Duration) {
	p.t.Helper()
	if st := p.wait(d); st != nil {
		p.t.Fatalf("fixture ended with %v, want it running\nstderr:\n%s", st, p.stderr.String())
	}
}

// killedBy checks the process was ended by sig.
func (p *fixtureProc) killedBy(sig syscall.Signal) {
	p.t.Helper()
	st := p.wait(waitLong)
	if st == nil {
		p.t.Fatalf("fixture still running after %v, want it killed by %v", waitLong, sig)
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != sig {
		p.t.Fatalf("fixture ended with %v, want killed by %v", st, sig)
	}
}

func (p *fixtureProc) initialize() {
	p.t.Helper()
	p.send(initReq, "0", "2025-06-18")
	var r map[string]any
	result(p.t, p.next(), "0", &r)
}

func TestProcessCrashAtStart(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		env  []string
		args []string
	}{
		"flag": {args: []string{"-crash-at-start"}},
		"env":  {env: []string{"FIXTURE_CRASH_AT_START=1"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := startFixture(t, NewMarker(t), tc.env, tc.args...)
			p.mustExit(3)
			if got := p.stderrAll(); !strings.Contains(got, "crash") {
				t.Errorf("stderr = %q, want a line about crashing", got)
			}
		})
	}
}

func TestProcessCrashAfter(t *testing.T) {
	t.Parallel()
	// The flag (2) wins over the environment (1).
	p := startFixture(t, NewMarker(t), []string{"FIXTURE_CRASH_AFTER=1"}, "-crash-after", "2")
	p.initialize()
	for i := 1; i <= 2; i++ {
		p.send(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`, i)
		callText(t, p.next(), fmt.Sprint(i))
	}
	p.mustExit(3)
}

func TestProcessCrashTool(t *testing.T) {
	t.Parallel()
	p := startFixture(t, NewMarker(t), nil)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"crash","arguments":{"code":7}}}`)
	p.mustExit(7)
}

func TestProcessStdinEOF(t *testing.T) {
	t.Parallel()
	p := startFixture(t, NewMarker(t), nil)
	p.initialize()
	p.stdin.Close()
	p.mustExit(0)
}

func TestProcessIgnoreEOF(t *testing.T) {
	t.Parallel()
	p := startFixture(t, NewMarker(t), []string{"FIXTURE_IGNORE_EOF=1"})
	p.initialize()
	p.stdin.Close()
	p.mustRun(500 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.killedBy(syscall.SIGTERM)
}

func TestProcessSIGTERM(t *testing.T) {
	t.Parallel()
	t.Run("default", func(t *testing.T) {
		t.Parallel()
		p := startFixture(t, NewMarker(t), nil)
		p.initialize()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.killedBy(syscall.SIGTERM)
	})
	t.Run("ignore-term", func(t *testing.T) {
		t.Parallel()
		p := startFixture(t, NewMarker(t), nil, "-ignore-term")
		p.initialize() // answered after the signals are ignored
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
		}
		p.mustRun(500 * time.Millisecond)
		p.send(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
		var r map[string]any
		result(t, p.next(), "1", &r)
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		p.killedBy(syscall.SIGKILL)
	})
}
