package proc

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reaper reaps the descendants that mcpvisor adopted as a child subreaper,
// and nothing else. The pids of children a Process still owns are in owned,
// registered under mu in the same critical section as their fork, so their
// exit status is never stolen from cmd.Wait. A child that is in neither set
// may belong to an exec.Cmd started elsewhere in the program: it is reaped
// only when it was seen alive carrying TreeEnv (adopted), or when it has
// been a zombie that nobody collected for unknownZombieAge.
type reaperState struct {
	mu      sync.Mutex
	owned   map[int]bool
	adopted map[int]bool
	zombie  map[int]time.Time // first time an unclassified zombie was seen
	kick    chan struct{}
	refs    int
	stop    chan struct{}
	wg      sync.WaitGroup
	// subreaper records whether PR_SET_CHILD_SUBREAPER succeeded.
	subreaper bool
}

var reaper = reaperState{owned: map[int]bool{}, adopted: map[int]bool{}, zombie: map[int]time.Time{}, kick: make(chan struct{}, 1)}

// unknownZombieAge is how long an exited child that no Process owns and
// that was never seen carrying TreeEnv stays uncollected before the reaper
// takes it. An exec.Cmd elsewhere in the program collects its own child far
// sooner.
const unknownZombieAge = 10 * time.Second

// acquire makes mcpvisor a subreaper and starts the reaping goroutine on the
// first call; release stops it after the last.
func (r *reaperState) acquire() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refs++
	if r.refs > 1 {
		return r.subreaper, nil
	}
	err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	r.subreaper = err == nil
	r.stop = make(chan struct{})
	r.wg.Add(1)
	go r.loop(r.stop)
	return r.subreaper, err
}

func (r *reaperState) release() {
	r.mu.Lock()
	r.refs--
	last := r.refs == 0
	var stop chan struct{}
	if last {
		stop = r.stop
		r.stop = nil
	}
	r.mu.Unlock()
	if last {
		close(stop)
		r.wg.Wait()
		r.reap()
	}
}

func (r *reaperState) own(pid int)    { r.owned[pid] = true } // caller holds mu
func (r *reaperState) disown(pid int) { r.mu.Lock(); delete(r.owned, pid); r.mu.Unlock() }

func (r *reaperState) loop(stop chan struct{}) {
	defer r.wg.Done()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	// SIGCHLD can coalesce; a slow tick catches whatever a merged signal hid.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-sigs:
		case <-r.kick:
		case <-tick.C:
		}
		r.reap()
	}
}

// reap collects the exited children that are known to be adopted, and
// classifies the live ones it has not seen yet.
func (r *reaperState) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	seen := map[int]bool{}
	for _, pid := range childrenOf(os.Getpid()) {
		if r.owned[pid] {
			continue
		}
		seen[pid] = true
		st, ok := readStat(pid)
		if !ok {
			continue
		}
		if st.state != 'Z' {
			if !r.adopted[pid] && hasEnvKey(pid, TreeEnv) {
				r.adopted[pid] = true
			}
			continue
		}
		if !r.adopted[pid] {
			first, ok := r.zombie[pid]
			if !ok {
				r.zombie[pid] = now
				continue
			}
			if now.Sub(first) < unknownZombieAge {
				continue
			}
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		delete(r.adopted, pid)
		delete(r.zombie, pid)
	}
	for pid := range r.adopted {
		if !seen[pid] {
			delete(r.adopted, pid)
		}
	}
	for pid := range r.zombie {
		if !seen[pid] {
			delete(r.zombie, pid)
		}
	}
}

// markAdopted records pid as an adopted descendant so that reap collects it
// once it exits; the sweep calls it for escapees it finds and kills.
func (r *reaperState) markAdopted(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.owned[pid] {
		return
	}
	r.adopted[pid] = true
}

// reapSoon asks the reaping goroutine for a pass now.
func (r *reaperState) reapSoon() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}
