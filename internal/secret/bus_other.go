//go:build !linux

package secret

// keyringPossible: the keyring of macOS (and Windows) needs no bus; the
// probe decides.
func keyringPossible() error { return nil }
