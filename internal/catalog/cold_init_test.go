package catalog

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"
)

// Instances that remember different results at once leave the store with
// the one held last: here the write of the first is held after it took
// its result while the second remembers another and writes; the result
// marked saved is then the one on disk, and a cold read gives what the
// summary was derived from.
func TestConcurrentInitWritesLeaveTheOneHeld(t *testing.T) {
	s, _ := newTestCatalog(t, openStore(t))
	a := json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"A"}}`)
	b := json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"B"}}`)
	key, _ := s.launchKey()
	held, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	prev := beforeInitWrite
	beforeInitWrite = func() {
		if calls.Add(1) == 1 { // the first write only
			close(held)
			<-release
		}
	}
	defer func() { beforeInitWrite = prev }()
	first := make(chan struct{})
	go func() {
		defer close(first)
		if s.lists.putInit(a, key, 0) {
			s.persistInit() // holds in beforeInitWrite, with a taken
		}
	}()
	<-held
	// Deterministic, where the window below is not: the first write
	// holds the lock that serializes them.
	if s.env().initWrites.TryLock() {
		s.env().initWrites.Unlock()
		close(release)
		<-first
		t.Fatal("a write of an initialize result does not hold the lock that serializes them")
	}
	second := make(chan struct{})
	go func() {
		defer close(second)
		if s.lists.putInit(b, key, 0) {
			s.persistInit()
		}
	}()
	// The second either waits for the first's write (serialized) or
	// writes b now; let it get that far, then let the first write.
	select {
	case <-second:
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-first
	<-second
	s.spillLists()
	if got := s.CachedInit(); string(got) != string(b) {
		t.Fatalf("after the writes, the result held is b and it reads back as %s", got)
	}
	if s.Era() != "2025-06-18" || s.AnnouncesChanges("tools") {
		t.Fatalf("era %q, announces tools %v: not b's", s.Era(), s.AnnouncesChanges("tools"))
	}
}

// launchNow sees a relaunch whole: the generation and the configuration
// it gives are of the same launch, however the two interleave with
// relaunches (here: launches a and b in turn, odd generations b's).
func TestLaunchNowSeesARelaunchWhole(t *testing.T) {
	s, h := newTestCatalog(t, nil)
	a := h.Config()
	b := serverConfig(t, "fake2")
	stop := make(chan struct{})
	var bad atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			gen, cfg := s.launchNow()
			if (gen%2 == 1) != (cfg == b) {
				bad.Add(1)
			}
		}
	}()
	for i := range 20000 {
		next := a
		if i%2 == 0 {
			next = b
		}
		s.lists.relaunched(func() { h.cfg.Swap(next) })
	}
	close(stop)
	<-done
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d reads saw the generation of one launch with the configuration of another", n)
	}
}
