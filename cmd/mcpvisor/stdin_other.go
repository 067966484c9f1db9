//go:build !unix

package main

import "os"

func interruptibleStdin() (*os.File, func()) { return os.Stdin, func() {} }

func interruptibleStdout() (*os.File, func()) { return os.Stdout, func() {} }
