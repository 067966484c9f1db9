package proc

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// spawner starts children from one goroutine locked to its OS thread for as
// long as any child it started lives. The parent-death signal of a child is
// tied to the thread that forked it, not to the process: forking from an
// ordinary goroutine would let the Go runtime retire that thread and kill
// the child early (golang/go#27505). The goroutine exits, and its thread
// with it, only when no child is left.
type spawner struct {
	mu   sync.Mutex
	live int
	reqs chan func()
}

var theSpawner spawner

// do runs f on the spawner thread and counts one more live child; the
// caller must call release once that child is reaped, or at once if f
// started nothing.
func (s *spawner) do(f func()) {
	s.mu.Lock()
	s.live++
	if s.reqs == nil {
		s.reqs = make(chan func())
		go s.loop(s.reqs, nil)
	}
	reqs := s.reqs
	s.mu.Unlock()
	done := make(chan struct{})
	reqs <- func() { f(); close(done) }
	<-done
}

func (s *spawner) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live--
	if s.live == 0 && s.reqs != nil {
		close(s.reqs)
		s.reqs = nil
	}
}

// loop serves reqs on a locked thread that is never mcpvisor's main
// thread, and closes locked (if set) once it is on it. The main thread is
// the thread-group leader: a v1 memory cgroup charges the whole process's
// pages to the cgroup of the leader, so the spawner, which enters each
// tree's v1 cgroups around the fork (limits_linux.go), must be another
// thread. Should the goroutine find itself on the main thread, it holds it
// while another goroutine locks a thread of its own (necessarily another
// one) to serve, then lets the main thread go.
func (s *spawner) loop(reqs chan func(), locked chan<- struct{}) {
	// Never unlocked once serving: when this goroutine returns, its
	// thread is destroyed, which is safe only because no child it forked
	// is left alive.
	runtime.LockOSThread()
	if onLeaderThread() {
		ready := make(chan struct{})
		go s.loop(reqs, ready)
		<-ready
		if locked != nil {
			close(locked) // a hand-off of a hand-off: the one waiting may go too
		}
		runtime.UnlockOSThread()
		return
	}
	if locked != nil {
		close(locked)
	}
	for f := range reqs {
		f()
	}
}

// onLeaderThread reports whether the calling thread is the thread-group
// leader (tests replace it).
var onLeaderThread = func() bool { return unix.Gettid() == unix.Getpid() }
