package catalog

// Spill puts what the server keeps in memory of its lists and definitions
// into the store, read back when needed: the fleet calls it when the
// server goes dormant. Only what is on disk as it is in memory leaves
// (spillLists, spillDefs). Without a store it does nothing.
func (c *Catalog) Spill() {
	c.spillLists()
	c.spillDefs()
}
