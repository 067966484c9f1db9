package loadtest

import "syscall"

// OwnSession is the SysProcAttr of a process under test: it starts in a
// session of its own (setsid). The scheduler groups processes by session
// (autogroup), and a process in the load client's session looks cheaper
// than one in a session of its own, as mcpvisor's servers are; so every
// process measured gets its own. A new session no longer receives the
// terminal's signals, so the process also gets SIGTERM when its parent
// dies (Pdeathsig): an interrupted or timed-out benchmark leaves none
// behind.
func OwnSession() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
}
