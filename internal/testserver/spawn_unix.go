//go:build unix

package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// lingerReadyTimeout bounds the wait for a grandchild to say it is ready.
const lingerReadyTimeout = 10 * time.Second

// spawnLinger starts this executable again in -linger mode, with the same
// environment (so the same MarkerEnv). With setsid the grandchild gets a new
// session; otherwise it stays in our process group. A nil stdout or stderr
// means /dev/null; stdin is always /dev/null.
//
// It returns once the grandchild ignores SIGTERM and SIGHUP, which it tells
// through a pipe on its fd 3. The grandchild is reaped in the background, so
// it never becomes our zombie and never delays our exit.
func spawnLinger(setsid bool, stdout, stderr *os.File) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer readyR.Close()
	cmd := exec.Command(exe, "-linger", "3")
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return 0, err
	}
	go func() { _ = cmd.Wait() }()
	_ = readyR.SetReadDeadline(time.Now().Add(lingerReadyTimeout))
	if _, err := readyR.Read(make([]byte, 1)); err != nil {
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("grandchild %d did not get ready: %v", cmd.Process.Pid, err)
	}
	return cmd.Process.Pid, nil
}

// signalReady writes one byte to fd and closes it, if fd is given.
func signalReady(fd string) {
	if fd != "3" {
		return
	}
	f := os.NewFile(3, "ready")
	_, _ = f.Write([]byte{1})
	_ = f.Close()
}
