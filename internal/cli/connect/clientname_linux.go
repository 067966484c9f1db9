package connect

import (
	"os"
	"strconv"
	"strings"
)

// clientName is the name of the program that started this process (its
// parent's comm), or "".
func clientName() string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(os.Getppid()) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
