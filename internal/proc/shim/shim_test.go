package shim

import (
	"syscall"
	"testing"
)

func TestParseStatus(t *testing.T) {
	cases := []struct {
		in   string
		code int
		sig  syscall.Signal
		ok   bool
	}{
		{"exit 0\n", 0, 0, true},
		{"exit 3", 3, 0, true},
		{"signal 9\n", -1, syscall.SIGKILL, true},
		{"", 0, 0, false},
		{"boom 1", 0, 0, false},
	}
	for _, c := range cases {
		code, sig, ok := ParseStatus(c.in)
		if code != c.code || sig != c.sig || ok != c.ok {
			t.Errorf("ParseStatus(%q) = %d,%v,%v", c.in, code, sig, ok)
		}
	}
}
