//go:build race

package gateway

// raceAllocs is what the race detector adds to a call's allocations
// (TestRelayCallAllocs).
const raceAllocs = 1
