package config

import (
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Limits are a server's resource limits, those of each of its process
// trees (each instance of a per-session server has its own). A zero field
// sets none. Memory, PIDs and CPU are enforced by the kernel's cgroup
// controllers where the machine has them — `mcpvisor doctor` says which;
// a server whose limit cannot be enforced starts without it, with a
// warning — and a change of any of them is a launch change: the server
// is restarted with its new limits on reload (a fresh cgroup, fresh
// counters; a v1 memory limit cannot even be lowered below what a tree
// uses). MaxIdleMemory is mcpvisor's: a setting applied in place.
type Limits struct {
	// Memory caps the tree's memory in bytes, swap included: past it the
	// kernel kills (the process ends classified "oom").
	Memory uint64
	// PIDs caps the tree's tasks (processes and threads).
	PIDs int
	// CPU caps the tree's CPU time, in cores (1.5: one and a half CPUs).
	CPU float64
	// MaxIdleMemory puts a running server to sleep early, before its
	// idle timeout, when its tree uses more memory than this while no
	// request is in flight (checked every few seconds; not within its
	// start grace period).
	MaxIdleMemory uint64
}

// Kernel reports whether l sets a limit the kernel enforces (Memory, PIDs
// or CPU); l may be nil.
func (l *Limits) Kernel() bool { return l != nil && (l.Memory > 0 || l.PIDs > 0 || l.CPU > 0) }

// kernelLimits are the kernel-enforced part of l, for comparisons.
func kernelLimits(l *Limits) [3]any {
	if l == nil {
		return [3]any{uint64(0), 0, 0.0}
	}
	return [3]any{l.Memory, l.PIDs, l.CPU}
}

func maxIdleMemory(l *Limits) uint64 {
	if l == nil {
		return 0
	}
	return l.MaxIdleMemory
}

// Bounds of the limits.
const (
	minMemoryLimit = 1 << 20
	maxPIDsLimit   = 4 << 20 // the kernel's PID_MAX_LIMIT
	minCPULimit    = 0.01    // the kernel's smallest CFS quota, 1 ms per 100 ms period
	maxCPULimit    = 4096
)

// unlimited is the word that sets no limit, overriding a default.
const unlimited = "unlimited"

// sizeHint ends every message about a malformed size.
const sizeHint = `(use e.g. "512MiB", "1.5GiB", "300MB" or a number of bytes; "unlimited" for none)`

// sizeUnits are the units of a size, by their lower-case spelling.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

var sizeRE = regexp.MustCompile(`^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$`)

// sizeText is v as the file has it, for messages.
func sizeText(v *node) string {
	if v.kind == kindString {
		return strconv.Quote(v.str)
	}
	return v.num.String()
}

// size parses a size in bytes: a whole number of bytes, or a string with
// a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, case aside; a plain
// number string is bytes). "unlimited" is 0 when allowed; null is
// absent. Anything else, 0 or a size out of range, is an error.
func (p *parser) size(v *node, at string, allowUnlimited bool) *uint64 {
	var f float64
	switch v.kind {
	case kindNull:
		return nil
	case kindNumber:
		n, err := strconv.ParseUint(v.num.String(), 10, 64)
		if err != nil {
			p.errorf(at, "%s is not a whole, positive number of bytes %s", v.num, sizeHint)
			return nil
		}
		f = float64(n)
	case kindString:
		if allowUnlimited && strings.EqualFold(strings.TrimSpace(v.str), unlimited) {
			var zero uint64
			return &zero
		}
		m := sizeRE.FindStringSubmatch(v.str)
		unit, ok := 0.0, false
		if m != nil {
			unit, ok = sizeUnits[strings.ToLower(m[2])]
		}
		if !ok {
			p.errorf(at, "%s is not a size %s", strconv.Quote(v.str), sizeHint)
			return nil
		}
		n, _ := strconv.ParseFloat(m[1], 64)
		f = math.Round(n * unit)
	default:
		p.errorf(at, "must be a size, not %s %s", v.kind, sizeHint)
		return nil
	}
	switch {
	case f < 1:
		p.errorf(at, "%s is not a positive size %s", sizeText(v), sizeHint)
		return nil
	case f > math.MaxInt64/2:
		p.errorf(at, "%s is out of range", sizeText(v))
		return nil
	}
	n := uint64(f)
	return &n
}

// pidsLimit parses a number of tasks, 1 or more, or "unlimited" (0).
func (p *parser) pidsLimit(v *node, at string) *int {
	if v.kind == kindString && strings.EqualFold(strings.TrimSpace(v.str), unlimited) {
		var zero int
		return &zero
	}
	n := p.integer(v, at)
	switch {
	case n == nil:
		return nil
	case *n < 1:
		p.errorf(at, "%d is not a positive number of tasks (processes and threads)", *n)
		return nil
	case *n > maxPIDsLimit:
		p.errorf(at, "%d is above the kernel's largest pids limit (%d)", *n, maxPIDsLimit)
		return nil
	}
	return n
}

// cpuLimit parses a number of cores, more than 0, or "unlimited" (0).
func (p *parser) cpuLimit(v *node, at string) *float64 {
	if v.kind == kindString && strings.EqualFold(strings.TrimSpace(v.str), unlimited) {
		var zero float64
		return &zero
	}
	f := p.number(v, at)
	switch {
	case f == nil:
		return nil
	case *f <= 0 || math.IsNaN(*f):
		p.errorf(at, "%v is not a positive number of CPUs (cores, e.g. 0.5 or 1.5)", *f)
		return nil
	case *f < minCPULimit:
		p.errorf(at, "%v is below %v CPUs, the kernel's smallest quota (1 ms per 100 ms)", *f, minCPULimit)
		return nil
	case *f > maxCPULimit:
		p.errorf(at, "%v is above %d CPUs", *f, maxCPULimit)
		return nil
	}
	return f
}
