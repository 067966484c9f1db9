package watchdog

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// watchParent watches the process pid through a pidfd (Linux 5.3+). A pidfd
// becomes readable when its process exits — the whole process, not the one
// thread that forked us, which is what makes PR_SET_PDEATHSIG misfire for Go
// parents — and it refers to that process only, so a recycled pid cannot be
// mistaken for it. The pidfd is registered with the Go runtime's poller, so
// waiting for it costs no thread, and closing it wakes the waiter.
//
// Children are re-parented before the pidfd is signalled, so when exited is
// closed getppid already returns the new parent.
func watchParent(pid int) (*parentWatch, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if os.Getppid() != pid {
			return alreadyExited("pidfd"), nil
		}
		return nil, fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	// If the parent exited before pidfd_open, the pid may already belong
	// to another process. We were re-parented before that could happen, so
	// a parent pid that still matches proves the pidfd is our parent's.
	if os.Getppid() != pid {
		unix.Close(fd)
		return alreadyExited("pidfd"), nil
	}
	return watchPidfd(fd)
}

// watchPidfd waits for the process behind pidfd fd to exit. It owns fd from
// the call on.
func watchPidfd(fd int) (*parentWatch, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pidfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	// SetReadDeadline fails unless the runtime poller accepted the fd.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("pidfd is not pollable: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pidfd: %w", err)
	}
	exited := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Read calls readable until it reports true, parking in the
		// poller in between; it fails once f is closed.
		if err := rc.Read(func(fd uintptr) bool { return readable(int(fd)) }); err == nil {
			close(exited)
		}
	}()
	return &parentWatch{
		exited: exited,
		close: func() {
			f.Close()
			<-done
		},
		how:   "pidfd",
		exact: true,
	}, nil
}

// readable reports whether fd has input (for a pidfd: its process has
// exited), without blocking.
func readable(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, 0)
		if err == unix.EINTR {
			continue
		}
		// An error other than EINTR cannot be waited out: report it as
		// an exit, which only makes the watchdog re-read the parent pid.
		return err != nil || n > 0
	}
}
