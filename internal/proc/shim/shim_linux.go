package shim

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Main runs the shim: args are QUIESCE -- PATH ARGV0 ARGS... It returns the
// shim's own exit code; the server's status goes to fd 3.
func Main(args []string) int {
	if len(args) < 4 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, Name+": bad arguments (it is started by mcpvisor, not by hand)")
		return 125
	}
	quiesce, err := time.ParseDuration(args[0])
	if err != nil || quiesce < 0 {
		fmt.Fprintf(os.Stderr, "%s: bad quiesce window %q\n", Name, args[0])
		return 125
	}
	path, argv := args[2], args[3:]
	// Started through /proc/self/fd/N, the shim would show as "N" in ps.
	_ = os.WriteFile("/proc/self/comm", []byte(Name), 0)
	status := os.NewFile(3, "status")
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, Env+"=") {
			env = append(env, kv)
		}
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	hint := make(chan struct{})
	go func() {
		ctl := os.NewFile(4, "stop")
		var b [1]byte
		_, _ = ctl.Read(b[:]) // EOF when mcpvisor begins a stop or dies
		close(hint)
	}()
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	// The status and stop pipes are the shim's alone: a server that held
	// them could forge its status or keep the stop pipe open.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)

	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: start %s: %v\n", Name, path, err)
		fmt.Fprintf(status, "exit 127\n")
		return 127
	}
	// Drop our copies of the server's stdin and stdout, so that EOF on them
	// follows the server alone.
	if null, err := unix.Open(os.DevNull, unix.O_RDWR, 0); err == nil {
		_ = unix.Dup2(null, 0)
		_ = unix.Dup2(null, 1)
		unix.Close(null)
	}

	everyone := func(sig syscall.Signal) {
		if os.Getpid() == 1 {
			_ = syscall.Kill(-1, sig) // every process of the namespace but us
		} else {
			_ = syscall.Kill(-pid, sig)
		}
	}
	// reapAll collects every exited child; it records the server's status
	// when the server is among them and reports whether any child is left.
	var server *syscall.WaitStatus
	reapAll := func() (left bool) {
		for {
			var ws syscall.WaitStatus
			wpid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.ECHILD {
				return false
			}
			if err == syscall.EINTR {
				continue
			}
			if wpid <= 0 {
				return true
			}
			if wpid == pid {
				server = &ws
			}
		}
	}
	stopping := false
	for server == nil {
		select {
		case s := <-sigs:
			everyone(s.(syscall.Signal))
		case <-hint:
			stopping = true
			hint = nil // closed: it would be ready on every turn
		case <-chld:
			reapAll()
		}
	}
	if hint != nil {
		select {
		case <-hint:
			stopping = true
		default:
		}
	}
	if stopping {
		quiesce = 0
	}
	// The server is gone; what it left gets SIGTERM and the quiesce window.
	deadline := time.NewTimer(quiesce)
	tick := time.NewTicker(5 * time.Millisecond)
	if reapAll() {
		everyone(syscall.SIGTERM)
	wait:
		for reapAll() {
			select {
			case <-chld:
			case <-tick.C:
			case <-deadline.C:
				break wait
			}
		}
		everyone(syscall.SIGKILL)
		for reapAll() {
			<-tick.C
		}
	}
	if server.Signaled() {
		fmt.Fprintf(status, "signal %d\n", int(server.Signal()))
	} else {
		fmt.Fprintf(status, "exit %d\n", server.ExitStatus())
	}
	return 0
}
