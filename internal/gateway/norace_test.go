//go:build !race

package gateway

// raceAllocs is what the race detector adds to a call's allocations
// (TestRelayCallAllocs): nothing, without it.
const raceAllocs = 0
