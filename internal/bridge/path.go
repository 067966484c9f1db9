package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// SocketName is the socket's name in the state directory.
const SocketName = "mcpvisor.sock"

// SocketPath is where the daemon of stateDir listens: stateDir/mcpvisor.sock
// when that path fits the platform's limit on a socket path (sun_path: 108
// bytes on Linux, 104 on macOS, the terminating NUL included), else a short
// path private to this user and named after stateDir, so that every daemon
// and connect of one state directory finds the same one: under
// $XDG_RUNTIME_DIR (a directory of the user's own) if set, else in
// os.TempDir()/mcpvisor-UID, a directory made 0700 and checked to be the
// user's. fallback reports that the short path was taken (say so: it is
// not where the user looks). stateDir is made absolute first.
func SocketPath(stateDir string) (path string, fallback bool, err error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return "", false, err
	}
	path = filepath.Join(abs, SocketName)
	if fits(path) {
		return path, false, nil
	}
	sum := sha256.Sum256([]byte(abs))
	name := "mcpvisor-" + hex.EncodeToString(sum[:6]) + ".sock"
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		if p := filepath.Join(d, name); fits(p) {
			return p, true, nil
		}
	}
	dir, err := UserTempDir()
	if err != nil {
		return "", false, err
	}
	p := filepath.Join(dir, name)
	if !fits(p) {
		return "", false, fmt.Errorf("socket path %s is longer than this platform allows (%d bytes); pass a shorter --socket", path, maxSocketPath)
	}
	return p, true, nil
}

// fits reports whether path can name a unix socket here.
func fits(path string) bool { return len(path) <= maxSocketPath }

// UserTempDir is this user's directory under the system temp dir,
// os.TempDir()/mcpvisor-UID, made (mode 0700) if it is missing and checked
// to be out of other users' reach (on unix: a directory of this user's,
// mode 0700): what goes in a shared temporary directory — the socket when
// the state directory's path is too long, the user's files when there is
// no home — must be.
func UserTempDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "mcpvisor-"+strconv.Itoa(os.Getuid()))
	if err := privateDir(dir); err != nil {
		return "", err
	}
	return dir, nil
}
