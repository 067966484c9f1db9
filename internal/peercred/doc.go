// Package peercred reads who is at the other end of a unix socket from
// the kernel: connect checks that the daemon it reaches is its own
// user's, and the daemon's socket takes the peer's uid as the identity
// of the session it serves.
package peercred
