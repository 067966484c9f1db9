package gateway

// Open reports the number of sessions open under l (or being opened): a
// daemon that exits when unused counts them as clients.
func (l *SessionLimit) Open() int { return int(l.open.Load()) }
