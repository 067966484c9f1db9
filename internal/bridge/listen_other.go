//go:build !unix

package bridge

import (
	"context"
	"errors"
	"net"
	"os"
)

var errNoUnix = errors.New("bridge: the mcpvisor socket needs a unix system")

// Listener: see listen_unix.go.
type Listener struct{ net.Listener }

func Listen(string) (*Listener, error)               { return nil, errNoUnix }
func (l *Listener) Path() string                     { return "" }
func TryLock(string) (*os.File, error)               { return nil, errNoUnix }
func Lock(context.Context, string) (*os.File, error) { return nil, errNoUnix }
