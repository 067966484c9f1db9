package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropExecutablePages unmaps this process's read-only mappings of its own
// executable (code, read-only data): the pages stay in the page cache,
// shared with every other mcpvisor process, and come back one by one as
// they are used. A long-running process that uses little of the binary —
// connect's relay — keeps only what it runs; the rest, touched once by
// start-up (package initialisation, the command line) and mapped in
// 64 KiB chunks by the kernel's fault-around, no longer counts in its
// RSS. Writable mappings are left alone (dropping their written pages
// would lose them). Best effort: it does nothing where /proc or the
// executable cannot be read.
func dropExecutablePages() {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-009c1000 r-xp 00000000 fe:00 9978934   /path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe || strings.Contains(fields[1], "w") {
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
		// The raw call: the range is no Go slice.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED)
	}
}
