//go:build !unix

package stdfile

import "os"

// Stdin is os.Stdin here, whose reads a close does not end.
func Stdin() (*os.File, func()) { return os.Stdin, func() {} }

// Stdout is os.Stdout.
func Stdout() (*os.File, func()) { return os.Stdout, func() {} }
