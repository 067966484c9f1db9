//go:build !unix

package store

import "os"

// Elsewhere only bbolt's own lock on the state file guards it.
func tryLock(*os.File) (bool, error) { return true, nil }

func unlock(*os.File) error { return nil }
