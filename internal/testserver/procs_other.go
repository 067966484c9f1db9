//go:build !linux

package testserver

// Processes would return the pids of the processes with MarkerEnv=marker;
// it needs /proc, so off Linux it returns nil.
func Processes(marker string) []int { return nil }

// LiveProcesses would return [Processes] without zombies; off Linux it
// returns nil.
func LiveProcesses(marker string) []int { return nil }

// KillProcesses would SIGKILL every live process with MarkerEnv=marker; off
// Linux it does nothing and returns nil.
func KillProcesses(marker string) []int { return nil }
