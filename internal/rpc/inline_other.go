//go:build !unix

package rpc

import "syscall"

// Elsewhere no write is inline: the writer goroutine writes every line.
func nonblocking(syscall.RawConn) bool { return false }

func writeFD(uintptr, []byte) (int, error) { return 0, syscall.EINVAL }
