//go:build !linux && !darwin

package watchdog

import "errors"

// watchParent is unsupported here: the watchdog polls the parent pid every
// Config.PollInterval instead. (On Windows a dead parent's pid does not
// change, so orphaning is not detected there at all; the idle rule still
// works.)
func watchParent(pid int) (*parentWatch, error) {
	return nil, errors.ErrUnsupported
}
