package fleet

import "fmt"

// phase is an instance's own lifecycle, on top of its run's supervisor:
// the supervisor says how the current run goes (starting, ready,
// restarting, failed); the phase says whether the instance is meant to
// run at all. A start is not a phase but a task (instState.starting): it
// can begin from New, Dormant, Stopped, or Running when the run gave up,
// and a close or a retire can overtake it.
type phase uint8

const (
	phaseNew      phase = iota // never started
	phaseRunning               // started; the supervisor keeps it up
	phaseSleeping              // going dormant: the stop is in progress
	phaseDormant               // stopped for idleness; starts again on demand
	phaseStopped               // stopped by request (operator, shutdown); starts again on demand
	phaseClosed                // per-session instance whose session ended: never runs again
	phaseRetired               // replaced or taken out of service: never runs again
	nPhases
)

var phaseNames = [nPhases]string{"new", "running", "sleeping", "dormant", "stopped", "closed", "retired"}

func (s phase) String() string {
	if s < nPhases {
		return phaseNames[s]
	}
	return fmt.Sprintf("phase(%d)", uint8(s))
}

// transitions lists, for each state, the states it may move to (staying
// is always allowed). Read by row:
//   - a start that succeeds moves New, Dormant and Stopped to Running;
//   - only a running instance goes to sleep, and only a sleep ends dormant;
//   - a close stops a shared instance (Stopped) or ends a per-session one
//     (Closed) from wherever it is, but a New instance with no start under
//     way has nothing to stop and stays New;
//   - a retire wins over everything, and nothing leaves Retired or Closed
//     (a closed instance can still be retired, which changes nothing it
//     does).
var transitions = [nPhases][nPhases]bool{
	phaseNew:      {phaseRunning: true, phaseStopped: true, phaseClosed: true, phaseRetired: true},
	phaseRunning:  {phaseSleeping: true, phaseStopped: true, phaseClosed: true, phaseRetired: true},
	phaseSleeping: {phaseDormant: true, phaseStopped: true, phaseClosed: true, phaseRetired: true},
	phaseDormant:  {phaseRunning: true, phaseStopped: true, phaseClosed: true, phaseRetired: true},
	phaseStopped:  {phaseRunning: true, phaseRetired: true},
	phaseClosed:   {phaseRetired: true},
	phaseRetired:  {},
}

// canMove reports whether an instance in state from may move to state to.
func canMove(from, to phase) bool {
	if from >= nPhases || to >= nPhases {
		return false
	}
	return from == to || transitions[from][to]
}

// stopping reports whether the end of the run of an instance in s was
// asked for (a sleep, a stop, a close, a retire): an exit then is no
// crash to report.
func (s phase) stopping() bool {
	return s == phaseSleeping || s == phaseStopped || s == phaseClosed || s == phaseRetired
}
