package gateway

// Open reports the number of sessions open under l (or being opened): a
// daemon that exits when unused counts them as clients.
func (l *SessionLimit) Open() int { return int(l.open.Load()) }

// TryAcquire takes a session slot for a session served by another front
// (the daemon's socket, one session per connection), under the same
// bound as the HTTP sessions: false if all are taken. A slot taken is
// given back by Release.
func (l *SessionLimit) TryAcquire() bool { return l.take() }

// Release gives back a slot TryAcquire took.
func (l *SessionLimit) Release() { l.give() }
