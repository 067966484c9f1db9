package mempolicy

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropExecutablePages drops this process's pages of its own executable
// that are the file's bytes unchanged (code, read-only data): they stay in
// the page cache, shared with every other mcpvisor process, and come back
// one by one as they are used. A long-running process that uses little of
// the binary — connect's relay — keeps only what it runs; the rest,
// touched once by start-up (package initialisation, the command line) and
// mapped in 64 KiB chunks by the kernel's fault-around, no longer counts in
// its RSS. A mapping that is writable, or holds a page written since it was
// mapped (a position-independent build's relocated read-only data), is
// left alone: dropping it would lose what was written. Best effort: it does
// nothing where /proc or the executable cannot be read.
func dropExecutablePages() {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return
	}
	defer f.Close()
	for _, s := range cleanMappings(f, exe) {
		// The raw call: the range is no Go slice.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(s.start), uintptr(s.end-s.start), unix.MADV_DONTNEED)
	}
}

// span is an address range [start, end).
type span struct{ start, end uint64 }

// cleanMappings reads /proc/PID/smaps and returns the mappings of file
// that are not writable and hold no anonymous (written, copied) page, in
// memory or swapped out.
func cleanMappings(smaps io.Reader, file string) []span {
	var out []span
	var cur span
	candidate := false
	flush := func() {
		if candidate {
			out = append(out, cur)
		}
		candidate = false
	}
	sc := bufio.NewScanner(smaps)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if rng, ok := strings.CutSuffix(fields[0], ":"); ok {
			// "Anonymous:   4 kB" and the like, about the current mapping:
			// a written page, in memory or swapped out (Swap: a page of a
			// file mapping is swapped only once written), is not the
			// file's.
			if (rng == "Anonymous" || rng == "Swap") && len(fields) > 1 && fields[1] != "0" {
				candidate = false
			}
			continue
		}
		// A mapping's header: 00400000-009c1000 r-xp 00000000 fe:00 9978934   /path
		flush()
		if len(fields) < 6 || fields[5] != file || strings.Contains(fields[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		cur, candidate = span{start, end}, true
	}
	flush()
	return out
}
