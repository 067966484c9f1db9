package connect

import (
	"bytes"
	"os"

	"golang.org/x/sys/unix"
)

// clientName is the name of the program that started this process (its
// parent's p_comm), or "".
func clientName() string {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", os.Getppid())
	if err != nil {
		return ""
	}
	c := kp.Proc.P_comm[:]
	if i := bytes.IndexByte(c, 0); i >= 0 {
		c = c[:i]
	}
	return string(c)
}
