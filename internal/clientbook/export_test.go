package clientbook

// HasTable reports whether b holds a table for s.
func (b *Book) HasTable(s Server) bool {
	_, ok := b.tables.Load(s)
	return ok
}
