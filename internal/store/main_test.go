package store

import (
	"bufio"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// holdEnv makes the test binary a second process that opens the store at
// the given path, says "ready" and holds it until its stdin closes.
const holdEnv = "MCPVISOR_STORE_TEST_HOLD"

func TestMain(m *testing.M) {
	if path := os.Getenv(holdEnv); path != "" {
		os.Exit(hold(path))
	}
	goleak.VerifyTestMain(m)
}

func hold(path string) int {
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	if err := s.Close(); err != nil {
		return 1
	}
	return 0
}
