package proc

import "strconv"

// FormatMemory writes a memory figure as every view of mcpvisor writes it
// — ps, inspect and the dashboard (assets/format.js, formatBytes, tested
// against this) — so that they agree to the digit: in the largest of B,
// KiB, MiB, GiB, TiB that is at most n, with one decimal below 100 units
// and none from 100 (or in bytes), rounded half up on the exact value.
func FormatMemory(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i, d := 0, uint64(1)
	for i < len(units)-1 && n >= d<<10 {
		i, d = i+1, d<<10
	}
	if i == 0 {
		return strconv.FormatUint(n, 10) + " B"
	}
	tenths := (n*20 + d) / (2 * d) // n/d in tenths, rounded half up
	if tenths >= 1000 {
		return strconv.FormatUint((n*2+d)/(2*d), 10) + " " + units[i]
	}
	return strconv.FormatUint(tenths/10, 10) + "." + strconv.FormatUint(tenths%10, 10) + " " + units[i]
}
