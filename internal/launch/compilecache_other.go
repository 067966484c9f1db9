//go:build !linux && !darwin

package launch

import (
	"io/fs"
	"time"
)

// accessTime is info's modification time: the access time is not read
// on this platform.
func accessTime(info fs.FileInfo) time.Time { return info.ModTime() }
