package store

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseMapped tells the kernel that the file mapping that starts at
// addr is not needed now (MADV_DONTNEED): its pages leave the resident
// set, and a later access faults them in again from the page cache, the
// file's content unchanged (the mapping is shared and read-only). The
// mapping's length is read from /proc/self/maps.
func releaseMapped(addr uintptr) error {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return err
	}
	defer f.Close()
	prefix := strconv.FormatUint(uint64(addr), 16) + "-"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rng, _, _ := strings.Cut(sc.Text(), " ")
		if !strings.HasPrefix(rng, prefix) {
			continue
		}
		end, err := strconv.ParseUint(rng[len(prefix):], 16, 64)
		if err != nil || uintptr(end) <= addr {
			return fmt.Errorf("store: unreadable mapping %q", rng)
		}
		_, _, e := unix.Syscall(unix.SYS_MADVISE, addr, uintptr(end)-addr, unix.MADV_DONTNEED)
		if e != 0 {
			return e
		}
		return nil
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("store: the state file's mapping at %#x is not in /proc/self/maps", addr)
}
