package watchdog

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// watchParent watches the process pid with a kqueue EVFILT_PROC NOTE_EXIT
// filter. The kqueue descriptor is itself registered with the Go runtime's
// poller (a kqueue is readable while it holds events), so waiting costs no
// thread and closing it wakes the waiter.
//
// The watch is not marked exact: the order in which the kernel re-parents
// children and posts NOTE_EXIT is not something we have tested, so the
// parent pid is still polled every Config.PollInterval as a backstop.
func watchParent(pid int) (*parentWatch, error) {
	kq, err := unix.Kqueue()
	if err != nil {
		return nil, fmt.Errorf("kqueue: %w", err)
	}
	unix.CloseOnExec(kq)
	var ev unix.Kevent_t
	unix.SetKevent(&ev, pid, unix.EVFILT_PROC, unix.EV_ADD|unix.EV_ONESHOT)
	ev.Fflags = unix.NOTE_EXIT
	if _, err := unix.Kevent(kq, []unix.Kevent_t{ev}, nil, nil); err != nil {
		unix.Close(kq)
		if os.Getppid() != pid {
			return alreadyExited("kqueue"), nil
		}
		return nil, fmt.Errorf("kevent EVFILT_PROC %d: %w", pid, err)
	}
	// As with a pidfd: a parent pid that still matches after the filter
	// was added proves the filter is on our parent, not on a recycled pid.
	if os.Getppid() != pid {
		unix.Close(kq)
		return alreadyExited("kqueue"), nil
	}
	if err := unix.SetNonblock(kq, true); err != nil {
		unix.Close(kq)
		return nil, fmt.Errorf("kqueue: %w", err)
	}
	f := os.NewFile(uintptr(kq), "kqueue")
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("kqueue is not pollable: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("kqueue: %w", err)
	}
	exited := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := rc.Read(func(fd uintptr) bool { return pending(int(fd)) }); err == nil {
			close(exited)
		}
	}()
	return &parentWatch{
		exited: exited,
		close: func() {
			f.Close()
			<-done
		},
		how: "kqueue",
	}, nil
}

// pending reports, without blocking, whether the kqueue kq has delivered an
// event (the only one registered is the parent's exit).
func pending(kq int) bool {
	events := make([]unix.Kevent_t, 1)
	var zero unix.Timespec
	for {
		n, err := unix.Kevent(kq, nil, events, &zero)
		if err == unix.EINTR {
			continue
		}
		// As on Linux: an error is reported as a possible exit, which
		// only makes the watchdog re-read the parent pid.
		return err != nil || n > 0
	}
}
