package fleet

import (
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// taskHolder is Hooks that say whether the shared instance works on a
// task (TaskHolder).
type taskHolder struct{ working atomic.Bool }

func (h *taskHolder) Notification(Source, *rpc.Message) {}
func (h *taskHolder) Request(Source, *rpc.Message)      {}
func (h *taskHolder) Working(_ *Server, key string) bool {
	return key == "" && h.working.Load()
}

// An instance working on a task a client follows stays awake past its
// idle timeout, and an operator's sleep is refused; once the holder lets
// go and rearms it, its idle timeout applies again.
func TestWorkingTaskKeepsTheServerAwake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"10s","startGrace":"0s"`)
		defer ff.close(t)
		h := &taskHolder{}
		ff.f.opts.Hooks = h
		s := ff.f.Get("s")
		l, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		h.working.Store(true) // the call's answer created a task
		l.Release()
		time.Sleep(time.Hour)
		synctest.Wait()
		if st := state(s); st != "running" {
			t.Fatalf("a server working on a task went %s", st)
		}
		if err := s.Sleep(t.Context()); !errors.Is(err, ErrBusy) {
			t.Fatalf("sleep while a task works: %v, want busy", err)
		}
		h.working.Store(false)
		s.Rearm("")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if st := state(s); st != "dormant" {
			t.Fatalf("not dormant 10s after its last task ended: %s", st)
		}
	})
}
