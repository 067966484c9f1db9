package watchdog

import "os"

// startPPID is the parent pid read when this package was initialised, before
// main ran: the closest a library gets to "the parent that started us".
// Reading it later would widen the window in which the parent can exit
// unnoticed and leave PID 1 (or a subreaper) looking like the original
// parent.
var startPPID = os.Getppid()

// parentWatch is an open OS notification for the exit of the original
// parent.
type parentWatch struct {
	// exited is closed when the parent may have exited. The watchdog then
	// re-reads the parent pid; the notification alone decides nothing.
	exited <-chan struct{}
	// close stops watching and returns once the watch's goroutine has
	// exited. It is called exactly once.
	close func()
	// how names the mechanism for logs and tests ("pidfd", "kqueue").
	how string
	// exact reports that the mechanism has been verified to fire on every
	// exit of the parent, so polling the parent pid as a backstop is not
	// needed while the watch is open.
	exact bool
}

// alreadyExited is the watch returned when the parent is gone before the
// watch could be set up.
func alreadyExited(how string) *parentWatch {
	ch := make(chan struct{})
	close(ch)
	return &parentWatch{exited: ch, close: func() {}, how: how, exact: true}
}
