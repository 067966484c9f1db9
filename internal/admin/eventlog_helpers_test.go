package admin

// NewEventLog keeps at most max events (default 1000), with no history.
func NewEventLog(max int) *EventLog {
	return RestoreEventLog(max, nil)
}
