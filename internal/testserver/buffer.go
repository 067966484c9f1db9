package testserver

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use: an io.Writer (a
// logger's, a process's stderr) whose contents can be read while it is
// written to. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
