package testserver

import (
	"fmt"
	"log"
	"os"
	"time"
)

// flockRetry is how often -flock tries again for a lock another process
// holds.
const flockRetry = 50 * time.Millisecond

// takeFlock takes the exclusive lock of -flock on path, waiting as long as
// another process holds it (one line in path.failures says so), and
// records it in path.log once held. The returned file holds the lock:
// closing it, or the process's exit, releases it.
func takeFlock(path string, logger *log.Logger) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	err = flockExclusive(f)
	if flockHeld(err) {
		logger.Printf("-flock %s: held by another process; waiting for it", path)
		if err := appendLine(path+".failures", fmt.Sprintf("flock failed pid=%d time=%s err=%v", os.Getpid(), flockNow(), err)); err != nil {
			f.Close()
			return nil, err
		}
		tick := time.NewTicker(flockRetry)
		for flockHeld(err) {
			<-tick.C
			err = flockExclusive(f)
		}
		tick.Stop()
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := appendLine(path+".log", fmt.Sprintf("locked pid=%d time=%s", os.Getpid(), flockNow())); err != nil {
		f.Close()
		return nil, err
	}
	logger.Printf("-flock %s: locked", path)
	return f, nil
}

func flockNow() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// appendLine appends line and a newline to the file at path, creating it.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
