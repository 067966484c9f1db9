package proc

import "strconv"

// FormatMemory writes a memory figure as every view of mcpvisor writes it
// — ps, inspect and the dashboard (assets/format.js, formatBytes, tested
// against this) — so that they agree to the digit: in the largest of B,
// KiB, MiB, GiB, TiB that is at most n, with one decimal below 100 units
// and none from 100 (or in bytes), rounded half up on the exact value; a
// figure that rounds to 1024 of a unit is written as 1.0 of the next.
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
		whole := (n*2 + d) / (2 * d)
		if whole < 1024 || i == len(units)-1 {
			return strconv.FormatUint(whole, 10) + " " + units[i]
		}
		// Rounded up to 1024 of a unit: one of the next.
		i, d = i+1, d<<10
		tenths = (n*20 + d) / (2 * d)
	}
	return strconv.FormatUint(tenths/10, 10) + "." + strconv.FormatUint(tenths%10, 10) + " " + units[i]
}
