package fleet

import (
	"fmt"
	"testing"
)

// Every pair of phases is either allowed or refused, and the table says
// which: the expected moves are written out here once more, by the rules
// the table's comment states, so a change to either shows.
func TestPhaseTransitionsExhaustive(t *testing.T) {
	all := []phase{phaseNew, phaseRunning, phaseSleeping, phaseDormant, phaseStopped, phaseClosed, phaseRetired}
	if len(all) != int(nPhases) {
		t.Fatalf("%d phases listed, %d declared", len(all), nPhases)
	}
	// The moves a change may make, and why.
	want := map[[2]phase]string{
		{phaseNew, phaseRunning}:      "first start",
		{phaseDormant, phaseRunning}:  "wake",
		{phaseStopped, phaseRunning}:  "start after the operator's stop",
		{phaseRunning, phaseSleeping}: "idle, or the operator's sleep",
		{phaseSleeping, phaseDormant}: "the dormant stop ended",
		{phaseNew, phaseStopped}:      "close of a shared instance whose start is under way",
		{phaseRunning, phaseStopped}:  "close of a shared instance",
		{phaseSleeping, phaseStopped}: "close during a dormant stop",
		{phaseDormant, phaseStopped}:  "close of a dormant shared instance",
		{phaseNew, phaseClosed}:       "the session of a per-session instance ended",
		{phaseRunning, phaseClosed}:   "the session of a per-session instance ended",
		{phaseSleeping, phaseClosed}:  "the session ended during a dormant stop",
		{phaseDormant, phaseClosed}:   "the session of a dormant instance ended",
		{phaseNew, phaseRetired}:      "retire",
		{phaseRunning, phaseRetired}:  "retire",
		{phaseSleeping, phaseRetired}: "retire",
		{phaseDormant, phaseRetired}:  "retire",
		{phaseStopped, phaseRetired}:  "retire",
		{phaseClosed, phaseRetired}:   "retire",
	}
	allowed := 0
	for _, from := range all {
		for _, to := range all {
			_, ok := want[[2]phase{from, to}]
			ok = ok || from == to
			if got := canMove(from, to); got != ok {
				t.Errorf("canMove(%s, %s) = %v, want %v", from, to, got, ok)
			}
			if ok && from != to {
				allowed++
			}
		}
	}
	if allowed != len(want) {
		t.Errorf("%d moves allowed, %d expected", allowed, len(want))
	}
	// Out of range is refused, never a panic.
	if canMove(nPhases, phaseNew) || canMove(phaseNew, nPhases) || canMove(phase(255), phase(255)) {
		t.Error("a phase out of range may move")
	}
	// Nothing leaves the ends but into Retired.
	for _, end := range []phase{phaseClosed, phaseRetired} {
		for _, to := range all {
			if to != end && to != phaseRetired && canMove(end, to) {
				t.Errorf("%s may move to %s", end, to)
			}
		}
	}
}

func TestPhaseString(t *testing.T) {
	seen := map[string]bool{}
	for p := range nPhases {
		s := p.String()
		if s == "" || seen[s] {
			t.Errorf("phase %d: name %q empty or repeated", p, s)
		}
		seen[s] = true
	}
	if got, want := nPhases.String(), fmt.Sprintf("phase(%d)", nPhases); got != want {
		t.Errorf("out of range: %q, want %q", got, want)
	}
}

// A move the table refuses is reported (tests panic on it, TestMain), and
// update's checks do not depend on which change made it.
func TestUpdateReportsARefusedMove(t *testing.T) {
	ff := newFakeFleet(t, ``)
	defer ff.close(t)
	in := ff.f.Get("s").sharedIn()
	var got []string
	was := transitionRefused
	transitionRefused = func(_ *instance, from, to phase) { got = append(got, from.String()+"→"+to.String()) }
	defer func() { transitionRefused = was }()
	in.do(func(st *instState) (_ effects) { st.phase = phaseRetired; return })
	in.do(func(st *instState) (_ effects) { st.phase = phaseRunning; return }) // nothing leaves Retired
	if len(got) != 1 || got[0] != "retired→running" {
		t.Fatalf("refused moves reported: %v, want [retired→running]", got)
	}
}
