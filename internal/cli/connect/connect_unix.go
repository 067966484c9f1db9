//go:build unix

package connect

import (
	"strconv"
	"syscall"
)

// detachedProcess makes a started daemon a session of its own: no
// terminal, no signal to the client's process group reaches it.
func detachedProcess() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// reapIfExited reports whether the child pid has exited, reaping it, and
// how (without waiting if it has not).
func reapIfExited(pid int) (string, bool) {
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	if err != nil || got != pid {
		return "", false
	}
	if ws.Signaled() {
		return "signal " + ws.Signal().String(), true
	}
	return "exit code " + strconv.Itoa(ws.ExitStatus()), true
}
